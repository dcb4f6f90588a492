#!/bin/bash
# Issue 21 on a lent two-GPU H200 host, call 6: the scan family's kernels verified on the GPU
# (test_gpu_families on examples/cumsum.json: a line of 20001 elements, many tiles and their
# carry; a line of 100, one tile), then KernelBench parts side by side as run4.sh runs them
# (default 5, its average pooling now a sum of slices, and 9, with the cumulative sum and
# product). From the repository root, carry dist-device and build-kb.
set -u
cases=$(mktemp)
printf '%s\n' "examples/cumsum.json M=37,N=20001 scan" "examples/cumsum.json M=4,N=100 scan" > "$cases"
KTUNE_GPU_CASES=$cases KTUNE_GPU_PER_FAMILY=6 timeout 60 scripts/device-run cases
echo "cases rc=$?"
PARTS="${PARTS:-5 9}" TOTAL=${TOTAL:-120} LIMIT=${LIMIT:-240} \
  bash bench/results/h200-2026-11-28-i21-parts/run4.sh
