#!/bin/bash
# Issue 24 on the lent H200: a real tuning job for the README's `ktune report` screenshot. ktuned
# on GPU 0 with a fresh cache tunes examples/gemm_bias_relu.json at M=4096 for BUDGET seconds,
# stops, and `ktune report` writes the job's page from the cache alone. Carry dist-device.
set -u
export LD_LIBRARY_PATH=$PWD/dist-device/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
B=$PWD/dist-device/bin
date -u +%FT%TZ > "$OUT/times.txt"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv > "$OUT/device.txt"
w=$(mktemp -d)
"$B/ktuned" --socket "$w/k.sock" --cache "$w/cache" --config /dev/null --worker "$B/ktune-worker" \
  --gpus 0 2> "$OUT/ktuned.log" &
d=$!
for _ in $(seq 100); do "$B/ktune" gpus --socket "$w/k.sock" > /dev/null 2>&1 && break; sleep 0.2; done
"$B/ktune" tune examples/gemm_bias_relu.json --shape M=4096 --budget "${BUDGET:-60}" --wait \
  --quiet --socket "$w/k.sock" > "$OUT/tune.txt" 2>&1
echo "tune rc=$?" >> "$OUT/tune.txt"
kill -TERM $d; wait $d
"$B/ktune" report 1 --html "$OUT/report.html" --cache "$w/cache" 2>&1 | tee -a "$OUT/tune.txt"
date -u +%FT%TZ >> "$OUT/times.txt"
cat "$OUT/tune.txt"
