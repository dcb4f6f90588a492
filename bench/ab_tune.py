#!/usr/bin/env python3
"""A/B of two ktune builds on the same tuning jobs, in one run on one GPU.

Each case of bench/cases/cases.jsonl named on the command line is tuned twice with
`ktune tune --local --json`, once per build, each into a fresh cache, the order of the two
alternating from case to case. Prints, per case, the best time each build found (CUPTI, cold,
finalists re-timed: docs/evaluation.md), its trials and job seconds, and after/before; then the
geometric mean of after/before. The JSON results and the jobs' stderr go to --out.

    cd bench/cases && python3 ../ab_tune.py --before KTUNE_A --after KTUNE_B --out DIR CASE...

Both builds use the worker KTUNE_WORKER names (the search runs in ktune, the GPU work in the
worker)."""
import argparse, json, math, os, subprocess, sys, tempfile, time


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="the ktune binary of the baseline")
    ap.add_argument("--after", required=True, help="the ktune binary under test")
    ap.add_argument("--out", required=True, help="directory for ab-{before,after}.jsonl, ab.log")
    ap.add_argument("--budget", default="26s", help="each job's budget (default 26s, the bench's)")
    ap.add_argument("--cases", default="cases.jsonl", help="the case file (default cases.jsonl)")
    ap.add_argument("names", nargs="+", help="case names")
    a = ap.parse_args()
    cases = {}
    for line in open(a.cases):
        if line.strip() and not line.startswith("#"):
            c = json.loads(line)
            cases[c["name"]] = c
    unknown = [n for n in a.names if n not in cases]
    if unknown:
        sys.exit(f"ab_tune: {a.cases}: no case named {', '.join(unknown)}")
    os.makedirs(a.out, exist_ok=True)
    ratios, rows = [], []
    for i, n in enumerate(a.names):
        c = cases[n]
        shapes = ",".join(f"{k}={v}" for k, v in c["shapes"].items())
        res = {}
        for side in (("before", "after") if i % 2 == 0 else ("after", "before")):
            cmd = [getattr(a, side), "tune", c["graph"], "--shape", shapes, "--precision",
                   c["precision"], "--local", "--budget", a.budget, "--cache", tempfile.mkdtemp(),
                   "--json"]
            t0 = time.time()
            r = subprocess.run(cmd, capture_output=True, text=True)
            out = json.loads(r.stdout) if r.returncode == 0 else None
            with open(os.path.join(a.out, f"ab-{side}.jsonl"), "a") as f:
                f.write(json.dumps({"case": n, "cmd": " ".join(cmd), "rc": r.returncode,
                                    "result": out if out else r.stdout}) + "\n")
            with open(os.path.join(a.out, "ab.log"), "a") as f:
                f.write(f"== {n} {side}: {' '.join(cmd)} (rc {r.returncode}, "
                        f"{time.time() - t0:.1f} s)\n{r.stderr}")
            res[side] = out
        b, x = res["before"], res["after"]
        if not (b and x and b.get("winner") and x.get("winner")):
            row = f"{n:40s} failed (see ab.log)"
        else:
            ratio = x["winner"]["time_ns"] / b["winner"]["time_ns"]
            ratios.append(ratio)
            row = (f"{n:40s} before {b['winner']['time_ns'] / 1e3:9.2f} us {b['trials']:4d} tr "
                   f"{b['seconds']:5.1f} s | after {x['winner']['time_ns'] / 1e3:9.2f} us "
                   f"{x['trials']:4d} tr {x['seconds']:5.1f} s | after/before {ratio:.3f}")
        print(row, flush=True)
        rows.append(row)
    if ratios:
        gm = math.exp(sum(map(math.log, ratios)) / len(ratios))
        rows.append(f"geomean after/before over {len(ratios)} cases: {gm:.3f}")
        print(rows[-1])
    with open(os.path.join(a.out, "ab-summary.txt"), "w") as f:
        f.write("\n".join(rows) + "\n")
    return 0 if len(ratios) == len(a.names) else 1


if __name__ == "__main__":
    sys.exit(main())
