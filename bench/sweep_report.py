#!/usr/bin/env python3
"""Writes docs/SWEEP.md and a heatmap per family from a shape sweep (bench/sweep, issue 22).

    bench/sweep_report.py --sweep DIR/sweep.json [MORE.json ...] --results RESULTS.json [...]
                          [--notes bench/sweep_notes.json] [--md docs/SWEEP.md]
                          [--figures docs/sweep] [--cost-rank DIR/cost_rank.json ...]

--sweep: the grid bench/sweep wrote (several when the parts were written apart; points by name,
the later file's on a repeat). --results: bench/harness.py's results of the sweep's cases, one
file or several parts (merged as bench/report.py --merged merges them; an already merged file is
read as its parts).

The page: device, versions, commits, protocol and the copy bandwidth the run measured; per
family a heatmap (FIGURES/<family>.svg, self-contained SVG: ktune's speed-up over the best
PyTorch peer timed in the same run, per point, cells laid out by the family's two main axes as
bench/sweep placed them, red below 1.0x, blue above, grey with "x" where a point has no
speed-up) and a table of every point (regime, axes, ktune's median, the best peer and its median,
the speed-up, and for memory-bound points the fraction of the copy bandwidth: bytes / median /
the run's copy bandwidth); the geometric mean per family and overall; the points below 0.97x and
the memory-bound ones below 90% of the copy bandwidth (issue 22's targets); and every point below
1.0x, or without a ktune result, with its cause and fix from the notes file ({"point": {"cause":
..., "fix": ...}}), "not analysed yet" where it has none. With --cost-rank (bench/cost_rank.py's
output of each part), the cost model's Spearman rank correlation with the measured trials, per
family and overall, and the points where its first choice lost most.

Standard library only (no GPU, no torch, no matplotlib). Exit status 0, or 2 for unreadable or
inconsistent inputs."""
import argparse
import json
import math
import statistics
import os
import sys
from xml.sax.saxutils import escape

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report  # noqa: E402  (bench/report.py: reading and merging results)

FAMILIES = ("row", "pointwise", "gemm", "conv", "attention")
TARGET_GEOMEAN, TARGET_FLOOR, TARGET_COPY = 1.15, 0.97, 0.90  # issue 22
NOTES_DEFAULT = os.path.join(report.ROOT, "bench", "sweep_notes.json")


def load_sweeps(paths):
    """The points of the sweep files, in order, by name (a later file's point replaces an
    earlier one in its place)."""
    points = {}
    for path in paths:
        s = report.read_json(path)
        if not isinstance(s, dict) or not isinstance(s.get("points"), list):
            raise report.ReportError(f"{path}: not a bench/sweep sweep.json (no 'points' list)")
        for i, p in enumerate(s["points"]):
            if not isinstance(p, dict) or not all(k in p for k in ("name", "family", "bytes")):
                raise report.ReportError(f"{path}: point {i} lacks 'name', 'family' or 'bytes'")
            points[p["name"]] = p
    return list(points.values())


def load_notes(path, explicit):
    if not explicit and not os.path.exists(path):
        return {}
    notes = report.read_json(path)
    if not isinstance(notes, dict) or not all(isinstance(v, dict) for v in notes.values()):
        raise report.ReportError(f"{path}: expected "
                                 "{\"point\": {\"cause\": ..., \"fix\": ...}}")
    return notes


def median(who):
    return ((who or {}).get("time") or {}).get("median_us")


def copy_tb_s(c, r):
    """The copy bandwidth of the run that timed case c (a merged part's own)."""
    return c.get("copy_tb_s") or (r.get("copy_bandwidth") or {}).get("tb_s")


def joined(points, r):
    """Each point with what the results say of it: status, times, speed-up, copy fraction."""
    cases = {c["name"]: c for c in r["cases"]}
    rows = []
    for p in points:
        c = cases.get(p["name"])
        row = {"p": p, "case": c, "x": None, "kt": None, "peer": None, "peer_us": None,
               "copy": None, "peer_copy": None}
        if p.get("status") == "check_failed":
            row["status"] = "check failed"
        elif c is None:
            row["status"] = "not run"
        else:
            row["status"] = c["status"]
            row["x"] = report.over_best(c)
            row["kt"] = median(c.get("ktune"))
            row["peer"] = (c.get("speedup") or {}).get("best_peer")
            if row["peer"] is None:  # no ktune time: still name the fastest peer
                timed = {q: median(c.get(q)) for q, _ in report.PEERS if median(c.get(q))}
                row["peer"] = min(timed, key=timed.get) if timed else None
            row["peer_us"] = median(c.get(row["peer"])) if row["peer"] else None
            bw = copy_tb_s(c, r)
            if p.get("bound") == "memory" and bw:
                def frac(us):
                    return p["bytes"] / (us * 1e-6) / (bw * 1e12) if us else None
                row["copy"], row["peer_copy"] = frac(row["kt"]), frac(row["peer_us"])
        rows.append(row)
    return rows


# ---- the heatmap ----

CELL_W, CELL_H, CHAR_W = 58, 24, 6.4


def colour(x):
    """Diverging at 1.0x: red below, blue above, saturating at 0.5x and 2x (log scale)."""
    t = max(-1.0, min(1.0, math.log2(x)))
    lo, mid, hi = (178, 24, 43), (247, 247, 247), (33, 102, 172)
    end = hi if t > 0 else lo
    rgb = [round(m + (e - m) * abs(t)) for m, e in zip(mid, end)]
    return "#%02x%02x%02x" % tuple(rgb), abs(t) > 0.55


def text(x, y, s, size=11, anchor="start", fill="#222", extra=""):
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
            f'fill="{fill}"{extra}>{escape(str(s))}</text>')


def axis_labels(rows, key, index):
    """A panel's axis labels, ordered by bench/sweep's sort key (then by name)."""
    seen = {}
    for r in rows:
        pl = r["p"].get("plot") or {}
        lab = pl.get(key, r["p"]["name"])
        seen.setdefault(lab, pl.get(index))
    return sorted(seen, key=lambda lab: (seen[lab] is None, seen[lab] or 0, str(lab)))


def render_svg(family, rows):
    """One family's heatmap: a panel per plot panel, cells at (x, y) of each point."""
    panels = {}
    for r in rows:
        panels.setdefault((r["p"].get("plot") or {}).get("panel", family), []).append(r)
    body, width, y0 = [], 0, 58
    # the legend: the colour scale and the grey of a point without a speed-up
    legend = []
    for i, v in enumerate((0.5, 0.71, 0.85, 1.0, 1.2, 1.41, 2.0)):
        fill, _ = colour(v)
        legend.append(f'<rect x="{10 + i * 44}" y="26" width="44" height="12" fill="{fill}"/>')
        legend.append(text(32 + i * 44, 50, f"{v:g}x", 9, "middle"))
    legend.append('<rect x="330" y="26" width="20" height="12" fill="#bdbdbd"/>')
    legend.append(text(355, 36, "x: no speed-up (not run, failed, no kernel)", 9))
    for name, prow in panels.items():
        xs, ys = axis_labels(prow, "x", "xi"), axis_labels(prow, "y", "yi")
        # room for the y labels, and for the first x label, which slants down to the left
        left = max(12 + CHAR_W * max(len(str(y)) for y in ys),
                   0.77 * CHAR_W * len(str(xs[0])) - CELL_W / 2 + 10)
        top = y0 + 24
        body.append(text(10, y0 + 14, name, 12, extra=' font-weight="bold"'))
        for j, ylab in enumerate(ys):
            body.append(text(left - 6, top + j * CELL_H + CELL_H / 2 + 4, ylab, 10, "end"))
        for r in prow:
            pl = r["p"].get("plot") or {}
            i, j = xs.index(pl.get("x", r["p"]["name"])), ys.index(pl.get("y", r["p"]["name"]))
            cx, cy = left + i * CELL_W, top + j * CELL_H
            tip = f"{r['p']['name']}: " + (f"{r['x']:.2f}x over {r['peer']}" if r["x"]
                                           else r["status"])
            if r["x"]:
                fill, dark = colour(r["x"])
                label, ink = f"{r['x']:.2f}", "#fff" if dark else "#222"
            else:
                fill, label, ink = "#bdbdbd", "x", "#444"
            body.append(f'<g><title>{escape(tip)}</title><rect x="{cx}" y="{cy}" '
                        f'width="{CELL_W - 2}" height="{CELL_H - 2}" fill="{fill}"/>'
                        + text(cx + (CELL_W - 2) / 2, cy + CELL_H / 2 + 3, label, 10, "middle",
                               ink) + "</g>")
        base = top + len(ys) * CELL_H + 4
        longest = max(len(str(x)) for x in xs)
        for i, xlab in enumerate(xs):
            x = left + i * CELL_W + CELL_W / 2
            body.append(text(x, base + 8, xlab, 10, "end",
                             extra=f' transform="rotate(-40 {x:.1f} {base + 8:.1f})"'))
        width = max(width, left + len(xs) * CELL_W + 20, 600)
        y0 = base + 16 + CHAR_W * 0.66 * longest + 10
    head = [text(10, 16, f"{family}: ktune's speed-up over the best PyTorch peer, same run", 13,
                 extra=' font-weight="bold"')]
    height = math.ceil(y0)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{math.ceil(width)}" '
            f'height="{height}" viewBox="0 0 {math.ceil(width)} {height}" '
            f'font-family="DejaVu Sans, Arial, sans-serif">\n'
            f'<rect width="100%" height="100%" fill="#fff"/>\n'
            + "\n".join(head + legend + body) + "\n</svg>\n")


# ---- the page ----

def fmt_copy(f):
    return "-" if f is None else f"{f:.0%}"


def axes_text(axes):
    return ", ".join(f"{k} {v}" for k, v in (axes or {}).items())


def stats(rows):
    xs = [r["x"] for r in rows if r["x"]]
    mem = [r for r in rows if r["p"].get("bound") == "memory" and r["copy"] is not None]
    return {"n": len(rows), "timed": len(xs), "geomean": report.geomean(xs),
            "worst": min(xs) if xs else None,
            "below_floor": [r for r in rows if r["x"] and r["x"] < TARGET_FLOOR],
            "below_one": [r for r in rows if r["x"] and r["x"] < 1.0],
            "mem": mem, "mem_low": [r for r in mem if r["copy"] < TARGET_COPY]}


def point_table(rows):
    out = []
    for r in rows:
        p = r["p"]
        peer = report.PEER_NAMES.get(r["peer"], r["peer"]) if r["peer"] else "-"
        out.append([p["name"], p.get("regime", "-"), axes_text(p.get("axes")),
                    p.get("dtype", "-"), p.get("bound", "-"), report.fmt_us(r["kt"]),
                    f"{peer} {report.fmt_us(r['peer_us'])}" if r["peer"] else "-",
                    report.fmt_x(r["x"]),
                    f"{fmt_copy(r['copy'])} / {fmt_copy(r['peer_copy'])}"
                    if p.get("bound") == "memory" else "compute-bound", r["status"]])
    return report.table(["point", "regime", "axes", "dtype", "bound", "ktune us",
                         "best peer us", "x best", "% of copy (ktune / peer)", "status"], out)


def explained(r, notes):
    n = notes.get(r["p"]["name"]) or {}
    what = (f"{r['x']:.2f}x {report.PEER_NAMES.get(r['peer'], r['peer'])}" if r["x"]
            else r["status"] + (f": {r['case']['ktune']['error']}" if r["case"] and
                                (r["case"].get("ktune") or {}).get("error") else ""))
    return (f"- **{r['p']['name']}** ({what}; {r['p'].get('regime', '-')}, "
            f"{axes_text(r['p'].get('axes'))}). Cause: {n.get('cause', 'not analysed yet')}. "
            f"Fix: {n.get('fix', 'not analysed yet')}.")


def render_md(r, rows, notes, ranks, fig_rel, sources):
    v, dev, prot = r.get("versions") or {}, r.get("device") or {}, r.get("protocol") or {}
    fams = [f for f in FAMILIES if any(x["p"]["family"] == f for x in rows)] + \
        sorted({x["p"]["family"] for x in rows} - set(FAMILIES))
    everything = stats(rows)
    gm = everything["geomean"]
    L = ["# Shape sweep: ktune against PyTorch by regime", "",
         f"<!-- Generated by bench/sweep_report.py from {sources}; edit that script or the "
         "notes file, not this file. -->", "",
         f"Measured {r.get('date', '?')} on **{dev.get('name', '?')}** "
         f"(sm {dev.get('capability', '?')}, {dev.get('sm_count', '?')} SMs), driver "
         f"{v.get('driver', '?')}; PyTorch {v.get('torch', '?')} (CUDA {v.get('torch_cuda', '?')}"
         f", cuDNN {v.get('cudnn', '?')}), Triton {v.get('triton', '?')}, libktune "
         f"{v.get('libktune', '?')}{report.commits_text(r)}. Data: {sources}.", "",
         "The grid is bench/sweep's (issue 22): the bench suite's op kinds over shapes chosen by "
         "regime (rows fewer than the SMs, one long row, many short ones, reductions over other "
         "axes than the last, broadcasts, prime and degenerate GEMM sizes, depthwise and dilated "
         "convolutions, long sequences), each point tuned with a short budget and timed against "
         "PyTorch eager, torch.compile and max-autotune by bench/harness.py in the same run. "
         "Speed-up: the fastest peer's median / ktune's median (above 1: ktune is faster).", "",
         "## Summary", ""]
    timed_ok = sum(x["status"] == "ok" for x in rows)
    L.append(f"- Points: {len(rows)} ("
             + ", ".join(f"{f} {sum(x['p']['family'] == f for x in rows)}" for f in fams)
             + f"); with a verified ktune kernel timed: {timed_ok}"
             + "".join(f"; {k}: {n}" for k, n in sorted(
                 {s: sum(x["status"] == s for x in rows) for s in {x["status"] for x in rows}
                  if s != "ok"}.items())) + ".")
    L.append(f"- Geometric-mean speed-up over the best peer: **{report.fmt_x(gm)}** over "
             f"{everything['timed']} points (target {TARGET_GEOMEAN}x: "
             f"{'met' if gm and gm >= TARGET_GEOMEAN else 'not met'})." if gm else
             "- No point has a speed-up: no geometric mean.")
    L.append(f"- Points below {TARGET_FLOOR}x the best peer: {len(everything['below_floor'])} "
             f"(target none); below 1.0x: {len(everything['below_one'])}, each listed with its "
             "cause and fix under \"Points below 1.0x\".")
    mem, mem_low = everything["mem"], everything["mem_low"]
    L.append(f"- Memory-bound points at {TARGET_COPY:.0%} of the copy bandwidth or more: "
             f"{len(mem) - len(mem_low)} of {len(mem)} timed (target all); the {len(mem_low)} "
             f"below are listed under \"Memory-bound points below {TARGET_COPY:.0%} of the copy "
             "bandwidth\".")
    copy = report.copy_text(r)
    L.append("- Copy bandwidth (a device-to-device copy of 1 GiB, bytes read + written / its "
             "median time), measured in the run that timed each point: "
             + (copy or "not measured") + ". A memory-bound point's fraction of it: its bytes "
             "(every input read once, every output written once) / the median time / its "
             "run's copy bandwidth.")
    batch = r.get("batch") or {}
    if batch.get("budget_total_s"):
        L.append(f"- Tuning: `ktune batch --budget-total {batch['budget_total_s']:g}`"
                 + (f", {batch['wall_s']:.0f} s of wall time." if batch.get("wall_s") is not None
                    else "."))
    L += ["", "| family | points | timed | geomean x best | worst | below "
          f"{TARGET_FLOOR}x | memory-bound below {TARGET_COPY:.0%} of copy |",
          "|---|---|---|---|---|---|---|"]
    for f in fams + ["all"]:
        s = stats([x for x in rows if f == "all" or x["p"]["family"] == f])
        L.append(f"| {f} | {s['n']} | {s['timed']} | {report.fmt_x(s['geomean'])} | "
                 f"{report.fmt_x(s['worst'])} | {len(s['below_floor'])} | "
                 f"{len(s['mem_low'])} of {len(s['mem'])} |")
    for f in fams:
        mine = [x for x in rows if x["p"]["family"] == f]
        s = stats(mine)
        L += ["", f"## {f}", "",
              f"![{f}: ktune's speed-up over the best peer per point]({fig_rel}/{f}.svg)", "",
              f"{s['n']} points, {s['timed']} timed; geometric mean {report.fmt_x(s['geomean'])}"
              f", worst {report.fmt_x(s['worst'])}. Times: medians in microseconds. % of copy: "
              "memory-bound points only, ktune's / the best peer's.", ""]
        L += point_table(mine)
    L += ["", "## Points below 1.0x", ""]
    below = sorted(everything["below_one"], key=lambda x: x["x"])
    L += [explained(x, notes) for x in below] or ["None."]
    L += ["", f"## Memory-bound points below {TARGET_COPY:.0%} of the copy bandwidth", "",
          "Lowest first. Small points cannot reach it (a launch and a few microseconds of "
          "latency against kilobytes), but are listed all the same.", ""]
    low = sorted(mem_low, key=lambda x: x["copy"])
    L += report.table(["point", "regime", "bytes", "ktune % of copy", "best peer % of copy",
                       "x best"],
                      [[x["p"]["name"], x["p"].get("regime", "-"), f"{x['p']['bytes']:,}",
                        fmt_copy(x["copy"]), fmt_copy(x["peer_copy"]), report.fmt_x(x["x"])]
                       for x in low]) if low else ["None."]
    missing = [x for x in rows if not x["x"] and x["status"] != "not run"]
    not_run = [x for x in rows if x["status"] == "not run"]
    L += ["", "## Points without a speed-up", "",
          "Checked out by bench/check_cases.py, or ktune without a verified kernel or a time:", ""]
    L += [explained(x, notes) for x in missing] or ["None."]
    if not_run:
        L += ["", f"Not run yet (absent from the results, {len(not_run)} points): "
              + ", ".join(f"`{x['p']['name']}`" for x in not_run) + "."]
    errs = [(x["p"]["name"], q, x["case"][q]["error"]) for x in rows if x["case"]
            for q, _ in report.PEERS if (x["case"].get(q) or {}).get("error")
            and not x["case"][q].get("not_run")]
    if errs:
        L += ["", "Peers that failed (the exception, first line):", ""]
        L += [f"- {n} / {q}: `{e}`" for n, q, e in errs]
    L += cost_rank_md(rows, ranks)
    L += ["", "## Protocol", "", prot.get("text", "(not recorded)") + ".", "",
          f"Reps: up to {prot.get('reps', '?')} or {prot.get('rep_seconds', '?')} s per "
          f"contender; warm-up {prot.get('warmup_ms', '?')} ms after the first call; L2 scrub "
          f"{(prot.get('scrub_bytes') or 0) >> 20} MiB; seed {prot.get('seed', '?')}.", "",
          f"Command: `{r.get('command', '?')}`", "",
          "## How to rerun", "",
          "On the GPU machine, from the repository root with dist-device/ built "
          "(scripts/device-build), the grid in N parts, each small enough for one device call "
          "(tuning is --budget seconds a point, timing the four contenders more); then this "
          "page from every part's grid and results (merged as bench/report.py --merged merges "
          "them):", "", "```",
          "bench/sweep --out /tmp/sweep1 --part 1/N     # ... --part N/N",
          "python3 bench/sweep_report.py --sweep /tmp/sweep*/sweep.json "
          "--results /tmp/sweep*/results.json --md docs/SWEEP.md", "```", ""]
    return "\n".join(L)


def load_cost_ranks(paths):
    """bench/cost_rank.py's per-case records of every file, by case name (the later file's on a
    repeat); {} without files."""
    out = {}
    for p in paths or []:
        try:
            with open(p) as f:
                cases = json.load(f)["cases"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise report.ReportError(f"{p}: not bench/cost_rank.py's output ({e})") from None
        out.update({c["name"]: c for c in cases})
    return out


def cost_rank_md(rows, ranks):
    """The cost model section: Spearman's rho of its estimates against the measured trials, per
    family and overall, and the worst first choices (bench/cost_rank.py)."""
    if not ranks:
        return []
    ranked = [(x["p"], ranks[x["p"]["name"]]) for x in rows
              if (ranks.get(x["p"]["name"]) or {}).get("rho") is not None]
    L = ["", "## The cost model on these shapes", "",
         "Spearman's rank correlation between the cost model's estimates and the measured "
         "medians of the candidates each point's search verified (bench/cost_rank.py, from the "
         "run's trial log; per kernel group, groups of 3 or more, weighted by candidates). The "
         "search measures what the model ranks high plus a spread over families, so this is "
         "the ordering within that range. Top-1 regret: the measured time of the model's first "
         "choice among them over the fastest (1.00x: its pick won).", ""]
    body = []
    for f in FAMILIES + ("all",):
        mine = [c for p, c in ranked if f == "all" or p["family"] == f]
        if not mine:
            continue
        rhos = sorted(c["rho"] for c in mine)
        regrets = sorted(c["top1_regret"] for c in mine)
        body.append([f, str(len(mine)), f"{statistics.median(rhos):+.2f}",
                     f"{sum(r > 0.5 for r in rhos)} of {len(rhos)}",
                     f"{statistics.median(regrets):.2f}x", f"{regrets[-1]:.2f}x"])
    L += report.table(["family", "points ranked", "median rho", "rho > 0.5",
                       "median top-1 regret", "worst"], body)
    worst = sorted(ranked, key=lambda pc: -pc[1]["top1_regret"])[:10]
    if worst:
        L += ["", "Largest top-1 regrets:", ""]
        L += [f"- {p['name']} ({p.get('regime', '-')}): rho {c['rho']:+.2f}, the model's pick "
              f"{c['top1_regret']:.2f}x the fastest over {c['pairs']} candidates" for p, c in worst]
    return L


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep", nargs="+", required=True, help="bench/sweep's sweep.json")
    ap.add_argument("--results", nargs="+", required=True,
                    help="bench/harness.py's results of the sweep (several: parts, merged)")
    ap.add_argument("--notes", help="cause/fix notes per point (default bench/sweep_notes.json "
                                    "when it exists)")
    ap.add_argument("--md", default="docs/SWEEP.md")
    ap.add_argument("--figures", help="the heatmaps' directory (default: sweep/ beside --md)")
    ap.add_argument("--cost-rank", nargs="+", help="bench/cost_rank.py's output of the parts")
    a = ap.parse_args()
    try:
        points = load_sweeps(a.sweep)
        r = report.merge([report.load(p) for p in a.results], a.results)
        notes = load_notes(a.notes or NOTES_DEFAULT, a.notes is not None)
        ranks = load_cost_ranks(a.cost_rank)
    except report.ReportError as e:
        print(f"sweep_report: {e}", file=sys.stderr)
        return 2
    md_dir = os.path.dirname(os.path.abspath(a.md))
    figures = os.path.abspath(a.figures or os.path.join(md_dir, "sweep"))
    os.makedirs(figures, exist_ok=True)
    rows = joined(points, r)
    for f in sorted({x["p"]["family"] for x in rows}):
        with open(os.path.join(figures, f + ".svg"), "w") as fh:
            fh.write(render_svg(f, [x for x in rows if x["p"]["family"] == f]))
    names = {p["name"] for p in points}
    extra = [c["name"] for c in r["cases"] if c["name"] not in names]
    sources = ", ".join(f"`{os.path.relpath(os.path.abspath(p))}`" for p in a.sweep + a.results)
    with open(a.md, "w") as fh:
        fh.write(render_md(r, rows, notes, ranks, os.path.relpath(figures, md_dir), sources))
    print(f"sweep_report: wrote {a.md} and {len({x['p']['family'] for x in rows})} heatmaps in "
          f"{os.path.relpath(figures)} ({len(rows)} points"
          + (f"; {len(extra)} results cases not in the sweep, left out" if extra else "") + ")")
    return 0


if __name__ == "__main__":
    sys.exit(main())
