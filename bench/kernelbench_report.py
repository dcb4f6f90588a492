#!/usr/bin/env python3
"""Writes docs/KERNELBENCH.md and its figure from a run of bench/kernelbench (issue 21).

    bench/kernelbench_report.py DIR/kernelbench.json [DIR/results.json] [--md docs/KERNELBENCH.md]
                                [--notes bench/notes.json]

KERNELBENCH_JSON is what bench/kernelbench writes (per problem: level, number, name, status
captured | capture_failed | load_failed | check_failed, reason, case). RESULTS_JSON is the run's
results (bench/harness.py's format; several parts merged first with `bench/report.py A.json
B.json --merged OUT.json`). Without it the report is a dry run: coverage only, and says that
nothing was timed. The figure is written beside the page: the --md path with .png instead.

Per level: coverage (problems; captured; checked, i.e. captured and not check_failed; tuned and
verified, i.e. the harness's ktune result is ok), the failures counted by status and their
reasons grouped; fast_p, the fraction of ALL the level's problems whose ktune kernel is correct
and more than p times as fast as a peer (a problem not captured, not checked, not tuned, wrong,
or whose peer has no time, is not fast), against eager, torch.compile and the best of eager,
torch.compile and max-autotune, drawn for p in [0, 4] and tabled at p = 0, 1, 1.5, 2, 4; fast_1
and the geometric-mean speed-up over eager against issue 21's targets; tuning time; a row per
problem; and the problems below 1.0x the best peer with "why" and "fix" from the notes file
({"case name": {"why": ..., "fix": ...}}, as bench/report.py reads it; no note: a TODO line).

Speed-ups are the harness's own (a peer's median / ktune's median), read through bench/report.py.
The output is sorted and its numbers have fixed formats, so it diffs cleanly. Needs only the
standard library and matplotlib (for the figure; without it the page is still written).
"""
import argparse
import importlib.machinery
import importlib.util
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import report  # noqa: E402  (bench/report.py: standard library only until it draws)
from report import ReportError, fmt_err, fmt_us, fmt_x, geomean, max_err, table  # noqa: E402

KB_STATUSES = ("captured", "capture_failed", "load_failed", "check_failed")
# a problem's final status, in the order the failures are tabled: the kernelbench statuses, then
# "not run" (captured and checked, but the results have no case for it), then the harness's own
FAIL_ORDER = ("load_failed", "capture_failed", "check_failed", "not run", "case failed",
              "kernel missing", "ktune failed", "wrong")
FAIL_WHAT = {"load_failed": "the problem's file or model did not load",
             "capture_failed": "ktune.capture stopped (at an op it does not take)",
             "check_failed": "bench/check_cases.py refused the captured case",
             "not run": "captured and checked, but the results have no case for it",
             "case failed": "the graph does not run in PyTorch",
             "kernel missing": "`ktune batch` cached no kernel",
             "ktune failed": "the kernel did not launch",
             "wrong": "the kernel's outputs are outside its tolerance"}
PS = (0.0, 1.0, 1.5, 2.0, 4.0)  # the fast_p table's p
CURVES = (("eager", "eager"), ("compile", "torch.compile"),
          ("best", "best of eager / compile / max-autotune"))
TARGET_FAST1_EAGER, TARGET_FAST1_BEST, TARGET_GEOMEAN_EAGER = 0.85, 0.60, 2.0


def load_kernelbench(path):
    kb = report.read_json(path)
    if not isinstance(kb, dict) or not isinstance(kb.get("problems"), list):
        raise ReportError(f"{path}: not a bench/kernelbench file (no 'problems' list)")
    for i, p in enumerate(kb["problems"]):
        if not isinstance(p, dict) or any(k not in p for k in ("level", "number", "name",
                                                               "status")):
            raise ReportError(f"{path}: problem {i} lacks 'level', 'number', 'name' or 'status'")
        if p["status"] not in KB_STATUSES:
            raise ReportError(f"{path}: problem {i} ({p['name']}): unknown status "
                              f"'{p['status']}'")
    return kb


def load_notes(path):
    if not path or not os.path.exists(path):
        return {}
    notes = report.read_json(path)
    if not isinstance(notes, dict):
        raise ReportError(f"{path}: expected {{\"case\": {{\"why\", \"fix\"}}}}")
    return notes


_case_name = None


def case_name(level, number, stem):
    """bench/kernelbench's name for a problem's case (for kernelbench.json files from before it
    recorded 'case')."""
    global _case_name
    if _case_name is None:
        path = os.path.join(HERE, "kernelbench")
        loader = importlib.machinery.SourceFileLoader("kernelbench_cli", path)
        mod = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
        dont, sys.dont_write_bytecode = sys.dont_write_bytecode, True
        try:
            loader.exec_module(mod)
        finally:
            sys.dont_write_bytecode = dont
        _case_name = mod.case_name
    return _case_name(level, number, stem)


def title_of(stem):
    return stem.split("_", 1)[1] if re.match(r"^\d+_", stem) else stem


def reason_key(status, reason):
    """A reason with what is one problem's own taken out, so problems stopped by the same thing
    group together: capture's source file and line, the graph file ktune names, the node's
    number and output, and other numbers (sizes) as N."""
    if status == "wrong":
        return "the kernel's error is above its tolerance"
    r = " ".join(str(reason or "-").split())
    r = re.sub(r"^ktune\.capture: ", "", r)
    r = re.sub(r" at \S+\.py:\d+( \(in [^)]*\))?", "", r)
    r = re.sub(r"(ktune: )?\S*\.json: ", "", r)
    r = re.sub(r"node \d+ \((\S+) -> [^)]*\)", r"node (\1)", r)
    return re.sub(r"(?<![\w.])\d+(?![\w.])", "N", r)


def harness_reason(c):
    """Why a timed case has no verified kernel, in one line."""
    k = c.get("ktune") or {}
    if c["status"] == "case failed":
        return c.get("error") or "the graph does not run in PyTorch"
    if c["status"] == "wrong":
        tol = k.get("tolerance")
        return (f"error {fmt_err(max_err(k))} above the tolerance {fmt_err(tol)}"
                if tol is not None else "outside its tolerance")
    return k.get("error") or c["status"]


def problems_of(kb, results):
    """One record per problem, sorted by level and number: the kernelbench record, its result
    case (or None) and what the report needs of them."""
    by_case = {c["name"]: c for c in (results or {}).get("cases", [])}
    out = []
    for p in kb["problems"]:
        case = p.get("case") or case_name(p["level"], p["number"], p["name"])
        c = by_case.get(case) if p["status"] == "captured" else None
        rec = {"level": int(p["level"]), "number": int(p["number"]), "stem": p["name"],
               "title": title_of(p["name"]), "case": case, "kb_status": p["status"],
               "result": c, "x": {}, "best_peer": None}
        if p["status"] != "captured":
            rec["status"], rec["reason"] = p["status"], p.get("reason")
        elif results is None:
            rec["status"], rec["reason"] = "captured", None
        elif c is None:
            rec["status"], rec["reason"] = "not run", "no case of this name in the results"
        else:
            rec["status"] = c["status"]
            rec["reason"] = None if c["status"] == "ok" else harness_reason(c)
            sp = c.get("speedup") or {}
            rec["x"] = {"eager": sp.get("eager"), "compile": sp.get("compile"),
                        "max_autotune": sp.get("max_autotune"), "best": report.over_best(c)}
            rec["best_peer"] = sp.get("best_peer")
        rec["ok"] = rec["status"] == "ok"
        out.append(rec)
    out.sort(key=lambda r: (r["level"], r["number"], r["stem"]))
    return out


def levels_of(kb, probs):
    return sorted({int(x) for x in kb.get("levels") or []} | {r["level"] for r in probs})


def fast_p(probs, peer, p):
    """The fraction of the problems (all of them: a failure counts as not fast) whose kernel is
    correct and more than p times as fast as the peer ('best': the fastest peer); None for none."""
    if not probs:
        return None
    n = sum(1 for r in probs if r["ok"] and r["x"].get(peer) is not None and r["x"][peer] > p)
    return n / len(probs)


def fast_count(probs, peer, p):
    return sum(1 for r in probs if r["ok"] and r["x"].get(peer) is not None and r["x"][peer] > p)


def geomean_eager(probs):
    xs = [r["x"]["eager"] for r in probs if r["ok"] and r["x"].get("eager")]
    return geomean(xs), len(xs)


def fmt_frac(x):
    return "-" if x is None else f"{x * 100:.1f}%"


def met(ok):
    return "met" if ok else "not met"


def rel(path):
    return os.path.relpath(os.path.abspath(path))


def header(kb, r, kb_rel, results_rel):
    commit = kb.get("kernelbench_commit") or "(commit unknown)"
    levels = ", ".join(str(x) for x in kb.get("levels") or []) or "?"
    L = [f"KernelBench commit **{commit}**, levels {levels}, precision "
         f"{kb.get('precision', '?')} (bench/kernelbench, {kb.get('mode', '?')}; problems: "
         f"`{kb_rel}`)."]
    if kb.get("cases_checked") is False:
        L += ["", "**The cases were not checked** (bench/kernelbench found no ktune CLI): "
              "'checked' below counts every captured problem."]
    if r is None:
        L += ["", "**Nothing was timed**: no results file was given (a dry run of "
              "bench/kernelbench: capture only). The coverage below counts what was captured "
              "and checked; nothing was tuned, verified or timed, so there are no speed-ups."]
        return L
    v = r.get("versions") or {}
    dev = r.get("device") or {}
    prot = r.get("protocol") or {}
    L += ["", f"Measured {r.get('date', '?')} on **{dev.get('name', '?')}** "
          f"(sm {dev.get('capability', '?')}, {dev.get('sm_count', '?')} SMs), driver "
          f"{v.get('driver', '?')}; PyTorch {v.get('torch', '?')} (CUDA "
          f"{v.get('torch_cuda', '?')}, cuDNN {v.get('cudnn', '?')}), Triton "
          f"{v.get('triton', '?')}, libktune {v.get('libktune', '?')}{report.commits_text(r)}. "
          f"Raw data: `{results_rel}`.", "",
          f"Protocol (bench/harness.py; in full at the end): every contender runs the captured "
          f"graph on the same inputs, timed with CUDA events, median of up to "
          f"{prot.get('reps', '?')} reps, L2 scrubbed before each "
          f"({(prot.get('scrub_bytes') or 0) >> 20} MiB, {prot.get('scrub', 'write')}); "
          f"outputs checked against PyTorch in float64 (normwise error)."]
    return L


def coverage(levels, probs, timed):
    L = ["## Coverage", "",
         "Problems: the level's files. Captured: ktune.capture turned the module into a ktune "
         "graph. Checked: captured and passed bench/check_cases.py (the graph checks, keeps a "
         "kernel candidate, runs on PyTorch's side; a run without the ktune CLI skips the check, "
         "as bench/kernelbench prints, and then this counts the captured ones). Tuned and "
         "verified: `ktune batch` cached a kernel and the harness found its outputs within "
         "tolerance (its result ok)" + ("." if timed else "; '-': a dry run tunes nothing."), ""]
    rows, tot = [], [0, 0, 0, 0]
    for lv in levels:
        mine = [r for r in probs if r["level"] == lv]
        n = len(mine)
        cap = sum(r["kb_status"] in ("captured", "check_failed") for r in mine)
        chk = sum(r["kb_status"] == "captured" for r in mine)
        ok = sum(r["ok"] for r in mine)
        for i, x in enumerate((n, cap, chk, ok)):
            tot[i] += x

        def pc(x):
            return f"{x} ({x / n * 100:.1f}%)" if n else str(x)
        rows.append([str(lv), str(n), pc(cap), pc(chk), pc(ok) if timed else "-"])
    if len(levels) > 1:
        n = tot[0]
        rows.append(["all", str(n)] + [f"{x} ({x / n * 100:.1f}%)" if n else str(x)
                                       for x in tot[1:3]]
                    + [(f"{tot[3]} ({tot[3] / n * 100:.1f}%)" if n else str(tot[3]))
                       if timed else "-"])
    L += table(["level", "problems", "captured", "checked", "tuned and verified"], rows)

    fails = [s for s in FAIL_ORDER if any(r["status"] == s for r in probs)]
    L += ["", "### Failures by status", ""]
    if not fails:
        L.append("None.")
    else:
        L += ["; ".join(f"{s}: {FAIL_WHAT[s]}" for s in fails) + ".", ""]
        rows = [[s] + [str(sum(r["status"] == s for r in probs if r["level"] == lv))
                       for lv in levels] + [str(sum(r["status"] == s for r in probs))]
                for s in fails]
        L += table(["status"] + [f"level {lv}" for lv in levels] + ["all"], rows)
        L += ["", "### Reasons", "",
              "Grouped by what stopped the problem (what is one problem's own left out: source "
              "lines, file names, node numbers; sizes as N); most frequent first.", ""]
        groups = {}
        for r in probs:
            if r["status"] in FAIL_ORDER:
                groups.setdefault((r["status"], reason_key(r["status"], r["reason"])),
                                  []).append(r)
        order = sorted(groups.items(), key=lambda kv: (-len(kv[1]), FAIL_ORDER.index(kv[0][0]),
                                                       kv[0][1]))
        L += table(["why", "status", "problems", "which (level/number)"],
                   [[why, st, str(len(rs)), ", ".join(f"{r['level']}/{r['number']}" for r in rs)]
                    for (st, why), rs in order])
    return L


def summary(levels, probs, r, png_rel):
    L = ["## Against the targets", "",
         "fast_1: the fraction of all the level's problems whose ktune kernel is correct and "
         "faster than the peer (the best peer: the fastest of eager, torch.compile and "
         "max-autotune on that problem). Geometric mean: of the speed-up over eager, over the "
         "problems with a verified kernel and an eager time. Issue 21's targets: fast_1 over "
         f"eager >= {TARGET_FAST1_EAGER:.0%}, fast_1 over the best peer >= "
         f"{TARGET_FAST1_BEST:.0%}, geometric mean over eager >= {TARGET_GEOMEAN_EAGER:.0f}x.", ""]
    rows = []
    for lv in levels:
        mine = [x for x in probs if x["level"] == lv]
        n = len(mine)
        fe, fb = fast_p(mine, "eager", 1.0), fast_p(mine, "best", 1.0)
        gm, gn = geomean_eager(mine)
        rows.append([str(lv),
                     f"{fmt_frac(fe)} ({fast_count(mine, 'eager', 1.0)}/{n}): "
                     f"{met(fe is not None and fe >= TARGET_FAST1_EAGER)}",
                     f"{fmt_frac(fb)} ({fast_count(mine, 'best', 1.0)}/{n}): "
                     f"{met(fb is not None and fb >= TARGET_FAST1_BEST)}",
                     (f"{fmt_x(gm)} over {gn}: {met(gm >= TARGET_GEOMEAN_EAGER)}"
                      if gm is not None else "- (no verified kernel): not met")])
    L += table(["level", f"fast_1 vs eager (>= {TARGET_FAST1_EAGER:.0%})",
                f"fast_1 vs best peer (>= {TARGET_FAST1_BEST:.0%})",
                f"geomean x eager (>= {TARGET_GEOMEAN_EAGER:.0f}x)"], rows)

    L += ["", "## fast_p", "",
          "fast_p: the fraction of all the level's problems (not captured, not checked, not "
          "tuned, wrong, or without a peer time: not fast) whose ktune kernel is correct and more "
          "than p times as fast as the peer. fast_0 is the fraction with a verified, timed "
          "kernel.", ""]
    rows = []
    for lv in levels:
        mine = [x for x in probs if x["level"] == lv]
        for key, label in CURVES:
            rows.append([str(lv), label] + [fmt_frac(fast_p(mine, key, p)) for p in PS])
    L += table(["level", "against"] + [f"p = {p:g}" for p in PS], rows)
    L += ["", f"![fast_p per level against eager, torch.compile and the best peer]({png_rel})",
          ""]

    L += ["## Tuning time", "",
          "The sum of the `ktune batch` jobs' wall seconds (elapsed_s) of the level's cases; a "
          "job that joined a finished twin in the cache (a rerun) counts the original job's.", ""]
    rows = []
    for lv in levels:
        cs = [x["result"] for x in probs if x["level"] == lv and x["result"]]
        el = [(c.get("tuning") or {}).get("elapsed_s") for c in cs]
        el = [e for e in el if e is not None]
        joined = sum(bool((c.get("tuning") or {}).get("joined")) for c in cs)
        rows.append([str(lv), str(len(cs)), str(len(el)), f"{sum(el):.1f}",
                     f"{sum(el) / len(el):.1f}" if el else "-", str(joined)])
    L += table(["level", "cases timed", "with a tuning record", "tuning s (sum)",
                "s per case", "joined"], rows)
    batch = r.get("batch") or {}
    if batch.get("wall_s") is not None:
        L += ["", f"The batch (all levels, one `ktune batch --budget-total "
              f"{batch.get('budget_total_s')}`) took {batch['wall_s']:.0f} s of wall time."]
    else:
        L += ["", "The results carry no batch wall time."]
    return L


def time_cell(who):
    t = ((who or {}).get("time") or {}).get("median_us")
    if t is not None:
        return fmt_us(t)
    return "fails" if (who or {}).get("error") else "-"


def per_problem(probs, timed):
    L = ["", "## Problems", ""]
    if timed:
        L += ["Times: median microseconds. x eager, x best: the peer's median / ktune's (above "
              "1: ktune is faster), the best peer named. Err: ktune's normwise error against "
              "PyTorch in float64 (the largest over the outputs). Tuning: the `ktune batch` "
              "job's wall seconds.", ""]
    rows = []
    for x in probs:
        c = x["result"] or {}
        k = c.get("ktune") or {}
        t = c.get("tuning") or {}
        best = "-"
        if x["x"].get("best") is not None:
            best = f"{fmt_x(x['x']['best'])} ({report.PEER_NAMES.get(x['best_peer'], '?')})"
        row = [str(x["level"]), str(x["number"]), x["title"]]
        if timed:
            row += [time_cell(k) if c else "-",
                    *[time_cell(c.get(p)) if c else "-" for p, _ in report.PEERS],
                    fmt_x(x["x"].get("eager")), best, fmt_err(max_err(k)),
                    f"{t['elapsed_s']:.1f}" if t.get("elapsed_s") is not None else "-",
                    k.get("family") or t.get("family") or "-"]
        rows.append(row + [x["status"]])
    head = ["level", "#", "problem"]
    if timed:
        head += ["ktune us", "eager us", "compile us", "max-autotune us", "x eager", "x best",
                 "err", "tuning s", "family"]
    L += table(head + ["status"], rows)
    return L


def slow(probs, notes, notes_rel):
    L = ["", "## Below 1.0x the best peer, or tuned without a verified kernel", "",
         f"Why and what would fix it, from `{notes_rel}` (keyed by the case name).", ""]
    listed = [x for x in probs if (x["ok"] and x["x"].get("best") is not None
                                   and x["x"]["best"] < 1.0)
              or (x["result"] is not None and not x["ok"])]
    if not listed:
        L.append("None.")
    for x in listed:
        n = notes.get(x["case"]) or {}
        what = (f"{fmt_x(x['x']['best'])} {report.PEER_NAMES.get(x['best_peer'], '?')}"
                if x["ok"] else f"{x['status']}: {x['reason']}")
        if n.get("why") or n.get("fix"):
            L.append(f"- **{x['case']}** (level {x['level']} #{x['number']}, {what}). Why: "
                     f"{n.get('why', 'TODO')}. What would fix it: {n.get('fix', 'TODO')}.")
        else:
            L.append(f"- **{x['case']}** (level {x['level']} #{x['number']}, {what}). "
                     f"TODO: no note in {notes_rel}; why, and what would fix it.")
    return L


def render_md(kb, r, notes, kb_rel, results_rel, notes_rel, png_rel):
    probs = problems_of(kb, r)
    levels = levels_of(kb, probs)
    timed = r is not None
    gen = f"bench/kernelbench_report.py from {kb_rel}" + (f" and {results_rel}" if timed else "")
    L = ["# KernelBench: ktune against PyTorch", "",
         f"<!-- Generated by {gen}; edit that script or bench/notes.json, not this file. -->", ""]
    L += header(kb, r, kb_rel, results_rel)
    L += [""]
    L += coverage(levels, probs, timed)
    if timed:
        L += [""]
        L += summary(levels, probs, r, png_rel)
    L += per_problem(probs, timed)
    if timed:
        L += slow(probs, notes, notes_rel)
        others = sorted({c["name"] for c in r["cases"]} - {x["case"] for x in probs
                                                            if x["result"] is not None})
        if others:
            L += ["", f"Cases in the results that are no KernelBench problem here (left out): "
                  f"{', '.join(others)}."]
        prot = r.get("protocol") or {}
        L += ["", "## Protocol", "", prot.get("text", "(not recorded)") + ".", "",
              f"Reps: up to {prot.get('reps', '?')} or {prot.get('rep_seconds', '?')} s per "
              f"contender; warm-up {prot.get('warmup_ms', '?')} ms after the first call; L2 "
              f"scrub {(prot.get('scrub_bytes') or 0) >> 20} MiB; GPU spin "
              f"{prot.get('spin_cycles', '?')} cycles; seed {prot.get('seed', '?')}.", "",
              f"Command: `{r.get('command', '?')}`"]
    L += ["", "## How to rerun", "",
          "On the GPU machine, after scripts/device-build, with a KernelBench checkout at PATH "
          "(capture, check, tune and time every problem of levels 1 and 2), then this page:",
          "", "```", "bench/kernelbench --kernelbench PATH --out DIR",
          "python3 bench/kernelbench_report.py DIR/kernelbench.json DIR/results.json", "```", "",
          "`--dry-run` captures and checks only (no GPU); the page then shows coverage alone.",
          ""]
    return "\n".join(L)


def render_png(kb, r, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    probs = problems_of(kb, r)
    levels = levels_of(kb, probs)
    ps = [i / 100 for i in range(401)]
    fig, axes = plt.subplots(1, len(levels), figsize=(5.0 * len(levels), 4.2), squeeze=False,
                             sharey=True)
    colors = {"eager": "#1f5fa8", "compile": "#d07a1a", "best": "#2a9d55"}
    for ax, lv in zip(axes[0], levels):
        mine = [x for x in probs if x["level"] == lv]
        for key, label in CURVES:
            ax.step(ps, [fast_p(mine, key, p) or 0.0 for p in ps], where="post",
                    color=colors[key], label=label, linewidth=1.4)
        ax.axvline(1.0, color="black", linewidth=0.6, linestyle=":")
        ax.axhline(TARGET_FAST1_EAGER, color=colors["eager"], linewidth=0.6, linestyle="--")
        ax.axhline(TARGET_FAST1_BEST, color=colors["best"], linewidth=0.6, linestyle="--")
        ax.set_xlim(0, 4)
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("p (speed-up over the peer)")
        ax.set_title(f"level {lv} ({len(mine)} problems)", fontsize=10)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("fast_p: fraction of all problems")
    axes[0][0].legend(loc="upper right", fontsize=7)
    dev = ((r or {}).get("device") or {}).get("name", "")
    fig.suptitle(f"KernelBench {(kb.get('kernelbench_commit') or '?')[:7]}: ktune fast_p "
                 f"(dashed: fast_1 targets)  {dev}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120, metadata={"Software": None})
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kernelbench_json", help="DIR/kernelbench.json of bench/kernelbench")
    ap.add_argument("results_json", nargs="?",
                    help="the run's results (bench/harness.py); none: a dry run, coverage only")
    ap.add_argument("--md", default="docs/KERNELBENCH.md",
                    help="the page written; the figure goes beside it (.png)")
    ap.add_argument("--notes", default="bench/notes.json",
                    help="why/fix notes per case (used when the file exists)")
    a = ap.parse_args()
    try:
        kb = load_kernelbench(a.kernelbench_json)
        r = report.load(a.results_json) if a.results_json else None
        notes = load_notes(a.notes)
    except ReportError as e:
        print(f"kernelbench_report: {e}", file=sys.stderr)
        return 2
    png = os.path.splitext(a.md)[0] + ".png"
    md_dir = os.path.dirname(os.path.abspath(a.md))
    os.makedirs(md_dir, exist_ok=True)
    text = render_md(kb, r, notes, rel(a.kernelbench_json),
                     rel(a.results_json) if r is not None else None, rel(a.notes),
                     os.path.basename(png))
    with open(a.md, "w") as f:
        f.write(text)
    wrote = [a.md]
    if r is not None:
        try:
            render_png(kb, r, png)
            wrote.append(png)
        except ImportError as e:
            print(f"kernelbench_report: no figure ({e}); {a.md} links {png}", file=sys.stderr)
    n = len(kb["problems"])
    print(f"kernelbench_report: wrote {' and '.join(wrote)} ({n} problems"
          + (", dry run: nothing timed)" if r is None else ")"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
