#!/bin/bash
# Issue 19: why the search served its own kernel for the Llama down projection although cuBLASLt
# ran 3% faster in the bench: one `ktune tune --local` of it (the bench's budget share, 55 s), the
# job's JSON (picks: own and library times, re-timed or not) and the trial log brought back.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/dist-device/lib KTUNE_SOURCE_ROOT=$PWD
C=$(mktemp -d)
dist-device/bin/ktune tune bench/cases/linear_bf16.json --shape M=4096,N=4096,K=14336 --local \
  --budget "${BUDGET:-55s}" --cache "$C" --worker dist-device/bin/ktune-worker --json \
  > "$OUT/tune-down.json" 2> "$OUT/tune-down.log"
echo "rc=$?"; tail -5 "$OUT/tune-down.log"; head -c 2500 "$OUT/tune-down.json"
cp "$C/data.mdb" "$OUT/data.mdb"
