#!/bin/bash
# Issue 20, split-KV decode with one slice (the block merges its warps' partials in shared memory
# and stores the output: one launch, no workspace) on the lent H100: the GPU cases of both forms,
# then the bench's decode cases, the bench cache's trial log brought back (data.mdb, for
# ../h100-2026-11-27-i19-decode-ring/trials.py). From the repository root on the device,
# dist-device/ carried, logs under $OUT. GROUP/ONLY/TOTAL pick the bench; SKIP_CASES=1 skips the
# cases; PER is the candidates a family per case.
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
tests/gpu/attention_gqa.json B=3,S=4,T=5003 mma=splitkv_tc&splits=1 
tests/gpu/attention_gqa.json B=2,S=1,T=517 mma=splitkv &splits=1 
bench/cases/llama3_gqa_decode_bf16.json B=2,T=3001 mma=splitkv_tc&splits=1 
tests/gpu/attention_gqa.json B=3,S=4,T=5003 mma=splitkv_tc
tests/gpu/attention_gqa.json B=2,S=1,T=4100 mma=splitkv_tc
tests/gpu/attention_gqa.json B=3,S=4,T=5003 mma=splitkv&stages=3
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
