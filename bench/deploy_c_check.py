#!/usr/bin/env python3
"""The C side of the deploy-time check: for every job of a batch file, PyTorch makes the inputs,
the C example program (examples/deploy/deploy.c, libktune's runtime, no daemon) looks the tuned
kernel up, launches it on them and writes its outputs, and this script compares those outputs
with PyTorch in float64 (normwise error within the record's tolerance, all finite).

    bench/deploy_c_check.py examples/batch.jsonl --cache DIR --deploy build/examples/deploy/deploy
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_graph import TorchGraph, normwise_error  # noqa: E402

import ktune  # noqa: E402


def check_job(line, base, args, seed):
    graph_path = os.path.join(base, line["graph"])
    shapes = line["shapes"]
    precision = line.get("precision", "exact")
    tg = TorchGraph.load(graph_path, shapes)
    kg = ktune.Graph(graph_path)
    tolerance = ktune.Runtime(args.cache).lookup(kg, shapes, precision=precision).info["tolerance"]
    xs = tg.random_inputs(seed=seed)
    ref = tg.run(xs, dtype=torch.float64)
    with tempfile.TemporaryDirectory() as io:
        for i, name in enumerate(kg.inputs):
            xs[name].contiguous().cpu().view(torch.uint8).numpy().tofile(f"{io}/in{i}.bin")
        cmd = [args.deploy, "--cache", args.cache, "--graph", graph_path, "--precision",
               precision, "--shape", ",".join(f"{k}={v}" for k, v in shapes.items()),
               "--io", io, "--reps", "20"]
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            return {"graph": line["graph"], "shapes": shapes, "ok": False,
                    "error": (run.stderr or run.stdout).strip().splitlines()[-1:]}
        row = {"graph": line["graph"], "shapes": shapes, "precision": precision,
               "deploy_stdout": run.stdout.strip().splitlines(), "outputs": {}}
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("batch")
    ap.add_argument("--cache", default=os.environ.get("KTUNE_CACHE"))
    ap.add_argument("--deploy", required=True)
    ap.add_argument("--json")
    ap.add_argument("--seed", type=int, default=4321)
    args = ap.parse_args()
    base = os.path.dirname(os.path.abspath(args.batch))
    rows, failed = [], 0
    with open(args.batch) as f:
        for i, text in enumerate(f, 1):
            if not text.strip():
                continue
            line = json.loads(text)
            try:
                row = check_job(line, base, args, args.seed + i)
            except Exception as e:
                row = {"graph": line["graph"], "shapes": line["shapes"], "ok": False,
                       "error": f"{type(e).__name__}: {e}"}
            failed += not row["ok"]
            rows.append(row)
            if "error" in row:
                print(f"C  {row['graph']:24} {str(row['shapes']):36} FAIL {row['error']}")
                continue
            errs = ", ".join(f"{k} err {v['err_vs_torch_fp64']:.2e}" for k, v in row["outputs"].items())
            print(f"C  {row['graph']:24} {str(row['shapes']):36} {'ok  ' if row['ok'] else 'FAIL'} "
                  f"deploy {row['deploy_us']} us/launch  {errs} (tol {row['tolerance']:.0e})")
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "protocol": "inputs from PyTorch, kernel launched by examples/deploy (C, libktune), "
                          "outputs vs PyTorch float64: normwise error <= the record's tolerance",
              "jobs": rows, "failed": failed}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    print(f"C: {len(rows) - failed}/{len(rows)} jobs served and matching PyTorch")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
