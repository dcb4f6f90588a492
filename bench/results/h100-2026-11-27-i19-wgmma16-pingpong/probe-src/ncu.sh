#!/bin/bash
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
P=dist-device/probe
NCU=$(ls /usr/local/cuda/bin/ncu 2>/dev/null || which ncu)
for k in "mc.cubin ktune_gemm_bf16_wgmma_128x128x64" "pp.cubin ktune_gemm_bf16_wgmma_pingpong_128x128x64"; do
  set -- $k
  echo "== $2"
  $P/probe gemm 3 3 $P/$1 $2 9000 256 512 128 128 4 384 132
  $NCU --section SpeedOfLight --section WarpStateStats --section SchedulerStats --metrics smsp__cycles_active.avg,sm__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum $P/probe gemm 3 3 $P/$1 $2 9000 256 512 128 128 4 384 132 2>&1 | grep -v "^==PROF==" | grep -E "Duration|Throughput|Stall|stall|Warp Cycles|Issued|Eligible|Active Warps|gpu__time|Barrier|Long Score|Wait" | head -40
done
