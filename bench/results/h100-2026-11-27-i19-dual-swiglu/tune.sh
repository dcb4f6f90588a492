#!/bin/bash
# ktune tune --local on the Llama-3-8B SwiGLU MLP (4096 x 14336 x 4096), the trial log kept
# ($OUT/data.mdb) to read which partitions and dual schedules were measured.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/dist-device/lib KTUNE_SOURCE_ROOT=$PWD \
  KTUNE_WORKER=$PWD/dist-device/bin/ktune-worker KTUNE_NVRTC=$PWD/dist-device/bin/ktune-nvrtc
rm -rf /tmp/tcache
dist-device/bin/ktune tune bench/cases/llm_swiglu_mlp_bf16.json --shape M=4096,N=14336,K=4096 \
  --local --budget ${BUDGET:-120s} --cache /tmp/tcache --json > "$OUT/tune-swiglu.json" 2> "$OUT/tune-swiglu.err"
echo "tune rc=$?"; tail -3 "$OUT/tune-swiglu.err"
cp /tmp/tcache/data.mdb "$OUT/data.mdb"
# read it with: python3 bench/results/h100-2026-11-27-i19-dual-swiglu/trials.py data.mdb m5 ma md mf
