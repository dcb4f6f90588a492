#!/bin/bash
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
P=dist-device/probe/probe
for cup in "" 1; do
for c in c0_nvcc c0_nvrtc; do
  echo "== $c cupti=$cup"; PROBE_CUPTI=$cup timeout 30 $P gemm 3 3 dist-device/probe/$c.cubin ktune_gemm_bf16_wgmma_128x64x64 256 256 256 128 64 4 384 8 nobias
done
echo "== k1 cupti=$cup"; PROBE_CUPTI=$cup timeout 30 $P gemm 3 3 dist-device/probe/k1.cubin ktune_gemm_bf16_wgmma_128x256x64 1000 256 512 128 256 4 384 8
done
export KTUNE_SOURCE_ROOT=$PWD KTUNE_WORKER=$PWD/dist-device/bin/ktune-worker KTUNE_NVRTC=$PWD/dist-device/bin/ktune-nvrtc
KTUNE_WGMMA16=1 timeout 120 dist-device/tests/test_gpu_families 1 bench/cases/gemm_bf16.json M=256,N=256,K=256 mma=wgmma 2>&1 | tail -15
