#!/usr/bin/env python3
"""bench/report.py: merging parts keeps each part's commit, and the report names the commits of
parts measured at different commits (and one commit when they agree), a case measured again
under the later part's commit. Builds its parts from a committed results file, so the rendering
runs on real data; no GPU, no torch, no matplotlib."""
import copy
import json
import os
import sys

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(root, "bench"))
import report  # noqa: E402

src = os.path.join(root, "bench", "results", "h100-2026-11-22-late.json")
with open(src) as f:
    full = json.load(f)


def part(commit, cases):
    p = copy.deepcopy(full)
    p.pop("parts", None)
    p["versions"]["commit"] = commit
    p["cases"] = [c for c in full["cases"] if c["name"] in cases]
    return p


def check(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)


names = [c["name"] for c in full["cases"]]
a, b = part("aaaaaaa", names[:2]), part("bbbbbbb", names[2:3])
merged = report.merge([a, b], ["a.json", "b.json"])
check([p["commit"] for p in merged["parts"]] == ["aaaaaaa", "bbbbbbb"], "parts keep their commits")
text = report.commits_text(merged)
check(text == f", commits aaaaaaa (2 cases: {names[0]}, {names[1]}); bbbbbbb (1 cases: {names[2]})",
      "two commits named with their cases: " + text)
md = report.render_md(merged, "benchmarks.png", {}, "merged.json")
check(text in md, "the report's header names both commits")
same = report.merge([part("ccccccc", names[:1]), part("ccccccc", names[1:2])], ["c1", "c2"])
check(report.commits_text(same) == ", commit ccccccc", "one commit when the parts agree")
check(report.commits_text(part("ddddddd", names[:1])) == ", commit ddddddd", "an unmerged file")
# a case measured again by a later part counts under that part's commit only
again = report.merge([a, part("eeeeeee", names[1:2])], ["a.json", "e.json"])
check(report.commits_text(again) == f", commits aaaaaaa (1 cases: {names[0]}); eeeeeee (1 cases: "
      f"{names[1]})", "a re-measured case under the later commit: " + report.commits_text(again))
check(again["parts"][0]["superseded"] == [names[1]], "the earlier part lists it as superseded")
# a merged file merged again stands for its parts: their commits survive
twice = report.merge([merged, part("ggggggg", names[3:4])], ["m.json", "g.json"])
check([p["commit"] for p in twice["parts"]] == ["aaaaaaa", "bbbbbbb", "ggggggg"],
      "a merged input is expanded into its parts: " + str([p["commit"] for p in twice["parts"]]))
check(len(twice["cases"]) == 4 and twice["parts"][0]["cases"] == names[:2],
      "each expanded part keeps its cases")

# ---- rates (issue 19): TFLOP/s of GEMM cases, decode cases against the run's copy bandwidth ----
gemm = next(c for c in full["cases"] if c["name"] == "kb1_matmul_square_2048")
old = report.render_md(part("fffffff", [gemm["name"]]), "b.png", {}, "old.json")
kt = gemm["ktune"]["time"]["median_us"]
tf = 2 * 2048 ** 3 / (kt * 1e-6) / 1e12
check("## Throughput" in old and f"{report.fmt_us(kt)} us: {tf:.0f} TFLOP/s" in old,
      "an old results file: the GEMM case's TFLOP/s from its graph file, next to its time")
check("Copy bandwidth" not in old, "no copy bandwidth line when the run measured none")
dec = copy.deepcopy(gemm)
dec.update(name="decode_case", copy_tb_s=3.0,
           work={"flops": 2 * 6144 * 4096, "weight_bytes": 50331648, "tokens": 1,
                 "kind": "decode"})
dec["ktune"]["time"]["median_us"] = 19.0
dec["ktune"]["family"] = "gemm"
for p in ("eager", "compile", "max_autotune"):
    dec[p]["time"]["median_us"] = 25.0
run1 = part("1111111", [])
run1["cases"] = [dec]
run1["copy_bandwidth"] = {"bytes": 1 << 30, "tb_s": 3.0}
run2 = part("1111111", [gemm["name"]])
run2["copy_bandwidth"] = {"bytes": 1 << 30, "tb_s": 2.9}
m = report.merge([run1, run2], ["r1.json", "r2.json"])
md = report.render_md(m, "b.png", {}, "m.json")
check("19.0 us: 2.65 TB/s, 88% of copy" in md, "ktune's decode rate, a fraction of its run's copy")
check("25.0 us: 2.01 TB/s, 67% of copy" in md, "a peer's decode rate")
check("2.90-3.00 TB/s over 2 runs" in md, "the copy bandwidth of each merged part")
check("at 85% of the copy bandwidth or more: 1 of 1 (decode_case 88%)" in md,
      "the decode target's count")
check("own (a family other than library, i.e. cuBLASLt) in 2" in md, "own kernels counted")
check("| decode_case | decode | 50.3 MB of weights, 1 token rows |" in md, "the decode row")
check("| decode_case | - |" in md, "the case list's group column")
# parts scrubbed another way (results before the scrub's kind was recorded: a write alone) are
# not one benchmark
clean = part("2222222", names[3:4])
clean["protocol"]["scrub"] = "write+read"
try:
    report.merge([a, clean], ["a.json", "clean.json"])
    check(False, "parts of another scrub merged")
except report.ReportError as e:
    check("another protocol" in str(e), "the scrub's kind is part of the protocol: " + str(e))
print("ok: bench/report.py names the commits of merged parts and rates GEMM and decode cases")
