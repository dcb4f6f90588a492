#!/usr/bin/env python3
"""Deploy-time check on a GPU: for every job of a batch file, look the tuned winner up in the
cache through the Python binding (no daemon), launch it on torch CUDA tensors on the current
stream, and compare its output with PyTorch: the normwise error against PyTorch in float64
(the reference) must be within the record's tolerance, and the error of PyTorch eager in the
graph's own dtypes is printed beside it for scale. Also times the cached kernel and PyTorch
eager with CUDA events (hot, median of 50 after 10 warm-up runs: a sanity figure, not the
benchmark protocol of bench/).

    bench/deploy_check.py examples/batch.jsonl --cache DIR [--json OUT.json]

Exit status 1 when any job has no cached kernel or fails the comparison.
"""
import argparse
import json
import os
import statistics
import sys

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


def check_job(line, base, cache, seed):
    graph_path = os.path.join(base, line["graph"])
    shapes = line["shapes"]
    precision = line.get("precision", "exact")
    tg = TorchGraph.load(graph_path, shapes)
    kg = ktune.Graph(graph_path)
    rt = ktune.Runtime(cache)
    kern = rt.lookup(kg, shapes, precision=precision)
    info = kern.info
    xs = tg.random_inputs(seed=seed)
    inputs = [xs[name] for name in kg.inputs]
    outs = kern(*inputs)
    if torch.is_tensor(outs):
        outs = [outs]
    torch.cuda.synchronize()
    ref = tg.run(xs, dtype=torch.float64)
    eager = tg.run(xs, dtype=None)
    row = {"graph": line["graph"], "shapes": shapes, "precision": precision,
           "match": kern.match, "family": info["family"], "schedule": info["schedule"],
           "tuned_ns": info["time_ns"], "tolerance": info["tolerance"], "outputs": {}}
    ok = True
    for name, out in zip(kg.outputs, outs):
        err = normwise_error(out, ref[name])
        err_eager = normwise_error(eager[name], ref[name])
        finite = bool(torch.isfinite(out).all().item())
        good = finite and err <= info["tolerance"]
        ok = ok and good
        row["outputs"][name] = {"err_vs_torch_fp64": err, "err_torch_eager": err_eager,
                                "finite": finite, "ok": good}
    row["ktune_ms"] = time_ms(lambda: kern(*inputs))
    row["torch_eager_ms"] = time_ms(lambda: tg.run(xs, dtype=None))
    row["ok"] = ok
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("batch")
    ap.add_argument("--cache", default=os.environ.get("KTUNE_CACHE"))
    ap.add_argument("--json")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    base = os.path.dirname(os.path.abspath(args.batch))
    rows = []
    failed = 0
    with open(args.batch) as f:
        for i, text in enumerate(f, 1):
            if not text.strip():
                continue
            line = json.loads(text)
            try:
                row = check_job(line, base, args.cache, args.seed + i)
            except Exception as e:  # report and go on with the next job
                row = {"graph": line["graph"], "shapes": line["shapes"], "ok": False,
                       "error": f"{type(e).__name__}: {e}"}
            failed += not row["ok"]
            rows.append(row)
            if "error" in row:
                print(f"{row['graph']:24} {str(row['shapes']):36} FAIL {row['error']}")
                continue
            errs = ", ".join(f"{k} err {v['err_vs_torch_fp64']:.2e} (eager {v['err_torch_eager']:.2e})"
                             for k, v in row["outputs"].items())
            print(f"{row['graph']:24} {str(row['shapes']):36} {'ok  ' if row['ok'] else 'FAIL'} "
                  f"{row['match']:10} {row['family']:9} ktune {row['ktune_ms']*1e3:9.1f} us  "
                  f"eager {row['torch_eager_ms']*1e3:9.1f} us  {errs}")
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "protocol": "outputs vs PyTorch float64 on the same inputs, normwise error <= the "
                          "record's tolerance; times: CUDA events, hot, median of 50 after 10",
              "jobs": rows, "failed": failed}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    print(f"{len(rows) - failed}/{len(rows)} jobs served and matching PyTorch")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
