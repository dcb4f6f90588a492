/* The op handlers and the dispatch table (docs/protocol.md, "Ops"). One signature: a handler
 * reads its arguments from r, packs its result fields with kd_field, and returns 0 or a negative
 * errno with the message in r->err. Handlers never block on a GPU: cache reads are short LMDB
 * read transactions. */
#include "kd.h"

#include "ktune_config.h"
#include "ops/ops.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- shared argument parsing: graph and shapes ---- */

/* Reads `graph` (map, or bin holding the msgpack form), validates it, refuses it when the search
 * could never take it (srch_graph_admit: a lookup could never find it either), and computes its
 * signature. *out is the caller's. */
static int arg_graph(kd_req *r, ops_graph **out, uint8_t sig[OPS_SIG_BYTES])
{
    const msgpack_object *v = kd_arg(r, "graph");
    ops_diag diag = {0};
    ops_graph *g = NULL;
    int rc;
    if (!v)
        return kd_fail(r, -EINVAL, "'graph' is missing");
    if (v->type == MSGPACK_OBJECT_MAP)
        rc = ops_graph_from_msgpack_object(v, &g, &diag);
    else if (v->type == MSGPACK_OBJECT_BIN)
        rc = ops_graph_from_msgpack(v->via.bin.ptr, v->via.bin.size, &g, &diag);
    else
        return kd_fail(r, -EINVAL, "'graph' must be a map (the graph's msgpack form)");
    if (rc == 0)
        rc = ops_graph_validate(g, &diag);
    if (rc == 0) /* before the signature: refused in O(nodes), with the search's own reason */
        rc = srch_graph_admit(g, &diag);
    if (rc == 0)
        rc = ops_graph_signature(g, sig, &diag);
    if (rc < 0) {
        ops_graph_free(g);
        return kd_fail(r, rc == -ENOMEM ? -ENOMEM : -EINVAL, "graph: %s", diag.msg);
    }
    *out = g;
    return 0;
}

static int bound_cmp(const void *a, const void *b)
{
    return strcmp(((const cache_bound *)a)->name, ((const cache_bound *)b)->name);
}

/* Reads `shapes` (map NAME -> positive int) into shapes[] sorted by name, and checks that they
 * bind every symbolic dimension of g and nothing else. */
static int arg_shapes(kd_req *r, const ops_graph *g, cache_bound *shapes, int *n)
{
    const msgpack_object *v = kd_arg(r, "shapes");
    *n = 0;
    if (v && v->type != MSGPACK_OBJECT_MAP)
        return kd_fail(r, -EINVAL, "'shapes' must be a map of dimension names to integers");
    uint32_t count = v ? v->via.map.size : 0;
    if (count > CACHE_MAX_SHAPES)
        return kd_fail(r, -EINVAL, "'shapes' binds more than %d dimensions", CACHE_MAX_SHAPES);
    ops_binding b[CACHE_MAX_SHAPES];
    for (uint32_t i = 0; i < count; i++) {
        const msgpack_object *k = &v->via.map.ptr[i].key, *x = &v->via.map.ptr[i].val;
        cache_bound *s = &shapes[i];
        if (k->type != MSGPACK_OBJECT_STR || k->via.str.size == 0 ||
            k->via.str.size >= sizeof(s->name) || memchr(k->via.str.ptr, '\0', k->via.str.size))
            return kd_fail(r, -EINVAL, "'shapes' keys must be dimension names of 1..%zu bytes",
                           sizeof(s->name) - 1);
        memcpy(s->name, k->via.str.ptr, k->via.str.size);
        s->name[k->via.str.size] = '\0';
        if (x->type != MSGPACK_OBJECT_POSITIVE_INTEGER || x->via.u64 < 1 ||
            x->via.u64 > (uint64_t)OPS_MAX_DIM)
            return kd_fail(r, -EINVAL, "'shapes.%s' must be an integer in 1..%" PRId64,
                           KT_ESC(s->name), (int64_t)OPS_MAX_DIM);
        s->value = (int64_t)x->via.u64;
    }
    qsort(shapes, count, sizeof(*shapes), bound_cmp);
    for (uint32_t i = 0; i < count; i++) {
        if (i > 0 && strcmp(shapes[i - 1].name, shapes[i].name) == 0)
            return kd_fail(r, -EINVAL, "'shapes.%s' is given twice", KT_ESC(shapes[i].name));
        b[i] = (ops_binding){shapes[i].name, shapes[i].value};
    }
    ops_graph *bound = NULL;
    ops_diag diag = {0};
    int rc = ops_graph_bind(g, b, (int)count, &bound, &diag);
    if (rc < 0)
        return kd_fail(r, rc == -ENOMEM ? -ENOMEM : -EINVAL, "shapes: %s", diag.msg);
    const char *unbound = ops_graph_first_unbound(bound);
    if (unbound)
        rc = kd_fail(r, -EINVAL, "'shapes.%s' is missing: the graph's dimension %s must be bound",
                     unbound, unbound);
    ops_graph_free(bound);
    *n = (int)count;
    return rc;
}

static int arg_precision(kd_req *r, ops_precision *out)
{
    const msgpack_object *v = kd_arg(r, "precision");
    char p[16] = "";
    *out = OPS_PREC_EXACT;
    if (!v)
        return 0;
    if (v->type == MSGPACK_OBJECT_STR && v->via.str.size < sizeof(p)) {
        if (v->via.str.size) /* an empty string may come with a NULL ptr */
            memcpy(p, v->via.str.ptr, v->via.str.size);
        p[v->via.str.size] = '\0';
    }
    if (!p[0] || ops_precision_from_name(p, out) < 0)
        return kd_fail(r, -EINVAL, "'precision' must be exact, tf32 or reduced");
    return 0;
}

static int arg_job(kd_req *r, kd_job **out)
{
    uint64_t id = 0;
    int rc = kd_arg_uint(r, "job", true, 0, &id);
    if (rc < 0)
        return rc;
    if (!(*out = kd_jobs_find(r->d, id)))
        return kd_fail(r, -ENOENT, "no job %" PRIu64, id);
    return 0;
}

/* The GPU a job may be pinned to or a lookup asks for: configured and not down. */
static int check_gpu(kd_req *r, int index)
{
    kd_daemon *d = r->d;
    int slot = kd_gpu_slot(d, index);
    if (slot < 0) {
        char list[256] = "";
        size_t off = 0;
        for (int s = 0; s < d->n_gpus && off < sizeof(list); s++)
            off += (size_t)snprintf(list + off, sizeof(list) - off, "%s%d", s ? "," : "",
                                    d->gpus[s].index);
        return kd_fail(r, -EINVAL, "'gpu' %d is not one of this daemon's GPUs (%s)", index,
                       d->n_gpus ? list : "none");
    }
    if (d->gpus[slot].state == KD_GPU_DOWN)
        return kd_fail(r, -ENODEV, "GPU %d is down: %s", index, d->gpus[slot].error);
    return slot;
}

/* ---- ops ---- */

static int op_hello(kd_req *r)
{
    char client[128];
    int rc = kd_arg_str(r, "client", client, sizeof(client), "");
    if (rc < 0)
        return rc;
    if (client[0])
        kt_log_debug(KD_LOG_SERVER, "connection %llu: client %s", (unsigned long long)r->c->serial,
                     KT_ESC(client));
    kt_mp_pack_str(kd_field(r, "version"), KTUNE_VERSION);
    msgpack_pack_int(kd_field(r, "protocol"), 1);
    msgpack_pack_int64(kd_field(r, "pid"), (int64_t)getpid());
    msgpack_pack_uint64(kd_field(r, "uid"), (uint64_t)r->c->uid);
    msgpack_pack_int(kd_field(r, "gpus"), kd_gpus_usable(r->d));
    return 0;
}

/* Binds g with shapes and fills what a key needs from the bound graph: the problem digest, and
 * the tolerance asked (`tolerance`, 0 or absent: the default) normalised, the default's own value
 * counting as the default. A tolerance more than the config's factor above the default is
 * refused: loose records stay under their own key, but the daemon does not verify within
 * anything a client names. */
static int arg_problem(kd_req *r, const ops_graph *g, const cache_bound *shapes, int n,
                       ops_precision prec, double max_factor, uint8_t problem[OPS_SIG_BYTES],
                       double *tolerance)
{
    int rc = kd_arg_num(r, "tolerance", 0, 1e6, 0, tolerance);
    if (rc < 0)
        return rc;
    ops_binding b[CACHE_MAX_SHAPES];
    for (int i = 0; i < n; i++)
        b[i] = (ops_binding){shapes[i].name, shapes[i].value};
    ops_graph *bound = NULL;
    ops_diag d = {0};
    if ((rc = ops_graph_bind(g, b, n, &bound, &d)) < 0 ||
        (rc = ops_graph_problem(bound, problem, NULL, NULL, &d)) < 0) {
        ops_graph_free(bound);
        return kd_fail(r, rc == -ENOMEM ? -ENOMEM : -EINVAL, "graph: %s", d.msg);
    }
    double def = ops_default_tolerance(bound, prec), max = def * max_factor;
    ops_graph_free(bound);
    if (*tolerance == def)
        *tolerance = 0;
    if (*tolerance > max)
        return kd_fail(r, -EINVAL,
                       "'tolerance' %g is more than %g times this graph's default %g (the "
                       "daemon's tolerance-max-factor)",
                       *tolerance, max_factor, def);
    return 0;
}

/* ---- the graph half of submit and lookup (kd.h, kd_prep) ---- */

void kd_prep_run(kd_prep *p, const msgpack_object *msg, const char *op, double max_factor)
{
    memset(p, 0, sizeof(*p));
    p->op = op;
    kd_req r = {.op = op, .msg = msg}; /* no daemon, no connection: the readers need neither */
    kd_prep_stage at = KD_PREP_GRAPH;
    int rc = arg_graph(&r, &p->g, p->sig);
    if (rc == 0) {
        at = KD_PREP_SHAPES;
        rc = arg_shapes(&r, p->g, p->shapes, &p->n_shapes);
    }
    if (rc == 0) {
        at = KD_PREP_PRECISION;
        rc = arg_precision(&r, &p->precision);
    }
    if (rc == 0) {
        at = KD_PREP_PROBLEM;
        rc = arg_problem(&r, p->g, p->shapes, p->n_shapes, p->precision, max_factor, p->problem,
                         &p->tolerance);
    }
    p->failed = rc < 0 ? at : KD_PREP_DONE;
    p->rc = rc;
    p->err = r.err;
}

void kd_prep_free(kd_prep *p)
{
    ops_graph_free(p->g);
    p->g = NULL;
}

/* Stage `stage` of r's preparation: 0 when it succeeded; its error (into r->err) when it is the
 * one that failed. The handlers ask for the stages in order and stop at the first failure. */
static int prep_stage(kd_req *r, const kd_prep *p, kd_prep_stage stage)
{
    KT_REQUIRE(p->failed >= stage);
    if (p->failed != stage)
        return 0;
    r->err = p->err;
    return p->rc;
}

/* r's preparation: the one done off the loop (prep.c), or *local computed now. */
static kd_prep *prep_get(kd_req *r, kd_prep *local)
{
    if (r->prep)
        return r->prep;
    kd_prep_run(local, r->msg, r->op, r->d->cfg->tolerance_max_factor);
    return local;
}

/* The job's name (docs/protocol.md, "Names"): `name` as sent, refused unless it is a name (UTF-8,
 * no control characters) shorter than cap; absent or "": the graph's name (checked by its parser)
 * cut to fit between characters, else "graph". */
static int arg_name(kd_req *r, const ops_graph *g, char *name, size_t cap)
{
    int rc = kd_arg_str(r, "name", name, cap, NULL);
    if (rc < 0)
        return rc;
    if (!name[0]) {
        const char *gn = g->name && g->name[0] ? g->name : "graph";
        size_t n = strlen(gn);
        if (n >= cap) {
            n = cap - 1;
            while (n > 0 && ((unsigned char)gn[n] & 0xc0) == 0x80) /* not inside a character */
                n--;
        }
        memcpy(name, gn, n);
        name[n] = '\0';
        return 0;
    }
    kt_err e = {0};
    if (kt_name_check(name, strlen(name), cap - 1, &e) < 0)
        return kd_fail(r, -EINVAL,
                       "'name' '%s' %s (a job name is 1 to %zu bytes of UTF-8 without control "
                       "characters)",
                       KT_ESC(name), e.msg, cap - 1);
    return 0;
}

static int op_submit(kd_req *r)
{
    kd_daemon *d = r->d;
    kd_submit s = {0};
    kd_prep local, *p = prep_get(r, &local);
    int64_t priority = 0, gpu = -1;
    int rc;
    if ((rc = prep_stage(r, p, KD_PREP_GRAPH)) < 0 || (rc = prep_stage(r, p, KD_PREP_SHAPES)) < 0 ||
        (rc = prep_stage(r, p, KD_PREP_PRECISION)) < 0 ||
        (rc = kd_arg_num(r, "budget_s", 1, d->cfg->budget_max_s, 60, &s.budget_s)) < 0 ||
        (rc = prep_stage(r, p, KD_PREP_PROBLEM)) < 0 ||
        (rc = kd_arg_int(r, "priority", -100, 100, 0, &priority)) < 0 ||
        (rc = kd_arg_int(r, "gpu", -1, KD_MAX_GPUS - 1, -1, &gpu)) < 0 ||
        (rc = kd_arg_bool(r, "retune", false, &s.retune)) < 0 ||
        (rc = kd_arg_bool(r, "remeasure", false, &s.remeasure)) < 0 ||
        (rc = arg_name(r, p->g, s.name, sizeof(s.name))) < 0)
        goto out;
    s.graph = p->g;
    memcpy(s.sig, p->sig, sizeof(s.sig));
    memcpy(s.problem, p->problem, sizeof(s.problem));
    s.n_shapes = p->n_shapes;
    memcpy(s.shapes, p->shapes, sizeof(s.shapes));
    s.precision = p->precision;
    s.tolerance = p->tolerance;
    s.priority = (int)priority;
    s.gpu = (int)gpu;
    s.by = r->c;
    /* above the default, a job runs before everyone else's: only an admin may ask for that */
    if (s.priority > 0 && !r->c->admin) {
        kt_log_warn(KD_LOG_JOBS,
                    "uid %u may not submit at priority %d (only root or the admin "
                    "group may go above 0)",
                    (unsigned)r->c->uid, s.priority);
        rc = kd_fail(r, -EPERM,
                     "'priority' %d: only root%s%s may submit above the default 0 (uid %u)",
                     s.priority, d->cfg->admin_set ? " or members of group " : "",
                     d->cfg->admin_set ? d->cfg->admin_group : "", (unsigned)r->c->uid);
        goto out;
    }
    /* somewhere to run it: a GPU that is up, or still starting */
    bool any = false;
    for (int i = 0; i < d->n_gpus; i++)
        any |= d->gpus[i].state != KD_GPU_DOWN;
    if (!any) {
        rc = kd_fail(r, -ENODEV, "%s", d->gpu_note[0] ? d->gpu_note : "no GPU");
        goto out;
    }
    if (s.gpu >= 0 && (rc = check_gpu(r, s.gpu)) < 0)
        goto out;
    kd_job *kj = NULL;
    bool joined = false;
    if ((rc = kd_jobs_submit(d, &s, &kj, &joined, &r->err)) < 0)
        goto out;
    kd_pack_job(kd_field(r, "job"), kj);
    kd_field(r, "joined");
    if (joined)
        msgpack_pack_true(&r->pk);
    else
        msgpack_pack_false(&r->pk);
    rc = 0;
out:
    if (p == &local)
        kd_prep_free(&local);
    return rc;
}

static int op_status(kd_req *r)
{
    kd_job *kj = NULL;
    int rc = arg_job(r, &kj);
    if (rc < 0)
        return rc;
    kd_pack_job(kd_field(r, "job"), kj);
    return 0;
}

static int op_watch(kd_req *r)
{
    kd_job *kj = NULL;
    int rc = arg_job(r, &kj);
    if (rc < 0)
        return rc;
    if (kd_job_finished(kj))
        r->end_job = kj; /* the "end" event follows the reply at once */
    else if (kd_jobs_watch(kj, r->c, r->id) < 0)
        return kd_fail(r, -ENOMEM, "out of memory");
    kd_pack_job(kd_field(r, "job"), kj);
    return 0;
}

static int op_cancel(kd_req *r)
{
    kd_job *kj = NULL;
    int rc = arg_job(r, &kj);
    if (rc < 0 || (rc = kd_jobs_cancel(r->d, kj, r->c, &r->err)) < 0)
        return rc;
    kd_pack_job(kd_field(r, "job"), kj);
    return 0;
}

static int op_jobs(kd_req *r)
{
    unsigned mask = 0;
    const msgpack_object *st = kd_arg(r, "state");
    if (st) {
        const msgpack_object *items = st;
        uint32_t n = 1;
        if (st->type == MSGPACK_OBJECT_ARRAY) {
            items = st->via.array.ptr;
            n = st->via.array.size;
        }
        for (uint32_t i = 0; i < n; i++) {
            const msgpack_object *o = &items[i];
            char name[16];
            cache_job_state s;
            if (o->type != MSGPACK_OBJECT_STR || o->via.str.size >= sizeof(name))
                return kd_fail(r, -EINVAL, "'state' must be a job state or an array of them");
            if (o->via.str.size) /* an empty string may come with a NULL ptr */
                memcpy(name, o->via.str.ptr, o->via.str.size);
            name[o->via.str.size] = '\0';
            if (cache_job_state_from_name(name, &s) < 0)
                return kd_fail(r, -EINVAL,
                               "'state' has '%s': expected queued, running, done, failed or "
                               "cancelled",
                               KT_ESC(name));
            mask |= 1u << s;
        }
    }
    int64_t limit = 0;
    int rc = kd_arg_int(r, "limit", 1, 1000000, 1000, &limit);
    if (rc < 0)
        return rc;
    kd_daemon *d = r->d;
    size_t n = 0;
    for (size_t i = d->n_jobs; i-- > 0 && n < (size_t)limit;)
        n += !mask || (mask & (1u << d->jobs[i]->j.state));
    msgpack_packer *pk = kd_field(r, "jobs");
    msgpack_pack_array(pk, n);
    size_t k = 0;
    for (size_t i = d->n_jobs; i-- > 0 && k < n;) {
        if (mask && !(mask & (1u << d->jobs[i]->j.state)))
            continue;
        kd_pack_job(pk, d->jobs[i]);
        k++;
    }
    return 0;
}

/* The GPU a lookup asks for: configured, not down, and its fingerprint known. */
static int lookup_gpu(kd_req *r, int index)
{
    int slot = check_gpu(r, index);
    if (slot >= 0 && r->d->gpus[slot].state == KD_GPU_STARTING)
        return kd_fail(r, -EBUSY, "GPU %d is still starting: its fingerprint is not known yet",
                       index);
    return slot;
}

/* The memo key of a lookup: the exact bytes of `graph`, `shapes`, `precision` and `tolerance` as
 * sent, each behind its length (absent and empty differ), then the GPU index. In the memo's scratch
 * buffer; false when there is nothing to memoise (no graph: an error follows) or no memory. */
static bool memo_key(kd_req *r, int64_t gpu, const uint8_t **key, size_t *klen)
{
    static const char *const names[] = {"graph", "shapes", "precision", "tolerance"};
    enum { N = sizeof(names) / sizeof(names[0]) };
    const uint8_t *v[N];
    size_t n[N], total = sizeof(int64_t);
    if (!r->raw || !kd_frame_map_values(r->raw, r->raw_len, names, N, v, n) || !v[0])
        return false;
    for (int i = 0; i < N; i++)
        total += sizeof(uint32_t) + n[i];
    uint8_t *buf = kd_memo_scratch(r->d->memo, total), *p = buf;
    if (!buf)
        return false;
    for (int i = 0; i < N; i++) {
        uint32_t len = v[i] ? (uint32_t)n[i] : UINT32_MAX; /* n[i] <= KD_MAX_REQUEST */
        memcpy(p, &len, sizeof(len));
        p += sizeof(len);
        if (n[i])
            memcpy(p, v[i], n[i]);
        p += n[i];
    }
    memcpy(p, &gpu, sizeof(gpu));
    *key = buf;
    *klen = total;
    return true;
}

/* lookup: answered from the memo when the same bytes were looked up at the same cache generation
 * (the GPU's state is still checked every time), else from the cache, and the answer memoised.
 * A corrupt record answers "not found" and is not memoised (it is reported on every lookup). */
static int op_lookup(kd_req *r)
{
    kd_daemon *d = r->d;
    cache_key k;
    memset(&k, 0, sizeof(k));
    kd_prep local, *p = NULL;
    int64_t gpu = 0;
    bool want_source = false;
    int rc, slot;
    /* the memo: only once the arguments it does not key on read well (errors come from the full
     * path below, in its order) */
    const uint8_t *key = NULL;
    size_t klen = 0;
    uint64_t gen = 0;
    if (d->memo && kd_arg_int(r, "gpu", 0, KD_MAX_GPUS - 1, 0, &gpu) == 0 &&
        kd_arg_bool(r, "source", false, &want_source) == 0 && memo_key(r, gpu, &key, &klen) &&
        cache_generation(d->cache, &gen, NULL) == 0) {
        const uint8_t *val;
        size_t vlen;
        uint32_t nf;
        if (kd_memo_get(d->memo, key, klen, want_source, gen, &val, &vlen, &nf)) {
            if ((slot = lookup_gpu(r, (int)gpu)) < 0)
                return slot;
            if (msgpack_sbuffer_write(&r->body, (const char *)val, vlen) != 0)
                return kd_fail(r, -ENOMEM, "out of memory");
            r->n_fields += nf;
            return 0;
        }
    } else {
        key = NULL;
    }
    p = prep_get(r, &local);
    if ((rc = prep_stage(r, p, KD_PREP_GRAPH)) < 0 || (rc = prep_stage(r, p, KD_PREP_SHAPES)) < 0 ||
        (rc = prep_stage(r, p, KD_PREP_PRECISION)) < 0 ||
        (rc = prep_stage(r, p, KD_PREP_PROBLEM)) < 0 ||
        (rc = kd_arg_int(r, "gpu", 0, KD_MAX_GPUS - 1, 0, &gpu)) < 0 ||
        (rc = kd_arg_bool(r, "source", false, &want_source)) < 0)
        goto out;
    memcpy(k.sig, p->sig, sizeof(k.sig));
    memcpy(k.problem, p->problem, sizeof(k.problem));
    k.n_shapes = p->n_shapes;
    memcpy(k.shapes, p->shapes, sizeof(k.shapes));
    k.precision = p->precision;
    k.tolerance = p->tolerance;
    if ((slot = lookup_gpu(r, (int)gpu)) < 0) {
        rc = slot;
        goto out;
    }
    k.gpu = d->gpus[slot].fp;
    cache_record rec;
    cache_record_init(&rec);
    kt_err err = {0};
    int got = cache_get(d->cache, &k, 0, &rec, &err);
    rc = 0;
    if (got == -ENOENT || got == -EBADMSG) { /* a corrupt record is reported, never served */
        msgpack_pack_false(kd_field(r, "found"));
    } else if (got < 0) {
        rc = kd_fail(r, got, "cache: %s", err.msg);
    } else {
        msgpack_pack_true(kd_field(r, "found"));
        msgpack_packer *pk = kd_field(r, "record");
        msgpack_pack_map(pk, 13);
        kt_mp_pack_kstr(pk, "family", rec.family ? rec.family : "");
        kt_mp_pack_kstr(pk, "schedule", rec.schedule ? rec.schedule : "");
        kt_mp_pack_kf64(pk, "time_ns", rec.time_ns);
        kt_mp_pack_kf64(pk, "p10_ns", rec.time_p10_ns);
        kt_mp_pack_kf64(pk, "p90_ns", rec.time_p90_ns);
        kt_mp_pack_kf64(pk, "err_norm", rec.err_norm);
        kt_mp_pack_kf64(pk, "tolerance", rec.tolerance);
        kt_mp_pack_kf64(pk, "cublaslt_ns", rec.cublaslt_ns);
        kt_mp_pack_ku64(pk, "workspace_bytes", rec.workspace_bytes);
        kt_mp_pack_ki64(pk, "kernels", rec.n_kernels);
        kt_mp_pack_ki64(pk, "created", rec.created);
        kt_mp_pack_kstr(pk, "gpu", rec.key.gpu.name);
        kt_mp_pack_ki64(pk, "rank", 0);
        if (want_source) {
            pk = kd_field(r, "source");
            msgpack_pack_str_with_body(pk, rec.source ? rec.source : "", rec.source_len);
        }
    }
    cache_record_free(&rec);
    /* memoise what the cache said at generation gen (read before the cache was): an entry that
     * does not fit or finds no memory is simply not kept */
    if (key && (got == 0 || got == -ENOENT)) {
        kd_memo_put(d->memo, key, klen, want_source, gen, (const uint8_t *)r->body.data,
                    r->body.size, r->n_fields);
        if (got == -ENOENT) /* no record: the same answer with or without the source */
            kd_memo_put(d->memo, key, klen, !want_source, gen, (const uint8_t *)r->body.data,
                        r->body.size, r->n_fields);
    }
out:
    if (p == &local)
        kd_prep_free(&local);
    return rc;
}

/* Resident set size from /proc/self/statm (its second field, in pages). */
static uint64_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long long size = 0, resident = 0;
    if (!f)
        return 0;
    if (fscanf(f, "%llu %llu", &size, &resident) != 2)
        resident = 0;
    fclose(f);
    return (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

static int op_stats(kd_req *r)
{
    kd_daemon *d = r->d;
    cache_stats cs;
    kt_err err = {0};
    int rc = cache_stat(d->cache, &cs, &err);
    if (rc < 0)
        return kd_fail(r, rc, "cache: %s", err.msg);
    int counts[CACHE_JOB_STATE_COUNT];
    kd_jobs_count(d, counts);
    msgpack_pack_double(kd_field(r, "uptime_s"), kd_now() - d->t0);
    msgpack_pack_int(kd_field(r, "clients"), d->n_conns);
    msgpack_pack_uint64(kd_field(r, "requests"), d->requests);
    msgpack_packer *pk = kd_field(r, "jobs");
    msgpack_pack_map(pk, CACHE_JOB_STATE_COUNT);
    for (int s = 0; s < CACHE_JOB_STATE_COUNT; s++)
        kt_mp_pack_ki64(pk, cache_job_state_name((cache_job_state)s), counts[s]);
    msgpack_pack_int(kd_field(r, "gpus"), kd_gpus_usable(d));
    msgpack_pack_uint64(kd_field(r, "rss_bytes"), rss_bytes());
    pk = kd_field(r, "cache");
    msgpack_pack_map(pk, 6);
    kt_mp_pack_kstr(pk, "path", cache_path(d->cache));
    kt_mp_pack_ku64(pk, "records", cs.records);
    kt_mp_pack_ku64(pk, "keys", cs.keys);
    kt_mp_pack_ku64(pk, "trials", cs.trials);
    kt_mp_pack_ku64(pk, "map_size", cs.map_size);
    kt_mp_pack_ku64(pk, "map_used", cs.map_used);
    return 0;
}

static int op_gpus(kd_req *r)
{
    kd_daemon *d = r->d;
    bool none = true;
    for (int s = 0; s < d->n_gpus; s++)
        none &= d->gpus[s].state == KD_GPU_DOWN;
    msgpack_packer *pk = kd_field(r, "gpus");
    if (none) {
        msgpack_pack_array(pk, 0);
        kt_mp_pack_str(kd_field(r, "note"), d->gpu_note[0] ? d->gpu_note : "no GPU configured");
        return 0;
    }
    msgpack_pack_array(pk, (size_t)d->n_gpus);
    for (int s = 0; s < d->n_gpus; s++)
        kd_pack_gpu(pk, &d->gpus[s]);
    kt_mp_pack_str(kd_field(r, "note"), "");
    return 0;
}

const kd_op kd_ops[] = {
    {"hello", op_hello, 0},   {"submit", op_submit, KD_OP_REFUSED_STOPPING},
    {"status", op_status, 0}, {"watch", op_watch, 0},
    {"cancel", op_cancel, 0}, {"jobs", op_jobs, 0},
    {"lookup", op_lookup, 0}, {"stats", op_stats, 0},
    {"gpus", op_gpus, 0},     {NULL, NULL, 0},
};
