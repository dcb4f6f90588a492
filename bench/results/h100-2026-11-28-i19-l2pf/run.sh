#!/bin/bash
# Issue 19, the wgmma16 knob l2pf (L2 prefetch of the streamed operand's k tiles) on the lent H100:
# the GPU cases verifying l2pf forms on ragged decode and skinny shapes, then ktune tune --local
# on the decode shapes (../h100-2026-11-27-i19-decode-ring/tune.sh, its cache's data.mdb brought
# back for that folder's trials.py). From the repository root on the device, dist-device/ carried,
# logs under $OUT. SKIP_CASES=1 skips the cases; CASES and BUDGET go to tune.sh.
set -u
exec > "$OUT/run.txt" 2>&1
export KTUNE_GPU_PER_FAMILY=${PER:-4} KTUNE_SOURCE_ROOT=$PWD
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/dist-device/lib:${LD_LIBRARY_PATH:-}
export KTUNE_WORKER=$PWD/dist-device/bin/ktune-worker KTUNE_NVRTC=$PWD/dist-device/bin/ktune-nvrtc
T=dist-device/tests/test_gpu_families
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
if [ "${SKIP_CASES:-0}" != 1 ]; then
  while read -r graph shapes pat; do
    [ -z "$graph" ] && continue
    echo "== $graph $shapes $pat"
    timeout 240 $T "$KTUNE_GPU_PER_FAMILY" "$graph" "$shapes" "$pat" 2>&1 | tail -8
    echo "rc=$?"
  done <<'CASES'
tests/gpu/linear_decode.json T=61,N=1000,K=2008 l2pf=1
tests/gpu/linear_decode.json T=13,N=333,K=4096 l2pf=1&splitk_mode=cluster
tests/gpu/gemm_bf16_epilogue.json M=1000,N=64,K=1000 l2pf=1
CASES
fi
bash bench/results/h100-2026-11-27-i19-decode-ring/tune.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
