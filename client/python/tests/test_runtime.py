"""ktune.Runtime without a GPU: opening caches, lookups that must fail cleanly."""

import ctypes
import errno
import os
import types

import pytest

from conftest import ROOT, SOFTMAX, SOFTMAX_SHAPES

import ktune
from ktune.runtime import bind_inputs


def have_driver():
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


no_driver = pytest.mark.skipif(have_driver(), reason="a CUDA driver is installed here")


def test_missing_cache_dir_raises(tmp_path):
    missing = str(tmp_path / "nope")
    with pytest.raises(ktune.KtuneError) as e:
        ktune.Runtime(missing)
    assert e.value.errno == errno.ENOENT
    assert missing in str(e.value)


def test_empty_cache_dir_is_no_cache(tmp_path):
    with pytest.raises(ktune.KtuneError) as e:
        ktune.Runtime(str(tmp_path))
    assert e.value.errno == errno.ENOENT
    assert str(tmp_path) in str(e.value)


def test_tuned_cache_opens(tuned_cache):
    cache, result = tuned_cache
    assert result["winner"]["family"], result
    rt = ktune.Runtime(cache)
    assert "Runtime" in repr(rt)
    rt.close()
    rt.close()  # idempotent
    with pytest.raises(ValueError, match="closed"):
        rt.lookup(SOFTMAX, SOFTMAX_SHAPES)


@no_driver
def test_lookup_without_driver_raises_enodev(tuned_cache):
    cache, _ = tuned_cache
    with ktune.Runtime(cache) as rt:
        with pytest.raises(ktune.KtuneError) as e:
            rt.lookup(ktune.Graph(SOFTMAX), SOFTMAX_SHAPES)
        assert e.value.errno == errno.ENODEV
        assert e.value.strerror  # one line from the library
        assert "\n" not in e.value.strerror


def test_cache_from_env(tuned_cache, monkeypatch):
    cache, _ = tuned_cache
    monkeypatch.setenv("KTUNE_CACHE", cache)
    with ktune.Runtime() as rt:
        assert rt.cache_dir is None


def test_device_argument_is_checked(tuned_cache):
    cache, _ = tuned_cache
    with ktune.Runtime(cache) as rt:
        with pytest.raises(ValueError, match="not a CUDA device"):
            rt.lookup(SOFTMAX, SOFTMAX_SHAPES, device="cpu")
        with pytest.raises(TypeError):
            rt.lookup(SOFTMAX, SOFTMAX_SHAPES, device=True)


# ---- declared order and names (issue 17 item 1); no GPU: the binding of a call's arguments ----

SUB_BA = os.path.join(ROOT, "tests", "gpu", "sub_ba.json")


def _kernel_without_gpu(graph, shapes):
    """A Kernel object over no loaded kernel: enough for what a call does before torch and the
    library are involved (binding its arguments to the declared inputs)."""
    fixed = types.SimpleNamespace(info=types.SimpleNamespace(match="exact", n_outputs=1),
                                  workspace_size=0, packed=(0,) * len(graph.inputs))
    return ktune.Kernel(None, ctypes.c_void_p(), graph, shapes, "exact", None, fixed)


def test_kernel_lists_declared_names():
    k = _kernel_without_gpu(ktune.Graph(SUB_BA), {"M": 4})
    assert k.inputs == ("a", "b") and k.outputs == ("out",)
    assert [d.name for d in k.input_descs] == ["a", "b"]
    assert k.input_descs[0].shape == (4, 256)
    assert k.prepack_size("b") == 0


def test_bind_inputs_by_position_name_or_both():
    names = ("a", "b", "c")
    A, B, C = object(), object(), object()
    assert bind_inputs(names, (A, B, C), {}) == [A, B, C]
    assert bind_inputs(names, (), {"c": C, "a": A, "b": B}) == [A, B, C]
    assert bind_inputs(names, (A,), {"c": C, "b": B}) == [A, B, C]


@pytest.mark.parametrize("args,named,needle", [
    ((1,), {}, "missing input 'b', 'c'"),
    ((1,), {"b": 2}, "missing input 'c'"),
    ((), {"a": 1, "b": 2, "c": 3, "d": 4}, "unexpected input 'd' (inputs: a, b, c)"),
    ((1, 2), {"a": 3, "c": 4}, "input 'a' given both by position (0) and by name"),
    ((1, 2, 3, 4), {}, "kernel takes 3 inputs (a, b, c), got 4 positional"),
])
def test_bind_inputs_names_what_is_wrong(args, named, needle):
    with pytest.raises(TypeError) as e:
        bind_inputs(("a", "b", "c"), args, named)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_call_checks_names_before_anything_else():
    # a missing or unknown keyword is a TypeError naming it, before torch is needed
    k = _kernel_without_gpu(ktune.Graph(SUB_BA), {"M": 4})
    with pytest.raises(TypeError, match="missing input 'b'"):
        k(a=1)
    with pytest.raises(TypeError, match="unexpected input 'x'"):
        k(1, 2, x=3)
    with pytest.raises(TypeError, match="input 'a' given both"):
        k(1, a=2)
