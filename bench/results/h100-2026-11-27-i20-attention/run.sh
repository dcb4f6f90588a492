#!/bin/bash
# Issue 20 on the lent H100: the whole GPU suite (its grouped-query attention and 6-stage GEMM
# cases among test_gpu_families'), then a bench group. From the repository root on the device,
# dist-device/ carried, logs under $OUT. SKIP_GPU=1 skips the suite; GROUP/ONLY/TOTAL pick the bench.
set -u
if [ "${SKIP_GPU:-0}" != 1 ]; then
  G=$(mktemp -d)
  OUT=$G KTUNE_GPU_PER_FAMILY=4 scripts/device-run gpu > "$OUT/gpu-suite.txt" 2>&1
  echo "gpu suite rc=$?"
  cp "$G/test_gpu_families.log" "$OUT/gpu-families.log"
  grep -E "^FAIL|cases failed|exit" "$OUT/gpu-suite.txt" | tail -20
fi
if [ -n "${GROUP:-}${ONLY:-}" ]; then
  export KTUNE_CACHE=$PWD/build-bench/cache
  KTUNE_BENCH_ONLY=${ONLY:-} KTUNE_BENCH_GROUP=${GROUP:-} KTUNE_BENCH_TOTAL=${TOTAL:-120} \
    scripts/device-run bench > "$OUT/bench.txt" 2>&1
  echo "bench rc=$?"; grep -E "vs best|cases ok|took" "$OUT/bench.txt"
fi
