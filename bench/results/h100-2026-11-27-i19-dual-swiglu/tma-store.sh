#!/bin/bash
# store=tma on the lent H100: its GPU-suite cases, then ktune tune --local on bf16 4096^3 and the
# Llama-3-8B SwiGLU MLP (4096 x 14336 x 4096), trial logs kept to compare store=tma with direct.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/dist-device/lib KTUNE_SOURCE_ROOT=$PWD \
  KTUNE_WORKER=$PWD/dist-device/bin/ktune-worker KTUNE_NVRTC=$PWD/dist-device/bin/ktune-nvrtc
T=dist-device/tests/test_gpu_families
{
  $T 4 bench/cases/gemm_bf16.json M=2050,N=2056,K=520 "store=tma"
  $T 4 bench/cases/linear_bf16.json M=1999,N=2048,K=264 "store=tma"
  $T 4 tests/gpu/gemm_bf16_epilogue.json M=2000,N=1032,K=200 "whole:store=tma"
  $T 4 tests/gpu/swiglu_f16_bias.json B=2,M=2000,N=264,K=520 "whole:store=tma"
} > "$OUT/gpu-tma-store.txt" 2>&1
echo "gpu store=tma cases rc=$?"; grep -E "cases failed" "$OUT/gpu-tma-store.txt"
tune() { name=$1; shift; rm -rf /tmp/tc-$name
  dist-device/bin/ktune tune "$@" --local --budget ${BUDGET:-60s} --cache /tmp/tc-$name --json \
    > "$OUT/tune-$name.json" 2> "$OUT/tune-$name.err"
  echo "== $name rc=$?"; cp /tmp/tc-$name/data.mdb "$OUT/data-$name.mdb"
  python3 -c "
import json; d=json.load(open('$OUT/tune-$name.json')); w=d.get('winner') or {}
print(' winner', w.get('schedule'), round((w.get('time_ns') or 0)/1e3,1), 'us; trials', d['trials'])
for g in w.get('groups',[]): print('  group', g.get('nodes'), '| own', g.get('own_schedule'), round((g.get('own_ns') or 0)/1e3,1), 'us, lib', round((g.get('baseline_ns') or 0)/1e3,1))"; }
tune g4096 bench/cases/gemm_bf16.json --shape M=4096,N=4096,K=4096
tune swiglu bench/cases/llm_swiglu_mlp_bf16.json --shape M=4096,N=14336,K=4096
