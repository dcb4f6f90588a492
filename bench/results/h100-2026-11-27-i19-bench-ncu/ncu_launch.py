"""Launches one GEMM a few times for Nsight Compute: ktune's cached kernel for the case (from
the cache the bench left) or torch's (cuBLAS). python3 ncu_launch.py own|torch CACHE GRAPH M N K DTYPE"""
import sys

import torch

import ktune

who, cache, graph, M, N, K, dt = sys.argv[1:8]
M, N, K = int(M), int(N), int(K)
dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[dt]
a = torch.randn(M, K, device="cuda", dtype=dtype)
b = torch.randn(K, N, device="cuda", dtype=dtype)
if who == "own":
    rt = ktune.Runtime(cache)
    k = rt.lookup(ktune.Graph(graph), {"M": M, "N": N, "K": K})
    print(k.info if hasattr(k, "info") else k)
    fn = lambda: k(a, b)
else:
    fn = lambda: a @ b
for _ in range(6):
    fn()
torch.cuda.synchronize()
