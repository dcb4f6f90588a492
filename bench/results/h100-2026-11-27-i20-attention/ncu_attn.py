"""Launches one attention a few times for Nsight Compute: ktune's cached kernel for the case (from
the cache the bench left) or torch's SDPA. python3 ncu_attn.py own|torch CACHE GRAPH B H S"""
import sys

import torch

import ktune

who, cache, graph, B, H, S = sys.argv[1:7]
B, H, S = int(B), int(H), int(S)
q, k, v = (torch.randn(B, H, S, 128, device="cuda", dtype=torch.float16) for _ in range(3))
if who == "own":
    rt = ktune.Runtime(cache)
    kern = rt.lookup(ktune.Graph(graph), {"B": B, "H": H, "S": S})
    print(kern.info)
    names = list(kern.inputs)  # declared order: Q, K, V
    out = [torch.empty(B, H, S, 128, device="cuda", dtype=torch.float16)]
    fn = lambda: kern(**dict(zip(names, (q, k, v))), out=out)  # noqa: E731
else:
    causal = "causal" in graph
    fn = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
for _ in range(6):
    fn()
torch.cuda.synchronize()
