"""ktune.Graph against the C library and the CLI (no GPU, no daemon)."""

import errno
import json
import os
import re
import subprocess

import pytest

from conftest import ROOT, SOFTMAX

import ktune

EXAMPLES = sorted(os.path.join(ROOT, "examples", f) for f in os.listdir(
    os.path.join(ROOT, "examples")) if f.endswith(".json"))


def check_json(cli, path, shapes=None):
    cmd = [cli, "check", path, "--json"] + (["--shape", shapes] if shapes else [])
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout, r.stderr


@pytest.mark.parametrize("path", EXAMPLES, ids=os.path.basename)
def test_signature_and_io_equal_ktune_check(ktune_cli, path):
    rc, out, err = check_json(ktune_cli, path)
    assert rc == 0, err
    want = json.loads(out)
    g = ktune.Graph(path)
    assert g.name == want["name"]
    assert re.fullmatch(r"[0-9a-f]{64}", g.signature)
    assert g.signature == want["signature"]
    assert sorted(g.inputs) == sorted(t["name"] for t in want["inputs"])
    assert sorted(g.outputs) == sorted(t["name"] for t in want["outputs"])


def test_text_dict_and_path_give_one_graph():
    with open(SOFTMAX) as f:
        text = f.read()
    a, b, c = ktune.Graph(SOFTMAX), ktune.Graph(text), ktune.Graph(json.loads(text))
    d = ktune.Graph(text.encode())
    assert a.signature == b.signature == c.signature == d.signature
    assert a.inputs == ("x",) and a.outputs == ("y",) and a.name == "softmax"
    assert a.path == SOFTMAX and b.path is None


def test_signature_ignores_names():
    doc = json.load(open(SOFTMAX))
    renamed = {"name": "other", "inputs": {"inp": doc["inputs"]["x"]},
               "nodes": [{"out": "o", "op": "softmax", "in": ["inp"], "axis": -1}],
               "outputs": ["o"]}
    assert ktune.Graph(renamed).signature == ktune.Graph(SOFTMAX).signature


def test_bad_graph_raises_the_c_message(ktune_cli):
    path = os.path.join(ROOT, "examples", "broken", "bad_broadcast.json")
    with pytest.raises(ktune.KtuneError) as e:
        ktune.Graph(path)
    assert e.value.errno == errno.EINVAL and e.value.code == -errno.EINVAL
    assert isinstance(e.value, OSError)
    msg = str(e.value)
    assert "node 1" in msg and "bad broadcast" in msg and "'bias'" in msg
    # the CLI reports the same validator message
    rc, _, err = check_json(ktune_cli, path)
    assert rc != 0
    assert "bad broadcast: 'bias' [255] vs 't0' [M, 256]" in err
    assert "bad broadcast: 'bias' [255] vs 't0' [M, 256]" in msg


@pytest.mark.parametrize("text,needle", [
    ('{"name": 1}', "name"),
    ('{"inputs": {"x": {"dtype": "f64", "shape": [4]}}, "nodes": [{"out": "y", "op": "relu", '
     '"in": ["x"]}], "outputs": ["y"]}', "f64"),
    ('{"inputs": {"x": {"dtype": "f32", "shape": [4]}}, "nodes": [{"out": "y", "op": "nope", '
     '"in": ["x"]}], "outputs": ["y"]}', "nope"),
    ('{"inputs": {', "syntax"),
])
def test_invalid_text_raises_einval(text, needle):
    with pytest.raises(ktune.KtuneError) as e:
        ktune.Graph(text)
    assert e.value.errno == errno.EINVAL
    assert needle in str(e.value)


def test_missing_file_raises_enoent():
    with pytest.raises(ktune.KtuneError) as e:
        ktune.Graph("/nonexistent/graph.json")
    assert e.value.errno == errno.ENOENT
    assert "/nonexistent/graph.json" in str(e.value)


def test_wrong_argument_type():
    with pytest.raises(TypeError, match="path, JSON text or a dict"):
        ktune.Graph(42)


def test_describe_binds_shapes_in_declared_order(ktune_cli):
    path = os.path.join(ROOT, "examples", "gemm_bias_relu.json")
    g = ktune.Graph(path)
    # the file's order, not the canonical one (A, bias, W)
    assert g.inputs == ("A", "W", "bias") and g.outputs == ("Y",)
    ins, outs = g.describe({"M": 128})
    assert [d.name for d in ins] == list(g.inputs)
    assert [d.name for d in outs] == list(g.outputs)
    rc, out, err = check_json(ktune_cli, path, "M=128")
    assert rc == 0, err
    want = json.loads(out)
    for d in ins + outs:
        w = next(t for t in want["inputs"] + want["outputs"] if t["name"] == d.name)
        assert d.dtype == w["dtype"] and list(d.shape) == w["shape"], d
    const = {d.name for d in ins if d.is_const}
    assert const == {"W", "bias"}
    # unbound symbols stay None; bindings may be given as text too
    ins_u, _ = g.describe()
    assert next(d for d in ins_u if d.name == "A").shape == (None, 512)
    assert g.describe("M=128") == (ins, outs)


def test_inputs_in_declared_order_when_canonical_differs():
    # out = b - a declared (a, b): the canonical order puts the minuend first
    path = os.path.join(ROOT, "tests", "gpu", "sub_ba.json")
    g = ktune.Graph(path)
    assert g.inputs == ("a", "b") and g.outputs == ("out",)
    ins, _ = g.describe({"M": 4})
    assert [d.name for d in ins] == ["a", "b"]
    with open(path) as f:
        doc = json.load(f)
    doc["inputs"] = {"b": doc["inputs"]["b"], "a": doc["inputs"]["a"]}
    swapped = ktune.Graph(doc)  # the same problem declared the other way round
    assert swapped.signature == g.signature and swapped.inputs == ("b", "a")


@pytest.mark.parametrize("shapes,exc,needle", [
    ({"Q": 3}, ktune.KtuneError, "cannot bind Q"),
    ({"M": 0}, ktune.KtuneError, "M=0"),
    ({"M": "x"}, TypeError, "'M' must be an integer"),
    ("M", ValueError, "NAME=VALUE"),
    ([("M",)], TypeError, "pair"),
])
def test_describe_bad_shapes(shapes, exc, needle):
    g = ktune.Graph(os.path.join(ROOT, "examples", "gemm_bias_relu.json"))
    with pytest.raises(exc) as e:
        g.describe(shapes)
    assert needle in str(e.value)
    if exc is ktune.KtuneError:
        assert e.value.errno == errno.EINVAL


def test_versions_agree():
    with open(os.path.join(ROOT, "meson.build")) as f:
        meson_version = re.search(r"version\s*:\s*'([^']+)'", f.read()).group(1)
    assert ktune.__version__ == meson_version
    assert ktune.library_version() == meson_version


def test_default_socket(monkeypatch):
    # ktune_default_socket reads $KTUNE_SOCKET, so the value depends on the environment
    want = os.environ.get("KTUNE_SOCKET") or "/run/ktune/ktuned.sock"
    assert ktune.default_socket() == want


def test_import_error_names_what_was_searched(tmp_path):
    import sys
    env = {**os.environ, "KTUNE_LIBRARY": str(tmp_path / "libktune.so"),
           "PYTHONPATH": os.path.join(ROOT, "client", "python")}
    r = subprocess.run([sys.executable, "-c", "import ktune"], capture_output=True, text=True,
                       env=env, timeout=60)
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: ktune: cannot load libktune")
    assert f"$KTUNE_LIBRARY={tmp_path / 'libktune.so'}" in last
