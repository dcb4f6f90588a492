/* GPU smoke test of the kernel families: for each case, a deterministic spread of candidates
 * over every family is emitted, compiled with NVRTC, run on the GPU on fresh random inputs with
 * NaN-poisoned outputs, and compared with the CPU fp64 reference of its group. Each case runs
 * in a forked child so a faulting kernel costs that case only. Prints one line per candidate
 * (error, and a rough hot CUDA-event time that is a hint, not a measurement protocol).
 *
 * Exit: 0 all passed, 1 a candidate was wrong or a case crashed, 77 no GPU (skipped). */
#include "ops/family.h"
#include "search/compile.h"
#include "search/cudrv.h"
#include "search/space.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define SKIP 77

typedef struct gpu_case {
    const char *file; /* relative to the source root */
    const char *shapes;
    ops_precision precision;
    /* when set, only schedules whose text contains this are tested; a "whole:" prefix also
     * keeps only the group of every node (one kernel for the whole graph) */
    const char *only;
} gpu_case;

/* Ragged shapes on purpose: not multiples of any tile. */
static const gpu_case cases[] = {
    {"examples/gemm_bias_relu.json", "M=1000", OPS_PREC_EXACT, NULL},
    {"examples/gemm_bias_relu.json", "M=1024", OPS_PREC_EXACT, NULL},
    {"examples/softmax.json", "M=333,N=777", OPS_PREC_EXACT, NULL},
    {"examples/softmax.json", "M=16,N=16384", OPS_PREC_EXACT, NULL},
    {"examples/layernorm.json", "M=333", OPS_PREC_EXACT, NULL},
    {"examples/rmsnorm.json", "M=100", OPS_PREC_EXACT, NULL},
    {"examples/gelu_tanh_chain.json", "M=333,N=777", OPS_PREC_EXACT, NULL},
    {"examples/sum_lastaxis.json", "M=333,N=777", OPS_PREC_EXACT, NULL},
    {"examples/conv2d.json", "N=3", OPS_PREC_EXACT, NULL},
    {"examples/attention.json", "B=1,H=2,S=200", OPS_PREC_EXACT, NULL},
    /* slices past the input's edges (-inf) and their maximum: max pooling of padded windows */
    {"examples/maxpool2d.json", "N=3", OPS_PREC_EXACT, NULL},
    /* a line longer than most tiles (the carry between them), rows not a multiple of anything */
    {"examples/cumsum.json", "M=37,N=20001", OPS_PREC_EXACT, NULL},
    /* The error-compensated tf32 paths under the exact policy: fp32-level accuracy required. */
    {"bench/cases/kb_l2_gemm_add_relu.json", "B=200", OPS_PREC_EXACT, "math=tf32x3"},
    /* cluster split-K: ragged tiles; tf32x3, f16 and FFMA partials summed through DSMEM */
    {"bench/cases/kb_l2_gemm_add_relu.json", "B=100", OPS_PREC_EXACT, "splitk_mode=cluster"},
    {"examples/gemm_bias_relu.json", "M=1000", OPS_PREC_EXACT, "splitk_mode=cluster"},
    {"bench/cases/kb_l2_gemm_add_relu.json", "B=100", OPS_PREC_EXACT,
     "math=ffma bm=32 bn=32 bk=16 wm=2 wn=4 stages=4 splitk=4 raster=1 smem=pad "
     "splitk_mode=cluster"},
    {"examples/conv2d.json", "N=3", OPS_PREC_EXACT, "math=tf32x3"},
    {"examples/conv2d.json", "N=3", OPS_PREC_TF32, "math=tf32 "},
    {"examples/gemv_bias_relu.json", "M=1000,K=1000", OPS_PREC_EXACT, "gemv "},
    /* The tiled direct conv: patch padding and partial tiles at every edge (55 x 55 outputs,
     * stride 4; 37 x 41 inputs, stride 3, 5 channels), stride 1, and 1-3 stage pipelines. */
    {"bench/cases/writeup_conv2d_alexnet_f32.json", "N=2", OPS_PREC_EXACT, "algo=tiled"},
    {"tests/gpu/conv_tiled_ragged.json", "N=2", OPS_PREC_EXACT, "algo=tiled"},
    {"examples/conv2d.json", "N=3", OPS_PREC_EXACT, "algo=tiled"},
    {"bench/cases/deepbench_gemm_f16.json", "M=1000,N=1,K=2552", OPS_PREC_EXACT, "gemv "},
    /* gemv's decode form (y = X W^T, the nn.Linear weight): a few token rows, a per-column
     * bias and a residual; K of 1003 (scalar loads) and 1000 */
    {"tests/gpu/linear_decode.json", "T=5,N=1000,K=1000", OPS_PREC_EXACT, "gemv "},
    {"tests/gpu/linear_decode.json", "T=16,N=333,K=1003", OPS_PREC_EXACT, "gemv "},
    /* gemv on the tensor cores (math=mma): ragged rows, tokens (1-3 tiles, partial) and k
     * steps; k split across warps; the vector form in f16 */
    {"tests/gpu/linear_decode.json", "T=5,N=1000,K=1000", OPS_PREC_EXACT, "math=mma"},
    {"tests/gpu/linear_decode.json", "T=19,N=333,K=2008", OPS_PREC_EXACT, "math=mma"},
    {"tests/gpu/linear_decode.json", "T=64,N=200,K=4096", OPS_PREC_EXACT, "math=mma"},
    /* its ring of 4 and 8 steps in flight: a warp's steps not a multiple of the depth, the
     * last step partial (K = 2008: 63 steps of 32, split 1, 2, 4 or 8 ways) */
    {"tests/gpu/linear_decode.json", "T=13,N=333,K=2008", OPS_PREC_EXACT, "math=mma&depth=8"},
    {"tests/gpu/linear_decode.json", "T=13,N=333,K=2008", OPS_PREC_EXACT, "math=mma&depth=4"},
    {"bench/cases/deepbench_gemm_f16.json", "M=1000,N=1,K=2552", OPS_PREC_EXACT, "math=mma"},
    /* gemv rows read by several warps (tpr 64-256), both forms, ragged */
    {"bench/cases/deepbench_gemm_f16.json", "M=1000,N=1,K=2552", OPS_PREC_EXACT, "tpr=128"},
    {"tests/gpu/linear_decode.json", "T=5,N=1000,K=1000", OPS_PREC_EXACT, "tpr=256"},
    {"examples/gemv_bias_relu.json", "M=1000,K=1000", OPS_PREC_EXACT, "tpr=64"},
    /* gemv's cache-hinted loads of A at every width: 16-bit rows of odd length (2-byte loads),
     * f32 rows with an epilogue (4 to 16 bytes) */
    {"bench/cases/deepbench_gemm_f16.json", "M=1000,N=1,K=2551", OPS_PREC_EXACT, "load=stream"},
    {"bench/cases/deepbench_gemm_f16.json", "M=1000,N=1,K=2552", OPS_PREC_EXACT, "load=prefetch"},
    {"examples/gemv_bias_relu.json", "M=1000,K=1000", OPS_PREC_EXACT, "load=stream"},
    /* split_row as one cluster kernel: a softmax's online pair, layernorm's two levels */
    {"examples/softmax.json", "M=16,N=16384", OPS_PREC_EXACT, "split_cluster"},
    {"examples/softmax.json", "M=3,N=40001", OPS_PREC_EXACT, "split_cluster"},
    {"examples/layernorm.json", "M=3", OPS_PREC_EXACT, "split_cluster"},
    /* strided rows split across warps (lane_per_row): ragged row counts and lengths, the
     * online softmax, and a row kept in shared memory or registers for a second pass */
    {"tests/gpu/softmax_middle.json", "A=3,B=333,C=7", OPS_PREC_EXACT, "lane_per_row"},
    {"bench/cases/kb_l1_sum_middle.json", "B=3", OPS_PREC_EXACT, "lane_per_row"},
    /* the depthwise conv kernel: ragged planes and tiles, f16 with stride, dilation, bias and
     * an epilogue; f32 3x3 */
    {"tests/gpu/conv_depthwise_ragged.json", "N=3", OPS_PREC_EXACT, "algo=depthwise"},
    {"tests/gpu/conv_depthwise_f32.json", "N=5", OPS_PREC_EXACT, "algo=depthwise"},
    /* split_lane: strided rows cut into chunks across blocks; a sum over the first axis into 70
     * columns (the last group of 32 clamped), and a softmax over a middle axis in three kernels
     * (21 rows of 3333: max, sum, outputs through the workspace) */
    {"tests/gpu/colsum.json", "N=50001,M=70", OPS_PREC_EXACT, "split_lane"},
    {"tests/gpu/softmax_middle.json", "A=3,B=3333,C=7", OPS_PREC_EXACT, "whole:split_lane"},
    /* rows_per_block with 4, 8 and 16 threads a row (short rows, several a warp, shuffles
     * within lane groups), 1001 rows: the last block's clamped */
    {"examples/softmax.json", "M=1001,N=64", OPS_PREC_EXACT,
     "whole:rows_per_block&threads=32 rows=8"},
    {"examples/softmax.json", "M=1001,N=64", OPS_PREC_EXACT,
     "whole:rows_per_block&threads=64 rows=8"},
    {"examples/sum_lastaxis.json", "M=1001,N=40", OPS_PREC_EXACT,
     "rows_per_block&threads=128 rows=8"},
    /* whole graph only: a group starting at the mean would get random (negative) squares, and
     * rsqrt of a mean that cancels to near zero is ill-conditioned (seen: 9.8e-3 on the H100
     * from the summation order alone) */
    {"bench/cases/kb_l1_rmsnorm_channels.json", "B=1", OPS_PREC_EXACT, "whole:lane_per_row"},
    /* the row family's matmul prologue: linear + GELU + softmax as one kernel, ragged rows */
    {"bench/cases/kb_l2_matmul_gelu_softmax.json", "B=77", OPS_PREC_EXACT, "whole:row "},
    /* Hopper's warpgroup MMA, ragged, causal and not (the schedule text ends in a space) */
    {"examples/attention.json", "B=1,H=2,S=200", OPS_PREC_EXACT, "mma=wgmma "},
    {"bench/cases/attention_f16_full.json", "B=1,H=3,S=333", OPS_PREC_EXACT, "mma=wgmma "},
    /* ... fed by TMA from a producer warpgroup: head dims 64, 128 and 256, ragged Sq and Skv,
     * causal (per-warpgroup trip counts) and not, grouped-query */
    {"examples/attention.json", "B=1,H=2,S=200", OPS_PREC_EXACT, "mma=wgmma_ws"},
    {"bench/cases/attention_f16_d128_causal.json", "B=1,H=3,S=333", OPS_PREC_EXACT, "mma=wgmma_ws"},
    {"bench/cases/attention_f16_d128_full.json", "B=2,H=2,S=333", OPS_PREC_EXACT, "mma=wgmma_ws"},
    {"tests/gpu/attention_d256.json", "B=2,S=200,T=333", OPS_PREC_EXACT, "mma=wgmma_ws"},
    /* split-KV decode: grouped-query rows packed (4 heads x 1 and x 4 queries: 16 rows),
     * causal (top-left: query i sees keys 0..i) across slices; head dim 256, two queries */
    {"tests/gpu/attention_gqa.json", "B=2,S=1,T=517", OPS_PREC_EXACT, "mma=splitkv"},
    {"tests/gpu/attention_gqa.json", "B=3,S=4,T=1000", OPS_PREC_EXACT, "mma=splitkv"},
    {"tests/gpu/attention_d256.json", "B=2,S=2,T=1000", OPS_PREC_EXACT, "mma=splitkv"},
    /* its cp.async ring of K and V chunks: ragged slices (the last chunks of a slice and of
     * the keys zero-filled), warps with fewer chunks than others, D 64 and 128 (at D 256 a
     * ring of two chunks a warp is past the shared memory) */
    {"tests/gpu/attention_gqa.json", "B=3,S=4,T=5003", OPS_PREC_EXACT, "mma=splitkv&stages=3"},
    {"tests/gpu/attention_gqa.json", "B=2,S=1,T=4100", OPS_PREC_EXACT, "mma=splitkv&stages=2"},
    {"bench/cases/llama3_gqa_decode_bf16.json", "B=2,T=3001", OPS_PREC_EXACT,
     "mma=splitkv&stages=2"},
    /* splitkv_tc: the packed rows on the tensor cores (16 of 16 rows at group 4 x Sq 4, causal;
     * one row; D 64 and 128), ragged slices */
    {"tests/gpu/attention_gqa.json", "B=3,S=4,T=5003", OPS_PREC_EXACT, "mma=splitkv_tc"},
    {"tests/gpu/attention_gqa.json", "B=2,S=1,T=4100", OPS_PREC_EXACT, "mma=splitkv_tc"},
    {"bench/cases/llama3_gqa_decode_bf16.json", "B=2,T=3001", OPS_PREC_EXACT, "mma=splitkv_tc"},
    /* one slice: the block merges its warps and stores the output (no combine kernel); causal
     * 16 rows, ragged keys, both forms */
    {"tests/gpu/attention_gqa.json", "B=3,S=4,T=5003", OPS_PREC_EXACT, "mma=splitkv_tc&splits=1 "},
    {"tests/gpu/attention_gqa.json", "B=2,S=1,T=517", OPS_PREC_EXACT, "mma=splitkv &splits=1 "},
    {"bench/cases/llama3_gqa_decode_bf16.json", "B=2,T=3001", OPS_PREC_EXACT,
     "mma=splitkv_tc&splits=1 "},
    /* pingpong: consumers taking turns on named barriers, causal (every consumer walks the
     * block's tiles), across items when persistent */
    {"bench/cases/attention_f16_d128_causal.json", "B=1,H=3,S=333", OPS_PREC_EXACT, "pingpong=1"},
    {"tests/gpu/attention_gqa.json", "B=9,S=333,T=517", OPS_PREC_EXACT,
     "pingpong=1&grid=persistent"},
    /* persistent: more work items than SMs, so blocks walk several (rings across items) */
    {"bench/cases/attention_f16_d128_causal.json", "B=4,H=12,S=333", OPS_PREC_EXACT,
     "grid=persistent"},
    {"tests/gpu/attention_gqa.json", "B=9,S=333,T=517", OPS_PREC_EXACT, "grid=persistent"},
    /* grouped-query: 8 query heads over 2 k/v heads, ragged Sq != Skv, causal; every kernel
     * (mma.sync and wgmma) finds its k/v head from its query head */
    {"tests/gpu/attention_gqa.json", "B=2,S=333,T=517", OPS_PREC_EXACT, NULL},
    {"tests/gpu/attention_gqa.json", "B=2,S=333,T=517", OPS_PREC_EXACT, "mma=wgmma "},
    {"tests/gpu/attention_gqa.json", "B=2,S=333,T=517", OPS_PREC_EXACT, "mma=wgmma_ws"},
    /* NaN from log of the negative inputs: clamp keeps it; amax and softmax make their row NaN
     * (rows of 4: a few rows without NaN; rows of 3000: every row NaN, in every strategy) */
    {"tests/gpu/clamp_log.json", "M=333,N=777", OPS_PREC_EXACT, NULL},
    {"tests/gpu/amax_log.json", "M=333,N=4", OPS_PREC_EXACT, NULL},
    {"tests/gpu/amax_log.json", "M=37,N=3000", OPS_PREC_EXACT, NULL},
    {"tests/gpu/softmax_log.json", "M=333,N=4", OPS_PREC_EXACT, NULL},
    {"tests/gpu/softmax_log.json", "M=37,N=3000", OPS_PREC_EXACT, NULL},
    /* the conv family's general gather: conv3d (the output depth folded into the GEMM rows,
     * ragged, groups, a [K, 1, 1, 1] epilogue operand) on FFMA, tf32x3 and 16-bit mma (NDHWC),
     * and input dilation (transposed convolutions lowered: zeros between input elements,
     * end padding) in bf16 and 3-d */
    {"tests/gpu/conv3d_ragged.json", "N=2", OPS_PREC_EXACT, "math=ffma"},
    {"tests/gpu/conv3d_ragged.json", "N=2", OPS_PREC_EXACT, "math=tf32x3"},
    {"tests/gpu/conv3d_ndhwc_f16.json", "N=2", OPS_PREC_EXACT, "math=mma"},
    {"tests/gpu/conv_transposed.json", "N=3", OPS_PREC_EXACT, NULL},
    {"tests/gpu/conv3d_transposed.json", "N=2", OPS_PREC_EXACT, NULL},
    /* canonicalisation's splits: batch norm's mean over [0, 2, 3] as two reductions, and an
     * attention with heads of 300 (past the fused kernels) as matmul, softmax, matmul */
    {"tests/gpu/batchnorm_train.json", "N=5", OPS_PREC_EXACT, NULL},
    {"tests/gpu/attention_wide.json", "B=2,S=77,T=133", OPS_PREC_EXACT, NULL},
};

/* The 16-bit GEMM on TMA and wgmma, cooperative and ping-pong: ragged M, N, K (not multiples of
 * any tile), B N-major and K-major, A M-major, the epilogues (bias + relu in f16; bias, gelu and a
 * residual in bf16), and shapes of more tiles than SMs, where the persistent blocks walk several
 * tiles (ping-pong needs them). */
static const gpu_case wgmma16_cases[] = {
    {"bench/cases/gemm_bf16.json", "M=1000,N=776,K=1000", OPS_PREC_EXACT, "mma=wgmma"},
    /* operands whose rows are not 16-byte multiples, copied into padded rows of the workspace
     * and mapped there: A [M][K] and B [K][N] both (odd K and N, the output's rows odd too);
     * A transposed [K][M] with odd M, W [N][K] with odd K, under an epilogue; parallel split-K
     * (the copies after its partials); a dual group's B and B2 */
    {"bench/cases/gemm_bf16.json", "M=1001,N=777,K=1003", OPS_PREC_EXACT, "mma=wgmma"},
    {"tests/gpu/gemm_bf16_epilogue.json", "M=333,N=264,K=517", OPS_PREC_EXACT, "whole:mma=wgmma"},
    {"bench/cases/gemm_bf16.json", "M=200,N=777,K=2001", OPS_PREC_EXACT, "splitk=2&mma=wgmma "},
    {"tests/gpu/swiglu_f16_bias.json", "B=2,M=333,N=267,K=520", OPS_PREC_EXACT,
     "whole:mma=wgmma "},
    /* store=tma with odd output rows: TMA stores into padded rows of the workspace, a last
     * kernel copying them out (bf16, and a bias + gelu + residual epilogue) */
    {"bench/cases/gemm_bf16.json", "M=1001,N=777,K=1003", OPS_PREC_EXACT, "store=tma"},
    {"tests/gpu/gemm_bf16_epilogue.json", "M=333,N=261,K=517", OPS_PREC_EXACT, "whole:store=tma"},
    {"bench/cases/linear_bf16.json", "M=333,N=1000,K=1016", OPS_PREC_EXACT, "mma=wgmma"},
    {"examples/gemm_bias_relu.json", "M=1000", OPS_PREC_EXACT, "mma=wgmma"},
    {"tests/gpu/gemm_bf16_epilogue.json", "M=200,N=264,K=520", OPS_PREC_EXACT, "whole:mma=wgmma"},
    {"bench/cases/gemm_bf16.json", "M=2050,N=2056,K=520", OPS_PREC_EXACT, "mma=wgmma"},
    {"bench/cases/linear_bf16.json", "M=1999,N=2048,K=264", OPS_PREC_EXACT, "mma=wgmma_pingpong"},
    {"examples/gemm_bias_relu.json", "M=9000", OPS_PREC_EXACT, "mma=wgmma_pingpong"},
    {"tests/gpu/gemm_bf16_epilogue.json", "M=2000,N=1032,K=200", OPS_PREC_EXACT,
     "whole:mma=wgmma_pingpong"},
    /* 2-block clusters sharing B by multicast: an odd count of tile rows (the last pair half
     * past M), B N-major and K-major, every epilogue kind */
    {"bench/cases/gemm_bf16.json", "M=2050,N=2056,K=520", OPS_PREC_EXACT, "mcast=2"},
    {"bench/cases/linear_bf16.json", "M=1999,N=2048,K=264", OPS_PREC_EXACT, "mcast=2"},
    {"tests/gpu/gemm_bf16_epilogue.json", "M=2000,N=1032,K=200", OPS_PREC_EXACT, "whole:mcast=2"},
    /* dual groups (SwiGLU's silu(x Wg) * (x Wu) as one GEMM over [Wg | Wu]): weights [N][K] and
     * [K][N], batched x, a bias in the chain, cooperative, ping-pong and multicast, ragged; the
     * f16 case stores f32 (a cast): silu(g) * u of K = 520 mixed-magnitude products passes f16's
     * 65504 where the fp64 reference stays finite */
    {"bench/cases/llm_swiglu_mlp_bf16.json", "M=1000,N=1000,K=1000", OPS_PREC_EXACT,
     "whole:mma=wgmma "},
    {"bench/cases/llm_swiglu_mlp_bf16.json", "M=2050,N=1032,K=520", OPS_PREC_EXACT,
     "whole:mcast=2"},
    {"tests/gpu/swiglu_f16_bias.json", "B=2,M=333,N=264,K=520", OPS_PREC_EXACT, "whole:mma=wgmma "},
    {"tests/gpu/swiglu_f16_bias.json", "B=2,M=2000,N=264,K=520", OPS_PREC_EXACT,
     "whole:mma=wgmma_pingpong"},
    /* the epilogue staged in shared memory and stored by TMA (store=tma): ragged M and N (the
     * store clips), 16-bit and f32 outputs, a batch (3-D map), a dual group */
    {"bench/cases/gemm_bf16.json", "M=2050,N=2056,K=520", OPS_PREC_EXACT, "store=tma"},
    {"bench/cases/linear_bf16.json", "M=1999,N=2048,K=264", OPS_PREC_EXACT, "store=tma"},
    {"tests/gpu/gemm_bf16_epilogue.json", "M=2000,N=1032,K=200", OPS_PREC_EXACT, "whole:store=tma"},
    {"tests/gpu/swiglu_f16_bias.json", "B=2,M=2000,N=264,K=520", OPS_PREC_EXACT, "whole:store=tma"},
    /* M = 384 under 2-block clusters: the last pair's second tile lies wholly past M although
     * M % BM == 0 (its stores masked) */
    {"bench/cases/gemm_bf16.json", "M=384,N=1032,K=520", OPS_PREC_EXACT, "bm=128 &mcast=2"},
    /* split-K (parallel): (tile, k slice) units, fp32 partials, the reduction's epilogue; ragged
     * M and N, an odd N (scalar partials), B N-major and K-major, every epilogue kind, decode
     * rows, ping-pong and multicast */
    {"bench/cases/gemm_bf16.json", "M=1000,N=776,K=1000", OPS_PREC_EXACT, "splitk=2&mma=wgmma "},
    {"bench/cases/linear_bf16.json", "M=64,N=1001,K=2048", OPS_PREC_EXACT, "splitk=4&mma=wgmma "},
    {"tests/gpu/gemm_bf16_epilogue.json", "M=200,N=264,K=1024", OPS_PREC_EXACT,
     "whole:splitk=4&mma=wgmma"},
    {"examples/gemm_bias_relu.json", "M=4000", OPS_PREC_EXACT, "splitk=4&mma=wgmma_pingpong"},
    {"bench/cases/gemm_bf16.json", "M=1000,N=776,K=1000", OPS_PREC_EXACT, "splitk=2&mcast=2"},
    /* cluster split-K: a tile's k slices a thread-block cluster summing through distributed
     * shared memory (2, 4 and 8 blocks), ragged, odd N, transposed A, every epilogue kind */
    {"bench/cases/gemm_bf16.json", "M=1000,N=776,K=1000", OPS_PREC_EXACT,
     "splitk_mode=cluster mma=wgmma "},
    {"bench/cases/linear_bf16.json", "M=64,N=1001,K=2048", OPS_PREC_EXACT,
     "splitk=8&splitk_mode=cluster mma=wgmma "},
    {"tests/gpu/gemm_bf16_epilogue.json", "M=200,N=264,K=1024", OPS_PREC_EXACT,
     "whole:splitk_mode=cluster mma=wgmma "},
    /* stream-K: the last waves' k tiles shared out over a block per SM, partials handed to the
     * block starting each unit; ragged M and N, B N-major and K-major, multicast pairs, every
     * epilogue kind through the TMA store, a dual group, few tiles split many ways (DeepBench's
     * shape), an odd N */
    {"bench/cases/gemm_bf16.json", "M=2050,N=2056,K=520", OPS_PREC_EXACT, "splitk_mode=stream"},
    {"bench/cases/linear_bf16.json", "M=1999,N=2048,K=1024", OPS_PREC_EXACT,
     "splitk_mode=stream&mcast=2"},
    {"tests/gpu/gemm_bf16_epilogue.json", "M=2000,N=1032,K=200", OPS_PREC_EXACT,
     "whole:splitk_mode=stream&store=tma"},
    {"tests/gpu/swiglu_f16_bias.json", "B=2,M=2000,N=264,K=520", OPS_PREC_EXACT,
     "whole:splitk_mode=stream"},
    {"bench/cases/gemm_bf16.json", "M=1760,N=128,K=1760", OPS_PREC_EXACT, "splitk_mode=stream"},
    {"bench/cases/linear_bf16.json", "M=64,N=1001,K=4096", OPS_PREC_EXACT, "splitk_mode=stream"},
    /* rings of 6 and 8 stages (small tiles), cooperative and ping-pong */
    {"bench/cases/gemm_bf16.json", "M=1000,N=776,K=1000", OPS_PREC_EXACT, "stages=8"},
    {"tests/gpu/gemm_bf16_epilogue.json", "M=200,N=264,K=1024", OPS_PREC_EXACT, "whole:stages=8"},
    {"bench/cases/linear_bf16.json", "M=1999,N=2048,K=1024", OPS_PREC_EXACT,
     "stages=6&mma=wgmma_pingpong"},
};

static int per_family = 6;

/* Whether text contains every '&'-separated part of pattern ("splitk=4&mma=wgmma "). */
static bool matches_all(const char *text, const char *pattern)
{
    char part[128];
    for (const char *p = pattern;;) {
        size_t len = strcspn(p, "&");
        if (len >= sizeof(part))
            return false;
        memcpy(part, p, len);
        part[len] = 0;
        if (!strstr(text, part))
            return false;
        if (!p[len])
            return true;
        p += len + 1;
    }
}

static uint64_t rng_state;
static double rng_uniform(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static double tolerance(ops_dtype dt, ops_precision p)
{
    if (dt == OPS_DT_BF16)
        return 2e-2;
    if (dt == OPS_DT_F16 || p == OPS_PREC_REDUCED)
        return 3e-3;
    return p == OPS_PREC_TF32 ? 5e-4 : 1e-5;
}

/* Inputs, reference outputs and device buffers of one group, made once and shared by every
 * candidate of that group. */
typedef struct group_data {
    ops_graph *sub;
    int n_in, n_out;
    double *in[OPS_GROUP_MAX_IO], *ref[OPS_GROUP_MAX_IO];
    int64_t numel_in[OPS_GROUP_MAX_IO], numel_out[OPS_GROUP_MAX_IO];
    CUdeviceptr d_in[OPS_GROUP_MAX_IO], d_out[OPS_GROUP_MAX_IO];
} group_data;

/* A group's inputs come from the whole graph, as the worker's do (search/worker_data.c): random
 * values for the graph's inputs, and an intermediate (a group input another group computes) the
 * fp64 reference of the graph run on them, rounded to its dtype. So a group such as [sum, div] of
 * a softmax sees exp's outputs, not random values whose row sums cancel to near zero. */
static int make_group_data(srch_cuda *cu, const ops_graph *full, const ops_group *grp,
                           uint64_t seed, group_data *gd, kt_err *err)
{
    ops_diag d = {0};
    memset(gd, 0, sizeof(*gd));
    if (ops_group_subgraph(grp, &gd->sub, &d) < 0)
        return kt_err_set(err, -EINVAL, "subgraph: %s", d.msg);
    ops_graph *F = ops_graph_clone(full);
    if (!F)
        return kt_err_set(err, -ENOMEM, "out of memory");
    int32_t src[OPS_GROUP_MAX_IO];
    bool need_ref = false; /* the graph's reference runs only for an intermediate */
    gd->n_in = grp->n_in;
    gd->n_out = grp->n_out;
    for (int i = 0; i < gd->n_in; i++) {
        /* inputs come first; one the graph lacks (a prepacked layout) draws its own values */
        src[i] = ops_graph_find_tensor(F, gd->sub->tensors[i].name);
        if (src[i] >= 0 && F->tensors[src[i]].producer >= 0) {
            need_ref = true;
            if (!F->tensors[src[i]].is_output)
                ops_graph_mark_output(F, src[i]);
        }
    }
    /* the graph's inputs: mixed magnitudes, most values in [-1, 1], some scaled up to 8,
     * rounded to the dtype (what the GPU sees) */
    rng_state = seed * 0x9E3779B97F4A7C15ull + 1;
    int n_fin = 0;
    while (n_fin < F->n_tensors && F->tensors[n_fin].producer < 0)
        n_fin++;
    double **fin = calloc((size_t)n_fin + 1, sizeof(double *));
    double **fout = calloc((size_t)F->n_outputs + 1, sizeof(double *));
    int rc = fin && fout ? 0 : kt_err_set(err, -ENOMEM, "out of memory");
    for (int t = 0; t < n_fin && rc == 0; t++) {
        const ops_tensor *ft = &F->tensors[t];
        int64_t n = ops_shape_numel(&ft->shape);
        uint8_t one[8];
        if (!(fin[t] = malloc((size_t)(n > 0 ? n : 1) * sizeof(double)))) {
            rc = kt_err_set(err, -ENOMEM, "out of memory");
            break;
        }
        for (int64_t k = 0; k < n; k++) {
            ops_dtype_store(ft->dtype, rng_uniform() * ((k % 7) == 3 ? 8.0 : 1.0), one);
            fin[t][k] = ops_dtype_load(ft->dtype, one);
        }
    }
    for (int j = 0; j < F->n_outputs && rc == 0; j++) {
        int64_t n = ops_shape_numel(&F->tensors[F->outputs[j]].shape);
        if (!(fout[j] = malloc((size_t)(n > 0 ? n : 1) * sizeof(double))))
            rc = kt_err_set(err, -ENOMEM, "out of memory");
    }
    if (rc == 0 && need_ref &&
        (ops_graph_validate(F, &d) < 0 || ops_ref_run(F, (const double *const *)fin, fout, &d) < 0))
        rc = kt_err_set(err, -EINVAL, "graph reference: %s", d.msg);
    for (int i = 0; i < gd->n_in && rc == 0; i++) {
        const ops_tensor *t = &gd->sub->tensors[i];
        int64_t n = ops_shape_numel(&t->shape);
        size_t es = ops_dtype_size(t->dtype);
        const double *from = NULL;
        if (src[i] >= 0 && F->tensors[src[i]].producer < 0)
            from = fin[src[i]];
        for (int j = 0; j < F->n_outputs && !from && src[i] >= 0; j++)
            if (F->outputs[j] == src[i])
                from = fout[j];
        gd->numel_in[i] = n;
        gd->in[i] = malloc((size_t)n * sizeof(double));
        uint8_t *host = malloc((size_t)n * es);
        if (!gd->in[i] || !host) {
            free(host);
            rc = kt_err_set(err, -ENOMEM, "out of memory");
            break;
        }
        for (int64_t k = 0; k < n; k++) {
            double v = from ? from[k] : rng_uniform() * ((k % 7) == 3 ? 8.0 : 1.0);
            ops_dtype_store(t->dtype, v, host + k * es);
            gd->in[i][k] = ops_dtype_load(t->dtype, host + k * es);
        }
        rc = srch_cuda_check(cu, cu->p_cuMemAlloc(&gd->d_in[i], (size_t)n * es), "alloc", err);
        if (rc == 0)
            rc = srch_cuda_check(cu, cu->p_cuMemcpyHtoD(gd->d_in[i], host, (size_t)n * es),
                                 "upload", err);
        free(host);
    }
    for (int t = 0; t < n_fin && fin; t++)
        free(fin[t]);
    for (int j = 0; j < F->n_outputs && fout; j++)
        free(fout[j]);
    free(fin);
    free(fout);
    ops_graph_free(F);
    if (rc < 0)
        return rc;
    for (int j = 0; j < gd->n_out; j++) {
        const ops_tensor *t = &gd->sub->tensors[gd->sub->outputs[j]];
        int64_t n = ops_shape_numel(&t->shape);
        gd->numel_out[j] = n;
        gd->ref[j] = malloc((size_t)n * sizeof(double));
        rc = srch_cuda_check(cu,
                             cu->p_cuMemAlloc(&gd->d_out[j], (size_t)n * ops_dtype_size(t->dtype)),
                             "alloc", err);
        if (rc < 0)
            return rc;
    }
    if (ops_ref_run(gd->sub, (const double *const *)gd->in, gd->ref, &d) < 0)
        return kt_err_set(err, -EINVAL, "reference: %s", d.msg);
    return 0;
}

static void free_group_data(srch_cuda *cu, group_data *gd)
{
    for (int i = 0; i < gd->n_in; i++) {
        free(gd->in[i]);
        if (gd->d_in[i])
            cu->p_cuMemFree(gd->d_in[i]);
    }
    for (int j = 0; j < gd->n_out; j++) {
        free(gd->ref[j]);
        if (gd->d_out[j])
            cu->p_cuMemFree(gd->d_out[j]);
    }
    ops_graph_free(gd->sub);
}

static CUdeviceptr tensor_ptr(const ops_group *grp, const group_data *gd, int32_t t)
{
    for (int i = 0; i < grp->n_in; i++)
        if (grp->in[i] == t)
            return gd->d_in[i];
    for (int j = 0; j < grp->n_out; j++)
        if (grp->out[j] == t)
            return gd->d_out[j];
    return 0;
}

/* Runs every kernel of the candidate once. */
static int launch_all(srch_cuda *cu, CUfunction *fn, const ops_emitted *e, const ops_group *grp,
                      const group_data *gd, CUdeviceptr ws, kt_err *err)
{
    for (int k = 0; k < e->n_kernels; k++) {
        const ops_kernel_launch *l = &e->kernels[k];
        CUdeviceptr ptrs[OPS_MAX_ARGS];
        CUtensorMap maps[OPS_MAX_ARGS];
        void *params[OPS_MAX_ARGS];
        int rc;
        for (int a = 0; a < l->n_args; a++) {
            const ops_arg *arg = &l->args[a];
            bool in_ws = arg->kind == OPS_ARG_WORKSPACE ||
                         (arg->kind == OPS_ARG_TENSOR_MAP && arg->tensor < 0);
            ptrs[a] = in_ws ? ws + (CUdeviceptr)arg->offset : tensor_ptr(grp, gd, arg->tensor);
            params[a] = &ptrs[a];
            /* a tensor map parameter is the 128-byte map itself, encoded over that address */
            if (arg->kind == OPS_ARG_TENSOR_MAP) {
                if ((rc = srch_cuda_encode_tmap(cu, &arg->tmap, (uint64_t)ptrs[a], &maps[a],
                                                l->entry, a, err)) < 0)
                    return rc;
                params[a] = &maps[a];
            }
        }
        if (l->zero_workspace && ws &&
            (rc = srch_cuda_check(
                 cu,
                 cu->p_cuMemsetD8(ws, 0,
                                  (size_t)(l->zero_prefix ? l->zero_prefix : e->workspace_bytes)),
                 "zero workspace", err)) < 0)
            return rc;
        rc = srch_cuda_check(cu,
                             cu->p_cuLaunchKernel(fn[k], l->grid[0], l->grid[1], l->grid[2],
                                                  l->block[0], l->block[1], l->block[2],
                                                  l->smem_bytes, NULL, params, NULL),
                             "launch", err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* Emits, compiles, runs and checks one candidate. Returns 0 pass, 1 wrong, <0 on a CUDA error
 * (sticky ones end the case). */
static int run_candidate(srch_cuda *cu, const ops_device *dev, const srch_space *s,
                         const srch_candidate *c, group_data *gd, char *line, size_t len)
{
    const ops_group *grp = &s->groups[c->group].group;
    const ops_family *f = ops_family_get(c->schedule.family);
    ops_emitted e = {0};
    ops_diag d = {0};
    kt_err err = {0};
    srch_compile_result r = {0};
    CUmodule mod = NULL;
    CUdeviceptr ws = 0;
    CUevent ev0 = NULL, ev1 = NULL;
    int rc = 0;
    if (f->emit(grp, &c->schedule, dev, &e, &d) < 0) {
        snprintf(line, len, "emit failed: %.400s", d.msg);
        return 1;
    }
    if (e.n_kernels == 0) {
        snprintf(line, len, "skipped (library: no kernel until the GPU worker lands)");
        ops_emitted_free(&e);
        return 0;
    }
    if (srch_nvrtc_compile(e.source, dev->arch, &r) < 0 || r.status != SRCH_COMPILE_OK) {
        snprintf(line, len, "compile failed: %.200s", r.log ? r.log : "");
        rc = 1;
        goto out;
    }
    CUfunction fn[OPS_MAX_KERNELS];
    if ((rc = srch_cuda_check(cu, cu->p_cuModuleLoadData(&mod, r.cubin), "load", &err)) < 0)
        goto cuda_fail;
    for (int k = 0; k < e.n_kernels; k++) {
        if ((rc = srch_cuda_check(cu, cu->p_cuModuleGetFunction(&fn[k], mod, e.kernels[k].entry),
                                  e.kernels[k].entry, &err)) < 0)
            goto cuda_fail;
        int static_smem = 0; /* the default dynamic cap is the 48 KiB less the static */
        cu->p_cuFuncGetAttribute(&static_smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn[k]);
        if ((int64_t)static_smem + e.kernels[k].smem_bytes > (int64_t)dev->smem_per_block &&
            (rc = srch_cuda_check(
                 cu,
                 cu->p_cuFuncSetAttribute(fn[k], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                          (int)e.kernels[k].smem_bytes),
                 "smem attribute", &err)) < 0)
            goto cuda_fail;
    }
    if (e.workspace_bytes &&
        (rc = srch_cuda_check(cu, cu->p_cuMemAlloc(&ws, (size_t)e.workspace_bytes), "workspace",
                              &err)) < 0)
        goto cuda_fail;
    for (int j = 0; j < gd->n_out; j++) {
        const ops_tensor *t = &gd->sub->tensors[gd->sub->outputs[j]];
        /* 0xff bytes are NaN in f32, f16 and bf16: an unwritten element fails the check. */
        if ((rc = srch_cuda_check(
                 cu,
                 cu->p_cuMemsetD8(gd->d_out[j], 0xff,
                                  (size_t)gd->numel_out[j] * ops_dtype_size(t->dtype)),
                 "poison", &err)) < 0)
            goto cuda_fail;
    }
    if ((rc = launch_all(cu, fn, &e, grp, gd, ws, &err)) < 0 ||
        (rc = srch_cuda_check(cu, cu->p_cuCtxSynchronize(), "run", &err)) < 0)
        goto cuda_fail;

    double worst = 0, tol = 0;
    int64_t bad_nan = 0;
    for (int j = 0; j < gd->n_out; j++) {
        const ops_tensor *t = &gd->sub->tensors[gd->sub->outputs[j]];
        size_t es = ops_dtype_size(t->dtype);
        uint8_t *host = malloc((size_t)gd->numel_out[j] * es);
        if ((rc = srch_cuda_check(
                 cu, cu->p_cuMemcpyDtoH(host, gd->d_out[j], (size_t)gd->numel_out[j] * es),
                 "download", &err)) < 0) {
            free(host);
            goto cuda_fail;
        }
        double num = 0, den = 0;
        for (int64_t k = 0; k < gd->numel_out[j]; k++) {
            double got = ops_dtype_load(t->dtype, host + k * es), want = gd->ref[j][k];
            /* NaN where the reference is NaN (PyTorch's semantics), the same infinity where it
             * is infinite, a finite value elsewhere */
            if (isnan(want) || isinf(want)) {
                if (isnan(want) ? !isnan(got) : got != want)
                    bad_nan++;
                continue;
            }
            if (!isfinite(got)) {
                bad_nan++;
                continue;
            }
            num += (got - want) * (got - want);
            den += want * want;
        }
        free(host);
        double errn = den > 0 ? sqrt(num / den) : sqrt(num);
        if (errn > worst)
            worst = errn;
        double tj = tolerance(t->dtype, grp->precision);
        if (tj > tol)
            tol = tj;
    }

    /* A rough hot time: 20 back-to-back runs between two events. */
    float ms = 0;
    if (srch_cuda_check(cu, cu->p_cuEventCreate(&ev0, 0), "event", &err) == 0 &&
        srch_cuda_check(cu, cu->p_cuEventCreate(&ev1, 0), "event", &err) == 0) {
        cu->p_cuEventRecord(ev0, NULL);
        for (int rep = 0; rep < 20 && rc == 0; rep++)
            rc = launch_all(cu, fn, &e, grp, gd, ws, &err);
        cu->p_cuEventRecord(ev1, NULL);
        if (rc == 0 && srch_cuda_check(cu, cu->p_cuEventSynchronize(ev1), "time", &err) == 0)
            cu->p_cuEventElapsedTime(&ms, ev0, ev1);
        if (rc < 0)
            goto cuda_fail;
    }
    bool ok = bad_nan == 0 && worst <= tol;
    snprintf(line, len, "%s err %.2e (tol %.0e)%s  ~%.1f us", ok ? "ok  " : "WRONG", worst, tol,
             bad_nan ? " with NaN/Inf unlike the reference (or unwritten)" : "", ms * 1000.0 / 20);
    rc = ok ? 0 : 1;
    goto out;
cuda_fail:
    snprintf(line, len, "CUDA error: %.400s", err.msg);
out:
    if (ev0)
        cu->p_cuEventDestroy(ev0);
    if (ev1)
        cu->p_cuEventDestroy(ev1);
    if (ws)
        cu->p_cuMemFree(ws);
    if (mod)
        cu->p_cuModuleUnload(mod);
    srch_compile_result_release(&r);
    ops_emitted_free(&e);
    return rc;
}

static int run_case(const gpu_case *gc)
{
    srch_cuda cu;
    kt_err err = {0};
    int rc = srch_cuda_open(&cu, 0, &err);
    if (rc == -ENODEV) {
        printf("skip: %s\n", err.msg);
        return SKIP;
    }
    if (rc < 0) {
        printf("FAIL: %s\n", err.msg);
        return 1;
    }
    char path[1024], shapes[256];
    snprintf(path, sizeof(path), "%s/%s",
             getenv("KTUNE_SOURCE_ROOT") ? getenv("KTUNE_SOURCE_ROOT") : ".", gc->file);
    snprintf(shapes, sizeof(shapes), "%s", gc->shapes);
    ops_graph *g = NULL, *bound = NULL;
    ops_diag d = {0};
    ops_binding b[8];
    int nb = 0;
    for (char *save = NULL, *tok = strtok_r(shapes, ",", &save); tok && nb < 8;
         tok = strtok_r(NULL, ",", &save))
        ops_binding_parse(tok, &b[nb++], NULL);
    srch_space *s = NULL;
    ops_device dev;
    ops_device_h100(&dev);
    if (ops_graph_from_json_file(path, &g, &d) < 0 || ops_graph_validate(g, &d) < 0 ||
        ops_graph_bind(g, b, nb, &bound, &d) < 0 ||
        srch_space_build(bound, &dev, gc->precision, &s, &d) < 0) {
        printf("FAIL %s %s: %s\n", gc->file, gc->shapes, d.msg);
        return 1;
    }
    srch_candidate *cand = NULL;
    int64_t n = 0;
    srch_space_candidates(s, &cand, &n);
    if (gc->only) { /* keep the matching schedules, in order */
        bool whole = strncmp(gc->only, "whole:", 6) == 0;
        const char *pattern = whole ? gc->only + 6 : gc->only;
        int64_t kept = 0;
        for (int64_t i = 0; i < n; i++) {
            char text[256];
            ops_schedule_format(&cand[i].schedule, text, sizeof(text));
            strcat(text, " ");
            if (whole && s->groups[cand[i].group].group.n_nodes != s->g->n_nodes)
                continue;
            if (matches_all(text, pattern))
                cand[kept++] = cand[i];
        }
        n = kept;
        if (n == 0) {
            printf("FAIL %s %s: no schedule matches \"%s\"\n", gc->file, gc->shapes, gc->only);
            return 1;
        }
    }
    int n_fam = 0;
    bool fam_seen[OPS_FAM_COUNT] = {false};
    for (int64_t i = 0; i < n; i++)
        if (!fam_seen[cand[i].schedule.family]) {
            fam_seen[cand[i].schedule.family] = true;
            n_fam++;
        }
    int64_t *pick = malloc((size_t)(n + 1) * sizeof(int64_t));
    int64_t n_pick = srch_spread(cand, n, s, (int64_t)per_family * n_fam, pick);
    group_data *gdata = calloc((size_t)s->n_groups, sizeof(group_data));
    bool *have = calloc((size_t)s->n_groups, sizeof(bool));
    int failures = 0;
    printf("== %s %s%s%s: %lld candidates, testing %lld\n", gc->file, gc->shapes,
           gc->only ? ", only " : "", gc->only ? gc->only : "", (long long)n, (long long)n_pick);
    fflush(stdout);
    for (int64_t i = 0; i < n_pick; i++) {
        const srch_candidate *c = &cand[pick[i]];
        char sched[256], line[1024];
        ops_schedule_format(&c->schedule, sched, sizeof(sched));
        if (!have[c->group]) {
            if (make_group_data(&cu, s->g, &s->groups[c->group].group, (uint64_t)c->group + 1,
                                &gdata[c->group], &err) < 0) {
                printf("  FAIL group %d: %s\n", c->group, err.msg);
                failures++;
                break;
            }
            have[c->group] = true;
        }
        /* Print before running: if the kernel kills the process, the log names it. */
        char nodes[256] = "";
        const ops_group *grp = &s->groups[c->group].group;
        for (int k = 0, used = 0; k < grp->n_nodes && used < (int)sizeof(nodes) - 1; k++)
            used += snprintf(nodes + used, sizeof(nodes) - (size_t)used, "%s%s", k ? "," : "",
                             s->g->tensors[s->g->nodes[grp->nodes[k]].out].name);
        printf("  [%s] %-70s ", nodes, sched);
        fflush(stdout);
        int r = run_candidate(&cu, &dev, s, c, &gdata[c->group], line, sizeof(line));
        printf("%s\n", line);
        fflush(stdout);
        if (r != 0)
            failures++;
        if (r < 0 && err.code == -EFAULT)
            break; /* the context is gone */
    }
    for (int gi = 0; gi < s->n_groups; gi++)
        if (have[gi])
            free_group_data(&cu, &gdata[gi]);
    free(gdata);
    free(have);
    free(pick);
    free(cand);
    srch_space_free(s);
    ops_graph_free(bound);
    ops_graph_free(g);
    srch_cuda_close(&cu);
    return failures ? 1 : 0;
}

/* Usage: test_gpu_families [PER_FAMILY [GRAPH.json SHAPES [MATCH]]] — with a graph (path from
 * the source root), only that case; MATCH keeps the schedules whose text contains it. */
int main(int argc, char **argv)
{
    if (argc > 1)
        per_family = atoi(argv[1]);
    gpu_case only = {argc > 3 ? argv[2] : NULL, argc > 3 ? argv[3] : NULL, OPS_PREC_EXACT,
                     argc > 4 ? argv[4] : NULL};
    size_t n_main = only.file ? 1 : KT_ARRAY_LEN(cases);
    size_t n_cases = n_main + (only.file ? 0 : KT_ARRAY_LEN(wgmma16_cases));
    gpu_case *list = calloc(n_cases, sizeof(*list));
    if (!list)
        return 1;
    for (size_t i = 0; i < n_cases; i++)
        list[i] = only.file ? only : i < n_main ? cases[i] : wgmma16_cases[i - n_main];
    int failed = 0, skipped = 0;
    for (size_t i = 0; i < n_cases; i++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            int rc = run_case(&list[i]);
            fflush(stdout);
            _exit(rc);
        }
        int ws = 0;
        waitpid(pid, &ws, 0);
        if (WIFEXITED(ws) && WEXITSTATUS(ws) == SKIP) {
            skipped++;
            break; /* no GPU: every case would skip */
        }
        if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
            failed++;
            if (!WIFEXITED(ws))
                printf("  CRASH: case %s %s killed by signal %d\n", list[i].file, list[i].shapes,
                       WTERMSIG(ws));
        }
    }
    free(list);
    if (skipped)
        return SKIP;
    printf("\n%d of %zu cases failed\n", failed, n_cases);
    return failed ? 1 : 0;
}
