#!/bin/bash
# A/B: split-KV decode rings filled by cp.async (dist-device, HEAD) or by TMA bulk copies, a row
# of K and of V per lane on the slot's mbarrier (dist-b): dist-b's GPU cases first (every
# candidate against the fp64 reference: ragged tails, causal 16 rows, both forms), then the
# decode graph tuned by each build, fresh caches, data.mdb back.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/dist-device/lib KTUNE_SOURCE_ROOT=$PWD KTUNE_GPU_PER_FAMILY=${PER:-6}
export KTUNE_WORKER=$PWD/dist-b/bin/ktune-worker KTUNE_NVRTC=$PWD/dist-b/bin/ktune-nvrtc
while read -r graph shapes pat; do
  echo "== dist-b $graph $shapes $pat"
  timeout 240 dist-b/tests/test_gpu_families "$KTUNE_GPU_PER_FAMILY" "$graph" "$shapes" "$pat" 2>&1 | tail -9
done <<'CASES'
tests/gpu/attention_gqa.json B=3,S=4,T=5003 mma=splitkv_tc
tests/gpu/attention_gqa.json B=2,S=1,T=4100 mma=splitkv_tc
bench/cases/llama3_gqa_decode_bf16.json B=2,T=3001 mma=splitkv_tc&splits=1 
tests/gpu/attention_gqa.json B=3,S=4,T=5003 mma=splitkv&stages=3
tests/gpu/attention_gqa.json B=2,S=1,T=517 mma=splitkv &stages=2
tests/gpu/attention_d256.json B=2,S=2,T=1000 mma=splitkv
CASES
unset KTUNE_WORKER KTUNE_NVRTC
for v in dist-device dist-b; do
  C=$(mktemp -d)
  for shp in B=16,T=8192 B=16,T=32768; do
    $v/bin/ktune tune bench/cases/llama3_gqa_decode_bf16.json --shape $shp --local --budget 60s \
      --cache "$C" --worker $v/bin/ktune-worker --json > "$C/last.json" 2> "$C/last.log"
    echo "== $v $shp rc=$?"; tail -1 "$C/last.log"
  done
  cp "$C/data.mdb" "$OUT/$v.mdb"
done
