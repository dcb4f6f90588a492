"""The C++ launcher of custom ops (ktune/_torch_ext.cpp, built by ktune/_torch_ext.py) without a
GPU: it builds against the torch installed here, registers an op's CUDA kernel, checks tensors
with the Python path's messages, stops launching a kernel whose runtime closes, and goes with a
registration that fails half-way; without a compiler the ops launch through Python, with one
warning. The launches themselves are in test_torch_op_gpu.py.

The build is cached in $KTUNE_TORCH_EXT_DIR (here: the build folder's torch-ext/, so a second
run does not build again)."""

import ctypes
import os
import re
import types

import pytest

from conftest import build_path

import ktune

torch = pytest.importorskip("torch")
from ktune import _torch_ext, torch_op  # noqa: E402
from test_torch_op import SUB_BA, TWO_RELUS, _kernel  # noqa: E402


@pytest.fixture
def ext(monkeypatch):
    """The launcher, built (once) and loaded for this test; the process's choice restored
    after."""
    monkeypatch.setenv("KTUNE_TORCH_EXT", "1")
    monkeypatch.setenv("KTUNE_TORCH_EXT_DIR", os.environ.get("KTUNE_TORCH_EXT_DIR") or
                       build_path("torch-ext"))
    monkeypatch.setattr(_torch_ext, "_state", None)
    launcher = _torch_ext.launcher(torch)
    assert launcher is not None, "the C++ launcher did not build (see the warning)"
    return launcher


def _open_runtime(handle):
    return types.SimpleNamespace(_handle=ctypes.c_void_p(handle))


def _close(rt):
    """What Runtime.close does around the kernels: the hook, then the handle goes."""
    torch_op.runtime_closing(rt)
    rt._handle = None


def _bound_kernel(shapes, handle=0x1000, graph=SUB_BA):
    """A kernel on cuda:0 of an open runtime; its handle is never launched (every call below
    fails a check first)."""
    k = _kernel(graph, shapes, device=0)
    k._k, k.runtime = ctypes.c_void_p(0xdead0), _open_runtime(handle)
    return k


def _cuda_call(op, *ts):
    """The op's CUDA kernel on these tensors, whatever their device."""
    return op.op.redispatch(torch._C.DispatchKeySet(torch._C.DispatchKey.CUDA), *ts)


def _has_cuda_kernel(op):
    return torch._C._dispatch_has_kernel_for_dispatch_key(op.name, "CUDA")


def test_builds_and_registers_the_cuda_kernel(ext):
    assert os.path.exists(ext.path) and ext.path.startswith(os.environ["KTUNE_TORCH_EXT_DIR"])
    op = _bound_kernel({"M": 24}).as_torch_op()
    entry = torch_op._ops[op.name.split("::")[1]]
    assert entry.launcher is ext and entry.bound_runtime == 0x1000
    assert _has_cuda_kernel(op)
    # the CPU kernel stays Python's, the fake too: meta tensors still trace
    m = torch.empty(24, 256, device="meta")
    assert op(m, m).shape == (24, 256)


@pytest.mark.parametrize("a,b,needle", [
    (torch.zeros(24, 256, dtype=torch.float16), torch.zeros(24, 256),
     "input 0 'a': dtype is torch.float16, expected torch.float32 (f32)"),
    (torch.zeros(24, 256), torch.zeros(8, 256),
     "input 1 'b': shape is [8, 256], expected [24, 256] (shapes M=24)"),
    (torch.zeros(256, 24).t(), torch.zeros(24, 256),
     "input 0 'a': is not contiguous (call .contiguous())"),
    (torch.zeros(24, 256), torch.zeros(24, 256),
     "input 0 'a': is on cpu, not on a CUDA device"),
])
def test_cpp_checks_name_the_input(ext, a, b, needle):
    op = _bound_kernel({"M": 24}).as_torch_op()
    with pytest.raises(ValueError) as e:
        _cuda_call(op, a, b)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_prepacked_input_checked_as_bytes(ext):
    k = _bound_kernel({"M": 24})
    k._packed = (0, 512)
    k._fast = None
    op = k.as_torch_op()
    with pytest.raises(ValueError, match=re.escape(
            "input 1 'b': this kernel wants it pre-packed (512 bytes): pass "
            "kernel.prepack('b', b)")):
        _cuda_call(op, torch.zeros(24, 256), torch.zeros(24, 256))


def test_closing_the_runtime_stops_its_launches(ext):
    k1 = _bound_kernel({"M": 40}, handle=0x2000)
    op = k1.as_torch_op()
    entry = torch_op._ops[op.name.split("::")[1]]
    k2 = _bound_kernel({"M": 40}, handle=0x3000)  # the same kernel from another runtime
    assert k2.as_torch_op().op is op.op and entry.bound_runtime == 0x3000
    _close(k2.runtime)  # back to k1's, still open
    assert entry.bound_runtime == 0x2000
    _close(k1.runtime)  # nothing open is left: calls raise, naming the op
    assert entry.bound_runtime is None
    a = torch.zeros(40, 256)
    with pytest.raises(ValueError, match=re.escape(f"{op.name}: no kernel for this op is "
                                                   "loaded any more")):
        _cuda_call(op, a, a)
    k3 = _bound_kernel({"M": 40}, handle=0x4000)
    k3.as_torch_op()  # looked up again: bound again
    assert entry.bound_runtime == 0x4000
    with pytest.raises(ValueError, match="input 0 'a': is on cpu"):
        _cuda_call(op, a, a)


def test_runtime_close_calls_the_hook(ext, monkeypatch):
    # Runtime.close tells the ops before the kernels go (the C++ side keeps raw handles)
    seen = []
    monkeypatch.setattr(torch_op, "runtime_closing", lambda rt: seen.append(rt._handle.value))
    closed = []
    rt = ktune.Runtime.__new__(ktune.Runtime)
    rt._handle = ctypes.c_void_p(0x5000)
    rt.close(_close=lambda h: closed.append((list(seen), h.value)))
    assert closed == [([0x5000], 0x5000)] and rt._handle is None


def test_failed_registration_leaves_no_cuda_kernel(ext, monkeypatch):
    k = _bound_kernel({"M": 56})
    short = torch_op.op_name(k)

    def broken(*a, **kw):
        raise RuntimeError("register_fake failed")
    monkeypatch.setattr(torch.library, "register_fake", broken)
    with pytest.raises(RuntimeError, match="register_fake failed"):
        k.as_torch_op()
    assert not hasattr(torch.ops.ktune, short) and short not in torch_op._ops
    monkeypatch.undo()
    monkeypatch.setattr(_torch_ext, "_state", ext)  # undo() put the process's choice back
    op = k.as_torch_op()  # registers cleanly: no kernel of the failed try was left behind
    assert _has_cuda_kernel(op)


def test_failed_binding_of_parameters_leaves_no_cuda_kernel(ext, monkeypatch):
    # a failure after the op is defined (here: binding captured parameters) undoes the C++
    # registration with the schema
    k = _bound_kernel({"M": 88})
    short = torch_op.op_name(k)

    def broken(kernel):
        raise RuntimeError("parameters failed")
    monkeypatch.setattr(torch_op.TorchOp, "_bind_params", staticmethod(broken))
    with pytest.raises(RuntimeError, match="parameters failed"):
        k.as_torch_op()
    assert not hasattr(torch.ops.ktune, short) and short not in torch_op._ops
    with pytest.raises(RuntimeError, match="does not exist"):  # no kernel keeps the name
        torch._C._dispatch_has_kernel_for_dispatch_key(f"ktune::{short}", "CUDA")
    monkeypatch.undo()
    monkeypatch.setattr(_torch_ext, "_state", ext)
    assert _has_cuda_kernel(k.as_torch_op())


def test_several_outputs(ext):
    op = _bound_kernel({"M": 4, "N": 6}, graph=TWO_RELUS).as_torch_op()
    assert _has_cuda_kernel(op) and len(op.outputs) == 2
    with pytest.raises(ValueError, match="input 0 'x': shape is"):
        _cuda_call(op, torch.zeros(5), torch.zeros(6))


def test_without_a_compiler_ops_launch_through_python(monkeypatch, tmp_path):
    monkeypatch.setenv("KTUNE_TORCH_EXT", "1")
    monkeypatch.setenv("KTUNE_TORCH_EXT_DIR", str(tmp_path))
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-c++"))
    monkeypatch.setattr(_torch_ext, "_state", None)
    with pytest.warns(RuntimeWarning, match=r"custom ops launch through Python .*no C\+\+ "
                                            r"compiler '.*no-such-c\+\+' \(set CXX\)"):
        assert _torch_ext.launcher(torch) is None
    assert _torch_ext.launcher(torch) is None  # decided once: no second warning, no retry
    op = _bound_kernel({"M": 72}).as_torch_op()
    assert torch_op._ops[op.name.split("::")[1]].launcher is None and _has_cuda_kernel(op)
    with pytest.raises(ValueError, match="input 0 'a': is on cpu"):
        _cuda_call(op, torch.zeros(72, 256), torch.zeros(72, 256))  # the Python launch


def test_a_failed_build_names_the_first_error(monkeypatch, tmp_path):
    bad = tmp_path / "broken.cpp"
    bad.write_text("int main( {\n")
    monkeypatch.setattr(_torch_ext, "SOURCE", str(bad))
    monkeypatch.setenv("KTUNE_TORCH_EXT_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CXX", raising=False)
    with pytest.raises(_torch_ext.Unavailable, match=r"c\+\+ failed building .*broken.cpp: "
                                                     r".*error"):
        _torch_ext.build(torch)
    assert not [p for p in os.listdir(tmp_path / "cache") if p.endswith(".tmp")]


def test_disabled_means_python(monkeypatch):
    monkeypatch.setenv("KTUNE_TORCH_EXT", "0")
    monkeypatch.setattr(_torch_ext, "_state", None)
    assert _torch_ext.launcher(torch) is None
