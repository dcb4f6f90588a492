"""On a GPU (issue 17 item 4): tuned kernels as custom ops (Kernel.as_torch_op) inside
torch.compile(fullgraph=True) and under CUDA graph capture and replay, bit-identical to a plain
call. Skipped without PyTorch, a CUDA device, or the built worker (as test_gpu.py).

The worker: $KTUNE_WORKER, else the build's search/ktune-worker; the CLI: $KTUNE_BIN, else the
build's client/ktune."""

import os
import re

import pytest

from conftest import ROOT, build_path, have_cuda_torch, tune_local

import ktune

pytestmark = pytest.mark.gpu

ok, why = have_cuda_torch()
if not ok:
    pytest.skip(why, allow_module_level=True)

import torch  # noqa: E402

SOFTMAX = os.path.join(ROOT, "examples", "softmax.json")
GEMM = os.path.join(ROOT, "examples", "gemm_bias_relu.json")
TWO_RELUS = os.path.join(ROOT, "tests", "gpu", "two_relus_xz.json")
SOFTMAX_SHAPES = {"M": 256, "N": 1024}
GEMM_SHAPES = {"M": 256}
TWO_RELUS_SHAPES = {"M": 4096, "N": 1000}


def _exe(env, *parts):
    p = os.environ.get(env) or build_path(*parts)
    if not os.access(p, os.X_OK):
        pytest.skip(f"{p} is not built (set {env})")
    return p


@pytest.fixture(scope="module")
def rt(tmp_path_factory):
    cli = _exe("KTUNE_BIN", "client", "ktune")
    worker = _exe("KTUNE_WORKER", "search", "ktune-worker")
    cache = str(tmp_path_factory.mktemp("torch_op") / "cache")
    tune_local(cli, worker, cache, SOFTMAX, SOFTMAX_SHAPES, budget="15s")
    tune_local(cli, worker, cache, GEMM, GEMM_SHAPES, budget="20s")
    tune_local(cli, worker, cache, TWO_RELUS, TWO_RELUS_SHAPES, budget="5s")
    with ktune.Runtime(cache) as r:
        yield r


def _gemm(k):
    """The gemm's inputs as a call takes them (W pre-packed when the kernel asks), and raw."""
    raw = {"A": torch.randn(256, 512, device="cuda", dtype=torch.float16),
           "W": torch.randn(512, 256, device="cuda", dtype=torch.float16) / 16,
           "bias": torch.randn(256, device="cuda", dtype=torch.float16)}
    args = [k.prepack(n, raw[n]) if k.prepack_size(n) else raw[n] for n in k.inputs]
    return args, raw


def _cases(rt):
    """(kernel, inputs in declared order) for a one-output, a gemm (pre-pack, workspace) and a
    two-output kernel."""
    k = rt.lookup(SOFTMAX, SOFTMAX_SHAPES)
    yield k, [torch.randn(256, 1024, device="cuda") * 4]
    k = rt.lookup(GEMM, GEMM_SHAPES)
    yield k, _gemm(k)[0]
    k = rt.lookup(TWO_RELUS, TWO_RELUS_SHAPES)
    yield k, [torch.randn(4096, device="cuda"), torch.randn(1000, device="cuda")]


def _as_tuple(y):
    return y if isinstance(y, tuple) else (y,)


def _assert_identical(got, want, k):
    for g, w, name in zip(_as_tuple(got), _as_tuple(want), k.outputs):
        assert g.shape == w.shape and g.dtype == w.dtype, name
        assert torch.equal(g, w), f"{k.graph.name} output {name}: max |diff| " \
            f"{(g.float() - w.float()).abs().max().item()}"


def _deterministic(k, args):
    a, b = k(*args), k(*args)
    torch.cuda.synchronize()
    return all(torch.equal(x, y) for x, y in zip(_as_tuple(a), _as_tuple(b)))


def test_op_is_the_plain_call(rt):
    for k, args in _cases(rt):
        assert _deterministic(k, args), f"{k.graph.name}: two plain calls differ"
        op = k.as_torch_op()
        _assert_identical(op(*args), k(*args), k)
        _assert_identical(op.op(*args), k(*args), k)  # the OpOverload itself
        named = dict(zip(k.inputs, args))
        _assert_identical(op(**named), k(**named), k)
        result = torch.library.opcheck(op.op, tuple(args))
        assert all(v == "SUCCESS" for v in result.values()), result


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_op_inside_compile_fullgraph(rt, mode):
    torch._dynamo.reset()
    for k, args in _cases(rt):
        op = k.as_torch_op()

        def f(*xs):
            ys = _as_tuple(op(*xs))
            return tuple([y * 2 for y in ys])  # work around the op, for inductor to fuse
        compiled = torch.compile(f, fullgraph=True, mode=mode)
        want = tuple(y * 2 for y in _as_tuple(k(*args)))
        for _ in range(3):  # reduce-overhead records a CUDA graph after warm-up calls
            _assert_identical(compiled(*args), want, k)
        # fresh inputs in the same (static) tensors: recomputed, not a stale result
        for x in args:
            if x.dtype != torch.uint8:
                x.normal_()
        want = tuple(y * 2 for y in _as_tuple(k(*args)))
        _assert_identical(compiled(*args), want, k)


def test_op_under_cuda_graph_capture(rt):
    for k, args in _cases(rt):
        op = k.as_torch_op()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):  # warm-up off the default stream, as torch's docs do
            for _ in range(3):
                op(*args)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_out = op(*args)
        # new values in the captured inputs, then replay: the captured launch reads them
        for x in args:
            if x.dtype != torch.uint8:
                x.normal_()
        g.replay()
        torch.cuda.synchronize()
        _assert_identical(static_out, k(*args), k)
        for x in args:
            if x.dtype != torch.uint8:
                x.normal_()
        g.replay()
        _assert_identical(static_out, k(*args), k)


def test_compiled_function_under_cuda_graph_capture(rt):
    torch._dynamo.reset()
    k = rt.lookup(SOFTMAX, SOFTMAX_SHAPES)
    op = k.as_torch_op()
    x = torch.randn(256, 1024, device="cuda")
    f = torch.compile(lambda x: op(x) + 1, fullgraph=True)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # compiles, then warms up, off the default stream
        for _ in range(3):
            f(x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = f(x)
    x.normal_()
    g.replay()
    _assert_identical(y, k(x) + 1, k)


def test_captured_parameters_are_filled_in(rt):
    # a graph that remembers its weights (what ktune.capture makes): the op takes A alone
    g = ktune.Graph(GEMM)
    k0 = rt.lookup(g, GEMM_SHAPES)
    _, raw = _gemm(k0)
    g.params = {"W": raw["W"].cpu(), "bias": raw["bias"].float()}  # moved and cast once
    k = rt.lookup(g, GEMM_SHAPES)
    op = k.as_torch_op()
    want = k(*[k.prepack(n, raw[n]) if k.prepack_size(n) else raw[n] for n in k.inputs])
    _assert_identical(op(raw["A"]), want, k)
    compiled = torch.compile(lambda a: op(a), fullgraph=True)
    _assert_identical(compiled(raw["A"]), want, k)


def test_bad_inputs_name_the_input(rt):
    k = rt.lookup(SOFTMAX, SOFTMAX_SHAPES)
    op = k.as_torch_op()
    x = torch.randn(256, 1024, device="cuda")
    cases = [
        (x.half(), "input 0 'x': dtype is torch.float16"),
        (x[:128], "input 0 'x': shape is [128, 1024], expected [256, 1024]"),
        (x.cpu(), "input 0 'x': is on cpu"),
        (x.t().contiguous().t(), "input 0 'x': is not contiguous"),
    ]
    for bad, needle in cases:
        with pytest.raises(ValueError) as e:
            op(bad)
        assert needle in str(e.value) and "\n" not in str(e.value)
        torch._dynamo.reset()  # static shapes: the message shows the sizes
        with pytest.raises(Exception, match=re.escape(needle)):
            torch.compile(lambda t: op(t), fullgraph=True, backend="eager", dynamic=False)(bad)
