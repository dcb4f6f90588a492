/* gemm family: shared emission helpers, the candidate assembled (the family entry points)
 * (ops/gemm/gemm.h lists the files). */
#include "gemm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "t<index>_<name>", the name made an identifier by ops_emit_identifier. */
static void param_name(const ops_graph *g, int t, char *buf, size_t len)
{
    char clean[48];
    ops_emit_identifier(g->tensors[t].name, clean, sizeof(clean));
    snprintf(buf, len, "t%d_%s", t, clean);
}

const char *gemm_in_name(const gemm_emit *e, int t)
{
    for (int i = 0; i < e->p->grp->n_in; i++)
        if (e->p->grp->in[i] == t)
            return e->names[i];
    return "?";
}

static const char *out_name(const gemm_emit *e)
{
    return e->names[e->p->grp->n_in];
}

/* True when the epilogue reads group input t. */
bool gemm_epi_reads(const gemm_problem *p, int t)
{
    for (int i = 0; i < p->n_epi; i++) {
        const ops_node *n = &p->g->nodes[p->epi[i]];
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k].tensor == t && !gemm_in_group(p->grp, p->g->tensors[t].producer))
                return true;
    }
    return false;
}

/* The kernel parameter list of the contract: inputs, the output, [workspace]. */
void gemm_emit_kernel_params(const gemm_emit *e, bool workspace)
{
    const gemm_problem *p = e->p;
    const ops_graph *g = p->g;
    kt_buf_printf(e->b, "(");
    for (int i = 0; i < p->grp->n_in; i++)
        kt_buf_printf(e->b, "%sconst %s *__restrict__ %s", i ? ", " : "",
                      ops_emit_ctype(g->tensors[p->grp->in[i]].dtype), e->names[i]);
    kt_buf_printf(e->b, ", %s *__restrict__ %s", ops_emit_ctype(g->tensors[p->out].dtype),
                  out_name(e));
    if (workspace)
        kt_buf_printf(e->b, ", void *__restrict__ workspace");
    kt_buf_printf(e->b, ")");
}

/* The epilogue's tensor parameters ("const T *__restrict__ x, ...") or arguments ("x, ..."),
 * each followed by ", ". */
void gemm_emit_epi_list(const gemm_emit *e, bool decl)
{
    const gemm_problem *p = e->p;
    for (int i = 0; i < p->grp->n_in; i++) {
        int t = p->grp->in[i];
        if (!gemm_epi_reads(p, t))
            continue;
        if (decl)
            kt_buf_printf(e->b, "const %s *__restrict__ ", ops_emit_ctype(p->g->tensors[t].dtype));
        kt_buf_printf(e->b, "%s, ", e->names[i]);
    }
}

const char *const gemm_bnames[OPS_MAX_RANK] = {"b0", "b1", "b2", "b3", "b4", "b5", "b6", "b7"};

/* const int b0 = ..., b1 = ...: the output batch indices of flat batch index bz. */
void gemm_emit_batch_indices(const gemm_emit *e)
{
    const ops_shape *ob = &e->p->obatch;
    if (ob->rank == 0)
        return;
    kt_buf_line(e->b, "/* batch indices of bz in the output batch shape */");
    int64_t inner = 1;
    for (int i = ob->rank - 1; i >= 0; i--) {
        kt_buf *b = e->b;
        for (int s = 0; s < b->indent; s++)
            kt_buf_printf(b, " ");
        if (i == 0 && inner == 1)
            kt_buf_line(b, "const int b0 = bz;");
        else if (i == 0)
            kt_buf_line(b, "const int b0 = bz / %lld;", (long long)inner);
        else if (inner == 1)
            kt_buf_line(b, "const int %s = bz %% %lld;", gemm_bnames[i], (long long)ob->d[i].size);
        else
            kt_buf_line(b, "const int %s = bz / %lld %% %lld;", gemm_bnames[i], (long long)inner,
                        (long long)ob->d[i].size);
        inner *= ob->d[i].size;
    }
}

/* True when the flat offset of `in` broadcast against out (ops_emit_bcast_offset) reads one of
 * out's first n_batch indices. */
bool gemm_refs_batch(const ops_shape *in, const ops_shape *out, int n_batch)
{
    int shift = out->rank - in->rank;
    for (int i = 0; i < in->rank; i++)
        if (i + shift < n_batch && !(in->d[i].size == 1 && out->d[i + shift].size != 1))
            return true;
    return false;
}

void gemm_emit_indent(kt_buf *b)
{
    for (int s = 0; s < b->indent; s++)
        kt_buf_printf(b, " ");
}

/* The value an operand load stores to shared memory, from the raw global element `raw`: through
 * float, the prologue cast (rounding like a store would) and the shared type. */
void gemm_emit_load_value(const gemm_emit *e, int k, const char *raw, kt_buf *out)
{
    const gemm_problem *p = e->p;
    kt_buf f = {0}, cst = {0};
    ops_emit_to_float(&f, p->src_dt[k], raw);
    const char *v = f.data ? f.data : "";
    /* A cast to the shared type itself rounds exactly like the conversion below. */
    if (p->cast[k] >= 0 && !gemm_cast_is_identity(p, k) &&
        p->g->nodes[p->cast[k]].attrs.to != e->c->sdt) {
        const char *ops[1] = {v};
        ops_emit_elementwise(&cst, &p->g->nodes[p->cast[k]], ops);
        v = cst.data ? cst.data : "";
    }
    ops_emit_from_float(out, e->c->sdt, v);
    kt_buf_free(&f);
    kt_buf_free(&cst);
}

/* ---- the device library headers the candidate uses ---- */

/* Written between the header comment and the prelude: a partition's module keeps every group's
 * text before its prelude at file scope (search/link.c), where the headers belong. */
static void emit_includes(const gemm_emit *e)
{
    const gemm_cfg *c = e->c;
    kt_buf *b = e->b;
    bool ldsm = false;
    if (c->tc && !c->wgmma)
        ldsm = gemm_is_tf32(c->math) ? !c->op[0].scalar_frag || !c->op[1].scalar_frag : true;
    kt_buf_line(b, "/* ---- ktune device library (ops/device/ktune/ in the ktune sources) ---- */");
    if (c->wg16) {
        if (c->pingpong || c->tma_store || c->cluster || c->stream) /* named barriers */
            kt_buf_line(b, "#include \"ktune/barrier.cuh\"");
        if (c->mcast == 2 || c->cluster)
            kt_buf_line(b, "#include \"ktune/cluster.cuh\"");
        kt_buf_line(b, "#include \"ktune/mbarrier.cuh\"");
        if (c->tma_store || c->stream) /* shared stores; stream-K's partials and flags */
            kt_buf_line(b, "#include \"ktune/memory.cuh\"");
        if (c->consumers == 2)
            kt_buf_line(b, "#include \"ktune/setmaxnreg.cuh\"");
        kt_buf_line(b, "#include \"ktune/tma.cuh\"");
        kt_buf_line(b, "#include \"ktune/wgmma.cuh\"");
        return;
    }
    kt_buf_line(b, "#include \"ktune/cp_async.cuh\"");
    if (ldsm)
        kt_buf_line(b, "#include \"ktune/ldmatrix.cuh\"");
    if (c->tc)
        kt_buf_line(b, "#include \"ktune/mma.cuh\"");
    if (c->serial)
        kt_buf_line(b, "#include \"ktune/memory.cuh\"");
    if (c->cluster)
        kt_buf_line(b, "#include \"ktune/cluster.cuh\"");
    if (c->wgmma) {
        kt_buf_line(b, "#include \"ktune/swizzle.cuh\"");
        kt_buf_line(b, "#include \"ktune/wgmma.cuh\"");
    }
}

/* ---- emitted helpers: constants, raster, layouts, loaders ---- */

static void emit_constants(const gemm_emit *e)
{
    const gemm_problem *p = e->p;
    const gemm_cfg *c = e->c;
    kt_buf *b = e->b;
    kt_buf_printf(b, "\n");
    kt_buf_line(b, "/* ---- problem and schedule (compile-time constants) ----");
    kt_buf_line(
        b, " * out[bz, m, n] = epilogue(sum_k A[bz, m, k] * B[bz, k, n]); A is stored %s, B %s. */",
        p->trans[0] ? "[K][M] (transposed)" : "[M][K]",
        p->trans[1] ? "[N][K] (transposed)" : "[K][N]");
    kt_buf_line(b, "enum : int { M = %lld, N = %lld, K = %lld, BATCH = %lld };", (long long)p->M,
                (long long)p->N, (long long)p->K, (long long)p->batch);
    kt_buf_line(b, "enum : int { BM = %d, BN = %d, BK = %d }; /* block tile */", c->bm, c->bn,
                c->bk);
    kt_buf_line(b,
                "enum : int { WM = %d, WN = %d, WTM = %d, WTN = %d }; /* warp grid, warp tile */",
                c->wm, c->wn, c->wtm, c->wtn);
    if (!c->tc)
        kt_buf_line(b,
                    "enum : int { LY = %d, LX = %d, TM = %d, TN = %d }; /* lane grid; thread tile, "
                    "strided by LY, LX */",
                    c->ly, c->lx, c->tm, c->tn);
    else if (!c->wgmma) /* the wgmma kernel lays out its tiles itself (gemm_emit_wgmma_kernel) */
        kt_buf_line(b, "enum : int { MI = %d, NI = %d }; /* m16 x n8 mma tiles per warp */", c->mi,
                    c->ni);
    kt_buf_line(b, "enum : int { THREADS = %d, STAGES = %d, SPLITK = %d, RASTER = %d };",
                c->threads, c->stages, c->splitk, c->raster);
    kt_buf_line(
        b, "enum : int { TILES_M = %lld, TILES_N = %lld, KTILES = %lld, KTILES_PER_SLICE = %lld };",
        (long long)c->tiles_m, (long long)c->tiles_n, (long long)c->ktiles, (long long)c->kps);
    if (!c->wgmma)
        kt_buf_line(b, "enum : int { A_STAGE = %d, B_STAGE = %d }; /* shared elements per stage */",
                    c->op[0].stage, c->op[1].stage);
    if (c->math == MATH_TF32X3)
        kt_buf_line(
            b,
            "enum : int { FLUSH_KTILES = %d }; /* k tiles summed inside the mmas before an FADD */",
            c->flush_ktiles);
    kt_buf_line(b, "typedef %s idx_t;", c->idx64 ? "long long" : "int");
    if (c->serial) {
        kt_buf_line(b, "/* Serial split-K workspace (%lld bytes, zeroed before the launch):",
                    (long long)gemm_serial_workspace_bytes(p, c));
        kt_buf_line(b, " *   [0, ACC_OFFSET): int sem[BATCH][TILES_M * TILES_N], the slice whose "
                       "turn it is per tile;");
        kt_buf_line(b, " *   [ACC_OFFSET, end): float run[BATCH][TILES_M * TILES_N][BM * BN], the "
                       "running sum of each");
        kt_buf_line(b,
                    " *   tile in its threads' register order (register r of thread t at r * "
                    "THREADS + t, %s). */",
                    c->tc ? "in float4 groups of one mma tile" : "one float each");
        kt_buf_line(b, "enum : int { ACC_OFFSET = %lld };",
                    (long long)gemm_serial_acc_offset(p, c));
    }
}

static void emit_raster(const gemm_emit *e)
{
    kt_buf *b = e->b;
    if (e->c->raster == 1) {
        kt_buf_printf(b, "\n");
        kt_buf_line(b, "/* Block pid -> output tile, row by row. */");
        kt_buf_line(b, "__device__ __forceinline__ void ktg_raster(int pid, int &tm, int &tn)");
        kt_buf_line(b, "{");
        kt_buf_line(b, "    tm = pid / TILES_N;");
        kt_buf_line(b, "    tn = pid %% TILES_N;");
        kt_buf_line(b, "}");
        return;
    }
    kt_buf_printf(b, "\n");
    kt_buf_line(
        b,
        "/* Block pid -> output tile: groups of RASTER tile-rows are walked column by column, so");
    kt_buf_line(b, " * consecutive blocks share B columns and a few A rows in L2. A bijection onto "
                   "the tiles. */");
    kt_buf_line(b, "__device__ __forceinline__ void ktg_raster(int pid, int &tm, int &tn)");
    kt_buf_line(b, "{");
    kt_buf_line(b, "    const int per_group = RASTER * TILES_N;");
    kt_buf_line(b, "    const int first_m = pid / per_group * RASTER;");
    kt_buf_line(b, "    const int rows = TILES_M - first_m < RASTER ? TILES_M - first_m : RASTER;");
    kt_buf_line(b, "    tm = first_m + pid %% per_group %% rows;");
    kt_buf_line(b, "    tn = pid %% per_group / rows;");
    kt_buf_line(b, "}");
}

/* ag, bg: operand A and B of batch bz (broadcast batch dims folded in). */
void gemm_emit_operand_pointers(const gemm_emit *e)
{
    const gemm_problem *p = e->p;
    kt_buf *b = e->b;
    if (gemm_refs_batch(&p->opb[0], &p->obatch, p->obatch.rank) ||
        gemm_refs_batch(&p->opb[1], &p->obatch, p->obatch.rank))
        gemm_emit_batch_indices(e);
    const char *opname[2] = {"ag", "bg"};
    const char *mat[2] = {"(idx_t)M * K", "(idx_t)K * N"};
    const char *idx[OPS_MAX_RANK];
    for (int i = 0; i < p->obatch.rank; i++)
        idx[i] = gemm_bnames[i];
    for (int k = 0; k < 2; k++) {
        gemm_emit_indent(b);
        kt_buf_printf(b, "const %s *__restrict__ %s = %s", ops_emit_ctype(p->src_dt[k]), opname[k],
                      gemm_in_name(e, p->src[k]));
        if (gemm_refs_batch(&p->opb[k], &p->obatch, p->obatch.rank)) {
            kt_buf_printf(b, " + ");
            ops_emit_bcast_offset(b, &p->opb[k], &p->obatch, idx);
            kt_buf_printf(b, " * %s", mat[k]);
        }
        kt_buf_printf(b, ";\n"); /* ends the line begun above */
    }
}

/* The leading arguments of the epilogue's store calls (its inputs, then the output) into
 * args. */
void gemm_emit_store_args(const gemm_emit *e, kt_buf *args)
{
    gemm_emit tmp = *e;
    tmp.b = args;
    gemm_emit_epi_list(&tmp, false);
    kt_buf_printf(args, "%s", out_name(e));
}

/* ---- family entry points ---- */

static bool gemm_matches(const ops_group *grp)
{
    gemm_problem p;
    return gemm_analyse(grp, &p) == 0;
}

static const char *gemm_prune(const ops_group *grp, const ops_schedule *s, const ops_device *dev)
{
    gemm_problem p;
    gemm_cfg c;
    if (gemm_analyse(grp, &p) < 0)
        return "shape";
    gemm_configure(&p, s, dev, &c);
    return c.why;
}

/* Schedules are enumerated math, bm, bn, bk, wm, wn first: a (math, tile, warps) both kernels
 * reject (most of the space on small problems) skips the other knobs' 648 combinations. */
static const char *gemm_prune_prefix(const ops_group *grp, const ops_schedule *s,
                                     const ops_device *dev)
{
    gemm_problem p;
    gemm_cfg c;
    if (gemm_analyse(grp, &p) < 0)
        return "shape";
    gemm_configure(&p, s, dev, &c);
    const char *why = gemm_sync_prefix_why(&p, &c, dev);
    return why && gemm_wgmma_prefix_why(&p, &c, dev) ? why : NULL;
}

static void fill_args(const gemm_problem *p, ops_kernel_launch *k, bool workspace)
{
    k->n_args = 0;
    for (int i = 0; i < p->grp->n_in; i++)
        k->args[k->n_args++] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = p->grp->in[i]};
    k->args[k->n_args++] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = p->out};
    if (workspace)
        k->args[k->n_args++] = (ops_arg){.kind = OPS_ARG_WORKSPACE, .offset = 0};
}

static int gemm_emit_fn(const ops_group *grp, const ops_schedule *s, const ops_device *dev,
                        ops_emitted *out, ops_diag *d)
{
    gemm_problem p;
    gemm_cfg c;
    memset(out, 0, sizeof(*out));
    if (gemm_analyse(grp, &p) < 0)
        return ops_diag_set(d, grp->g, OPS_RULE_SHAPE, -1, "",
                            "gemm: the group is not a matmul with a cast prologue and an "
                            "elementwise epilogue");
    gemm_configure(&p, s, dev, &c);
    /* "redundant" schedules are legal, only not worth searching; emit them on request. */
    if (c.why && strcmp(c.why, "redundant") != 0) {
        char sched[256];
        ops_schedule_format(s, sched, sizeof(sched));
        return ops_diag_set(d, grp->g, OPS_RULE_SHAPE, -1, "",
                            "gemm: schedule '%s' is not legal here (%s)", sched, c.why);
    }
    kt_buf b = {0};
    gemm_emit e = {.b = &b, .p = &p, .c = &c};
    for (int i = 0; i < grp->n_in; i++)
        param_name(grp->g, grp->in[i], e.names[i], sizeof(e.names[i]));
    param_name(grp->g, p.out, e.names[grp->n_in], sizeof(e.names[grp->n_in]));

    char entry[64];
    gemm_main_entry(&c, grp->entry_suffix, entry, sizeof(entry));
    ops_emit_header(&b, grp, s);
    emit_includes(&e);
    ops_emit_shared_prelude(&b, out);
    emit_constants(&e);
    if (c.serial)
        gemm_emit_serial_helpers(&e);
    if (c.cluster && !c.wg16) /* (the 16-bit wgmma kernel documents its own) */
        gemm_emit_cluster_helpers(&e);
    emit_raster(&e);
    if (c.wg16) {
        gemm_emit_wgmma16_helpers(&e);
    } else if (c.wgmma) {
        gemm_emit_wgmma_helpers(&e);
    } else {
        kt_buf_printf(&b, "\n/* ---- shared-memory layouts and tile loaders ---- */\n");
        gemm_emit_slot_fn(&e, 0);
        gemm_emit_slot_fn(&e, 1);
        gemm_emit_loader(&e, 0);
        gemm_emit_loader(&e, 1);
        gemm_emit_load_tiles(&e);
        if (c.tc)
            gemm_emit_mma_stage(&e);
        else
            gemm_emit_ffma_stage(&e);
    }
    int rc = gemm_emit_epilogue(&e);
    if (rc < 0) {
        kt_buf_free(&b);
        return ops_diag_set(d, grp->g, OPS_RULE_SHAPE, -1, "", "gemm: epilogue not elementwise");
    }
    if (c.presplit)
        gemm_emit_split_kernel(&e);
    int64_t pad_end = 0;
    if (c.wg16) { /* the padded operands after the workspace the main kernel uses */
        int64_t main_ws = c.stream     ? gemm_stream_workspace_bytes(&p, &c)
                          : c.parallel ? (int64_t)c.splitk * p.batch * p.M * p.N * 4
                                       : 0;
        pad_end = gemm_wgmma16_pad_layout(&p, &c, main_ws);
        for (int k = 0; k < 1 + p.nb; k++)
            if (c.pad[k])
                gemm_emit_pad_kernel(&e, k);
    }
    if (c.wg16)
        gemm_emit_wgmma16_kernel(&e, entry);
    else if (c.wgmma)
        gemm_emit_wgmma_kernel(&e, entry);
    else
        gemm_emit_main_kernel(&e, entry);
    if (c.parallel)
        gemm_emit_reduce_kernel(&e);
    if (c.wg16 && c.pad_out)
        gemm_emit_unpad_kernel(&e);
    if ((rc = kt_buf_status(&b)) < 0) {
        kt_buf_free(&b);
        return rc;
    }

    out->source = kt_buf_take(&b);
    if (c.presplit) {
        ops_kernel_launch *ks = &out->kernels[out->n_kernels++];
        snprintf(ks->entry, sizeof(ks->entry), "ktune_gemm_split_a%s", grp->entry_suffix);
        int64_t blocks = gemm_cdiv(p.M * p.K / 4, SPLIT_THREADS);
        ks->grid[0] = (uint32_t)(blocks < 8 * dev->sm_count ? blocks : 8 * dev->sm_count);
        ks->grid[1] = ks->grid[2] = 1;
        ks->block[0] = SPLIT_THREADS;
        ks->block[1] = ks->block[2] = 1;
        fill_args(&p, ks, true);
        out->workspace_bytes = p.M * p.K * 4;
    }
    for (int op = 0; c.wg16 && op < 1 + p.nb; op++)
        if (c.pad[op])
            gemm_pad_launch(&p, &c, op, dev, &out->kernels[out->n_kernels++]);
    ops_kernel_launch *k = &out->kernels[out->n_kernels++];
    snprintf(k->entry, sizeof(k->entry), "%s", entry);
    bool slices_in_x = c.serial || c.cluster; /* a tile's slices are adjacent blocks */
    k->grid[0] = (uint32_t)(c.tiles_m * c.tiles_n * (slices_in_x ? c.splitk : 1));
    k->grid[1] = 1;
    k->grid[2] = (uint32_t)(p.batch * (slices_in_x ? 1 : c.splitk));
    if (c.wg16) { /* persistent: a block per SM walks the tiles (pairs of them) of every batch */
        int per = c.cluster ? c.splitk : c.mcast; /* blocks a unit: its cluster */
        int64_t units =
            (c.tiles_m + c.mcast - 1) / c.mcast * c.tiles_n * p.batch * (c.parallel ? c.splitk : 1);
        int64_t slots = dev->sm_count / per;
        k->grid[0] = (uint32_t)(c.stream ? c.sk_blocks : per * (units < slots ? units : slots));
        k->grid[2] = 1;
    }
    k->block[0] = (uint32_t)c.threads;
    k->block[1] = k->block[2] = 1;
    k->smem_bytes = (uint32_t)c.smem_bytes;
    if (c.wg16)
        gemm_wgmma16_fill_args(&p, &c, k); /* tensor maps of A and B, then pointers */
    else
        fill_args(&p, k, c.parallel || c.serial || c.presplit);
    if (c.serial) {
        k->zero_workspace = true; /* the semaphores start at 0 */
        out->workspace_bytes = gemm_serial_workspace_bytes(&p, &c);
    }
    if (c.stream) {
        k->zero_workspace = true; /* the flags start at 0; the partial slots need no clearing */
        k->zero_prefix = gemm_stream_flag_bytes(&c);
        out->workspace_bytes = gemm_stream_workspace_bytes(&p, &c);
    }
    if (c.parallel) {
        out->workspace_bytes = (int64_t)c.splitk * p.batch * p.M * p.N * 4;
        k = &out->kernels[out->n_kernels++];
        snprintf(k->entry, sizeof(k->entry), "ktune_gemm_splitk_reduce%s", grp->entry_suffix);
        k->grid[0] = (uint32_t)gemm_cdiv(gemm_reduce_items(&p), REDUCE_THREADS);
        k->grid[1] = k->grid[2] = 1;
        k->block[0] = REDUCE_THREADS;
        k->block[1] = k->block[2] = 1;
        fill_args(&p, k, true);
    }
    if (c.wg16 && c.pad_out) /* the padded output rows into the output */
        gemm_pad_launch(&p, &c, 3, dev, &out->kernels[out->n_kernels++]);
    if (pad_end > out->workspace_bytes)
        out->workspace_bytes = pad_end;
    return 0;
}

const ops_family ops_family_gemm = {
    .id = OPS_FAM_GEMM,
    .name = "gemm",
    .n_knobs = KN_COUNT,
    .knobs = gemm_knobs,
    .matches = gemm_matches,
    .prune = gemm_prune,
    .prefix_knobs = KN_WN + 1,
    .prune_prefix = gemm_prune_prefix,
    .emit = gemm_emit_fn,
    .estimate = gemm_estimate,
};
