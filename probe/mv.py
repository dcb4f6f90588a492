# probe (not committed): what Inductor's max-autotune runs for the DeepBench GEMV
import torch, os
A = torch.randn(7680, 2560, device="cuda", dtype=torch.float16)
B = torch.randn(2560, 1, device="cuda", dtype=torch.float16)
f = torch.compile(lambda a, b: torch.matmul(a, b), mode="max-autotune-no-cudagraphs")
for _ in range(3):
    f(A, B)
torch.cuda.synchronize()
s, e = torch.cuda.Event(True), torch.cuda.Event(True)
ts = []
scrub = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
for _ in range(50):
    scrub.zero_()
    s.record(); f(A, B); e.record(); e.synchronize(); ts.append(s.elapsed_time(e) * 1000)
ts.sort(); print("max-autotune median us", ts[len(ts)//2])
