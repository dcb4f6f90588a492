#!/bin/bash
# The whole GPU suite (scripts/device-run gpu: every tests/gpu program, test_gpu_families at
# 4 candidates a family per case) after the launchers' shared-memory opt-in change (static +
# dynamic past 48 KiB). From the repository root, dist-device/ carried; gpu-suite.txt back.
set -u
G=$(mktemp -d)
OUT0=$OUT
OUT=$G KTUNE_GPU_PER_FAMILY=4 scripts/device-run gpu > "$OUT0/gpu-suite.txt" 2>&1
echo "gpu suite rc=$?" | tee -a "$OUT0/gpu-suite.txt"
cat "$G/test_gpu_families.log" >> "$OUT0/gpu-suite.txt" 2>/dev/null
grep -E "^FAIL|cases failed|exit|rc=" "$OUT0/gpu-suite.txt" | tail -20
