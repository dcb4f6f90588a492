#!/usr/bin/env python3
"""bench/sweep (issue 22) without a GPU: its dry run writes the grid, and every point passes
bench/check_cases.py (ktune check and space keep a candidate, PyTorch maps every op); the grid
covers the regimes the issue names; --list and --part select deterministically; bad arguments
exit 2 with one line. Then bench/sweep_report.py on a small results file written here in
bench/harness.py's format for a few of the grid's points: that exercises the renderer only (the
times are made up), not a measurement. $KTUNE_BIN names the CLI (meson sets it); no torch."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sweep = os.path.join(root, "bench", "sweep")
report = os.path.join(root, "bench", "sweep_report.py")
MB = 1 << 20


def check(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)


def run(*args):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True)


env_bin = os.environ.get("KTUNE_BIN")
if not env_bin:
    sys.path.insert(0, os.path.join(root, "bench"))
    import cli  # noqa: E402
    env_bin = cli.ktune_cli(os.path.join(root, "bench"))
if not env_bin or not os.access(env_bin, os.X_OK):
    print("test_sweep: skipped: no ktune CLI (set KTUNE_BIN)")
    sys.exit(77)
os.environ["KTUNE_BIN"] = env_bin

tmp = tempfile.mkdtemp(prefix="ktune-sweep-")
out = os.path.join(tmp, "sweep")

# ---- the dry run: every point written and checked ----
r = run(sweep, "--dry-run", "--out", out)
check(r.returncode == 0, f"bench/sweep --dry-run exits 0: {r.returncode}\n{r.stdout}\n{r.stderr}")
with open(os.path.join(out, "sweep.json")) as f:
    s = json.load(f)
pts = s["points"]
check(len(pts) >= 150, f"at least 150 points: {len(pts)}")
check(s["cases_checked"], "the cases were checked (a ktune CLI was found)")
failed = [(p["name"], p["reason"]) for p in pts if p["status"] != "checked"]
check(not failed, f"every point passes bench/check_cases.py: {failed[:5]}")
with open(os.path.join(out, "graphs", "cases.jsonl")) as f:
    cases = [json.loads(line) for line in f if line.strip()]
check([c["name"] for c in cases] == [p["name"] for p in pts], "one case a point, in order")
for c, p in zip(cases, pts):
    check(c["group"] == "sweep_" + p["family"] and c["precision"] == "exact" and c["notes"]
          and c["source"] == "bench/sweep grid (issue 22)", f"{c['name']}: case fields")
    check(c["name"].startswith("sw_" + p["family"] + "_") and len(c["name"]) <= 63,
          f"{c['name']}: sw_<family>_..., at most 63 bytes")
    check(os.path.isfile(os.path.join(out, "graphs", c["graph"])), f"{c['name']}: its graph")
    check(p["bytes"] <= 2 * 1024 * MB, f"{p['name']}: {p['bytes']} bytes, over 2 GiB")
    check(p["bound"] in ("memory", "compute") and p["regime"] and p["axes"],
          f"{p['name']}: bound, regime, axes")
for line in ("row: ", "gemm: ", "conv: ", "attention: ", "pointwise: "):
    check(line in r.stdout, f"the per-family summary names '{line}': {r.stdout[-600:]}")

fam = {f: [p for p in pts if p["family"] == f]
       for f in ("row", "pointwise", "gemm", "conv", "attention")}
check(all(fam.values()), f"every family present: { {k: len(v) for k, v in fam.items()} }")


def has(family, what, cond):
    check(any(cond(p) for p in fam[family]), f"{family}: {what}")


# row ops: one row of 16M or more, 1M rows of 64, both dtypes, every op, other axes
has("row", "one row of >= 16M elements",
    lambda p: p["axes"].get("rows") == 1 and p["axes"].get("cols", 0) >= 16 * MB)
has("row", ">= 1M rows x 64",
    lambda p: p["axes"].get("rows", 0) >= MB and p["axes"].get("cols") == 64)
has("row", "bf16", lambda p: p["dtype"] == "bf16")
has("row", "f32", lambda p: p["dtype"] == "f32")
has("row", "rows fewer than the SMs", lambda p: p["regime"] == "rows<SMs")
check({p["op"] for p in fam["row"]} >= {"softmax", "log_softmax", "layernorm", "rmsnorm", "sum",
                                         "mean", "max", "logsumexp"}, "every row op")
has("row", "a reduction over the first axis",
    lambda p: p["regime"] == "first-axis" and p["op"] in ("sum", "mean", "max"))
has("row", "a reduction over a middle axis",
    lambda p: p["regime"] == "middle-axis" and p["op"] in ("sum", "mean", "max"))
has("row", "a normalisation over several trailing axes",
    lambda p: p["regime"] == "trailing-axes" and p["op"] in ("layernorm", "rmsnorm"))
# pointwise: 4 KB to 512 MB and more, every broadcast
has("pointwise", "at most 4 KB", lambda p: p["bytes"] <= 4096)
has("pointwise", "at least 512 MB", lambda p: p["bytes"] >= 512 * MB)
check({p["regime"] for p in fam["pointwise"]} >= {"row-broadcast", "col-broadcast", "scalar"},
      "row, column and scalar broadcasts")


def prime(n):
    return n > 2 and all(n % d for d in range(2, int(n ** 0.5) + 1))


# GEMMs
has("gemm", "a prime dimension",
    lambda p: any(prime(p["axes"][d]) for d in ("M", "N", "K")))
has("gemm", "M = 1", lambda p: p["axes"]["M"] == 1)
has("gemm", "a dimension of 16384", lambda p: 16384 in p["axes"].values())
for dt in ("f16", "bf16", "f32"):
    has("gemm", dt, lambda p, dt=dt: p["dtype"] == dt)
has("gemm", "an epilogue", lambda p: p["op"] != "matmul")
has("gemm", "no epilogue", lambda p: p["op"] == "matmul")
big_f32 = [p["name"] for p in fam["gemm"]
           if p["dtype"] == "f32" and min(p["axes"].values()) >= 8192]
check(len(big_f32) <= 1, f"at most one f32 GEMM with every dimension >= 8k: {big_f32}")
heavy = [p["name"] for p in pts if p["flops"] > 1.2e12]
check(len(heavy) <= 3, f"a handful of points over ~1e12 flops at most: {heavy}")
# convolutions
has("conv", "depthwise",
    lambda p: p["axes"]["groups"] > 1 and p["axes"]["groups"] == p["axes"]["C"]
    == p["axes"]["O"])
has("conv", "stride 4", lambda p: p["axes"]["stride"] == 4)
has("conv", "dilation > 1", lambda p: p["axes"]["dilation"] > 1)
has("conv", "kernel 11", lambda p: p["axes"]["k"] == "11")
has("conv", "3 channels", lambda p: p["axes"]["C"] == 3)
has("conv", "512 channels", lambda p: p["axes"]["C"] == 512)
# attention
for seq in (128, 16384):
    has("attention", f"sequence length {seq}", lambda p, seq=seq: p["axes"]["S"] == seq)
has("attention", "causal", lambda p: p["regime"] == "causal")
has("attention", "not causal", lambda p: p["regime"] == "full")

# ---- --list and --part: the same grid every time, parts slice it ----
lst = run(sweep, "--list")
check(lst.returncode == 0, f"--list exits 0: {lst.stderr}")
names = [ln.split()[0] for ln in lst.stdout.splitlines() if ln.startswith("sw_")]
check(names == [p["name"] for p in pts], "--list prints the dry run's points, in its order")
parts = []
for i in (1, 2, 3):
    pr = run(sweep, "--list", "--part", f"{i}/3")
    parts += [ln.split()[0] for ln in pr.stdout.splitlines() if ln.startswith("sw_")]
check(parts == names, "--part 1/3, 2/3, 3/3 are consecutive slices that make the whole grid")
conv = run(sweep, "--list", "--families", "conv,attention")
check(all(ln.split()[1] in ("conv", "attention") for ln in conv.stdout.splitlines()
          if ln.startswith("sw_")), "--families keeps those families only")
only = run(sweep, "--list", "--only", f"{names[5]},{names[0]}")
check([ln.split()[0] for ln in only.stdout.splitlines() if ln.startswith("sw_")]
      == [names[0], names[5]], "--only keeps the named points, in the grid's order")
run(sweep, "--list", "--out", os.path.join(tmp, "listed"))
check(not os.path.exists(os.path.join(tmp, "listed")), "--list writes nothing")

# ---- bad arguments: exit 2, one line ----
for bad in (["--out", out, "--part", "0/3"], ["--out", out, "--part", "4/3"],
            ["--out", out, "--part", "x"], ["--out", out, "--families", "row,nope"],
            ["--out", out, "--budget", "0"], ["--dry-run"], ["--out", out, "--bogus"],
            ["--out", out, "--only", "sw_nope"], ["--out", out, "--only", names[0], "--part", "1/2"]):
    b = run(sweep, *bad)
    lines = b.stderr.strip().splitlines()
    check(b.returncode == 2 and len(lines) == 1 and lines[0].startswith("bench/sweep: "),
          f"bench/sweep {' '.join(bad)}: exit 2 with one line: {b.returncode} {b.stderr!r}")

# ---- the report, on made-up times for a few points (the renderer only) ----
by = {p["name"]: p for p in pts}
picks = {  # point: (ktune us, best peer us) or None (no kernel)
    next(p["name"] for p in fam["row"] if p["regime"] == "rows<SMs"): (80.0, 60.0),   # 0.75x
    next(p["name"] for p in fam["row"] if p["regime"] == "first-axis"): (50.0, 49.0),  # 0.98x
    next(p["name"] for p in fam["pointwise"] if p["bytes"] >= 512 * MB): (400.0, 440.0),
    next(p["name"] for p in fam["gemm"] if p["axes"]["M"] == 1): (20.0, 30.0),
    next(p["name"] for p in fam["conv"] if p["regime"] == "depthwise"): None,
    next(p["name"] for p in fam["attention"] if p["axes"]["S"] == 16384): (900.0, 1000.0),
}


def timing(us):
    return {"median_us": us, "p10_us": us * 0.99, "p90_us": us * 1.01, "reps": 50}


rcases = []
for name, t in picks.items():
    c = {"name": name, "group": "sweep_" + by[name]["family"], "shapes": {}, "precision": "exact",
         "source": "synthetic", "graph": by[name]["graph"], "copy_tb_s": 3.0}
    if t is None:
        c.update(status="kernel missing", speedup=None,
                 ktune={"error": "KtuneError: no cached kernel", "missing": True})
        for q in ("eager", "compile", "max_autotune"):
            c[q] = {"time": timing(100.0)}
    else:
        kt, peer = t
        c.update(status="ok", ktune={"family": "row", "ok": True, "time": timing(kt)},
                 eager={"time": timing(peer * 1.5)}, compile={"time": timing(peer)},
                 max_autotune={"time": timing(peer * 1.2)},
                 speedup={"best_peer": "compile", "over_best_peer": peer / kt})
    rcases.append(c)
results = {"schema": "ktune-bench/1", "date": "2026-11-29T00:00:00Z", "command": "synthetic",
           "device": {"name": "synthetic GPU", "capability": "9.0", "sm_count": 132},
           "versions": {"commit": "0123abc"}, "protocol": {"text": "synthetic", "reps": 50},
           "copy_bandwidth": {"bytes": 1 << 30, "tb_s": 3.0}, "cases": rcases}
rpath, npath = os.path.join(tmp, "results.json"), os.path.join(tmp, "notes.json")
with open(rpath, "w") as f:
    json.dump(results, f)
slow = list(picks)[0]
with open(npath, "w") as f:
    json.dump({slow: {"cause": "one block a row leaves SMs idle",
                      "fix": "split each row across a cluster"}}, f)
# bench/cost_rank.py's output for two of them (its own test ranks real trial logs)
cpath = os.path.join(tmp, "cost_rank.json")
ranked = [n for n, t in picks.items() if t is not None][:2]
with open(cpath, "w") as f:
    json.dump({"cases": [{"name": ranked[0], "rho": 0.8, "top1_regret": 1.0, "pairs": 12},
                         {"name": ranked[1], "rho": 0.2, "top1_regret": 1.3, "pairs": 5}]}, f)
md = os.path.join(tmp, "docs", "SWEEP.md")
rep = run(report, "--sweep", os.path.join(out, "sweep.json"), "--results", rpath,
          "--notes", npath, "--md", md, "--cost-rank", cpath)
check(rep.returncode == 0, f"sweep_report exits 0: {rep.stdout}{rep.stderr}")
with open(md) as f:
    text = f.read()
for family in fam:
    svg = os.path.join(tmp, "docs", "sweep", family + ".svg")
    check(f"](sweep/{family}.svg)" in text, f"the page embeds sweep/{family}.svg")
    tree = ET.parse(svg)  # raises on malformed XML
    rects = tree.getroot().findall(".//{http://www.w3.org/2000/svg}rect")
    check(len(rects) > len(fam[family]), f"{family}.svg: a cell per point, and the legend")
    check(any(t.text == "x" for t in tree.getroot().iter("{http://www.w3.org/2000/svg}text")),
          f"{family}.svg: points without a speed-up drawn with an x")
below = text.split("## Points below 1.0x", 1)[1].split("\n## ", 1)[0]
first_axis = list(picks)[1]
check(f"**{slow}** (0.75x compile" in below and "one block a row leaves SMs idle" in below
      and "split each row across a cluster" in below, "a point below 1.0x with its note")
check(f"**{first_axis}** (0.98x compile" in below and "Cause: not analysed yet" in below,
      "a point below 1.0x without a note: not analysed yet")
check(below.count("- **") == 2, "only the points below 1.0x are listed there")
missing = text.split("## Points without a speed-up", 1)[1]
check("kernel missing" in missing and "Not run yet (absent from the results" in missing,
      "points without a speed-up listed, those not run in one line")
check("3.00 TB/s" in text, "the run's copy bandwidth")
pw = list(picks)[2]
frac = by[pw]["bytes"] / 400e-6 / 3e12
check(f"| {pw} |" in text and f"{frac:.0%} / " in text, "a memory-bound point's copy fraction")
check("Points below 0.97x the best peer: 1 " in text, "the count below 0.97x")
model = text.split("## The cost model on these shapes", 1)[1].split("\n## ", 1)[0]
check("| all | 2 | +0.50 | 1 of 2 | 1.15x | 1.30x |" in model and
      f"- {ranked[1]} (" in model and "1.30x the fastest over 5 candidates" in model,
      "the cost model's rank correlation, overall and the worst first choice: " + model)
shutil.rmtree(tmp)
print(f"test_sweep: {len(pts)} points checked; report rendered ({len(text)} bytes)")
