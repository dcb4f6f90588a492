#!/bin/bash
# the 8192^3 bf16 own kernel (mcast 2 and 1) and cuBLAS through torch: hot timing, then Nsight Compute
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
P=dist-device/probe
NCU=$(ls /usr/local/cuda/bin/ncu 2>/dev/null || which ncu)
E=ktune_gemm_bf16_wgmma_128x256x64
for c in g8192 g8192m1; do PROBE_NOREF=1 $P/probe gemm 3 3 $P/$c.cubin $E 8192 8192 8192 128 256 4 384 132 nobias; done
python3 -c "
import torch
a=torch.randn(8192,8192,device='cuda',dtype=torch.bfloat16); b=torch.randn(8192,8192,device='cuda',dtype=torch.bfloat16)
for _ in range(5): a@b
torch.cuda.synchronize(); s=torch.cuda.Event(enable_timing=True); e=torch.cuda.Event(enable_timing=True)
s.record(); [a@b for _ in range(20)]; e.record(); torch.cuda.synchronize(); ms=s.elapsed_time(e)/20
print('torch bf16 8192^3: %.1f us a call (hot, 20), %.0f TFLOP/s' % (ms*1e3, 2*8192**3/(ms*1e-3)/1e12))
"
for c in g8192 g8192m1; do
  PROBE_NOREF=1 $NCU --set full --launch-count 1 -o $OUT/ncu-$c $P/probe gemm 3 3 $P/$c.cubin $E 8192 8192 8192 128 256 4 384 132 nobias > /dev/null 2>&1
  $NCU --import $OUT/ncu-$c.ncu-rep --print-summary none --page details 2>&1 | grep -E "Duration|Throughput|Pipe|Stall|stall|Eligible|Issued|L2 Hit|Registers|Shared Memory Config|Achieved" | head -40 > $OUT/ncu-$c.txt
done
$NCU --set full --launch-skip 5 --launch-count 1 -o $OUT/ncu-cublas python3 -c "
import torch
a=torch.randn(8192,8192,device='cuda',dtype=torch.bfloat16); b=torch.randn(8192,8192,device='cuda',dtype=torch.bfloat16)
for _ in range(8): a@b
torch.cuda.synchronize()" > /dev/null 2>&1
$NCU --import $OUT/ncu-cublas.ncu-rep --print-summary none --page details 2>&1 | grep -E "Duration|Throughput|Pipe|Stall|stall|Eligible|Issued|L2 Hit|Registers|Shared Memory Config|Achieved|Cluster|Grid|Block" | head -50 > $OUT/ncu-cublas.txt
head -30 $OUT/ncu-g8192.txt; echo; head -40 $OUT/ncu-cublas.txt
