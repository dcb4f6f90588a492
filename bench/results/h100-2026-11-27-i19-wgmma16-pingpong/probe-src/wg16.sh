#!/bin/bash
# the wgmma16 GPU cases of test_gpu_families, more schedules each
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 KTUNE_SOURCE_ROOT=$PWD KTUNE_WORKER=$PWD/dist-device/bin/ktune-worker KTUNE_NVRTC=$PWD/dist-device/bin/ktune-nvrtc
T=dist-device/tests/test_gpu_families
N=${1:-10}
$T $N bench/cases/gemm_bf16.json M=1000,N=776,K=1000 mma=wgmma
$T $N bench/cases/linear_bf16.json M=333,N=1000,K=1016 mma=wgmma
$T $N examples/gemm_bias_relu.json M=1000 mma=wgmma
$T $N tests/gpu/gemm_bf16_epilogue.json M=200,N=264,K=520 whole:mma=wgmma
$T $N bench/cases/gemm_bf16.json M=2050,N=2056,K=520 mma=wgmma
$T $N bench/cases/gemm_bf16.json M=2050,N=2056,K=520 mma=wgmma_pingpong
$T $N bench/cases/linear_bf16.json M=1999,N=2048,K=264 mma=wgmma_pingpong
$T $N examples/gemm_bias_relu.json M=9000 mma=wgmma_pingpong
$T $N tests/gpu/gemm_bf16_epilogue.json M=2000,N=1032,K=200 whole:mma=wgmma_pingpong
$T $N bench/cases/gemm_bf16.json M=2050,N=2056,K=520 mcast=2
$T $N bench/cases/linear_bf16.json M=1999,N=2048,K=264 mcast=2
$T $N tests/gpu/gemm_bf16_epilogue.json M=2000,N=1032,K=200 whole:mcast=2
$T $N bench/cases/gemm_bf16.json M=4096,N=4096,K=512 mcast=2
