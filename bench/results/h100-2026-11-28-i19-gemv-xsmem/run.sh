#!/bin/bash
# Issue 19, decode GEMMs on the lent H100 with gemv x=smem (the block stages x in shared memory): the gemv family GPU cases (x=smem among them), then a bench group,
# the bench cache brought back (bench-data.mdb) for ../h100-2026-11-27-i19-decode-ring/trials.py. From the repository root on the device, dist-device/
# carried, logs under $OUT (run.txt, and the bench's JSON and log). GROUP/ONLY/TOTAL pick the
# bench; SKIP_CASES=1 skips the cases; PER is the candidates a family per case.
set -u
exec > "$OUT/run.txt" 2>&1
export KTUNE_GPU_PER_FAMILY=${PER:-6} KTUNE_SOURCE_ROOT=$PWD
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/dist-device/lib:${LD_LIBRARY_PATH:-}
export KTUNE_WORKER=$PWD/dist-device/bin/ktune-worker KTUNE_NVRTC=$PWD/dist-device/bin/ktune-nvrtc
T=dist-device/tests/test_gpu_families
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
if [ "${SKIP_CASES:-0}" != 1 ]; then
  while read -r graph shapes pat; do
    [ -z "$graph" ] && continue
    echo "== $graph $shapes $pat"
    timeout 240 $T "$KTUNE_GPU_PER_FAMILY" "$graph" "$shapes" "$pat" 2>&1 | tail -14
    echo "rc=$?"
  done <<'CASES'
tests/gpu/linear_decode.json T=13,N=333,K=2008 math=mma&x=smem
tests/gpu/linear_decode.json T=64,N=200,K=4096 math=mma&x=smem
tests/gpu/linear_decode.json T=61,N=1000,K=1000 math=mma&x=smem
tests/gpu/linear_decode.json T=13,N=333,K=2008 math=mma&depth=8
tests/gpu/linear_decode.json T=64,N=200,K=4096 math=mma
CASES
fi
if [ -n "${GROUP:-}${ONLY:-}" ]; then
  export KTUNE_CACHE=$PWD/build-bench/cache
  KTUNE_BENCH_ONLY=${ONLY:-} KTUNE_BENCH_GROUP=${GROUP:-} KTUNE_BENCH_TOTAL=${TOTAL:-120} \
    scripts/device-run bench
  echo "bench rc=$?"
  [ -f build-bench/cache/data.mdb ] && cp build-bench/cache/data.mdb "$OUT/bench-data.mdb"
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
