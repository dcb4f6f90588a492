"""The package as a user installs it: `pip install ./client/python` into a fresh venv (meson-python
builds the wheel, libktune.so.2 and ktune-cache-check inside), then `import ktune` from another
folder with no KTUNE_LIBRARY, and a source tree left as it was. Needs PyPI for pip's build
environment (meson-python, meson); about a minute on 2 cores. `-m "not wheel"` leaves it out."""

import hashlib
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import BUILD, ROOT, SOFTMAX

PKG = os.path.join(ROOT, "client", "python")
pytestmark = pytest.mark.wheel

# What the venv's python prints: where ktune came from, what it loaded, and what a damaged cache
# gives (only ktune-cache-check, started by libktune, says "is damaged"; without it the runtime
# warns that it opened the cache unchecked).
PROBE = r"""
import json, os, sys
import ktune
out = {"file": ktune.__file__, "version": ktune.__version__, "library": ktune.library_path,
       "library_version": ktune.library_version()}
g = ktune.Graph(sys.argv[1])
out["graph"] = [g.name, g.signature, list(g.inputs)]
try:
    ktune.Runtime(sys.argv[2])
    out["damaged"] = "opened"
except ktune.KtuneError as e:
    out["damaged"] = str(e)
print(json.dumps(out))
"""


def scaled(seconds):
    return seconds * float(os.environ.get("KTUNE_TEST_TIME_SCALE") or 1)


def snapshot(top):
    """Every path under top (links not followed) with its kind and, for files, a content hash:
    new, removed and changed files all show, ignored ones too."""
    snap = {}
    for root, dirs, files in os.walk(top):
        for d in dirs:
            p = os.path.join(root, d)
            snap[os.path.relpath(p, top)] = "link" if os.path.islink(p) else "dir"
        for f in files:
            p = os.path.join(root, f)
            if os.path.islink(p):
                snap[os.path.relpath(p, top)] = "link -> " + os.readlink(p)
            else:
                with open(p, "rb") as fh:
                    snap[os.path.relpath(p, top)] = hashlib.sha256(fh.read()).hexdigest()
    return snap


def user_env(**extra):
    """The environment of a user who set nothing of ktune's (scripts/test sets KTUNE_LIBRARY)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("KTUNE_") and k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(extra)
    return env


def run(cmd, timeout, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    assert r.returncode == 0, (f"{' '.join(cmd)} exited {r.returncode}:\n"
                               f"{r.stdout[-4000:]}\n{r.stderr[-4000:]}")
    return r


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A fresh venv with `pip install ./client/python` done in it; yields (venv python, the
    source tree's paths before, after)."""
    tmp = tmp_path_factory.mktemp("wheel")
    venv = tmp / "venv"
    run([sys.executable, "-m", "venv", str(venv)], scaled(120))
    py = str(venv / "bin" / "python")
    before = snapshot(PKG)
    run([py, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", PKG],
        scaled(600), cwd=str(tmp), env=user_env())
    after = snapshot(PKG)
    return py, before, after


def probe(py, tmp_path, env):
    cache = tmp_path / "damaged"
    cache.mkdir()
    (cache / "data.mdb").write_bytes(os.urandom(64 * 1024))
    return subprocess.run([py, "-c", PROBE, SOFTMAX, str(cache)], capture_output=True,
                          text=True, timeout=scaled(60), cwd=str(tmp_path), env=env)


def project_version():
    with open(os.path.join(ROOT, "meson.build")) as f:
        return re.search(r"version\s*:\s*'([^']+)'", f.read()).group(1)


def test_install_leaves_source_tree_as_it_was(installed):
    _, before, after = installed
    added = sorted(set(after) - set(before))
    removed = sorted(set(before) - set(after))
    changed = sorted(p for p in before if p in after and before[p] != after[p])
    assert not (added or removed or changed), \
        f"pip install wrote into {PKG}: added {added}, removed {removed}, changed {changed}"


def test_import_without_variable_loads_the_bundled_library(installed, tmp_path):
    py, _, _ = installed
    r = probe(py, tmp_path, user_env())
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    pkg_dir = os.path.dirname(out["file"])
    assert "site-packages" in pkg_dir and not pkg_dir.startswith(ROOT), out
    assert out["library"] == os.path.join(pkg_dir, "libktune.so.2"), out
    assert out["version"] == out["library_version"] == project_version(), out
    assert out["graph"][0] == "softmax" and re.fullmatch(r"[0-9a-f]{64}", out["graph"][1]), out
    # ktune-cache-check came with the wheel and libktune found it next to itself
    assert "is damaged" in out["damaged"], out
    assert "opened unchecked" not in r.stderr, r.stderr


def test_ktune_library_still_overrides(installed, tmp_path):
    py, _, _ = installed
    missing = str(tmp_path / "no" / "libktune.so")
    r = probe(py, tmp_path, user_env(KTUNE_LIBRARY=missing))
    assert r.returncode != 0 and "ImportError" in r.stderr, r.stdout + r.stderr
    assert f"$KTUNE_LIBRARY={missing}" in r.stderr, r.stderr  # no fall-back to the bundled one
    built = os.path.join(BUILD, "client", "libktune.so")
    if not os.path.exists(built):
        pytest.skip(f"{built} is not built: only the missing-library override was checked")
    other = tmp_path / "built"
    other.mkdir()
    r = probe(py, other, user_env(KTUNE_LIBRARY=built))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["library"] == built
