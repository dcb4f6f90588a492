/* Naive fp64 reference kernels on the GPU: the ground truth candidates are verified against.
 *
 * Every kernel reads and writes doubles (the worker converts graph inputs to double first) and
 * computes exactly what ops/reference.c computes, in the same order where the order matters:
 * one thread per output element (attention: one thread per query row, which owns the Dv
 * outputs of that row, so the softmax of the row is computed once instead of Dv times).
 *
 * The reference family (ops_family_reference) covers one node per group. For a whole graph,
 * ops_emit_reference_graph emits one source with one kernel per node, launched in topological
 * order; a whole graph needs more launches than ops_emitted's OPS_MAX_KERNELS, hence
 * ops_ref_program. */
#pragma once

#include "family.h"

typedef struct ops_ref_program {
    char *source;               /* malloc'd CUDA C holding every kernel */
    int n_kernels;              /* one per node of the graph */
    ops_kernel_launch *kernels; /* malloc'd, n_kernels entries, launched in order */
    int64_t workspace_bytes;    /* doubles of the intermediate tensors, 256-byte aligned */
} ops_ref_program;

/* Emits the fp64 reference of g, which must be validated, fully bound and canonical (no
 * composites). Kernel k computes node order[k] of a topological order; its parameters are the
 * node's distinct tensor operands (first-use order) then its output, each as double *. Graph
 * inputs and outputs are OPS_ARG_TENSOR; intermediates live in one double workspace
 * (OPS_ARG_WORKSPACE with byte offsets). Returns 0, -EINVAL (detail in d) or -ENOMEM; on
 * success the caller frees out with ops_ref_program_free. */
int ops_emit_reference_graph(const ops_graph *g, ops_ref_program *out, ops_diag *d);
void ops_ref_program_free(ops_ref_program *p);
