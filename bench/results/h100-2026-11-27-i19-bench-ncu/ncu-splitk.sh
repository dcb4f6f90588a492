#!/bin/bash
# Issue 19: Nsight Compute on the 16-bit wgmma kernel at DeepBench's 1760 x 128 x 1760 (f16),
# without split-K and with both split-K modes, each launched (and verified) by test_gpu_families
# through the worker. From the repository root on the device, dist-device/ carried.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/dist-device/lib KTUNE_SOURCE_ROOT=$PWD \
  KTUNE_WORKER=$PWD/dist-device/bin/ktune-worker KTUNE_NVRTC=$PWD/dist-device/bin/ktune-nvrtc
NCU=$(ls /usr/local/cuda/bin/ncu 2>/dev/null || which ncu)
G=bench/cases/deepbench_gemm_f16.json
S=M=1760,N=128,K=1760
for pat in "bm=128 bn=64 bk=64 wm=2 wn=1 stages=4 splitk=1 raster=1 smem=xor splitk_mode=parallel mma=wgmma mcast=1 store=direct" \
  "bm=128 bn=64 bk=64 wm=2 wn=1 stages=4 splitk=4 raster=1 smem=xor splitk_mode=cluster mma=wgmma " \
  "bm=128 bn=64 bk=64 wm=2 wn=1 stages=4 splitk=4 raster=1 smem=xor splitk_mode=parallel mma=wgmma "; do
  echo "==== $pat"
  $NCU --target-processes all --clock-control none --kernel-name regex:ktune_gemm --launch-skip 2 \
    --launch-count 1 --section SpeedOfLight --section WarpStateStats --section LaunchStats \
    --section SchedulerStats --section MemoryWorkloadAnalysis \
    dist-device/tests/test_gpu_families 1 $G $S "$pat" 2>&1 |
    grep -E "ktune_gemm|Duration|Throughput|Stall|stall|Eligible|Issued|Grid|Cluster|Block|Registers|Waves|Warp Cycles|ok |FAIL" | head -45
done > "$OUT/ncu-splitk.txt" 2>&1
cat "$OUT/ncu-splitk.txt"
