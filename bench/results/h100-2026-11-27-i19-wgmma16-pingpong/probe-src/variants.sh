#!/bin/bash
# hot standalone timing of 8192^3 bf16 variants of the own kernel (probe.c, 20 launches each), twice, and torch
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
P=dist-device/probe
run() { # name entry bm bn stages bt
  PROBE_NOREF=1 $P/probe gemm 3 3 $P/$1.cubin $2 8192 8192 8192 $3 $4 $5 384 132 nobias | sed "s/^/$1 /"; }
unset_bt() { :; }
for rep in 1 2 3; do
  run v0 ktune_gemm_bf16_wgmma_128x256x64 128 256 4
  run v1 ktune_gemm_bf16_wgmma_128x256x64 128 256 3
  PROBE_NOREF=1 PROBE_BT=128 $P/probe gemm 3 3 $P/v2.cubin ktune_gemm_bf16_wgmma_128x256x64 8192 8192 8192 128 256 4 384 132 nobias | sed "s/^/v2 /"
  PROBE_NOREF=1 PROBE_BT=256 $P/probe gemm 3 3 $P/v3.cubin ktune_gemm_bf16_wgmma_128x256x64 8192 8192 8192 128 256 4 384 132 nobias | sed "s/^/v3 /"
  run v4 ktune_gemm_bf16_wgmma_256x128x64 256 128 4
  run v5 ktune_gemm_bf16_wgmma_128x256x64 128 256 4
  run v6 ktune_gemm_bf16_wgmma_pingpong_128x128x64 128 128 4
  python3 -c "
import torch
a=torch.randn(8192,8192,device='cuda',dtype=torch.bfloat16); b=torch.randn(8192,8192,device='cuda',dtype=torch.bfloat16)
for _ in range(5): a@b
torch.cuda.synchronize(); s=torch.cuda.Event(enable_timing=True); e=torch.cuda.Event(enable_timing=True)
s.record(); [a@b for _ in range(20)]; e.record(); torch.cuda.synchronize(); ms=s.elapsed_time(e)/20
print('torch a@b: %.1f us a call (hot, 20), %.0f TFLOP/s' % (ms*1e3, 2*8192**3/(ms*1e-3)/1e12))
bt=b.t().contiguous().t()
for _ in range(3): torch.nn.functional.linear(a, b)
s.record(); [torch.nn.functional.linear(a, b) for _ in range(20)]; e.record(); torch.cuda.synchronize(); ms=s.elapsed_time(e)/20
print('torch linear (B [N][K]): %.1f us a call (hot, 20), %.0f TFLOP/s' % (ms*1e3, 2*8192**3/(ms*1e-3)/1e12))
"
done
