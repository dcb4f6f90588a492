#!/bin/bash
# Issue 19, cluster split-K with the remote reads batched: its GPU cases again, Nsight Compute
# of the DeepBench shape's three forms (ncu-splitk.sh), then tune-splitk.sh's shapes.
set -u
D=bench/results/h100-2026-11-27-i19-bench-ncu
SKIP_TUNE=1 bash $D/cluster.sh > /dev/null 2>&1
grep -E "cases failed|^FAIL" "$OUT/gpu-cluster.txt"
bash $D/ncu-splitk.sh | grep -E "====|Duration|Warp Cycles Per Issued"
bash $D/tune-splitk.sh > /dev/null 2>&1
python3 -c "print(open('$OUT/tune-splitk.txt').read()[-1500:])"
