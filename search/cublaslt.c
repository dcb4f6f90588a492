/* cuBLASLt matmuls for library candidates (see cublaslt.h and ops/library.h).
 *
 * libcublasLt is loaded at run time like the driver: only the GPU worker needs it, and the
 * toolkit library is large. cublasLt.h is included for its types and prototypes only; every
 * call goes through a pointer resolved with dlsym. ops_lt_desc's enums carry cuBLAS's own
 * values, so they are cast, not translated. */
#include "cublaslt.h"

/* cublasLt.h declares cublasLtLoggerForceDisable() without (void): not ours to fix. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cublasLt.h>
#pragma GCC diagnostic pop
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#define SRCH_LT_STR(x)     #x
#define SRCH_LT_XSTR(x)    SRCH_LT_STR(x)
#define SRCH_LT_HEURISTICS 8 /* results asked of the heuristic: the library family's knob range */

#define SRCH_LT_FUNCS(X)                                                                           \
    X(cublasLtCreate)                                                                              \
    X(cublasLtDestroy)                                                                             \
    X(cublasLtGetVersion)                                                                          \
    X(cublasLtGetStatusName)                                                                       \
    X(cublasLtGetStatusString)                                                                     \
    X(cublasLtMatmulDescCreate)                                                                    \
    X(cublasLtMatmulDescDestroy)                                                                   \
    X(cublasLtMatmulDescSetAttribute)                                                              \
    X(cublasLtMatrixLayoutCreate)                                                                  \
    X(cublasLtMatrixLayoutDestroy)                                                                 \
    X(cublasLtMatrixLayoutSetAttribute)                                                            \
    X(cublasLtMatmulPreferenceCreate)                                                              \
    X(cublasLtMatmulPreferenceDestroy)                                                             \
    X(cublasLtMatmulPreferenceSetAttribute)                                                        \
    X(cublasLtMatmulAlgoGetHeuristic)                                                              \
    X(cublasLtMatmul)

struct srch_lt {
    void *lib;
#define SRCH_LT_MEMBER(name) __typeof__(name) *p_##name;
    SRCH_LT_FUNCS(SRCH_LT_MEMBER)
#undef SRCH_LT_MEMBER
    cublasLtHandle_t handle;
};

struct srch_lt_plan {
    srch_lt *lt;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c; /* D shares C's layout */
    cublasLtMatmulAlgo_t algo;
    float alpha, beta;
    bool bias;
    size_t workspace_bytes;
};

/* The one translation of cublasStatus_t into our errors: 0 on success, else a negative errno
 * with "what: CUBLAS_STATUS_...: text" in err. */
static int lt_check(const srch_lt *lt, cublasStatus_t st, const char *what, kt_err *err)
{
    if (st == CUBLAS_STATUS_SUCCESS)
        return 0;
    const char *name = "CUBLAS_STATUS_UNKNOWN", *text = "";
    if (lt && lt->p_cublasLtGetStatusName)
        name = lt->p_cublasLtGetStatusName(st);
    if (lt && lt->p_cublasLtGetStatusString)
        text = lt->p_cublasLtGetStatusString(st);
    int code;
    switch (st) {
    case CUBLAS_STATUS_ALLOC_FAILED:
        code = -ENOMEM;
        break;
    case CUBLAS_STATUS_INVALID_VALUE:
        code = -EINVAL;
        break;
    case CUBLAS_STATUS_NOT_SUPPORTED:
        code = -ENOTSUP;
        break;
    case CUBLAS_STATUS_NOT_INITIALIZED:
    case CUBLAS_STATUS_ARCH_MISMATCH:
    case CUBLAS_STATUS_LICENSE_ERROR:
        code = -ENODEV;
        break;
    default: /* MAPPING_ERROR, EXECUTION_FAILED, INTERNAL_ERROR */
        code = -EIO;
    }
    kt_log_debug("cublaslt", "%s: %s: %s", what, name ? name : "?", text ? text : "");
    return kt_err_set(err, code, "%s: %s: %s", what, name ? name : "?", text ? text : "");
}

int srch_lt_open(srch_lt **out, kt_err *err)
{
    *out = NULL;
    srch_lt *lt = calloc(1, sizeof(*lt));
    if (!lt)
        return kt_err_set(err, -ENOMEM, "out of memory");
    int rc;
    lt->lib = dlopen("libcublasLt.so.13", RTLD_NOW | RTLD_LOCAL);
    if (!lt->lib)
        lt->lib = dlopen("libcublasLt.so", RTLD_NOW | RTLD_LOCAL);
    if (!lt->lib) {
        rc = kt_err_set(err, -ENODEV, "no cuBLASLt (libcublasLt.so.13): %s", dlerror());
        goto fail;
    }
#define SRCH_LT_LOAD(name)                                                                         \
    *(void **)&lt->p_##name = dlsym(lt->lib, SRCH_LT_XSTR(name));                                  \
    if (!lt->p_##name) {                                                                           \
        rc = kt_err_set(err, -ENODEV, "cuBLASLt lacks %s (library too old?)", SRCH_LT_XSTR(name)); \
        goto fail;                                                                                 \
    }
    SRCH_LT_FUNCS(SRCH_LT_LOAD)
#undef SRCH_LT_LOAD
    /* Types and attribute sizes come from the 13.x headers; another major may differ. */
    size_t version = lt->p_cublasLtGetVersion();
    if (version / 10000 != CUBLAS_VER_MAJOR) {
        rc = kt_err_set(err, -ENODEV, "cuBLASLt %zu is not of major release %d (the headers')",
                        version, CUBLAS_VER_MAJOR);
        goto fail;
    }
    if ((rc = lt_check(lt, lt->p_cublasLtCreate(&lt->handle), "cublasLtCreate", err)) < 0)
        goto fail;
    *out = lt;
    return 0;
fail:
    if (lt->lib)
        dlclose(lt->lib);
    free(lt);
    return rc;
}

void srch_lt_close(srch_lt *lt)
{
    if (!lt)
        return;
    if (lt->handle)
        lt->p_cublasLtDestroy(lt->handle);
    dlclose(lt->lib);
    free(lt);
}

static int set_desc(srch_lt *lt, cublasLtMatmulDesc_t op, cublasLtMatmulDescAttributes_t attr,
                    const void *v, size_t n, const char *what, kt_err *err)
{
    return lt_check(lt, lt->p_cublasLtMatmulDescSetAttribute(op, attr, v, n), what, err);
}

/* A column-major layout rows x cols with leading dimension ld, batched when count > 1. */
static int make_layout(srch_lt *lt, cublasLtMatrixLayout_t *out, ops_lt_dtype type, int64_t rows,
                       int64_t cols, int64_t ld, int32_t count, int64_t stride, kt_err *err)
{
    int rc = lt_check(lt,
                      lt->p_cublasLtMatrixLayoutCreate(out, (cudaDataType)type, (uint64_t)rows,
                                                       (uint64_t)cols, ld),
                      "cublasLtMatrixLayoutCreate", err);
    if (rc < 0 || count <= 1)
        return rc;
    if ((rc = lt_check(lt,
                       lt->p_cublasLtMatrixLayoutSetAttribute(
                           *out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)),
                       "layout batch count", err)) < 0)
        return rc;
    return lt_check(lt,
                    lt->p_cublasLtMatrixLayoutSetAttribute(
                        *out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)),
                    "layout batch stride", err);
}

static bool bias_epilogue(ops_lt_epilogue e)
{
    return e == OPS_LT_EPILOGUE_BIAS || e == OPS_LT_EPILOGUE_RELU_BIAS ||
           e == OPS_LT_EPILOGUE_GELU_BIAS;
}

int srch_lt_plan_new(srch_lt *lt, const ops_lt_desc *desc, srch_lt_plan **out, int *n_available,
                     kt_err *err)
{
    *out = NULL;
    if (n_available)
        *n_available = 0;
    if (!lt || !desc)
        return kt_err_set(err, -EINVAL, "srch_lt_plan_new: missing handle or description");
    if (desc->scale_type != OPS_LT_R_32F)
        return kt_err_set(err, -EINVAL, "cuBLASLt plan: only f32 alpha/beta are supported");
    if (desc->heuristic_index < 0 || desc->heuristic_index >= SRCH_LT_HEURISTICS)
        return kt_err_set(err, -EINVAL, "cuBLASLt plan: heuristic index %d outside 0..%d",
                          desc->heuristic_index, SRCH_LT_HEURISTICS - 1);
    if (desc->m <= 0 || desc->n <= 0 || desc->k <= 0 || desc->workspace_bytes < 0)
        return kt_err_set(err, -EINVAL, "cuBLASLt plan: empty problem %lldx%lldx%lld",
                          (long long)desc->m, (long long)desc->n, (long long)desc->k);
    srch_lt_plan *p = calloc(1, sizeof(*p));
    if (!p)
        return kt_err_set(err, -ENOMEM, "out of memory");
    p->lt = lt;
    p->alpha = (float)desc->alpha;
    p->beta = (float)desc->beta;
    p->bias = bias_epilogue(desc->epilogue);
    p->workspace_bytes = (size_t)desc->workspace_bytes;
    cublasLtMatmulPreference_t pref = NULL;
    int32_t transa = desc->transa, transb = desc->transb;
    uint32_t epilogue = (uint32_t)desc->epilogue;
    uint64_t ws = (uint64_t)desc->workspace_bytes;
    int rc;
    if ((rc = lt_check(lt,
                       lt->p_cublasLtMatmulDescCreate(&p->op, (cublasComputeType_t)desc->compute,
                                                      (cudaDataType_t)desc->scale_type),
                       "cublasLtMatmulDescCreate", err)) < 0 ||
        (rc = set_desc(lt, p->op, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof(transa), "transa",
                       err)) < 0 ||
        (rc = set_desc(lt, p->op, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof(transb), "transb",
                       err)) < 0 ||
        (rc = set_desc(lt, p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue),
                       "epilogue", err)) < 0)
        goto fail;
    /* The bias vector has D's type (cuBLASLt's default for BIAS_DATA_TYPE) and, in a batch,
     * the default bias batch stride 0: one vector for every matrix, as ops/library.h maps it. */
    if ((rc = make_layout(lt, &p->a, desc->a_type, desc->a_rows, desc->a_cols, desc->lda,
                          desc->batch_count, desc->stride_a, err)) < 0 ||
        (rc = make_layout(lt, &p->b, desc->b_type, desc->b_rows, desc->b_cols, desc->ldb,
                          desc->batch_count, desc->stride_b, err)) < 0 ||
        (rc = make_layout(lt, &p->c, desc->c_type, desc->m, desc->n, desc->ldc, desc->batch_count,
                          desc->stride_c, err)) < 0)
        goto fail;
    if ((rc = lt_check(lt, lt->p_cublasLtMatmulPreferenceCreate(&pref),
                       "cublasLtMatmulPreferenceCreate", err)) < 0 ||
        (rc = lt_check(lt,
                       lt->p_cublasLtMatmulPreferenceSetAttribute(
                           pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
                       "max workspace", err)) < 0)
        goto fail;
    cublasLtMatmulHeuristicResult_t res[SRCH_LT_HEURISTICS];
    int got = 0;
    memset(res, 0, sizeof(res));
    if ((rc = lt_check(lt,
                       lt->p_cublasLtMatmulAlgoGetHeuristic(lt->handle, p->op, p->a, p->b, p->c,
                                                            p->c, pref, SRCH_LT_HEURISTICS, res,
                                                            &got),
                       "cublasLtMatmulAlgoGetHeuristic", err)) < 0)
        goto fail;
    if (n_available)
        *n_available = got;
    if (desc->heuristic_index >= got) {
        /* Not a failure of the candidate: the heuristic has fewer algorithms for this shape. */
        rc = kt_err_set(err, -ENOENT, "cuBLASLt heuristic returned %d algorithms, not index %d",
                        got, desc->heuristic_index);
        goto fail;
    }
    p->algo = res[desc->heuristic_index].algo;
    lt->p_cublasLtMatmulPreferenceDestroy(pref);
    *out = p;
    return 0;
fail:
    if (pref)
        lt->p_cublasLtMatmulPreferenceDestroy(pref);
    srch_lt_plan_free(p);
    return rc;
}

void srch_lt_plan_free(srch_lt_plan *p)
{
    if (!p)
        return;
    srch_lt *lt = p->lt;
    if (p->c)
        lt->p_cublasLtMatrixLayoutDestroy(p->c);
    if (p->b)
        lt->p_cublasLtMatrixLayoutDestroy(p->b);
    if (p->a)
        lt->p_cublasLtMatrixLayoutDestroy(p->a);
    if (p->op)
        lt->p_cublasLtMatmulDescDestroy(p->op);
    free(p);
}

int srch_lt_run(srch_lt_plan *p, CUdeviceptr a, CUdeviceptr b, CUdeviceptr c, CUdeviceptr bias,
                CUdeviceptr workspace, kt_err *err)
{
    return srch_lt_run_on(p, NULL, a, b, c, bias, workspace, err);
}

int srch_lt_run_on(srch_lt_plan *p, CUstream stream, CUdeviceptr a, CUdeviceptr b, CUdeviceptr c,
                   CUdeviceptr bias, CUdeviceptr workspace, kt_err *err)
{
    if (!p || !a || !b || !c)
        return kt_err_set(err, -EINVAL, "srch_lt_run: missing plan or operand");
    if (p->bias && !bias)
        return kt_err_set(err, -EINVAL, "srch_lt_run: the epilogue needs a bias vector");
    if (p->workspace_bytes && !workspace)
        return kt_err_set(err, -EINVAL, "srch_lt_run: the plan needs %zu bytes of workspace",
                          p->workspace_bytes);
    srch_lt *lt = p->lt;
    int rc;
    if (p->bias) {
        /* Set per run: the same plan serves every input set the worker binds. */
        void *ptr = (void *)(uintptr_t)bias;
        if ((rc = set_desc(lt, p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &ptr, sizeof(ptr),
                           "bias pointer", err)) < 0)
            return rc;
    }
    /* C = D with beta 0: cuBLASLt reads no C, and in-place C = D is allowed. */
    return lt_check(lt,
                    lt->p_cublasLtMatmul(lt->handle, p->op, &p->alpha, (const void *)(uintptr_t)a,
                                         p->a, (const void *)(uintptr_t)b, p->b, &p->beta,
                                         (const void *)(uintptr_t)c, p->c, (void *)(uintptr_t)c,
                                         p->c, &p->algo, (void *)(uintptr_t)workspace,
                                         p->workspace_bytes, (cudaStream_t)stream),
                    "cublasLtMatmul", err);
}
