/* The library family's machine-readable form: one cuBLASLt matmul (cublasLtMatmul) described
 * without cuBLAS headers, for the GPU worker (which enumerates the algorithms of
 * cublasLtMatmulAlgoGetHeuristic at run time and runs result number heuristic_index) and for
 * the deploy-time runtime.
 *
 * Layouts. cuBLASLt is column-major; ktune tensors are row-major. A row-major matrix X[r][c]
 * is, read column-major with leading dimension c, the matrix X^T (c x r). So the row-major
 *     C[M,N] = op(A) op(B)            (A [M,K] or [K,M], B [K,N] or [N,K])
 * is computed as its column-major transpose
 *     C^T (N x M, ldc = N) = op(B)^T op(A)^T,
 * i.e. cuBLASLt's "A" operand is the graph's B (the weight) and cuBLASLt's "B" operand is the
 * graph's A:  m = N, n = M, k = K;
 *     transa = transpose_b ? T : N,  lda = transpose_b ? K : N,  A layout rows x cols =
 *              transa == N ? N x K : K x N;
 *     transb = transpose_a ? T : N,  ldb = transpose_a ? M : K,  B layout rows x cols =
 *              transb == N ? K x M : M x K;
 *     C = D = the output, N x M, ldc = N.
 * A bias over the rows of the row-major output (one value per column n) is, in that view, a
 * vector of length m = N broadcast over the columns: exactly what CUBLASLT_EPILOGUE_BIAS adds.
 *
 * Batches: batch dims of each operand are either equal to the output's (stride = one matrix)
 * or absent/all 1 (stride 0, the matrix is reused); cuBLASLt takes them through
 * CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT and CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET (elements).
 *
 * Enum values are cuBLAS's own, so the worker may cast them directly:
 *   ops_lt_op       = cublasOperation_t   (CUBLAS_OP_N 0, CUBLAS_OP_T 1)
 *   ops_lt_dtype    = cudaDataType_t      (CUDA_R_32F 0, CUDA_R_16F 2, CUDA_R_16BF 14)
 *   ops_lt_compute  = cublasComputeType_t (CUBLAS_COMPUTE_32F 68, _FAST_16F 74, _FAST_16BF 75,
 *                                          _FAST_TF32 77)
 *   ops_lt_epilogue = cublasLtEpilogue_t  (DEFAULT 1, RELU 2, BIAS 4, RELU_BIAS 6, GELU 32,
 *                                          GELU_BIAS 36)
 * CUBLASLT_EPILOGUE_GELU is the tanh approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715
 * x^3))) — PyTorch relies on this when it fuses gelu(approximate="tanh") into cuBLASLt
 * (pytorch/pytorch#104061) — so only the graph op gelu_tanh maps onto it, never gelu (erf). */
#pragma once

#include "family.h"

typedef enum ops_lt_op { OPS_LT_OP_N = 0, OPS_LT_OP_T = 1 } ops_lt_op;

typedef enum ops_lt_dtype {
    OPS_LT_R_32F = 0,
    OPS_LT_R_16F = 2,
    OPS_LT_R_16BF = 14,
} ops_lt_dtype;

typedef enum ops_lt_compute {
    OPS_LT_COMPUTE_32F = 68,
    OPS_LT_COMPUTE_32F_FAST_16F = 74,
    OPS_LT_COMPUTE_32F_FAST_16BF = 75,
    OPS_LT_COMPUTE_32F_FAST_TF32 = 77,
} ops_lt_compute;

typedef enum ops_lt_epilogue {
    OPS_LT_EPILOGUE_DEFAULT = 1,
    OPS_LT_EPILOGUE_RELU = 2,
    OPS_LT_EPILOGUE_BIAS = 4,
    OPS_LT_EPILOGUE_RELU_BIAS = 6,
    OPS_LT_EPILOGUE_GELU = 32,
    OPS_LT_EPILOGUE_GELU_BIAS = 36,
} ops_lt_epilogue;

/* Workspace the worker hands cublasLtMatmul (CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES); the
 * candidate's ops_emitted.workspace_bytes says the same. 32 MiB is NVIDIA's advice for Hopper. */
#define OPS_LT_WORKSPACE_BYTES ((int64_t)32 << 20)

typedef struct ops_lt_desc {
    /* cublasLtMatmulDesc: compute and scale types, operations, epilogue. */
    ops_lt_compute compute;
    ops_lt_dtype scale_type; /* alpha and beta are of this type (always f32 here) */
    double alpha, beta;      /* 1 and 0: D = epilogue(A B [+ bias]) */
    ops_lt_op transa, transb;
    ops_lt_epilogue epilogue;
    int32_t bias_tensor; /* graph tensor of CUBLASLT_MATMUL_DESC_BIAS_POINTER, or -1 */
    /* Problem in cuBLASLt's column-major terms (see the comment atop this file). */
    int64_t m, n, k;
    int64_t lda, ldb, ldc;                  /* ldc is also D's */
    int64_t a_rows, a_cols, b_rows, b_cols; /* the stored layouts, as cublasLtMatrixLayoutCreate
                                               takes them */
    ops_lt_dtype a_type, b_type, c_type;    /* C and D share c_type */
    int32_t batch_count;
    int64_t stride_a, stride_b, stride_c; /* elements between batches; 0 reuses the matrix */
    /* Graph tensors bound to cuBLASLt's A, B and C = D. */
    int32_t a_tensor, b_tensor, c_tensor;
    int heuristic_index; /* which cublasLtMatmulAlgoGetHeuristic result to run */
    int64_t workspace_bytes;
} ops_lt_desc;

/* Describes the cuBLASLt call of a library-family candidate (grp must match the family).
 * Returns 0, or -EINVAL with detail in d when the group is not a matmul with a mappable
 * epilogue or the schedule is not of this family. Pure; thread-safe. */
int ops_library_describe(const ops_group *grp, const ops_schedule *s, ops_lt_desc *out,
                         ops_diag *d);
