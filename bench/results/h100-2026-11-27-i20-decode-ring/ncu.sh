#!/bin/bash
# Issue 20, why split-KV decode trails SDPA: Nsight Compute on two splitkv kernels of the Llama-3
# GQA decode at B 16 x 32768 keys (4 slices; the cp.async ring of 2 chunks a warp, and no ring),
# launched by test_gpu_families (which verifies them first), and on SDPA's decode kernel at the
# same shape. From the repository root, dist-device/ carried; one file back (ncu-decode.txt).
set -u
export KTUNE_SOURCE_ROOT=$PWD LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/dist-device/lib
export KTUNE_WORKER=$PWD/dist-device/bin/ktune-worker KTUNE_NVRTC=$PWD/dist-device/bin/ktune-nvrtc
NCU=$(ls /usr/local/cuda/bin/ncu 2>/dev/null || which ncu)
S="--section SpeedOfLight --section Occupancy --section SchedulerStats --section WarpStateStats --section MemoryWorkloadAnalysis"
K="bq=64 bkv=32 warps=4 stages=%s math=bf16 smem=pad q=smem exp=exp2 mma=splitkv grid=tiles splits=4 "
N=$(mktemp -d)
for st in 2 1; do
  pat=$(printf "$K" $st)
  $NCU $S --clock-control none --kernel-name regex:splitkv_w4_x4_s$st --launch-count 1 \
    dist-device/tests/test_gpu_families 1 bench/cases/llama3_gqa_decode_bf16.json B=16,T=32768 "$pat" \
    > "$N/own-$st.log" 2>&1
  echo "==== ktune stages=$st (rc $?)"; grep -E " ok | FAIL" "$N/own-$st.log" | head -3
  grep -E "^  [a-z_]+.*\(|Duration|Throughput|Issue|Eligible|Active Warps|Achieved|Registers|Shared Memory Config|Stall|No Eligible|Block Limit|Executed Ipc" "$N/own-$st.log" | head -40
done > "$OUT/ncu-decode.txt" 2>&1
cat > "$N/sdpa.py" <<'PY'
import torch
q = torch.randn(16, 32, 1, 128, device="cuda", dtype=torch.bfloat16)
k, v = (torch.randn(16, 8, 32768, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
for _ in range(4):
    torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)
torch.cuda.synchronize()
PY
{ echo "==== SDPA"; $NCU $S --clock-control none --launch-skip 3 --launch-count 3 python3 "$N/sdpa.py" > "$N/sdpa.log" 2>&1
  grep -E "^  [a-z_]+.*\(|Duration|Throughput|Issue|Eligible|Active Warps|Achieved|Registers|Stall|No Eligible|Executed Ipc" "$N/sdpa.log" | head -80; } >> "$OUT/ncu-decode.txt" 2>&1
cat "$OUT/ncu-decode.txt" | head -150
