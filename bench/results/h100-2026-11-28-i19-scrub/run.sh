#!/bin/bash
# Issue 19, the clean cold scrub in the tuner too: the timing GPU test (cold_clean among its
# checks), then the llm_decode bench group tuned and timed with both scrubs clean (a fresh
# cache). From the repository root on the device, dist-device/ carried, logs under $OUT.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/dist-device/lib:${LD_LIBRARY_PATH:-}
export KTUNE_SOURCE_ROOT=$PWD
dist-device/tests/test_gpu_timing > "$OUT/gpu-timing.txt" 2>&1
echo "test_gpu_timing rc=$?"
grep -E "^[a-z_]+ +(ok|FAIL)|copy 4 MiB" "$OUT/gpu-timing.txt"
[ "${SKIP_BENCH:-0}" = 1 ] && exit 0
KTUNE_BENCH_GROUP=${GROUP:-llm_decode} KTUNE_BENCH_TOTAL=${TOTAL:-200} scripts/device-run bench \
  > "$OUT/bench-run.txt" 2>&1
echo "bench rc=$?"
grep -hE " ok | FAIL|copy bandwidth|geometric" "$OUT/bench-run.txt" | grep -v AUTOTUNE
[ -f build-bench/cache/data.mdb ] && cp build-bench/cache/data.mdb "$OUT/bench-data.mdb"
