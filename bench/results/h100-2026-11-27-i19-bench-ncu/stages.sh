#!/bin/bash
# Issue 19: 6- and 8-stage rings on the 16-bit TMA kernel: GPU cases (verified like every
# candidate), then tune-splitk.sh's few-tile shapes with the ring-latency cost model.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/dist-device/lib KTUNE_SOURCE_ROOT=$PWD \
  KTUNE_WORKER=$PWD/dist-device/bin/ktune-worker KTUNE_NVRTC=$PWD/dist-device/bin/ktune-nvrtc
T=dist-device/tests/test_gpu_families
{
  $T 3 bench/cases/gemm_bf16.json M=1000,N=776,K=1000 "stages=8"
  $T 3 bench/cases/linear_bf16.json M=1999,N=2048,K=264 "stages=6&mma=wgmma_pingpong"
  $T 2 tests/gpu/gemm_bf16_epilogue.json M=200,N=264,K=1024 "whole:stages=8"
} > "$OUT/gpu-stages.txt" 2>&1
echo "gpu stage cases rc=$?"; grep -E "^FAIL|cases failed| ok | FAIL" "$OUT/gpu-stages.txt" | head -20
bash bench/results/h100-2026-11-27-i19-bench-ncu/tune-splitk.sh > /dev/null 2>&1
cat "$OUT/tune-splitk.txt" | grep -v info
