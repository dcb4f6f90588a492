/* Verification of a candidate against the fp64 reference of its data set (the worker's modules:
 * search/worker_internal.h).
 *
 * Verification, per seed: outputs (and the workspace) poisoned with 0xff bytes, which are NaN
 * in f32, f16 and bf16, so an unwritten element fails; one run; the outputs compared with the
 * reference; a second run on the same inputs compared bitwise with the first (a difference is a
 * race). The comparison, per output, judges every element by its reference value r (ops_dtype_store
 * rounding decides what overflows):
 *   - r NaN: the output must be NaN;
 *   - r infinite, or finite but overflowing the output dtype: the output must be the infinity of
 *     r's sign;
 *   - r finite and representable: the output must be finite, and is compared by value below.
 * An element that breaks one of these rules fails the candidate ("differ in NaN/Inf"). The
 * error measures are over the elements compared by value, and an output with none of them on a
 * seed fails ("too few elements compared"): f32 add(x, 1e39) overflows everywhere, and a kernel
 * would otherwise pass with nothing compared. For the compared elements:
 *   - normwise  ||out - ref||_2 / ||ref||_2 <= tol, with tol the request's tolerance or, when
 *     that is <= 0, docs/evaluation.md's default: f32 1e-5 (exact), 5e-4 (tf32, graphs with a
 *     contraction), 2e-2 (reduced: f16 or bf16 math on f32 data), raised to 3e-3 when any
 *     input or output is f16 and to 2e-2 when any is bf16;
 *   - elementwise |out - ref| <= atol + rtol |ref| with
 *       rtol = (r_store(output dtype) + r_math(precision) * sqrt(L)) * max(1, tol / default),
 *       r_store: f32 1e-6, f16 2e-3, bf16 1.6e-2 (a few units of the last stored place),
 *       r_math:  exact 2e-6 (fp32 accumulation), tf32 2e-4, reduced 4e-3; for attention on
 *                f16 / bf16 data at least the operands' unit roundoff (2^-11, 2^-8), since
 *                the probabilities P are rounded to that type for the P V product (as every
 *                flash-attention kernel does): under causal masking the first query rows
 *                average a few values with cancellation, far from the output's rms,
 *       L the longest reduction of the subgraph (matmul K, reduced extent, conv C/g*KH*KW,
 *       attention max(keys, head dim); 1 for pointwise),
 *       atol = rtol * rms(ref): outputs near zero from cancellation are judged against the
 *       scale of the output, not against their own tiny value.
 * err_norm is the worst normwise error over outputs and seeds; err_max the worst elementwise
 * ratio |out - ref| / (atol + rtol |ref|) (<= 1 passes).
 *
 * rms(ref) is over the compared elements too. err_norm is Inf for an output with an element of the
 * wrong NaN/Inf class or with nothing compared.
 *
 * The comparison and the race check run on the GPU (worker_verify.cu, compiled with NVRTC once
 * per process): per output, block partials of sum (out - ref)^2, sum ref^2, the worst ratio (first
 * index on ties), the count of compared elements, the count and first index of elements of the
 * wrong NaN/Inf class, added on the host in block order; the race check copies the first run's
 * outputs aside on the device and counts the elements that differ bitwise. Only those scalars
 * (and, for a message, the one offending element) are downloaded. The sums are added in a fixed,
 * deterministic order (not a sequential one: err_norm and rms(ref) may differ from a sequential
 * sum in the last bits). */
#include "worker_internal.h"
#include "srch_embedded.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WK_CMP_BLOCKS  1024
#define WK_CMP_THREADS 256

/* ---- tolerances ---- */

static bool is_contraction(ops_op op)
{
    return op == OPS_MATMUL || ops_op_info_get(op)->kind == OPS_KIND_CONV || op == OPS_ATTENTION;
}

static int64_t node_reduction(const ops_graph *g, const ops_node *n)
{
    const ops_shape *in0 = &g->tensors[n->in[0].tensor].shape;
    switch (n->op) {
    case OPS_MATMUL:
        if (in0->rank < 2)
            return in0->rank == 1 ? in0->d[0].size : 1;
        return n->attrs.transpose_a ? in0->d[in0->rank - 2].size : in0->d[in0->rank - 1].size;
    case OPS_REDUCE_SUM:
    case OPS_REDUCE_MEAN:
    case OPS_REDUCE_MAX:
    case OPS_REDUCE_MIN: {
        int64_t a = ops_shape_numel(in0), b = ops_shape_numel(&g->tensors[n->out].shape);
        return b > 0 ? a / b : a;
    }
    case OPS_CUMSUM:
    case OPS_CUMPROD: { /* the line's last element accumulates all of it */
        int ax = n->attrs.axis < 0 ? n->attrs.axis + in0->rank : n->attrs.axis;
        return ax >= 0 && ax < in0->rank ? in0->d[ax].size : 1;
    }
    case OPS_CONV2D:
    case OPS_CONV3D: {
        const ops_shape *w = &g->tensors[n->in[1].tensor].shape;
        int64_t l = 1;
        for (int k = 1; k < w->rank; k++)
            l *= w->d[k].size;
        return l;
    }
    case OPS_ATTENTION: {
        const ops_shape *k = &g->tensors[n->in[1].tensor].shape;
        int64_t keys = k->rank >= 2 ? k->d[k->rank - 2].size : 1;
        int64_t hd = k->rank >= 1 ? k->d[k->rank - 1].size : 1;
        return keys > hd ? keys : hd;
    }
    default:
        return 1;
    }
}

void srch_wk_tolerance_inputs(wk_data *D)
{
    const ops_graph *g = D->g;
    D->red_len = 1;
    for (int n = 0; n < g->n_nodes; n++) {
        int64_t l = node_reduction(g, &g->nodes[n]);
        if (l > D->red_len)
            D->red_len = l;
        if (is_contraction(g->nodes[n].op))
            D->contraction = true;
        if (g->nodes[n].op == OPS_ATTENTION) {
            ops_dtype dt = g->tensors[g->nodes[n].in[0].tensor].dtype;
            double u = dt == OPS_DT_F16 ? 0x1p-11 : dt == OPS_DT_BF16 ? 0x1p-8 : 0;
            D->p_round = u > D->p_round ? u : D->p_round;
        }
    }
}

static double store_rtol(ops_dtype dt)
{
    return dt == OPS_DT_BF16 ? 1.6e-2 : dt == OPS_DT_F16 ? 2e-3 : 1e-6;
}

static double math_rtol(ops_precision p, bool contraction)
{
    if (p == OPS_PREC_REDUCED)
        return 4e-3;
    return p == OPS_PREC_TF32 && contraction ? 2e-4 : 2e-6;
}

/* ---- comparison on the GPU ---- */

/* The comparison kernels (worker_verify.cu, embedded at build time: srch_embedded.h), compiled
 * with NVRTC once per worker process. One block-partial record per block (kt_part); the host adds
 * the partials in block order, so the result does not depend on scheduling. The dtype helpers
 * mirror ops_dtype_store/_load (graph.c) bit for bit: f16 and bf16 round through float first, to
 * nearest even. */
int srch_wk_cmp_init(wk *w, kt_err *err)
{
    if (w->cmp.ready)
        return 0;
    static const struct {
        const char *entry;
        size_t off;
    } fns[] = {
        {"kt_cmp_f32", offsetof(wk, cmp.f_cmp[OPS_DT_F32])},
        {"kt_cmp_f16", offsetof(wk, cmp.f_cmp[OPS_DT_F16])},
        {"kt_cmp_bf16", offsetof(wk, cmp.f_cmp[OPS_DT_BF16])},
        {"kt_cmp_f64", offsetof(wk, cmp.f_cmp[OPS_DT_F64])},
        {"kt_refstats_f32", offsetof(wk, cmp.f_refstats[OPS_DT_F32])},
        {"kt_refstats_f16", offsetof(wk, cmp.f_refstats[OPS_DT_F16])},
        {"kt_refstats_bf16", offsetof(wk, cmp.f_refstats[OPS_DT_BF16])},
        {"kt_refstats_f64", offsetof(wk, cmp.f_refstats[OPS_DT_F64])},
        {"kt_copy", offsetof(wk, cmp.f_copy)},
        {"kt_widen_f32", offsetof(wk, cmp.f_widen[OPS_DT_F32])},
        {"kt_widen_f16", offsetof(wk, cmp.f_widen[OPS_DT_F16])},
        {"kt_widen_bf16", offsetof(wk, cmp.f_widen[OPS_DT_BF16])},
        {"kt_diff_1", offsetof(wk, cmp.f_diff[0])},
        {"kt_diff_2", offsetof(wk, cmp.f_diff[1])},
        {"kt_diff_4", offsetof(wk, cmp.f_diff[2])},
        {"kt_diff_8", offsetof(wk, cmp.f_diff[3])},
    };
    srch_compile_result cr = {0};
    int rc = srch_nvrtc_compile(srch_embedded_data[SRCH_EMBEDDED_WORKER_VERIFY_CU], w->arch, &cr);
    if (rc < 0 || cr.status != SRCH_COMPILE_OK) {
        rc = kt_err_set(err, rc < 0 ? rc : -EINVAL, "comparison kernels do not compile: %.300s",
                        cr.log ? cr.log : "");
        goto out;
    }
    if ((rc = wk_cu(w, w->cu.p_cuModuleLoadData(&w->cmp.mod, cr.cubin),
                    "load the comparison kernels", err)) < 0)
        goto out;
    for (size_t i = 0; i < KT_ARRAY_LEN(fns); i++)
        if ((rc = wk_cu(w,
                        w->cu.p_cuModuleGetFunction((CUfunction *)((char *)w + fns[i].off),
                                                    w->cmp.mod, fns[i].entry),
                        fns[i].entry, err)) < 0)
            goto out;
    if ((rc = wk_cu(w, w->cu.p_cuMemAlloc(&w->cmp.d_part, WK_CMP_BLOCKS * sizeof(wk_part)),
                    "allocate comparison partials", err)) < 0 ||
        (rc = wk_cu(w, w->cu.p_cuMemAlloc(&w->cmp.d_res, 2 * sizeof(uint64_t)),
                    "allocate comparison results", err)) < 0)
        goto out;
    if (!(w->cmp.h_part = malloc(WK_CMP_BLOCKS * sizeof(wk_part)))) {
        rc = kt_err_set(err, -ENOMEM, "out of memory");
        goto out;
    }
    w->cmp.ready = true;
out:
    srch_compile_result_release(&cr);
    return rc;
}

void srch_wk_cmp_free(wk *w)
{
    if (w->cmp.d_part)
        w->cu.p_cuMemFree(w->cmp.d_part);
    if (w->cmp.d_res)
        w->cu.p_cuMemFree(w->cmp.d_res);
    if (w->cmp.mod)
        w->cu.p_cuModuleUnload(w->cmp.mod);
    free(w->cmp.h_part);
}

static unsigned cmp_grid(int64_t n)
{
    int64_t b = (n + WK_CMP_THREADS - 1) / WK_CMP_THREADS;
    return (unsigned)(b < 1 ? 1 : b > WK_CMP_BLOCKS ? WK_CMP_BLOCKS : b);
}

static int cmp_launch(wk *w, CUfunction f, unsigned grid, void **params, const char *what,
                      kt_err *err)
{
    return wk_cu(w,
                 w->cu.p_cuLaunchKernel(f, grid, 1, 1, WK_CMP_THREADS, 1, 1, 0, NULL, params, NULL),
                 what, err);
}

/* Runs a kernel that writes one wk_part per block, and adds the partials in block order. */
int srch_wk_cmp_reduce(wk *w, CUfunction f, void **params, int64_t n, wk_part *out, kt_err *err)
{
    unsigned grid = cmp_grid(n);
    int rc;
    if ((rc = cmp_launch(w, f, grid, params, "launch a comparison", err)) < 0 ||
        (rc = wk_cu(w, w->cu.p_cuMemcpyDtoH(w->cmp.h_part, w->cmp.d_part, grid * sizeof(wk_part)),
                    "download the comparison", err)) < 0)
        return rc;
    wk_part a = {0, 0, 0, WK_NONE, 0, WK_NONE, 0};
    for (unsigned b = 0; b < grid; b++) {
        const wk_part *p = &w->cmp.h_part[b];
        a.num += p->num;
        a.den += p->den;
        if (p->worst > a.worst || (p->worst == a.worst && p->worst_at < a.worst_at)) {
            a.worst = p->worst;
            a.worst_at = p->worst_at;
        }
        a.bad += p->bad;
        if (p->first_bad < a.first_bad)
            a.first_bad = p->first_bad;
        a.n_cmp += p->n_cmp;
    }
    *out = a;
    return 0;
}

/* dst = src (bytes), on the device. */
int srch_wk_cmp_copy(wk *w, CUdeviceptr dst, CUdeviceptr src, size_t bytes, kt_err *err)
{
    int rc = srch_wk_cmp_init(w, err);
    if (rc < 0 || bytes == 0)
        return rc;
    long long n = (long long)bytes;
    void *params[] = {&src, &dst, &n};
    return cmp_launch(w, w->cmp.f_copy, cmp_grid((n + 15) / 16), params, "copy on the device", err);
}

/* dst (n doubles) = the n values of dtype dt at src, widened on the device: the host loop it
 * replaces cost ~0.1 s per 16 Mi elements, per seed and per reference run. */
int srch_wk_cmp_widen(wk *w, ops_dtype dt, CUdeviceptr src, CUdeviceptr dst, int64_t numel,
                      kt_err *err)
{
    int rc = srch_wk_cmp_init(w, err);
    if (rc < 0 || numel == 0)
        return rc;
    if (dt == OPS_DT_F64)
        return srch_wk_cmp_copy(w, dst, src, (size_t)numel * sizeof(double), err);
    long long n = numel;
    void *params[] = {&src, &dst, &n};
    return cmp_launch(w, w->cmp.f_widen[dt], cmp_grid(n), params, "widen to double", err);
}

/* How many elements of es bytes differ bitwise between a and b, and the first one. */
static int cmp_diff(wk *w, CUdeviceptr a, CUdeviceptr b, size_t bytes, size_t es, uint64_t *count,
                    uint64_t *first, kt_err *err)
{
    int idx = es == 1 ? 0 : es == 2 ? 1 : es == 4 ? 2 : 3;
    long long n = (long long)(bytes / es);
    uint64_t res[2];
    void *params[] = {&a, &b, &n, &w->cmp.d_res};
    int rc;
    if ((rc = wk_cu(w, w->cu.p_cuMemsetD8(w->cmp.d_res, 0, sizeof(uint64_t)), "clear the count",
                    err)) < 0 ||
        (rc = wk_cu(w, w->cu.p_cuMemsetD8(w->cmp.d_res + sizeof(uint64_t), 0xff, sizeof(uint64_t)),
                    "clear the index", err)) < 0 ||
        (rc = cmp_launch(w, w->cmp.f_diff[idx], cmp_grid(n), params, "launch the race check",
                         err)) < 0 ||
        (rc = wk_cu(w, w->cu.p_cuMemcpyDtoH(res, w->cmp.d_res, sizeof(res)),
                    "download the race check", err)) < 0)
        return rc;
    *count = res[0];
    *first = res[1];
    return 0;
}

/* ---- verifying a candidate ---- */

typedef struct wk_check {
    double err_norm, err_max;
    bool pass;
    char why[256];
} wk_check;

/* A value for a message: NaN and the infinities spelled as such. */
static const char *fmt_value(char *buf, size_t len, double v)
{
    if (isnan(v))
        return "NaN";
    if (isinf(v))
        return v > 0 ? "Inf" : "-Inf";
    snprintf(buf, len, "%.6g", v);
    return buf;
}

/* Downloads element k of output j (the last run's) and of the reference of seed s. */
static int fetch_element(wk *w, const wk_data *D, int s, int j, long long k, double *got,
                         double *want, kt_err *err)
{
    ops_dtype dt = D->g->tensors[D->g->outputs[j]].dtype;
    size_t es = ops_dtype_size(dt);
    uint8_t raw[8] = {0};
    int rc;
    if ((rc = wk_cu(w, w->cu.p_cuMemcpyDtoH(raw, D->d_out[j] + (CUdeviceptr)k * es, es),
                    "download an output element", err)) < 0 ||
        (rc = wk_cu(w,
                    w->cu.p_cuMemcpyDtoH(
                        want, D->d_ref[s * D->n_out + j] + (CUdeviceptr)k * sizeof(double),
                        sizeof(double)),
                    "download a reference element", err)) < 0)
        return rc;
    *got = ops_dtype_load(dt, raw);
    return 0;
}

/* Compares output j of the last run (D->d_out[j]) with the reference of seed s, on the GPU
 * (kt_cmp_*): only the sums, the worst ratio and the counts come back. Every element is judged
 * (the header comment's rules); the first failing rule gives chk->why. Returns 0 or a CUDA
 * error. */
static int compare_output(wk *w, const wk_data *D, int s, int j, double tol_norm, double tol_scale,
                          ops_precision prec, wk_check *chk, kt_err *err)
{
    const ops_tensor *t = &D->g->tensors[D->g->outputs[j]];
    CUdeviceptr ref = D->d_ref[s * D->n_out + j], out = D->d_out[j];
    long long n = D->out_numel[j];
    int64_t n_cmp = D->ref_cmp[s * D->n_out + j];
    double rms = n_cmp ? sqrt(D->ref_sumsq[s * D->n_out + j] / (double)n_cmp) : 0;
    double r_math = math_rtol(prec, D->contraction);
    if (D->p_round > r_math)
        r_math = D->p_round;
    double rtol = (store_rtol(t->dtype) + r_math * sqrt((double)D->red_len)) * tol_scale;
    double atol = rtol * rms;
    if (atol <= 0)
        atol = 1e-30; /* an all-zero reference: any difference counts */
    if (t->dtype < OPS_DT_F32 || t->dtype > OPS_DT_F64)
        return kt_err_set(err, -EINVAL, "output '%.40s' has no dtype", t->name);
    void *params[] = {&out, &ref, &n, &atol, &rtol, &w->cmp.d_part};
    wk_part p;
    int rc = srch_wk_cmp_reduce(w, w->cmp.f_cmp[t->dtype], params, n, &p, err);
    if (rc < 0)
        return rc;
    double en = p.den > 0 ? sqrt(p.num / p.den) : sqrt(p.num);
    if (p.bad || p.n_cmp == 0)
        en = INFINITY; /* nothing or not everything measured: no error to report */
    if (en > chk->err_norm)
        chk->err_norm = en;
    if (p.worst > chk->err_max)
        chk->err_max = p.worst;
    if (!chk->pass)
        return 0; /* keep the first reason */
    char b1[32], b2[32];
    double got, want;
    if (p.bad) {
        if ((rc = fetch_element(w, D, s, j, p.first_bad, &got, &want, err)) < 0)
            return rc;
        chk->pass = false;
        snprintf(chk->why, sizeof(chk->why),
                 "output '%.40s' seed %d: %lld elements differ in NaN/Inf from the reference "
                 "(first at element %lld: got %s, reference %s)",
                 t->name, s, p.bad, p.first_bad, fmt_value(b1, sizeof(b1), got),
                 fmt_value(b2, sizeof(b2), want));
    } else if (p.n_cmp == 0) {
        chk->pass = false;
        snprintf(chk->why, sizeof(chk->why),
                 "output '%.40s' seed %d: too few elements compared (0 of %lld: the reference is "
                 "NaN, infinite or overflows %s at every element)",
                 t->name, s, n, ops_dtype_name(t->dtype));
    } else if (en > tol_norm) {
        chk->pass = false;
        snprintf(chk->why, sizeof(chk->why),
                 "output '%.40s' seed %d: normwise error %.3g over tolerance %.3g", t->name, s, en,
                 tol_norm);
    } else if (p.worst > 1) {
        if ((rc = fetch_element(w, D, s, j, p.worst_at, &got, &want, err)) < 0)
            return rc;
        chk->pass = false;
        snprintf(chk->why, sizeof(chk->why),
                 "output '%.40s' seed %d: element %lld is %.3g, reference %.6g (%.3g x the "
                 "elementwise bound)",
                 t->name, s, p.worst_at, got, want, p.worst);
    }
    return 0;
}

/* Verifies a loaded candidate; fills res (status, err_norm, err_max, msg). Returns 0 when the
 * verification ran (pass or not), a negative errno when it could not. */
int srch_wk_verify(wk_cand *c, const srch_eval_req *req, srch_eval_result *res)
{
    wk *w = c->w;
    wk_data *D = c->data;
    kt_err err = {0};
    int rc;
    if ((rc = srch_wk_data_reference(w, D, &err)) < 0) {
        /* A reference that cannot run is our failure, not the candidate's. */
        res->status = srch_wk_fail_status(w, SRCH_LOAD_ERROR);
        snprintf(res->msg, sizeof(res->msg), "reference: %.240s", err.msg);
        return w->dead ? 0 : rc;
    }
    double def = ops_default_tolerance(D->g, req->precision);
    double tol = req->tolerance > 0 ? req->tolerance : def;
    double scale = tol > def ? tol / def : 1.0;
    for (int j = 0; j < D->n_out; j++)
        if (!D->d_prev[j] &&
            (rc = wk_cu(w, w->cu.p_cuMemAlloc(&D->d_prev[j], D->out_bytes[j] ? D->out_bytes[j] : 1),
                        "allocate the race-check copy", &err)) < 0)
            goto cuda_fail;
    wk_check chk = {.pass = true};
    for (int s = 0; s < D->seeds; s++) {
        if ((rc = srch_wk_data_upload(w, D, s, &err)) < 0 ||
            (rc = srch_wk_cand_run_once(c, &err)) < 0)
            goto cuda_fail;
        for (int j = 0; j < D->n_out; j++)
            if ((rc = compare_output(w, D, s, j, tol, scale, req->precision, &chk, &err)) < 0)
                goto cuda_fail;
        if (!chk.pass) {
            res->status = SRCH_WRONG;
            snprintf(res->msg, sizeof(res->msg), "%s", chk.why);
            break;
        }
        for (int j = 0; j < D->n_out; j++)
            if ((rc = srch_wk_cmp_copy(w, D->d_prev[j], D->d_out[j], D->out_bytes[j], &err)) < 0)
                goto cuda_fail;
        if ((rc = srch_wk_cand_run_once(c, &err)) < 0)
            goto cuda_fail;
        for (int j = 0; j < D->n_out; j++) {
            size_t es = ops_dtype_size(D->g->tensors[D->g->outputs[j]].dtype);
            uint64_t ndiff = 0, first = 0;
            if ((rc = cmp_diff(w, D->d_prev[j], D->d_out[j], D->out_bytes[j], es, &ndiff, &first,
                               &err)) < 0)
                goto cuda_fail;
            if (ndiff == 0)
                continue;
            res->status = SRCH_RACE;
            snprintf(res->msg, sizeof(res->msg),
                     "output '%.40s' seed %d: two runs on the same inputs differ bitwise (first "
                     "at element %llu)",
                     D->g->tensors[D->g->outputs[j]].name, s, (unsigned long long)first);
            break;
        }
        if (res->status == SRCH_RACE)
            break;
    }
    res->err_norm = chk.err_norm;
    res->err_max = chk.err_max;
    return 0;
cuda_fail:
    res->status = srch_wk_fail_status(w, SRCH_LOAD_ERROR);
    snprintf(res->msg, sizeof(res->msg), "%.255s", err.msg);
    return 0;
}
