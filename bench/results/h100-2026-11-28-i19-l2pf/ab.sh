#!/bin/bash
# Issue 19, l2pf A/B on the decode shapes: test_gpu_families on fixed wgmma schedules with l2pf=0
# and 1 (each verified, then a rough hot time: 20 back-to-back runs between CUDA events), then
# Nsight Compute of the down projection at 64 tokens in both forms and of cuBLAS's kernel
# (torch.matmul). From the repository root on the device, dist-device/ carried, logs under $OUT.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/dist-device/lib KTUNE_SOURCE_ROOT=$PWD \
  KTUNE_WORKER=$PWD/dist-device/bin/ktune-worker KTUNE_NVRTC=$PWD/dist-device/bin/ktune-nvrtc
T=dist-device/tests/test_gpu_families
G=bench/cases/linear_bf16.json
W="wm=1 wn=1"
{
  for rep in 1 2; do
    for s in M=64,N=4096,K=14336 M=64,N=6144,K=4096 M=64,N=28672,K=4096; do
      for sch in "bm=64 bn=64 bk=64 $W stages=8 splitk=2 raster=1 smem=xor splitk_mode=parallel" \
        "bm=64 bn=128 bk=64 $W stages=8 splitk=4 raster=1 smem=xor splitk_mode=parallel" \
        "bm=64 bn=64 bk=64 $W stages=8 splitk=1 raster=1 smem=xor splitk_mode=parallel" \
        "bm=64 bn=256 bk=64 $W stages=4 splitk=1 raster=1 smem=xor splitk_mode=parallel"; do
        echo "== rep $rep $s $sch"
        $T 2 $G $s "$sch mma=wgmma mcast=1 store=direct l2pf=" 2>&1 | grep -E "^\s+\[|failed"
      done
    done
  done
} > "$OUT/ab.txt" 2>&1
NCU=$(ls /usr/local/cuda/bin/ncu 2>/dev/null || which ncu)
for pf in 0 1; do
  echo "==== l2pf=$pf"
  $NCU --target-processes all --clock-control none --kernel-name regex:ktune_gemm --launch-skip 2 \
    --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
    $T 1 $G M=64,N=4096,K=14336 "bm=64 bn=64 bk=64 $W stages=8 splitk=2 raster=1 smem=xor splitk_mode=parallel mma=wgmma mcast=1 store=direct l2pf=$pf" 2>&1 |
    grep -E "ktune_gemm|Duration|Throughput|Hit Rate|Stall|Warp Cycles|Bandwidth|Busy|ok |FAIL" | head -40
done > "$OUT/ncu.txt" 2>&1
cat > /tmp/cublas_down.py <<'PY'
import torch
x = torch.randn(64, 14336, device="cuda", dtype=torch.bfloat16)
w = torch.randn(4096, 14336, device="cuda", dtype=torch.bfloat16)
for _ in range(5):
    y = x @ w.t()
torch.cuda.synchronize()
PY
{
  echo "==== cuBLAS (torch) 64x4096x14336"
  $NCU --clock-control none --launch-skip 2 --launch-count 1 --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section WarpStateStats python3 /tmp/cublas_down.py 2>&1 |
    grep -E "^\s+[a-z_0-9]+.*\(|Duration|Throughput|Hit Rate|Stall|Warp Cycles|Bandwidth|Busy" | head -40
} >> "$OUT/ncu.txt" 2>&1
sed -E "s/gemm math=bf16 //; s/ smem=xor.*l2pf=/ l2pf=/" "$OUT/ab.txt"
cat "$OUT/ncu.txt"
