/* cuBLASLt matmuls for library-family candidates and baselines, with libcublasLt loaded at run
 * time (dlopen of libcublasLt.so.13) in the GPU worker only. A plan is one ops_lt_desc with one
 * of the algorithms cublasLtMatmulAlgoGetHeuristic returns (desc->heuristic_index). */
#pragma once

#include "cudrv.h"
#include "ops/library.h"

typedef struct srch_lt srch_lt;
typedef struct srch_lt_plan srch_lt_plan;

/* -ENODEV when libcublasLt is missing; detail in err. Needs the CUDA context current. */
int srch_lt_open(srch_lt **out, kt_err *err);
void srch_lt_close(srch_lt *lt);

/* Builds the matmul description, the layouts and the epilogue, asks the heuristic for up to
 * 8 algorithms and keeps result desc->heuristic_index. -ENOENT when the heuristic returned fewer
 * (the candidate is "unavailable", not wrong); n_available (optional) gets how many it returned. */
int srch_lt_plan_new(srch_lt *lt, const ops_lt_desc *desc, srch_lt_plan **out, int *n_available,
                     kt_err *err);
void srch_lt_plan_free(srch_lt_plan *p);
/* Enqueues the matmul on the default stream. Pointers are to the tensors desc names (a_tensor,
 * b_tensor, c_tensor, bias_tensor); workspace holds desc->workspace_bytes. */
int srch_lt_run(srch_lt_plan *p, CUdeviceptr a, CUdeviceptr b, CUdeviceptr c, CUdeviceptr bias,
                CUdeviceptr workspace, kt_err *err);
/* The same on stream (NULL: the legacy default stream). A plan holds the bias pointer of its
 * last run, so calls on one plan must not overlap: the caller serialises them (the enqueued
 * matmul no longer reads the plan once this returns). */
int srch_lt_run_on(srch_lt_plan *p, CUstream stream, CUdeviceptr a, CUdeviceptr b, CUdeviceptr c,
                   CUdeviceptr bias, CUdeviceptr workspace, kt_err *err);
