#!/usr/bin/env python3
"""How well the cost model ranks what the GPU measured: per case of a tuned batch, the Spearman
rank correlation between the model's estimates and the measured times (issue 22: the ranking
must carry to shapes it was not fitted on).

    bench/cost_rank.py --cache DIR --cases CASES.jsonl [--only a,b] [--ktune PATH]
                       [--out COST_RANK.json] [--json]

For every case, from the cache alone (no GPU, no daemon): `ktune trials --json` gives the
candidates the search measured and verified (status ok) with their median times on the cache's
GPU, `ktune space --list --json` the cost model's estimate of each (joined by candidate id, the
trial log's name for a candidate). Within each kernel group of the graph, the candidates with both
are ranked by estimate and by time; per case:

  rho           Spearman's rank correlation over the groups' pairs, the groups weighted by their
                candidates (1: the model orders the measured candidates as the GPU did; a
                group of fewer than 3 candidates is left out)
  top1_regret   per group, the measured time of the model's first choice among the measured
                ones over the fastest measured; the case's worst (1.0: the model's pick won)
  pairs         candidates ranked

Note what this can and cannot say: the search measures the candidates the model ranks high (and
a spread over the families), so the correlation is over a range the model already chose; a
model that is wrong about what it never lets the GPU see shows as a low regret and a weak rho
only where that range is wide. Cases with no trials in the cache are listed as such.

Writes --out (default: print only) as {"cases": [{name, rho, top1_regret, pairs, groups,
gpu, note}], "median_rho", "cases_ranked"}. Exit status 0, or 2 for bad arguments."""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cli  # noqa: E402  (bench/cli.py: the ktune CLI)
from harness import CasesError, load_cases  # noqa: E402  (no torch needed for the cases)

MIN_GROUP = 3  # candidates a group needs to be ranked


def fail(msg):
    print(f"bench/cost_rank.py: {msg}", file=sys.stderr)
    sys.exit(2)


def ranks(values):
    """Ranks 1..n of values, ties given their average rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(xs, ys):
    """Spearman's rho of two equal-length lists (Pearson's r of their ranks); None when either
    has no spread."""
    rx, ry = ranks(xs), ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    return sxy / (sxx * syy) ** 0.5 if sxx > 0 and syy > 0 else None


def ktune_json(cmd):
    """The JSON a ktune command printed, or (None, its first line of error)."""
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        lines = (p.stderr or p.stdout).strip().splitlines()
        return None, lines[0] if lines else f"exit status {p.returncode}"
    try:
        return json.loads(p.stdout), None
    except ValueError:
        return None, "printed no JSON"


def rank_case(ktune, cache, c):
    """The case's record (see the module docstring)."""
    rec = {"name": c["name"], "rho": None, "top1_regret": None, "pairs": 0, "groups": 0,
           "gpu": None, "note": ""}
    bind = ",".join(f"{k}={v}" for k, v in c.get("shapes", {}).items())
    args = [c["graph"]] + (["--shape", bind] if bind else []) + \
        ["--precision", c.get("precision", "exact"), "--json"]
    tol = ["--tolerance", str(c["tolerance"])] if c.get("tolerance") else []
    trials, err = ktune_json([ktune, "trials"] + args + tol + ["--cache", cache])
    if trials is None:
        rec["note"] = f"no trials: {err}"
        return rec
    space, err = ktune_json([ktune, "space"] + args + ["--list"])
    if space is None:
        rec["note"] = f"ktune space: {err}"
        return rec
    timed = [t for t in trials.get("trials", []) if t["status"] == "ok" and t["time_ns"] > 0]
    if not timed:
        rec["note"] = "no verified trial"
        return rec
    gpu = timed[0]["gpu"]["name"]  # one GPU's times: another's do not rank alike
    rec["gpu"] = gpu
    est = {e["id"]: (e["group"], e["est_us"]) for e in space.get("list", [])}
    by_group = {}
    for t in timed:
        if t["gpu"]["name"] == gpu and t["candidate"] in est:
            group, e = est[t["candidate"]]
            by_group.setdefault(group, []).append((e, t["time_ns"]))
    weighted, pairs, regret = 0.0, 0, None
    for group, xs in sorted(by_group.items()):
        if len(xs) < MIN_GROUP:
            continue
        rho = spearman([e for e, _ in xs], [t for _, t in xs])
        if rho is None:
            continue
        weighted += rho * len(xs)
        pairs += len(xs)
        rec["groups"] += 1
        pick = min(xs)[1]  # the measured time of the lowest estimate
        r = pick / min(t for _, t in xs)
        regret = r if regret is None else max(regret, r)
    if pairs == 0:
        rec["note"] = f"no group with {MIN_GROUP} or more ranked candidates"
        return rec
    rec.update(rho=weighted / pairs, pairs=pairs, top1_regret=regret)
    return rec


def main():
    ap = argparse.ArgumentParser(prog="bench/cost_rank.py",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", required=True, help="the cache the batch tuned into")
    ap.add_argument("--cases", required=True, help="the batch's cases file")
    ap.add_argument("--only", default="", help="cases by name, comma-separated")
    ap.add_argument("--ktune", help="the ktune CLI (default $KTUNE_BIN, dist-device, build)")
    ap.add_argument("--out", help="write the result JSON here")
    ap.add_argument("--json", action="store_true", help="print the result JSON")
    a = ap.parse_args()
    ktune = a.ktune or cli.ktune_cli(HERE)
    if not ktune:
        fail("no ktune CLI: pass --ktune, set KTUNE_BIN, or build")
    if not os.path.isdir(a.cache):
        fail(f"--cache {a.cache}: no such directory")
    only = {x.strip() for x in a.only.split(",") if x.strip()} or None
    try:
        cases = load_cases(a.cases, only=only)
    except CasesError as e:
        fail(str(e))
    recs = []
    for c in cases:
        rec = rank_case(ktune, a.cache, c)
        recs.append(rec)
        if a.json:
            continue
        if rec["rho"] is None:
            print(f"{rec['name']:48s} -        {rec['note']}")
        else:
            print(f"{rec['name']:48s} rho {rec['rho']:+.2f}  top-1 regret "
                  f"{rec['top1_regret']:.2f}x  ({rec['pairs']} candidates, {rec['groups']} "
                  f"group{'s' if rec['groups'] != 1 else ''})")
    rhos = [r["rho"] for r in recs if r["rho"] is not None]
    result = {"cases": recs, "cases_ranked": len(rhos),
              "median_rho": statistics.median(rhos) if rhos else None}
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)
    if a.json:
        print(json.dumps(result, indent=1))
    else:
        print(f"{len(rhos)} of {len(recs)} cases ranked" +
              (f", median rho {result['median_rho']:+.2f}" if rhos else ""))


if __name__ == "__main__":
    main()
