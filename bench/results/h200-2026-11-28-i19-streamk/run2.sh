#!/bin/bash
# Issue 19 on the lent H200, call 2: the plain 16-bit GEMMs where the last wave is partial
# (4096^3 bf16 and f16: 512 tiles of 128 x 256 on 132 SMs, 3.9 waves; the Llama-3-8B O and down
# projections), the search free to take stream-K or its data-parallel twin or cuBLASLt; PyTorch
# eager and torch.compile timed in the same run. Then the cache's best and runner-ups per key
# (the trials that competed) and ktuned's log, and two stream-K GPU cases in full (every
# schedule's verification line), in one archive. From the repository root, dist-device/ carried.
set -u
date -u +%FT%TZ > "$OUT/times.txt"
export KTUNE_CACHE=$PWD/build-bench/cache
# what scripts/device-run sets, for the direct calls below
export KTUNE_SOURCE_ROOT=$PWD KTUNE_WORKER=$PWD/dist-device/bin/ktune-worker \
  KTUNE_NVRTC=$PWD/dist-device/bin/ktune-nvrtc
export LD_LIBRARY_PATH=$PWD/dist-device/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
KTUNE_BENCH_ONLY=gemm_bf16_4096x4096x4096,gemm_f16_4096x4096x4096,llama3_8b_o_bf16_4096x4096x4096,llama3_8b_down_bf16_4096x4096x14336 \
  KTUNE_BENCH_TOTAL=${TOTAL:-280} KTUNE_BENCH_PEERS=eager,compile scripts/device-run bench > "$OUT/bench.txt" 2>&1
echo "bench rc=$?"; tail -8 "$OUT/bench.txt"
date -u +%FT%TZ >> "$OUT/times.txt"
rm -f "$OUT/BENCHMARKS.md" "$OUT/benchmarks.png" # bench/report.py makes them again from the JSON
X=$(mktemp -d)/extra; mkdir -p "$X"
dist-device/bin/ktune cache ls --all --json \
  > "$X/cache-ls.json" 2> "$X/cache-ls.err"
cp build-bench/work-*/ktuned.log "$X/" 2>/dev/null
if [ "${SKIP_CASES:-0}" != 1 ]; then
  for spec in "bench/cases/gemm_bf16.json M=1760,N=128,K=1760 splitk_mode=stream" \
              "tests/gpu/gemm_bf16_epilogue.json M=2000,N=1032,K=200 whole:splitk_mode=stream&store=tma"; do
    set -- $spec
    echo "-- $spec" >> "$X/gpu-cases.txt"
    timeout 150 dist-device/tests/test_gpu_families 3 "$1" "$2" "$3" >> "$X/gpu-cases.txt" 2>&1
    echo "-- exit $?" >> "$X/gpu-cases.txt"
  done
  grep -E "^-- |cases failed" "$X/gpu-cases.txt"
fi
tar -C "$(dirname "$X")" -czf "$OUT/extra.tgz" extra
date -u +%FT%TZ >> "$OUT/times.txt"
