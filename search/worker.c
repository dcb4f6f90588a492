/* The GPU worker: the request loop of ktune-worker (protocol in search/worker.h, encoding in
 * search/worker_proto.c), candidate loading, verification against the fp64 reference, timing.
 *
 * Process rules. The CUPTI timer is opened before the CUDA context (srch_timer_open before
 * srch_cuda_open), once. A sticky CUDA error (illegal address, launch failure, ...) kills the
 * context for good: the worker answers the request that hit it with status "fault" (or an
 * EFAULT error reply), then exits with status 3 so that the supervisor respawns it.
 *
 * Data sets. Candidates of one group share inputs: a data set is keyed by SHA-256 over the
 * request's subgraph, bindings, seed0 and seeds (and "full" with its bindings, when present). It
 * holds the typed inputs of every seed (host, generated once, and a device copy per seed that is
 * copied on the device into the one set of input buffers the candidates read), one set of device
 * output buffers, and, once a candidate needs verifying, the fp64 reference outputs of every seed
 * (device) with the sum of squares and count of the values that are finite and representable in
 * the output's dtype. The reference program
 * (ops_emit_reference_graph) is compiled with NVRTC in this process only when a data set first
 * needs its references; its outputs, not its module, are what is cached. At most WK_MAX_DATA data
 * sets that no loaded candidate uses are kept (least recently used goes).
 *
 * Inputs (docs/evaluation.md): seed s of a data set is seed0 + s. Even seeds draw uniform values in
 * [-1, 1]; odd seeds draw mixed magnitudes, u * 2^e with e uniform in [-6, 3], so each tensor
 * spans about three decades (never all zeros: u is continuous). Values are rounded to the
 * tensor's dtype (ops_dtype_store) and the reference reads exactly the stored values.
 *
 * Inputs from the full graph. When the request carries "full" (the whole canonical bound graph
 * the subgraph was cut from; it then also enters the data set key), the draw above is made for
 * full's graph inputs instead, and each input of the subgraph takes the tensor of full with the
 * same name: a graph input of full its drawn values, an intermediate the value full's fp64
 * reference (run once per seed, the intermediates wanted made outputs of a copy of full)
 * computes from them, rounded to its dtype on the host. A group such as [sum, div] of a
 * softmax then sees exp outputs, not values in [-1, 1] whose row sums may be near zero.
 * Everything after that is as without "full": the subgraph's own reference is computed from
 * exactly the stored inputs. The full reference is not cached across data sets (one run per
 * data set creation, i.e. once per group).
 *
 * Verification, per seed: outputs (and the workspace) poisoned with 0xff bytes, which are NaN
 * in f32, f16 and bf16, so an unwritten element fails; one run; the outputs compared with the
 * reference; a second run on the same inputs compared bitwise with the first (a difference is a
 * race). The comparison, per output, judges every element by its reference value r (ops_dtype_store
 * rounding decides what overflows):
 *   - r NaN: the output must be NaN;
 *   - r infinite, or finite but overflowing the output dtype: the output must be the infinity of
 *     r's sign;
 *   - r finite and representable: the output must be finite, and is compared by value below.
 * An element that breaks one of these rules fails the candidate ("differ in NaN/Inf"). The
 * error measures are over the elements compared by value, and an output with none of them on a
 * seed fails ("too few elements compared"): f32 add(x, 1e39) overflows everywhere, and a kernel
 * would otherwise pass with nothing compared. For the compared elements:
 *   - normwise  ||out - ref||_2 / ||ref||_2 <= tol, with tol the request's tolerance or, when
 *     that is <= 0, docs/evaluation.md's default: f32 1e-5 (exact), 5e-4 (tf32, graphs with a
 *     contraction), 2e-2 (reduced: f16 or bf16 math on f32 data), raised to 3e-3 when any
 *     input or output is f16 and to 2e-2 when any is bf16;
 *   - elementwise |out - ref| <= atol + rtol |ref| with
 *       rtol = (r_store(output dtype) + r_math(precision) * sqrt(L)) * max(1, tol / default),
 *       r_store: f32 1e-6, f16 2e-3, bf16 1.6e-2 (a few units of the last stored place),
 *       r_math:  exact 2e-6 (fp32 accumulation), tf32 2e-4, reduced 4e-3; for attention on
 *                f16 / bf16 data at least the operands' unit roundoff (2^-11, 2^-8), since
 *                the probabilities P are rounded to that type for the P V product (as every
 *                flash-attention kernel does): under causal masking the first query rows
 *                average a few values with cancellation, far from the output's rms,
 *       L the longest reduction of the subgraph (matmul K, reduced extent, conv C/g*KH*KW,
 *       attention max(keys, head dim); 1 for pointwise),
 *       atol = rtol * rms(ref): outputs near zero from cancellation are judged against the
 *       scale of the output, not against their own tiny value.
 * err_norm is the worst normwise error over outputs and seeds; err_max the worst elementwise
 * ratio |out - ref| / (atol + rtol |ref|) (<= 1 passes).
 *
 * rms(ref) is over the compared elements too. err_norm is Inf for an output with an element of the
 * wrong NaN/Inf class or with nothing compared.
 *
 * The comparison and the race check run on the GPU (cmp_source, compiled with NVRTC once per
 * process): per output, block partials of sum (out - ref)^2, sum ref^2, the worst ratio (first
 * index on ties), the count of compared elements, the count and first index of elements of the
 * wrong NaN/Inf class, added on the host in block order; the race check copies the first run's
 * outputs aside on the device and counts the elements that differ bitwise. Only those scalars
 * (and, for a message, the one offending element) are downloaded. The sums are added in a fixed,
 * deterministic order (not a sequential one: err_norm and rms(ref) may differ from a sequential
 * sum in the last bits). */
#include "compile.h"
#include "worker.h"

#include "cublaslt.h"
#include "ops/reference_gpu.h"

#include <math.h>
#include <nvrtc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define WK_TAG           "worker"
#define WK_MAX_CANDS     64
#define WK_MAX_DATA      4  /* unused data sets kept for later candidates of the same group */
#define WK_REF_CUBINS    16 /* compiled reference programs kept, by SHA-256 of their source */
#define WK_MAX_MSG       ((size_t)256 << 20)
#define WK_DEFAULT_SEEDS 3
#define WK_EXIT_FAULT    3
#define WK_EXIT_PROTO    2
#define WK_SELFTEST_N    (1 << 20)
#define WK_STR(x)        #x
#define WK_XSTR(x)       WK_STR(x)

/* Inputs and outputs of a data set: a group has at most OPS_GROUP_MAX_IO of each, but an
 * assembled record is evaluated over its whole graph, which may have more. */
#define WK_MAX_IO 64

/* Inputs, device buffers and references of one distinct (subgraph, bindings, seeds). */
typedef struct wk_data {
    uint8_t key[32];
    uint64_t last_use;
    int users; /* loaded candidates that point here */
    ops_graph *g;
    int n_in, n_out;
    size_t in_bytes[WK_MAX_IO], out_bytes[WK_MAX_IO];
    int64_t out_numel[WK_MAX_IO];
    CUdeviceptr d_in[WK_MAX_IO], d_out[WK_MAX_IO];
    int seeds;
    uint64_t seed0;
    uint8_t **h_in;         /* [seed * n_in + i]: typed inputs */
    CUdeviceptr *d_seed_in; /* [seed * n_in + i]: the same on the device (copied into d_in) */
    CUdeviceptr *d_ref;     /* [seed * n_out + j]: fp64 reference outputs (device) */
    /* [seed * n_out + j]: sum of squares and count of the reference values that are finite and
     * representable in the output's dtype (the ones compared by value) */
    double *ref_sumsq;
    int64_t *ref_cmp;
    CUdeviceptr d_prev[WK_MAX_IO]; /* the first run's outputs, for the race check */
    bool have_ref;
    int cur_seed; /* whose inputs d_in holds, -1 none */
    int64_t red_len;
    bool contraction;
    double p_round; /* unit roundoff of an attention's 16-bit operands (P is rounded to it), 0 */
} wk_data;

typedef struct wk wk;

/* One block's partial result of a comparison kernel (kt_part in cmp_source). */
typedef struct wk_part {
    double num, den, worst;
    long long worst_at;  /* WK_NONE: none */
    long long bad;       /* elements whose NaN/Inf class differs from the reference's */
    long long first_bad; /* WK_NONE: none */
    long long n_cmp;     /* elements compared by value (finite, representable reference) */
} wk_part;
#define WK_NONE        0x7fffffffffffffffLL
#define WK_CMP_BLOCKS  1024
#define WK_CMP_THREADS 256

/* One loaded candidate. */
typedef struct wk_cand {
    bool used;
    uint64_t id, seq;
    wk *w;
    wk_data *data;
    CUmodule mod;
    int n_kernels;
    CUfunction fn[SRCH_REQ_MAX_KERNELS];
    ops_kernel_launch launch[SRCH_REQ_MAX_KERNELS];
    int64_t zero_offset[SRCH_REQ_MAX_KERNELS], zero_bytes[SRCH_REQ_MAX_KERNELS]; /* 0: all of ws */
    CUdeviceptr ptrs[SRCH_REQ_MAX_KERNELS][OPS_MAX_ARGS];
    void *params[SRCH_REQ_MAX_KERNELS][OPS_MAX_ARGS];
    CUdeviceptr ws;
    int64_t ws_bytes;
    bool library;
    srch_lt_plan *plan;
    CUdeviceptr lt_a, lt_b, lt_c, lt_bias;
} wk_cand;

struct wk {
    int in_fd, out_fd;
    int init_rc;
    kt_err init_err;
    srch_cuda cu;
    bool have_cu;
    srch_timer *timer;
    kt_err timer_err;
    srch_lt *lt;
    kt_err lt_err;
    char arch[16]; /* NVRTC target of the reference and self-test kernels, "sm_90" */
    char name[128];
    int attr_major, attr_minor, sm_count, clock_khz, l2_bytes, smem_optin, regs_per_sm;
    int max_threads_block, max_threads_sm, max_blocks_sm, smem_block, smem_sm, warp_size;
    int max_regs_block;
    size_t mem_bytes;
    int cuda_version;
    bool dead; /* a sticky error was seen */
    bool selftest_done;
    char selftest[300];
    uint64_t seq;
    /* The comparison module (cmp_source), compiled on first use. */
    bool cmp_ready;
    CUmodule cmp_mod;
    CUfunction f_cmp[OPS_DT_F64 + 1];      /* by output dtype */
    CUfunction f_refstats[OPS_DT_F64 + 1]; /* by output dtype */
    CUfunction f_copy;
    CUfunction f_widen[OPS_DT_F64]; /* by dtype: f32, f16, bf16 */
    CUfunction f_diff[4];           /* by word size 1, 2, 4, 8 */
    CUdeviceptr d_part, d_res;
    wk_part *h_part;
    wk_cand cands[WK_MAX_CANDS];
    int n_data;
    wk_data *data[WK_MAX_CANDS + WK_MAX_DATA + 1];
    /* Reference cubins: the full graph's reference is compiled again for every group that
     * reads intermediates, and NVRTC takes about 0.5 s for it on the H100. */
    struct {
        uint8_t key[32];
        void *cubin; /* NULL: empty slot */
        size_t len;
        uint64_t last_use;
    } ref_cubins[WK_REF_CUBINS];
    uint64_t ref_clock;
    msgpack_sbuffer sb;
    msgpack_packer pk;
};

/* ---- small helpers ---- */

/* Every CUDA call of the worker goes through here: srch_cuda_check translates, and a sticky
 * error marks the context dead. */
static int wk_cu(wk *w, CUresult rc, const char *what, kt_err *err)
{
    if (rc != CUDA_SUCCESS && srch_cuda_sticky(rc))
        w->dead = true;
    return srch_cuda_check(&w->cu, rc, what, err);
}

/* After a failure in code that called CUDA indirectly (timing, cuBLASLt): is the context
 * dead? Sticky errors repeat on every later call, so one synchronise tells. */
static bool wk_probe_dead(wk *w)
{
    if (!w->dead && w->have_cu) {
        CUresult rc = w->cu.p_cuCtxSynchronize();
        if (rc != CUDA_SUCCESS && srch_cuda_sticky(rc))
            w->dead = true;
    }
    return w->dead;
}

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double unit_uniform(uint64_t *s) /* [-1, 1) */
{
    return (double)(splitmix64(s) >> 11) / 4503599627370496.0 - 1.0;
}

static const char *errno_name(int code)
{
    const char *n = strerrorname_np(code < 0 ? -code : code);
    return n ? n : "EIO";
}

static void pack_str(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

static int reply_begin(wk *w)
{
    msgpack_sbuffer_clear(&w->sb);
    return 0;
}

static int reply_send(wk *w)
{
    int rc = kt_write_all(w->out_fd, w->sb.data, w->sb.size);
    if (rc < 0)
        kt_log_err(WK_TAG, "cannot write a reply: %s", strerror(-rc));
    msgpack_sbuffer_clear(&w->sb);
    return rc;
}

static int reply_error(wk *w, int code, const char *msg)
{
    reply_begin(w);
    msgpack_pack_map(&w->pk, 2);
    pack_str(&w->pk, "ok");
    msgpack_pack_false(&w->pk);
    pack_str(&w->pk, "error");
    msgpack_pack_map(&w->pk, 2);
    pack_str(&w->pk, "code");
    pack_str(&w->pk, errno_name(code));
    pack_str(&w->pk, "msg");
    pack_str(&w->pk, msg);
    return reply_send(w);
}

static const msgpack_object *map_get(const msgpack_object *o, const char *key)
{
    size_t n = strlen(key);
    if (o->type != MSGPACK_OBJECT_MAP)
        return NULL;
    for (uint32_t i = 0; i < o->via.map.size; i++) {
        const msgpack_object *k = &o->via.map.ptr[i].key;
        if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
            memcmp(k->via.str.ptr, key, n) == 0)
            return &o->via.map.ptr[i].val;
    }
    return NULL;
}

/* ---- tolerances ---- */

static bool is_contraction(ops_op op)
{
    return op == OPS_MATMUL || op == OPS_CONV2D || op == OPS_ATTENTION;
}

static int64_t node_reduction(const ops_graph *g, const ops_node *n)
{
    const ops_shape *in0 = &g->tensors[n->in[0].tensor].shape;
    switch (n->op) {
    case OPS_MATMUL:
        if (in0->rank < 2)
            return in0->rank == 1 ? in0->d[0].size : 1;
        return n->attrs.transpose_a ? in0->d[in0->rank - 2].size : in0->d[in0->rank - 1].size;
    case OPS_REDUCE_SUM:
    case OPS_REDUCE_MEAN:
    case OPS_REDUCE_MAX:
    case OPS_REDUCE_MIN: {
        int64_t a = ops_shape_numel(in0), b = ops_shape_numel(&g->tensors[n->out].shape);
        return b > 0 ? a / b : a;
    }
    case OPS_CONV2D: {
        const ops_shape *w = &g->tensors[n->in[1].tensor].shape;
        int64_t l = 1;
        for (int k = 1; k < w->rank; k++)
            l *= w->d[k].size;
        return l;
    }
    case OPS_ATTENTION: {
        const ops_shape *k = &g->tensors[n->in[1].tensor].shape;
        int64_t keys = k->rank >= 2 ? k->d[k->rank - 2].size : 1;
        int64_t hd = k->rank >= 1 ? k->d[k->rank - 1].size : 1;
        return keys > hd ? keys : hd;
    }
    default:
        return 1;
    }
}

static double store_rtol(ops_dtype dt)
{
    return dt == OPS_DT_BF16 ? 1.6e-2 : dt == OPS_DT_F16 ? 2e-3 : 1e-6;
}

static double math_rtol(ops_precision p, bool contraction)
{
    if (p == OPS_PREC_REDUCED)
        return 4e-3;
    return p == OPS_PREC_TF32 && contraction ? 2e-4 : 2e-6;
}

/* ---- comparison on the GPU ---- */

/* The comparison kernels, compiled with NVRTC once per worker process (wk_cmp_init). One
 * block-partial record per block (kt_part); the host adds the partials in block order, so the
 * result does not depend on scheduling. The dtype helpers mirror ops_dtype_store/_load (graph.c)
 * bit for bit: f16 and bf16 round through float first, to nearest even. */
static const char cmp_source[] =
    "/* ktune-worker: verification on the GPU (outputs against the fp64 reference, bitwise race\n"
    " * check, seed copies). */\n"
    "typedef unsigned long long u64;\n"
    "typedef unsigned int u32;\n"
    "typedef unsigned short u16;\n"
    "#define KT_NONE 0x7fffffffffffffffLL\n"
    "struct kt_part {\n"
    "    double num, den, worst;\n"
    "    long long worst_at, bad, first_bad, n_cmp;\n"
    "};\n"
    "__device__ float kt_f16_to_f32(u16 h)\n"
    "{\n"
    "    u32 sign = (u32)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, x;\n"
    "    if (exp == 0x1f) {\n"
    "        x = sign | 0x7f800000u | man << 13;\n"
    "    } else if (exp == 0) {\n"
    "        if (!man) {\n"
    "            x = sign;\n"
    "        } else {\n"
    "            int e = -1;\n"
    "            do {\n"
    "                e++;\n"
    "                man <<= 1;\n"
    "            } while (!(man & 0x400u));\n"
    "            x = sign | (u32)(127 - 15 - e) << 23 | (man & 0x3ffu) << 13;\n"
    "        }\n"
    "    } else {\n"
    "        x = sign | (exp + 127 - 15) << 23 | man << 13;\n"
    "    }\n"
    "    return __uint_as_float(x);\n"
    "}\n"
    "/* Is want (finite) still finite once stored in the dtype? (ops_dtype_store's rounding) */\n"
    "template <int DT> __device__ bool kt_repr(double want)\n"
    "{\n"
    "    if (DT == 4)\n"
    "        return true;\n"
    "    float f = (float)want;\n"
    "    if (isinf(f))\n"
    "        return false;\n"
    "    u32 x = __float_as_uint(f);\n"
    "    if (DT == 1)\n"
    "        return true;\n"
    "    if (DT == 3) {\n"
    "        x += 0x7fffu + ((x >> 16) & 1);\n"
    "        return ((x >> 16) & 0x7f80u) != 0x7f80u;\n"
    "    }\n"
    "    u32 exp = (x >> 23) & 0xffu, man = x & 0x7fffffu;\n"
    "    int e = (int)exp - 127 + 15;\n"
    "    if (e >= 31)\n"
    "        return false;\n"
    "    if (e <= 0)\n"
    "        return true;\n"
    "    u32 half = (u32)e << 10 | man >> 13, rest = man & 0x1fffu;\n"
    "    if (rest > 0x1000u || (rest == 0x1000u && (half & 1)))\n"
    "        half++;\n"
    "    return (half & 0x7c00u) != 0x7c00u;\n"
    "}\n"
    "template <int DT> __device__ double kt_load(const void *p, long long k)\n"
    "{\n"
    "    if (DT == 1)\n"
    "        return ((const float *)p)[k];\n"
    "    if (DT == 2)\n"
    "        return kt_f16_to_f32(((const u16 *)p)[k]);\n"
    "    if (DT == 3)\n"
    "        return __uint_as_float((u32)((const u16 *)p)[k] << 16);\n"
    "    return ((const double *)p)[k];\n"
    "}\n"
    "__device__ void kt_merge(kt_part *a, const kt_part *b)\n"
    "{\n"
    "    a->num += b->num;\n"
    "    a->den += b->den;\n"
    "    if (b->worst > a->worst || (b->worst == a->worst && b->worst_at < a->worst_at)) {\n"
    "        a->worst = b->worst;\n"
    "        a->worst_at = b->worst_at;\n"
    "    }\n"
    "    a->bad += b->bad;\n"
    "    if (b->first_bad < a->first_bad)\n"
    "        a->first_bad = b->first_bad;\n"
    "    a->n_cmp += b->n_cmp;\n"
    "}\n"
    "__device__ void kt_block_reduce(kt_part p, kt_part *out)\n"
    "{\n"
    "    __shared__ kt_part s[256];\n"
    "    s[threadIdx.x] = p;\n"
    "    __syncthreads();\n"
    "    for (int h = blockDim.x / 2; h > 0; h /= 2) {\n"
    "        if (threadIdx.x < h)\n"
    "            kt_merge(&s[threadIdx.x], &s[threadIdx.x + h]);\n"
    "        __syncthreads();\n"
    "    }\n"
    "    if (threadIdx.x == 0)\n"
    "        out[blockIdx.x] = s[0];\n"
    "}\n"
    "/* The comparison of compare_output, per element (see the worker's header comment): a NaN\n"
    " * reference wants NaN; an infinite one, or one that overflows the dtype, the infinity of "
    "its\n"
    " * sign; a finite representable one a finite value, which enters the sums and n_cmp. */\n"
    "template <int DT>\n"
    "__device__ void kt_cmp(const void *out, const double *ref, long long n, double atol,\n"
    "                       double rtol, kt_part *part)\n"
    "{\n"
    "    kt_part p = {0, 0, 0, KT_NONE, 0, KT_NONE, 0};\n"
    "    long long stride = (long long)gridDim.x * blockDim.x;\n"
    "    for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += stride) "
    "{\n"
    "        double want = ref[k], got = kt_load<DT>(out, k);\n"
    "        bool same;\n"
    "        if (isnan(want)) {\n"
    "            same = isnan(got);\n"
    "        } else if (isinf(want) || !kt_repr<DT>(want)) {\n"
    "            same = isinf(got) && (got > 0) == (want > 0);\n"
    "        } else if (isfinite(got)) {\n"
    "            double diff = fabs(got - want);\n"
    "            p.num += diff * diff;\n"
    "            p.den += want * want;\n"
    "            p.n_cmp++;\n"
    "            double r = diff / (atol + rtol * fabs(want));\n"
    "            if (r > p.worst) {\n"
    "                p.worst = r;\n"
    "                p.worst_at = k;\n"
    "            }\n"
    "            continue;\n"
    "        } else {\n"
    "            same = false;\n"
    "        }\n"
    "        if (!same && p.bad++ == 0)\n"
    "            p.first_bad = k;\n"
    "    }\n"
    "    kt_block_reduce(p, part);\n"
    "}\n"
    "extern \"C\" __global__ void kt_cmp_f32(const void *o, const double *r, long long n,\n"
    "                                       double atol, double rtol, kt_part *part)\n"
    "{\n"
    "    kt_cmp<1>(o, r, n, atol, rtol, part);\n"
    "}\n"
    "extern \"C\" __global__ void kt_cmp_f16(const void *o, const double *r, long long n,\n"
    "                                       double atol, double rtol, kt_part *part)\n"
    "{\n"
    "    kt_cmp<2>(o, r, n, atol, rtol, part);\n"
    "}\n"
    "extern \"C\" __global__ void kt_cmp_bf16(const void *o, const double *r, long long n,\n"
    "                                        double atol, double rtol, kt_part *part)\n"
    "{\n"
    "    kt_cmp<3>(o, r, n, atol, rtol, part);\n"
    "}\n"
    "extern \"C\" __global__ void kt_cmp_f64(const void *o, const double *r, long long n,\n"
    "                                       double atol, double rtol, kt_part *part)\n"
    "{\n"
    "    kt_cmp<4>(o, r, n, atol, rtol, part);\n"
    "}\n"
    "/* Sum of squares (num) and count (n_cmp) of the reference values that are finite and\n"
    " * representable in the output dtype: the ones kt_cmp compares by value. */\n"
    "template <int DT> __device__ void kt_refstats(const double *ref, long long n, kt_part *part)\n"
    "{\n"
    "    kt_part p = {0, 0, 0, KT_NONE, 0, KT_NONE, 0};\n"
    "    long long stride = (long long)gridDim.x * blockDim.x;\n"
    "    for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += stride)\n"
    "        if (isfinite(ref[k]) && kt_repr<DT>(ref[k])) {\n"
    "            p.num += ref[k] * ref[k];\n"
    "            p.n_cmp++;\n"
    "        }\n"
    "    kt_block_reduce(p, part);\n"
    "}\n"
    "extern \"C\" __global__ void kt_refstats_f32(const double *r, long long n, kt_part *part)\n"
    "{\n"
    "    kt_refstats<1>(r, n, part);\n"
    "}\n"
    "extern \"C\" __global__ void kt_refstats_f16(const double *r, long long n, kt_part *part)\n"
    "{\n"
    "    kt_refstats<2>(r, n, part);\n"
    "}\n"
    "extern \"C\" __global__ void kt_refstats_bf16(const double *r, long long n, kt_part *part)\n"
    "{\n"
    "    kt_refstats<3>(r, n, part);\n"
    "}\n"
    "extern \"C\" __global__ void kt_refstats_f64(const double *r, long long n, kt_part *part)\n"
    "{\n"
    "    kt_refstats<4>(r, n, part);\n"
    "}\n"
    "/* Bitwise difference of two buffers of n words: res[0] += count, res[1] = min index. */\n"
    "template <typename T> __device__ void kt_diff(const T *a, const T *b, long long n, u64 *res)\n"
    "{\n"
    "    u64 cnt = 0, first = ~0ull;\n"
    "    long long stride = (long long)gridDim.x * blockDim.x;\n"
    "    for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += stride)\n"
    "        if (a[k] != b[k]) {\n"
    "            if (cnt++ == 0)\n"
    "                first = (u64)k;\n"
    "        }\n"
    "    if (cnt) {\n"
    "        atomicAdd(&res[0], cnt);\n"
    "        atomicMin(&res[1], first);\n"
    "    }\n"
    "}\n"
    "extern \"C\" __global__ void kt_diff_1(const unsigned char *a, const unsigned char *b,\n"
    "                                      long long n, u64 *res)\n"
    "{\n"
    "    kt_diff(a, b, n, res);\n"
    "}\n"
    "extern \"C\" __global__ void kt_diff_2(const u16 *a, const u16 *b, long long n, u64 *res)\n"
    "{\n"
    "    kt_diff(a, b, n, res);\n"
    "}\n"
    "extern \"C\" __global__ void kt_diff_4(const u32 *a, const u32 *b, long long n, u64 *res)\n"
    "{\n"
    "    kt_diff(a, b, n, res);\n"
    "}\n"
    "extern \"C\" __global__ void kt_diff_8(const u64 *a, const u64 *b, long long n, u64 *res)\n"
    "{\n"
    "    kt_diff(a, b, n, res);\n"
    "}\n"
    "/* out = the n values of in widened to double (ops_dtype_load): the reference's inputs. */\n"
    "template <int DT> __device__ void kt_widen(const void *in, double *out, long long n)\n"
    "{\n"
    "    long long stride = (long long)gridDim.x * blockDim.x;\n"
    "    for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += stride)\n"
    "        out[k] = kt_load<DT>(in, k);\n"
    "}\n"
    "extern \"C\" __global__ void kt_widen_f32(const void *in, double *out, long long n)\n"
    "{\n"
    "    kt_widen<1>(in, out, n);\n"
    "}\n"
    "extern \"C\" __global__ void kt_widen_f16(const void *in, double *out, long long n)\n"
    "{\n"
    "    kt_widen<2>(in, out, n);\n"
    "}\n"
    "extern \"C\" __global__ void kt_widen_bf16(const void *in, double *out, long long n)\n"
    "{\n"
    "    kt_widen<3>(in, out, n);\n"
    "}\n"
    "/* dst = src, n bytes (both 256-byte aligned allocations). */\n"
    "extern \"C\" __global__ void kt_copy(const unsigned char *src, unsigned char *dst, long long "
    "n)\n"
    "{\n"
    "    long long words = n / 16, stride = (long long)gridDim.x * blockDim.x;\n"
    "    long long k0 = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    for (long long k = k0; k < words; k += stride)\n"
    "        ((uint4 *)dst)[k] = ((const uint4 *)src)[k];\n"
    "    for (long long k = words * 16 + k0; k < n; k += stride)\n"
    "        dst[k] = src[k];\n"
    "}\n";

static double wk_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Compiles and loads cmp_source, allocates the partials; once per process. */
static int cmp_init(wk *w, kt_err *err)
{
    if (w->cmp_ready)
        return 0;
    static const struct {
        const char *entry;
        size_t off;
    } fns[] = {
        {"kt_cmp_f32", offsetof(wk, f_cmp[OPS_DT_F32])},
        {"kt_cmp_f16", offsetof(wk, f_cmp[OPS_DT_F16])},
        {"kt_cmp_bf16", offsetof(wk, f_cmp[OPS_DT_BF16])},
        {"kt_cmp_f64", offsetof(wk, f_cmp[OPS_DT_F64])},
        {"kt_refstats_f32", offsetof(wk, f_refstats[OPS_DT_F32])},
        {"kt_refstats_f16", offsetof(wk, f_refstats[OPS_DT_F16])},
        {"kt_refstats_bf16", offsetof(wk, f_refstats[OPS_DT_BF16])},
        {"kt_refstats_f64", offsetof(wk, f_refstats[OPS_DT_F64])},
        {"kt_copy", offsetof(wk, f_copy)},
        {"kt_widen_f32", offsetof(wk, f_widen[OPS_DT_F32])},
        {"kt_widen_f16", offsetof(wk, f_widen[OPS_DT_F16])},
        {"kt_widen_bf16", offsetof(wk, f_widen[OPS_DT_BF16])},
        {"kt_diff_1", offsetof(wk, f_diff[0])},
        {"kt_diff_2", offsetof(wk, f_diff[1])},
        {"kt_diff_4", offsetof(wk, f_diff[2])},
        {"kt_diff_8", offsetof(wk, f_diff[3])},
    };
    srch_compile_result cr = {0};
    int rc = srch_nvrtc_compile(cmp_source, w->arch, &cr);
    if (rc < 0 || cr.status != SRCH_COMPILE_OK) {
        rc = kt_err_set(err, rc < 0 ? rc : -EINVAL, "comparison kernels do not compile: %.300s",
                        cr.log ? cr.log : "");
        goto out;
    }
    if ((rc = wk_cu(w, w->cu.p_cuModuleLoadData(&w->cmp_mod, cr.cubin),
                    "load the comparison kernels", err)) < 0)
        goto out;
    for (size_t i = 0; i < KT_ARRAY_LEN(fns); i++)
        if ((rc = wk_cu(w,
                        w->cu.p_cuModuleGetFunction((CUfunction *)((char *)w + fns[i].off),
                                                    w->cmp_mod, fns[i].entry),
                        fns[i].entry, err)) < 0)
            goto out;
    if ((rc = wk_cu(w, w->cu.p_cuMemAlloc(&w->d_part, WK_CMP_BLOCKS * sizeof(wk_part)),
                    "allocate comparison partials", err)) < 0 ||
        (rc = wk_cu(w, w->cu.p_cuMemAlloc(&w->d_res, 2 * sizeof(uint64_t)),
                    "allocate comparison results", err)) < 0)
        goto out;
    if (!(w->h_part = malloc(WK_CMP_BLOCKS * sizeof(wk_part)))) {
        rc = kt_err_set(err, -ENOMEM, "out of memory");
        goto out;
    }
    w->cmp_ready = true;
out:
    srch_compile_result_release(&cr);
    return rc;
}

static void cmp_free(wk *w)
{
    if (w->d_part)
        w->cu.p_cuMemFree(w->d_part);
    if (w->d_res)
        w->cu.p_cuMemFree(w->d_res);
    if (w->cmp_mod)
        w->cu.p_cuModuleUnload(w->cmp_mod);
    free(w->h_part);
}

static unsigned cmp_grid(int64_t n)
{
    int64_t b = (n + WK_CMP_THREADS - 1) / WK_CMP_THREADS;
    return (unsigned)(b < 1 ? 1 : b > WK_CMP_BLOCKS ? WK_CMP_BLOCKS : b);
}

static int cmp_launch(wk *w, CUfunction f, unsigned grid, void **params, const char *what,
                      kt_err *err)
{
    return wk_cu(w,
                 w->cu.p_cuLaunchKernel(f, grid, 1, 1, WK_CMP_THREADS, 1, 1, 0, NULL, params, NULL),
                 what, err);
}

/* Runs a kernel that writes one wk_part per block, and adds the partials in block order. */
static int cmp_reduce(wk *w, CUfunction f, void **params, int64_t n, wk_part *out, kt_err *err)
{
    unsigned grid = cmp_grid(n);
    int rc;
    if ((rc = cmp_launch(w, f, grid, params, "launch a comparison", err)) < 0 ||
        (rc = wk_cu(w, w->cu.p_cuMemcpyDtoH(w->h_part, w->d_part, grid * sizeof(wk_part)),
                    "download the comparison", err)) < 0)
        return rc;
    wk_part a = {0, 0, 0, WK_NONE, 0, WK_NONE, 0};
    for (unsigned b = 0; b < grid; b++) {
        const wk_part *p = &w->h_part[b];
        a.num += p->num;
        a.den += p->den;
        if (p->worst > a.worst || (p->worst == a.worst && p->worst_at < a.worst_at)) {
            a.worst = p->worst;
            a.worst_at = p->worst_at;
        }
        a.bad += p->bad;
        if (p->first_bad < a.first_bad)
            a.first_bad = p->first_bad;
        a.n_cmp += p->n_cmp;
    }
    *out = a;
    return 0;
}

/* dst = src (bytes), on the device. */
static int cmp_copy(wk *w, CUdeviceptr dst, CUdeviceptr src, size_t bytes, kt_err *err)
{
    int rc = cmp_init(w, err);
    if (rc < 0 || bytes == 0)
        return rc;
    long long n = (long long)bytes;
    void *params[] = {&src, &dst, &n};
    return cmp_launch(w, w->f_copy, cmp_grid((n + 15) / 16), params, "copy on the device", err);
}

/* dst (n doubles) = the n values of dtype dt at src, widened on the device: the host loop it
 * replaces cost ~0.1 s per 16 Mi elements, per seed and per reference run. */
static int cmp_widen(wk *w, ops_dtype dt, CUdeviceptr src, CUdeviceptr dst, int64_t numel,
                     kt_err *err)
{
    int rc = cmp_init(w, err);
    if (rc < 0 || numel == 0)
        return rc;
    if (dt == OPS_DT_F64)
        return cmp_copy(w, dst, src, (size_t)numel * sizeof(double), err);
    long long n = numel;
    void *params[] = {&src, &dst, &n};
    return cmp_launch(w, w->f_widen[dt], cmp_grid(n), params, "widen to double", err);
}

/* How many elements of es bytes differ bitwise between a and b, and the first one. */
static int cmp_diff(wk *w, CUdeviceptr a, CUdeviceptr b, size_t bytes, size_t es, uint64_t *count,
                    uint64_t *first, kt_err *err)
{
    int idx = es == 1 ? 0 : es == 2 ? 1 : es == 4 ? 2 : 3;
    long long n = (long long)(bytes / es);
    uint64_t res[2];
    void *params[] = {&a, &b, &n, &w->d_res};
    int rc;
    if ((rc = wk_cu(w, w->cu.p_cuMemsetD8(w->d_res, 0, sizeof(uint64_t)), "clear the count", err)) <
            0 ||
        (rc = wk_cu(w, w->cu.p_cuMemsetD8(w->d_res + sizeof(uint64_t), 0xff, sizeof(uint64_t)),
                    "clear the index", err)) < 0 ||
        (rc = cmp_launch(w, w->f_diff[idx], cmp_grid(n), params, "launch the race check", err)) <
            0 ||
        (rc = wk_cu(w, w->cu.p_cuMemcpyDtoH(res, w->d_res, sizeof(res)), "download the race check",
                    err)) < 0)
        return rc;
    *count = res[0];
    *first = res[1];
    return 0;
}

/* ---- data sets ---- */

static void data_free(wk *w, wk_data *D)
{
    if (!D)
        return;
    for (int i = 0; i < D->n_in; i++)
        if (D->d_in[i])
            w->cu.p_cuMemFree(D->d_in[i]);
    for (int j = 0; j < D->n_out; j++) {
        if (D->d_out[j])
            w->cu.p_cuMemFree(D->d_out[j]);
        if (D->d_prev[j])
            w->cu.p_cuMemFree(D->d_prev[j]);
    }
    if (D->h_in)
        for (int k = 0; k < D->seeds * D->n_in; k++)
            free(D->h_in[k]);
    if (D->d_seed_in)
        for (int k = 0; k < D->seeds * D->n_in; k++)
            if (D->d_seed_in[k])
                w->cu.p_cuMemFree(D->d_seed_in[k]);
    if (D->d_ref)
        for (int k = 0; k < D->seeds * D->n_out; k++)
            if (D->d_ref[k])
                w->cu.p_cuMemFree(D->d_ref[k]);
    free(D->h_in);
    free(D->d_seed_in);
    free(D->d_ref);
    free(D->ref_sumsq);
    free(D->ref_cmp);
    ops_graph_free(D->g);
    free(D);
}

static int data_key(const srch_eval_req *req, int seeds, uint8_t key[32], kt_err *err)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    int rc = ops_graph_pack(&pk, req->sub);
    if (rc == 0) {
        msgpack_pack_array(&pk, (size_t)req->n_bindings);
        for (int i = 0; i < req->n_bindings; i++) {
            pack_str(&pk, req->bindings[i].name);
            msgpack_pack_int64(&pk, req->bindings[i].value);
        }
        msgpack_pack_uint64(&pk, req->seed0);
        msgpack_pack_int(&pk, seeds);
        /* Without "full" the key is what it always was. */
        if (req->full && (rc = ops_graph_pack(&pk, req->full)) == 0) {
            msgpack_pack_array(&pk, (size_t)req->n_full_bindings);
            for (int i = 0; i < req->n_full_bindings; i++) {
                pack_str(&pk, req->full_bindings[i].name);
                msgpack_pack_int64(&pk, req->full_bindings[i].value);
            }
        }
        ops_sha256(sb.data, sb.size, key);
    }
    msgpack_sbuffer_destroy(&sb);
    return rc < 0 ? kt_err_set(err, rc, "cannot encode the subgraph") : 0;
}

/* srch_random_input (worker.h). Generated in chunks of RANDOM_CHUNK
 * elements, each from its own stream (chunk 0's is the tensor's stream, chunk c's that stream
 * mixed with c), so several threads fill one tensor and the values do not depend on how many
 * run: host generation was most of a data set's cost on 64-128 MiB tensors. */
#define RANDOM_CHUNK   (1 << 20)
#define RANDOM_THREADS 16

typedef struct random_job {
    const ops_tensor *t;
    uint8_t *h;
    uint64_t st0; /* the tensor's stream */
    bool mixed;
    int64_t n, n_chunks;
    int first, step; /* this thread's chunks: first, first + step, ... */
} random_job;

static void random_chunks(const random_job *j)
{
    size_t es = ops_dtype_size(j->t->dtype);
    for (int64_t c = j->first; c < j->n_chunks; c += j->step) {
        uint64_t st = j->st0;
        if (c > 0) {
            uint64_t mix = j->st0 ^ ((uint64_t)c * 0x9E3779B97F4A7C15ull);
            st = splitmix64(&mix);
        }
        int64_t end =
            (c + 1) * (int64_t)RANDOM_CHUNK < j->n ? (c + 1) * (int64_t)RANDOM_CHUNK : j->n;
        for (int64_t k = c * (int64_t)RANDOM_CHUNK; k < end; k++) {
            double v = unit_uniform(&st);
            if (j->mixed)
                v = ldexp(v, (int)(splitmix64(&st) % 10) - 6);
            ops_dtype_store(j->t->dtype, v, j->h + (size_t)k * es);
        }
    }
}

static void *random_thread(void *arg)
{
    random_chunks(arg);
    return NULL;
}

uint8_t *srch_random_input(const ops_tensor *t, uint64_t seed0, int s, int i)
{
    size_t es = ops_dtype_size(t->dtype);
    int64_t n = ops_shape_numel(&t->shape);
    uint8_t *h = malloc(n > 0 ? (size_t)n * es : 1);
    if (!h)
        return NULL;
    random_job base = {.t = t,
                       .h = h,
                       .st0 = (seed0 + (uint64_t)s) * 0xD1B54A32D192ED03ull + (uint64_t)i,
                       .mixed = s % 2 == 1,
                       .n = n,
                       .n_chunks = n > 0 ? (n + RANDOM_CHUNK - 1) / RANDOM_CHUNK : 0,
                       .first = 0,
                       .step = 1};
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int n_threads = (int)(base.n_chunks < RANDOM_THREADS ? base.n_chunks : RANDOM_THREADS);
    if (cpus > 0 && n_threads > cpus)
        n_threads = (int)cpus;
    pthread_t tid[RANDOM_THREADS];
    random_job jobs[RANDOM_THREADS];
    int started = 0;
    for (int k = 1; k < n_threads; k++) { /* threads 1..started run; a failure stops here */
        jobs[k] = base;
        jobs[k].first = k;
        jobs[k].step = n_threads;
        if (pthread_create(&tid[k], NULL, random_thread, &jobs[k]) != 0)
            break;
        started = k;
    }
    /* Thread k covers the chunks c with c % n_threads == k; this thread takes residue 0 and
     * those of threads that could not be started. */
    for (int r = 0; r < (n_threads > 0 ? n_threads : 1); r++) {
        if (r != 0 && r <= started)
            continue;
        jobs[0] = base;
        jobs[0].first = r;
        jobs[0].step = n_threads > 0 ? n_threads : 1;
        random_chunks(&jobs[0]);
    }
    for (int k = 1; k <= started; k++)
        pthread_join(tid[k], NULL);
    return h;
}

/* Host inputs of every seed, rounded to their dtypes. */
static int data_make_inputs(wk_data *D, kt_err *err)
{
    for (int s = 0; s < D->seeds; s++) {
        for (int i = 0; i < D->n_in; i++) {
            uint8_t *h = srch_random_input(&D->g->tensors[i], D->seed0, s, i);
            if (!h)
                return kt_err_set(err, -ENOMEM, "out of memory for inputs (%zu bytes)",
                                  D->in_bytes[i]);
            D->h_in[s * D->n_in + i] = h;
        }
    }
    return 0;
}

/* ---- the fp64 reference program on the GPU ---- */

/* A compiled and loaded reference program (ops_emit_reference_graph) with its workspace. */
typedef struct wk_ref {
    ops_ref_program prog;
    srch_compile_result cr;
    CUmodule mod;
    CUfunction *fn;
    CUdeviceptr ws;
} wk_ref;

static void ref_free(wk *w, wk_ref *r)
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

/* Emits, compiles (NVRTC) and loads the reference of g; allocates its workspace. */
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

static int ref_load(wk *w, const ops_graph *g, wk_ref *r, kt_err *err)
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
static int ref_launch(wk *w, const wk_ref *r, const CUdeviceptr *buf, int n_tensors, kt_err *err)
{
    int rc;
    for (int k = 0; k < r->prog.n_kernels; k++) {
        const ops_kernel_launch *l = &r->prog.kernels[k];
        CUdeviceptr ptrs[OPS_MAX_ARGS];
        void *params[OPS_MAX_ARGS];
        for (int a = 0; a < l->n_args; a++) {
            ptrs[a] = 0;
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

/* Uploads the typed host values h of tensor t into dst as doubles. */
static int upload_doubles(wk *w, const ops_tensor *t, const uint8_t *h, CUdeviceptr dst,
                          kt_err *err)
{
    int64_t n = ops_shape_numel(&t->shape);
    size_t bytes = (size_t)(n > 0 ? n : 1) * ops_dtype_size(t->dtype);
    CUdeviceptr typed = 0;
    int rc = wk_cu(w, w->cu.p_cuMemAlloc(&typed, bytes), "allocate reference inputs", err);
    if (rc == 0)
        rc = wk_cu(w, w->cu.p_cuMemcpyHtoD(typed, h, bytes), "upload reference inputs", err);
    if (rc == 0)
        rc = cmp_widen(w, t->dtype, typed, dst, n, err);
    if (rc == 0) /* the widening reads typed: done before it is freed */
        rc = wk_cu(w, w->cu.p_cuCtxSynchronize(), "widen reference inputs", err);
    if (typed)
        w->cu.p_cuMemFree(typed);
    return rc;
}

/* The inputs of D (subgraph inputs) from req->full: random values for full's graph inputs
 * (the same generator as data_make_inputs, numbered by full's inputs), full's fp64 reference
 * run once per seed, and each input of the subgraph the tensor of full with its name: a graph
 * input takes the drawn values, an intermediate the reference's, rounded to its dtype
 * (ops_dtype_store). The reference runs only when some input is an intermediate. */
static int data_inputs_from_full(wk *w, wk_data *D, const srch_eval_req *req, kt_err *err)
{
    ops_graph *F = ops_graph_clone(req->full);
    int32_t src[WK_MAX_IO];
    int n_fin = 0, rc = 0;
    bool need_ref = false;
    uint8_t **fh = NULL;
    CUdeviceptr *buf = NULL;
    double *host = NULL;
    wk_ref ref = {0};
    ops_diag d = {0};
    if (!F)
        return kt_err_set(err, -ENOMEM, "out of memory");
    while (n_fin < F->n_tensors && F->tensors[n_fin].producer < 0)
        n_fin++;
    for (int i = 0; i < D->n_in; i++) {
        const ops_tensor *st = &D->g->tensors[i];
        src[i] = ops_graph_find_tensor(F, st->name);
        if (src[i] < 0 || F->tensors[src[i]].dtype != st->dtype ||
            ops_shape_numel(&F->tensors[src[i]].shape) != ops_shape_numel(&st->shape)) {
            rc = kt_err_set(err, -EINVAL, "full graph: no tensor '%s' like the input", st->name);
            goto out;
        }
        if (F->tensors[src[i]].producer >= 0) {
            need_ref = true;
            /* An intermediate becomes an output of the copy, so the reference writes it to a
             * buffer of its own instead of the workspace. */
            if (!F->tensors[src[i]].is_output && (rc = ops_graph_mark_output(F, src[i])) < 0) {
                rc = kt_err_set(err, rc, "out of memory");
                goto out;
            }
        }
    }
    if (need_ref && ((rc = ops_graph_validate(F, &d)) < 0 || ops_graph_first_unbound(F))) {
        rc = kt_err_set(err, rc < 0 ? rc : -EINVAL, "full graph: %s",
                        rc < 0 ? d.msg : "not fully bound");
        goto out;
    }
    fh = calloc((size_t)n_fin + 1, sizeof(*fh));
    buf = calloc((size_t)F->n_tensors + 1, sizeof(*buf));
    if (!fh || !buf) {
        rc = kt_err_set(err, -ENOMEM, "out of memory");
        goto out;
    }
    if (need_ref) {
        if ((rc = ref_load(w, F, &ref, err)) < 0)
            goto out;
        for (int t = 0; t < F->n_tensors; t++) {
            if (F->tensors[t].producer >= 0 && !F->tensors[t].is_output)
                continue;
            int64_t n = ops_shape_numel(&F->tensors[t].shape);
            if ((rc = wk_cu(w, w->cu.p_cuMemAlloc(&buf[t], (size_t)(n > 0 ? n : 1) * 8),
                            "allocate full reference buffers", err)) < 0)
                goto out;
        }
    }
    for (int s = 0; s < D->seeds; s++) {
        for (int k = 0; k < n_fin; k++) {
            free(fh[k]);
            if (!(fh[k] = srch_random_input(&F->tensors[k], D->seed0, s, k))) {
                rc = kt_err_set(err, -ENOMEM, "out of memory for inputs");
                goto out;
            }
            if (need_ref && (rc = upload_doubles(w, &F->tensors[k], fh[k], buf[k], err)) < 0)
                goto out;
        }
        if (need_ref && (rc = ref_launch(w, &ref, buf, F->n_tensors, err)) < 0)
            goto out;
        for (int i = 0; i < D->n_in; i++) {
            const ops_tensor *st = &D->g->tensors[i];
            uint8_t *h = malloc(D->in_bytes[i] ? D->in_bytes[i] : 1);
            if (!h) {
                rc = kt_err_set(err, -ENOMEM, "out of memory for inputs");
                goto out;
            }
            D->h_in[s * D->n_in + i] = h;
            if (src[i] < n_fin) {
                memcpy(h, fh[src[i]], D->in_bytes[i]);
                continue;
            }
            int64_t n = ops_shape_numel(&st->shape);
            size_t es = ops_dtype_size(st->dtype);
            free(host);
            if (!(host = malloc((size_t)(n > 0 ? n : 1) * sizeof(double)))) {
                rc = kt_err_set(err, -ENOMEM, "out of memory");
                goto out;
            }
            if ((rc = wk_cu(w, w->cu.p_cuMemcpyDtoH(host, buf[src[i]], (size_t)n * sizeof(double)),
                            "download full reference values", err)) < 0)
                goto out;
            for (int64_t k = 0; k < n; k++)
                ops_dtype_store(st->dtype, host[k], h + (size_t)k * es);
        }
    }
    kt_log_debug(WK_TAG, "data set inputs from the full graph '%s'%s", F->name ? F->name : "",
                 need_ref ? " (its reference ran)" : "");
out:
    free(host);
    if (buf)
        for (int t = 0; t < F->n_tensors; t++)
            if (buf[t])
                w->cu.p_cuMemFree(buf[t]);
    free(buf);
    if (fh)
        for (int k = 0; k < n_fin; k++)
            free(fh[k]);
    free(fh);
    ref_free(w, &ref);
    ops_graph_free(F);
    return rc;
}

static wk_data *data_find(wk *w, const uint8_t key[32])
{
    for (int i = 0; i < w->n_data; i++)
        if (memcmp(w->data[i]->key, key, 32) == 0)
            return w->data[i];
    return NULL;
}

/* Drops unused data sets beyond WK_MAX_DATA, least recently used first. */
static void data_trim(wk *w, int keep)
{
    for (;;) {
        int unused = 0, victim = -1;
        for (int i = 0; i < w->n_data; i++) {
            if (w->data[i]->users > 0)
                continue;
            unused++;
            if (victim < 0 || w->data[i]->last_use < w->data[victim]->last_use)
                victim = i;
        }
        if (unused <= keep || victim < 0)
            return;
        data_free(w, w->data[victim]);
        w->data[victim] = w->data[--w->n_data];
    }
}

static int data_get(wk *w, const srch_eval_req *req, wk_data **out, kt_err *err)
{
    int seeds = req->seeds <= 0 ? WK_DEFAULT_SEEDS : req->seeds < 2 ? 2 : req->seeds;
    uint8_t key[32];
    int rc = data_key(req, seeds, key, err);
    if (rc < 0)
        return rc;
    wk_data *D = data_find(w, key);
    if (D) {
        D->last_use = ++w->seq;
        *out = D;
        return 0;
    }
    data_trim(w, WK_MAX_DATA - 1);
    if (w->n_data >= (int)KT_ARRAY_LEN(w->data))
        return kt_err_set(err, -ENOSPC, "too many data sets in use");
    D = calloc(1, sizeof(*D));
    if (!D)
        return kt_err_set(err, -ENOMEM, "out of memory");
    memcpy(D->key, key, 32);
    D->cur_seed = -1;
    D->seeds = seeds;
    D->seed0 = req->seed0;
    D->red_len = 1;
    if (!(D->g = ops_graph_clone(req->sub))) {
        rc = kt_err_set(err, -ENOMEM, "out of memory");
        goto fail;
    }
    const ops_graph *g = D->g;
    for (int t = 0; t < g->n_tensors && g->tensors[t].producer < 0; t++)
        D->n_in++;
    D->n_out = g->n_outputs;
    if (D->n_in > WK_MAX_IO || D->n_out > WK_MAX_IO) {
        rc = kt_err_set(err, -EINVAL, "subgraph has more than %d inputs or outputs", WK_MAX_IO);
        goto fail;
    }
    for (int n = 0; n < g->n_nodes; n++) {
        int64_t l = node_reduction(g, &g->nodes[n]);
        if (l > D->red_len)
            D->red_len = l;
        if (is_contraction(g->nodes[n].op))
            D->contraction = true;
        if (g->nodes[n].op == OPS_ATTENTION) {
            ops_dtype dt = g->tensors[g->nodes[n].in[0].tensor].dtype;
            double u = dt == OPS_DT_F16 ? 0x1p-11 : dt == OPS_DT_BF16 ? 0x1p-8 : 0;
            D->p_round = u > D->p_round ? u : D->p_round;
        }
    }
    D->h_in = calloc((size_t)(seeds * D->n_in) + 1, sizeof(*D->h_in));
    D->d_seed_in = calloc((size_t)(seeds * D->n_in) + 1, sizeof(*D->d_seed_in));
    D->d_ref = calloc((size_t)(seeds * D->n_out) + 1, sizeof(*D->d_ref));
    D->ref_sumsq = calloc((size_t)(seeds * D->n_out) + 1, sizeof(*D->ref_sumsq));
    D->ref_cmp = calloc((size_t)(seeds * D->n_out) + 1, sizeof(*D->ref_cmp));
    if (!D->h_in || !D->d_seed_in || !D->d_ref || !D->ref_sumsq || !D->ref_cmp) {
        rc = kt_err_set(err, -ENOMEM, "out of memory");
        goto fail;
    }
    for (int i = 0; i < D->n_in; i++) {
        const ops_tensor *t = &g->tensors[i];
        D->in_bytes[i] = (size_t)ops_shape_numel(&t->shape) * ops_dtype_size(t->dtype);
        if ((rc = wk_cu(w, w->cu.p_cuMemAlloc(&D->d_in[i], D->in_bytes[i] ? D->in_bytes[i] : 1),
                        "allocate an input", err)) < 0)
            goto fail;
    }
    for (int j = 0; j < D->n_out; j++) {
        const ops_tensor *t = &g->tensors[g->outputs[j]];
        D->out_numel[j] = ops_shape_numel(&t->shape);
        D->out_bytes[j] = (size_t)D->out_numel[j] * ops_dtype_size(t->dtype);
        if ((rc = wk_cu(w, w->cu.p_cuMemAlloc(&D->d_out[j], D->out_bytes[j] ? D->out_bytes[j] : 1),
                        "allocate an output", err)) < 0)
            goto fail;
    }
    double t0 = wk_now_s();
    if ((rc = req->full ? data_inputs_from_full(w, D, req, err) : data_make_inputs(D, err)) < 0)
        goto fail;
    for (int k = 0; k < seeds * D->n_in; k++) {
        size_t bytes = D->in_bytes[k % D->n_in];
        if ((rc = wk_cu(w, w->cu.p_cuMemAlloc(&D->d_seed_in[k], bytes ? bytes : 1),
                        "allocate an input", err)) < 0 ||
            (rc = wk_cu(w, w->cu.p_cuMemcpyHtoD(D->d_seed_in[k], D->h_in[k], bytes),
                        "upload inputs", err)) < 0)
            goto fail;
    }
    kt_log_debug(WK_TAG, "data set: %d seeds of %d inputs generated in %.3f s", seeds, D->n_in,
                 wk_now_s() - t0);
    D->last_use = ++w->seq;
    w->data[w->n_data++] = D;
    *out = D;
    return 0;
fail:
    data_free(w, D);
    return rc;
}

static CUdeviceptr data_ptr(const wk_data *D, int32_t t)
{
    if (t >= 0 && t < D->n_in)
        return D->d_in[t];
    for (int j = 0; j < D->n_out; j++)
        if (D->g->outputs[j] == t)
            return D->d_out[j];
    return 0;
}

static int data_upload(wk *w, wk_data *D, int s, kt_err *err)
{
    if (D->cur_seed == s)
        return 0;
    for (int i = 0; i < D->n_in; i++) {
        int rc = cmp_copy(w, D->d_in[i], D->d_seed_in[s * D->n_in + i], D->in_bytes[i], err);
        if (rc < 0)
            return rc;
    }
    D->cur_seed = s;
    return 0;
}

/* Compiles and runs the fp64 reference of D->g for every seed; keeps the outputs. */
static int data_reference(wk *w, wk_data *D, kt_err *err)
{
    if (D->have_ref)
        return 0;
    wk_ref ref = {0};
    const ops_graph *g = D->g;
    /* Double buffers by tensor: copies of the graph inputs (freed here); the outputs are each
     * seed's D->d_ref, kept. */
    CUdeviceptr *buf = calloc((size_t)g->n_tensors + 1, sizeof(*buf));
    double t0 = wk_now_s();
    int rc = buf ? cmp_init(w, err) : kt_err_set(err, -ENOMEM, "out of memory");
    if (rc < 0 || (rc = ref_load(w, g, &ref, err)) < 0)
        goto out;
    double t_load = wk_now_s() - t0;
    for (int i = 0; i < D->n_in; i++) {
        int64_t n = ops_shape_numel(&g->tensors[i].shape);
        if ((rc = wk_cu(w, w->cu.p_cuMemAlloc(&buf[i], (size_t)(n ? n : 1) * sizeof(double)),
                        "allocate reference buffers", err)) < 0)
            goto out;
    }
    for (int s = 0; s < D->seeds; s++) {
        for (int j = 0; j < D->n_out; j++) {
            CUdeviceptr *r = &D->d_ref[s * D->n_out + j];
            size_t bytes = (size_t)(D->out_numel[j] ? D->out_numel[j] : 1) * sizeof(double);
            if (!*r && (rc = wk_cu(w, w->cu.p_cuMemAlloc(r, bytes), "allocate reference outputs",
                                   err)) < 0)
                goto out;
            buf[g->outputs[j]] = *r;
        }
        for (int i = 0; i < D->n_in; i++)
            if ((rc = cmp_widen(w, g->tensors[i].dtype, D->d_seed_in[s * D->n_in + i], buf[i],
                                ops_shape_numel(&g->tensors[i].shape), err)) < 0)
                goto out;
        if ((rc = ref_launch(w, &ref, buf, g->n_tensors, err)) < 0)
            goto out;
        for (int j = 0; j < D->n_out; j++) {
            CUdeviceptr r = D->d_ref[s * D->n_out + j];
            long long n = D->out_numel[j];
            ops_dtype dt = g->tensors[g->outputs[j]].dtype;
            void *params[] = {&r, &n, &w->d_part};
            wk_part p;
            if (dt < OPS_DT_F32 || dt > OPS_DT_F64) {
                rc = kt_err_set(err, -EINVAL, "output %d has no dtype", j);
                goto out;
            }
            if ((rc = cmp_reduce(w, w->f_refstats[dt], params, n, &p, err)) < 0)
                goto out;
            D->ref_sumsq[s * D->n_out + j] = p.num;
            D->ref_cmp[s * D->n_out + j] = p.n_cmp;
        }
    }
    D->have_ref = true;
    kt_log_debug(WK_TAG, "reference of %d seeds in %.3f s (%.3f s compiling and loading it)",
                 D->seeds, wk_now_s() - t0, t_load);
out:
    if (buf)
        for (int i = 0; i < D->n_in; i++)
            if (buf[i])
                w->cu.p_cuMemFree(buf[i]);
    free(buf);
    ref_free(w, &ref);
    return rc;
}

/* ---- candidates ---- */

static void cand_release(wk *w, wk_cand *c)
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
    memset(c, 0, sizeof(*c));
}

static wk_cand *cand_find(wk *w, uint64_t id)
{
    for (int i = 0; i < WK_MAX_CANDS; i++)
        if (w->cands[i].used && w->cands[i].id == id)
            return &w->cands[i];
    return NULL;
}

/* A free slot; the oldest candidate goes when all 64 are taken. */
static wk_cand *cand_slot(wk *w)
{
    wk_cand *oldest = NULL;
    for (int i = 0; i < WK_MAX_CANDS; i++) {
        if (!w->cands[i].used)
            return &w->cands[i];
        if (!oldest || w->cands[i].seq < oldest->seq)
            oldest = &w->cands[i];
    }
    cand_release(w, oldest);
    return oldest;
}

/* One run of the candidate: every kernel in order (or the cuBLASLt call) on the default
 * stream. The srch_launch_fn of the timer. */
static int cand_launch(void *ctx, kt_err *err)
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

static srch_status fail_status(wk *w, srch_status otherwise)
{
    return wk_probe_dead(w) ? SRCH_FAULT : otherwise;
}

/* Loads the cubin (or plans the cuBLASLt call) and resolves every argument. On failure the
 * result says why and the slot stays with the caller to release. */
static int cand_load(wk *w, wk_cand *c, const srch_eval_req *req, srch_eval_result *res)
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
        c->lt_a = data_ptr(D, req->lt.a_tensor);
        c->lt_b = data_ptr(D, req->lt.b_tensor);
        c->lt_c = data_ptr(D, req->lt.c_tensor);
        c->lt_bias = req->lt.bias_tensor >= 0 ? data_ptr(D, req->lt.bias_tensor) : 0;
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
            if (l->smem_bytes > (uint32_t)w->smem_block &&
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
    for (int k = 0; k < c->n_kernels; k++) {
        const ops_kernel_launch *l = &c->launch[k];
        for (int a = 0; a < l->n_args; a++) {
            c->ptrs[k][a] = l->args[a].kind == OPS_ARG_TENSOR
                                ? data_ptr(D, l->args[a].tensor)
                                : c->ws + (CUdeviceptr)l->args[a].offset;
            c->params[k][a] = &c->ptrs[k][a];
        }
    }
    return 0;
fail:
    res->status = fail_status(w, SRCH_LOAD_ERROR);
    snprintf(res->msg, sizeof(res->msg), "%.255s", err.msg);
    return rc;
}

/* Poisons outputs and workspace and runs once; the outputs stay on the device. */
static int cand_run_once(wk_cand *c, kt_err *err)
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
    if ((rc = cand_launch(c, err)) < 0)
        return rc;
    return wk_cu(w, w->cu.p_cuCtxSynchronize(), "run the candidate", err);
}

typedef struct wk_check {
    double err_norm, err_max;
    bool pass;
    char why[256];
} wk_check;

/* A value for a message: NaN and the infinities spelled as such. */
static const char *fmt_value(char *buf, size_t len, double v)
{
    if (isnan(v))
        return "NaN";
    if (isinf(v))
        return v > 0 ? "Inf" : "-Inf";
    snprintf(buf, len, "%.6g", v);
    return buf;
}

/* Downloads element k of output j (the last run's) and of the reference of seed s. */
static int fetch_element(wk *w, const wk_data *D, int s, int j, long long k, double *got,
                         double *want, kt_err *err)
{
    ops_dtype dt = D->g->tensors[D->g->outputs[j]].dtype;
    size_t es = ops_dtype_size(dt);
    uint8_t raw[8] = {0};
    int rc;
    if ((rc = wk_cu(w, w->cu.p_cuMemcpyDtoH(raw, D->d_out[j] + (CUdeviceptr)k * es, es),
                    "download an output element", err)) < 0 ||
        (rc = wk_cu(w,
                    w->cu.p_cuMemcpyDtoH(
                        want, D->d_ref[s * D->n_out + j] + (CUdeviceptr)k * sizeof(double),
                        sizeof(double)),
                    "download a reference element", err)) < 0)
        return rc;
    *got = ops_dtype_load(dt, raw);
    return 0;
}

/* Compares output j of the last run (D->d_out[j]) with the reference of seed s, on the GPU
 * (kt_cmp_*): only the sums, the worst ratio and the counts come back. Every element is judged
 * (the header comment's rules); the first failing rule gives chk->why. Returns 0 or a CUDA
 * error. */
static int compare_output(wk *w, const wk_data *D, int s, int j, double tol_norm, double tol_scale,
                          ops_precision prec, wk_check *chk, kt_err *err)
{
    const ops_tensor *t = &D->g->tensors[D->g->outputs[j]];
    CUdeviceptr ref = D->d_ref[s * D->n_out + j], out = D->d_out[j];
    long long n = D->out_numel[j];
    int64_t n_cmp = D->ref_cmp[s * D->n_out + j];
    double rms = n_cmp ? sqrt(D->ref_sumsq[s * D->n_out + j] / (double)n_cmp) : 0;
    double r_math = math_rtol(prec, D->contraction);
    if (D->p_round > r_math)
        r_math = D->p_round;
    double rtol = (store_rtol(t->dtype) + r_math * sqrt((double)D->red_len)) * tol_scale;
    double atol = rtol * rms;
    if (atol <= 0)
        atol = 1e-30; /* an all-zero reference: any difference counts */
    if (t->dtype < OPS_DT_F32 || t->dtype > OPS_DT_F64)
        return kt_err_set(err, -EINVAL, "output '%.40s' has no dtype", t->name);
    void *params[] = {&out, &ref, &n, &atol, &rtol, &w->d_part};
    wk_part p;
    int rc = cmp_reduce(w, w->f_cmp[t->dtype], params, n, &p, err);
    if (rc < 0)
        return rc;
    double en = p.den > 0 ? sqrt(p.num / p.den) : sqrt(p.num);
    if (p.bad || p.n_cmp == 0)
        en = INFINITY; /* nothing or not everything measured: no error to report */
    if (en > chk->err_norm)
        chk->err_norm = en;
    if (p.worst > chk->err_max)
        chk->err_max = p.worst;
    if (!chk->pass)
        return 0; /* keep the first reason */
    char b1[32], b2[32];
    double got, want;
    if (p.bad) {
        if ((rc = fetch_element(w, D, s, j, p.first_bad, &got, &want, err)) < 0)
            return rc;
        chk->pass = false;
        snprintf(chk->why, sizeof(chk->why),
                 "output '%.40s' seed %d: %lld elements differ in NaN/Inf from the reference "
                 "(first at element %lld: got %s, reference %s)",
                 t->name, s, p.bad, p.first_bad, fmt_value(b1, sizeof(b1), got),
                 fmt_value(b2, sizeof(b2), want));
    } else if (p.n_cmp == 0) {
        chk->pass = false;
        snprintf(chk->why, sizeof(chk->why),
                 "output '%.40s' seed %d: too few elements compared (0 of %lld: the reference is "
                 "NaN, infinite or overflows %s at every element)",
                 t->name, s, n, ops_dtype_name(t->dtype));
    } else if (en > tol_norm) {
        chk->pass = false;
        snprintf(chk->why, sizeof(chk->why),
                 "output '%.40s' seed %d: normwise error %.3g over tolerance %.3g", t->name, s, en,
                 tol_norm);
    } else if (p.worst > 1) {
        if ((rc = fetch_element(w, D, s, j, p.worst_at, &got, &want, err)) < 0)
            return rc;
        chk->pass = false;
        snprintf(chk->why, sizeof(chk->why),
                 "output '%.40s' seed %d: element %lld is %.3g, reference %.6g (%.3g x the "
                 "elementwise bound)",
                 t->name, s, p.worst_at, got, want, p.worst);
    }
    return 0;
}

/* Verifies a loaded candidate; fills res (status, err_norm, err_max, msg). Returns 0 when the
 * verification ran (pass or not), a negative errno when it could not. */
static int cand_verify(wk_cand *c, const srch_eval_req *req, srch_eval_result *res)
{
    wk *w = c->w;
    wk_data *D = c->data;
    kt_err err = {0};
    int rc;
    if ((rc = data_reference(w, D, &err)) < 0) {
        /* A reference that cannot run is our failure, not the candidate's. */
        res->status = fail_status(w, SRCH_LOAD_ERROR);
        snprintf(res->msg, sizeof(res->msg), "reference: %.240s", err.msg);
        return w->dead ? 0 : rc;
    }
    double def = ops_default_tolerance(D->g, req->precision);
    double tol = req->tolerance > 0 ? req->tolerance : def;
    double scale = tol > def ? tol / def : 1.0;
    for (int j = 0; j < D->n_out; j++)
        if (!D->d_prev[j] &&
            (rc = wk_cu(w, w->cu.p_cuMemAlloc(&D->d_prev[j], D->out_bytes[j] ? D->out_bytes[j] : 1),
                        "allocate the race-check copy", &err)) < 0)
            goto cuda_fail;
    wk_check chk = {.pass = true};
    for (int s = 0; s < D->seeds; s++) {
        if ((rc = data_upload(w, D, s, &err)) < 0 || (rc = cand_run_once(c, &err)) < 0)
            goto cuda_fail;
        for (int j = 0; j < D->n_out; j++)
            if ((rc = compare_output(w, D, s, j, tol, scale, req->precision, &chk, &err)) < 0)
                goto cuda_fail;
        if (!chk.pass) {
            res->status = SRCH_WRONG;
            snprintf(res->msg, sizeof(res->msg), "%s", chk.why);
            break;
        }
        for (int j = 0; j < D->n_out; j++)
            if ((rc = cmp_copy(w, D->d_prev[j], D->d_out[j], D->out_bytes[j], &err)) < 0)
                goto cuda_fail;
        if ((rc = cand_run_once(c, &err)) < 0)
            goto cuda_fail;
        for (int j = 0; j < D->n_out; j++) {
            size_t es = ops_dtype_size(D->g->tensors[D->g->outputs[j]].dtype);
            uint64_t ndiff = 0, first = 0;
            if ((rc = cmp_diff(w, D->d_prev[j], D->d_out[j], D->out_bytes[j], es, &ndiff, &first,
                               &err)) < 0)
                goto cuda_fail;
            if (ndiff == 0)
                continue;
            res->status = SRCH_RACE;
            snprintf(res->msg, sizeof(res->msg),
                     "output '%.40s' seed %d: two runs on the same inputs differ bitwise (first "
                     "at element %llu)",
                     D->g->tensors[D->g->outputs[j]].name, s, (unsigned long long)first);
            break;
        }
        if (res->status == SRCH_RACE)
            break;
    }
    res->err_norm = chk.err_norm;
    res->err_max = chk.err_max;
    return 0;
cuda_fail:
    res->status = fail_status(w, SRCH_LOAD_ERROR);
    snprintf(res->msg, sizeof(res->msg), "%.255s", err.msg);
    return 0;
}

/* Loads, verifies and times one candidate. The candidate stays loaded when it passed. Returns
 * 0 with res filled, or a negative errno (detail in err) for a failure of the worker itself
 * (no GPU, no timer, out of host memory), which becomes an error reply. */
static int eval_core(wk *w, const srch_eval_req *req, srch_eval_result *res, kt_err *err)
{
    memset(res, 0, sizeof(*res));
    res->id = req->id;
    if (w->init_rc < 0)
        return kt_err_set(err, w->init_rc, "%s", w->init_err.msg);
    if (req->time && !w->timer)
        return kt_err_set(err, -ENODEV, "cannot time: %s", w->timer_err.msg);
    wk_cand *old = cand_find(w, req->id);
    if (old)
        cand_release(w, old);
    wk_data *D = NULL;
    double t0 = wk_now_s();
    int rc = data_get(w, req, &D, err);
    double t1 = wk_now_s(), t2 = t1;
    if (rc < 0) {
        if (wk_probe_dead(w)) {
            res->status = SRCH_FAULT;
            snprintf(res->msg, sizeof(res->msg), "%.255s", err->msg);
            return 0;
        }
        return rc;
    }
    wk_cand *c = cand_slot(w);
    c->used = true;
    c->id = req->id;
    c->seq = ++w->seq;
    c->w = w;
    c->data = D;
    D->users++;
    if (cand_load(w, c, req, res) < 0)
        goto done;
    if (req->verify && (rc = cand_verify(c, req, res)) < 0) {
        cand_release(w, c);
        return kt_err_set(err, rc, "%s", res->msg);
    }
    t2 = wk_now_s();
    if (res->status == SRCH_OK && req->time) {
        kt_err terr = {0};
        /* Library calls may launch more than one kernel: let the timer count them. */
        int kpr = c->library ? 0 : c->n_kernels;
        rc = srch_time(w->timer, &w->cu, cand_launch, c, kpr, &req->timing, &res->time, &terr);
        if (rc < 0) {
            if (wk_probe_dead(w)) {
                res->status = SRCH_FAULT;
                snprintf(res->msg, sizeof(res->msg), "timing: %.240s", terr.msg);
            } else {
                cand_release(w, c);
                return kt_err_set(err, rc, "timing: %.240s", terr.msg);
            }
        }
    }
done:
    kt_log_debug(WK_TAG, "%s %llu: data %.3f s, load and verify %.3f s, timing %.3f s",
                 req->record ? "record" : "candidate", (unsigned long long)req->id, t1 - t0,
                 t2 - t1, wk_now_s() - t2);
    /* A record is evaluated once, never re-timed: its module and workspace go now. */
    if (res->status != SRCH_OK || req->record)
        cand_release(w, c);
    return 0;
}

/* ---- requests ---- */

static int handle_eval(wk *w, const msgpack_object *o)
{
    srch_eval_req req;
    srch_eval_result res;
    kt_err err = {0};
    int rc = srch_eval_req_unpack(o, &req, &err);
    if (rc < 0)
        return reply_error(w, rc, err.msg);
    rc = eval_core(w, &req, &res, &err);
    srch_eval_req_free(&req);
    if (rc < 0)
        return reply_error(w, rc, err.msg);
    if (res.status != SRCH_OK)
        kt_log_debug(WK_TAG, "candidate %llu: %s: %s", (unsigned long long)res.id,
                     srch_status_str(res.status), res.msg);
    reply_begin(w);
    srch_eval_result_pack(&w->pk, &res);
    return reply_send(w);
}

static void pack_time(msgpack_packer *pk, uint64_t id, const srch_time_stats *t)
{
    msgpack_pack_map(pk, 5);
    pack_str(pk, "id");
    msgpack_pack_uint64(pk, id);
    pack_str(pk, "median_ns");
    msgpack_pack_double(pk, t->median_ns);
    pack_str(pk, "p10_ns");
    msgpack_pack_double(pk, t->p10_ns);
    pack_str(pk, "p90_ns");
    msgpack_pack_double(pk, t->p90_ns);
    pack_str(pk, "reps");
    msgpack_pack_int(pk, t->reps);
}

static int handle_retime(wk *w, const msgpack_object *o)
{
    const msgpack_object *ids = map_get(o, "ids"), *rounds = map_get(o, "rounds"),
                         *cold = map_get(o, "cold");
    if (w->init_rc < 0)
        return reply_error(w, w->init_rc, w->init_err.msg);
    if (!w->timer)
        return reply_error(w, -ENODEV, w->timer_err.msg);
    if (!ids || ids->type != MSGPACK_OBJECT_ARRAY || ids->via.array.size == 0 ||
        ids->via.array.size > WK_MAX_CANDS)
        return reply_error(w, -EPROTO, "retime: 'ids' must be an array of 1 to 64 ids");
    int n_rounds = 10;
    if (rounds) {
        if (rounds->type != MSGPACK_OBJECT_POSITIVE_INTEGER || rounds->via.u64 < 1 ||
            rounds->via.u64 > 100000)
            return reply_error(w, -EPROTO, "retime: 'rounds' must be 1 to 100000");
        n_rounds = (int)rounds->via.u64;
    }
    if (cold && cold->type != MSGPACK_OBJECT_BOOLEAN)
        return reply_error(w, -EPROTO, "retime: 'cold' must be a boolean");
    int n = (int)ids->via.array.size;
    srch_launch_fn fns[WK_MAX_CANDS];
    void *ctx[WK_MAX_CANDS];
    int kpr[WK_MAX_CANDS];
    uint64_t idv[WK_MAX_CANDS];
    srch_time_stats st[WK_MAX_CANDS];
    for (int i = 0; i < n; i++) {
        const msgpack_object *e = &ids->via.array.ptr[i];
        char msg[96];
        if (e->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
            return reply_error(w, -EPROTO, "retime: ids must be unsigned integers");
        wk_cand *c = cand_find(w, e->via.u64);
        if (!c) {
            snprintf(msg, sizeof(msg), "retime: candidate %llu is not loaded",
                     (unsigned long long)e->via.u64);
            return reply_error(w, -ENOENT, msg);
        }
        idv[i] = c->id;
        fns[i] = cand_launch;
        ctx[i] = c;
        kpr[i] = c->library ? 0 : c->n_kernels;
    }
    kt_err err = {0};
    int rc = srch_time_interleaved(w->timer, &w->cu, n, fns, ctx, kpr, n_rounds,
                                   cold && cold->via.boolean, st, &err);
    if (rc < 0) {
        wk_probe_dead(w);
        return reply_error(w, w->dead ? -EFAULT : rc, err.msg);
    }
    reply_begin(w);
    msgpack_pack_map(&w->pk, 2);
    pack_str(&w->pk, "ok");
    msgpack_pack_true(&w->pk);
    pack_str(&w->pk, "times");
    msgpack_pack_array(&w->pk, (size_t)n);
    for (int i = 0; i < n; i++)
        pack_time(&w->pk, idv[i], &st[i]);
    return reply_send(w);
}

static int handle_forget(wk *w, const msgpack_object *o)
{
    const msgpack_object *ids = map_get(o, "ids");
    if (!ids || ids->type != MSGPACK_OBJECT_ARRAY)
        return reply_error(w, -EPROTO, "forget: 'ids' must be an array");
    for (uint32_t i = 0; i < ids->via.array.size; i++) {
        const msgpack_object *e = &ids->via.array.ptr[i];
        if (e->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
            return reply_error(w, -EPROTO, "forget: ids must be unsigned integers");
        wk_cand *c = cand_find(w, e->via.u64);
        if (c)
            cand_release(w, c);
    }
    data_trim(w, WK_MAX_DATA);
    reply_begin(w);
    msgpack_pack_map(&w->pk, 1);
    pack_str(&w->pk, "ok");
    msgpack_pack_true(&w->pk);
    return reply_send(w);
}

/* The inputs and fp64 reference outputs of a subgraph, for tests of the reference itself. */
static int handle_reference(wk *w, const msgpack_object *o)
{
    srch_eval_req req;
    kt_err err = {0};
    int rc = srch_eval_req_unpack(o, &req, &err);
    if (rc < 0)
        return reply_error(w, rc, err.msg);
    wk_data *D = NULL;
    if (w->init_rc < 0)
        rc = kt_err_set(&err, w->init_rc, "%s", w->init_err.msg);
    else if ((rc = data_get(w, &req, &D, &err)) == 0)
        rc = data_reference(w, D, &err);
    srch_eval_req_free(&req);
    if (rc < 0) {
        wk_probe_dead(w);
        return reply_error(w, w->dead ? -EFAULT : rc, err.msg);
    }
    reply_begin(w);
    msgpack_pack_map(&w->pk, 3);
    pack_str(&w->pk, "ok");
    msgpack_pack_true(&w->pk);
    pack_str(&w->pk, "inputs");
    msgpack_pack_array(&w->pk, (size_t)D->seeds);
    for (int s = 0; s < D->seeds; s++) {
        msgpack_pack_array(&w->pk, (size_t)D->n_in);
        for (int i = 0; i < D->n_in; i++) {
            msgpack_pack_bin(&w->pk, D->in_bytes[i]);
            msgpack_pack_bin_body(&w->pk, D->h_in[s * D->n_in + i], D->in_bytes[i]);
        }
    }
    pack_str(&w->pk, "outputs");
    msgpack_pack_array(&w->pk, (size_t)D->seeds);
    for (int s = 0; s < D->seeds; s++) {
        msgpack_pack_array(&w->pk, (size_t)D->n_out);
        for (int j = 0; j < D->n_out; j++) {
            size_t bytes = (size_t)D->out_numel[j] * sizeof(double);
            double *h = malloc(bytes ? bytes : 1);
            if (!h)
                return reply_error(w, -ENOMEM, "out of memory");
            rc = wk_cu(w, w->cu.p_cuMemcpyDtoH(h, D->d_ref[s * D->n_out + j], bytes),
                       "download the reference", &err);
            if (rc == 0) {
                msgpack_pack_bin(&w->pk, bytes);
                msgpack_pack_bin_body(&w->pk, h, bytes);
            }
            free(h);
            if (rc < 0)
                return reply_error(w, w->dead ? -EFAULT : rc, err.msg);
        }
    }
    return reply_send(w);
}

/* ---- start-up, self-test, hello ---- */

static const char selftest_source[] =
    "/* ktune-worker self-test: y = 2 x + 1 */\n"
    "extern \"C\" __global__ void kt_selftest(const float *x, float *y)\n"
    "{\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < " WK_XSTR(WK_SELFTEST_N) ")\n"
                                          "        y[i] = x[i] * 2.0f + 1.0f;\n"
                                          "}\n";

/* A known pointwise kernel through the whole path: NVRTC, load, reference, verify, time. */
static void selftest(wk *w)
{
    ops_graph *g = ops_graph_new("selftest");
    srch_compile_result cr = {0};
    srch_eval_req req = {0};
    srch_eval_result res = {0};
    kt_err err = {0};
    ops_diag d = {0};
    ops_shape shape = {.rank = 1, .d = {{WK_SELFTEST_N, OPS_NO_SYM}}};
    int x, n0, n1;
    w->selftest_done = true;
    if (!g || (x = ops_graph_add_input(g, "x", OPS_DT_F32, &shape, false)) < 0 ||
        (n0 = ops_graph_add_node(g, OPS_MUL, "t", NULL)) < 0) {
        snprintf(w->selftest, sizeof(w->selftest), "failed: cannot build the graph");
        goto out;
    }
    g->nodes[n0].n_in = 2;
    g->nodes[n0].in[0] = (ops_operand){.tensor = x};
    g->nodes[n0].in[1] = (ops_operand){.tensor = OPS_SCALAR, .scalar = 2.0};
    if ((n1 = ops_graph_add_node(g, OPS_ADD, "y", NULL)) < 0) {
        snprintf(w->selftest, sizeof(w->selftest), "failed: cannot build the graph");
        goto out;
    }
    g->nodes[n1].n_in = 2;
    g->nodes[n1].in[0] = (ops_operand){.tensor = g->nodes[n0].out};
    g->nodes[n1].in[1] = (ops_operand){.tensor = OPS_SCALAR, .scalar = 1.0};
    if (ops_graph_mark_output(g, g->nodes[n1].out) < 0 || ops_graph_validate(g, &d) < 0) {
        snprintf(w->selftest, sizeof(w->selftest), "failed: graph: %.200s", d.msg);
        goto out;
    }
    if (srch_nvrtc_compile(selftest_source, w->arch, &cr) < 0 || cr.status != SRCH_COMPILE_OK) {
        snprintf(w->selftest, sizeof(w->selftest), "failed: NVRTC: %.200s", cr.log ? cr.log : "");
        goto out;
    }
    req.id = UINT64_MAX;
    req.sub = g;
    req.seeds = 2;
    req.seed0 = 1;
    req.verify = true;
    req.time = w->timer != NULL;
    req.timing.budget_s = 0.02;
    req.cubin = cr.cubin;
    req.cubin_len = cr.cubin_len;
    req.n_kernels = 1;
    ops_kernel_launch *l = &req.kernels[0];
    snprintf(l->entry, sizeof(l->entry), "kt_selftest");
    l->grid[0] = WK_SELFTEST_N / 256;
    l->grid[1] = l->grid[2] = 1;
    l->block[0] = 256;
    l->block[1] = l->block[2] = 1;
    l->n_args = 2;
    l->args[0] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = x};
    l->args[1] = (ops_arg){.kind = OPS_ARG_TENSOR, .tensor = g->nodes[n1].out};
    if (eval_core(w, &req, &res, &err) < 0)
        snprintf(w->selftest, sizeof(w->selftest), "failed: %.280s", err.msg);
    else if (res.status != SRCH_OK)
        snprintf(w->selftest, sizeof(w->selftest), "failed: %s: %.250s",
                 srch_status_str(res.status), res.msg);
    else
        snprintf(w->selftest, sizeof(w->selftest), "ok");
    if (res.status == SRCH_OK)
        kt_log_info(WK_TAG, "self-test ok: err %.2e, %.2f us (%d reps)", res.err_norm,
                    res.time.median_ns / 1e3, res.time.reps);
    wk_cand *c = cand_find(w, req.id);
    if (c)
        cand_release(w, c);
    data_trim(w, 0);
out:
    srch_compile_result_release(&cr);
    ops_graph_free(g);
}

static int attr(wk *w, CUdevice_attribute a, int *out, kt_err *err)
{
    return wk_cu(w, w->cu.p_cuDeviceGetAttribute(out, a, w->cu.device), "cuDeviceGetAttribute",
                 err);
}

static int wk_init(wk *w, kt_err *err)
{
    int rc;
    /* CUPTI first: activity tracing must be enabled before the context exists. */
    if (srch_timer_open(&w->timer, &w->timer_err) < 0) {
        w->timer = NULL;
        kt_log_warn(WK_TAG, "no timing: %s", w->timer_err.msg);
    }
    if ((rc = srch_cuda_open(&w->cu, 0, err)) < 0)
        return rc;
    w->have_cu = true;
    if ((rc = wk_cu(w, w->cu.p_cuDeviceGetName(w->name, (int)sizeof(w->name), w->cu.device),
                    "cuDeviceGetName", err)) < 0 ||
        (rc = wk_cu(w, w->cu.p_cuDeviceTotalMem(&w->mem_bytes, w->cu.device), "cuDeviceTotalMem",
                    err)) < 0 ||
        (rc = attr(w, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &w->attr_major, err)) < 0 ||
        (rc = attr(w, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, &w->attr_minor, err)) < 0 ||
        (rc = attr(w, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &w->sm_count, err)) < 0 ||
        (rc = attr(w, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, &w->l2_bytes, err)) < 0 ||
        (rc = attr(w, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, &w->smem_optin, err)) <
            0 ||
        (rc = attr(w, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, &w->smem_block, err)) < 0 ||
        (rc = attr(w, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, &w->smem_sm, err)) <
            0 ||
        (rc = attr(w, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, &w->regs_per_sm, err)) <
            0 ||
        (rc = attr(w, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, &w->max_regs_block, err)) < 0 ||
        (rc = attr(w, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, &w->max_threads_block, err)) < 0 ||
        (rc = attr(w, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, &w->max_threads_sm,
                   err)) < 0 ||
        (rc = attr(w, CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, &w->max_blocks_sm, err)) <
            0 ||
        (rc = attr(w, CU_DEVICE_ATTRIBUTE_WARP_SIZE, &w->warp_size, err)) < 0)
        return rc;
    /* The nominal clock (CUDA 13 still answers it); the timer reads the current one. */
    if (attr(w, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, &w->clock_khz, NULL) < 0)
        w->clock_khz = 0;
    snprintf(w->arch, sizeof(w->arch), "sm_%d%d", w->attr_major, w->attr_minor);
    int maj = 0, min = 0;
    if (nvrtcVersion(&maj, &min) == NVRTC_SUCCESS)
        w->cuda_version = maj * 1000 + min * 10;
    if (srch_lt_open(&w->lt, &w->lt_err) < 0) {
        w->lt = NULL;
        kt_log_warn(WK_TAG, "no cuBLASLt: %.240s", w->lt_err.msg);
    }
    kt_log_info(WK_TAG, "%s (%s, %d SMs), driver %d, NVRTC %d", w->name, w->arch, w->sm_count,
                w->cu.driver_version, w->cuda_version);
    return 0;
}

static void pack_kv_int(msgpack_packer *pk, const char *k, int64_t v)
{
    pack_str(pk, k);
    msgpack_pack_int64(pk, v);
}

static int handle_hello(wk *w)
{
    if (w->init_rc < 0)
        return reply_error(w, w->init_rc, w->init_err.msg);
    if (!w->selftest_done)
        selftest(w);
    if (w->dead) {
        reply_error(w, -EFAULT, w->selftest);
        return 0;
    }
    reply_begin(w);
    msgpack_packer *pk = &w->pk;
    msgpack_pack_map(pk, 5);
    pack_str(pk, "ok");
    msgpack_pack_true(pk);
    pack_str(pk, "gpu");
    msgpack_pack_map(pk, 19);
    pack_str(pk, "name");
    pack_str(pk, w->name);
    pack_kv_int(pk, "sm_major", w->attr_major);
    pack_kv_int(pk, "sm_minor", w->attr_minor);
    pack_kv_int(pk, "sm_count", w->sm_count);
    pack_kv_int(pk, "mem_bytes", (int64_t)w->mem_bytes);
    pack_kv_int(pk, "driver_version", w->cu.driver_version);
    pack_kv_int(pk, "cuda_version", w->cuda_version);
    pack_kv_int(pk, "sm_clock_khz", w->clock_khz);
    pack_kv_int(pk, "l2_bytes", w->l2_bytes);
    pack_kv_int(pk, "smem_per_block_optin", w->smem_optin);
    pack_kv_int(pk, "regs_per_sm", w->regs_per_sm);
    /* Beyond worker.h's list: the rest of what ops_device wants. */
    pack_kv_int(pk, "smem_per_block", w->smem_block);
    pack_kv_int(pk, "smem_per_sm", w->smem_sm);
    pack_kv_int(pk, "max_threads_per_block", w->max_threads_block);
    pack_kv_int(pk, "max_threads_per_sm", w->max_threads_sm);
    pack_kv_int(pk, "max_blocks_per_sm", w->max_blocks_sm);
    pack_kv_int(pk, "max_regs_per_block", w->max_regs_block);
    pack_kv_int(pk, "warp_size", w->warp_size);
    pack_str(pk, "arch");
    pack_str(pk, w->arch);
    pack_str(pk, "cupti");
    if (w->timer)
        msgpack_pack_true(pk);
    else
        msgpack_pack_false(pk);
    pack_str(pk, "cublaslt");
    if (w->lt)
        msgpack_pack_true(pk);
    else
        msgpack_pack_false(pk);
    pack_str(pk, "selftest");
    pack_str(pk, w->selftest);
    return reply_send(w);
}

/* Handles one request. Returns 0 to go on, 1 after "quit", or a negative errno when the
 * reply could not be written (the supervisor is gone). */
static int dispatch(wk *w, const msgpack_object *o)
{
    const msgpack_object *op = map_get(o, "op");
    int rc;
    if (!op || op->type != MSGPACK_OBJECT_STR)
        return reply_error(w, -EPROTO, "request: expected a map with a string 'op'");
#define OP_IS(s) (op->via.str.size == strlen(s) && memcmp(op->via.str.ptr, s, strlen(s)) == 0)
    if (OP_IS("eval"))
        rc = handle_eval(w, o);
    else if (OP_IS("hello"))
        rc = handle_hello(w);
    else if (OP_IS("retime"))
        rc = handle_retime(w, o);
    else if (OP_IS("forget"))
        rc = handle_forget(w, o);
    else if (OP_IS("reference"))
        rc = handle_reference(w, o);
    else if (OP_IS("quit")) {
        reply_begin(w);
        msgpack_pack_map(&w->pk, 1);
        pack_str(&w->pk, "ok");
        msgpack_pack_true(&w->pk);
        rc = reply_send(w);
        return rc < 0 ? rc : 1;
    } else
        rc = reply_error(w, -EINVAL, "unknown op");
#undef OP_IS
    return rc;
}

static void wk_free(wk *w)
{
    if (!w->dead) {
        for (int i = 0; i < WK_MAX_CANDS; i++)
            cand_release(w, &w->cands[i]);
        for (int i = 0; i < w->n_data; i++)
            data_free(w, w->data[i]);
        cmp_free(w);
        if (w->lt)
            srch_lt_close(w->lt);
        if (w->timer)
            srch_timer_close(w->timer); /* frees its scrub buffer: before the context goes */
        if (w->have_cu)
            srch_cuda_close(&w->cu);
    }
    msgpack_sbuffer_destroy(&w->sb);
    free(w);
}

int srch_worker_main(int in_fd, int out_fd)
{
    /* A supervisor that went away shows up as EPIPE on the next reply, not as a signal. */
    signal(SIGPIPE, SIG_IGN);
    wk *w = calloc(1, sizeof(*w));
    if (!w) {
        kt_log_err(WK_TAG, "out of memory");
        return 1;
    }
    w->in_fd = in_fd;
    w->out_fd = out_fd;
    msgpack_sbuffer_init(&w->sb);
    msgpack_packer_init(&w->pk, &w->sb, msgpack_sbuffer_write);
    w->init_rc = wk_init(w, &w->init_err);
    if (w->init_rc < 0)
        kt_log_warn(WK_TAG, "no GPU: %s", w->init_err.msg);

    msgpack_unpacker up;
    msgpack_unpacked msg;
    int status = 0;
    if (!msgpack_unpacker_init(&up, 1 << 16)) {
        kt_log_err(WK_TAG, "out of memory");
        wk_free(w);
        return 1;
    }
    msgpack_unpacked_init(&msg);
    for (;;) {
        msgpack_unpack_return ur;
        while ((ur = msgpack_unpacker_next(&up, &msg)) == MSGPACK_UNPACK_SUCCESS) {
            int rc = dispatch(w, &msg.data);
            if (w->dead) {
                kt_log_err(WK_TAG, "the CUDA context is dead (sticky error): exiting");
                status = WK_EXIT_FAULT;
                goto out;
            }
            if (rc < 0) {
                status = 1;
                goto out;
            }
            if (rc == 1)
                goto out;
        }
        if (ur != MSGPACK_UNPACK_CONTINUE) {
            kt_log_err(WK_TAG, "malformed request stream (msgpack %d)", (int)ur);
            status = WK_EXIT_PROTO;
            goto out;
        }
        if (msgpack_unpacker_message_size(&up) > WK_MAX_MSG) {
            kt_log_err(WK_TAG, "request over %zu bytes", WK_MAX_MSG);
            status = WK_EXIT_PROTO;
            goto out;
        }
        if (!msgpack_unpacker_reserve_buffer(&up, 1 << 16)) {
            kt_log_err(WK_TAG, "out of memory reading a request");
            status = 1;
            goto out;
        }
        ssize_t n =
            read(in_fd, msgpack_unpacker_buffer(&up), msgpack_unpacker_buffer_capacity(&up));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            kt_log_err(WK_TAG, "read: %s", strerror(errno));
            status = 1;
            goto out;
        }
        if (n == 0)
            goto out; /* end of input: the supervisor closed the pipe */
        msgpack_unpacker_buffer_consumed(&up, (size_t)n);
    }
out:
    msgpack_unpacked_destroy(&msg);
    msgpack_unpacker_destroy(&up);
    wk_free(w);
    return status;
}
