#!/bin/bash
# Issue 21 on the lent H200, call 3: the slice op's kernels verified on the GPU (test_gpu_families
# on examples/maxpool2d.json: padded, overlapping 3 x 3 windows as nine slices past the edges and
# their maximum, up to 6 pointwise schedules a shape), then KernelBench part 3 again (run out of
# GPU memory in call 2; fixed in ca48f42) and part 5 (the max pooling problems 41-43, captured
# since 15c9cd3) as run2.sh runs parts. From the repository root, carry dist-device and build-kb.
set -u
cases=$(mktemp)
printf '%s\n' "examples/maxpool2d.json N=3 pointwise" "examples/maxpool2d.json N=64 pointwise" > "$cases"
KTUNE_GPU_CASES=$cases KTUNE_GPU_PER_FAMILY=6 timeout 80 scripts/device-run cases
echo "cases rc=$?"
PARTS="${PARTS:-3 5}" TOTAL=${TOTAL:-120} LIMIT=${LIMIT:-200} \
  bash bench/results/h200-2026-11-28-i21-parts/run2.sh
