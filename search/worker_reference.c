/* The fp64 reference program on the GPU (ops_emit_reference_graph): emitted for a graph,
 * compiled with NVRTC in this process (cubins kept by SHA-256 of target and source, least
 * recently used goes: the full graph's reference is compiled again for every group that reads
 * intermediates), loaded and run over double buffers. Its outputs, not its module, are what data
 * sets keep (search/worker_data.c). */
#include "worker_internal.h"

#include <stdlib.h>
#include <string.h>

void srch_wk_ref_free(wk *w, wk_ref *r)
{
    if (r->ws)
        w->cu.p_cuMemFree(r->ws);
    free(r->fn);
    if (r->mod)
        w->cu.p_cuModuleUnload(r->mod);
    srch_compile_result_release(&r->cr);
    ops_ref_program_free(&r->prog);
    memset(r, 0, sizeof(*r));
}

/* Compiles r->prog.source into r->cr, or copies the cubin compiled before for the same source
 * and target (the cache holds WK_REF_CUBINS, least recently used goes). */
static int ref_compile(wk *w, wk_ref *r, kt_err *err)
{
    uint8_t key[32];
    size_t len = strlen(r->prog.source);
    char *keyed = malloc(len + sizeof(w->arch) + 1);
    if (!keyed)
        return kt_err_set(err, -ENOMEM, "out of memory");
    memcpy(keyed, w->arch, sizeof(w->arch));
    memcpy(keyed + sizeof(w->arch), r->prog.source, len + 1);
    ops_sha256(keyed, len + sizeof(w->arch), key);
    free(keyed);
    int slot = 0;
    for (int i = 0; i < WK_REF_CUBINS; i++) {
        if (w->ref_cubins[i].cubin && memcmp(w->ref_cubins[i].key, key, 32) == 0) {
            if (!(r->cr.cubin = malloc(w->ref_cubins[i].len)))
                return kt_err_set(err, -ENOMEM, "out of memory");
            memcpy(r->cr.cubin, w->ref_cubins[i].cubin, w->ref_cubins[i].len);
            r->cr.cubin_len = w->ref_cubins[i].len;
            r->cr.status = SRCH_COMPILE_OK;
            w->ref_cubins[i].last_use = ++w->ref_clock;
            return 0;
        }
        if (!w->ref_cubins[i].cubin ||
            (w->ref_cubins[slot].cubin && w->ref_cubins[i].last_use < w->ref_cubins[slot].last_use))
            slot = i;
    }
    int rc = srch_nvrtc_compile(r->prog.source, w->arch, &r->cr);
    if (rc < 0 || r->cr.status != SRCH_COMPILE_OK)
        return kt_err_set(err, rc < 0 ? rc : -EINVAL, "reference does not compile: %.300s",
                          r->cr.log ? r->cr.log : "");
    void *copy = malloc(r->cr.cubin_len);
    if (copy) { /* without memory the next one compiles again: no error */
        memcpy(copy, r->cr.cubin, r->cr.cubin_len);
        free(w->ref_cubins[slot].cubin);
        memcpy(w->ref_cubins[slot].key, key, 32);
        w->ref_cubins[slot].cubin = copy;
        w->ref_cubins[slot].len = r->cr.cubin_len;
        w->ref_cubins[slot].last_use = ++w->ref_clock;
    }
    return 0;
}

int srch_wk_ref_load(wk *w, const ops_graph *g, wk_ref *r, kt_err *err)
{
    memset(r, 0, sizeof(*r));
    ops_diag d = {0};
    int rc = ops_emit_reference_graph(g, &r->prog, &d);
    if (rc < 0)
        return kt_err_set(err, rc, "reference: %s", d.msg);
    if ((rc = ref_compile(w, r, err)) < 0)
        return rc;
    if ((rc = wk_cu(w, w->cu.p_cuModuleLoadData(&r->mod, r->cr.cubin), "load the reference", err)) <
        0)
        return rc;
    r->fn = calloc((size_t)r->prog.n_kernels + 1, sizeof(*r->fn));
    if (!r->fn)
        return kt_err_set(err, -ENOMEM, "out of memory");
    for (int k = 0; k < r->prog.n_kernels; k++)
        if ((rc = wk_cu(w, w->cu.p_cuModuleGetFunction(&r->fn[k], r->mod, r->prog.kernels[k].entry),
                        r->prog.kernels[k].entry, err)) < 0)
            return rc;
    if (r->prog.workspace_bytes &&
        (rc = wk_cu(w, w->cu.p_cuMemAlloc(&r->ws, (size_t)r->prog.workspace_bytes),
                    "allocate the reference workspace", err)) < 0)
        return rc;
    return 0;
}

/* Runs every kernel of r once and waits. buf[t] is the double buffer of graph tensor t (every
 * graph input and output of the graph r was emitted for). */
int srch_wk_ref_launch(wk *w, const wk_ref *r, const CUdeviceptr *buf, int n_tensors, kt_err *err)
{
    int rc;
    for (int k = 0; k < r->prog.n_kernels; k++) {
        const ops_kernel_launch *l = &r->prog.kernels[k];
        CUdeviceptr ptrs[OPS_MAX_ARGS];
        void *params[OPS_MAX_ARGS];
        for (int a = 0; a < l->n_args; a++) {
            ptrs[a] = 0;
            if (l->args[a].kind == OPS_ARG_TENSOR_MAP) /* the fp64 reference uses no TMA */
                return kt_err_set(err, -EINVAL, "reference kernel %s: argument %d is a tensor map",
                                  l->entry, a);
            if (l->args[a].kind == OPS_ARG_WORKSPACE)
                ptrs[a] = r->ws + (CUdeviceptr)l->args[a].offset;
            else if (l->args[a].tensor >= 0 && l->args[a].tensor < n_tensors)
                ptrs[a] = buf[l->args[a].tensor];
            if (!ptrs[a])
                return kt_err_set(err, -EINVAL, "reference kernel %s: argument %d unmapped",
                                  l->entry, a);
            params[a] = &ptrs[a];
        }
        if ((rc = wk_cu(w,
                        w->cu.p_cuLaunchKernel(r->fn[k], l->grid[0], l->grid[1], l->grid[2],
                                               l->block[0], l->block[1], l->block[2], l->smem_bytes,
                                               NULL, params, NULL),
                        "launch the reference", err)) < 0)
            return rc;
    }
    return wk_cu(w, w->cu.p_cuCtxSynchronize(), "run the reference", err);
}
