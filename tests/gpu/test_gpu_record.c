/* GPU test of what the cache serves (issue 15, finding 6): every record is evaluated as it was
 * assembled, against the whole graph's fp64 reference, before it is stored, and its recorded
 * error is that measurement.
 *   1. srch_tune with the real ktune-worker on a graph every partition of which has several
 *      kernels (tests/gpu/two_axis_sums.json: a sum over each axis of x, then their broadcast
 *      sum; M=300, N=1000, not multiples of any tile): the stored record (family "partition",
 *      at least 2 kernels, intermediates in the workspace) was evaluated whole on the GPU
 *      (assembled >= 1, none failed), its err_norm is exactly the error of the trial log's
 *      "record ..." entry and within its tolerance, and a rerun reads that outcome back without
 *      evaluating again;
 *   2. the stored record sent to the worker here, as the runtime would launch it (its launches
 *      in order, its argument map turned back into the canonical graph's inputs and outputs, its
 *      workspace): it passes with the same error; with its launches in reverse order (a group
 *      reads its intermediate before the group that writes it has run, from the NaN-poisoned
 *      workspace), it fails as wrong: the evaluation judges the chain, not its parts;
 *   3. a kernel of a record clears only its own workspace range: two hand-written kernels
 *      chained through the workspace (t = 2x in slot 0, then y = t + 1 with slot 1 cleared
 *      first) pass; told to clear the whole workspace instead (what a group candidate's
 *      zero_ws means), the second reads zeros for t and fails as wrong.
 * The worker is $KTUNE_WORKER (else the supervisor's lookup). Exit: 0 passed, 1 failed, 77 no
 * GPU (skipped). */
#include "search/compile.h"
#include "search/tune.h"

#include "ops/ops.h"
#include "gpu_graphs.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SKIP 77

static int failures;
static char tmp_root[256];

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            printf("  FAIL %s:%d: ", __FILE__, __LINE__);                                          \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

static ops_binding shapes[2] = {{"M", 300}, {"N", 1000}};

/* The trial log's "record ..." entries (evaluations of assembled records), and the passed one
 * whose error is the stored record's. */
typedef struct record_trials {
    double want; /* the stored record's err_norm */
    int n, matching;
    char id[CACHE_CAND_MAX];
} record_trials;

static int scan_records(const cache_trial *t, void *ctx)
{
    record_trials *s = ctx;
    if (strncmp(t->cand, "record ", 7) != 0)
        return 0;
    s->n++;
    if (t->status == CACHE_TRIAL_OK && t->error == s->want) {
        s->matching++;
        snprintf(s->id, sizeof(s->id), "%s", t->cand);
    }
    return 0;
}

static cache_key job_key(const srch_tune_result *r)
{
    cache_key k;
    memset(&k, 0, sizeof(k));
    k.gpu = r->gpu;
    memcpy(k.sig, r->sig, sizeof(k.sig));
    memcpy(k.problem, r->problem, sizeof(k.problem));
    k.n_shapes = 2;
    for (int i = 0; i < 2; i++) {
        snprintf(k.shapes[i].name, sizeof(k.shapes[i].name), "%s", shapes[i].name);
        k.shapes[i].value = shapes[i].value;
    }
    k.precision = OPS_PREC_EXACT;
    return k;
}

/* The worker's request for rec over canon (the canonical bound graph), launches in order or
 * reversed. */
static int request_for(const ops_graph *canon, const cache_record *rec, bool reverse,
                       srch_eval_req *req)
{
    int n_in = 0;
    while (n_in < canon->n_tensors && canon->tensors[n_in].producer < 0)
        n_in++;
    int in_rank[64], out_rank[64], by_in[64], by_out[64];
    ops_diag d = {0};
    if (n_in > 64 || canon->n_outputs > 64 ||
        ops_graph_canonical_io(canon, in_rank, out_rank, &d) < 0 ||
        srch_eval_req_for_graph(canon, req, &d) < 0) {
        printf("  FAIL request: %s\n", d.msg);
        failures++;
        return -1;
    }
    for (int i = 0; i < n_in; i++)
        by_in[in_rank[i]] = i;
    for (int j = 0; j < canon->n_outputs; j++)
        by_out[out_rank[j]] = canon->outputs[j];
    req->id = 7;
    req->precision = OPS_PREC_EXACT;
    req->tolerance = rec->tolerance;
    req->seeds = 3;
    req->workspace_bytes = (int64_t)rec->workspace_bytes;
    req->cubin = malloc(rec->cubin_len);
    if (!req->cubin)
        return -1;
    memcpy(req->cubin, rec->cubin, rec->cubin_len);
    req->cubin_len = rec->cubin_len;
    req->n_kernels = rec->n_kernels;
    for (int k = 0; k < rec->n_kernels; k++) {
        const cache_kernel *kk = &rec->kernels[reverse ? rec->n_kernels - 1 - k : k];
        ops_kernel_launch *l = &req->kernels[k];
        snprintf(l->entry, sizeof(l->entry), "%s", kk->entry);
        memcpy(l->grid, kk->grid, sizeof(l->grid));
        memcpy(l->block, kk->block, sizeof(l->block));
        l->smem_bytes = kk->smem_bytes;
        l->zero_workspace = kk->zero_bytes > 0;
        req->zero_offset[k] = (int64_t)kk->zero_offset;
        req->zero_bytes[k] = (int64_t)kk->zero_bytes;
        l->n_args = kk->n_args;
        for (int j = 0; j < kk->n_args; j++) {
            const cache_arg *a = &kk->args[j];
            if (a->kind == CACHE_ARG_WORKSPACE)
                l->args[j] = (ops_arg){.kind = OPS_ARG_WORKSPACE, .offset = (int64_t)a->offset};
            else
                l->args[j] = (ops_arg){.kind = OPS_ARG_TENSOR,
                                       .tensor = a->kind == CACHE_ARG_INPUT ? by_in[a->index]
                                                                            : by_out[a->index]};
        }
    }
    return 0;
}

/* ---- 3. per-kernel clear ranges ---- */

#define CHAIN_N 258741 /* 333 * 777: not a multiple of any block */
#define STR(x)  #x
#define XSTR(x) STR(x)

static const char chain_src[] = "#define N " XSTR(
    CHAIN_N) "\n"
             "extern \"C\" __global__ void k1(const float *x, float *t) {\n"
             "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
             "  if (i < N) t[i] = x[i] * 2.0f;\n}\n"
             "extern \"C\" __global__ void k2(const float *t, float *scratch, float *y) {\n"
             "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
             "  if (i < N) y[i] = t[i] + 1.0f + scratch[0];\n}\n";

static void clear_ranges(srch_worker *w, const char *arch)
{
    printf("== 3. a record's kernel clears only its own workspace range\n");
    ops_graph *g = gpu_affine_graph("chain", CHAIN_N, &failures);
    srch_compile_result cr = {0};
    if (srch_nvrtc_compile(chain_src, arch, &cr) < 0 || cr.status != SRCH_COMPILE_OK) {
        printf("  FAIL compile: %.300s\n", cr.log ? cr.log : "");
        failures++;
        goto out;
    }
    const int64_t slot1 = ((int64_t)CHAIN_N * 4 + 255) / 256 * 256; /* after t's slot */
    for (int whole = 0; whole < 2; whole++) {
        srch_eval_req req;
        srch_eval_result res;
        ops_diag d = {0};
        kt_err err = {0};
        if (srch_eval_req_for_graph(g, &req, &d) < 0) {
            printf("  FAIL request: %s\n", d.msg);
            failures++;
            break;
        }
        req.id = 8;
        req.seeds = 2;
        req.workspace_bytes = slot1 + 256;
        req.cubin = malloc(cr.cubin_len);
        if (!req.cubin)
            break;
        memcpy(req.cubin, cr.cubin, cr.cubin_len);
        req.cubin_len = cr.cubin_len;
        req.n_kernels = 2;
        for (int k = 0; k < 2; k++) {
            ops_kernel_launch *l = &req.kernels[k];
            snprintf(l->entry, sizeof(l->entry), "k%d", k + 1);
            l->grid[0] = (CHAIN_N + 255) / 256;
            l->grid[1] = l->grid[2] = 1;
            l->block[0] = 256;
            l->block[1] = l->block[2] = 1;
        }
        int32_t y = g->outputs[0];
        req.kernels[0].n_args = 2;
        req.kernels[0].args[0] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = 0};
        req.kernels[0].args[1] = (ops_arg){.kind = OPS_ARG_WORKSPACE, .offset = 0};
        req.kernels[1].n_args = 3;
        req.kernels[1].args[0] = (ops_arg){.kind = OPS_ARG_WORKSPACE, .offset = 0};
        req.kernels[1].args[1] = (ops_arg){.kind = OPS_ARG_WORKSPACE, .offset = slot1};
        req.kernels[1].args[2] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = y};
        req.kernels[1].zero_workspace = true; /* its scratch must read 0, not the poison */
        req.zero_offset[1] = whole ? 0 : slot1;
        req.zero_bytes[1] = whole ? 0 : 256;
        int rc = srch_worker_eval(w, &req, 60, &res, &err);
        srch_eval_req_free(&req);
        printf("  clear %s: %s, err %.3g%s%.200s\n", whole ? "the whole workspace" : "slot 1 only",
               srch_status_str(res.status), res.err_norm, res.msg[0] ? ": " : "", res.msg);
        CHECK(rc == 0, "srch_worker_eval: %s", err.msg);
        CHECK(res.status == (whole ? SRCH_WRONG : SRCH_OK), "clear %s: %s, want %s",
              whole ? "all" : "slot 1", srch_status_str(res.status), whole ? "wrong" : "ok");
    }
out:
    srch_compile_result_release(&cr);
    ops_graph_free(g);
}

static int tune(const ops_graph *g, cache_env *cache, const char *store, srch_tune_result *r)
{
    srch_tune_opts o = {.precision = OPS_PREC_EXACT, .budget_s = 20, .store_dir = store};
    kt_err err = {0};
    int rc = srch_tune(g, shapes, 2, cache, &o, r, &err);
    if (rc == -ENODEV || (rc < 0 && (strstr(err.msg, "libcuda") || strstr(err.msg, "cuInit")))) {
        printf("skip: no GPU: %s\n", err.msg);
        return SKIP;
    }
    if (rc < 0) {
        printf("  FAIL srch_tune: %s (%s)\n", strerror(-rc), err.msg);
        failures++;
        return rc;
    }
    printf("  %s in %.1f s: %d trials (%d measured, %d resumed); records %d, rank %d; assembled "
           "%d evaluated, %d resumed, %d failed; err %.3g%s%s\n",
           r->found ? "found" : "NOT FOUND", r->seconds, r->trials, r->measured, r->resumed,
           r->records, r->rank, r->assembled, r->assembled_resumed, r->assembled_failed,
           r->err_norm, r->record_note[0] ? "; note: " : "", r->record_note);
    return 0;
}

int main(void)
{
    const char *root = getenv("KTUNE_SOURCE_ROOT");
    char path[1024], dir[300], store[320];
    snprintf(path, sizeof(path), "%s/tests/gpu/two_axis_sums.json", root ? root : ".");
    snprintf(tmp_root, sizeof(tmp_root), "/tmp/ktune-gpu-record-XXXXXX");
    if (!mkdtemp(tmp_root))
        return 1;
    snprintf(dir, sizeof(dir), "%s/cache", tmp_root);
    snprintf(store, sizeof(store), "%s/cubins", dir);
    ops_graph *g = NULL, *bound = NULL, *canon = NULL;
    ops_diag d = {0};
    if (ops_graph_from_json_file(path, &g, &d) < 0 || ops_graph_validate(g, &d) < 0 ||
        ops_graph_bind(g, shapes, 2, &bound, &d) < 0 ||
        ops_graph_canonicalize(bound, &canon, &d) < 0) {
        printf("FAIL %s: %s\n", path, d.msg);
        return 1;
    }
    cache_env *cache = NULL;
    kt_err err = {0};
    if (cache_open(dir, 0, NULL, &cache, &err) < 0) {
        printf("FAIL cache_open: %s\n", err.msg);
        return 1;
    }

    printf("== 1. tuning two_axis_sums M=300 N=1000 (every partition: several kernels)\n");
    static srch_tune_result r, r2;
    int rc = tune(g, cache, store, &r);
    if (rc == SKIP) {
        cache_close(cache);
        return SKIP;
    }
    cache_record rec;
    cache_record_init(&rec);
    cache_key key = job_key(&r);
    if (rc == 0) {
        CHECK(r.found && r.n_picks >= 2, "no several-group winner");
        CHECK(r.rank == 0 && r.records == 1, "rank %d, %d records: %s", r.rank, r.records,
              r.record_note);
        CHECK(r.assembled >= 1 && r.assembled_failed == 0, "assembled %d, failed %d", r.assembled,
              r.assembled_failed);
        CHECK(cache_get(cache, &key, 0, &rec, &err) == 0, "no record: %s", err.msg);
    }
    if (rec.family) {
        record_trials t = {.want = rec.err_norm};
        CHECK(cache_trial_foreach(cache, &key, scan_records, &t, &err) == 0, "trials: %s", err.msg);
        printf("  record: %s, %d kernels, workspace %llu B, err %.3g (max %.3g), tolerance %.3g; "
               "trial log: %d record entries, %d with that error (%s)\n",
               rec.family, rec.n_kernels, (unsigned long long)rec.workspace_bytes, rec.err_norm,
               rec.err_max, rec.tolerance, t.n, t.matching, t.id);
        CHECK(strcmp(rec.family, "partition") == 0 && rec.n_kernels >= 2 && rec.workspace_bytes,
              "not an assembled partition record");
        CHECK(rec.verified && rec.err_norm <= rec.tolerance, "stored unverified or over tolerance");
        CHECK(t.n == r.assembled && t.matching == 1,
              "the stored error %.17g is not that of a passed whole-graph evaluation (%d record "
              "trials, %d evaluated)",
              rec.err_norm, t.n, r.assembled);
        CHECK(r.err_norm == rec.err_norm, "the job's error %.3g is not the record's", r.err_norm);

        /* a rerun: the outcome comes from the trial log */
        if (tune(g, cache, store, &r2) == 0)
            CHECK(r2.assembled == 0 && r2.assembled_resumed >= 1 && r2.rank == 0,
                  "rerun: assembled %d evaluated, %d resumed, rank %d", r2.assembled,
                  r2.assembled_resumed, r2.rank);
    }
    cache_close(cache);

    if (rec.family && rec.n_kernels >= 2) {
        printf("== 2. the stored record sent to the worker as served, and reversed\n");
        srch_worker_opts wo = {.exe = NULL, .gpu = 0};
        srch_worker *w = NULL;
        ops_device dev;
        if (srch_worker_start(&wo, &w, &dev, NULL, &err) < 0) {
            printf("  FAIL srch_worker_start: %s\n", err.msg);
            failures++;
        } else {
            for (int rev = 0; rev < 2; rev++) {
                srch_eval_req req;
                srch_eval_result res;
                if (request_for(canon, &rec, rev, &req) < 0)
                    break;
                rc = srch_worker_eval(w, &req, 60, &res, &err);
                srch_eval_req_free(&req);
                printf("  %s: %s, err %.3g (max %.3g)%s%.200s\n",
                       rev ? "launches reversed" : "as stored", srch_status_str(res.status),
                       res.err_norm, res.err_max, res.msg[0] ? ": " : "", res.msg);
                CHECK(rc == 0, "srch_worker_eval: %s", err.msg);
                if (!rev)
                    CHECK(res.status == SRCH_OK && fabs(res.err_norm - rec.err_norm) <=
                                                       1e-12 * fmax(rec.err_norm, 1e-30),
                          "as stored: %s, err %.17g vs stored %.17g", srch_status_str(res.status),
                          res.err_norm, rec.err_norm);
                else
                    CHECK(res.status == SRCH_WRONG, "reversed: %s, want wrong",
                          srch_status_str(res.status));
            }
            clear_ranges(w, dev.arch);
            srch_worker_stop(w);
        }
    }
    cache_record_free(&rec);
    ops_graph_free(canon);
    ops_graph_free(bound);
    ops_graph_free(g);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp_root);
    if (system(cmd) != 0)
        printf("  (could not remove %s)\n", tmp_root);
    printf("%s: %d failure%s\n", failures ? "FAIL" : "ok", failures, failures == 1 ? "" : "s");
    return failures ? 1 : 0;
}
