"""Fixtures for the binding's tests: the build tree (KTUNE_BUILD_DIR, default build/), the CLI, the
fake GPU worker (tests/fake_worker), a cache tuned with it, and a ktuned on a temporary socket.

KTUNE_LIBRARY defaults to the build's client/libktune.so; it must be set before ktune is
imported, hence here."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
BUILD = os.path.abspath(os.environ.get("KTUNE_BUILD_DIR") or os.path.join(ROOT, "build"))
os.environ.setdefault("KTUNE_LIBRARY", os.path.join(BUILD, "client", "libktune.so"))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))  # the package from this tree

# The softmax graph at a small size: what every cache-backed test tunes and looks up.
SOFTMAX = os.path.join(ROOT, "examples", "softmax.json")
SOFTMAX_SHAPES = {"M": 64, "N": 256}


def build_path(*parts):
    return os.path.join(BUILD, *parts)


def _exe(*parts):
    p = build_path(*parts)
    return p if os.access(p, os.X_OK) else None


@pytest.fixture(scope="session")
def ktune_cli():
    p = _exe("client", "ktune")
    if not p:
        pytest.skip(f"{build_path('client', 'ktune')} is not built")
    return p


@pytest.fixture(scope="session")
def fake_worker():
    p = _exe("tests", "fake_worker")
    if not p:
        pytest.skip(f"{build_path('tests', 'fake_worker')} is not built (needs NVRTC)")
    return p


def tune_local(cli, worker, cache, graph=SOFTMAX, shapes=SOFTMAX_SHAPES, budget="5s",
               env=None):
    """`ktune tune --local` into cache; returns its --json output as a dict."""
    import json
    shape_arg = ",".join(f"{k}={v}" for k, v in shapes.items())
    cmd = [cli, "tune", graph, "--shape", shape_arg, "--local", "--worker", worker, "--cache",
           cache, "--budget", budget, "--jobs", "2", "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                       env={**os.environ, **(env or {})})
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()}")
    return json.loads(r.stdout)


@pytest.fixture(scope="session")
def tuned_cache(tmp_path_factory, ktune_cli, fake_worker):
    """A cache holding a real softmax record (NVRTC cubins) measured by the fake worker."""
    cache = str(tmp_path_factory.mktemp("tuned") / "cache")
    result = tune_local(ktune_cli, fake_worker, cache)
    return cache, result


def _wait_for_socket(path, proc, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"ktuned exited {proc.returncode} before listening")
        if os.path.exists(path):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(path)
                return
            except OSError:
                pass
            finally:
                s.close()
        time.sleep(0.05)
    raise AssertionError(f"ktuned did not listen on {path} within {timeout} s")


@pytest.fixture
def daemon(request, tmp_path, fake_worker):
    """A ktuned with the fake worker on GPU 0, a temporary socket and cache. Yields a dict:
    socket, cache, proc, log (path of its stderr). Indirect parameter: the fake worker's
    FAKE_DELAY_MS per evaluation (default 2)."""
    exe = _exe("daemon", "ktuned")
    if not exe:
        pytest.skip(f"{build_path('daemon', 'ktuned')} is not built")
    sock, cache, log = str(tmp_path / "ktuned.sock"), str(tmp_path / "cache"), tmp_path / "log"
    env = {**os.environ, "FAKE_DELAY_MS": str(getattr(request, "param", 2))}
    env.pop("KTUNE_SOCKET", None)
    with open(log, "wb") as logf:
        proc = subprocess.Popen([exe, "--worker", fake_worker, "--gpus", "0", "--socket", sock,
                                 "--cache", cache, "--compile-jobs", "2"],
                                stdout=logf, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    try:
        _wait_for_socket(sock, proc)
        yield {"socket": sock, "cache": cache, "proc": proc, "log": log}
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise AssertionError("ktuned did not exit within 15 s of SIGTERM")


def have_cuda_torch():
    """(True, "") when torch with a usable CUDA device is importable, else (False, why)."""
    try:
        import torch
    except ImportError:
        return False, "PyTorch is not installed"
    if not torch.cuda.is_available():
        return False, "no CUDA device (torch.cuda.is_available() is False)"
    return True, ""


def which(name):
    return shutil.which(name)
