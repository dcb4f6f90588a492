#!/bin/bash
# Issue 19, split-K on the 16-bit wgmma kernel: the whole GPU suite (its new split-K and
# multicast cases among test_gpu_families'), then the bench cases with few output tiles.
# From the repository root on the device, dist-device/ carried, logs under $OUT.
set -u
if [ "${SKIP_GPU:-0}" != 1 ]; then
  G=$(mktemp -d)
  OUT=$G KTUNE_GPU_PER_FAMILY=4 scripts/device-run gpu > "$OUT/gpu-suite.txt" 2>&1
  echo "gpu suite rc=$?"
  cp "$G/test_gpu_families.log" "$OUT/gpu-families.log"
  grep -E "^FAIL|cases failed|exit" "$OUT/gpu-suite.txt" | tail -20
fi
export KTUNE_CACHE=$PWD/build-bench/cache
KTUNE_BENCH_ONLY=${ONLY-deepbench_gemm_f16_1760x128x1760,writeup_gemm_bias_relu_f16_1024x256x512} \
  KTUNE_BENCH_GROUP=${GROUP:-} KTUNE_BENCH_TOTAL=${TOTAL:-120} scripts/device-run bench \
  > "$OUT/bench.txt" 2>&1
echo "bench rc=$?"; grep -E "vs best|cases ok|took" "$OUT/bench.txt"
