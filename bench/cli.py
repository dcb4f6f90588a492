"""The ktune CLI for the bench tools (bench/sweep, bench/kernelbench, bench/cost_rank.py), and
bench/check_cases.py run on the cases they wrote. Standard library only.

    cli = ktune_cli(bench_dir)               # None when there is none
    bad = check_cases(bench_dir, "DIR/graphs/cases.jsonl")   # {line: [problems]} or None
"""
import os
import re
import subprocess
import sys


def ktune_cli(here):
    """$KTUNE_BIN, else the newer of the device build's and the build tree's (a stale one would
    not know the graphs' newer ops); None if there is none. here: the bench directory."""
    if os.environ.get("KTUNE_BIN"):
        return os.environ["KTUNE_BIN"]
    root = os.path.dirname(here)
    found = [p for p in (os.path.join(root, "dist-device", "bin", "ktune"),
                         os.path.join(root, "build", "client", "ktune")) if os.access(p, os.X_OK)]
    return max(found, key=os.path.getmtime) if found else None


def check_cases(here, cases_path):
    """bench/check_cases.py over a cases file (each graph checks, keeps some kernel candidate
    and runs on PyTorch's side): {line number: its problems}, or None with no ktune CLI. Lines
    that name no case (the summary, a graph no case uses) are under 0."""
    cli = ktune_cli(here)
    if cli is None:
        return None
    r = subprocess.run([sys.executable, os.path.join(here, "check_cases.py"), "--ktune", cli,
                        "--min-cases", "1", cases_path], capture_output=True, text=True)
    bad = {}
    for line in (r.stdout + r.stderr).splitlines():
        m = re.match(re.escape(cases_path) + r":(\d+): (.*)$", line)
        if m:
            bad.setdefault(int(m.group(1)), []).append(m.group(2))
        elif r.returncode != 0 and not line.startswith("check_cases: "):
            bad.setdefault(0, []).append(line)
    if r.returncode != 0 and not bad:
        bad[0] = [(r.stdout + r.stderr).strip() or f"check_cases.py exited {r.returncode}"]
    return bad
