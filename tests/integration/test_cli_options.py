#!/usr/bin/env python3
"""One grammar for every ktune command (issue 24): walks every command's --help (and cache's
subcommands'), and gives each option that takes a value both as '--opt value' and as
'--opt=value'; neither may be refused as an unknown option or a stray argument (a bad value may
be refused: that is the option's own check). Also: 'ktune help CMD' is CMD's --help, and a
mistyped command gets a suggestion. Environment: KTUNE_BIN."""
import os
import re
import subprocess
import sys

K = os.environ["KTUNE_BIN"]
OPT = re.compile(r"^ {2,4}(?:-\w, )?(--[\w-]+)(?:[ =]([A-Z][\w/=.,\[\]-]*))?")
REFUSED = re.compile(r"unknown option|unexpected argument|unknown argument")


def run(*args):
    return subprocess.run([K, *args], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, KTUNE_SOCKET="/nonexistent/ktuned.sock"))


top = run("--help").stdout
cmds = re.findall(r"^  (\w+)\s{2,}", top.split("commands:")[1].split("\n\n")[0], re.M)
assert len(cmds) >= 15, cmds
bad, checked = [], 0
for c in cmds:
    h = run(c, "--help")
    assert h.returncode == 0 and h.stdout.startswith("usage: "), (c, h.stderr)
    assert run("help", c).stdout == h.stdout, f"'ktune help {c}' differs from '{c} --help'"
    groups = [([c], h.stdout)]
    if c == "cache":
        subs = re.findall(r"^  (\w+)", h.stdout.split("commands:")[1].split("\n\n")[0], re.M)
        groups = [([c, s], run(c, s, "--help").stdout) for s in subs]
    for base, text in groups:
        for line in text.splitlines():
            m = OPT.match(line)
            if not m or not m.group(2):
                continue
            for form in ([m.group(1) + "=x1"], [m.group(1), "x1"]):
                r = run(*base, *form)
                checked += 1
                if REFUSED.search(r.stderr):
                    bad.append(f"ktune {' '.join(base + form)}: {r.stderr.strip()}")
print(f"test_cli_options: {checked} option forms over {len(cmds)} commands")
if bad:
    print("\n".join(bad), file=sys.stderr)
    sys.exit(1)
r = run("trails", "1")
assert r.returncode == 2 and "did you mean 'trials'" in r.stderr, r.stderr
r = run("help", "nosuch")
assert r.returncode == 2 and "unknown command 'nosuch'" in r.stderr, r.stderr
print("test_cli_options: ok")
