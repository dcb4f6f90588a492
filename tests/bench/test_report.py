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
print("ok: bench/report.py names the commits of merged parts")
