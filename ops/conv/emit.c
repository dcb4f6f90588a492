/* conv family: shared emission pieces and the candidate assembled (the family entry points)
 * (ops/conv/conv.h lists the files). */
#include "conv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The float expression of the stored value `ref` of dtype dt (buf holds it). */
const char *conv_to_f(char *buf, size_t len, ops_dtype dt, const char *ref)
{
    kt_buf t = {0};
    ops_emit_to_float(&t, dt, ref);
    snprintf(buf, len, "%s", t.data ? t.data : ref);
    kt_buf_free(&t);
    return buf;
}

static void conv_names_make(const ops_group *grp, const conv_info *ci, conv_names *nm)
{
    const ops_graph *g = grp->g;
    size_t cl = 0;
    nm->n_params = 0;
    nm->entry_suffix = grp->entry_suffix;
    for (int i = 0; i < grp->n_in; i++) {
        int t = grp->in[i];
        /* Formatted from a local: nm->in and nm->param/call are members of one object, and
         * snprintf's destination and arguments are restrict-qualified. */
        char name[sizeof(nm->in[0])];
        if (t == ci->x)
            snprintf(name, sizeof(name), "x");
        else if (t == ci->w)
            snprintf(name, sizeof(name), "w");
        else if (t == ci->bias)
            snprintf(name, sizeof(name), "bias");
        else
            snprintf(name, sizeof(name), "in%d", i);
        memcpy(nm->in[i], name, sizeof(name));
        snprintf(nm->param[nm->n_params++], sizeof(nm->param[0]), "const %s *__restrict__ %s",
                 ops_emit_ctype(g->tensors[t].dtype), name);
        cl += (size_t)snprintf(nm->call + cl, sizeof(nm->call) - cl, "%s%s", i ? ", " : "", name);
    }
    snprintf(nm->param[nm->n_params++], sizeof(nm->param[0]), "%s *__restrict__ y",
             ops_emit_ctype(g->tensors[ci->y].dtype));
    snprintf(nm->call + cl, sizeof(nm->call) - cl, ", y");
}

/* One item of a signature: ", " or a wrap before it unless it is the first; col tracks the column.
 * nonnull: -fsanitize=nonnull-attribute checks strlen's argument and lets execution go on, and GCC
 * 12 then warns (-Wformat-overflow) about the "%s" of that null path; the contract rules it out. */
__attribute__((nonnull)) static void emit_signature_item(kt_buf *b, const char *item, bool first,
                                                         size_t align, size_t *col)
{
    size_t len = strlen(item) + 1; /* with its "," or ")" */
    if (!first && *col + 1 + len > 100) {
        kt_buf_printf(b, ",\n%*s", (int)align, "");
        *col = align;
    } else if (!first) {
        kt_buf_printf(b, ", ");
        *col += 2;
    }
    kt_buf_printf(b, "%s", item);
    *col += strlen(item);
}

/* "head(lead..., params...)" wrapped at 100 columns, continuation lines aligned after '('.
 * lead may be NULL when n_lead is 0. */
void conv_emit_signature(kt_buf *b, const char *head, const char *const *lead, int n_lead,
                         const conv_names *nm)
{
    size_t col = strlen(head) + 1, align = col;
    kt_buf_printf(b, "%s(", head);
    for (int i = 0; i < n_lead; i++)
        emit_signature_item(b, lead[i], i == 0, align, &col);
    for (int i = 0; i < nm->n_params; i++)
        emit_signature_item(b, nm->param[i], n_lead + i == 0, align, &col);
    kt_buf_printf(b, ")\n");
}

/* The kernel's first lines: "extern \"C\" __global__ void __launch_bounds__(THREADS, min_blocks)",
 * the signature of ktune_conv_<name><entry suffix>, "{"; the body then goes at indent 4. */
void conv_emit_kernel_head(kt_buf *b, const char *min_blocks, const char *name,
                           const conv_names *nm)
{
    char entry[64];
    snprintf(entry, sizeof(entry), "ktune_conv_%s%s", name, nm->entry_suffix);
    kt_buf_line(b, "extern \"C\" __global__ void __launch_bounds__(THREADS, %s)", min_blocks);
    conv_emit_signature(b, entry, NULL, 0, nm);
    kt_buf_line(b, "{");
    b->indent = 4;
}

const char *conv_param_of(const ops_group *grp, const conv_names *nm, int tensor)
{
    for (int i = 0; i < grp->n_in; i++)
        if (grp->in[i] == tensor)
            return nm->in[i];
    return NULL;
}

static void emit_constants(kt_buf *b, const conv_info *ci)
{
    const char *lx = ci->nhwc ? "NHWC" : "NCHW", *lw = ci->nhwc ? "OHWI" : "OIHW";
    if (ci->nd == 3) {
        lx = ci->nhwc ? "NDHWC" : "NCDHW";
        lw = ci->nhwc ? "ODHWI" : "OIDHW";
    }
    kt_buf_line(b, "typedef %s idx_t; /* element offsets */", ci->wide ? "long long" : "int");
    kt_buf_printf(b, "\n");
    kt_buf_line(b, "/* Problem shape: input %s, filter %s, output %s. */", lx, lw, lx);
    kt_buf_line(b, "constexpr int BATCH = %lld, C = %lld, H = %lld, W = %lld;", (long long)ci->n,
                (long long)ci->c, (long long)ci->h, (long long)ci->wd);
    kt_buf_line(b, "constexpr int K = %lld, R = %lld, S = %lld;", (long long)ci->k,
                (long long)ci->r, (long long)ci->s);
    kt_buf_line(b, "constexpr int P = %lld, Q = %lld;", (long long)ci->p, (long long)ci->q);
    kt_buf_line(b, "constexpr int STR_H = %d, STR_W = %d, PAD_H = %d, PAD_W = %d;", ci->sh, ci->sw,
                ci->ph, ci->pw);
    kt_buf_line(b, "constexpr int DIL_H = %d, DIL_W = %d;", ci->dh, ci->dw);
    kt_buf_line(b, "constexpr int GROUPS = %d, CG = %lld, KG = %lld; /* channels per group */",
                ci->groups, (long long)ci->cg, (long long)ci->kg);
    if (ci->general) {
        kt_buf_line(b,
                    "/* %s: input depth, filter depth; output rows P = OD * OH (depth-major). */",
                    ci->nd == 3 ? "3-d" : "2-d as 3-d of depth 1");
        kt_buf_line(b, "constexpr int DEPTH = %lld, T = %lld, OD = %lld, OH = %lld;",
                    (long long)ci->dep, (long long)ci->t, (long long)ci->od, (long long)ci->oh);
        kt_buf_line(b, "constexpr int STR_D = %d, PAD_D = %d, DIL_D = %d;", ci->sd, ci->pd, ci->dd);
        kt_buf_line(b, "/* Input dilation: input elements this far apart, zeros between. */");
        kt_buf_line(b, "constexpr int IDIL_D = %d, IDIL_H = %d, IDIL_W = %d;", ci->idd, ci->idh,
                    ci->idw);
    }
    kt_buf_line(b, "/* GEMM view: rows are output pixels, columns output channels of a group,");
    kt_buf_line(b, " * the reduction runs over (c, %s) in the filter's memory order. */",
                ci->general ? "tz, r, s" : "r, s");
    kt_buf_line(b, "constexpr int GEMM_M = BATCH * P * Q, GEMM_N = KG, GEMM_K = CG * %s;",
                ci->general ? "T * R * S" : "R * S");
    kt_buf_printf(b, "\n");
}

/* The device library headers the candidate's kernel uses (ops/device/ktune/), written between
 * the header comment and the prelude: a partition's module keeps every group's text before its
 * prelude at file scope (search/link.c), where the headers belong. */
static void emit_includes(kt_buf *b, const ops_group *grp, const conv_info *ci,
                          const ops_schedule *s, const ops_device *dev)
{
    bool cp_async = false, ldsm = false, mma = false;
    if (s->v[K_ALGO] == ALGO_TILED) {
        cp_async = true;
    } else if (s->v[K_ALGO] == ALGO_IGEMM) {
        ig_plan pl;
        conv_ig_plan_make(grp, ci, s, dev, &pl);
        cp_async = pl.cp_async;
        ldsm = pl.mma;
        mma = pl.tc;
    }
    if (!cp_async && !mma)
        return; /* FFMA kernels use no library wrapper */
    kt_buf_line(b, "/* ---- ktune device library (ops/device/ktune/ in the ktune sources) ---- */");
    if (cp_async)
        kt_buf_line(b, "#include \"ktune/cp_async.cuh\"");
    if (ldsm)
        kt_buf_line(b, "#include \"ktune/ldmatrix.cuh\"");
    if (mma)
        kt_buf_line(b, "#include \"ktune/mma.cuh\"");
}

static int conv_emit(const ops_group *grp, const ops_schedule *s, const ops_device *dev,
                     ops_emitted *out, ops_diag *d)
{
    conv_info ci;
    memset(out, 0, sizeof(*out));
    if (!conv_analyse(grp, &ci))
        return ops_diag_set(d, grp->g, OPS_RULE_SHAPE, -1, "",
                            "conv: the group is not one conv with an elementwise epilogue");
    const char *why = conv_prune(grp, s, dev);
    if (why) {
        char sched[256];
        ops_schedule_format(s, sched, sizeof(sched));
        return ops_diag_set(d, grp->g, OPS_RULE_SHAPE, -1, "",
                            "conv: schedule '%s' is pruned for this group (%s)", sched, why);
    }
    conv_names nm;
    conv_names_make(grp, &ci, &nm);
    kt_buf b = {0};
    ops_emit_header(&b, grp, s);
    emit_includes(&b, grp, &ci, s, dev);
    ops_emit_shared_prelude(&b, out);
    kt_buf_printf(&b, "\n");
    emit_constants(&b, &ci);
    int rc = conv_emit_store_fn(&b, grp, &ci, &nm);
    if (rc < 0) {
        kt_buf_free(&b);
        return rc == -ENOMEM ? rc
                             : ops_diag_set(d, grp->g, OPS_RULE_SHAPE, -1, "",
                                            "conv: cannot emit the epilogue");
    }
    ops_kernel_launch *l = &out->kernels[0];
    if (s->v[K_ALGO] == ALGO_TILED) {
        tiled_plan pl;
        conv_tiled_plan_make(&ci, s, dev, &pl);
        conv_emit_tiled(&b, &pl, &nm);
        snprintf(l->entry, sizeof(l->entry), "ktune_conv_tiled%s", grp->entry_suffix);
        l->grid[0] = (uint32_t)(pl.kblocks * pl.tiles_p * pl.tiles_q);
        l->grid[1] = (uint32_t)ci.n;
        l->grid[2] = 1;
        l->block[0] = (uint32_t)pl.threads;
        l->smem_bytes = (uint32_t)pl.smem;
    } else if (s->v[K_ALGO] == ALGO_DEPTHWISE) {
        dw_plan pl;
        conv_dw_plan_make(&ci, s, dev, &pl);
        conv_emit_depthwise(&b, &ci, &pl, &nm);
        snprintf(l->entry, sizeof(l->entry), "ktune_conv_depthwise%s", grp->entry_suffix);
        l->grid[0] = (uint32_t)(pl.tiles_p * pl.tiles_q);
        l->grid[1] = (uint32_t)(ci.n * ci.c);
        l->grid[2] = 1;
        l->block[0] = (uint32_t)pl.threads;
        l->smem_bytes = (uint32_t)pl.smem;
    } else if (s->v[K_ALGO] == ALGO_DIRECT) {
        direct_plan pl;
        conv_direct_plan_make(&ci, s, dev, &pl);
        conv_emit_direct(&b, &ci, &pl, &nm);
        snprintf(l->entry, sizeof(l->entry), "ktune_conv_direct%s", grp->entry_suffix);
        l->grid[0] = (uint32_t)conv_div_up(pl.spatial, pl.threads);
        l->grid[1] = (uint32_t)conv_div_up(ci.k, pl.tk);
        l->grid[2] = 1;
        l->block[0] = (uint32_t)pl.threads;
        l->smem_bytes = (uint32_t)pl.smem;
    } else {
        ig_plan pl;
        conv_ig_plan_make(grp, &ci, s, dev, &pl);
        conv_emit_igemm(&b, &ci, &pl, &nm);
        snprintf(l->entry, sizeof(l->entry), "ktune_conv_igemm_%s%s", conv_math_labels[pl.math],
                 grp->entry_suffix);
        l->grid[0] = (uint32_t)conv_div_up(ci.gm, pl.bm);
        l->grid[1] = (uint32_t)conv_div_up(ci.kg, pl.bn);
        l->grid[2] = (uint32_t)ci.groups;
        l->block[0] = (uint32_t)pl.threads;
        l->smem_bytes = (uint32_t)pl.smem;
    }
    l->block[1] = l->block[2] = 1;
    for (int i = 0; i < grp->n_in; i++)
        l->args[l->n_args++] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = grp->in[i]};
    l->args[l->n_args++] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = ci.y};
    if (kt_buf_status(&b) < 0) {
        kt_buf_free(&b);
        return -ENOMEM;
    }
    out->source = kt_buf_take(&b);
    out->n_kernels = 1;
    out->workspace_bytes = 0;
    return 0;
}

const ops_family ops_family_conv = {
    .id = OPS_FAM_CONV,
    .name = "conv",
    .n_knobs = N_KNOBS,
    .knobs = conv_knobs,
    .matches = conv_matches,
    .prune = conv_prune,
    .emit = conv_emit,
    .estimate = conv_estimate,
};
