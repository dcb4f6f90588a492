#!/bin/bash
# Issue 19 on the lent H200, call 6: why stream-K is slower than its data-parallel twin at bf16
# 4096^3 (call 5): each kernel alone in a cache (`ktune tune --local --only` the exact schedule),
# launched through the Python runtime (../h100-2026-11-27-i19-bench-ncu/ncu_launch.py) under
# Nsight Compute (--set full, --clock-control none, one launch after three). From the
# repository root, dist-device/ carried.
set -u
export KTUNE_SOURCE_ROOT=$PWD KTUNE_WORKER=$PWD/dist-device/bin/ktune-worker \
  KTUNE_NVRTC=$PWD/dist-device/bin/ktune-nvrtc
export LD_LIBRARY_PATH=$PWD/dist-device/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export KTUNE_LIBRARY=$PWD/dist-device/lib/libktune.so PYTHONPATH=$PWD/client/python
NCU=$(ls /usr/local/cuda/bin/ncu 2>/dev/null || which ncu)
date -u +%FT%TZ > "$OUT/times.txt"
X=$(mktemp -d)/ncu; mkdir -p "$X"
S="gemm math=bf16 bm=128 bn=256 bk=64 wm=2 wn=1 stages=3 splitk=1 raster=8 smem=xor splitk_mode=MODE mma=wgmma mcast=2 store=tma"
for mode in parallel stream; do
  dist-device/bin/ktune tune bench/cases/gemm_bf16.json --shape M=4096,N=4096,K=4096 --local \
    --budget 20s --only "${S/MODE/$mode}" --cache "$X/cache-$mode" --json > "$X/tune-$mode.json" 2>&1
  $NCU --set full --clock-control none --kernel-name regex:ktune_gemm --launch-skip 3 --launch-count 1 \
    -o "$X/ncu-$mode" python3 bench/results/h100-2026-11-27-i19-bench-ncu/ncu_launch.py own \
    "$X/cache-$mode" bench/cases/gemm_bf16.json 4096 4096 4096 bf16 > "$X/ncu-$mode.log" 2>&1
  $NCU --import "$X/ncu-$mode.ncu-rep" --print-summary none --page details > "$X/ncu-$mode.txt" 2>&1
  echo "== $mode"
  grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Hit Rate|DRAM Throughput|L1/TEX Hit|Issued Warp|No Eligible|Registers Per|Achieved Occupancy|Stall" "$X/ncu-$mode.txt" | head -24
done
rm -f "$X"/ncu-*.ncu-rep
tar -C "$(dirname "$X")" -czf "$OUT/ncu.tgz" ncu
date -u +%FT%TZ >> "$OUT/times.txt"
