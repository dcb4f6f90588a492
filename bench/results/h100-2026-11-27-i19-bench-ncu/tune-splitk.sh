#!/bin/bash
# Issue 19, split-K on the 16-bit wgmma kernel: ktune tune --local on shapes with few output
# tiles, one cache, its data.mdb brought back for trials.py (../h100-2026-11-27-i19-dual-swiglu/).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/dist-device/lib KTUNE_SOURCE_ROOT=$PWD
C=$(mktemp -d)
while read -r graph shapes; do
  dist-device/bin/ktune tune "$graph" --shape "$shapes" --local --budget "${BUDGET:-60s}" \
    --cache "$C" --worker dist-device/bin/ktune-worker --json > "$C/last.json" 2> "$C/last.log"
  echo "== $graph $shapes rc=$?"; tail -3 "$C/last.log"
  python3 -c "import json,sys; d=json.load(open('$C/last.json')); print(json.dumps({k: d.get(k) for k in ('best_ns','baseline_ns','speedup','trials','family','schedule')}))"
done > "$OUT/tune-splitk.txt" 2>&1 <<'CASES'
bench/cases/deepbench_gemm_f16.json M=1760,N=128,K=1760
bench/cases/writeup_gemm_bias_relu_f16.json M=1024
bench/cases/linear_bf16.json M=64,N=6144,K=4096
CASES
cat "$OUT/tune-splitk.txt"
cp "$C/data.mdb" "$OUT/data.mdb"
