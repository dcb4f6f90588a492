#!/bin/bash
# Issue 19 on the lent H200, call 1: stream-K verified (GPU family cases: stream-K schedules on
# ragged, transposed, multicast, TMA-store, dual and few-tile GEMMs, and the other modes beside),
# then the two few-tile core GEMMs benched (DeepBench 1760x128x1760 f16, the write-up's
# GEMM+bias+ReLU). From the repository root, dist-device/ carried.
set -u
D=bench/results/h200-2026-11-28-i19-streamk
date -u +%FT%TZ > "$OUT/times.txt"
KTUNE_GPU_PER_FAMILY=6 KTUNE_GPU_CASES=$D/cases.txt scripts/device-run cases > "$OUT/cases.txt" 2>&1
echo "cases rc=$?"; tail -30 "$OUT/cases.txt"
date -u +%FT%TZ >> "$OUT/times.txt"
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  KTUNE_BENCH_ONLY=deepbench_gemm_f16_1760x128x1760,writeup_gemm_bias_relu_f16_1024x256x512 \
    KTUNE_BENCH_TOTAL=${TOTAL:-100} scripts/device-run bench > "$OUT/bench.txt" 2>&1
  echo "bench rc=$?"; tail -12 "$OUT/bench.txt"
fi
date -u +%FT%TZ >> "$OUT/times.txt"
