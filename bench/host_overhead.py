#!/usr/bin/env python3
"""Host time per call of a tuned kernel: eager PyTorch's equivalent, the plain Python call
(kernel(...)) and the custom op (kernel.as_torch_op(), issue 17 item 4; target <= 8 us per call
outside a CUDA graph). A benchmark, not a test: run it on the GPU machine.

    bench/host_overhead.py --cache DIR [--tune] [--calls 10000] [--json OUT]

Protocol: per case, one process, the current stream; each contender makes fresh outputs every
call (no out=), as a model's forward does. After --warmup calls, --calls calls are timed one by
one with time.perf_counter_ns around the call (the host's time to enqueue it, not the GPU's
work); torch.cuda.synchronize() every --sync-every calls, outside the timed calls, keeps the
launch queue from filling (a full queue would make the launch itself wait for the GPU). The
contenders are interleaved in rounds of --sync-every calls, so drifting clocks and background
load affect them alike. Median and p10/p90 per contender, and the ratios. A last contender,
"floor", is torch.ops.aten.neg.default on the first input: one aten op called through an
OpOverload, as the custom op is (allocation, dispatch, one launch), the least any op called
that way costs on this host.

--tune tunes a missing kernel first with `ktune tune --local` (the CLI: $KTUNE_BIN, else
build/client/ktune; the worker: $KTUNE_WORKER, else build/search/ktune-worker) into --cache.
Exit status: 0, 1 when a kernel is missing (without --tune) or a result differs from the plain
call, 2 for bad arguments."""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
BUILD = os.environ.get("KTUNE_BUILD_DIR") or os.path.join(ROOT, "build")
os.environ.setdefault("KTUNE_LIBRARY", os.path.join(BUILD, "client", "libktune.so"))

import ktune  # noqa: E402

TARGET_US = 8.0


def _cases(torch):
    """name -> (graph file, shapes, make_inputs(kernel) -> (kernel args, eager fn))."""
    ex = os.path.join(ROOT, "examples")

    def softmax(k):
        x = torch.randn(256, 1024, device="cuda")
        return [x], lambda: torch.softmax(x, dim=-1)

    def gemm(k):
        a = torch.randn(256, 512, device="cuda", dtype=torch.float16)
        w = torch.randn(512, 256, device="cuda", dtype=torch.float16) / 16
        b = torch.randn(256, device="cuda", dtype=torch.float16)
        raw = {"A": a, "W": w, "bias": b}
        args = [k.prepack(n, raw[n]) if k.prepack_size(n) else raw[n] for n in k.inputs]
        return args, lambda: torch.relu(torch.addmm(b, a, w))

    def layernorm(k):
        x = torch.randn(64, 4096, device="cuda")
        w, b = torch.randn(4096, device="cuda"), torch.randn(4096, device="cuda")
        return [x, w, b], lambda: torch.nn.functional.layer_norm(x, (4096,), w, b, 1e-5)

    return {"softmax": (os.path.join(ex, "softmax.json"), {"M": 256, "N": 1024}, softmax),
            "gemm_bias_relu": (os.path.join(ex, "gemm_bias_relu.json"), {"M": 256}, gemm),
            "layernorm": (os.path.join(ex, "layernorm.json"), {"M": 64}, layernorm)}


def _tune(cache, graph, shapes):
    cli = os.environ.get("KTUNE_BIN") or os.path.join(BUILD, "client", "ktune")
    worker = os.environ.get("KTUNE_WORKER") or os.path.join(BUILD, "search", "ktune-worker")
    shape = ",".join(f"{k}={v}" for k, v in shapes.items())
    cmd = [cli, "tune", graph, "--shape", shape, "--local", "--worker", worker, "--cache", cache,
           "--budget", "30s"]
    print(f"tuning: {' '.join(cmd)}", file=sys.stderr)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def _stats(xs):
    s = sorted(xs)

    def q(p):
        return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]
    return {"median_us": statistics.median(s), "p10_us": q(10), "p90_us": q(90)}


def measure(torch, fns, calls, warmup, sync_every):
    """fns: name -> zero-argument callable. Returns name -> stats (microseconds)."""
    ns = time.perf_counter_ns
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    torch.cuda.synchronize()
    times = {name: [] for name in fns}
    while len(next(iter(times.values()))) < calls:
        for name, fn in fns.items():
            t = times[name]
            for _ in range(min(sync_every, calls - len(t))):
                t0 = ns()
                fn()
                t.append(ns() - t0)
            torch.cuda.synchronize()
    return {name: _stats([x / 1000 for x in t]) for name, t in times.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cache", default=os.environ.get("KTUNE_CACHE"),
                   help="the kernel cache (default $KTUNE_CACHE)")
    p.add_argument("--only", help="comma-separated cases (softmax, gemm_bias_relu, layernorm)")
    p.add_argument("--calls", type=int, default=10000)
    p.add_argument("--warmup", type=int, default=1000)
    p.add_argument("--sync-every", type=int, default=100)
    p.add_argument("--tune", action="store_true", help="tune missing kernels first")
    p.add_argument("--json", help="write the results here too")
    args = p.parse_args()
    if not args.cache:
        p.error("--cache (or $KTUNE_CACHE) is required")
    if args.calls < 1 or args.warmup < 0 or args.sync_every < 1:
        p.error("--calls and --sync-every must be >= 1, --warmup >= 0")
    import torch
    if not torch.cuda.is_available():
        sys.exit("host_overhead.py: no CUDA device here")
    cases = _cases(torch)
    only = args.only.split(",") if args.only else list(cases)
    unknown = [c for c in only if c not in cases]
    if unknown:
        p.error(f"unknown case {unknown[0]} (cases: {', '.join(cases)})")
    if args.tune:
        os.makedirs(args.cache, exist_ok=True)

    dev = torch.cuda.current_device()
    header = {"device": torch.cuda.get_device_name(dev), "cuda_device": dev,
              "torch": torch.__version__, "cuda": torch.version.cuda,
              "libktune": ktune.library_version(), "python": platform.python_version(),
              "host": platform.node(), "cpu": platform.processor() or platform.machine(),
              "protocol": (f"median host time per call over {args.calls} calls, each timed "
                           f"alone with perf_counter_ns, after {args.warmup} warm-up calls; "
                           f"torch.cuda.synchronize() every {args.sync_every} calls outside the "
                           "timed calls; contenders interleaved in rounds; fresh outputs every "
                           "call; current stream; no CUDA graph")}
    print(f"device: {header['device']} (cuda:{dev}), torch {header['torch']} (CUDA "
          f"{header['cuda']}), libktune {header['libktune']}, Python {header['python']}")
    print(f"protocol: {header['protocol']}")
    results, status = {}, 0
    for name in only:
        graph, shapes, make = cases[name]
        g = ktune.Graph(graph)
        rt = None
        try:
            rt = ktune.Runtime(args.cache)
            k = rt.lookup(g, shapes)
        except ktune.KtuneError as e:
            if rt is not None:
                rt.close()
            if not args.tune:
                print(f"{name}: {e} (--tune tunes it)", file=sys.stderr)
                status = 1
                continue
            _tune(args.cache, graph, shapes)
            rt = ktune.Runtime(args.cache)
            k = rt.lookup(g, shapes)
        kargs, eager = make(k)
        op = k.as_torch_op()
        overload = op.op
        want = k(*kargs)
        same = all(torch.equal(a, b) for a, b in zip(
            want if isinstance(want, tuple) else (want,),
            (lambda y: y if isinstance(y, tuple) else (y,))(op(*kargs))))
        if not same:
            print(f"{name}: the custom op's result differs from the plain call's", file=sys.stderr)
            status = 1
        neg, first = torch.ops.aten.neg.default, kargs[0]
        fns = {"eager": eager, "plain": lambda: k(*kargs), "op": lambda: op(*kargs),
               "op.op": lambda: overload(*kargs), "floor": lambda: neg(first)}
        r = measure(torch, fns, args.calls, args.warmup, args.sync_every)
        r["kernel"] = {"family": k.info.family, "match": k.match,
                       "gpu_us_when_tuned": k.info.time_ns / 1000, "op": op.name,
                       "op_launcher": op.launcher}
        results[name] = r
        rt.close()

    cols = ("eager", "plain", "op", "op.op", "floor")
    print(f"\n{'case':16}" + "".join(f"{c + ' us':>22}" for c in cols)
          + f"{'plain/eager':>13}{'op/eager':>10}{'op/plain':>10}  target")
    for name, r in results.items():
        cells = "".join(f"{r[c]['median_us']:8.2f} [{r[c]['p10_us']:5.2f}-{r[c]['p90_us']:5.2f}]"
                        for c in cols)
        m = {c: r[c]["median_us"] for c in cols}
        ok = "ok" if m["op"] <= TARGET_US else f"over {TARGET_US:g} us"
        print(f"{name:16}{cells}{m['plain'] / m['eager']:13.2f}{m['op'] / m['eager']:10.2f}"
              f"{m['op'] / m['plain']:10.2f}  {ok} (op launches from "
              f"{r['kernel']['op_launcher']})")
    print("\nus: median [p10-p90] host time per call; eager: PyTorch's ops for the same graph; "
          "plain: kernel(...); op: kernel.as_torch_op()(...); op.op: torch.ops.ktune.<name>."
          "default(...) (declared order, no argument binding); floor: torch.ops.aten.neg."
          f"default(first input); target: op <= {TARGET_US:g} us")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**header, "results": results}, f, indent=1)
    return status


if __name__ == "__main__":
    sys.exit(main())
