/* One thread per GPU: it starts the GPU's ktune-worker (whose hello may take seconds, so never on
 * the loop) and its NVRTC compile pool, then runs one job at a time with srch_tune. Progress and
 * results go back to the loop through a mutex-protected queue and uv_async_send; the loop thread
 * alone touches jobs, the journal and clients. A progress event still waiting in the queue is
 * overwritten by the next one, so a fast search cannot flood the loop. */
#include "kd.h"

#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NVIDIA_GPUS_DIR "/proc/driver/nvidia/gpus"
#define HELLO_TIMEOUT_S 60.0

typedef enum kd_ev_kind { KD_EV_UP, KD_EV_DOWN, KD_EV_PROGRESS, KD_EV_FINISHED, KD_EV_EXITED } kd_ev_kind;

struct kd_event {
    kd_ev_kind kind;
    int slot;
    uint64_t job;
    int rc;
    char msg[512];
    char phase[16];
    srch_tune_progress prog;
    srch_tune_result *res; /* FINISHED: malloc'd (NULL when the run never started) */
    cache_gpu fp;          /* UP */
    char arch[16];
    int restarts;
    bool queued; /* PROGRESS: still in the queue (guarded by the queue lock) */
    kd_event *next;
};

static const char *const state_names[] = {"starting", "idle", "busy", "down"};

const char *kd_gpu_state_name(kd_gpu_state s)
{
    return state_names[s];
}

/* ---- the event queue ---- */

/* Any thread. Takes ev (dropped when the queue is closed: the daemon is exiting). */
static void post(kd_daemon *d, kd_event *ev)
{
    kd_events *q = &d->ev;
    pthread_mutex_lock(&q->lock);
    if (q->closed) {
        pthread_mutex_unlock(&q->lock);
        free(ev->res);
        free(ev);
        return;
    }
    ev->next = NULL;
    ev->queued = true;
    if (q->tail)
        q->tail->next = ev;
    else
        q->head = ev;
    q->tail = ev;
    uv_async_send(&q->async);
    pthread_mutex_unlock(&q->lock);
}

static void handle(kd_daemon *d, kd_event *ev);

static void on_async(uv_async_t *a)
{
    kd_daemon *d = a->data;
    kd_events *q = &d->ev;
    /* Detach the queue. A progress event belongs to its GPU thread, which reuses it and frees
     * it once it is out of the queue, so it is copied here, under the lock. */
    kd_event *list = NULL, **tail = &list;
    pthread_mutex_lock(&q->lock);
    for (kd_event *e = q->head, *next; e; e = next) {
        next = e->next;
        e->queued = false;
        kd_event *mine = e;
        if (e->kind == KD_EV_PROGRESS && (mine = malloc(sizeof(*mine))))
            *mine = *e;
        if (mine) {
            mine->next = NULL;
            *tail = mine;
            tail = &mine->next;
        }
    }
    q->head = q->tail = NULL;
    pthread_mutex_unlock(&q->lock);
    while (list) {
        kd_event *next = list->next;
        handle(d, list);
        free(list->res);
        free(list);
        list = next;
    }
}

int kd_events_init(kd_daemon *d, kt_err *err)
{
    kd_events *q = &d->ev;
    pthread_mutex_init(&q->lock, NULL);
    q->head = q->tail = NULL;
    q->closed = false;
    int rc = uv_async_init(&d->loop, &q->async, on_async);
    if (rc < 0)
        return kt_err_set(err, -EIO, "uv_async_init: %s", uv_strerror(rc));
    q->async.data = d;
    return 0;
}

void kd_events_close(kd_daemon *d)
{
    kd_events *q = &d->ev;
    pthread_mutex_lock(&q->lock);
    q->closed = true;
    kd_event *list = q->head;
    q->head = q->tail = NULL;
    for (kd_event *e = list; e; e = e->next)
        e->queued = false;
    pthread_mutex_unlock(&q->lock);
    while (list) {
        kd_event *next = list->next;
        if (list->kind != KD_EV_PROGRESS) {
            free(list->res);
            free(list);
        }
        list = next;
    }
    if (!uv_is_closing((uv_handle_t *)&q->async))
        uv_close((uv_handle_t *)&q->async, NULL);
}

/* ---- the GPU thread ---- */

typedef struct progress_ctx {
    kd_gpu *g;
    uint64_t job;
    kd_event *ev; /* this run's progress event, reused */
} progress_ctx;

static void on_progress(const srch_tune_progress *p, void *ctx)
{
    progress_ctx *pc = ctx;
    kd_events *q = &pc->g->d->ev;
    pthread_mutex_lock(&q->lock);
    kd_event *ev = pc->ev;
    ev->prog = *p;
    ev->prog.phase = NULL;
    snprintf(ev->phase, sizeof(ev->phase), "%s", p->phase ? p->phase : "");
    bool queued = ev->queued;
    pthread_mutex_unlock(&q->lock);
    if (!queued)
        post(pc->g->d, ev);
}

static kd_event *event_new(kd_gpu *g, kd_ev_kind kind)
{
    kd_event *ev = calloc(1, sizeof(*ev));
    if (ev) {
        ev->kind = kind;
        ev->slot = g->slot;
    }
    return ev;
}

/* Runs one job; always posts FINISHED. */
static void run_job(kd_gpu *g, kd_run *run, srch_worker *w, srch_pool *pool)
{
    kd_event *fin = event_new(g, KD_EV_FINISHED);
    kd_event *pev = event_new(g, KD_EV_PROGRESS);
    srch_tune_result *res = malloc(sizeof(*res));
    ops_graph *graph = NULL;
    ops_diag diag = {0};
    kt_err err = {0};
    int rc;
    if (!fin || !pev || !res) {
        rc = kt_err_set(&err, -ENOMEM, "out of memory starting the job");
        goto out;
    }
    pev->job = run->job;
    if ((rc = ops_graph_from_msgpack(run->graph, run->graph_len, &graph, &diag)) < 0 ||
        (rc = ops_graph_validate(graph, &diag)) < 0) {
        rc = kt_err_set(&err, rc, "the journal's graph: %s", diag.msg);
        goto out;
    }
    ops_binding b[CACHE_MAX_SHAPES];
    for (int i = 0; i < run->n_shapes; i++)
        b[i] = (ops_binding){run->shapes[i].name, run->shapes[i].value};
    progress_ctx pc = {g, run->job, pev};
    srch_tune_opts o = {
        .precision = run->precision,
        .tolerance = run->tolerance,
        .budget_s = run->budget_s,
        .trials_since_ms = run->trials_since_ms,
        .gpu = g->index,
        .worker = w,
        .pool = pool,
        .cancel = &g->cancel,
        .progress = on_progress,
        .progress_ctx = &pc,
    };
    rc = srch_tune(graph, b, run->n_shapes, g->d->cache, &o, res, &err);
out:
    ops_graph_free(graph);
    if (!fin) {
        /* cannot even report: the loop's copy of the job stays running until shutdown */
        kt_log_err(KD_LOG_GPU, "GPU %d: out of memory reporting job %" PRIu64, g->index, run->job);
        free(res);
    } else {
        fin->job = run->job;
        fin->rc = rc;
        fin->res = res;
        fin->restarts = w ? srch_worker_restarts(w) : 0;
        snprintf(fin->msg, sizeof(fin->msg), "%s", rc < 0 ? err.msg : "");
    }
    /* the progress event may still sit in the queue: the loop frees nothing of it, so wait
     * until it has been taken before freeing it */
    if (pev) {
        kd_events *q = &g->d->ev;
        for (;;) {
            pthread_mutex_lock(&q->lock);
            bool queued = pev->queued && !q->closed;
            pthread_mutex_unlock(&q->lock);
            if (!queued)
                break;
            usleep(1000);
        }
        free(pev);
    }
    if (fin)
        post(g->d, fin);
}

static void post_down(kd_gpu *g, const char *msg)
{
    kd_event *ev = event_new(g, KD_EV_DOWN);
    if (!ev)
        return;
    snprintf(ev->msg, sizeof(ev->msg), "%.*s", (int)sizeof(ev->msg) - 1, msg);
    post(g->d, ev);
}

static void gpu_thread(void *arg)
{
    kd_gpu *g = arg;
    kd_daemon *d = g->d;
    srch_worker *w = NULL;
    srch_pool *pool = NULL;
    ops_device dev;
    cache_gpu fp;
    kt_err err = {0};
    srch_worker_opts wo = {
        .exe = d->cfg->worker[0] ? d->cfg->worker : NULL,
        .gpu = g->index,
        .hello_timeout_s = HELLO_TIMEOUT_S,
    };
    int rc = srch_worker_start(&wo, &w, &dev, &fp, &err);
    if (rc < 0) {
        post_down(g, err.msg);
        goto wait_quit;
    }
    char store[KD_PATH_MAX + 16];
    snprintf(store, sizeof(store), "%s/cubins", d->cfg->cache);
    srch_pool_opts po = {.arch = dev.arch, .jobs = g->compile_jobs, .timeout_s = 60,
                         .store_dir = store};
    if ((rc = srch_pool_new(&po, &pool, &err)) < 0) {
        char msg[600];
        snprintf(msg, sizeof(msg), "compile pool: %s", err.msg);
        srch_worker_stop(w);
        w = NULL;
        post_down(g, msg);
        goto wait_quit;
    }
    pthread_mutex_lock(&g->lock);
    g->worker = w;
    pthread_mutex_unlock(&g->lock);
    kd_event *up = event_new(g, KD_EV_UP);
    if (up) {
        up->fp = fp;
        snprintf(up->arch, sizeof(up->arch), "%s", dev.arch);
        post(d, up);
    }
    for (;;) {
        pthread_mutex_lock(&g->lock);
        while (!g->run && !g->quit)
            pthread_cond_wait(&g->cond, &g->lock);
        kd_run *run = g->run;
        g->run = NULL;
        bool quit = g->quit && !run;
        pthread_mutex_unlock(&g->lock);
        if (quit)
            break;
        run_job(g, run, w, pool);
        free(run->graph);
        free(run);
    }
    pthread_mutex_lock(&g->lock);
    g->worker = NULL;
    pthread_mutex_unlock(&g->lock);
    srch_worker_stop(w);
    srch_pool_free(pool);
    goto exited;
wait_quit:
    pthread_mutex_lock(&g->lock);
    while (!g->quit) {
        if (g->run) { /* cannot happen: a down GPU gets no job; refuse it all the same */
            kd_event *fin = event_new(g, KD_EV_FINISHED);
            if (fin) {
                fin->job = g->run->job;
                fin->rc = -ENODEV;
                snprintf(fin->msg, sizeof(fin->msg), "GPU %d is down", g->index);
                post(d, fin);
            }
            free(g->run->graph);
            free(g->run);
            g->run = NULL;
        }
        pthread_cond_wait(&g->cond, &g->lock);
    }
    pthread_mutex_unlock(&g->lock);
exited:;
    kd_event *ex = event_new(g, KD_EV_EXITED);
    if (ex)
        post(d, ex);
}

/* ---- the loop side ---- */

static void handle(kd_daemon *d, kd_event *ev)
{
    kd_gpu *g = &d->gpus[ev->slot];
    switch (ev->kind) {
    case KD_EV_UP:
        g->state = KD_GPU_IDLE;
        g->fp = ev->fp;
        kd_memo_clear(d->memo); /* lookups of this GPU are keyed by its index, not fingerprint */
        snprintf(g->arch, sizeof(g->arch), "%s", ev->arch);
        g->error[0] = '\0';
        kt_log_info(KD_LOG_GPU, "GPU %d up: %s (sm %d.%d, %d SMs, %s), %d compile processes",
                    g->index, g->fp.name, g->fp.sm_major, g->fp.sm_minor, g->fp.sm_count,
                    g->arch, g->compile_jobs);
        kd_jobs_schedule(d);
        break;
    case KD_EV_DOWN:
        g->state = KD_GPU_DOWN;
        snprintf(g->error, sizeof(g->error), "%.*s", (int)sizeof(g->error) - 1, ev->msg);
        kt_log_err(KD_LOG_GPU, "GPU %d down: %s", g->index, ev->msg);
        if (kd_gpus_usable(d) == 0) {
            bool starting = false;
            for (int s = 0; s < d->n_gpus; s++)
                starting |= d->gpus[s].state == KD_GPU_STARTING;
            if (!starting)
                snprintf(d->gpu_note, sizeof(d->gpu_note), "no GPU: %.*s", (int)sizeof(d->gpu_note) - 9,
                         ev->msg);
        }
        break;
    case KD_EV_PROGRESS:
        kd_jobs_on_progress(d, ev->slot, ev->job, &ev->prog, ev->phase);
        return;
    case KD_EV_FINISHED:
        g->job = 0;
        g->restarts = ev->restarts;
        if (ev->rc == -ENODEV) {
            g->state = KD_GPU_DOWN;
            snprintf(g->error, sizeof(g->error), "%.*s", (int)sizeof(g->error) - 1, ev->msg);
            kt_log_err(KD_LOG_GPU, "GPU %d down: %s", g->index, ev->msg);
        } else if (g->state == KD_GPU_BUSY) {
            g->state = KD_GPU_IDLE;
        }
        kd_jobs_on_finish(d, ev->slot, ev->job, ev->rc, ev->msg, ev->res);
        break;
    case KD_EV_EXITED:
        g->thread_exited = true;
        kd_daemon_check_stopped(d);
        break;
    }
    kd_daemon_changed(d);
}

int kd_gpus_start(kd_daemon *d, kt_err *err)
{
    int idx[KD_MAX_GPUS], n;
    if (d->cfg->gpus_auto) {
        n = kd_auto_gpus(NVIDIA_GPUS_DIR, getenv("CUDA_VISIBLE_DEVICES"), idx, KD_MAX_GPUS);
    } else {
        n = d->cfg->n_gpus;
        memcpy(idx, d->cfg->gpus, sizeof(int) * (size_t)n);
    }
    d->gpus = calloc((size_t)n, sizeof(*d->gpus));
    if (!d->gpus)
        return kt_err_set(err, -ENOMEM, "out of memory");
    d->n_gpus = n;
    int jobs = d->cfg->compile_jobs > 0 ? d->cfg->compile_jobs : (int)sysconf(_SC_NPROCESSORS_ONLN);
    for (int s = 0; s < n; s++) {
        kd_gpu *g = &d->gpus[s];
        g->d = d;
        g->slot = s;
        g->index = idx[s];
        g->compile_jobs = jobs / n + (s < jobs % n ? 1 : 0);
        if (g->compile_jobs < 1)
            g->compile_jobs = 1;
        g->state = KD_GPU_STARTING;
        pthread_mutex_init(&g->lock, NULL);
        pthread_cond_init(&g->cond, NULL);
        atomic_init(&g->cancel, false);
    }
    for (int s = 0; s < n; s++) {
        kd_gpu *g = &d->gpus[s];
        int rc = uv_thread_create(&g->thread, gpu_thread, g);
        if (rc < 0) {
            g->state = KD_GPU_DOWN;
            g->thread_exited = true;
            snprintf(g->error, sizeof(g->error), "cannot start a thread: %s", uv_strerror(rc));
            continue;
        }
        g->thread_started = true;
    }
    kt_log_info(KD_LOG_GPU, "starting %d GPU worker%s", n, n == 1 ? "" : "s");
    return 0;
}

int kd_gpu_assign(kd_daemon *d, int slot, kd_job *kj, kt_err *err)
{
    kd_gpu *g = &d->gpus[slot];
    kd_run *run = calloc(1, sizeof(*run));
    if (!run || (kj->j.graph_len && !(run->graph = malloc(kj->j.graph_len)))) {
        free(run);
        return kt_err_set(err, -ENOMEM, "out of memory");
    }
    run->job = kj->j.id;
    if (kj->j.graph_len)
        memcpy(run->graph, kj->j.graph, kj->j.graph_len);
    run->graph_len = kj->j.graph_len;
    run->n_shapes = kj->j.n_shapes;
    memcpy(run->shapes, kj->j.shapes, sizeof(cache_bound) * (size_t)kj->j.n_shapes);
    run->precision = kj->j.precision;
    run->tolerance = kj->j.tolerance;
    run->trials_since_ms = kj->j.trials_since_ms;
    /* a resumed job gets what is left of its budget, and a few seconds at least */
    double left = kj->j.budget_s - kj->j.elapsed_s;
    run->budget_s = left > KD_MIN_RESUME_S ? left : KD_MIN_RESUME_S;
    pthread_mutex_lock(&g->lock);
    atomic_store(&g->cancel, false);
    g->run = run;
    pthread_cond_signal(&g->cond);
    pthread_mutex_unlock(&g->lock);
    g->state = KD_GPU_BUSY;
    g->job = kj->j.id;
    return 0;
}

void kd_gpu_cancel(kd_daemon *d, int slot)
{
    atomic_store(&d->gpus[slot].cancel, true);
}

void kd_gpus_quit(kd_daemon *d)
{
    for (int s = 0; s < d->n_gpus; s++) {
        kd_gpu *g = &d->gpus[s];
        pthread_mutex_lock(&g->lock);
        g->quit = true;
        pthread_cond_signal(&g->cond);
        pthread_mutex_unlock(&g->lock);
    }
}

void kd_gpus_abort(kd_daemon *d)
{
    for (int s = 0; s < d->n_gpus; s++) {
        kd_gpu *g = &d->gpus[s];
        if (g->state != KD_GPU_BUSY)
            continue;
        pthread_mutex_lock(&g->lock);
        if (g->worker) {
            kt_log_warn(KD_LOG_GPU, "GPU %d: job %" PRIu64 " still busy; aborting its candidate in "
                                    "flight",
                        g->index, g->job);
            srch_worker_abort(g->worker);
        }
        pthread_mutex_unlock(&g->lock);
    }
}

bool kd_gpus_exited(const kd_daemon *d)
{
    for (int s = 0; s < d->n_gpus; s++)
        if (d->gpus[s].thread_started && !d->gpus[s].thread_exited)
            return false;
    return true;
}

void kd_gpus_free(kd_daemon *d)
{
    bool stuck = false;
    for (int s = 0; s < d->n_gpus; s++) {
        kd_gpu *g = &d->gpus[s];
        if (g->thread_started && g->thread_exited)
            uv_thread_join(&g->thread);
        stuck |= g->thread_started && !g->thread_exited;
    }
    if (stuck) /* a thread still runs and may read its kd_gpu: leave it to the process exit */
        return;
    for (int s = 0; s < d->n_gpus; s++) {
        pthread_mutex_destroy(&d->gpus[s].lock);
        pthread_cond_destroy(&d->gpus[s].cond);
    }
    free(d->gpus);
    d->gpus = NULL;
    d->n_gpus = 0;
}

int kd_gpus_usable(const kd_daemon *d)
{
    int n = 0;
    for (int s = 0; s < d->n_gpus; s++)
        n += d->gpus[s].state == KD_GPU_IDLE || d->gpus[s].state == KD_GPU_BUSY;
    return n;
}

int kd_gpu_slot(const kd_daemon *d, int index)
{
    for (int s = 0; s < d->n_gpus; s++)
        if (d->gpus[s].index == index)
            return s;
    return -1;
}
