#!/bin/bash
# Issue 19, cluster split-K on the 16-bit wgmma kernel: its GPU cases (test_gpu_families, one
# case each), then tune-splitk.sh's shapes, the trial log brought back.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/dist-device/lib KTUNE_SOURCE_ROOT=$PWD \
  KTUNE_WORKER=$PWD/dist-device/bin/ktune-worker KTUNE_NVRTC=$PWD/dist-device/bin/ktune-nvrtc
T=dist-device/tests/test_gpu_families
N=${PER_CASE:-4}
{
  $T $N bench/cases/gemm_bf16.json M=1000,N=776,K=1000 "splitk_mode=cluster mma=wgmma "
  $T $N bench/cases/linear_bf16.json M=64,N=1001,K=2048 "splitk=8&splitk_mode=cluster mma=wgmma "
  $T $N tests/gpu/gemm_bf16_epilogue.json M=200,N=264,K=1024 "whole:splitk_mode=cluster mma=wgmma "
  $T 2 bench/cases/gemm_bf16.json M=384,N=1032,K=520 "bm=128 &mcast=2"
} > "$OUT/gpu-cluster.txt" 2>&1
echo "gpu cluster cases rc=$?"; grep -E "^(FAIL|ok|PASS)|failed|err" "$OUT/gpu-cluster.txt" | tail -30
[ "${SKIP_TUNE:-0}" = 1 ] || bash bench/results/h100-2026-11-27-i19-bench-ncu/tune-splitk.sh
