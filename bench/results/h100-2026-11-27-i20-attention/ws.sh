#!/bin/bash
# Issue 20, mma=wgmma_ws on the lent H100: its GPU cases (test_gpu_families, one case at a time),
# then a bench group. From the repository root on the device, dist-device/ carried, logs under
# $OUT (one file, ws.txt). GROUP/ONLY/TOTAL pick the bench; SKIP_CASES=1 skips the cases.
set -u
exec > "$OUT/ws.txt" 2>&1
export KTUNE_GPU_PER_FAMILY=${PER:-6} KTUNE_SOURCE_ROOT=$PWD
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/dist-device/lib:${LD_LIBRARY_PATH:-}
export KTUNE_WORKER=$PWD/dist-device/bin/ktune-worker KTUNE_NVRTC=$PWD/dist-device/bin/ktune-nvrtc
T=dist-device/tests/test_gpu_families
if [ "${SKIP_CASES:-0}" != 1 ]; then
  echo "== test_gpu_worker (the fp64 references against the CPU's)"
  dist-device/tests/test_gpu_worker 2>&1 | tail -5
  while read -r graph shapes pat; do
    [ -z "$graph" ] && continue
    echo "== $graph $shapes $pat"
    timeout 240 $T "$KTUNE_GPU_PER_FAMILY" "$graph" "$shapes" "$pat" 2>&1 | tail -12
    echo "rc=$?"
  done <<'CASES'
examples/attention.json B=1,H=2,S=200 mma=wgmma_ws
bench/cases/attention_f16_d128_causal.json B=1,H=3,S=333 mma=wgmma_ws
bench/cases/attention_f16_d128_full.json B=2,H=2,S=333 mma=wgmma_ws
tests/gpu/attention_d256.json B=2,S=200,T=333 mma=wgmma_ws
tests/gpu/attention_gqa.json B=2,S=333,T=517 mma=wgmma_ws
bench/cases/attention_f16_d128_causal.json B=4,H=12,S=333 grid=persistent
tests/gpu/attention_gqa.json B=9,S=333,T=517 grid=persistent
tests/gpu/attention_gqa.json B=2,S=1,T=517 mma=splitkv
bench/cases/attention_f16_d128_causal.json B=1,H=3,S=333 pingpong=1
tests/gpu/attention_gqa.json B=9,S=333,T=517 pingpong=1&grid=persistent
tests/gpu/attention_gqa.json B=3,S=4,T=1000 mma=splitkv
tests/gpu/attention_d256.json B=2,S=2,T=1000 mma=splitkv
CASES
fi
if [ -n "${GROUP:-}${ONLY:-}" ]; then
  export KTUNE_CACHE=$PWD/build-bench/cache
  KTUNE_BENCH_ONLY=${ONLY:-} KTUNE_BENCH_GROUP=${GROUP:-} KTUNE_BENCH_TOTAL=${TOTAL:-120} \
    scripts/device-run bench
  echo "bench rc=$?"
fi
