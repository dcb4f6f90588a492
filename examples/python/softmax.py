#!/usr/bin/env python3
"""Tune a softmax through ktuned, then run the tuned kernel on a PyTorch tensor and compare it
with torch.softmax (value and time).

    python3 examples/python/softmax.py --rows 4096 --cols 8192 [--socket PATH] [--cache DIR]

--skip-tune only looks the kernel up (the cache needs no daemon). libktune is found through
$KTUNE_LIBRARY (e.g. build/client/libktune.so) or the system's library path."""

import argparse
import os
import sys

import ktune

HERE = os.path.dirname(os.path.abspath(__file__))
GRAPH = os.path.join(HERE, "..", "softmax.json")


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
            sys.exit(f"job {job.id} {job.state}: {job.error or 'no verified kernel'}")
        print(f"winner: {job.family} {job.best_ns / 1000:.2f} us ({job.schedule})")


def run(args, graph, shapes):
    try:
        import torch
    except ImportError:
        sys.exit("PyTorch is not installed: nothing to run the kernel on")
    if not torch.cuda.is_available():
        sys.exit("no CUDA device here")
    with ktune.Runtime(args.cache) as rt:
        k = rt.lookup(graph, shapes)
        print(f"kernel: {k.info.family} ({k.match} match, tuned on {k.info.gpu}), "
              f"{k.info.time_ns / 1000:.2f} us when tuned")
        x = torch.randn(args.rows, args.cols, device="cuda")
        y = k(x)
        err = (y - torch.softmax(x, dim=-1)).abs().max().item()

        def time_us(fn, reps=50):
            fn()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(reps):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) * 1000 / reps
        out = torch.empty_like(x)
        ours = time_us(lambda: k(x, out=out))
        theirs = time_us(lambda: torch.softmax(x, dim=-1, out=out))
        print(f"max |ktune - torch| = {err:.3g}; ktune {ours:.2f} us, torch {theirs:.2f} us "
              f"per call (with Python overhead)")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=4096)
    p.add_argument("--cols", type=int, default=8192)
    p.add_argument("--budget", default="60s")
    p.add_argument("--socket", help="ktuned's socket (default $KTUNE_SOCKET, else "
                   "/run/ktune/ktuned.sock)")
    p.add_argument("--cache", help="the cache (default $KTUNE_CACHE, else /var/lib/ktune/cache)")
    p.add_argument("--skip-tune", action="store_true", help="only look the kernel up")
    args = p.parse_args()
    graph, shapes = ktune.Graph(GRAPH), {"M": args.rows, "N": args.cols}
    try:
        if not args.skip_tune:
            tune(args, graph, shapes)
        run(args, graph, shapes)
    except ktune.KtuneError as e:
        sys.exit(f"softmax.py: {e}")


if __name__ == "__main__":
    main()
