#!/bin/bash
# First device call of 2026-11-28 (H200): the whole GPU suite (the conv3d, input-dilated,
# split-reduction and wide-attention cases' first GPU run), then a KernelBench smoke of 8
# problems that take the new paths. From the repository root, carry dist-device and build-kb.
set -u
OUT0=$OUT
G=$(mktemp -d)
date -u +%FT%TZ > "$OUT0/times.txt"
OUT=$G KTUNE_GPU_PER_FAMILY=4 timeout 300 scripts/device-run gpu > "$OUT0/gpu-suite.txt" 2>&1
echo "gpu suite rc=$?" | tee -a "$OUT0/gpu-suite.txt"
cp "$G/device.txt" "$OUT0/" 2>/dev/null
cat "$G/test_gpu_families.log" >> "$OUT0/gpu-suite.txt" 2>/dev/null
grep -E "^FAIL|cases failed|WRONG|exit|rc=" "$OUT0/gpu-suite.txt" | tail -30
date -u +%FT%TZ >> "$OUT0/times.txt"
OUT=$OUT0 KTUNE_KB_LEVELS=1,2 KTUNE_KB_TOTAL=120 \
  KTUNE_KB_ONLY=1_Square_matrix_multiplication_,33_BatchNorm,45_Average_Pooling_2D,54_conv_standard_3D__square_input__square_kernel,57_conv_transposed_2D__square_input__square_kernel,98_KLDivLoss,3_ConvTranspose3d_Sum_LayerNorm_AvgPool_GELU,11_ConvTranspose2d_BatchNorm_Tanh_MaxPool_GroupNorm \
  timeout 270 scripts/device-run kernelbench > "$OUT0/kb-smoke.txt" 2>&1
echo "kernelbench rc=$?" | tee -a "$OUT0/kb-smoke.txt"
tail -40 "$OUT0/kb-smoke.txt"
date -u +%FT%TZ >> "$OUT0/times.txt"
