#!/bin/bash
# Issue 21: the KernelBench problems whose partition module did not compile in calls 7 and 8
# (kt_smem declared with different types by two groups' kernels), again after the fix, on GPU
# KB_GPU (default 0) with the peers eager only; everything in one archive $OUT/kb-run7.tgz.
# From the repository root, carry dist-device and build-kb.
set -u
OUT0=$OUT
mkdir -p "$OUT0/kb7"
export OUT=$OUT0/kb7
KTUNE_BENCH_GPU=${KB_GPU:-0} KTUNE_KB_LEVELS=2 KTUNE_KB_TOTAL=${TOTAL:-80} KTUNE_KB_PEERS=eager \
  KTUNE_KB_ONLY=27_Conv3d_HardSwish_GroupNorm_Mean,73_Conv2d_BatchNorm_Scaling,77_ConvTranspose3d_Scale_BatchNorm_GlobalAvgPool,79_Conv3d_Multiply_InstanceNorm_Clamp_Multiply_Max \
  timeout "${LIMIT:-280}" scripts/device-run kernelbench > "$OUT/kb.txt" 2>&1
echo "kernelbench rc=$?" >> "$OUT/kb.txt"
for d in "$OUT"/kernelbench-*/; do
  [ -d "$d" ] || continue
  p=$(basename "$d")
  cp build-bench/kb-${p#kernelbench-}/batch.json build-bench/kb-${p#kernelbench-}/ktuned.log "$d" 2>/dev/null
  rm -rf "$d/graphs"
done
grep -hE "^kb|cases ok|batch took|rc=" "$OUT/kb.txt"
(cd "$OUT0" && tar -czf kb-run7.tgz kb7 && rm -rf kb7)
