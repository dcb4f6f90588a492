#!/bin/bash
# Fifth call: eight KernelBench problems (the four that kept no kernel in call 4, four more)
# with the fixes of 1036e21..4d41449: reductions' fp64 reference a block per output, inputs of
# log drawn positive, the deadline allowing for big data sets, memory given back when full.
# From the repository root, carry dist-device and build-kb.
set -u
date -u +%FT%TZ > "$OUT/times.txt"
KTUNE_KB_LEVELS=1,2 KTUNE_KB_TOTAL=160 \
  KTUNE_KB_ONLY=33_BatchNorm,98_KLDivLoss,23_Softmax,40_LayerNorm,3_ConvTranspose3d_Sum_LayerNorm_AvgPool_GELU,11_ConvTranspose2d_BatchNorm_Tanh_MaxPool_GroupNorm,17_Conv2d_InstanceNorm_Divide,76_Gemm_Add_ReLU \
  timeout 380 scripts/device-run kernelbench > "$OUT/kb.txt" 2>&1
echo "kernelbench rc=$?" | tee -a "$OUT/kb.txt"
# a run cut short by the timeout leaves its files unarchived: bring back what there is
for d in "$OUT"/kernelbench-*/; do
  [ -d "$d" ] || continue
  p=$(basename "$d")
  cp build-bench/kb-${p#kernelbench-}/batch.json build-bench/kb-${p#kernelbench-}/ktuned.log "$d" 2>/dev/null
  rm -rf "$d/graphs"
  tar -C "$OUT" -czf "$OUT/$p.tgz" "$p" && rm -rf "$d"
done
grep -E "^kb|tuning:|cases ok|batch took" "$OUT/kb.txt"
date -u +%FT%TZ >> "$OUT/times.txt"
