#!/usr/bin/env python3
"""The bench cases' groups and work (issue 19): bench/harness.py's --group selection and batch
lines, bench/work.py's GEMM flops, weight bytes and decode class on the committed graphs and on
graphs made here, the harness's rate line, and bench/check_cases.py's group and flops checks.
No GPU, no torch, no ktune binary."""
import json
import os
import subprocess
import sys
import tempfile

root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
bench = os.path.join(root, "bench")
sys.path.insert(0, bench)
import check_cases  # noqa: E402
import harness  # noqa: E402
from work import case_work  # noqa: E402

failures = 0


def check(cond, what):
    global failures
    if not cond:
        print("FAIL:", what)
        failures += 1


def graph(name):
    with open(os.path.join(bench, "cases", name)) as f:
        return json.load(f)


# ---- bench/work.py on the committed graphs ----
lin = graph("linear_bf16.json")
w = case_work(lin, {"M": 4096, "N": 28672, "K": 4096})
check(w == {"flops": 2 * 4096 * 28672 * 4096, "weight_bytes": 28672 * 4096 * 2, "tokens": 4096,
            "kind": "gemm"}, f"gate+up at M=4096 is a GEMM of 2MNK flops: {w}")
for m, kind in ((1, "decode"), (16, "decode"), (64, "decode"), (65, "gemm")):
    w = case_work(lin, {"M": m, "N": 6144, "K": 4096})
    check(w["kind"] == kind and w["tokens"] == m and w["weight_bytes"] == 6144 * 4096 * 2,
          f"linear at M={m} is {kind}: {w}")
w = case_work(graph("llm_swiglu_mlp_bf16.json"), {"M": 4096, "N": 14336, "K": 4096})
check(w["flops"] == 2 * 2 * 4096 * 14336 * 4096 and w["weight_bytes"] == 2 * 14336 * 4096 * 2
      and w["kind"] == "gemm", f"SwiGLU: two GEMMs' flops, both weights: {w}")
w = case_work(graph("gemm_bf16.json"), {"M": 8192, "N": 8192, "K": 8192})
check(w == {"flops": 2 * 8192 ** 3, "weight_bytes": 0, "tokens": None, "kind": "gemm"},
      f"a plain GEMM has no weights and is never decode: {w}")
w = case_work(graph("deepbench_gemm_f16.json"), {"M": 7680, "N": 1, "K": 2560})
check(w["kind"] == "gemm", f"a GEMV without a const operand is rated as a GEMM: {w}")
w = case_work(graph("kb_l2_matmul_gelu_softmax.json"), {"B": 128})
check(w["flops"] == 2 * 128 * 10 * 100 and w["kind"] == "gemm", f"matmul then softmax: {w}")
for name, shapes in (("deepbench_conv3x3_f32.json", {"N": 16}),
                     ("attention_f16_full.json", {"B": 4, "H": 48, "S": 2048}),
                     ("llm_swiglu_bf16.json", {"M": 2048, "F": 8192})):
    w = case_work(graph(name), shapes)
    check(w["flops"] is None and w["kind"] is None, f"{name} is no GEMM case: {w}")

# ---- bench/work.py on graphs made here ----
g = {"inputs": {"x": {"dtype": "f16", "shape": [4, "S", 32]},
                "W": {"dtype": "f16", "shape": [1, 64, 32], "const": True}},
     "nodes": [{"out": "r", "op": "relu", "in": ["x"]},
               {"out": "y", "op": "matmul", "in": ["r", "W"], "transpose_b": True}],
     "outputs": ["y"]}
w = case_work(g, {"S": 8})
check(w == {"flops": 2 * 4 * 8 * 64 * 32, "weight_bytes": 64 * 32 * 2, "tokens": 32,
            "kind": "decode"}, f"a batched matmul after a pointwise op, broadcast weight: {w}")
g["nodes"][0] = {"out": "r", "op": "softmax", "in": ["x"], "axis": -1}
w = case_work(g, {"S": 8})
check(w["flops"] is None and w["kind"] is None, f"an operand not followed: no count: {w}")
g = {"inputs": {"W": {"dtype": "bf16", "shape": [16, 64], "const": True},
                "x": {"dtype": "bf16", "shape": [16, 3]}},
     "nodes": [{"out": "y", "op": "matmul", "in": ["W", "x"], "transpose_a": True}],
     "outputs": ["y"]}
w = case_work(g, {})
check(w == {"flops": 2 * 64 * 3 * 16, "weight_bytes": 16 * 64 * 2, "tokens": 3,
            "kind": "decode"}, f"W^T @ x: M from the transposed a, tokens are N: {w}")

# ---- the committed cases: groups, and work agreeing with them ----
cases = harness.load_cases(os.path.join(bench, "cases", "cases.jsonl"))
groups = {}
for c in cases:
    groups.setdefault(c.get("group"), []).append(c)
check(set(groups) == {"core", "gemm16", "llm_prefill", "llm_decode", "attention"},
      f"the groups of cases.jsonl: {sorted(map(str, groups))}")
check(len(groups.get("core", [])) == 21, "core: the 21 cases of issue 6")
kinds = {"gemm16": "gemm", "llm_prefill": "gemm", "llm_decode": "decode",
         "attention": None}  # (issue 20's: no GEMM count, no const weights)
for c in cases:
    if c.get("group") in kinds:
        with open(c["graph"]) as f:
            k = case_work(json.load(f), c["shapes"])["kind"]
        check(k == kinds[c["group"]], f"{c['name']} ({c['group']}) is rated as {k}")

# ---- harness: --group and --only ----
with tempfile.TemporaryDirectory(prefix="ktune-cases-") as tmp:
    path = os.path.join(tmp, "cases.jsonl")
    lines = [{"name": "a", "graph": "g.json", "source": "s", "group": "x"},
             {"name": "b", "graph": "g.json", "source": "s", "group": "y"},
             {"name": "c", "graph": "g.json", "source": "s", "group": "y"},
             {"name": "d", "graph": "g.json", "source": "s"}]
    with open(path, "w") as f:
        f.write("# a comment\n" + "".join(json.dumps(x) + "\n" for x in lines))

    def names(**kw):
        return [c["name"] for c in harness.load_cases(path, **kw)]

    check(names() == ["a", "b", "c", "d"], "no filter: every case, in file order")
    check(names(groups={"y"}) == ["b", "c"], "--group y")
    check(names(groups={"x", "y"}) == ["a", "b", "c"], "--group x,y")
    check(names(only={"a", "c"}, groups={"y"}) == ["c"], "--only and --group: both keep")
    for kw, want in (({"groups": {"z"}}, "no case in group z"),
                     ({"only": {"a"}, "groups": {"y"}}, "no case named with --only in group y")):
        try:
            harness.load_cases(path, **kw)
            check(False, f"{kw} should be refused")
        except harness.CasesError as e:
            check(want in str(e), f"{kw}: {e}")
    batch = [json.loads(x) for x in harness.batch_lines(harness.load_cases(path))]
    check(all("group" not in x and "source" not in x for x in batch),
          "the batch lines leave out the harness's keys (ktune batch refuses them)")
    with open(path, "a") as f:
        f.write(json.dumps({"name": "e", "graph": "g.json", "source": "s", "group": 3}) + "\n")
    try:
        harness.load_cases(path)
        check(False, "a group that is not a string should be refused")
    except harness.CasesError as e:
        check(":6:" in str(e) and "'group'" in str(e), f"bad group named with its line: {e}")
    p = subprocess.run([sys.executable, os.path.join(bench, "harness.py"), "--make-batch",
                        os.path.join(bench, "cases", "cases.jsonl"), "--group", "llm_decode"],
                       capture_output=True, text=True, env=dict(os.environ,
                                                                PYTHONDONTWRITEBYTECODE="1"))
    made = [json.loads(x)["name"] for x in p.stdout.splitlines()]
    check(p.returncode == 0 and made == [c["name"] for c in groups["llm_decode"]],
          f"--make-batch --group llm_decode: rc {p.returncode}, {made} {p.stderr}")

# ---- harness: the rate printed per case ----
rec = {"work": {"flops": 2 * 8192 ** 3, "weight_bytes": 0, "tokens": None, "kind": "gemm"},
       "ktune": {"time": {"median_us": 1500.0}}}
check(harness.rate_text(rec, "ktune") == "733 TFLOP/s", harness.rate_text(rec, "ktune"))
rec = {"work": {"flops": 2 * 6144 * 4096, "weight_bytes": 50331648, "tokens": 1,
                "kind": "decode"}, "ktune": {"time": {"median_us": 20.0}}, "copy_tb_s": 3.0}
check(harness.rate_text(rec, "ktune") == "2.52 TB/s (84% of copy)", harness.rate_text(rec, "ktune"))

# ---- check_cases: group required, flops cross-checked ----
problems = []
c = {"name": "n", "graph": "linear_bf16.json", "shapes": {"M": 1, "N": 2, "K": 3},
     "precision": "exact", "source": "s"}
check_cases.check_fields(c, "here", os.path.join(bench, "cases"), set(), problems)
check(any("'group'" in p for p in problems), f"a case without a group is a problem: {problems}")
problems = []
check_cases.check_fields(dict(c, group="a,b"), "here", os.path.join(bench, "cases"), set(),
                         problems)
check(any("'group'" in p for p in problems), f"a group with a comma is a problem: {problems}")
problems = []
check_cases.check_fields(dict(c, group="llm_decode"), "here", os.path.join(bench, "cases"),
                         set(), problems)
check(problems == [], f"a good case: {problems}")
lin_path = os.path.join(bench, "cases", "linear_bf16.json")
problems = []
check_cases.check_flops(lin_path, {"M": 1, "N": 2, "K": 3}, 12.0, "here", problems)
check(problems == [], f"2 * 1 * 2 * 3 flops agree: {problems}")
check_cases.check_flops(lin_path, {"M": 1, "N": 2, "K": 3}, 13.0, "here", problems)
check(len(problems) == 1 and "ktune check 13.0" in problems[0], f"a disagreement: {problems}")

if failures:
    sys.exit(1)
print("ok: bench cases' groups and work")
