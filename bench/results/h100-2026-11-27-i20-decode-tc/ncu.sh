#!/bin/bash
# Issue 20, splitkv_tc under Nsight Compute: the tensor-core split-KV kernel of the Llama-3
# GQA decode at B 16 x 32768 keys (8 slices, 4 warps, a ring of 2 chunks: the bench's pick; and of 3),
# launched by test_gpu_families (which verifies it first). One file back (ncu-decode-tc.txt).
# From the repository root, dist-device/ carried.
set -u
export KTUNE_SOURCE_ROOT=$PWD LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/dist-device/lib
export KTUNE_WORKER=$PWD/dist-device/bin/ktune-worker KTUNE_NVRTC=$PWD/dist-device/bin/ktune-nvrtc
NCU=$(ls /usr/local/cuda/bin/ncu 2>/dev/null || which ncu)
S="--section SpeedOfLight --section Occupancy --section SchedulerStats --section WarpStateStats --section MemoryWorkloadAnalysis"
K="bq=64 bkv=32 warps=4 stages=%s math=bf16 smem=pad q=smem exp=exp2 mma=splitkv_tc grid=tiles splits=8 "
N=$(mktemp -d)
for st in 2 3; do
  pat=$(printf "$K" $st)
  $NCU $S --clock-control none --kernel-name regex:splitkv_tc_w4_x8_s$st --launch-count 1 \
    dist-device/tests/test_gpu_families 1 bench/cases/llama3_gqa_decode_bf16.json B=16,T=32768 "$pat" \
    > "$N/own-$st.log" 2>&1
  echo "==== ktune splitkv_tc stages=$st (rc $?)"; grep -E " ok | FAIL" "$N/own-$st.log" | head -3
  grep -E "^  [a-z_]+.*\(|Duration|Throughput|Issue|Eligible|Active Warps|Achieved|Registers|Shared Memory Config|Stall|No Eligible|Block Limit|Executed Ipc" "$N/own-$st.log" | head -40
done > "$OUT/ncu-decode-tc.txt" 2>&1
cat "$OUT/ncu-decode-tc.txt" | head -150
