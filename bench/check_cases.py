#!/usr/bin/env python3
"""Checks the benchmark cases (bench/cases/cases.jsonl) without a GPU and without PyTorch.

    bench/check_cases.py [--ktune PATH] [--min-cases N] [CASES.jsonl]

Every line (blank lines and lines starting with # are skipped) must be a JSON object with
  name       1 to 63 bytes of [A-Za-z0-9_.-], unique in the file
  graph      a graph file, relative to the cases file, that exists
  shapes     an object of symbol -> positive integer binding every symbol of the graph
  precision  "exact", "tf32" or "reduced"
  source     where the case comes from (non-empty)
  group      the group `bench/run --group` picks it by: 1 to 63 bytes of [A-Za-z0-9_-]
  notes      optional: the case in PyTorch's words
  module     optional: {"file": a Python file defining Model, get_inputs, get_init_inputs (the
             KernelBench form), "user_inputs": the graph's non-const input names in the order
             forward takes them, "fixed": position -> number}: the peers run that module
and no other keys than those and `ktune batch`'s own (budget, tolerance, priority, gpu). Then:
  - `ktune check GRAPH --shape ... --json` passes and leaves no dimension unbound;
  - `ktune space GRAPH --shape ... --json` keeps at least one candidate;
  - for a graph of matmuls only, the FLOP count the report rates GEMM cases by
    (bench/work.py: 2 * M * N * K per matmul) is the one `ktune check` prints;
  - every op the graph uses is mapped by bench/torch_graph.py (read as text: the op's name in
    quotes), so the PyTorch side of the benchmark can run it;
  - the lines with only batch keys pass `ktune batch`'s line checks (it checks every line
    before connecting, so it is run against a socket that does not exist);
  - every *.json file beside the cases file is used by some case, and there are at least
    --min-cases cases (default 20).
Prints one line per problem, naming the file and line, and a summary. Exits 0 when every check
passes, 1 when one fails, 2 for bad arguments.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from work import case_work  # noqa: E402
BATCH_KEYS = ("graph", "shapes", "precision", "name", "budget", "tolerance", "priority", "gpu")
CASE_KEYS = set(BATCH_KEYS) | {"source", "notes", "group", "module"}
PRECISIONS = ("exact", "tf32", "reduced")
NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,63}$")
GROUP_RE = re.compile(r"^[A-Za-z0-9_-]{1,63}$")  # no comma: --group takes a list


def run(cmd):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return 127, "", str(e)
    return p.returncode, p.stdout, p.stderr


def first_line(text):
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[0] if lines else "(no message)"


def check_fields(c, where, base, names, problems):
    """The fields of one case; returns the graph's absolute path or None."""
    unknown = sorted(set(c) - CASE_KEYS)
    if unknown:
        problems.append(f"{where}: unknown key '{unknown[0]}' (known: "
                        f"{', '.join(sorted(CASE_KEYS))})")
    name = c.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        problems.append(f"{where}: 'name' must be 1 to 63 bytes of letters, digits, '_', '.', '-'")
    elif name in names:
        problems.append(f"{where}: the name '{name}' is used twice")
    else:
        names.add(name)
    m = c.get("module")
    if m is not None and not (isinstance(m, dict) and isinstance(m.get("file"), str) and
                              os.path.isfile(os.path.join(base, m["file"])) and
                              isinstance(m.get("user_inputs"), list) and
                              isinstance(m.get("fixed", {}), dict)):
        problems.append(f"{where}: 'module' must be {{\"file\": an existing Python file, "
                        f"\"user_inputs\": [names], \"fixed\": {{position: number}}}}")
    for key in ("source",) + (("notes",) if "notes" in c else ()):
        if not isinstance(c.get(key), str) or not c[key].strip():
            problems.append(f"{where}: '{key}' must be a non-empty string")
    if not isinstance(c.get("group"), str) or not GROUP_RE.match(c["group"]):
        problems.append(f"{where}: 'group' must be 1 to 63 bytes of letters, digits, '_', '-' "
                        "(core, gemm16, ...): bench/run --group picks cases by it")
    if c.get("precision") not in PRECISIONS:
        problems.append(f"{where}: 'precision' must be one of {', '.join(PRECISIONS)}")
    shapes = c.get("shapes")
    if not isinstance(shapes, dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in shapes.values()):
        problems.append(f"{where}: 'shapes' must be an object of positive integers, like "
                        "{\"M\": 1024}")
    graph = c.get("graph")
    if not isinstance(graph, str) or not graph:
        problems.append(f"{where}: 'graph' must be a path to a graph file")
        return None
    path = graph if os.path.isabs(graph) else os.path.join(base, graph)
    if not os.path.isfile(path):
        problems.append(f"{where}: graph '{graph}' does not exist ({path})")
        return None
    return path


def check_graph(c, path, where, ktune, torch_text, problems):
    """ktune check, ktune space, and the PyTorch mapping of every op of one case."""
    shapes = c.get("shapes") if isinstance(c.get("shapes"), dict) else {}
    bind = ",".join(f"{k}={v}" for k, v in shapes.items())
    args = ["--shape", bind] if bind else []
    rc, out, err = run([ktune, "check", path] + args + ["--json"])
    if rc != 0:
        problems.append(f"{where}: ktune check fails: {first_line(err or out)}")
        return
    try:
        info = json.loads(out)
    except ValueError:
        problems.append(f"{where}: ktune check --json printed no JSON")
        return
    if info.get("unbound"):
        problems.append(f"{where}: dimension {', '.join(info['unbound'])} is not in 'shapes'")
        return
    check_flops(path, shapes, info.get("flops"), where, problems)
    rc, out, err = run([ktune, "space", path] + args + ["--json"])
    if rc != 0:
        problems.append(f"{where}: ktune space fails: {first_line(err or out)}")
    else:
        try:
            cands = json.loads(out).get("candidates", 0)
        except ValueError:
            cands = None
        if not isinstance(cands, int) or cands <= 0:
            problems.append(f"{where}: ktune space keeps no candidate ({cands!r})")
    try:
        with open(path) as f:
            nodes = json.load(f).get("nodes", [])
    except (OSError, ValueError) as e:
        problems.append(f"{where}: cannot read {path}: {e}")
        return
    for op in sorted({n.get("op") for n in nodes if isinstance(n, dict)}):
        if f'"{op}"' not in torch_text:
            problems.append(f"{where}: op '{op}' has no mapping in bench/torch_graph.py")


def check_flops(path, shapes, ktune_flops, where, problems):
    """bench/work.py's GEMM count against `ktune check`'s, for graphs where both count the same
    thing (only matmuls: ktune also counts pointwise and reduction flops)."""
    try:
        with open(path) as f:
            graph = json.load(f)
        work = case_work(graph, shapes)
    except (OSError, ValueError, KeyError, TypeError) as e:
        problems.append(f"{where}: bench/work.py cannot count the case's work: {e!r}")
        return
    if any(n.get("op") != "matmul" for n in graph.get("nodes", [])):
        return
    if work["flops"] != ktune_flops:
        problems.append(f"{where}: bench/work.py counts {work['flops']} GEMM flops, ktune check "
                        f"{ktune_flops}: the report's TFLOP/s would be wrong")


def check_batch(batch_lines, ktune, problems):
    """`ktune batch` checks every line before it connects: no line may be refused."""
    with tempfile.TemporaryDirectory(prefix="ktune-cases-") as tmp:
        path = os.path.join(tmp, "batch.jsonl")
        with open(path, "w") as f:
            f.write("".join(line + "\n" for line, _ in batch_lines))
        rc, out, err = run([ktune, "batch", path, "--socket", os.path.join(tmp, "no-ktuned.sock"),
                            "--no-wait"])
        refused = [ln for ln in err.splitlines() if ln.startswith(path + ":")]
        for ln in refused:
            m = re.match(re.escape(path) + r":(\d+): (.*)", ln)
            where = batch_lines[int(m.group(1)) - 1][1] if m else path
            problems.append(f"{where}: ktune batch refuses the line: "
                            f"{m.group(2) if m else ln}")
        if not refused and "cannot reach ktuned" not in err:
            problems.append(f"ktune batch did not get as far as connecting (rc {rc}): "
                            f"{first_line(err or out)}")


def main():
    ap = argparse.ArgumentParser(description="Checks the benchmark cases (no GPU, no torch).")
    ap.add_argument("cases", nargs="?", default=os.path.join(HERE, "cases", "cases.jsonl"))
    ap.add_argument("--ktune", default=os.environ.get("KTUNE_BIN", "ktune"),
                    help="the ktune binary (default: $KTUNE_BIN, else ktune on PATH)")
    ap.add_argument("--min-cases", type=int, default=20)
    a = ap.parse_args()
    try:
        with open(a.cases) as f:
            lines = f.read().splitlines()
        with open(os.path.join(HERE, "torch_graph.py")) as f:
            torch_text = f.read()
    except OSError as e:
        print(f"check_cases: {e.filename}: {e.strerror}", file=sys.stderr)
        return 2
    rc, _, err = run([a.ktune, "--help"])
    if rc == 127:
        print(f"check_cases: cannot run ktune '{a.ktune}': {err}", file=sys.stderr)
        return 2

    base = os.path.dirname(os.path.abspath(a.cases))
    problems, names, used, batch_lines = [], set(), set(), []
    n = 0
    for no, text in enumerate(lines, 1):
        s = text.strip()
        if not s or s.startswith("#"):
            continue
        where = f"{a.cases}:{no}"
        n += 1
        try:
            c = json.loads(s)
        except ValueError as e:
            problems.append(f"{where}: not JSON: {e}")
            continue
        if not isinstance(c, dict):
            problems.append(f"{where}: a case is a JSON object")
            continue
        before = len(problems)
        path = check_fields(c, where, base, names, problems)
        if path is None:
            continue
        used.add(os.path.realpath(path))
        check_graph(c, path, where, a.ktune, torch_text, problems)
        if len(problems) == before:
            line = {k: c[k] for k in BATCH_KEYS if k in c}
            line["graph"] = os.path.abspath(path)
            batch_lines.append((json.dumps(line), where))
    if batch_lines:
        check_batch(batch_lines, a.ktune, problems)
    for f in sorted(os.listdir(base)):
        p = os.path.realpath(os.path.join(base, f))
        if f.endswith(".json") and p not in used:
            problems.append(f"{os.path.join(base, f)}: a graph no case uses")
    if n < a.min_cases:
        problems.append(f"{a.cases}: {n} cases; the suite needs at least {a.min_cases}")

    for p in problems:
        print(p)
    print(f"check_cases: {n} cases, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
