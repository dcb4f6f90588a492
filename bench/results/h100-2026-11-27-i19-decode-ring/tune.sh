#!/bin/bash
# Issue 19, decode GEMMs: ktune tune --local on the Llama decode shapes, one fresh cache, its
# data.mdb brought back for trials.py (every trial's
# schedule and time); the bench cache's data.mdb too when the machine still holds it.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/dist-device/lib KTUNE_SOURCE_ROOT=$PWD
C=$(mktemp -d)
while read -r graph shapes; do
  [ -z "$graph" ] && continue
  dist-device/bin/ktune tune "$graph" --shape "$shapes" --local --budget "${BUDGET:-60s}" \
    --cache "$C" --worker dist-device/bin/ktune-worker --json > "$C/last.json" 2> "$C/last.log"
  echo "== $graph $shapes rc=$?"; tail -2 "$C/last.log"
  python3 -c "import json,sys; d=json.load(open('$C/last.json')); print(json.dumps({k: d.get(k) for k in ('best_ns','baseline_ns','speedup','trials','family','schedule')}))"
done > "$OUT/tune.txt" 2>&1 <<< "${CASES:-bench/cases/linear_bf16.json M=16,N=4096,K=14336
bench/cases/linear_bf16.json M=16,N=6144,K=4096
bench/cases/linear_bf16.json M=64,N=4096,K=14336}"
cat "$OUT/tune.txt"
cp "$C/data.mdb" "$OUT/data.mdb"
[ -f build-bench/cache/data.mdb ] && cp build-bench/cache/data.mdb "$OUT/bench-data.mdb"
