#!/usr/bin/env python3
"""A transformer MLP block from PyTorch to a tuned kernel called inside torch.compile: capture it
(ktune.capture), tune it with ktuned, look the kernel up, call it as a custom op in a compiled
function, and check it against eager PyTorch.

    python3 examples/python/mlp_block.py [--tokens 512 --dim 1024 --hidden 4096]
                                         [--budget 2m] [--socket PATH] [--cache DIR]

The block: linear -> GELU -> linear -> residual add -> layernorm, random weights, float16 on
cuda:0. --skip-tune only looks the kernel up (the cache needs no daemon). The daemon's socket:
--socket, else $KTUNE_SOCKET, else /run/ktune/ktuned.sock; its cache (read here): --cache, else
$KTUNE_CACHE, else /var/lib/ktune/cache. libktune is found through $KTUNE_LIBRARY (e.g.
build/client/libktune.so) or the system's library path."""

import argparse
import sys

import ktune


def make_block(torch, dim, hidden):
    class MLPBlock(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.up = torch.nn.Linear(dim, hidden)
            self.down = torch.nn.Linear(hidden, dim)
            self.norm = torch.nn.LayerNorm(dim)

        def forward(self, x):
            h = torch.nn.functional.gelu(self.up(x))
            return self.norm(x + self.down(h))
    return MLPBlock()


def tune(args, graph, shapes):
    with ktune.Client(args.socket) as c:
        job = c.submit(graph, shapes, budget=args.budget)
        print(f"job {job.id}{' (joined)' if job.joined else ''}: {job.state}")

        def show(j):
            best = f"{j.best_ns / 1000:.2f} us" if j.best_ns else "-"
            print(f"\r  {j.state:9} {j.phase:7} trials {j.trials:4}  best {best:>10}  "
                  f"{j.elapsed_s:5.1f} s", end="", flush=True)
        job = c.wait(job, progress=show)
        print()
        if job.state != "done" or not job.record:
            sys.exit(f"mlp_block.py: job {job.id} {job.state}: "
                     f"{job.error or 'no verified kernel'}")
        print(f"winner: {job.family} {job.best_ns / 1000:.2f} us ({job.schedule})")


def time_us(torch, fn, reps=100):
    """GPU time per call (CUDA events around reps calls, after warm-up), host overhead
    included where the host is slower than the GPU."""
    for _ in range(5):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000 / reps


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=512)
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--budget", default="2m")
    p.add_argument("--socket", help="ktuned's socket")
    p.add_argument("--cache", help="the cache ktuned writes")
    p.add_argument("--skip-tune", action="store_true", help="only look the kernel up")
    args = p.parse_args()
    if not hasattr(ktune, "capture"):
        sys.exit(f"mlp_block.py: this ktune ({ktune.__version__}) has no ktune.capture "
                 "(issue 17 item 2): install a ktune that has it")
    try:
        import torch
    except ImportError:
        sys.exit("mlp_block.py: PyTorch is not installed")
    if not torch.cuda.is_available():
        sys.exit("mlp_block.py: no CUDA device here")

    torch.manual_seed(0)
    block = make_block(torch, args.dim, args.hidden).cuda().half().eval()
    x = torch.randn(args.tokens, args.dim, device="cuda", dtype=torch.float16)

    # 1. capture: the block's weights become const inputs the graph remembers (g.params)
    g = ktune.capture(block, x, name="mlp_block")
    print(f"captured {g.name}: inputs {', '.join(g.inputs)}; outputs {', '.join(g.outputs)}")
    shapes = {}  # every dimension is fixed in this capture
    try:
        # 2. tune it with ktuned, with progress
        if not args.skip_tune:
            tune(args, g, shapes)
        # 3. look the kernel up (no daemon needed) and register it as a custom op
        rt = ktune.Runtime(args.cache)
        k = rt.lookup(g, shapes)
    except ktune.KtuneError as e:
        sys.exit(f"mlp_block.py: {e}")
    print(f"kernel: {k.info.family} ({k.match} match, tuned on {k.info.gpu}), "
          f"{k.info.n_launches} launch(es), {k.info.time_ns / 1000:.2f} us when tuned")
    op = k.as_torch_op()  # torch.ops.ktune.mlp_block_<hash>; takes x, fills in the weights
    print(f"custom op: {op.name}")

    # 4. call it inside a compiled function (fullgraph: no graph break around the op)
    @torch.compile(fullgraph=True)
    def forward(x):
        return op(x)

    with torch.no_grad():
        y = forward(x)
        want = block(x)  # eager PyTorch, float16
        exact = make_block(torch, args.dim, args.hidden).cuda().double().eval()
        exact.load_state_dict(block.state_dict())
        truth = exact(x.double())

        def normwise(a):
            return ((a.double() - truth).norm() / truth.norm()).item()
        max_err = (y.float() - want.float()).abs().max().item()
        print(f"max |ktune - eager| = {max_err:.3g}; normwise error vs float64: ktune "
              f"{normwise(y):.3g}, eager {normwise(want):.3g} (tolerance {k.info.tolerance:.3g})")

        # 5. timings (GPU time per call)
        compiled_block = torch.compile(block)
        t = {"eager": time_us(torch, lambda: block(x)),
             "torch.compile": time_us(torch, lambda: compiled_block(x)),
             "ktune op (compiled fn)": time_us(torch, lambda: forward(x))}
    print("per call: " + ", ".join(f"{n} {v:.2f} us" for n, v in t.items()))
    rt.close()
    if normwise(y) > max(k.info.tolerance, 2 * normwise(want)):
        sys.exit("mlp_block.py: the kernel's error is above its tolerance")


if __name__ == "__main__":
    main()
