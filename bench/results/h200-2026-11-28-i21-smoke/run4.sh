#!/bin/bash
# Fourth call: the GPU worker test (its fp64 GPU reference against the CPU's: the reductions'
# block per output), then the six KernelBench problems that kept no kernel in call 3, each
# job now saying one reason. From the repository root, carry dist-device and build-kb.
set -u
date -u +%FT%TZ > "$OUT/times.txt"
G=$(mktemp -d)
timeout 200 dist-device/tests/test_gpu_worker > "$OUT/test_gpu_worker.txt" 2>&1
echo "test_gpu_worker rc=$?" | tee -a "$OUT/test_gpu_worker.txt"
grep -E "reference|FAIL" "$OUT/test_gpu_worker.txt" | head -30
date -u +%FT%TZ >> "$OUT/times.txt"
KTUNE_KB_LEVELS=1,2 KTUNE_KB_TOTAL=240 \
  KTUNE_KB_ONLY=33_BatchNorm,45_Average_Pooling_2D,57_conv_transposed_2D__square_input__square_kernel,98_KLDivLoss,3_ConvTranspose3d_Sum_LayerNorm_AvgPool_GELU,11_ConvTranspose2d_BatchNorm_Tanh_MaxPool_GroupNorm \
  timeout 330 scripts/device-run kernelbench > "$OUT/kb-smoke.txt" 2>&1
echo "kernelbench rc=$?" | tee -a "$OUT/kb-smoke.txt"
grep -E "^kb|tuning:|cases ok" "$OUT/kb-smoke.txt"
date -u +%FT%TZ >> "$OUT/times.txt"
