#!/bin/bash
# Issue 20, the session's last device call: the whole GPU suite at the final commit, then
# Nsight Compute on the D128 kernels the last attention bench cached on this warm machine.
# From the repository root, dist-device/ carried; two files back (gpu-final.txt, ncu-d128.txt).
set -u
G=$(mktemp -d)
OUT0=$OUT
OUT=$G KTUNE_GPU_PER_FAMILY=4 scripts/device-run gpu > "$OUT0/gpu-final.txt" 2>&1
echo "gpu suite rc=$?"
cat "$G/test_gpu_families.log" >> "$OUT0/gpu-final.txt"
grep -E "^FAIL|cases failed|exit" "$OUT0/gpu-final.txt" | tail -20
OUT=$OUT0 bash bench/results/h100-2026-11-27-i20-attention/ncu.sh > /dev/null 2>&1
echo "ncu rc=$?"
