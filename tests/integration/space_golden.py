#!/usr/bin/env python3
"""`ktune space --json` against the lists committed under tests/golden/space/ (issue 18: the
restructuring of the emitters and search must leave every candidate space as it was).

    tests/integration/space_golden.py --ktune BUILD/client/ktune [--update] [--jobs N]

The cases: every line of bench/cases/cases.jsonl (its graph, shapes and precision), and every
example graph examples/*.json at each precision (exact, tf32, reduced), with the shapes of its
line in examples/batch.jsonl or, for an example batch.jsonl does not name, of EXAMPLE_SHAPES
below. Each golden file holds `ktune space GRAPH --shape ... --precision P --json` (keys sorted,
indented) and, in place of the multi-megabyte `--list`, a digest of the kept candidates per
group: their count and the SHA-256 of their lines "group<TAB>schedule<TAB>est_us" in ktune's
order (a total order: group, estimate, family, knobs), so a changed estimate or knob list of any
kept candidate shows, not only of the best.

Everything `ktune space` prints is deterministic (the device is the built-in H100 model, no paths
or timings), so nothing is normalised: values must be equal, estimates to the last bit.

With --update, or KTUNE_UPDATE_GOLDEN=1 as the emitter goldens take it, rewrites the files
(review the diff: a change here is a change of what search tries). Prints one block per case
that differs, naming the case, the command and a diff, and exits 1; 0 when all agree; 2 for bad
arguments or a case ktune rejects.
"""
import argparse
import concurrent.futures
import difflib
import glob
import hashlib
import json
import os
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
GOLDEN = os.path.join(ROOT, "tests", "golden", "space")
PRECISIONS = ("exact", "tf32", "reduced")
# Examples that examples/batch.jsonl does not name: the shapes the example tests use.
EXAMPLE_SHAPES = {"gemv_bias_relu.json": {"M": 7680, "K": 2560}}


def jsonl(path):
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if line.strip() and not line.lstrip().startswith("#"):
                yield n, json.loads(line)


def cases():
    """(name, graph path relative to ROOT, shapes, precision), sorted by name."""
    out = []
    for _, c in jsonl(os.path.join(ROOT, "bench", "cases", "cases.jsonl")):
        out.append((c["name"], os.path.join("bench", "cases", c["graph"]), c["shapes"],
                    c.get("precision", "exact")))
    shapes = dict(EXAMPLE_SHAPES)
    for n, c in jsonl(os.path.join(ROOT, "examples", "batch.jsonl")):
        if c["graph"] in shapes and shapes[c["graph"]] != c["shapes"]:
            sys.exit(f"examples/batch.jsonl:{n}: {c['graph']} named twice with other shapes; "
                     "give each example one set of shapes")
        shapes[c["graph"]] = c["shapes"]
    for path in sorted(glob.glob(os.path.join(ROOT, "examples", "*.json"))):
        graph = os.path.basename(path)
        if graph not in shapes:
            sys.exit(f"examples/{graph}: no shapes to list its space with; add a line to "
                     "examples/batch.jsonl or to EXAMPLE_SHAPES in " + os.path.relpath(__file__, ROOT))
        stem = graph[:-len(".json")]
        for p in PRECISIONS:
            out.append((f"example_{stem}_{p}", os.path.join("examples", graph), shapes[graph], p))
    names = [c[0] for c in out]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        sys.exit(f"two cases share the name {sorted(dup)[0]}: golden files would collide")
    return sorted(out)


def command(ktune, graph, shapes, precision):
    return [ktune, "space", graph, "--shape", ",".join(f"{k}={v}" for k, v in shapes.items()),
            "--precision", precision, "--json", "--list"]


def space(ktune, case):
    """The golden object of one case: ktune's JSON with its list replaced by digests."""
    name, graph, shapes, precision = case
    cmd = command(ktune, graph, shapes, precision)
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"{name}: `{' '.join(cmd)}` exited {p.returncode}: "
                           f"{p.stderr.strip() or p.stdout.strip()[:500]}")
    obj = json.loads(p.stdout)
    digests = {}
    for item in obj.pop("list"):
        d = digests.setdefault(str(item["group"]), {"count": 0, "sha": hashlib.sha256()})
        d["count"] += 1
        d["sha"].update(f"{item['group']}\t{item['schedule']}\t{item['est_us']!r}\n".encode())
    obj["list_digest"] = {g: {"count": d["count"], "sha256": d["sha"].hexdigest()}
                          for g, d in digests.items()}
    return obj


def text(obj):
    return json.dumps(obj, indent=2, sort_keys=True) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ktune", required=True, help="the built ktune binary")
    ap.add_argument("--update", action="store_true",
                    help="rewrite the golden files (also KTUNE_UPDATE_GOLDEN=1)")
    ap.add_argument("--jobs", type=int, default=2, help="ktune processes at once (default 2)")
    a = ap.parse_args()
    update = a.update or os.environ.get("KTUNE_UPDATE_GOLDEN") == "1"
    ktune = os.path.abspath(a.ktune)
    todo = cases()
    with concurrent.futures.ThreadPoolExecutor(max(1, a.jobs)) as ex:
        futures = [ex.submit(space, ktune, c) for c in todo]
        try:
            got = [f.result() for f in futures]
        except (RuntimeError, ValueError, KeyError, subprocess.TimeoutExpired) as e:
            print(f"FAIL: {e}")
            return 2
    if update:
        os.makedirs(GOLDEN, exist_ok=True)
        for c, obj in zip(todo, got):
            with open(os.path.join(GOLDEN, c[0] + ".json"), "w") as f:
                f.write(text(obj))
        print(f"wrote {len(todo)} lists under {os.path.relpath(GOLDEN, ROOT)}; review the diff")
        return 0
    bad, failed = 0, []
    for c, obj in zip(todo, got):
        path = os.path.join(GOLDEN, c[0] + ".json")
        rel = os.path.relpath(path, ROOT)
        cmd = " ".join(command("ktune", *c[1:]))
        try:
            with open(path) as f:
                want = json.load(f)
        except OSError as e:
            print(f"FAIL {c[0]}: {rel}: {e.strerror} (KTUNE_UPDATE_GOLDEN=1 creates it)")
            bad += 1
            continue
        if want == obj:
            continue
        bad += 1
        failed.append(c[0])
        diff = list(difflib.unified_diff(text(want).splitlines(), text(obj).splitlines(),
                                         rel + " (committed)", "`" + cmd + "` (this build)",
                                         lineterm="", n=4))
        print(f"FAIL {c[0]}: `{cmd}` differs from {rel}:")
        print("\n".join(diff[:60]))
        if len(diff) > 60:
            print(f"... {len(diff) - 60} more diff lines")
        if want.get("list_digest") != obj.get("list_digest"):
            print("(list_digest: the kept candidates of a group differ; compare the `--list` "
                  "output of this build with the committed one's)")
    names = {c[0] + ".json" for c in todo}
    for path in sorted(glob.glob(os.path.join(GOLDEN, "*.json"))):
        if os.path.basename(path) not in names:
            print(f"FAIL: {os.path.relpath(path, ROOT)} belongs to no case (a renamed or removed "
                  "case? delete it)")
            bad += 1
    if failed:
        print(f"differ from the committed lists ({len(failed)} of {len(todo)}): "
              + ", ".join(failed))
    print(f"{len(todo)} space lists compared, {bad} problem(s)" if bad
          else f"all {len(todo)} space lists as committed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
