#!/bin/bash
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
P=dist-device/probe/probe
for sw in 0 3; do for l2 in 0 3; do for b in 64 128 256; do timeout 20 $P copy $sw $l2 $b; done; done; done
for k in k1 k2; do for sw in 3 0; do for l2 in 3 0; do
  echo "== $k sw=$sw l2=$l2"; timeout 30 $P gemm $sw $l2 dist-device/probe/$k.cubin ktune_gemm_bf16_wgmma_128x256x64 1000 256 512 128 256 4 384 8
done; done; done
