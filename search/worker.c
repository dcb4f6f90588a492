/* The GPU worker: the process of ktune-worker (protocol in search/worker.h, encoding in
 * search/worker_proto.c): start-up, the request loop and its handlers; "eval" loads
 * (worker_load.c), verifies (worker_verify.c, over the data sets of worker_data.c) and times
 * one candidate. The modules and their shared state: search/worker_internal.h.
 *
 * Process rules. The CUPTI timer is opened before the CUDA context (srch_timer_open before
 * srch_cuda_open), once. A sticky CUDA error (illegal address, launch failure, ...) kills the
 * context for good: the worker answers the request that hit it with status "fault" (or an
 * EFAULT error reply), then exits with status 3 so that the supervisor respawns it. */
#include "worker_internal.h"

#include "ops/msgpack_util.h"

#include <nvrtc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WK_MAX_MSG    ((size_t)256 << 20)
#define WK_EXIT_FAULT 3
#define WK_EXIT_PROTO 2
#define WK_SELFTEST_N (1 << 20)
#define WK_STR(x)     #x
#define WK_XSTR(x)    WK_STR(x)

/* ---- small helpers ---- */

static const char *errno_name(int code)
{
    const char *n = strerrorname_np(code < 0 ? -code : code);
    return n ? n : "EIO";
}

static int reply_begin(wk *w)
{
    msgpack_sbuffer_clear(&w->sb);
    return 0;
}

static int reply_send(wk *w)
{
    int rc = kt_write_all(w->out_fd, w->sb.data, w->sb.size);
    if (rc < 0)
        kt_log_err(WK_TAG, "cannot write a reply: %s", strerror(-rc));
    msgpack_sbuffer_clear(&w->sb);
    return rc;
}

static int reply_error(wk *w, int code, const char *msg)
{
    reply_begin(w);
    msgpack_pack_map(&w->pk, 2);
    kt_mp_pack_kbool(&w->pk, "ok", false);
    kt_mp_pack_str(&w->pk, "error");
    msgpack_pack_map(&w->pk, 2);
    kt_mp_pack_kstr(&w->pk, "code", errno_name(code));
    kt_mp_pack_kstr(&w->pk, "msg", msg);
    return reply_send(w);
}

/* Loads, verifies and times one candidate. The candidate stays loaded when it passed. Returns
 * 0 with res filled, or a negative errno (detail in err) for a failure of the worker itself
 * (no GPU, no timer, out of host memory), which becomes an error reply. */
static int eval_core(wk *w, const srch_eval_req *req, srch_eval_result *res, kt_err *err)
{
    memset(res, 0, sizeof(*res));
    res->id = req->id;
    if (w->init_rc < 0)
        return kt_err_set(err, w->init_rc, "%s", w->init_err.msg);
    if (req->time && !w->timer)
        return kt_err_set(err, -ENODEV, "cannot time: %s", w->timer_err.msg);
    wk_cand *old = srch_wk_cand_find(w, req->id);
    if (old)
        srch_wk_cand_release(w, old);
    wk_data *D = NULL;
    double t0 = wk_now_s();
    int rc;
    /* Device memory filled by the data sets of loaded candidates (groups over gigabytes) is
     * given back, oldest first, until this one fits. */
    while ((rc = srch_wk_data_get(w, req, &D, err)) == -ENOMEM && !w->dead &&
           srch_wk_make_room(w, NULL))
        ;
    double t1 = wk_now_s(), t2 = t1;
    if (rc < 0) {
        if (wk_probe_dead(w)) {
            res->status = SRCH_FAULT;
            snprintf(res->msg, sizeof(res->msg), "%.255s", err->msg);
            return 0;
        }
        return rc;
    }
    wk_cand *c = srch_wk_cand_slot(w);
    c->used = true;
    c->id = req->id;
    c->seq = ++w->seq;
    c->w = w;
    c->data = D;
    D->users++;
    if (srch_wk_cand_load(w, c, req, res) < 0)
        goto done;
    while (req->verify && (rc = srch_wk_verify(c, req, res)) == -ENOMEM && !w->dead &&
           srch_wk_make_room(w, c)) /* the reference's buffers did not fit */
        res->status = SRCH_OK;
    if (req->verify && rc < 0) {
        srch_wk_cand_release(w, c);
        return kt_err_set(err, rc, "%s", res->msg);
    }
    t2 = wk_now_s();
    if (res->status == SRCH_OK && req->time) {
        kt_err terr = {0};
        /* Library calls may launch more than one kernel: let the timer count them. */
        int kpr = c->library ? 0 : c->n_kernels;
        rc = srch_time(w->timer, &w->cu, srch_wk_cand_launch, c, kpr, &req->timing, &res->time,
                       &terr);
        if (rc < 0) {
            if (wk_probe_dead(w)) {
                res->status = SRCH_FAULT;
                snprintf(res->msg, sizeof(res->msg), "timing: %.240s", terr.msg);
            } else {
                srch_wk_cand_release(w, c);
                return kt_err_set(err, rc, "timing: %.240s", terr.msg);
            }
        }
    }
done:
    kt_log_debug(WK_TAG, "%s %llu: data %.3f s, load and verify %.3f s, timing %.3f s",
                 req->record ? "record" : "candidate", (unsigned long long)req->id, t1 - t0,
                 t2 - t1, wk_now_s() - t2);
    /* A record is evaluated once, never re-timed: its module and workspace go now. */
    if (res->status != SRCH_OK || req->record)
        srch_wk_cand_release(w, c);
    return 0;
}

/* ---- requests ---- */

static int handle_eval(wk *w, const msgpack_object *o)
{
    srch_eval_req req;
    srch_eval_result res;
    kt_err err = {0};
    int rc = srch_eval_req_unpack(o, &req, &err);
    if (rc < 0)
        return reply_error(w, rc, err.msg);
    rc = eval_core(w, &req, &res, &err);
    srch_eval_req_free(&req);
    if (rc < 0)
        return reply_error(w, rc, err.msg);
    if (res.status != SRCH_OK)
        kt_log_debug(WK_TAG, "candidate %llu: %s: %s", (unsigned long long)res.id,
                     srch_status_str(res.status), res.msg);
    reply_begin(w);
    srch_eval_result_pack(&w->pk, &res);
    return reply_send(w);
}

static void pack_time(msgpack_packer *pk, uint64_t id, const srch_time_stats *t)
{
    msgpack_pack_map(pk, 5);
    kt_mp_pack_ku64(pk, "id", id);
    kt_mp_pack_kf64(pk, "median_ns", t->median_ns);
    kt_mp_pack_kf64(pk, "p10_ns", t->p10_ns);
    kt_mp_pack_kf64(pk, "p90_ns", t->p90_ns);
    kt_mp_pack_ki64(pk, "reps", t->reps);
}

static int handle_retime(wk *w, const msgpack_object *o)
{
    const msgpack_object *ids = kt_mp_get(o, "ids"), *rounds = kt_mp_get(o, "rounds"),
                         *cold = kt_mp_get(o, "cold");
    if (w->init_rc < 0)
        return reply_error(w, w->init_rc, w->init_err.msg);
    if (!w->timer)
        return reply_error(w, -ENODEV, w->timer_err.msg);
    if (!ids || ids->type != MSGPACK_OBJECT_ARRAY || ids->via.array.size == 0 ||
        ids->via.array.size > WK_MAX_CANDS)
        return reply_error(w, -EPROTO, "retime: 'ids' must be an array of 1 to 64 ids");
    int n_rounds = 10;
    if (rounds) {
        if (rounds->type != MSGPACK_OBJECT_POSITIVE_INTEGER || rounds->via.u64 < 1 ||
            rounds->via.u64 > 100000)
            return reply_error(w, -EPROTO, "retime: 'rounds' must be 1 to 100000");
        n_rounds = (int)rounds->via.u64;
    }
    if (cold && cold->type != MSGPACK_OBJECT_BOOLEAN)
        return reply_error(w, -EPROTO, "retime: 'cold' must be a boolean");
    int n = (int)ids->via.array.size;
    srch_launch_fn fns[WK_MAX_CANDS];
    void *ctx[WK_MAX_CANDS];
    int kpr[WK_MAX_CANDS];
    uint64_t idv[WK_MAX_CANDS];
    srch_time_stats st[WK_MAX_CANDS];
    for (int i = 0; i < n; i++) {
        const msgpack_object *e = &ids->via.array.ptr[i];
        char msg[96];
        if (e->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
            return reply_error(w, -EPROTO, "retime: ids must be unsigned integers");
        wk_cand *c = srch_wk_cand_find(w, e->via.u64);
        if (!c) {
            snprintf(msg, sizeof(msg), "retime: candidate %llu is not loaded",
                     (unsigned long long)e->via.u64);
            return reply_error(w, -ENOENT, msg);
        }
        idv[i] = c->id;
        fns[i] = srch_wk_cand_launch;
        ctx[i] = c;
        kpr[i] = c->library ? 0 : c->n_kernels;
    }
    kt_err err = {0};
    int rc = srch_time_interleaved(w->timer, &w->cu, n, fns, ctx, kpr, n_rounds,
                                   cold && cold->via.boolean, st, &err);
    if (rc < 0) {
        wk_probe_dead(w);
        return reply_error(w, w->dead ? -EFAULT : rc, err.msg);
    }
    reply_begin(w);
    msgpack_pack_map(&w->pk, 2);
    kt_mp_pack_kbool(&w->pk, "ok", true);
    kt_mp_pack_str(&w->pk, "times");
    msgpack_pack_array(&w->pk, (size_t)n);
    for (int i = 0; i < n; i++)
        pack_time(&w->pk, idv[i], &st[i]);
    return reply_send(w);
}

static int handle_forget(wk *w, const msgpack_object *o)
{
    const msgpack_object *ids = kt_mp_get(o, "ids");
    if (!ids || ids->type != MSGPACK_OBJECT_ARRAY)
        return reply_error(w, -EPROTO, "forget: 'ids' must be an array");
    for (uint32_t i = 0; i < ids->via.array.size; i++) {
        const msgpack_object *e = &ids->via.array.ptr[i];
        if (e->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
            return reply_error(w, -EPROTO, "forget: ids must be unsigned integers");
        wk_cand *c = srch_wk_cand_find(w, e->via.u64);
        if (c)
            srch_wk_cand_release(w, c);
    }
    srch_wk_data_trim(w, WK_MAX_DATA);
    reply_begin(w);
    msgpack_pack_map(&w->pk, 1);
    kt_mp_pack_kbool(&w->pk, "ok", true);
    return reply_send(w);
}

/* The inputs and fp64 reference outputs of a subgraph, for tests of the reference itself. */
static int handle_reference(wk *w, const msgpack_object *o)
{
    srch_eval_req req;
    kt_err err = {0};
    int rc = srch_eval_req_unpack(o, &req, &err);
    if (rc < 0)
        return reply_error(w, rc, err.msg);
    wk_data *D = NULL;
    if (w->init_rc < 0)
        rc = kt_err_set(&err, w->init_rc, "%s", w->init_err.msg);
    else if ((rc = srch_wk_data_get(w, &req, &D, &err)) == 0)
        rc = srch_wk_data_reference(w, D, &err);
    srch_eval_req_free(&req);
    if (rc < 0) {
        wk_probe_dead(w);
        return reply_error(w, w->dead ? -EFAULT : rc, err.msg);
    }
    reply_begin(w);
    msgpack_pack_map(&w->pk, 3);
    kt_mp_pack_kbool(&w->pk, "ok", true);
    kt_mp_pack_str(&w->pk, "inputs");
    msgpack_pack_array(&w->pk, (size_t)D->seeds);
    for (int s = 0; s < D->seeds; s++) {
        msgpack_pack_array(&w->pk, (size_t)D->n_in);
        for (int i = 0; i < D->n_in; i++) {
            msgpack_pack_bin(&w->pk, D->in_bytes[i]);
            msgpack_pack_bin_body(&w->pk, D->h_in[s * D->n_in + i], D->in_bytes[i]);
        }
    }
    kt_mp_pack_str(&w->pk, "outputs");
    msgpack_pack_array(&w->pk, (size_t)D->seeds);
    for (int s = 0; s < D->seeds; s++) {
        msgpack_pack_array(&w->pk, (size_t)D->n_out);
        for (int j = 0; j < D->n_out; j++) {
            size_t bytes = (size_t)D->out_numel[j] * sizeof(double);
            double *h = malloc(bytes ? bytes : 1);
            if (!h)
                return reply_error(w, -ENOMEM, "out of memory");
            rc = wk_cu(w, w->cu.p_cuMemcpyDtoH(h, D->d_ref[s * D->n_out + j], bytes),
                       "download the reference", &err);
            if (rc == 0) {
                msgpack_pack_bin(&w->pk, bytes);
                msgpack_pack_bin_body(&w->pk, h, bytes);
            }
            free(h);
            if (rc < 0)
                return reply_error(w, w->dead ? -EFAULT : rc, err.msg);
        }
    }
    return reply_send(w);
}

/* ---- start-up, self-test, hello ---- */

static const char selftest_source[] =
    "/* ktune-worker self-test: y = 2 x + 1 */\n"
    "extern \"C\" __global__ void kt_selftest(const float *x, float *y)\n"
    "{\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < " WK_XSTR(WK_SELFTEST_N) ")\n"
                                          "        y[i] = x[i] * 2.0f + 1.0f;\n"
                                          "}\n";

/* A known pointwise kernel through the whole path: NVRTC, load, reference, verify, time. */
static void selftest(wk *w)
{
    ops_graph *g = ops_graph_new("selftest");
    srch_compile_result cr = {0};
    srch_eval_req req = {0};
    srch_eval_result res = {0};
    kt_err err = {0};
    ops_diag d = {0};
    ops_shape shape = {.rank = 1, .d = {{WK_SELFTEST_N, OPS_NO_SYM}}};
    int x, n0, n1;
    w->selftest_done = true;
    if (!g || (x = ops_graph_add_input(g, "x", OPS_DT_F32, &shape, false)) < 0 ||
        (n0 = ops_graph_add_node(g, OPS_MUL, "t", NULL)) < 0) {
        snprintf(w->selftest, sizeof(w->selftest), "failed: cannot build the graph");
        goto out;
    }
    g->nodes[n0].n_in = 2;
    g->nodes[n0].in[0] = (ops_operand){.tensor = x};
    g->nodes[n0].in[1] = (ops_operand){.tensor = OPS_SCALAR, .scalar = 2.0};
    if ((n1 = ops_graph_add_node(g, OPS_ADD, "y", NULL)) < 0) {
        snprintf(w->selftest, sizeof(w->selftest), "failed: cannot build the graph");
        goto out;
    }
    g->nodes[n1].n_in = 2;
    g->nodes[n1].in[0] = (ops_operand){.tensor = g->nodes[n0].out};
    g->nodes[n1].in[1] = (ops_operand){.tensor = OPS_SCALAR, .scalar = 1.0};
    if (ops_graph_mark_output(g, g->nodes[n1].out) < 0 || ops_graph_validate(g, &d) < 0) {
        snprintf(w->selftest, sizeof(w->selftest), "failed: graph: %.200s", d.msg);
        goto out;
    }
    if (srch_nvrtc_compile(selftest_source, w->arch, &cr) < 0 || cr.status != SRCH_COMPILE_OK) {
        snprintf(w->selftest, sizeof(w->selftest), "failed: NVRTC: %.200s", cr.log ? cr.log : "");
        goto out;
    }
    req.id = UINT64_MAX;
    req.sub = g;
    req.seeds = 2;
    req.seed0 = 1;
    req.verify = true;
    req.time = w->timer != NULL;
    req.timing.budget_s = 0.02;
    req.cubin = cr.cubin;
    req.cubin_len = cr.cubin_len;
    req.n_kernels = 1;
    ops_kernel_launch *l = &req.kernels[0];
    snprintf(l->entry, sizeof(l->entry), "kt_selftest");
    l->grid[0] = WK_SELFTEST_N / 256;
    l->grid[1] = l->grid[2] = 1;
    l->block[0] = 256;
    l->block[1] = l->block[2] = 1;
    l->n_args = 2;
    l->args[0] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = x};
    l->args[1] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = g->nodes[n1].out};
    if (eval_core(w, &req, &res, &err) < 0)
        snprintf(w->selftest, sizeof(w->selftest), "failed: %.280s", err.msg);
    else if (res.status != SRCH_OK)
        snprintf(w->selftest, sizeof(w->selftest), "failed: %s: %.250s",
                 srch_status_str(res.status), res.msg);
    else
        snprintf(w->selftest, sizeof(w->selftest), "ok");
    if (res.status == SRCH_OK)
        kt_log_info(WK_TAG, "self-test ok: err %.2e, %.2f us (%d reps)", res.err_norm,
                    res.time.median_ns / 1e3, res.time.reps);
    wk_cand *c = srch_wk_cand_find(w, req.id);
    if (c)
        srch_wk_cand_release(w, c);
    srch_wk_data_trim(w, 0);
out:
    srch_compile_result_release(&cr);
    ops_graph_free(g);
}

static int attr(wk *w, CUdevice_attribute a, int *out, kt_err *err)
{
    return wk_cu(w, w->cu.p_cuDeviceGetAttribute(out, a, w->cu.device), "cuDeviceGetAttribute",
                 err);
}

static int wk_init(wk *w, kt_err *err)
{
    int rc;
    /* CUPTI first: activity tracing must be enabled before the context exists. */
    if (srch_timer_open(&w->timer, &w->timer_err) < 0) {
        w->timer = NULL;
        kt_log_warn(WK_TAG, "no timing: %s", w->timer_err.msg);
    }
    if ((rc = srch_cuda_open(&w->cu, 0, err)) < 0)
        return rc;
    w->have_cu = true;
    if ((rc = wk_cu(w, w->cu.p_cuDeviceGetName(w->name, (int)sizeof(w->name), w->cu.device),
                    "cuDeviceGetName", err)) < 0 ||
        (rc = wk_cu(w, w->cu.p_cuDeviceTotalMem(&w->mem_bytes, w->cu.device), "cuDeviceTotalMem",
                    err)) < 0 ||
        (rc = attr(w, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &w->attr_major, err)) < 0 ||
        (rc = attr(w, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, &w->attr_minor, err)) < 0 ||
        (rc = attr(w, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &w->sm_count, err)) < 0 ||
        (rc = attr(w, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, &w->l2_bytes, err)) < 0 ||
        (rc = attr(w, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, &w->smem_optin, err)) <
            0 ||
        (rc = attr(w, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, &w->smem_block, err)) < 0 ||
        (rc = attr(w, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, &w->smem_sm, err)) <
            0 ||
        (rc = attr(w, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, &w->regs_per_sm, err)) <
            0 ||
        (rc = attr(w, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, &w->max_regs_block, err)) < 0 ||
        (rc = attr(w, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, &w->max_threads_block, err)) < 0 ||
        (rc = attr(w, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, &w->max_threads_sm,
                   err)) < 0 ||
        (rc = attr(w, CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, &w->max_blocks_sm, err)) <
            0 ||
        (rc = attr(w, CU_DEVICE_ATTRIBUTE_WARP_SIZE, &w->warp_size, err)) < 0)
        return rc;
    /* The nominal clock (CUDA 13 still answers it); the timer reads the current one. */
    if (attr(w, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, &w->clock_khz, NULL) < 0)
        w->clock_khz = 0;
    snprintf(w->arch, sizeof(w->arch), "sm_%d%d", w->attr_major, w->attr_minor);
    int maj = 0, min = 0;
    if (nvrtcVersion(&maj, &min) == NVRTC_SUCCESS)
        w->cuda_version = maj * 1000 + min * 10;
    if (srch_lt_open(&w->lt, &w->lt_err) < 0) {
        w->lt = NULL;
        kt_log_warn(WK_TAG, "no cuBLASLt: %.240s", w->lt_err.msg);
    }
    kt_log_info(WK_TAG, "%s (%s, %d SMs), driver %d, NVRTC %d", w->name, w->arch, w->sm_count,
                w->cu.driver_version, w->cuda_version);
    return 0;
}

static int handle_hello(wk *w)
{
    if (w->init_rc < 0)
        return reply_error(w, w->init_rc, w->init_err.msg);
    if (!w->selftest_done)
        selftest(w);
    if (w->dead) {
        reply_error(w, -EFAULT, w->selftest);
        return 0;
    }
    reply_begin(w);
    msgpack_packer *pk = &w->pk;
    msgpack_pack_map(pk, 5);
    kt_mp_pack_kbool(pk, "ok", true);
    kt_mp_pack_str(pk, "gpu");
    msgpack_pack_map(pk, 19);
    kt_mp_pack_kstr(pk, "name", w->name);
    kt_mp_pack_ki64(pk, "sm_major", w->attr_major);
    kt_mp_pack_ki64(pk, "sm_minor", w->attr_minor);
    kt_mp_pack_ki64(pk, "sm_count", w->sm_count);
    kt_mp_pack_ki64(pk, "mem_bytes", (int64_t)w->mem_bytes);
    kt_mp_pack_ki64(pk, "driver_version", w->cu.driver_version);
    kt_mp_pack_ki64(pk, "cuda_version", w->cuda_version);
    kt_mp_pack_ki64(pk, "sm_clock_khz", w->clock_khz);
    kt_mp_pack_ki64(pk, "l2_bytes", w->l2_bytes);
    kt_mp_pack_ki64(pk, "smem_per_block_optin", w->smem_optin);
    kt_mp_pack_ki64(pk, "regs_per_sm", w->regs_per_sm);
    /* Beyond worker.h's list: the rest of what ops_device wants. */
    kt_mp_pack_ki64(pk, "smem_per_block", w->smem_block);
    kt_mp_pack_ki64(pk, "smem_per_sm", w->smem_sm);
    kt_mp_pack_ki64(pk, "max_threads_per_block", w->max_threads_block);
    kt_mp_pack_ki64(pk, "max_threads_per_sm", w->max_threads_sm);
    kt_mp_pack_ki64(pk, "max_blocks_per_sm", w->max_blocks_sm);
    kt_mp_pack_ki64(pk, "max_regs_per_block", w->max_regs_block);
    kt_mp_pack_ki64(pk, "warp_size", w->warp_size);
    kt_mp_pack_kstr(pk, "arch", w->arch);
    kt_mp_pack_kbool(pk, "cupti", w->timer != NULL);
    kt_mp_pack_kbool(pk, "cublaslt", w->lt != NULL);
    kt_mp_pack_kstr(pk, "selftest", w->selftest);
    return reply_send(w);
}

/* Handles one request. Returns 0 to go on, 1 after "quit", or a negative errno when the
 * reply could not be written (the supervisor is gone). */
static int dispatch(wk *w, const msgpack_object *o)
{
    const msgpack_object *op = kt_mp_get(o, "op");
    int rc;
    if (!op || op->type != MSGPACK_OBJECT_STR)
        return reply_error(w, -EPROTO, "request: expected a map with a string 'op'");
#define OP_IS(s) (op->via.str.size == strlen(s) && memcmp(op->via.str.ptr, s, strlen(s)) == 0)
    if (OP_IS("eval"))
        rc = handle_eval(w, o);
    else if (OP_IS("hello"))
        rc = handle_hello(w);
    else if (OP_IS("retime"))
        rc = handle_retime(w, o);
    else if (OP_IS("forget"))
        rc = handle_forget(w, o);
    else if (OP_IS("reference"))
        rc = handle_reference(w, o);
    else if (OP_IS("quit")) {
        reply_begin(w);
        msgpack_pack_map(&w->pk, 1);
        kt_mp_pack_kbool(&w->pk, "ok", true);
        rc = reply_send(w);
        return rc < 0 ? rc : 1;
    } else
        rc = reply_error(w, -EINVAL, "unknown op");
#undef OP_IS
    return rc;
}

static void wk_free(wk *w)
{
    if (!w->dead) {
        for (int i = 0; i < WK_MAX_CANDS; i++)
            srch_wk_cand_release(w, &w->cands[i]);
        for (int i = 0; i < w->n_data; i++)
            srch_wk_data_free(w, w->data[i]);
        srch_wk_cmp_free(w);
        if (w->lt)
            srch_lt_close(w->lt);
        if (w->timer)
            srch_timer_close(w->timer); /* frees its scrub buffer: before the context goes */
        if (w->have_cu)
            srch_cuda_close(&w->cu);
    }
    msgpack_sbuffer_destroy(&w->sb);
    free(w);
}

int srch_worker_main(int in_fd, int out_fd)
{
    /* A supervisor that went away shows up as EPIPE on the next reply, not as a signal. */
    signal(SIGPIPE, SIG_IGN);
    wk *w = calloc(1, sizeof(*w));
    if (!w) {
        kt_log_err(WK_TAG, "out of memory");
        return 1;
    }
    w->in_fd = in_fd;
    w->out_fd = out_fd;
    msgpack_sbuffer_init(&w->sb);
    msgpack_packer_init(&w->pk, &w->sb, msgpack_sbuffer_write);
    w->init_rc = wk_init(w, &w->init_err);
    if (w->init_rc < 0)
        kt_log_warn(WK_TAG, "no GPU: %s", w->init_err.msg);

    msgpack_unpacker up;
    msgpack_unpacked msg;
    int status = 0;
    if (!msgpack_unpacker_init(&up, 1 << 16)) {
        kt_log_err(WK_TAG, "out of memory");
        wk_free(w);
        return 1;
    }
    msgpack_unpacked_init(&msg);
    for (;;) {
        msgpack_unpack_return ur;
        while ((ur = msgpack_unpacker_next(&up, &msg)) == MSGPACK_UNPACK_SUCCESS) {
            int rc = dispatch(w, &msg.data);
            if (w->dead) {
                kt_log_err(WK_TAG, "the CUDA context is dead (sticky error): exiting");
                status = WK_EXIT_FAULT;
                goto out;
            }
            if (rc < 0) {
                status = 1;
                goto out;
            }
            if (rc == 1)
                goto out;
        }
        if (ur != MSGPACK_UNPACK_CONTINUE) {
            kt_log_err(WK_TAG, "malformed request stream (msgpack %d)", (int)ur);
            status = WK_EXIT_PROTO;
            goto out;
        }
        if (msgpack_unpacker_message_size(&up) > WK_MAX_MSG) {
            kt_log_err(WK_TAG, "request over %zu bytes", WK_MAX_MSG);
            status = WK_EXIT_PROTO;
            goto out;
        }
        if (!msgpack_unpacker_reserve_buffer(&up, 1 << 16)) {
            kt_log_err(WK_TAG, "out of memory reading a request");
            status = 1;
            goto out;
        }
        ssize_t n =
            read(in_fd, msgpack_unpacker_buffer(&up), msgpack_unpacker_buffer_capacity(&up));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            kt_log_err(WK_TAG, "read: %s", strerror(errno));
            status = 1;
            goto out;
        }
        if (n == 0)
            goto out; /* end of input: the supervisor closed the pipe */
        msgpack_unpacker_buffer_consumed(&up, (size_t)n);
    }
out:
    msgpack_unpacked_destroy(&msg);
    msgpack_unpacker_destroy(&up);
    wk_free(w);
    return status;
}
