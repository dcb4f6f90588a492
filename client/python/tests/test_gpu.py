"""On a GPU: tune with the real ktune-worker, look the winners up and call them on torch tensors,
compared with torch. Skipped without PyTorch, a CUDA device, or the built worker.

The worker: $KTUNE_WORKER, else the build's search/ktune-worker; the CLI: $KTUNE_BIN, else the
build's client/ktune."""

import errno
import json
import os

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
SOFTMAX_SHAPES = {"M": 256, "N": 1024}
GEMM_SHAPES = {"M": 256}


def _exe(env, *parts):
    p = os.environ.get(env) or build_path(*parts)
    if not os.access(p, os.X_OK):
        pytest.skip(f"{p} is not built (set {env})")
    return p


@pytest.fixture(scope="module")
def gpu_cache(tmp_path_factory):
    cli = _exe("KTUNE_BIN", "client", "ktune")
    worker = _exe("KTUNE_WORKER", "search", "ktune-worker")
    cache = str(tmp_path_factory.mktemp("gpu") / "cache")
    tune_local(cli, worker, cache, SOFTMAX, SOFTMAX_SHAPES, budget="20s")
    tune_local(cli, worker, cache, GEMM, GEMM_SHAPES, budget="30s")
    with ktune.Runtime(cache) as rt:
        yield rt


def test_softmax_matches_torch(gpu_cache):
    k = gpu_cache.lookup(SOFTMAX, SOFTMAX_SHAPES)
    assert k.match == "exact" and k.info.n_inputs == 1 and k.info.n_outputs == 1
    assert k.info.source and k.info.time_ns > 0
    assert gpu_cache.lookup(SOFTMAX, SOFTMAX_SHAPES)._k.value == k._k.value  # memoised
    x = torch.randn(256, 1024, device="cuda") * 4
    y = k(x)
    assert y.shape == x.shape and y.dtype == torch.float32 and y.device == x.device
    torch.testing.assert_close(y, torch.softmax(x, dim=-1), rtol=1e-5, atol=1e-6)

    # out= and a side stream: the result lands in the given tensor, ordered on that stream
    out = torch.full_like(x, float("nan"))
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    assert k(x, out=out, stream=s) is out
    s.synchronize()
    torch.testing.assert_close(out, torch.softmax(x, dim=-1), rtol=1e-5, atol=1e-6)


def test_gemm_bias_relu_matches_torch(gpu_cache):
    g = ktune.Graph(GEMM)
    k = gpu_cache.lookup(g, GEMM_SHAPES)
    t = {"A": torch.randn(256, 512, device="cuda", dtype=torch.float16),
         "W": torch.randn(512, 256, device="cuda", dtype=torch.float16) / 16,
         "bias": torch.randn(256, device="cuda", dtype=torch.float16)}
    assert k.inputs == g.inputs == ("A", "W", "bias")  # declared order
    args = {name: k.prepack(name, t[name]) if k.prepack_size(name) else t[name]
            for name in k.inputs}
    ws = None
    if k.workspace_size:
        ws = torch.zeros(k.workspace_size, dtype=torch.uint8, device="cuda")
    want = torch.relu(t["A"].float() @ t["W"].float() + t["bias"].float())
    # declared order, by name, and both
    for y in (k(args["A"], args["W"], args["bias"], workspace=ws), k(**args, workspace=ws),
              k(args["A"], bias=args["bias"], W=args["W"], workspace=ws)):
        torch.testing.assert_close(y.float(), want, rtol=2e-2, atol=2e-2)


def test_inputs_are_checked(gpu_cache):
    k = gpu_cache.lookup(SOFTMAX, SOFTMAX_SHAPES)
    x = torch.randn(256, 1024, device="cuda")
    cases = [
        ((x.half(),), ValueError, "input 0 'x': dtype is torch.float16"),
        ((x[:128],), ValueError, "input 0 'x': shape is [128, 1024], expected [256, 1024]"),
        ((x.cpu(),), ValueError, "input 0 'x': is on cpu"),
        ((x.t().contiguous().t(),), ValueError, "not contiguous"),
        ((x, x), TypeError, "kernel takes 1 inputs (x), got 2"),
        ((), TypeError, "missing input 'x'"),
        (([1.0],), TypeError, "expected a torch.Tensor"),
    ]
    for args, exc, needle in cases:
        with pytest.raises(exc) as e:
            k(*args)
        assert needle in str(e.value)
    with pytest.raises(ValueError, match="output 0 'y'"):
        k(x, out=torch.empty(256, 1024, device="cuda", dtype=torch.float16))
    with pytest.raises(TypeError, match="unexpected input 'X'"):
        k(X=x)
    with pytest.raises(ValueError, match="input 0 'x': dtype is torch.float16"):
        k(x=x.half())


def test_aliased_out_is_refused(gpu_cache):
    # kernels declare their pointers __restrict__ (softmax re-reads x after writing y): an
    # output overlapping an input is refused by ktune_launch, in place or in part
    k = gpu_cache.lookup(SOFTMAX, SOFTMAX_SHAPES)
    buf = torch.randn(512, 1024, device="cuda")
    x = buf[:256]
    for out, needle in ((x, "output 0 'y' ("), (buf[128:384], "overlaps input 0 'x' (")):
        with pytest.raises(ktune.KtuneError) as e:
            k(x, out=out)
        assert e.value.errno == errno.EINVAL and needle in str(e.value)
    torch.testing.assert_close(k(x, out=buf[256:]), torch.softmax(x, dim=-1), rtol=1e-5,
                               atol=1e-6)  # adjacent, not overlapping


def test_missing_key_raises_enoent(gpu_cache):
    with pytest.raises(ktune.KtuneError) as e:
        gpu_cache.lookup(SOFTMAX, {"M": 3, "N": 5})
    assert e.value.errno == errno.ENOENT


# Issue 15's findings 1 and 2 on the GPU: a record is served only to a caller posing its very
# problem, and then launches on the caller's buffers in the order the record was tuned for.
GPU_GRAPHS = os.path.join(ROOT, "tests", "gpu")


def _graph(name):
    return os.path.join(GPU_GRAPHS, name + ".json")


@pytest.fixture(scope="module")
def problem_cache(tmp_path_factory):
    cli = _exe("KTUNE_BIN", "client", "ktune")
    worker = _exe("KTUNE_WORKER", "search", "ktune-worker")
    cache = str(tmp_path_factory.mktemp("problems") / "cache")
    tune_local(cli, worker, cache, _graph("rowsum_mn"), {"M": 1024, "N": 64}, budget="10s")
    tune_local(cli, worker, cache, _graph("two_relus_xz"), {"M": 4096, "N": 1000}, budget="10s")
    tune_local(cli, worker, cache, _graph("sub_ba"), {"M": 512}, budget="10s")
    with ktune.Runtime(cache) as rt:
        yield rt


def test_renamed_symbols_get_their_own_problem(problem_cache):
    # X[N,M] bound M=1024,N=64 is 64 rows of 1024: the 1024-rows-of-64 record is not its kernel
    with pytest.raises(ktune.KtuneError) as e:
        problem_cache.lookup(_graph("rowsum_nm"), {"M": 1024, "N": 64})
    assert e.value.errno == errno.ENOENT
    # the same problem under other names shares the record, and computes it
    for name, shapes in (("rowsum_mn", {"M": 1024, "N": 64}), ("rowsum_pq", {"P": 1024, "Q": 64})):
        k = problem_cache.lookup(_graph(name), shapes)
        x = torch.randn(1024, 64, device="cuda")
        torch.testing.assert_close(k(x), x.double().sum(dim=1).float(), rtol=1e-5, atol=1e-5)


def test_declaration_order_keeps_buffers_apart(problem_cache):
    # one record for a 4096- and a 1000-element relu, whichever is declared first and whichever
    # symbol holds which size; each call passes its tensors in declared order
    for name in ("two_relus_xz", "two_relus_zx"):
        for shapes in ({"M": 4096, "N": 1000}, {"M": 1000, "N": 4096}):
            k = problem_cache.lookup(_graph(name), shapes)
            assert k.inputs == (("x", "z") if name == "two_relus_xz" else ("z", "x"))
            sizes = {"x": shapes["M"], "z": shapes["N"]}
            t = {n: torch.randn(sizes[n], device="cuda") for n in sizes}
            outs = k(*[t[n] for n in k.inputs])
            for out_name, y in zip(k.outputs, outs):
                src = "x" if out_name == "rx" else "z"
                assert y.shape == t[src].shape
                torch.testing.assert_close(y, torch.relu(t[src]), rtol=0, atol=0)


def test_non_commutative_same_shapes_any_call(problem_cache):
    # Issue 17 item 1: out = sub(b, a), a and b of one shape and dtype, declared (a, b); ktune's
    # canonical order is (b, a). Called in declared order, by name in any order, or mixed, the
    # result is b - a: a swap would run without error and be wrong.
    k = problem_cache.lookup(_graph("sub_ba"), {"M": 512})
    assert k.inputs == ("a", "b") and k.outputs == ("out",)
    a = torch.randn(512, 256, device="cuda")
    b = torch.randn(512, 256, device="cuda") + 3
    want = b - a
    for y in (k(a, b), k(a=a, b=b), k(b=b, a=a), k(a, b=b)):
        torch.testing.assert_close(y, want, rtol=0, atol=0)
    # the other declaration of the same problem takes (b, a), and computes b - a too
    with open(_graph("sub_ba")) as f:
        doc = json.load(f)
    doc["inputs"] = {"b": doc["inputs"]["b"], "a": doc["inputs"]["a"]}
    k2 = problem_cache.lookup(ktune.Graph(doc), {"M": 512})
    assert k2.inputs == ("b", "a")
    torch.testing.assert_close(k2(b, a), want, rtol=0, atol=0)
    torch.testing.assert_close(k2(a=a, b=b), want, rtol=0, atol=0)
    # bad input names the declared input; nothing is launched
    with pytest.raises(ValueError, match="input 1 'b': dtype is torch.float16"):
        k(a, b.half())
    with pytest.raises(ValueError, match="input 1 'b': shape is"):
        k(a=a, b=b[:256])
    with pytest.raises(ValueError, match="input 0 'a': is not contiguous"):
        k(a.t().contiguous().t(), b)
    with pytest.raises(ValueError, match="input 0 'a': is on cpu"):
        k(a=a.cpu(), b=b)
    with pytest.raises(TypeError, match="missing input 'b'"):
        k(a=a)
    with pytest.raises(TypeError, match="unexpected input 'c'"):
        k(a, b, c=a)
