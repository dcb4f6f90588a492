#!/bin/bash
# Issue 21 on the lent H200: the four KernelBench problems that kept no kernel in the smoke run
# (bench/results/h200-2026-11-28-i21-smoke, call 5: "no partition verified whole"), rerun with
# the tuner's completion phase (a budget spent with no whole partition verified completes the
# nearest one). From the repository root, carry dist-device and build-kb.
set -u
date -u +%FT%TZ > "$OUT/times.txt"
KTUNE_KB_LEVELS=1,2 KTUNE_KB_TOTAL=120 \
  KTUNE_KB_ONLY=33_BatchNorm,3_ConvTranspose3d_Sum_LayerNorm_AvgPool_GELU,11_ConvTranspose2d_BatchNorm_Tanh_MaxPool_GroupNorm,17_Conv2d_InstanceNorm_Divide \
  timeout 400 scripts/device-run kernelbench > "$OUT/kb.txt" 2>&1
echo "kernelbench rc=$?" | tee -a "$OUT/kb.txt"
# a run cut short by the timeout leaves its files unarchived: bring back what there is
for d in "$OUT"/kernelbench-*/; do
  [ -d "$d" ] || continue
  p=$(basename "$d")
  cp build-bench/kb-${p#kernelbench-}/batch.json build-bench/kb-${p#kernelbench-}/ktuned.log "$d" 2>/dev/null
  rm -rf "$d/graphs"
  tar -C "$OUT" -czf "$OUT/$p.tgz" "$p" && rm -rf "$d"
done
grep -E "^kb|tuning:|cases ok|batch took|complet" "$OUT/kb.txt"
date -u +%FT%TZ >> "$OUT/times.txt"
