#!/bin/bash
# Issue 19 item 2 on the lent H100: the dual-group cases of the GPU suite (SwiGLU as one GEMM
# over [Wg | Wu]), then the bench's Llama-3-8B SwiGLU MLP case against PyTorch.
# Run from the repository root on the device, dist-device/ carried, logs under $OUT.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/dist-device/lib KTUNE_SOURCE_ROOT=$PWD \
  KTUNE_WORKER=$PWD/dist-device/bin/ktune-worker KTUNE_NVRTC=$PWD/dist-device/bin/ktune-nvrtc
T=dist-device/tests/test_gpu_families
N=${PER_CASE:-4}
{
  $T $N bench/cases/llm_swiglu_mlp_bf16.json M=1000,N=1000,K=1000 "whole:mma=wgmma "
  $T $N bench/cases/llm_swiglu_mlp_bf16.json M=2050,N=1032,K=520 "whole:mcast=2"
  $T $N tests/gpu/swiglu_f16_bias.json B=2,M=333,N=264,K=520 "whole:mma=wgmma "
  $T $N tests/gpu/swiglu_f16_bias.json B=2,M=2000,N=264,K=520 "whole:mma=wgmma_pingpong"
} > "$OUT/gpu-dual.txt" 2>&1
echo "gpu dual cases rc=$?"; grep -E "^(FAIL|ok|PASS)|failed" "$OUT/gpu-dual.txt" | tail -20
[ "${SKIP_BENCH:-0}" = 1 ] && exit 0
KTUNE_BENCH_ONLY=${ONLY:-llama3_8b_swiglu_mlp_bf16_4096x14336x4096} \
  KTUNE_BENCH_TOTAL=${TOTAL:-150} scripts/device-run bench > "$OUT/bench.txt" 2>&1
echo "bench rc=$?"; tail -30 "$OUT/bench.txt"
