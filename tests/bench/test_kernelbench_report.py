#!/usr/bin/env python3
"""bench/kernelbench_report.py on a small synthetic run: coverage per level, fast_p against each
peer at p = 0 and 1 (worked out by hand below), the geometric mean over eager, the targets, the
TODO line of a slow problem without a note, the figure, and a dry run (no results: coverage
only). No GPU, no torch; the figure is checked only where matplotlib is installed."""
import copy
import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
script = os.path.join(root, "bench", "kernelbench_report.py")
sys.path.insert(0, os.path.join(root, "bench"))
import kernelbench_report as kbr  # noqa: E402


def check(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)


def timing(us):
    return {"median_us": us, "p10_us": us * 0.99, "p90_us": us * 1.01, "reps": 100}


def case(name, level, kt, peers, ok=True, elapsed=10.0, family="gemm"):
    """A results case as bench/harness.py writes it: peers {peer: median us, or None: it
    failed}; speed-ups as the harness computes them (peer median / ktune median)."""
    c = {"name": name, "group": f"kernelbench_level{level}", "shapes": {}, "precision": "exact",
         "source": "synthetic", "graph": f"graphs/level{level}/{name}.json",
         "tuning": {"elapsed_s": elapsed, "joined": False, "family": family},
         "ktune": {"family": family, "tolerance": 1e-3, "ok": ok, "time": timing(kt),
                   "errors": {"out": {"err": 2e-6 if ok else 0.5, "finite": True}}}}
    for p, us in peers.items():
        c[p] = ({"time": timing(us), "errors": {"out": {"err": 1e-6, "finite": True}}}
                if us is not None else {"error": "RuntimeError: synthetic failure"})
    c["status"] = "ok" if ok else "wrong"
    if ok:
        timed = {p: us for p, us in peers.items() if us is not None}
        best = min(timed, key=timed.get)
        c["speedup"] = {p: (us / kt if us is not None else None) for p, us in peers.items()}
        c["speedup"].update(best_peer=best, over_best_peer=timed[best] / kt)
    else:
        c["speedup"] = None
    return c


def prob(level, number, stem, status, reason=None, with_case=True):
    p = {"level": level, "number": number, "name": stem,
         "file": f"/kb/KernelBench/level{level}/{stem}.py", "status": status, "reason": reason}
    if status in ("captured", "check_failed") and with_case:
        p["case"] = f"kb{level}_{number}_{stem.split('_', 1)[1].lower()}"
    return p


P = ("eager", "compile", "max_autotune")
kb = {"kernelbench": "/kb", "kernelbench_commit": "0123456789abcdef0123456789abcdef01234567",
      "levels": [1, 2], "precision": "exact", "mode": "run", "problems": [
          # level 2 first: the report sorts
          prob(2, 1, "1_Gemm_ReLU", "captured"),
          prob(2, 2, "2_Check_Fail", "check_failed",
               "ktune check fails: ktune: /o/graphs/level2/2_Check_Fail.json: node 3 (conv3d -> "
               "y): unknown op: 'conv3d' is not an op"),
          prob(2, 3, "3_Cumsum_Again", "capture_failed",
               "ktune.capture: unsupported op aten.cumsum at 3_Cumsum_Again.py:20 (in forward)"),
          prob(2, 4, "4_Compile_Fails", "captured"),
          prob(1, 1, "1_Fast_One", "captured", with_case=False),  # named as bench/kernelbench does
          prob(1, 2, "2_Slow_Vs_Compile", "captured"),
          prob(1, 3, "3_Cumsum", "capture_failed",
               "ktune.capture: unsupported op aten.cumsum at 3_Cumsum.py:12 (in forward)"),
          prob(1, 4, "4_Wrong", "captured")]}
results = {"schema": "ktune-bench/1", "date": "2026-11-28T00:00:00Z", "command": "bench/run x",
           "device": {"name": "Synthetic GPU", "capability": "9.0", "sm_count": 132},
           "versions": {"torch": "2.11", "commit": "abc1234"},
           "protocol": {"text": "synthetic", "reps": 100, "scrub": "write+read",
                        "scrub_bytes": 256 << 20},
           "batch": {"wall_s": 123.4, "budget_total_s": 200.0},
           "cases": [
               # faster than every peer: x eager 3.0, compile 2.5, max-autotune (best) 2.0
               case("kb1_1_fast_one", 1, 10.0, dict(zip(P, (30.0, 25.0, 20.0))), elapsed=12.5),
               # slower than compile: x eager 1.5, compile (best) 0.8, max-autotune 1.2
               case("kb1_2_slow_vs_compile", 1, 10.0, dict(zip(P, (15.0, 8.0, 12.0)))),
               # ktune's result not ok
               case("kb1_4_wrong", 1, 5.0, dict(zip(P, (10.0, 10.0, 10.0))), ok=False),
               # x eager 4.0, compile 1.2, max-autotune (best) 0.9; noted
               case("kb2_1_gemm_relu", 2, 10.0, dict(zip(P, (40.0, 12.0, 9.0)))),
               # torch.compile failed: not fast against it; x eager (best) 0.5, max-autotune 2.0
               case("kb2_4_compile_fails", 2, 10.0, dict(zip(P, (5.0, None, 20.0))))]}
notes = {"kb2_1_gemm_relu": {"why": "synthetic why", "fix": "synthetic fix"}}

# ---- the numbers, from the module ----
probs = kbr.problems_of(kb, results)
check([(x["level"], x["number"]) for x in probs] == [(1, 1), (1, 2), (1, 3), (1, 4), (2, 1),
                                                     (2, 2), (2, 3), (2, 4)], "sorted problems")
check(probs[0]["case"] == "kb1_1_fast_one" and probs[0]["ok"],
      "a problem without 'case' is named as bench/kernelbench names it: " + probs[0]["case"])
L1 = [x for x in probs if x["level"] == 1]
L2 = [x for x in probs if x["level"] == 2]
# by hand: level 1 has 4 problems, 2 verified (x eager 3.0, 1.5; compile 2.5, 0.8; best 2.0, 0.8)
want = {(1, "eager", 0): 2 / 4, (1, "eager", 1): 2 / 4, (1, "compile", 0): 2 / 4,
        (1, "compile", 1): 1 / 4, (1, "best", 0): 2 / 4, (1, "best", 1): 1 / 4,
        # level 2: 4 problems, 2 verified (x eager 4.0, 0.5; compile 1.2, failed; best 0.9, 0.5)
        (2, "eager", 0): 2 / 4, (2, "eager", 1): 1 / 4, (2, "compile", 0): 1 / 4,
        (2, "compile", 1): 1 / 4, (2, "best", 0): 2 / 4, (2, "best", 1): 0 / 4}
for (lv, peer, p), v in want.items():
    got = kbr.fast_p(L1 if lv == 1 else L2, peer, p)
    check(got is not None and abs(got - v) < 1e-12, f"fast_{p} level {lv} vs {peer}: {got} != {v}")
gm1, n1 = kbr.geomean_eager(L1)
gm2, n2 = kbr.geomean_eager(L2)
check(n1 == 2 and abs(gm1 - math.sqrt(3.0 * 1.5)) < 1e-12, f"geomean level 1: {gm1}")
check(n2 == 2 and abs(gm2 - math.sqrt(4.0 * 0.5)) < 1e-12, f"geomean level 2: {gm2}")

# ---- the page and the figure ----
have_mpl = importlib.util.find_spec("matplotlib") is not None
with tempfile.TemporaryDirectory() as tmp:
    kb_path, res_path = os.path.join(tmp, "kernelbench.json"), os.path.join(tmp, "results.json")
    notes_path = os.path.join(tmp, "notes.json")
    for path, obj in ((kb_path, kb), (res_path, results), (notes_path, notes)):
        with open(path, "w") as f:
            json.dump(obj, f)
    md = os.path.join(tmp, "out", "KERNELBENCH.md")

    def run(*args):
        r = subprocess.run([sys.executable, script, *args], capture_output=True, text=True,
                           env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
        check(r.returncode == 0, f"{args}: exit {r.returncode}: {r.stderr}")
        with open(args[-1]) as f:
            return f.read()

    text = run(kb_path, res_path, "--notes", notes_path, "--md", md)
    again = run(kb_path, res_path, "--notes", notes_path, "--md", md)
    check(text == again, "the page is the same on a second run")
    for line, what in (
            ("KernelBench commit **0123456789abcdef0123456789abcdef01234567**", "the commit"),
            ("**Synthetic GPU**", "the device"),
            ("| 1 | 4 | 3 (75.0%) | 3 (75.0%) | 2 (50.0%) |", "level 1's coverage"),
            ("| 2 | 4 | 3 (75.0%) | 2 (50.0%) | 2 (50.0%) |", "level 2's coverage"),
            ("| all | 8 | 6 (75.0%) | 5 (62.5%) | 4 (50.0%) |", "the coverage's total"),
            ("| capture_failed | 1 | 1 | 2 |", "capture failures per level"),
            ("| check_failed | 0 | 1 | 1 |", "check failures per level"),
            ("| wrong | 1 | 0 | 1 |", "wrong kernels per level"),
            ("| unsupported op aten.cumsum | capture_failed | 2 | 1/3, 2/3 |",
             "one reason for two problems, their source lines left out"),
            ("| 1 | eager | 50.0% | 50.0% | 25.0% | 25.0% | 0.0% |", "fast_p level 1 vs eager"),
            ("| 1 | torch.compile | 50.0% | 25.0% | 25.0% | 25.0% | 0.0% |",
             "fast_p level 1 vs compile"),
            ("| 1 | best of eager / compile / max-autotune | 50.0% | 25.0% | 25.0% | 0.0% | 0.0% |",
             "fast_p level 1 vs the best peer (2.0 is not more than 2)"),
            ("| 2 | eager | 50.0% | 25.0% | 25.0% | 25.0% | 0.0% |", "fast_p level 2 vs eager"),
            ("| 2 | torch.compile | 25.0% | 25.0% | 0.0% | 0.0% | 0.0% |",
             "fast_p level 2 vs compile (failed: not fast)"),
            ("| 2 | best of eager / compile / max-autotune | 50.0% | 0.0% | 0.0% | 0.0% | 0.0% |",
             "fast_p level 2 vs the best peer"),
            ("| 1 | 50.0% (2/4): not met | 25.0% (1/4): not met | 2.12x over 2: met |",
             "level 1 against the targets"),
            ("| 2 | 25.0% (1/4): not met | 0.0% (0/4): not met | 1.41x over 2: not met |",
             "level 2 against the targets"),
            ("| 1 | 3 | 3 | 32.5 | 10.8 | 0 |", "level 1's tuning seconds (12.5 + 10 + 10)"),
            ("| ktune check fails: node (conv3d): unknown op: 'conv3d' is not an op | check_failed "
             "| 1 | 2/2 |", "a check failure's reason, its file and node number left out"),
            ("| the kernel's error is above its tolerance | wrong | 1 | 1/4 |", "a wrong kernel"),
            ("took 123 s of wall time", "the batch wall time"),
            ("| 1 | 1 | Fast_One | 10.0 | 30.0 | 25.0 | 20.0 | 3.00x | 2.00x (max-autotune) | "
             "2.0e-06 | 12.5 | gemm | ok |", "a problem's row"),
            ("| 2 | 4 | Compile_Fails | 10.0 | 5.0 | fails | 20.0 | 0.50x | 0.50x (eager) |",
             "a failed peer's cell"),
            ("| 1 | 3 | Cumsum | - | - | - | - | - | - | - | - | - | capture_failed |",
             "an uncaptured problem's row"),
            ("- **kb1_2_slow_vs_compile** (level 1 #2, 0.80x compile). TODO: no note in",
             "the TODO line of a slow problem without a note"),
            ("- **kb2_1_gemm_relu** (level 2 #1, 0.90x max-autotune). Why: synthetic why. "
             "What would fix it: synthetic fix.", "a noted slow problem"),
            ("- **kb1_4_wrong** (level 1 #4, wrong: error 5.0e-01 above the tolerance 1.0e-03)",
             "a problem whose kernel is wrong"),
            ("![fast_p per level", "the figure's link")):
        check(line in text, f"{what}: no '{line}' in\n{text}")
    check("kb1_1_fast_one**" not in text, "a problem faster than every peer is not listed")
    check("Nothing was timed" not in text, "a timed run says nothing of a dry run")
    png = os.path.join(tmp, "out", "KERNELBENCH.png")
    if have_mpl:
        check(os.path.getsize(png) > 1000, "the figure is written beside the page")
    else:
        print("note: no matplotlib: the figure is not checked")

    # ---- a dry run: no results ----
    dry_md = os.path.join(tmp, "dry", "KERNELBENCH.md")
    dry = run(kb_path, "--notes", notes_path, "--md", dry_md)
    check("Nothing was timed" in dry, "the dry run says nothing was timed")
    check("| 1 | 4 | 3 (75.0%) | 3 (75.0%) | - |" in dry, "the dry run's coverage")
    check("| unsupported op aten.cumsum | capture_failed | 2 | 1/3, 2/3 |" in dry,
          "the dry run's reasons")
    check("fast_p" not in dry and "TODO" not in dry, "no speed-ups in a dry run")
    check("| 1 | 1 | Fast_One | captured |" in dry, "the dry run's problem rows")
    check(not os.path.exists(os.path.join(tmp, "dry", "KERNELBENCH.png")), "no figure in a dry run")

    # ---- a bad input ----
    bad = copy.deepcopy(kb)
    bad["problems"][0]["status"] = "exploded"
    with open(kb_path, "w") as f:
        json.dump(bad, f)
    r = subprocess.run([sys.executable, script, kb_path, "--md", dry_md], capture_output=True,
                       text=True)
    check(r.returncode == 2 and "unknown status 'exploded'" in r.stderr,
          f"an unknown status is refused: {r.returncode} {r.stderr}")
print("ok: bench/kernelbench_report.py counts coverage, fast_p and the geometric mean per level")
