/* Data sets of the GPU worker (the worker's modules: search/worker_internal.h).
 *
 * Candidates of one group share inputs: a data set is keyed by SHA-256 over the
 * request's subgraph, bindings, seed0 and seeds (and "full" with its bindings, when present). It
 * holds the typed inputs of every seed (host, generated once, and a device copy per seed that is
 * copied on the device into the one set of input buffers the candidates read), one set of device
 * output buffers, and, once a candidate needs verifying, the fp64 reference outputs of every seed
 * (device) with the sum of squares and count of the values that are finite and representable in
 * the output's dtype. The reference program (worker_reference.c) is compiled with NVRTC in this
 * process only when a data set first needs its references; its outputs, not its module, are what is
 * cached. At most WK_MAX_DATA data sets that no loaded candidate uses are kept (least recently used
 * goes).
 *
 * Inputs (docs/evaluation.md): seed s of a data set is seed0 + s. Even seeds draw uniform values in
 * [-1, 1]; odd seeds draw mixed magnitudes, u * 2^e with e uniform in [-6, 3], so each tensor
 * spans about three decades (never all zeros: u is continuous). Values are rounded to the
 * tensor's dtype (ops_dtype_store) and the reference reads exactly the stored values.
 *
 * Inputs from the full graph. When the request carries "full" (the whole canonical bound graph
 * the subgraph was cut from; it then also enters the data set key), the draw above is made for
 * full's graph inputs instead, and each input of the subgraph takes the tensor of full with the
 * same name: a graph input of full its drawn values, an intermediate the value full's fp64
 * reference (run once per seed, the intermediates wanted made outputs of a copy of full)
 * computes from them, rounded to its dtype on the host. A group such as [sum, div] of a
 * softmax then sees exp outputs, not values in [-1, 1] whose row sums may be near zero.
 * Everything after that is as without "full": the subgraph's own reference is computed from
 * exactly the stored inputs. The full reference is not cached across data sets (one run per
 * data set creation, i.e. once per group). */
#include "worker_internal.h"

#include "ops/msgpack_util.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- inputs ---- */

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double unit_uniform(uint64_t *s) /* [-1, 1) */
{
    return (double)(splitmix64(s) >> 11) / 4503599627370496.0 - 1.0;
}

/* ---- data sets ---- */

void srch_wk_data_free(wk *w, wk_data *D)
{
    if (!D)
        return;
    for (int i = 0; i < D->n_in; i++)
        if (D->d_in[i])
            w->cu.p_cuMemFree(D->d_in[i]);
    for (int j = 0; j < D->n_out; j++) {
        if (D->d_out[j])
            w->cu.p_cuMemFree(D->d_out[j]);
        if (D->d_prev[j])
            w->cu.p_cuMemFree(D->d_prev[j]);
    }
    if (D->h_in)
        for (int k = 0; k < D->seeds * D->n_in; k++)
            free(D->h_in[k]);
    if (D->d_seed_in)
        for (int k = 0; k < D->seeds * D->n_in; k++)
            if (D->d_seed_in[k])
                w->cu.p_cuMemFree(D->d_seed_in[k]);
    if (D->d_ref)
        for (int k = 0; k < D->seeds * D->n_out; k++)
            if (D->d_ref[k])
                w->cu.p_cuMemFree(D->d_ref[k]);
    free(D->h_in);
    free(D->d_seed_in);
    free(D->d_ref);
    free(D->ref_sumsq);
    free(D->ref_cmp);
    ops_graph_free(D->g);
    free(D);
}

static int data_key(const srch_eval_req *req, int seeds, uint8_t key[32], kt_err *err)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    int rc = ops_graph_pack(&pk, req->sub);
    if (rc == 0) {
        msgpack_pack_array(&pk, (size_t)req->n_bindings);
        for (int i = 0; i < req->n_bindings; i++) {
            kt_mp_pack_str(&pk, req->bindings[i].name);
            msgpack_pack_int64(&pk, req->bindings[i].value);
        }
        msgpack_pack_uint64(&pk, req->seed0);
        msgpack_pack_int(&pk, seeds);
        /* Without "full" the key is what it always was. */
        if (req->full && (rc = ops_graph_pack(&pk, req->full)) == 0) {
            msgpack_pack_array(&pk, (size_t)req->n_full_bindings);
            for (int i = 0; i < req->n_full_bindings; i++) {
                kt_mp_pack_str(&pk, req->full_bindings[i].name);
                msgpack_pack_int64(&pk, req->full_bindings[i].value);
            }
        }
        ops_sha256(sb.data, sb.size, key);
    }
    msgpack_sbuffer_destroy(&sb);
    return rc < 0 ? kt_err_set(err, rc, "cannot encode the subgraph") : 0;
}

/* srch_random_input (worker.h). Generated in chunks of RANDOM_CHUNK
 * elements, each from its own stream (chunk 0's is the tensor's stream, chunk c's that stream
 * mixed with c), so several threads fill one tensor and the values do not depend on how many
 * run: host generation was most of a data set's cost on 64-128 MiB tensors. */
#define RANDOM_CHUNK   (1 << 20)
#define RANDOM_THREADS 16

typedef struct random_job {
    const ops_tensor *t;
    uint8_t *h;
    uint64_t st0; /* the tensor's stream */
    bool mixed, positive;
    int64_t n, n_chunks;
    int first, step; /* this thread's chunks: first, first + step, ... */
} random_job;

static void random_chunks(const random_job *j)
{
    size_t es = ops_dtype_size(j->t->dtype);
    for (int64_t c = j->first; c < j->n_chunks; c += j->step) {
        uint64_t st = j->st0;
        if (c > 0) {
            uint64_t mix = j->st0 ^ ((uint64_t)c * 0x9E3779B97F4A7C15ull);
            st = splitmix64(&mix);
        }
        int64_t end =
            (c + 1) * (int64_t)RANDOM_CHUNK < j->n ? (c + 1) * (int64_t)RANDOM_CHUNK : j->n;
        for (int64_t k = c * (int64_t)RANDOM_CHUNK; k < end; k++) {
            double v = unit_uniform(&st);
            if (j->mixed)
                v = ldexp(v, (int)(splitmix64(&st) % 10) - 6);
            if (j->positive)
                v = fabs(v);
            ops_dtype_store(j->t->dtype, v, j->h + (size_t)k * es);
        }
    }
}

static void *random_thread(void *arg)
{
    random_chunks(arg);
    return NULL;
}

uint8_t *srch_random_input(const ops_tensor *t, uint64_t seed0, int s, int i, bool positive)
{
    size_t es = ops_dtype_size(t->dtype);
    int64_t n = ops_shape_numel(&t->shape);
    uint8_t *h = malloc(n > 0 ? (size_t)n * es : 1);
    if (!h)
        return NULL;
    random_job base = {.t = t,
                       .h = h,
                       .st0 = (seed0 + (uint64_t)s) * 0xD1B54A32D192ED03ull + (uint64_t)i,
                       .mixed = s % 2 == 1,
                       .positive = positive,
                       .n = n,
                       .n_chunks = n > 0 ? (n + RANDOM_CHUNK - 1) / RANDOM_CHUNK : 0,
                       .first = 0,
                       .step = 1};
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int n_threads = (int)(base.n_chunks < RANDOM_THREADS ? base.n_chunks : RANDOM_THREADS);
    if (cpus > 0 && n_threads > cpus)
        n_threads = (int)cpus;
    pthread_t tid[RANDOM_THREADS];
    random_job jobs[RANDOM_THREADS];
    int started = 0;
    for (int k = 1; k < n_threads; k++) { /* threads 1..started run; a failure stops here */
        jobs[k] = base;
        jobs[k].first = k;
        jobs[k].step = n_threads;
        if (pthread_create(&tid[k], NULL, random_thread, &jobs[k]) != 0)
            break;
        started = k;
    }
    /* Thread k covers the chunks c with c % n_threads == k; this thread takes residue 0 and
     * those of threads that could not be started. */
    for (int r = 0; r < (n_threads > 0 ? n_threads : 1); r++) {
        if (r != 0 && r <= started)
            continue;
        jobs[0] = base;
        jobs[0].first = r;
        jobs[0].step = n_threads > 0 ? n_threads : 1;
        random_chunks(&jobs[0]);
    }
    for (int k = 1; k <= started; k++)
        pthread_join(tid[k], NULL);
    return h;
}

/* Host inputs of every seed, rounded to their dtypes. */
static int data_make_inputs(wk_data *D, kt_err *err)
{
    for (int s = 0; s < D->seeds; s++) {
        for (int i = 0; i < D->n_in; i++) {
            uint8_t *h = srch_random_input(&D->g->tensors[i], D->seed0, s, i,
                                           ops_graph_needs_positive(D->g, i));
            if (!h)
                return kt_err_set(err, -ENOMEM, "out of memory for inputs (%zu bytes)",
                                  D->in_bytes[i]);
            D->h_in[s * D->n_in + i] = h;
        }
    }
    return 0;
}

/* Uploads the typed host values h of tensor t into dst as doubles. */
static int upload_doubles(wk *w, const ops_tensor *t, const uint8_t *h, CUdeviceptr dst,
                          kt_err *err)
{
    int64_t n = ops_shape_numel(&t->shape);
    size_t bytes = (size_t)(n > 0 ? n : 1) * ops_dtype_size(t->dtype);
    CUdeviceptr typed = 0;
    int rc = wk_cu(w, w->cu.p_cuMemAlloc(&typed, bytes), "allocate reference inputs", err);
    if (rc == 0)
        rc = wk_cu(w, w->cu.p_cuMemcpyHtoD(typed, h, bytes), "upload reference inputs", err);
    if (rc == 0)
        rc = srch_wk_cmp_widen(w, t->dtype, typed, dst, n, err);
    if (rc == 0) /* the widening reads typed: done before it is freed */
        rc = wk_cu(w, w->cu.p_cuCtxSynchronize(), "widen reference inputs", err);
    if (typed)
        w->cu.p_cuMemFree(typed);
    return rc;
}

/* The inputs of D (subgraph inputs) from req->full: random values for full's graph inputs
 * (the same generator as data_make_inputs, numbered by full's inputs), full's fp64 reference
 * run once per seed, and each input of the subgraph the tensor of full with its name: a graph
 * input takes the drawn values, an intermediate the reference's, rounded to its dtype
 * (ops_dtype_store). The reference runs only when some input is an intermediate. */
static int data_inputs_from_full(wk *w, wk_data *D, const srch_eval_req *req, kt_err *err)
{
    ops_graph *F = ops_graph_clone(req->full);
    int32_t src[WK_MAX_IO];
    int n_fin = 0, rc = 0;
    bool need_ref = false;
    uint8_t **fh = NULL;
    CUdeviceptr *buf = NULL;
    double *host = NULL;
    wk_ref ref = {0};
    ops_diag d = {0};
    if (!F)
        return kt_err_set(err, -ENOMEM, "out of memory");
    while (n_fin < F->n_tensors && F->tensors[n_fin].producer < 0)
        n_fin++;
    for (int i = 0; i < D->n_in; i++) {
        const ops_tensor *st = &D->g->tensors[i];
        src[i] = ops_graph_find_tensor(F, st->name);
        if (src[i] < 0 || F->tensors[src[i]].dtype != st->dtype ||
            ops_shape_numel(&F->tensors[src[i]].shape) != ops_shape_numel(&st->shape)) {
            rc = kt_err_set(err, -EINVAL, "full graph: no tensor '%s' like the input", st->name);
            goto out;
        }
        if (F->tensors[src[i]].producer >= 0) {
            need_ref = true;
            /* An intermediate becomes an output of the copy, so the reference writes it to a
             * buffer of its own instead of the workspace. */
            if (!F->tensors[src[i]].is_output && (rc = ops_graph_mark_output(F, src[i])) < 0) {
                rc = kt_err_set(err, rc, "out of memory");
                goto out;
            }
        }
    }
    if (need_ref && ((rc = ops_graph_validate(F, &d)) < 0 || ops_graph_first_unbound(F))) {
        rc = kt_err_set(err, rc < 0 ? rc : -EINVAL, "full graph: %s",
                        rc < 0 ? d.msg : "not fully bound");
        goto out;
    }
    fh = calloc((size_t)n_fin + 1, sizeof(*fh));
    buf = calloc((size_t)F->n_tensors + 1, sizeof(*buf));
    if (!fh || !buf) {
        rc = kt_err_set(err, -ENOMEM, "out of memory");
        goto out;
    }
    if (need_ref) {
        if ((rc = srch_wk_ref_load(w, F, &ref, err)) < 0)
            goto out;
        for (int t = 0; t < F->n_tensors; t++) {
            if (F->tensors[t].producer >= 0 && !F->tensors[t].is_output)
                continue;
            int64_t n = ops_shape_numel(&F->tensors[t].shape);
            if ((rc = wk_cu(w, w->cu.p_cuMemAlloc(&buf[t], (size_t)(n > 0 ? n : 1) * 8),
                            "allocate full reference buffers", err)) < 0)
                goto out;
        }
    }
    for (int s = 0; s < D->seeds; s++) {
        for (int k = 0; k < n_fin; k++) {
            free(fh[k]);
            if (!(fh[k] = srch_random_input(&F->tensors[k], D->seed0, s, k,
                                            ops_graph_needs_positive(F, k)))) {
                rc = kt_err_set(err, -ENOMEM, "out of memory for inputs");
                goto out;
            }
            if (need_ref && (rc = upload_doubles(w, &F->tensors[k], fh[k], buf[k], err)) < 0)
                goto out;
        }
        if (need_ref && (rc = srch_wk_ref_launch(w, &ref, buf, F->n_tensors, err)) < 0)
            goto out;
        for (int i = 0; i < D->n_in; i++) {
            const ops_tensor *st = &D->g->tensors[i];
            uint8_t *h = malloc(D->in_bytes[i] ? D->in_bytes[i] : 1);
            if (!h) {
                rc = kt_err_set(err, -ENOMEM, "out of memory for inputs");
                goto out;
            }
            D->h_in[s * D->n_in + i] = h;
            if (src[i] < n_fin) {
                memcpy(h, fh[src[i]], D->in_bytes[i]);
                continue;
            }
            int64_t n = ops_shape_numel(&st->shape);
            size_t es = ops_dtype_size(st->dtype);
            free(host);
            if (!(host = malloc((size_t)(n > 0 ? n : 1) * sizeof(double)))) {
                rc = kt_err_set(err, -ENOMEM, "out of memory");
                goto out;
            }
            if ((rc = wk_cu(w, w->cu.p_cuMemcpyDtoH(host, buf[src[i]], (size_t)n * sizeof(double)),
                            "download full reference values", err)) < 0)
                goto out;
            for (int64_t k = 0; k < n; k++)
                ops_dtype_store(st->dtype, host[k], h + (size_t)k * es);
        }
    }
    kt_log_debug(WK_TAG, "data set inputs from the full graph '%s'%s", F->name ? F->name : "",
                 need_ref ? " (its reference ran)" : "");
out:
    free(host);
    if (buf)
        for (int t = 0; t < F->n_tensors; t++)
            if (buf[t])
                w->cu.p_cuMemFree(buf[t]);
    free(buf);
    if (fh)
        for (int k = 0; k < n_fin; k++)
            free(fh[k]);
    free(fh);
    srch_wk_ref_free(w, &ref);
    ops_graph_free(F);
    return rc;
}

static wk_data *data_find(wk *w, const uint8_t key[32])
{
    for (int i = 0; i < w->n_data; i++)
        if (memcmp(w->data[i]->key, key, 32) == 0)
            return w->data[i];
    return NULL;
}

/* Drops unused data sets beyond WK_MAX_DATA, least recently used first. */
void srch_wk_data_trim(wk *w, int keep)
{
    for (;;) {
        int unused = 0, victim = -1;
        for (int i = 0; i < w->n_data; i++) {
            if (w->data[i]->users > 0)
                continue;
            unused++;
            if (victim < 0 || w->data[i]->last_use < w->data[victim]->last_use)
                victim = i;
        }
        if (unused <= keep || victim < 0)
            return;
        srch_wk_data_free(w, w->data[victim]);
        w->data[victim] = w->data[--w->n_data];
    }
}

int srch_wk_data_get(wk *w, const srch_eval_req *req, wk_data **out, kt_err *err)
{
    int seeds = req->seeds <= 0 ? WK_DEFAULT_SEEDS : req->seeds < 2 ? 2 : req->seeds;
    uint8_t key[32];
    int rc = data_key(req, seeds, key, err);
    if (rc < 0)
        return rc;
    wk_data *D = data_find(w, key);
    if (D) {
        D->last_use = ++w->seq;
        *out = D;
        return 0;
    }
    srch_wk_data_trim(w, WK_MAX_DATA - 1);
    if (w->n_data >= (int)KT_ARRAY_LEN(w->data))
        return kt_err_set(err, -ENOSPC, "too many data sets in use");
    D = calloc(1, sizeof(*D));
    if (!D)
        return kt_err_set(err, -ENOMEM, "out of memory");
    memcpy(D->key, key, 32);
    D->cur_seed = -1;
    D->seeds = seeds;
    D->seed0 = req->seed0;
    if (!(D->g = ops_graph_clone(req->sub))) {
        rc = kt_err_set(err, -ENOMEM, "out of memory");
        goto fail;
    }
    const ops_graph *g = D->g;
    for (int t = 0; t < g->n_tensors && g->tensors[t].producer < 0; t++)
        D->n_in++;
    D->n_out = g->n_outputs;
    if (D->n_in > WK_MAX_IO || D->n_out > WK_MAX_IO) {
        rc = kt_err_set(err, -EINVAL, "subgraph has more than %d inputs or outputs", WK_MAX_IO);
        goto fail;
    }
    srch_wk_tolerance_inputs(D);
    D->h_in = calloc((size_t)(seeds * D->n_in) + 1, sizeof(*D->h_in));
    D->d_seed_in = calloc((size_t)(seeds * D->n_in) + 1, sizeof(*D->d_seed_in));
    D->d_ref = calloc((size_t)(seeds * D->n_out) + 1, sizeof(*D->d_ref));
    D->ref_sumsq = calloc((size_t)(seeds * D->n_out) + 1, sizeof(*D->ref_sumsq));
    D->ref_cmp = calloc((size_t)(seeds * D->n_out) + 1, sizeof(*D->ref_cmp));
    if (!D->h_in || !D->d_seed_in || !D->d_ref || !D->ref_sumsq || !D->ref_cmp) {
        rc = kt_err_set(err, -ENOMEM, "out of memory");
        goto fail;
    }
    for (int i = 0; i < D->n_in; i++) {
        const ops_tensor *t = &g->tensors[i];
        D->in_bytes[i] = (size_t)ops_shape_numel(&t->shape) * ops_dtype_size(t->dtype);
        if ((rc = wk_cu(w, w->cu.p_cuMemAlloc(&D->d_in[i], D->in_bytes[i] ? D->in_bytes[i] : 1),
                        "allocate an input", err)) < 0)
            goto fail;
    }
    for (int j = 0; j < D->n_out; j++) {
        const ops_tensor *t = &g->tensors[g->outputs[j]];
        D->out_numel[j] = ops_shape_numel(&t->shape);
        D->out_bytes[j] = (size_t)D->out_numel[j] * ops_dtype_size(t->dtype);
        if ((rc = wk_cu(w, w->cu.p_cuMemAlloc(&D->d_out[j], D->out_bytes[j] ? D->out_bytes[j] : 1),
                        "allocate an output", err)) < 0)
            goto fail;
    }
    double t0 = wk_now_s();
    if ((rc = req->full ? data_inputs_from_full(w, D, req, err) : data_make_inputs(D, err)) < 0)
        goto fail;
    for (int k = 0; k < seeds * D->n_in; k++) {
        size_t bytes = D->in_bytes[k % D->n_in];
        if ((rc = wk_cu(w, w->cu.p_cuMemAlloc(&D->d_seed_in[k], bytes ? bytes : 1),
                        "allocate an input", err)) < 0 ||
            (rc = wk_cu(w, w->cu.p_cuMemcpyHtoD(D->d_seed_in[k], D->h_in[k], bytes),
                        "upload inputs", err)) < 0)
            goto fail;
    }
    kt_log_debug(WK_TAG, "data set: %d seeds of %d inputs generated in %.3f s", seeds, D->n_in,
                 wk_now_s() - t0);
    D->last_use = ++w->seq;
    w->data[w->n_data++] = D;
    *out = D;
    return 0;
fail:
    srch_wk_data_free(w, D);
    return rc;
}

CUdeviceptr srch_wk_data_ptr(const wk_data *D, int32_t t)
{
    if (t >= 0 && t < D->n_in)
        return D->d_in[t];
    for (int j = 0; j < D->n_out; j++)
        if (D->g->outputs[j] == t)
            return D->d_out[j];
    return 0;
}

int srch_wk_data_upload(wk *w, wk_data *D, int s, kt_err *err)
{
    if (D->cur_seed == s)
        return 0;
    for (int i = 0; i < D->n_in; i++) {
        int rc =
            srch_wk_cmp_copy(w, D->d_in[i], D->d_seed_in[s * D->n_in + i], D->in_bytes[i], err);
        if (rc < 0)
            return rc;
    }
    D->cur_seed = s;
    return 0;
}

/* Compiles and runs the fp64 reference of D->g for every seed; keeps the outputs. */
int srch_wk_data_reference(wk *w, wk_data *D, kt_err *err)
{
    if (D->have_ref)
        return 0;
    wk_ref ref = {0};
    const ops_graph *g = D->g;
    /* Double buffers by tensor: copies of the graph inputs (freed here); the outputs are each
     * seed's D->d_ref, kept. */
    CUdeviceptr *buf = calloc((size_t)g->n_tensors + 1, sizeof(*buf));
    double t0 = wk_now_s();
    int rc = buf ? srch_wk_cmp_init(w, err) : kt_err_set(err, -ENOMEM, "out of memory");
    if (rc < 0 || (rc = srch_wk_ref_load(w, g, &ref, err)) < 0)
        goto out;
    double t_load = wk_now_s() - t0;
    for (int i = 0; i < D->n_in; i++) {
        int64_t n = ops_shape_numel(&g->tensors[i].shape);
        if ((rc = wk_cu(w, w->cu.p_cuMemAlloc(&buf[i], (size_t)(n ? n : 1) * sizeof(double)),
                        "allocate reference buffers", err)) < 0)
            goto out;
    }
    for (int s = 0; s < D->seeds; s++) {
        for (int j = 0; j < D->n_out; j++) {
            CUdeviceptr *r = &D->d_ref[s * D->n_out + j];
            size_t bytes = (size_t)(D->out_numel[j] ? D->out_numel[j] : 1) * sizeof(double);
            if (!*r && (rc = wk_cu(w, w->cu.p_cuMemAlloc(r, bytes), "allocate reference outputs",
                                   err)) < 0)
                goto out;
            buf[g->outputs[j]] = *r;
        }
        for (int i = 0; i < D->n_in; i++)
            if ((rc = srch_wk_cmp_widen(w, g->tensors[i].dtype, D->d_seed_in[s * D->n_in + i],
                                        buf[i], ops_shape_numel(&g->tensors[i].shape), err)) < 0)
                goto out;
        if ((rc = srch_wk_ref_launch(w, &ref, buf, g->n_tensors, err)) < 0)
            goto out;
        for (int j = 0; j < D->n_out; j++) {
            CUdeviceptr r = D->d_ref[s * D->n_out + j];
            long long n = D->out_numel[j];
            ops_dtype dt = g->tensors[g->outputs[j]].dtype;
            void *params[] = {&r, &n, &w->cmp.d_part};
            wk_part p;
            if (dt < OPS_DT_F32 || dt > OPS_DT_F64) {
                rc = kt_err_set(err, -EINVAL, "output %d has no dtype", j);
                goto out;
            }
            if ((rc = srch_wk_cmp_reduce(w, w->cmp.f_refstats[dt], params, n, &p, err)) < 0)
                goto out;
            D->ref_sumsq[s * D->n_out + j] = p.num;
            D->ref_cmp[s * D->n_out + j] = p.n_cmp;
        }
    }
    D->have_ref = true;
    kt_log_debug(WK_TAG, "reference of %d seeds in %.3f s (%.3f s compiling and loading it)",
                 D->seeds, wk_now_s() - t0, t_load);
out:
    if (buf)
        for (int i = 0; i < D->n_in; i++)
            if (buf[i])
                w->cu.p_cuMemFree(buf[i]);
    free(buf);
    srch_wk_ref_free(w, &ref);
    return rc;
}
