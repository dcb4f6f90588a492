#!/usr/bin/env python3
"""Deploy-time check on a GPU: for every job of a batch file, look the tuned winner up in the
cache (no daemon) and launch it on inputs made by PyTorch, then compare its outputs with
PyTorch in float64 on the same inputs: normwise error within the record's tolerance, all
finite. Two launchers, each checked on its own inputs:
  - Python: the `ktune` binding on torch CUDA tensors on the current stream (the error of
    PyTorch eager in the graph's own dtypes is printed beside it for scale; the cached kernel
    and PyTorch eager are timed with CUDA events, hot, median of 50 after 10 warm-up runs: a
    sanity figure, not the benchmark protocol of bench/);
  - C (with --deploy): the example program examples/deploy/deploy.c (libktune's runtime), fed
    the inputs through files (--io) and writing its outputs back.

    bench/deploy_check.py examples/batch.jsonl --cache DIR [--deploy PATH] [--json OUT.json]

Exit status 1 when any job has no cached kernel or fails a comparison.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

import numpy
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_graph import TorchGraph, normwise_error  # noqa: E402

import ktune  # noqa: E402  (client/python on PYTHONPATH, KTUNE_LIBRARY set)


def time_ms(fn, reps=50, warmup=10):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def check_python(line, base, args, seed):
    graph_path = os.path.join(base, line["graph"])
    shapes = line["shapes"]
    precision = line.get("precision", "exact")
    tg = TorchGraph.load(graph_path, shapes)
    kg = ktune.Graph(graph_path)
    rt = ktune.Runtime(args.cache)
    kern = rt.lookup(kg, shapes, precision=precision)
    info = kern.info
    xs = tg.random_inputs(seed=seed)
    inputs = {name: xs[name] for name in kern.inputs}  # by name (declared names)
    outs = kern(**inputs)
    if torch.is_tensor(outs):
        outs = [outs]
    torch.cuda.synchronize()
    ref = tg.run(xs, dtype=torch.float64)
    eager = tg.run(xs, dtype=None)
    row = {"launcher": "python", "graph": line["graph"], "shapes": shapes,
           "precision": precision, "match": kern.match, "family": info["family"], "schedule": info["schedule"],
           "tuned_ns": info["time_ns"], "tolerance": info["tolerance"], "outputs": {}}
    ok = True
    for name, out in zip(kern.outputs, outs):
        err = normwise_error(out, ref[name])
        err_eager = normwise_error(eager[name], ref[name])
        finite = bool(torch.isfinite(out).all().item())
        good = finite and err <= info["tolerance"]
        ok = ok and good
        row["outputs"][name] = {"err_vs_torch_fp64": err, "err_torch_eager": err_eager,
                                "finite": finite, "ok": good}
    row["ktune_ms"] = time_ms(lambda: kern(**inputs))
    row["torch_eager_ms"] = time_ms(lambda: tg.run(xs, dtype=None))
    row["ok"] = ok
    return row


def check_c(line, base, args, seed):
    graph_path = os.path.join(base, line["graph"])
    shapes = line["shapes"]
    precision = line.get("precision", "exact")
    tg = TorchGraph.load(graph_path, shapes)
    kg = ktune.Graph(graph_path)
    tolerance = ktune.Runtime(args.cache).lookup(kg, shapes, precision=precision).info["tolerance"]
    xs = tg.random_inputs(seed=seed)
    ref = tg.run(xs, dtype=torch.float64)
    with tempfile.TemporaryDirectory() as io:
        for i, name in enumerate(kg.inputs):  # declared order, as deploy.c reads in<i>.bin
            xs[name].contiguous().cpu().view(torch.uint8).numpy().tofile(f"{io}/in{i}.bin")
        cmd = [args.deploy, "--cache", args.cache, "--graph", graph_path, "--precision",
               precision, "--shape", ",".join(f"{k}={v}" for k, v in shapes.items()),
               "--io", io, "--reps", "20"]
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            raise RuntimeError(" ".join((run.stderr or run.stdout).strip().splitlines()[-1:]))
        row = {"launcher": "c", "graph": line["graph"], "shapes": shapes,
               "precision": precision, "deploy_stdout": run.stdout.strip().splitlines(),
               "outputs": {}}
        m = re.search(r"time:\s+([0-9.]+) us", run.stdout)
        row["deploy_us"] = float(m.group(1)) if m else None
        ok = True
        eager = tg.run(xs, dtype=None)  # gives each output's dtype (graph promotion rules)
        for i, name in enumerate(kg.outputs):
            want = ref[name]
            raw = numpy.fromfile(f"{io}/out{i}.bin", dtype=numpy.uint8)
            out = torch.from_numpy(raw).view(eager[name].dtype).reshape(want.shape)
            err = normwise_error(out, want.cpu())
            finite = bool(torch.isfinite(out).all().item())
            good = finite and err <= tolerance
            ok = ok and good
            row["outputs"][name] = {"err_vs_torch_fp64": err, "finite": finite, "ok": good}
        row["tolerance"] = tolerance
        row["ok"] = ok
        return row


def report(row):
    if "error" in row:
        print(f"{row['launcher']:6} {row['graph']:24} {str(row['shapes']):36} FAIL {row['error']}")
        return
    errs = ", ".join(f"{k} err {v['err_vs_torch_fp64']:.2e}" for k, v in row["outputs"].items())
    if row["launcher"] == "python":
        times = f"ktune {row['ktune_ms']*1e3:9.1f} us  eager {row['torch_eager_ms']*1e3:9.1f} us"
    else:
        times = f"deploy {row['deploy_us']} us/launch"
    print(f"{row['launcher']:6} {row['graph']:24} {str(row['shapes']):36} "
          f"{'ok  ' if row['ok'] else 'FAIL'} {times}  {errs} (tol {row['tolerance']:.0e})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("batch")
    ap.add_argument("--cache", default=os.environ.get("KTUNE_CACHE"))
    ap.add_argument("--deploy", help="examples/deploy/deploy: also check the C launcher")
    ap.add_argument("--json")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    base = os.path.dirname(os.path.abspath(args.batch))
    checks = [("python", check_python)] + ([("c", check_c)] if args.deploy else [])
    rows = []
    with open(args.batch) as f:
        lines = [json.loads(t) for t in f if t.strip()]
    for launcher, check in checks:
        for i, line in enumerate(lines, 1):
            try:
                row = check(line, base, args, args.seed + i)
            except Exception as e:  # report it and go on with the next job
                row = {"launcher": launcher, "graph": line["graph"], "shapes": line["shapes"],
                       "ok": False, "error": f"{type(e).__name__}: {e}"}
            rows.append(row)
            report(row)
    failed = sum(not r["ok"] for r in rows)
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "protocol": "inputs from PyTorch; outputs vs PyTorch float64 on the same inputs, "
                          "normwise error <= the record's tolerance and all finite; python times: "
                          "CUDA events, hot, median of 50 after 10; C times: deploy's events over "
                          "20 back-to-back launches",
              "checks": rows, "failed": failed}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    print(f"{len(rows) - failed}/{len(rows)} checks passed "
          f"({len(lines)} jobs x {len(checks)} launcher{'s' if len(checks) > 1 else ''})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
