#!/bin/bash
# Issue 19 on the lent H200, call 7 (call 5 again, stream-K now after the whole waves instead of before them): stream-K against its data-parallel twin, the same knobs
# otherwise, and cuBLASLt, each pair in one search (`ktune tune --local --only PATTERN`: the two
# schedules screened cold, CUPTI, then re-timed interleaved as finalists, docs/evaluation.md);
# `ktune trials --json` keeps every time. From the repository root, dist-device/ carried.
set -u
export KTUNE_SOURCE_ROOT=$PWD KTUNE_WORKER=$PWD/dist-device/bin/ktune-worker \
  KTUNE_NVRTC=$PWD/dist-device/bin/ktune-nvrtc
export LD_LIBRARY_PATH=$PWD/dist-device/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
date -u +%FT%TZ > "$OUT/times.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv > "$OUT/device.txt"
X=$(mktemp -d)/twins; mkdir -p "$X"
n=0
while read -r graph shapes pattern; do
  [ -z "$graph" ] && continue
  n=$((n + 1))
  C=$X/cache-$n
  k=0
  for only in "$pattern" "library"; do
    k=$((k + 1))
    dist-device/bin/ktune tune "$graph" --shape "$shapes" --local --budget 30s --only "$only" \
      --cache "$C" --json > "$X/tune-$n-$k.json" 2>> "$X/tune-$n.err"
  done
  dist-device/bin/ktune trials "$graph" --shape "$shapes" --cache "$C" --json > "$X/trials-$n.json"
  echo "== $graph $shapes"
  python3 - "$X/trials-$n.json" <<'PY'
import json, sys
for t in json.load(open(sys.argv[1]))["trials"]:
    if t["status"] != "ok" or t["time_ns"] <= 0:
        continue
    rt = [w for w in t["detail"].split() if w.startswith("rt=")]
    print("  %9.2f us  %-14s %s" % (t["time_ns"] / 1e3, rt[0][:40] if rt else "", t["candidate"][3:]))
PY
done <<'EOF2'
bench/cases/gemm_bf16.json M=3072,N=3072,K=4096 bm=128 bn=128 bk=64 wm=2 wn=1 stages=4 splitk=1 raster=8 smem=xor&mma=wgmma mcast=2 store=tma
bench/cases/gemm_bf16.json M=4096,N=4096,K=4096 bm=128 bn=256 bk=64 wm=2 wn=1 stages=3 splitk=1 raster=8 smem=xor&mma=wgmma mcast=2 store=tma
bench/cases/gemm_bf16.json M=4096,N=4096,K=4096 bm=128 bn=256 bk=64 wm=2 wn=1 stages=4 splitk=1 raster=8 smem=xor&mma=wgmma mcast=1 store=direct
bench/cases/deepbench_gemm_f16.json M=1760,N=128,K=1760 bm=64 bn=64 bk=64 wm=1 wn=1 stages=8 splitk=1 raster=1 smem=xor&mma=wgmma mcast=1 store=tma
EOF2
tar -C "$(dirname "$X")" -czf "$OUT/twins.tgz" twins
date -u +%FT%TZ >> "$OUT/times.txt"
