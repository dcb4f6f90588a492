#!/usr/bin/env python3
"""pyflakes over the repository's Python (the bench tools, the binding, scripts, tests): an
undefined name, an unused import or variable, a syntax error fails. The bench tools run only on
the GPU machine, so a name error in them is otherwise found there, after a device call (as one
was: bench/harness.py's results writer). Files are *.py and the executables whose first line
names python3. Exits 77 without pyflakes (Debian's pyflakes3)."""
import os
import sys

try:
    from pyflakes import api, reporter
except ImportError:
    # Debian's pyflakes3 is the system interpreter's; python3 on PATH may be another one
    if os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3") and \
            os.access("/usr/bin/python3", os.X_OK):
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    print("lint_python: skipped: no pyflakes (apt install pyflakes3)")
    sys.exit(77)

ROOT = os.environ.get("KTUNE_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), ".."))
DIRS = ("bench", "client/python", "scripts", "tests", "fleet", "examples")
SKIP = {"results", "__pycache__", ".pytest_cache", "build", "dist"}


def python_files():
    for d in DIRS:
        for top, dirs, files in os.walk(os.path.join(ROOT, d)):
            dirs[:] = sorted(x for x in dirs if x not in SKIP and not x.startswith("."))
            for f in sorted(files):
                p = os.path.join(top, f)
                if f.endswith(".py"):
                    yield p
                elif "." not in f and os.access(p, os.X_OK):
                    with open(p, "rb") as fh:
                        if b"python3" in fh.readline():
                            yield p


files = list(python_files())
rep = reporter.Reporter(sys.stdout, sys.stderr)
warnings = sum(api.checkPath(p, rep) for p in files)
print(f"lint_python: {len(files)} files, {warnings} warnings")
sys.exit(1 if warnings else 0)
