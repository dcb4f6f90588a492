#!/bin/bash
# A/B: the decode graph tuned by the HEAD build (dist-device) and by one whose split-KV ring copies
# ask the L2 for 256-byte blocks (dist-b); each a fresh cache, data.mdb back.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/dist-device/lib
for v in dist-device dist-b; do  # dist-b: the candidate variant
  C=$(mktemp -d)
  for shp in B=16,T=8192 B=16,T=32768; do
    $v/bin/ktune tune bench/cases/llama3_gqa_decode_bf16.json --shape $shp --local --budget 60s \
      --cache "$C" --worker $v/bin/ktune-worker --json > "$C/last.json" 2> "$C/last.log"
    echo "== $v $shp rc=$?"; tail -1 "$C/last.log"
  done
  cp "$C/data.mdb" "$OUT/$v.mdb"
done
