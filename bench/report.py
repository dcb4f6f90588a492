#!/usr/bin/env python3
"""Writes docs/BENCHMARKS.md and docs/benchmarks.png from a results file of bench/harness.py.

    bench/report.py bench/results/h100-DATE.json [--md docs/BENCHMARKS.md]
                    [--png docs/benchmarks.png] [--notes bench/notes.json]
    bench/report.py PART1.json PART2.json ... --merged bench/results/h100-DATE.json

Several results files (runs of some cases each, e.g. one per device call) are merged: their
cases in order (a case named twice: the later file's, in the first place), device, versions and protocol of the
first (the others must name the same GPU), the batches' wall times added; --merged writes the
merged results, which the report then names as its raw data.

The notes file (optional) explains the cases below 0.95x the best peer, or with no kernel:
{"case name": {"why": "...", "fix": "..."}}; a case without a note gets a TODO line. Needs only
the standard library and matplotlib (no GPU, no torch).

Rates (the "Throughput" section): a GEMM case's TFLOP/s, 2 * M * N * K per matmul over the
median time; a decode case's weight bytes over the median time, and its fraction of the copy
bandwidth the same run measured (each case carries its run's, so merged parts keep theirs). The
counts come from the case's "work" (bench/harness.py records it); for a results file from before
that, from the case's graph file when it is still there (bench/work.py), else no rate.
"""
import argparse
import re
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from work import case_work  # noqa: E402  (bench/work.py: standard library only)

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
PEERS = (("eager", "eager"), ("compile", "compile"), ("max_autotune", "max-autotune"))
PEER_NAMES = dict(PEERS)
TARGET_GEOMEAN, TARGET_FLOOR = 1.2, 0.95


class ReportError(Exception):
    pass


def read_json(path):
    """The JSON document at path; ReportError naming the file when it cannot be read."""
    try:
        with open(path) as f:
            return json.load(f)
    except OSError as e:
        raise ReportError(f"{path}: {e.strerror}") from None
    except ValueError as e:
        raise ReportError(f"{path}: not JSON: {e}") from None


def load(path):
    r = read_json(path)
    if not isinstance(r, dict) or not isinstance(r.get("cases"), list):
        raise ReportError(f"{path}: not a bench/harness.py results file (no 'cases' list)")
    for i, c in enumerate(r["cases"]):
        if not isinstance(c, dict) or "name" not in c or "status" not in c:
            raise ReportError(f"{path}: case {i} lacks 'name' or 'status'")
    return r


def expand(r, path):
    """An already-merged results file stands for its parts, each with the cases it still owns
    (so merging it again keeps every part's commit, date and copy bandwidth)."""
    if not r.get("parts"):
        return [(r, path)]
    by_name = {c["name"]: c for c in r["cases"]}
    out = []
    for p in r["parts"]:
        pr = {k: v for k, v in r.items() if k != "parts"}
        pr.update(date=p.get("date"), command=p.get("command"),
                  copy_bandwidth=p.get("copy_bandwidth"), batch=p.get("batch"))
        pr["versions"] = dict(r.get("versions") or {}, commit=p.get("commit"))
        pr["cases"] = [by_name[n] for n in p.get("cases") or [] if n in by_name]
        out.append((pr, p.get("file") or path))
    return out


def merge(parts, paths):
    """One results dict from several (see the module docstring)."""
    flat = [x for r, p in zip(parts, paths) for x in expand(r, p)]
    parts, paths = [r for r, _ in flat], [p for _, p in flat]
    if len(parts) == 1:
        return parts[0]
    first = parts[0]
    dev = (first.get("device") or {}).get("name")
    for r, p in zip(parts[1:], paths[1:]):
        if (r.get("device") or {}).get("name") != dev:
            raise ReportError(f"{p}: measured on {(r.get('device') or {}).get('name')}, "
                              f"{paths[0]} on {dev}: not one benchmark")
        if any((r.get("protocol") or {}).get(k) != (first.get("protocol") or {}).get(k)
               for k in ("reps", "scrub")):
            raise ReportError(f"{p}: another protocol than {paths[0]}")
    cases, owner = {}, {}
    for k, r in enumerate(parts):
        for c in r["cases"]:
            cases[c["name"]] = c  # a case measured again keeps its place
            owner[c["name"]] = k
    walls = [(r.get("batch") or {}).get("wall_s") for r in parts]
    out = dict(first)
    out["cases"] = list(cases.values())
    out["parts"] = [{"file": os.path.relpath(p), "date": r.get("date"),
                     "commit": (r.get("versions") or {}).get("commit"),
                     "command": r.get("command"),
                     "copy_bandwidth": r.get("copy_bandwidth"),
                     # the cases this part's figures stand for; those a later part measured
                     # again are listed as superseded
                     "cases": [c["name"] for c in r["cases"] if owner[c["name"]] == k],
                     "superseded": [c["name"] for c in r["cases"] if owner[c["name"]] != k],
                     "batch": r.get("batch")} for k, (r, p) in enumerate(zip(parts, paths))]
    out["command"] = " ; ".join(str(r.get("command")) for r in parts)
    copies = [(r.get("copy_bandwidth") or {}).get("tb_s") for r in parts]
    out["copy_bandwidth"] = {"tb_s_by_part": copies,
                             "note": "each part's own; a case's rate uses its part's"}
    out["batch"] = {"wall_s": sum(walls) if all(w is not None for w in walls) else None,
                    "budget_total_s": sum((r.get("batch") or {}).get("budget_total_s") or 0
                                          for r in parts) or None,
                    "joined": sum((r.get("batch") or {}).get("joined") or 0 for r in parts),
                    "note": "merged from several runs; see parts"}
    sp = [over_best(c) for c in out["cases"] if over_best(c)]
    out["summary"] = {"cases": len(out["cases"]),
                      "ok": sum(c["status"] == "ok" for c in out["cases"]),
                      "not_ok": [{"name": c["name"], "status": c["status"]}
                                 for c in out["cases"] if c["status"] != "ok"],
                      "geomean_over_best_peer": geomean(sp), "geomean_cases": len(sp),
                      "below_0_95": [c["name"] for c in out["cases"] if over_best(c) is not None
                                     and over_best(c) < TARGET_FLOOR]}
    return out


def fmt_us(x):
    if x is None:
        return "-"
    return f"{x:.1f}" if x < 1000 else f"{x:,.0f}"


def fmt_time(who, status=None):
    t = (who or {}).get("time")
    if not t:
        if status in ("kernel missing", "case failed"):
            return status
        return "fails" if (who or {}).get("error") else "-"
    return f"{fmt_us(t['median_us'])} [{fmt_us(t['p10_us'])}-{fmt_us(t['p90_us'])}]"


def fmt_x(x):
    return "-" if x is None else f"{x:.2f}x"


def fmt_err(e):
    return "-" if e is None else f"{e:.1e}"


def max_err(who):
    errs = (who or {}).get("errors")
    if not errs:
        return None
    return max(v["err"] if v.get("finite", True) else math.inf for v in errs.values())


def shapes_text(s):
    return ",".join(f"{k}={v}" for k, v in (s or {}).items()) or "-"


def md_cell(s):
    return str(s).replace("|", "\\|").replace("\n", " ")


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def over_best(c):
    sp = c.get("speedup") or {}
    return sp.get("over_best_peer")


def host_text(c):
    def one(who):
        h = ((c.get(who) or {}).get("time") or {}).get("host_us")
        return "-" if h is None else f"{h:.0f}"
    return " / ".join(one(w) for w in ("ktune", "eager", "compile", "max_autotune"))


def failures_text(t):
    f = t.get("failures")
    if f is None:
        return "n/r"
    if not f:
        return "0"
    return ", ".join(f"{k} {v}" for k, v in sorted(f.items()))


def compile_measure_text(t):
    if t.get("compile_s") is None or t.get("measure_s") is None:
        return "n/r"
    return f"{t['compile_s']:.0f} / {t['measure_s']:.0f}"


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(md_cell(x) for x in row) + " |" for row in rows]
    return out


def best_range(c):
    sp = c.get("speedup") or {}
    return sp.get(str(sp.get("best_peer")) + "_range")


def reproduction(r, rerun, rerun_rel):
    """The "Reproduction" section: each case's speed-up over the best peer in this run (with
    the band its own p10/p90 allow) against an independent rerun of the whole suite (fresh
    cache: tuned again, timed again)."""
    again = {c["name"]: c for c in rerun["cases"]}
    rows, inside, n, worst = [], 0, 0, (0.0, None)
    for c in r["cases"]:
        o = again.get(c["name"])
        a, b = over_best(c), over_best(o) if o else None
        band = best_range(c)
        if a is None or b is None:
            rows.append([c["name"], fmt_x(a), "-", fmt_x(b), "-", "-"])
            continue
        n += 1
        ok = band is not None and band[0] <= b <= band[1]
        inside += ok
        dev = b / a - 1
        if abs(dev) > abs(worst[0]):
            worst = (dev, c["name"])
        kt_a = ((c.get("ktune") or {}).get("time") or {}).get("median_us")
        kt_b = ((o.get("ktune") or {}).get("time") or {}).get("median_us")
        rows.append([c["name"], fmt_x(a),
                     f"{band[0]:.2f}-{band[1]:.2f}" if band else "-", fmt_x(b),
                     f"{dev * 100:+.1f}%" + ("" if ok else " (outside)"),
                     f"{fmt_us(kt_a)} / {fmt_us(kt_b)}"])
    ga = geomean([over_best(c) for c in r["cases"] if over_best(c)])
    gb = geomean([over_best(c) for c in rerun["cases"] if over_best(c)])
    L = ["", "## Reproduction", "",
         f"The whole suite run again from scratch (`{rerun_rel}`: a fresh cache, so every case "
         f"was tuned again, then timed again, same protocol, {rerun.get('date', '?')}). "
         f"Geometric mean over the best peer: {fmt_x(ga)} here, {fmt_x(gb)} in the rerun. "
         f"{inside} of {n} cases fall inside the noise band this run reports for them (the "
         "best peer's p10 / ktune's p90 to its p90 / ktune's p10); the largest change is "
         f"{worst[0] * 100:+.1f}% ({worst[1]}). Outside the band, either the tuner picked a "
         "different kernel in the rerun (tuning is budgeted and its screening measurements are "
         "noisy) or a peer's own choice moved (torch.compile's max-autotune picks its kernel "
         "anew in every process).", ""]
    L += table(["case", "x best", "noise band", "x best (rerun)", "change", "ktune us (run / rerun)"],
               rows)
    return L


DECODE_TARGET = 0.85  # issue 19: decode at >= 85% of the copy bandwidth measured in the same run


def work_of(c):
    """A case's work (bench/work.py's dict), from its record or, for a results file from before
    the harness recorded it, from its graph file (None when neither has it)."""
    w = c.get("work")
    if isinstance(w, dict) and "kind" in w:
        return w
    g = c.get("graph")
    for path in ([g, os.path.join(ROOT, g)] if isinstance(g, str) else []):
        try:
            with open(path) as f:
                return case_work(json.load(f), c.get("shapes") or {})
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return None


def rate(c, who):
    """(value, text) of a contender's rate in a GEMM or decode case; (None, "") otherwise. The
    value: TFLOP/s, or for a decode case the fraction of the copy bandwidth (or TB/s without
    one)."""
    w = work_of(c)
    t = ((c.get(who) or {}).get("time") or {}).get("median_us")
    if not w or not w.get("kind") or not t:
        return None, ""
    if w["kind"] == "decode":
        tb = w["weight_bytes"] / (t * 1e-6) / 1e12
        copy = c.get("copy_tb_s")
        if copy:
            return tb / copy, f"{tb:.2f} TB/s, {tb / copy:.0%} of copy"
        return tb, f"{tb:.2f} TB/s"
    tf = w["flops"] / (t * 1e-6) / 1e12
    return tf, f"{tf:.0f} TFLOP/s" if tf >= 10 else f"{tf:.2f} TFLOP/s"


def copy_text(r):
    """The copy bandwidth of a run, or of each merged part; None when none was measured."""
    parts = r.get("parts") or []
    vals = ([(p.get("copy_bandwidth") or {}).get("tb_s") for p in parts] if parts else
            [(r.get("copy_bandwidth") or {}).get("tb_s")])
    vals = [v for v in vals if v]
    if not vals:
        return None
    if len(vals) == 1:
        return f"{vals[0]:.2f} TB/s"
    return f"{min(vals):.2f}-{max(vals):.2f} TB/s over {len(vals)} runs"


def throughput(cases, r):
    """The "Throughput" section: every GEMM and decode case's time and rate per contender."""
    rated = [c for c in cases if (work_of(c) or {}).get("kind")]
    if not rated:
        return []
    copy = copy_text(r)
    L = ["", "## Throughput", "",
         "GEMM cases (the graph's matmuls, followed by bench/work.py): TFLOP/s = 2 * M * N * K "
         "per matmul / the median time. Decode cases (every matmul with a const weight and at "
         "most 64 token rows): the weights' bytes / the median time, TB/s, and its fraction of "
         "the copy bandwidth measured in the same run (a device-to-device copy of 1 GiB timed "
         "like the contenders, bytes read + written / its median time: "
         + (copy + ")." if copy else "not measured in this run)."), ""]
    rows = []
    for c in rated:
        w = work_of(c)
        what = (f"{w['weight_bytes'] / 1e6:,.1f} MB of weights, {w['tokens']} token rows"
                if w["kind"] == "decode" else f"{w['flops'] / 1e9:,.1f} GFLOP"
                if w["flops"] >= 1e9 else f"{w['flops'] / 1e6:,.1f} MFLOP")

        def cell(who):
            t = ((c.get(who) or {}).get("time") or {}).get("median_us")
            return f"{fmt_us(t)} us: {rate(c, who)[1]}" if t else fmt_time(c.get(who))
        rows.append([c["name"], w["kind"], what, cell("ktune"),
                     *[cell(p) for p, _ in PEERS]])
    L += table(["case", "kind", "work", "ktune", "eager", "compile", "max-autotune"], rows)
    return L


def rate_summary(cases):
    """Summary lines on the GEMM and decode cases (issue 19's targets)."""
    rated = [c for c in cases if (work_of(c) or {}).get("kind")]
    if not rated:
        return []
    own = [c for c in rated if (c.get("ktune") or {}).get("family")
           and c["ktune"]["family"] != "library"]
    L = [f"- GEMM and decode cases: {len(rated)}; ktune's kernel is its own (a family other "
         f"than library, i.e. cuBLASLt) in {len(own)}"
         + (": " + ", ".join(c["name"] for c in own) + "." if own else ".")]
    dec = [c for c in rated if work_of(c)["kind"] == "decode" and c.get("copy_tb_s")]
    if dec:
        fr = {c["name"]: rate(c, "ktune")[0] for c in dec}
        met = [n for n, v in fr.items() if v is not None and v >= DECODE_TARGET]
        L.append(f"- Decode cases at {DECODE_TARGET:.0%} of the copy bandwidth or more: "
                 f"{len(met)} of {len(dec)}"
                 + (" (" + ", ".join(f"{n} {fr[n]:.0%}" for n in met) + ")." if met else "."))
    return L


def commits_text(r):
    """", commit X", or for parts measured at different commits each commit with its cases."""
    by = {}
    for part in r.get("parts") or []:
        if part.get("commit") and part.get("cases"):  # a part wholly measured again: none
            by.setdefault(part["commit"], []).extend(part["cases"])
    if len(by) > 1:
        return ", commits " + "; ".join(f"{k} ({len(v)} cases: {', '.join(v)})"
                                        for k, v in by.items())
    commit = (r.get("versions") or {}).get("commit")
    return f", commit {commit}" if commit else ""


def render_md(r, png_rel, notes, results_rel, rerun=None, rerun_rel=None):
    cases = r["cases"]
    sp = [over_best(c) for c in cases if over_best(c)]
    gm = geomean(sp)
    below = [c for c in cases if over_best(c) is not None and over_best(c) < TARGET_FLOOR]
    not_ok = [c for c in cases if c["status"] != "ok"]
    v = r.get("versions") or {}
    dev = r.get("device") or {}
    prot = r.get("protocol") or {}
    batch = r.get("batch") or {}
    L = ["# Benchmarks: ktune against PyTorch", "",
         "<!-- Generated by bench/report.py from " + results_rel + "; edit that script or "
         "bench/notes.json, not this file. -->", ""]
    L += [f"Measured {r.get('date', '?')} on **{dev.get('name', '?')}** "
          f"(sm {dev.get('capability', '?')}, {dev.get('sm_count', '?')} SMs), driver "
          f"{v.get('driver', '?')}; PyTorch {v.get('torch', '?')} (CUDA {v.get('torch_cuda', '?')}, "
          f"cuDNN {v.get('cudnn', '?')}), Triton {v.get('triton', '?')}, libktune "
          f"{v.get('libktune', '?')}{commits_text(r)}. "
          f"Raw data: `{results_rel}`.", ""]
    L += ["## Summary", ""]
    L.append(f"- Cases: {len(cases)}; ktune kernel cached, launched and within tolerance: "
             f"{sum(c['status'] == 'ok' for c in cases)}.")
    if gm is not None:
        L.append(f"- Geometric-mean speed-up of ktune over the best PyTorch peer (per case, the "
                 f"fastest of eager, torch.compile and max-autotune): **{gm:.2f}x** over "
                 f"{len(sp)} case{'s' if len(sp) != 1 else ''} (target {TARGET_GEOMEAN}x: "
                 f"{'met' if gm >= TARGET_GEOMEAN else 'not met'})"
                 + (f"; the {len(cases) - len(sp)} case(s) without a ktune time are not in it, "
                    "see below." if len(sp) < len(cases) else "."))
    else:
        L.append("- No case has a ktune time: no geometric mean.")
    L.append(f"- Cases below {TARGET_FLOOR}x the best peer: {len(below)}"
             + (" (" + ", ".join(c["name"] for c in below) + ")." if below else "."))
    conv = [c for c in cases if "conv" in c["name"].lower()]
    for c in conv:
        x = (c.get("speedup") or {}).get("eager")
        L.append(f"- {c['name']} ({c['precision']}): {fmt_x(x)} PyTorch eager.")
    copy = copy_text(r)
    if copy:
        L.append(f"- Copy bandwidth (a device-to-device copy of 1 GiB, bytes read + written / "
                 f"its median time), measured in the same run: {copy}.")
    L += rate_summary(cases)
    if batch.get("wall_s") is not None or batch.get("budget_total_s") is not None:
        L.append(f"- Tuning: `ktune batch --budget-total {batch.get('budget_total_s')}` took "
                 f"{batch['wall_s']:.0f} s of wall time for the whole suite."
                 if batch.get("wall_s") is not None else
                 f"- Tuning: `ktune batch --budget-total {batch.get('budget_total_s')}`.")
    if batch.get("joined"):
        L.append(f"- {batch['joined']} of the batch's jobs joined a finished twin in the cache "
                 "(a rerun): their tuning cost below is the original job's.")
    L += ["", f"![ktune's speed-up over the best PyTorch peer per case]({png_rel})", ""]

    L += ["## Cases", ""]
    L += table(["case", "group", "shapes", "precision", "source"],
               [[c["name"], c.get("group", "-"), shapes_text(c.get("shapes")),
                 c.get("precision", "-"), c.get("source", "-")] for c in cases])
    L += ["", "## Times and speed-ups", "",
          "Times in microseconds: median [p10-p90]. Speed-up = the peer's median / ktune's "
          "median (above 1: ktune is faster); *x best* is over the fastest peer, named, with "
          "the range the noise allows (the peer's p10 / ktune's p90 to the peer's p90 / "
          "ktune's p10). *host us*: the host's time to enqueue one call (median; ktune / "
          "eager / compile / max-autotune), not in the GPU times.", ""]
    rows = []
    for c in cases:
        x = c.get("speedup") or {}
        best = "-"
        if x.get("over_best_peer"):
            rng = x.get((x.get("best_peer") or "") + "_range")
            best = (f"{fmt_x(x['over_best_peer'])} ({PEER_NAMES.get(x['best_peer'], '?')}"
                    + (f", {rng[0]:.2f}-{rng[1]:.2f}" if rng else "") + ")")
        rows.append([c["name"], fmt_time(c.get("ktune"), c["status"]),
                     *[fmt_time(c.get(p)) for p, _ in PEERS],
                     *[fmt_x(x.get(p)) for p, _ in PEERS], best, host_text(c), c["status"]])
    L += table(["case", "ktune", "eager", "compile", "max-autotune", "x eager", "x compile",
                "x max-autotune", "x best", "host us", "status"], rows)
    L += throughput(cases, r)
    L += ["", "## Correctness and tuning cost", "",
          "Errors: normwise, ||out - ref|| / ||ref||, against PyTorch in float64 on fresh inputs "
          "(the largest over a case's outputs); ktune's must be within the tolerance its record "
          "was verified against. Math: the kernel's math path where its family has one; tf32x3 "
          "is fp32 data split into two tf32 halves with three tensor-core products each (fp32-level "
          "accuracy, searched under the exact policy: docs/search.md), its error to compare with "
          "the peers' FFMA errors in the same row. Tuning: the `ktune batch` job (wall seconds, candidates tried, "
          "measured on the GPU, failures by class); n/r: not reported by ktune batch. torch.compile "
          "columns: seconds of the first call (compilation).", ""]
    rows = []
    for c in cases:
        k = c.get("ktune") or {}
        t = c.get("tuning") or {}
        err = max_err(k)
        tol = k.get("tolerance")
        maths = sorted(set(re.findall(r"math=(\S+)", k.get("schedule") or "")))
        fam = k.get("family") or t.get("family") or "-"
        rows.append([c["name"], fam + (" (" + ", ".join(maths) + ")" if maths else ""),
                     f"{fmt_err(err)} / {fmt_err(tol)}" if tol is not None else fmt_err(err),
                     *[fmt_err(max_err(c.get(p))) for p, _ in PEERS],
                     f"{t['elapsed_s']:.0f}" if t.get("elapsed_s") is not None else "-",
                     t.get("trials", "-"), t.get("measured", "-"), failures_text(t),
                     compile_measure_text(t),
                     *[f"{c[p]['first_call_s']:.1f}" if (c.get(p) or {}).get("first_call_s")
                       is not None else "-" for p in ("compile", "max_autotune")]])
    L += table(["case", "family (math)", "ktune err / tol", "eager err", "compile err",
                "max-autotune err", "tuning s", "trials", "measured", "failures",
                "compile / measure s", "compile 1st call s", "max-autotune 1st call s"], rows)

    L += ["", f"## Cases below {TARGET_FLOOR}x the best peer, or without a ktune result", ""]
    listed = below + [c for c in not_ok if c not in below]
    if not listed:
        L.append("None.")
    for c in listed:
        n = notes.get(c["name"]) or {}
        what = (f"{fmt_x(over_best(c))} {PEER_NAMES.get(c['speedup']['best_peer'], '?')}" if over_best(c) is not None
                else c["status"] + (f": {c['ktune']['error']}" if (c.get("ktune") or {})
                                    .get("error") else ""))
        L.append(f"- **{c['name']}** ({what}). Why: {n.get('why', 'TODO (lead)')}. "
                 f"What would fix it: {n.get('fix', 'TODO (lead)')}.")
    errs = [(c["name"], p, c[p]["error"]) for c in cases for p, _ in PEERS
            if (c.get(p) or {}).get("error")]
    if errs:
        L += ["", "Peers that failed (the exception, first line):", ""]
        L += [f"- {n} / {p}: `{e}`" for n, p, e in errs]

    if rerun:
        L += reproduction(r, rerun, rerun_rel)

    L += ["", "## Protocol", "", prot.get("text", "(not recorded)") + ".", "",
          f"Reps: up to {prot.get('reps', '?')} or {prot.get('rep_seconds', '?')} s per "
          f"contender; warm-up {prot.get('warmup_ms', '?')} ms after the first call; L2 scrub "
          f"{(prot.get('scrub_bytes') or 0) >> 20} MiB; GPU spin {prot.get('spin_cycles', '?')} "
          f"cycles; seed {prot.get('seed', '?')}.", "",
          f"Command: `{r.get('command', '?')}`", ""]
    L += ["## How to rerun", "",
          "On a machine with the build tools (scripts/install-deps), build what runs on the GPU "
          "machine into dist-device/:", "", "```", "scripts/device-build", "```", "",
          "On the GPU machine (a Hopper GPU; PyTorch with CUDA, Triton and python3 installed), from "
          "the repository root with dist-device/ copied there: tune every case through ktuned, "
          "time the four contenders, write the results and this page:", "", "```",
          "bench/run --budget-total 1800  # writes bench/results/<gpu>-DATE.json",
          "```", "",
          "`--only a,b` runs some cases, `--group g,h` the cases of some groups (core, gemm16, "
          "llm_prefill, llm_decode: the case list's group column); `KTUNE_CACHE=DIR bench/run "
          "...` reuses a cache, so a "
          "rerun tunes nothing (each job joins its finished twin) and only times; `--dry-run` "
          "prints the steps. `scripts/device-run bench` does the same with the device tool. "
          "To redo only this page from a results file (and, with `--rerun`, a second full run "
          "of the suite for the Reproduction section):", "", "```",
          f"python3 bench/report.py {results_rel}"
          + (f" --rerun {rerun_rel}" if rerun_rel else ""), "```", ""]
    return "\n".join(L)


def render_png(r, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = r["cases"]
    names = [c["name"] for c in cases]
    vals = [over_best(c) for c in cases]
    have = [v for v in vals if v]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.45 * len(cases) + 2), 6.5))
    xs = range(len(cases))
    for i, v in zip(xs, vals):
        if v:
            # from the 1.0 line: up when ktune is faster, down when slower
            ax.bar(i, v - 1.0, bottom=1.0, color="#2a9d55" if v >= 1 else "#d04a3a", width=0.7)
            ax.annotate(f"{v:.2f}", (i, v), ha="center", va="bottom" if v >= 1 else "top",
                        fontsize=7, xytext=(0, 2 if v >= 1 else -2), textcoords="offset points")
    ax.set_yscale("log")
    lo = min(have + [1.0]) / 1.5
    hi = max(have + [1.0]) * 1.5
    ax.set_ylim(lo, hi)
    for i, (v, c) in enumerate(zip(vals, cases)):
        if not v:
            ax.plot(i, 1.0, marker="x", color="#555555", markersize=8)
            ax.annotate(c["status"], (i, 1.0), ha="center", va="bottom", fontsize=7,
                        rotation=90, xytext=(0, 6), textcoords="offset points")
    ax.axhline(1.0, color="black", linewidth=1)
    ax.axhline(TARGET_FLOOR, color="#d04a3a", linewidth=0.8, linestyle=":")
    gm = geomean(have)
    if gm:
        ax.axhline(gm, color="#1f5fa8", linewidth=0.8, linestyle="--",
                   label=f"geometric mean {gm:.2f}x")
        ax.legend(loc="upper right", fontsize=8)
    ax.set_xticks(list(xs))
    ax.set_xticklabels(names, rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("speed-up over the best peer (log scale)")
    ticks = [t for t in (0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.25, 1.5, 2, 3, 5, 10, 20, 50)
             if lo <= t <= hi]
    ax.set_yticks(ticks)
    dev = (r.get("device") or {}).get("name", "")
    ax.set_title(f"ktune over the fastest of eager, torch.compile, max-autotune\n{dev}",
                 fontsize=10)
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda y, _: f"{y:g}x"))
    ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.grid(axis="y", which="major", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120, metadata={"Software": None})
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+")
    ap.add_argument("--merged", help="write the merged results of several files here")
    ap.add_argument("--md", default="docs/BENCHMARKS.md")
    ap.add_argument("--png", default="docs/benchmarks.png")
    ap.add_argument("--rerun", help="a second results file of the same suite (a full rerun): "
                    "adds the Reproduction section")
    ap.add_argument("--notes", default="bench/notes.json",
                    help="why/fix notes per case (used when the file exists)")
    args = ap.parse_args()
    try:
        r = merge([load(p) for p in args.results], args.results)
        results_path = args.results[0]
        if args.merged:
            os.makedirs(os.path.dirname(os.path.abspath(args.merged)), exist_ok=True)
            with open(args.merged, "w") as f:
                f.write(json.dumps(r, indent=1) + "\n")
            results_path = args.merged
        elif len(args.results) > 1:
            raise ReportError("several results files: name the merged file (--merged FILE)")
        notes = {}
        if os.path.exists(args.notes):
            try:
                with open(args.notes) as f:
                    notes = json.load(f)
            except ValueError as e:
                raise ReportError(f"{args.notes}: not JSON: {e}") from None
            if not isinstance(notes, dict):
                raise ReportError(f"{args.notes}: expected {{\"case\": {{\"why\", \"fix\"}}}}")
        rerun = load(args.rerun) if args.rerun else None
    except ReportError as e:
        print(f"report: {e}", file=sys.stderr)
        return 2
    md_dir = os.path.dirname(os.path.abspath(args.md))
    png_rel = os.path.relpath(os.path.abspath(args.png), md_dir)
    results_rel = os.path.relpath(os.path.abspath(results_path))
    os.makedirs(md_dir, exist_ok=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.png)), exist_ok=True)
    render_png(r, args.png)
    with open(args.md, "w") as f:
        f.write(render_md(r, png_rel, notes, results_rel, rerun,
                          os.path.relpath(os.path.abspath(args.rerun)) if rerun else None))
    print(f"report: wrote {args.md} and {args.png} ({len(r['cases'])} cases)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
