#!/bin/bash
# Third call: the new paths' GPU cases alone (the whole suite runs past 300 s), then the
# KernelBench smoke (8 problems). From the repository root, carry dist-device and build-kb.
set -u
D=bench/results/h200-2026-11-28-i21-smoke
date -u +%FT%TZ > "$OUT/times.txt"
KTUNE_GPU_CASES=$D/new-cases.txt KTUNE_GPU_PER_FAMILY=6 timeout 240 scripts/device-run cases \
  > "$OUT/cases.txt" 2>&1
echo "cases rc=$?" | tee -a "$OUT/cases.txt"
tail -25 "$OUT/cases.txt"
date -u +%FT%TZ >> "$OUT/times.txt"
KTUNE_KB_LEVELS=1,2 KTUNE_KB_TOTAL=240 \
  KTUNE_KB_ONLY=1_Square_matrix_multiplication_,33_BatchNorm,45_Average_Pooling_2D,54_conv_standard_3D__square_input__square_kernel,57_conv_transposed_2D__square_input__square_kernel,98_KLDivLoss,3_ConvTranspose3d_Sum_LayerNorm_AvgPool_GELU,11_ConvTranspose2d_BatchNorm_Tanh_MaxPool_GroupNorm \
  timeout 320 scripts/device-run kernelbench > "$OUT/kb-smoke.txt" 2>&1
echo "kernelbench rc=$?" | tee -a "$OUT/kb-smoke.txt"
tail -40 "$OUT/kb-smoke.txt"
date -u +%FT%TZ >> "$OUT/times.txt"
