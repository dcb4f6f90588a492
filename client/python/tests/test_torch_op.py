"""Kernel.as_torch_op without a GPU (issue 17 item 4): registration, schema, the fake
implementation under meta and fake tensors, torch.compile(fullgraph=True) tracing through the op,
and the errors. The launches themselves are in test_torch_op_gpu.py.

The kernels here are Kernel objects over no loaded kernel (as in test_runtime.py): what the op
needs of them without a GPU is the graph with its shapes bound."""

import ctypes
import gc
import json
import os
import re
import types

import pytest

from conftest import ROOT

import ktune

torch = pytest.importorskip("torch")
from ktune import torch_op  # noqa: E402

SUB_BA = os.path.join(ROOT, "tests", "gpu", "sub_ba.json")
TWO_RELUS = os.path.join(ROOT, "tests", "gpu", "two_relus_xz.json")
GEMM = os.path.join(ROOT, "examples", "gemm_bias_relu.json")


def _kernel(graph, shapes, packed=None, source="", device=None):
    """A Kernel over no loaded kernel; info as a lookup would fill it in."""
    g = graph if isinstance(graph, ktune.Graph) else ktune.Graph(graph)
    info = types.SimpleNamespace(match="exact", n_outputs=len(g.outputs), family="test",
                                 schedule="s", source=source, tolerance=1e-5)
    fixed = types.SimpleNamespace(info=info, workspace_size=0,
                                  packed=packed or (0,) * len(g.inputs))
    return ktune.Kernel(None, ctypes.c_void_p(), g, shapes, "exact", device, fixed)


def _meta(*shape, dtype=torch.float32):
    return torch.empty(*shape, device="meta", dtype=dtype)


def test_registers_one_op_with_the_declared_schema():
    k = _kernel(SUB_BA, {"M": 4})
    op = k.as_torch_op()
    assert re.fullmatch(r"ktune::sub_ba_[0-9a-f]{12}", op.name)
    short = op.name.split("::")[1]
    assert getattr(torch.ops.ktune, short).default is op.op
    assert str(op.op._schema) == f"{op.name}(Tensor a, Tensor b) -> Tensor"
    assert op.inputs == ("a", "b") and op.outputs == ("out",)
    # again, or from another Kernel object for the same kernel: the op already registered,
    # launching the newest kernel object; nothing fails
    assert k.as_torch_op() is op
    k2 = _kernel(SUB_BA, {"M": 4})
    op2 = k2.as_torch_op()
    assert op2.op is op.op and op2.kernel is k2
    assert torch_op._ops[short].kernel() is k2
    del op2, k2
    gc.collect()  # k2 and its TorchOp refer to each other
    assert torch_op._ops[short].kernel() is k  # k2 is gone: back to k
    # another shape, or another kernel for the key (source), is another op
    assert _kernel(SUB_BA, {"M": 8}).as_torch_op().name != op.name
    assert _kernel(SUB_BA, {"M": 4}, source="__global__ void k() {}").as_torch_op().name \
        != op.name


def test_declared_order_is_part_of_the_op():
    # one canonical problem, two declarations: (x, z) and (z, x) take their inputs differently
    with open(TWO_RELUS) as f:
        doc = json.load(f)
    xz = _kernel(ktune.Graph(doc), {"M": 4, "N": 6}).as_torch_op()
    doc["inputs"] = {"z": doc["inputs"]["z"], "x": doc["inputs"]["x"]}
    zx = _kernel(ktune.Graph(doc), {"M": 4, "N": 6}).as_torch_op()
    assert xz.name != zx.name
    assert str(xz.op._schema).endswith("(Tensor x, Tensor z) -> (Tensor, Tensor)")
    assert str(zx.op._schema).endswith("(Tensor z, Tensor x) -> (Tensor, Tensor)")
    rx, rz = xz(_meta(4), _meta(6))
    assert rx.shape == (4,) and rz.shape == (6,)
    rx, rz = zx(z=_meta(6), x=_meta(4))
    assert rx.shape == (4,) and rz.shape == (6,)


def test_names_are_sanitised():
    doc = {"name": "my-block.v2", "inputs": {"up.weight": {"dtype": "f16", "shape": [4]},
                                             "def": {"dtype": "f16", "shape": [4]},
                                             "up_weight": {"dtype": "f16", "shape": [4]}},
           "nodes": [{"out": "s", "op": "add", "in": ["up.weight", "def"]},
                     {"out": "y", "op": "add", "in": ["s", "up_weight"]}],
           "outputs": ["y"]}
    op = _kernel(ktune.Graph(doc), {}).as_torch_op()
    assert re.fullmatch(r"ktune::my_block_v2_[0-9a-f]{12}", op.name)
    assert str(op.op._schema).endswith(
        "(Tensor up_weight, Tensor in1_def, Tensor up_weight_2) -> Tensor")
    y = op(_meta(4, dtype=torch.float16), **{"def": _meta(4, dtype=torch.float16),
                                            "up_weight": _meta(4, dtype=torch.float16)})
    assert y.shape == (4,) and y.dtype == torch.float16


def test_fake_impl_gives_the_outputs():
    op = _kernel(GEMM, {"M": 32}).as_torch_op()
    a, w, b = (_meta(32, 512, dtype=torch.float16), _meta(512, 256, dtype=torch.float16),
               _meta(256, dtype=torch.float16))
    y = op(a, w, b)
    assert y.shape == (32, 256) and y.dtype == torch.float16 and y.device.type == "meta"
    # under FakeTensorMode with CUDA tensors (what torch.compile traces with): the op is
    # recorded as one node, the output on the inputs' device
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx
    with FakeTensorMode():
        args = [torch.empty(t.shape, dtype=t.dtype, device="cuda") for t in (a, w, b)]
        y = op(*args)
        assert y.device.type == "cuda" and y.shape == (32, 256)
        gm = make_fx(lambda a, w, b: op(a, w, b).float() * 2)(*args)
    calls = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert op.op in calls


def test_compile_fullgraph_traces_through_the_op():
    op = _kernel(SUB_BA, {"M": 4}).as_torch_op()
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    @torch.compile(fullgraph=True, backend=backend)
    def f(a, b):
        return op(a, b=b) * 2 + 1

    y = f(_meta(4, 256), _meta(4, 256))
    assert y.shape == (4, 256)
    assert len(graphs) == 1
    assert any(n.target is op.op for n in graphs[0].graph.nodes)
    # dynamic shapes: the kernel's size is pinned, the graph still traces
    g = torch.compile(lambda a, b: op(a, b), fullgraph=True, backend="eager", dynamic=True)
    assert g(_meta(4, 256), _meta(4, 256)).shape == (4, 256)
    with pytest.raises(Exception, match=re.escape("input 0 'a': shape is [")):
        g(_meta(5, 256), _meta(5, 256))


@pytest.mark.parametrize("a,b,exc,needle", [
    (_meta(4, 256, dtype=torch.float16), _meta(4, 256), ValueError,
     "input 0 'a': dtype is torch.float16, expected torch.float32 (f32)"),
    (_meta(4, 256), _meta(8, 256), ValueError,
     "input 1 'b': shape is [8, 256], expected [4, 256] (the kernel is for shapes M=4)"),
    (_meta(4, 256), _meta(4, 256, 1), ValueError, "input 1 'b': shape is [4, 256, 1]"),
    (_meta(256, 4).t(), _meta(4, 256), ValueError, "input 0 'a': is not contiguous"),
    (torch.zeros(4, 256), torch.zeros(4, 256), ValueError,
     "input 0 'a': is on cpu, not on a CUDA device"),
])
def test_bad_input_names_it_in_one_line(a, b, exc, needle):
    op = _kernel(SUB_BA, {"M": 4}).as_torch_op()
    with pytest.raises(exc) as e:
        op(a, b)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_bad_call_names_the_input():
    op = _kernel(SUB_BA, {"M": 4}).as_torch_op()
    a = _meta(4, 256)
    with pytest.raises(TypeError, match="missing input 'b'"):
        op(a)
    with pytest.raises(TypeError, match=r"unexpected input 'c' \(inputs: a, b\)"):
        op(a, a, c=a)
    with pytest.raises(TypeError, match="input 'a' given both"):
        op(a, a=a)
    # inside a compiled function the fake names it too
    f = torch.compile(lambda a, b: op(a, b), fullgraph=True, backend="eager")
    with pytest.raises(Exception, match=re.escape("input 1 'b': dtype is torch.float16")):
        f(a, _meta(4, 256, dtype=torch.float16))


def test_prepacked_input_is_declared_as_bytes():
    # an input the kernel wants pre-packed is passed as kernel.prepack gives it: uint8 bytes
    op = _kernel(GEMM, {"M": 32}, packed=(0, 4096, 0)).as_torch_op()
    a, b = _meta(32, 512, dtype=torch.float16), _meta(256, dtype=torch.float16)
    assert op(a, _meta(4096, dtype=torch.uint8), b).shape == (32, 256)
    with pytest.raises(ValueError, match=re.escape("input 1 'W': this kernel wants it "
                                                   "pre-packed (4096 bytes)")):
        op(a, _meta(512, 256, dtype=torch.float16), b)


def test_nothing_is_registered_half_way(monkeypatch):
    # an unbound dimension: refused before anything is defined
    k = _kernel(SUB_BA, {})
    with pytest.raises(ValueError, match=r"'a': shape \[None, 256\] has an unbound dimension"):
        k.as_torch_op()
    # a failure after the schema is defined: the schema goes too, and a later try succeeds
    k = _kernel(SUB_BA, {"M": 12})
    short = torch_op.op_name(k)

    def broken(*a, **kw):
        raise RuntimeError("register_fake failed")
    monkeypatch.setattr(torch.library, "register_fake", broken)
    with pytest.raises(RuntimeError, match="register_fake failed") as failed:
        k.as_torch_op()
    assert not hasattr(torch.ops.ktune, short)
    monkeypatch.undo()
    op = k.as_torch_op()  # the failed try's frames are alive (failed): undone explicitly
    assert op.name == f"ktune::{short}" and failed.value
    assert op(_meta(12, 256), _meta(12, 256)).shape == (12, 256)


def test_opcheck_on_meta():
    # torch's own checks of a custom op: schema, autograd registration, fake vs meta, AOT
    op = _kernel(GEMM, {"M": 32}).as_torch_op()
    args = (_meta(32, 512, dtype=torch.float16), _meta(512, 256, dtype=torch.float16),
            _meta(256, dtype=torch.float16))
    result = torch.library.opcheck(op.op, args)
    assert all(v == "SUCCESS" for v in result.values()), result


@pytest.mark.skipif(torch.cuda.is_available(),
                    reason="meta weights cannot move to a CUDA device; test_torch_op_gpu.py "
                           "covers captured weights there")
def test_captured_parameters_belong_to_their_op():
    # two captures of one structure (two layers of the same shapes) share the registered op;
    # each fills in its own parameters (graph.params, as ktune.capture sets it)
    w1, w2 = _meta(4, 256), _meta(4, 256)
    k1, k2 = _kernel(SUB_BA, {"M": 4}), _kernel(SUB_BA, {"M": 4})
    k1.graph.params, k2.graph.params = {"b": w1}, {"b": w2}
    op1, op2 = k1.as_torch_op(), k2.as_torch_op()
    assert op1.op is op2.op
    assert op1._params["b"] is w1 and op2._params["b"] is w2
    assert op1(_meta(4, 256)).shape == (4, 256)  # b filled in
    assert op1(a=_meta(4, 256)).shape == (4, 256)
    with pytest.raises(ValueError, match="input 1 'b': dtype is torch.float16"):
        op1(_meta(4, 256), _meta(4, 256, dtype=torch.float16))  # given: it wins


def test_quick_path_falls_back_to_named_errors():
    # a kernel whose device is known takes the quick path (precomputed checks); whatever those
    # refuse goes through the full checks, which name the input or output as declared
    k = _kernel(SUB_BA, {"M": 4}, device=0)
    k.runtime = types.SimpleNamespace(_handle=1)  # open (nothing is launched here)
    a = torch.zeros(4, 256)
    cases = [((a, a), {}, ValueError, "input 0 'a': is on cpu, not on a CUDA device"),
             ((_meta(4, 256), a), {}, ValueError, "input 0 'a': is on meta"),
             ((a, [1.0]), {}, ValueError, "input 0 'a': is on cpu"),
             (([1.0], a), {}, TypeError, "input 0 'a': expected a torch.Tensor, got list"),
             ((a, a), {"out": "y"}, ValueError, "input 0 'a': is on cpu")]
    for args, kw, exc, needle in cases:
        with pytest.raises(exc) as e:
            k(*args, **kw)
        assert needle in str(e.value) and "\n" not in str(e.value)
    assert k._fast and k._fast.checks == ((torch.float32, (4, 256)),) * 2


def _run(*argv):
    import subprocess
    import sys
    r = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": os.path.join(ROOT, "client", "python")})
    return r.returncode, r.stderr.strip()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is here: the GPU runs it")
def test_example_and_benchmark_say_why_they_cannot_run():
    # without a GPU (and, until it lands, without ktune.capture) the example and the benchmark
    # stop with one line saying why, not a traceback
    rc, err = _run(os.path.join(ROOT, "examples", "python", "mlp_block.py"), "--skip-tune")
    want = "no CUDA device here" if hasattr(ktune, "capture") else "has no ktune.capture"
    assert rc == 1 and want in err.splitlines()[-1] and "Traceback" not in err, err
    bench = os.path.join(ROOT, "bench", "host_overhead.py")
    rc, err = _run(bench, "--cache", "/nonexistent")
    assert rc == 1 and err.endswith("no CUDA device here") and "Traceback" not in err, err
    rc, err = _run(bench, "--calls", "0", "--cache", "/nonexistent")
    assert rc == 2 and "--calls" in err, err


@pytest.mark.skipif(not hasattr(ktune, "capture"), reason="this ktune has no ktune.capture")
def test_captured_module_as_op_takes_its_arguments_alone():
    # the example's MLP block, captured; its op takes x alone (the weights are filled in) and
    # traces inside torch.compile(fullgraph=True)
    import sys
    sys.path.insert(0, os.path.join(ROOT, "examples", "python"))
    try:
        from mlp_block import make_block
    finally:
        sys.path.pop(0)
    block = make_block(torch, 64, 256).eval().half()
    g = ktune.capture(block, torch.randn(8, 64).half(), name="mlp_block")
    op = _kernel(g, {}).as_torch_op()
    assert op.inputs[0] == "x" and set(op._params) == set(g.params) == set(op.inputs[1:])
    assert all(not t.requires_grad for t in op._params.values())
    assert str(op.op._schema).startswith(f"{op.name}(Tensor x, Tensor up_weight, ")
    x = _meta(8, 64, dtype=torch.float16)
    y = torch.compile(lambda x: op(x), fullgraph=True, backend="eager")(x)
    assert y.shape == (8, 64) and y.dtype == torch.float16
    with pytest.raises(ValueError, match=re.escape("input 0 'x': shape is [8, 32]")):
        op(_meta(8, 32, dtype=torch.float16))
