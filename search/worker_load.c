/* Candidates of the GPU worker (the worker's modules: search/worker_internal.h): a cubin loaded
 * and its kernels checked against the device's limits, or a cuBLASLt call planned; every
 * argument bound to the data set's buffers or the candidate's workspace; kept in one of
 * WK_MAX_CANDS slots for "retime" until "forget" (the oldest goes when all are taken). */
#include "worker_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- candidates ---- */

void srch_wk_cand_release(wk *w, wk_cand *c)
{
    if (!c->used)
        return;
    if (c->plan)
        srch_lt_plan_free(c->plan);
    if (c->ws)
        w->cu.p_cuMemFree(c->ws);
    if (c->mod)
        w->cu.p_cuModuleUnload(c->mod);
    if (c->data)
        c->data->users--;
    free(c->tmaps);
    memset(c, 0, sizeof(*c));
}

wk_cand *srch_wk_cand_find(wk *w, uint64_t id)
{
    for (int i = 0; i < WK_MAX_CANDS; i++)
        if (w->cands[i].used && w->cands[i].id == id)
            return &w->cands[i];
    return NULL;
}

bool srch_wk_make_room(wk *w, const wk_cand *keep)
{
    int before = w->n_data;
    srch_wk_data_trim(w, 0);
    if (w->n_data < before)
        return true;
    wk_cand *oldest = NULL;
    for (int i = 0; i < WK_MAX_CANDS; i++)
        if (w->cands[i].used && &w->cands[i] != keep && (!oldest || w->cands[i].seq < oldest->seq))
            oldest = &w->cands[i];
    if (!oldest)
        return false;
    kt_log_info(WK_TAG, "device memory is full: releasing candidate %llu for a new data set",
                (unsigned long long)oldest->id);
    srch_wk_cand_release(w, oldest);
    return true;
}

/* A free slot; the oldest candidate goes when all 64 are taken. */
wk_cand *srch_wk_cand_slot(wk *w)
{
    wk_cand *oldest = NULL;
    for (int i = 0; i < WK_MAX_CANDS; i++) {
        if (!w->cands[i].used)
            return &w->cands[i];
        if (!oldest || w->cands[i].seq < oldest->seq)
            oldest = &w->cands[i];
    }
    srch_wk_cand_release(w, oldest);
    return oldest;
}

/* One run of the candidate: every kernel in order (or the cuBLASLt call) on the default
 * stream. The srch_launch_fn of the timer. */
int srch_wk_cand_launch(void *ctx, kt_err *err)
{
    wk_cand *c = ctx;
    wk *w = c->w;
    if (c->library)
        return srch_lt_run(c->plan, c->lt_a, c->lt_b, c->lt_c, c->lt_bias, c->ws, err);
    for (int k = 0; k < c->n_kernels; k++) {
        const ops_kernel_launch *l = &c->launch[k];
        int rc;
        /* A record's kernel clears its own group's slot only: the others hold intermediates. */
        size_t off = c->zero_bytes[k] ? (size_t)c->zero_offset[k] : 0;
        size_t bytes = c->zero_bytes[k] ? (size_t)c->zero_bytes[k] : (size_t)c->ws_bytes;
        if (l->zero_workspace && c->ws &&
            (rc = wk_cu(w, w->cu.p_cuMemsetD8(c->ws + (CUdeviceptr)off, 0, bytes),
                        "zero the workspace", err)) < 0)
            return rc;
        if ((rc = wk_cu(w,
                        w->cu.p_cuLaunchKernel(c->fn[k], l->grid[0], l->grid[1], l->grid[2],
                                               l->block[0], l->block[1], l->block[2], l->smem_bytes,
                                               NULL, c->params[k], NULL),
                        l->entry, err)) < 0)
            return rc;
    }
    return 0;
}

srch_status srch_wk_fail_status(wk *w, srch_status otherwise)
{
    return wk_probe_dead(w) ? SRCH_FAULT : otherwise;
}

/* cuLaunchKernel reads as many parameters, of as many bytes, as the kernel declares, whatever the
 * launch says: a pointer is 8 bytes, a tensor map 128. */
static int check_params(wk *w, CUfunction fn, const ops_kernel_launch *l, kt_err *err)
{
    for (int a = 0; a <= l->n_args; a++) {
        size_t off = 0, size = 0;
        CUresult cr = w->cu.p_cuFuncGetParamInfo(fn, (size_t)a, &off, &size);
        if (a == l->n_args) {
            if (cr == CUDA_SUCCESS)
                return kt_err_set(err, -EINVAL, "%s takes more than the launch's %d parameters",
                                  l->entry, l->n_args);
            break;
        }
        if (cr == CUDA_ERROR_INVALID_VALUE)
            return kt_err_set(err, -EINVAL, "%s takes %d parameters; the launch passes %d",
                              l->entry, a, l->n_args);
        int rc = wk_cu(w, cr, "cuFuncGetParamInfo", err);
        if (rc < 0)
            return rc;
        size_t want = l->args[a].kind == OPS_ARG_TENSOR_MAP ? OPS_TMAP_BYTES : sizeof(CUdeviceptr);
        if (size != want)
            return kt_err_set(
                err, -EINVAL, "%s parameter %d is %zu bytes; the launch passes %s of %zu", l->entry,
                a, size, l->args[a].kind == OPS_ARG_TENSOR_MAP ? "a tensor map" : "a pointer",
                want);
    }
    return 0;
}

/* Loads the cubin (or plans the cuBLASLt call) and resolves every argument. On failure the
 * result says why and the slot stays with the caller to release. */
int srch_wk_cand_load(wk *w, wk_cand *c, const srch_eval_req *req, srch_eval_result *res)
{
    kt_err err = {0};
    int rc = 0;
    wk_data *D = c->data;
    c->ws_bytes = req->workspace_bytes;
    if (req->library) {
        c->library = true;
        if (req->lt.workspace_bytes > c->ws_bytes)
            c->ws_bytes = req->lt.workspace_bytes;
        if (!w->lt) {
            res->status = SRCH_UNAVAILABLE;
            snprintf(res->msg, sizeof(res->msg), "no cuBLASLt: %.240s", w->lt_err.msg);
            return -ENODEV;
        }
        int n_avail = 0;
        rc = srch_lt_plan_new(w->lt, &req->lt, &c->plan, &n_avail, &err);
        if (rc == -ENOENT) {
            res->status = SRCH_UNAVAILABLE;
            snprintf(res->msg, sizeof(res->msg), "%.255s", err.msg);
            return rc;
        }
        if (rc < 0)
            goto fail;
        c->lt_a = srch_wk_data_ptr(D, req->lt.a_tensor);
        c->lt_b = srch_wk_data_ptr(D, req->lt.b_tensor);
        c->lt_c = srch_wk_data_ptr(D, req->lt.c_tensor);
        c->lt_bias = req->lt.bias_tensor >= 0 ? srch_wk_data_ptr(D, req->lt.bias_tensor) : 0;
    } else {
        if ((rc = wk_cu(w, w->cu.p_cuModuleLoadData(&c->mod, req->cubin), "load the cubin", &err)) <
            0)
            goto fail;
        c->n_kernels = req->n_kernels;
        for (int k = 0; k < req->n_kernels; k++) {
            const ops_kernel_launch *l = &req->kernels[k];
            c->launch[k] = *l;
            c->zero_offset[k] = req->zero_offset[k];
            c->zero_bytes[k] = req->zero_bytes[k];
            if ((rc = wk_cu(w, w->cu.p_cuModuleGetFunction(&c->fn[k], c->mod, l->entry), l->entry,
                            &err)) < 0)
                goto fail;
            if ((rc = check_params(w, c->fn[k], l, &err)) < 0)
                goto fail;
            int max_threads = 0, static_smem = 0;
            w->cu.p_cuFuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                                       c->fn[k]);
            w->cu.p_cuFuncGetAttribute(&static_smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, c->fn[k]);
            uint64_t threads = (uint64_t)l->block[0] * l->block[1] * l->block[2];
            if (max_threads > 0 && threads > (uint64_t)max_threads) {
                rc = kt_err_set(&err, -E2BIG,
                                "%s: %llu threads per block, but its registers allow %d", l->entry,
                                (unsigned long long)threads, max_threads);
                goto fail;
            }
            if ((int64_t)static_smem + l->smem_bytes > (int64_t)w->smem_optin) {
                rc = kt_err_set(&err, -E2BIG, "%s: %d + %u bytes of shared memory, device has %d",
                                l->entry, static_smem, l->smem_bytes, w->smem_optin);
                goto fail;
            }
            /* the default cap on dynamic shared memory is the 48 KiB less the static */
            if ((int64_t)static_smem + l->smem_bytes > (int64_t)w->smem_block &&
                (rc = wk_cu(w,
                            w->cu.p_cuFuncSetAttribute(
                                c->fn[k], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                (int)l->smem_bytes),
                            "opt in to shared memory", &err)) < 0)
                goto fail;
        }
    }
    if (c->ws_bytes > 0 && (rc = wk_cu(w, w->cu.p_cuMemAlloc(&c->ws, (size_t)c->ws_bytes),
                                       "allocate the workspace", &err)) < 0)
        goto fail;
    int n_tmaps = 0;
    for (int k = 0; k < c->n_kernels; k++)
        for (int a = 0; a < c->launch[k].n_args; a++)
            n_tmaps += c->launch[k].args[a].kind == OPS_ARG_TENSOR_MAP;
    if (n_tmaps &&
        !(c->tmaps = aligned_alloc(_Alignof(CUtensorMap), (size_t)n_tmaps * sizeof(CUtensorMap)))) {
        rc = kt_err_set(&err, -ENOMEM, "out of memory for %d tensor maps", n_tmaps);
        goto fail;
    }
    for (int k = 0; k < c->n_kernels; k++) {
        const ops_kernel_launch *l = &c->launch[k];
        for (int a = 0; a < l->n_args; a++) {
            const ops_arg *arg = &l->args[a];
            /* a pointer argument's value; a tensor map's base address */
            c->ptrs[k][a] = arg->kind == OPS_ARG_WORKSPACE ||
                                    (arg->kind == OPS_ARG_TENSOR_MAP && arg->tensor < 0)
                                ? c->ws + (CUdeviceptr)arg->offset
                                : srch_wk_data_ptr(D, arg->tensor);
            c->params[k][a] = &c->ptrs[k][a];
            if (arg->kind != OPS_ARG_TENSOR_MAP)
                continue;
            CUtensorMap *m = &c->tmaps[c->n_tmaps++];
            if ((rc = srch_cuda_encode_tmap(&w->cu, &arg->tmap, (uint64_t)c->ptrs[k][a], m,
                                            l->entry, a, &err)) < 0)
                goto fail;
            c->params[k][a] = m; /* the 128 bytes themselves are the parameter */
        }
    }
    return 0;
fail:
    res->status = srch_wk_fail_status(w, SRCH_LOAD_ERROR);
    snprintf(res->msg, sizeof(res->msg), "%.255s", err.msg);
    return rc;
}

/* Poisons outputs and workspace and runs once; the outputs stay on the device. */
int srch_wk_cand_run_once(wk_cand *c, kt_err *err)
{
    wk *w = c->w;
    wk_data *D = c->data;
    int rc;
    for (int j = 0; j < D->n_out; j++)
        if ((rc = wk_cu(w, w->cu.p_cuMemsetD8(D->d_out[j], 0xff, D->out_bytes[j]),
                        "poison the outputs", err)) < 0)
            return rc;
    if (c->ws && (rc = wk_cu(w, w->cu.p_cuMemsetD8(c->ws, 0xff, (size_t)c->ws_bytes),
                             "poison the workspace", err)) < 0)
        return rc;
    if ((rc = srch_wk_cand_launch(c, err)) < 0)
        return rc;
    return wk_cu(w, w->cu.p_cuCtxSynchronize(), "run the candidate", err);
}
