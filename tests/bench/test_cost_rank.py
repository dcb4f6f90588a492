#!/usr/bin/env python3
"""bench/cost_rank.py: Spearman's rho on known orders (ties averaged), then end to end on a cache
the fake worker tuned (`ktune tune --local`): every verified trial of the softmax example is
joined with its estimate by candidate id, so the case is ranked over real trial-log entries.
The fake worker's times are not the GPU's, so the value of rho is not judged here, only that
the join and the ranking happened over what the trial log holds."""
import json
import os
import subprocess
import sys
import tempfile

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(root, "bench"))
import cost_rank  # noqa: E402


def check(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)


check(cost_rank.ranks([30, 10, 20, 10]) == [4.0, 1.5, 3.0, 1.5], "ranks with a tie averaged")
check(abs(cost_rank.spearman([1, 2, 3, 4], [10, 20, 30, 40]) - 1) < 1e-12, "same order: 1")
check(abs(cost_rank.spearman([1, 2, 3, 4], [4, 3, 2, 1]) + 1) < 1e-12, "reversed: -1")
check(cost_rank.spearman([1, 1, 1], [1, 2, 3]) is None, "no spread: None")
# a classic example: d = (0, 1, -1, 0), rho = 1 - 6*2 / (4*15) = 0.8
check(abs(cost_rank.spearman([1, 2, 3, 4], [1, 3, 2, 4]) - 0.8) < 1e-12, "one swap: 0.8")

ktune, worker = os.environ.get("KTUNE_BIN"), os.environ.get("KTUNE_FAKE_WORKER")
if not ktune or not worker:
    print("end-to-end part skipped: KTUNE_BIN and KTUNE_FAKE_WORKER are set by meson")
    sys.exit(0)
graph = os.path.join(root, "examples", "softmax.json")
with tempfile.TemporaryDirectory() as tmp:
    cache = os.path.join(tmp, "cache")
    p = subprocess.run([ktune, "tune", graph, "--shape", "M=64,N=128", "--local", "--budget",
                        "4", "--worker", worker, "--cache", cache, "--quiet"],
                       capture_output=True, text=True)
    check(p.returncode == 0, f"tune --local: {p.returncode} {p.stderr}")
    cases = os.path.join(tmp, "cases.jsonl")
    with open(cases, "w") as f:
        f.write(json.dumps({"graph": graph, "shapes": {"M": 64, "N": 128}, "name": "softmax",
                            "source": "examples/softmax.json"}) + "\n")
        f.write(json.dumps({"graph": graph, "shapes": {"M": 65, "N": 128}, "name": "untuned",
                            "source": "examples/softmax.json"}) + "\n")
    out = os.path.join(tmp, "rank.json")
    p = subprocess.run([sys.executable, os.path.join(root, "bench", "cost_rank.py"), "--cache",
                        cache, "--cases", cases, "--ktune", ktune, "--out", out],
                       capture_output=True, text=True)
    check(p.returncode == 0, f"cost_rank: {p.returncode} {p.stderr}")
    with open(out) as f:
        res = json.load(f)
    first, second = res["cases"]
    trials = json.loads(subprocess.run(
        [ktune, "trials", graph, "--shape", "M=64,N=128", "--cache", cache, "--json"],
        capture_output=True, text=True, check=True).stdout)["trials"]
    ok = [t for t in trials if t["status"] == "ok" and t["time_ns"] > 0 and
          not t["detail"].startswith("assembled")]
    check(first["rho"] is not None and -1 <= first["rho"] <= 1, f"softmax ranked: {first}")
    check(3 <= first["pairs"] <= len(ok), f"pairs {first['pairs']} of {len(ok)} verified trials")
    check(first["top1_regret"] >= 1 and first["gpu"] == "NVIDIA H100 80GB HBM3", str(first))
    check(second["rho"] is None and second["note"].startswith("no trials"), str(second))
    check(res["cases_ranked"] == 1 and res["median_rho"] == first["rho"], str(res))
    check("1 of 2 cases ranked" in p.stdout, p.stdout)
print("ok")
