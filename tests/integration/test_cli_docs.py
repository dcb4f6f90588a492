#!/usr/bin/env python3
"""The generated shell completion and man pages (client/shell, scripts/cli_docs.py): bash
parses the completion and completes commands, options, cache's subcommands and --precision's
values; zsh parses its file where zsh is installed; groff renders both man pages without a
warning; every command is in the man page and in both completions. Environment: KTUNE_BIN,
KTUNE_DOCS_DIR (the generated files)."""
import os
import re
import shutil
import subprocess
import sys

d = os.environ["KTUNE_DOCS_DIR"]
K = os.environ["KTUNE_BIN"]
bash_file, zsh_file = os.path.join(d, "ktune"), os.path.join(d, "_ktune")
man1, man8 = os.path.join(d, "ktune.1"), os.path.join(d, "ktuned.8")
top = subprocess.run([K, "--help"], capture_output=True, text=True).stdout
cmds = re.findall(r"^  (\w+)\s{2,}", top.split("commands:")[1].split("\n\n")[0], re.M)


def complete(*words):
    script = (f"source '{bash_file}'; COMP_WORDS=({' '.join(repr(w) for w in words)}); "
              f"COMP_CWORD={len(words) - 1}; _ktune; printf '%s\\n' \"${{COMPREPLY[@]}}\"")
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


assert subprocess.run(["bash", "-n", bash_file]).returncode == 0
assert set(cmds) <= set(complete("ktune", "")), complete("ktune", "")
assert complete("ktune", "tu") == ["tune"]
assert "--budget" in complete("ktune", "tune", "--bu")
assert "--retune" in complete("ktune", "batch", "--re")
assert "backup" in complete("ktune", "cache", "")
assert "--trust-unsigned" in complete("ktune", "cache", "merge", "--tr")
assert complete("ktune", "tune", "--precision", "") == ["exact", "tf32", "reduced"]
zsh = open(zsh_file).read()
assert zsh.startswith("#compdef ktune") and all(f"'{c}:" in zsh for c in cmds)
if shutil.which("zsh"):
    assert subprocess.run(["zsh", "-n", zsh_file]).returncode == 0
man = open(man1).read()
assert all(f".SS {c}\n" in man for c in cmds), "a command is missing from ktune.1"
for page in (man1, man8):
    r = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z", page], capture_output=True,
                       text=True)
    assert r.returncode == 0 and not r.stderr.strip(), (page, r.stderr)
assert "\\-\\-gpus" in open(man8).read()
print(f"test_cli_docs: ok ({len(cmds)} commands)")
sys.exit(0)
