"""Issue 19: how the cold-L2 scrub's kind moves a decode GEMM's time. Times torch.matmul (cuBLAS)
on the Llama-3-8B decode shapes and a 1 GiB device copy with CUDA events, the GPU held busy by
torch.cuda._sleep while the host enqueues (as bench/harness.py does), after each of three
scrubs of 256 MiB: write (zero_, the harness's and the tuner's: leaves L2 full of dirty lines
that the timed kernel's reads must write back), read (a sum: L2 full of clean lines), and
write-then-read (the same dirty lines written back before the timed kernel starts).
Median of 50 reps each, interleaved by rep. Run on the GPU machine: python3 scrub.py."""
import statistics
import torch

SCRUB = 256 << 20
buf = torch.empty(SCRUB // 4, dtype=torch.float32, device="cuda")
sink = torch.empty(1, dtype=torch.float32, device="cuda")


def scrub(kind):
    if kind in ("write", "write+read"):
        buf.zero_()
    if kind in ("read", "write+read"):
        torch.sum(buf, dim=0, out=sink[0])


def case(m, n, k):
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    return f"matmul {m}x{n}x{k}", (lambda: x @ w.t()), n * k * 2


src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
dst = torch.empty_like(src)
cases = [case(64, 4096, 14336), case(64, 6144, 4096), case(64, 28672, 4096),
         case(1, 28672, 4096), case(16, 4096, 14336),
         ("copy 1 GiB", lambda: dst.copy_(src), 2 << 30)]
kinds = ("write", "read", "write+read")
for name, fn, nbytes in cases:
    for _ in range(5):
        fn()
    times = {kd: [] for kd in kinds}
    for rep in range(50):
        for kd in kinds:
            scrub(kd)
            torch.cuda._sleep(1_000_000)
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times[kd].append(a.elapsed_time(b) * 1e3)
    row = "  ".join(f"{kd} {statistics.median(t):7.1f} us {nbytes / statistics.median(t) / 1e6:5.2f} TB/s"
                    for kd, t in times.items())
    print(f"{name:24s} {row}", flush=True)
