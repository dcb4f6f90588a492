/* The scan family: one cumsum or cumprod node along the innermost axis of its operand (a line a
 * block: the rows of KernelBench's cumulative sums and products).
 *
 * Block b scans line b in tiles of THREADS * ITEMS elements: thread t holds ITEMS consecutive
 * elements of the tile, scans them in registers, the warps scan the threads' totals with
 * shuffles, warp 0 scans the warps' totals through shared memory, and every element gets the
 * carry of the tiles before it and the totals before its thread. Sums in fp32 (the operand's
 * dtype converted once); a tile's order of operations is fixed by the schedule, so a candidate
 * is deterministic. Lines along another axis would need a transposed walk: no schedule matches
 * them (the search then has no kernel for the node, and says so). */
#include "family.h"

#include <stdio.h>
#include <string.h>

enum { K_THREADS, K_ITEMS, N_KNOBS };

static const ops_knob scan_knobs[N_KNOBS] = {
    [K_THREADS] = {"threads", 4, {128, 256, 512, 1024}, NULL},
    [K_ITEMS] = {"items", 5, {1, 2, 4, 8, 16}, NULL},
};

typedef struct scan_info {
    const ops_node *n;
    int64_t len, lines; /* elements a line, lines */
} scan_info;

static bool scan_analyse(const ops_group *grp, scan_info *in)
{
    if (grp->n_nodes != 1 || grp->n_in != 1 || grp->n_out != 1)
        return false;
    const ops_graph *g = grp->g;
    const ops_node *n = &g->nodes[grp->nodes[0]];
    if (n->op != OPS_CUMSUM && n->op != OPS_CUMPROD)
        return false;
    const ops_shape *s = &g->tensors[n->out].shape;
    int ax = n->attrs.axis < 0 ? n->attrs.axis + s->rank : n->attrs.axis;
    if (s->rank < 1 || ax != s->rank - 1)
        return false;
    in->n = n;
    in->len = s->d[ax].size;
    in->lines = in->len ? ops_shape_numel(s) / in->len : 0;
    return in->len > 0 && in->lines > 0 && in->lines <= 0x7fffffffLL && in->len <= 0x7fffffffLL;
}

static bool scan_matches(const ops_group *grp)
{
    scan_info in;
    return scan_analyse(grp, &in);
}

static const char *scan_prune(const ops_group *grp, const ops_schedule *s, const ops_device *dev)
{
    scan_info in;
    if (!scan_analyse(grp, &in))
        return "shape";
    int threads = s->v[K_THREADS], items = s->v[K_ITEMS];
    if (threads > dev->max_threads_per_block)
        return "threads";
    /* a tile twice the line or more: half of it idle, as a smaller tile without the waste */
    if ((int64_t)threads * items >= 2 * in.len && (threads > 128 || items > 1))
        return "redundant";
    return NULL;
}

static int scan_emit(const ops_group *grp, const ops_schedule *s, const ops_device *dev,
                     ops_emitted *out, ops_diag *d)
{
    (void)dev;
    memset(out, 0, sizeof(*out));
    scan_info in;
    if (!scan_analyse(grp, &in))
        return ops_diag_set(d, grp->g, OPS_RULE_SHAPE, -1, "",
                            "scan: not one cumsum or cumprod along the innermost axis");
    const ops_graph *g = grp->g;
    int threads = s->v[K_THREADS], items = s->v[K_ITEMS];
    bool prod = in.n->op == OPS_CUMPROD;
    ops_dtype xt = g->tensors[grp->in[0]].dtype, yt = g->tensors[grp->out[0]].dtype;
    kt_buf b = {0};
    ops_emit_header(&b, grp, s);
    ops_emit_shared_prelude(&b, out);
    ops_kernel_launch *k = &out->kernels[0];
    snprintf(k->entry, sizeof(k->entry), "ktune_scan_%s_t%d_i%d%s", prod ? "prod" : "sum",
             threads, items, grp->entry_suffix);
    kt_buf_printf(&b, "\n");
    kt_buf_line(&b, "constexpr long long LEN = %lld; /* elements a line */", (long long)in.len);
    kt_buf_line(&b, "constexpr int THREADS = %d, ITEMS = %d, WARPS = THREADS / 32;", threads,
                items);
    kt_buf_line(&b, "constexpr int TILE = THREADS * ITEMS;");
    kt_buf_line(&b, "#define KT_OP(a, b) ((a) %s (b))", prod ? "*" : "+");
    kt_buf_line(&b, "#define KT_ID %s /* the identity of the operation */", prod ? "1.0f" : "0.0f");
    kt_buf_printf(&b, "\n");
    kt_buf_line(&b, "/* Line blockIdx.x, tile by tile: see the family's comment "
                    "(ops/emit_scan.c). */");
    kt_buf_line(&b, "extern \"C\" __global__ void __launch_bounds__(THREADS) %s(", k->entry);
    kt_buf_line(&b, "    const %s *__restrict__ x, %s *__restrict__ y)", ops_emit_ctype(xt),
                ops_emit_ctype(yt));
    kt_buf_line(&b, "{");
    b.indent = 4;
    kt_buf_line(&b, "__shared__ float warp_total[WARPS];");
    kt_buf_line(&b, "const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;");
    kt_buf_line(&b, "const long long row = (long long)blockIdx.x * LEN;");
    kt_buf_line(&b, "float carry = KT_ID; /* the tiles before this one, accumulated */");
    kt_buf_line(&b, "for (long long base = 0; base < LEN; base += TILE) {");
    b.indent = 8;
    kt_buf_line(&b, "const long long first = base + (long long)tid * ITEMS;");
    kt_buf_line(&b, "float v[ITEMS];");
    kt_buf_line(&b, "#pragma unroll");
    kt_buf_line(&b, "for (int j = 0; j < ITEMS; j++) {");
    kt_buf_printf(&b, "            v[j] = first + j < LEN ? ");
    ops_emit_to_float(&b, xt, "x[row + first + j]");
    kt_buf_printf(&b, " : KT_ID;\n");
    kt_buf_line(&b, "    if (j > 0)");
    kt_buf_line(&b, "        v[j] = KT_OP(v[j - 1], v[j]); /* the thread's elements, in order */");
    kt_buf_line(&b, "}");
    kt_buf_line(&b, "/* the warp's inclusive scan of its threads' totals */");
    kt_buf_line(&b, "float t = v[ITEMS - 1];");
    kt_buf_line(&b, "#pragma unroll");
    kt_buf_line(&b, "for (int o = 1; o < 32; o <<= 1) {");
    kt_buf_line(&b, "    const float u = __shfl_up_sync(0xffffffffu, t, o);");
    kt_buf_line(&b, "    if (lane >= o)");
    kt_buf_line(&b, "        t = KT_OP(u, t);");
    kt_buf_line(&b, "}");
    kt_buf_line(&b, "float before = __shfl_up_sync(0xffffffffu, t, 1); /* the threads before, in "
                    "the warp */");
    kt_buf_line(&b, "if (lane == 0)");
    kt_buf_line(&b, "    before = KT_ID;");
    kt_buf_line(&b, "if (lane == 31)");
    kt_buf_line(&b, "    warp_total[warp] = t;");
    kt_buf_line(&b, "__syncthreads();");
    kt_buf_line(&b, "if (warp == 0) { /* the warps' totals scanned, inclusive */");
    kt_buf_line(&b, "    float w = lane < WARPS ? warp_total[lane] : KT_ID;");
    kt_buf_line(&b, "    #pragma unroll");
    kt_buf_line(&b, "    for (int o = 1; o < 32; o <<= 1) {");
    kt_buf_line(&b, "        const float u = __shfl_up_sync(0xffffffffu, w, o);");
    kt_buf_line(&b, "        if (lane >= o)");
    kt_buf_line(&b, "            w = KT_OP(u, w);");
    kt_buf_line(&b, "    }");
    kt_buf_line(&b, "    if (lane < WARPS)");
    kt_buf_line(&b, "        warp_total[lane] = w;");
    kt_buf_line(&b, "}");
    kt_buf_line(&b, "__syncthreads();");
    kt_buf_line(&b, "float prefix = warp > 0 ? KT_OP(carry, warp_total[warp - 1]) : carry;");
    kt_buf_line(&b, "prefix = KT_OP(prefix, before);");
    kt_buf_line(&b, "#pragma unroll");
    kt_buf_line(&b, "for (int j = 0; j < ITEMS; j++)");
    kt_buf_line(&b, "    if (first + j < LEN)");
    kt_buf_printf(&b, "                y[row + first + j] = ");
    ops_emit_from_float(&b, yt, "KT_OP(prefix, v[j])");
    kt_buf_printf(&b, ";\n");
    kt_buf_line(&b, "carry = KT_OP(carry, warp_total[WARPS - 1]);");
    kt_buf_line(&b, "__syncthreads(); /* warp_total is read before the next tile writes it */");
    b.indent = 4;
    kt_buf_line(&b, "}");
    b.indent = 0;
    kt_buf_line(&b, "}");
    kt_buf_line(&b, "#undef KT_OP");
    kt_buf_line(&b, "#undef KT_ID");
    k->grid[0] = (uint32_t)in.lines;
    k->grid[1] = k->grid[2] = 1;
    k->block[0] = (uint32_t)threads;
    k->block[1] = k->block[2] = 1;
    k->args[k->n_args++] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = grp->in[0]};
    k->args[k->n_args++] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = grp->out[0]};
    int rc = kt_buf_status(&b);
    if (rc < 0) {
        kt_buf_free(&b);
        return rc;
    }
    out->source = kt_buf_take(&b);
    out->n_kernels = 1;
    return 0;
}

/* Memory-bound: the line read and written once, at the bandwidth the resident blocks' loads in
 * flight reach (Little's law, OPS_INFLIGHT_BYTES_PER_SM), plus the tiles' barriers (two a tile)
 * and a launch. */
static void scan_estimate(const ops_group *grp, const ops_schedule *s, const ops_device *dev,
                          ops_estimate *e)
{
    memset(e, 0, sizeof(*e));
    scan_info in;
    if (!scan_analyse(grp, &in))
        return;
    const ops_graph *g = grp->g;
    int threads = s->v[K_THREADS], items = s->v[K_ITEMS];
    double n = (double)in.len * (double)in.lines;
    e->bytes = n * (double)(ops_dtype_size(g->tensors[grp->in[0]].dtype) +
                            ops_dtype_size(g->tensors[grp->out[0]].dtype));
    e->flops = n;
    int per_sm = dev->max_threads_per_sm / threads;
    if (per_sm > dev->max_blocks_per_sm)
        per_sm = dev->max_blocks_per_sm;
    if (per_sm < 1)
        per_sm = 1;
    double inflight = (double)per_sm * threads * items *
                      (double)ops_dtype_size(g->tensors[grp->in[0]].dtype);
    double eff = inflight >= OPS_INFLIGHT_BYTES_PER_SM ? 1.0 : inflight / OPS_INFLIGHT_BYTES_PER_SM;
    if (eff < 0.05)
        eff = 0.05;
    double tiles = (double)((in.len + (int64_t)threads * items - 1) / ((int64_t)threads * items));
    double waves = (double)in.lines / ((double)per_sm * dev->sm_count);
    double t_mem = e->bytes / (dev->dram_bytes_per_s * 0.9 * eff);
    double t_sync = (waves < 1 ? 1 : waves) * tiles * 2 * 0.5e-6; /* ~0.5 us a barrier round */
    e->seconds = (t_mem > t_sync ? t_mem : t_sync) + 3e-6;
    e->occupancy = (double)per_sm * threads / dev->max_threads_per_sm;
}

const ops_family ops_family_scan = {
    .id = OPS_FAM_SCAN,
    .name = "scan",
    .n_knobs = N_KNOBS,
    .knobs = scan_knobs,
    .matches = scan_matches,
    .prune = scan_prune,
    .emit = scan_emit,
    .estimate = scan_estimate,
};
