"""ktune.capture (torch.export -> ktune.Graph) and Graph.reference (the fp64 CPU reference), no
GPU: every captured module's reference agrees with PyTorch's own float64 CPU result to 1e-10
normwise; unsupported ops, bad keywords and bad tensors give one line naming what is wrong."""

import copy
import errno
import inspect
import json
import math
import os
import sys
import warnings

import pytest

from conftest import ROOT, SOFTMAX

torch = pytest.importorskip(
    "torch", reason="PyTorch is not installed (scripts/install-deps installs it with pip)")
nn, F = torch.nn, torch.nn.functional

import ktune  # noqa: E402
capture_mod = sys.modules["ktune.capture"]  # the module (ktune.capture is the function)

TOL = 1e-10


def rel_err(got, want):
    got, want = got.double(), want.double()
    assert got.shape == want.shape, f"shape {tuple(got.shape)} != {tuple(want.shape)}"
    den = want.norm().item()
    return (got - want).norm().item() / (den if den > 0 else 1.0)


def randn(*shape, positive=False, seed=[0]):
    seed[0] += 1
    g = torch.Generator().manual_seed(seed[0])
    x = torch.randn(*shape, generator=g)
    return x.abs() + 0.5 if positive else x


def check(module, *inputs, want=None, tol=TOL, **options):
    """Captures module on float32 inputs, runs Graph.reference on them and compares it with the
    module run in float64 on the CPU (or with want(*inputs_f64)), normwise within tol. Returns the
    graph."""
    g = ktune.capture(module, *inputs, **options)
    got = g.reference(*inputs)
    got = got if isinstance(got, tuple) else (got,)
    x64 = [x.double() for x in inputs]
    if want is None:
        m64 = copy.deepcopy(module).double() if isinstance(module, nn.Module) else module
        with torch.no_grad():
            want = m64(*x64)
    else:
        want = want(*x64)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want) == len(g.outputs)
    for i, (a, b) in enumerate(zip(got, want)):
        assert a.dtype == torch.float64
        e = rel_err(a, b)
        assert e <= tol, f"output {i}: normwise error {e:.3g} > {tol}"
    return g


def ops_of(g):
    return [n["op"] for n in g.document["nodes"]]


class Fn(nn.Module):
    """A module around a function of tensors (the test's way to name single ops)."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


# ---- each op alone ----

def test_linear_and_its_weight_transposed():
    m = nn.Linear(16, 8).eval()
    g = check(m, randn(4, 16))
    assert g.user_inputs == ("input",)
    assert list(g.params) == ["weight", "bias"]
    mm = [n for n in g.document["nodes"] if n["op"] == "matmul"]
    assert mm and mm[0]["transpose_b"] is True and "permute" not in ops_of(g)
    inputs = g.document["inputs"]
    assert list(inputs) == ["input", "weight", "bias"]
    assert inputs["weight"]["const"] is True and "const" not in inputs["input"]


def test_linear_no_bias_batched():
    check(nn.Linear(12, 6, bias=False).eval(), randn(2, 3, 12))


def test_matmul_function():
    check(lambda a, b: a @ b, randn(5, 7), randn(7, 3))


def test_mm_transposed_operands():
    g = check(lambda a, b: torch.mm(a.t(), b.t()), randn(7, 5), randn(3, 7))
    mm = [n for n in g.document["nodes"] if n["op"] == "matmul"][0]
    assert mm["transpose_a"] and mm["transpose_b"] and "permute" not in ops_of(g)


def test_bmm_transposed_operand():
    check(lambda a, b: torch.bmm(a, b.transpose(1, 2)), randn(2, 4, 6), randn(2, 5, 6))


def test_addmm_alpha_beta():
    check(lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2.0), randn(4, 3), randn(4, 5),
          randn(5, 3))


def test_matmul_vector_and_broadcast_batch():
    check(lambda a, v, b: (a @ v, a @ b), randn(2, 4, 6), randn(6), randn(6, 3))


def test_conv2d_stride_padding_dilation():
    g = check(nn.Conv2d(3, 8, 3, stride=2, padding=2, dilation=2).eval(), randn(2, 3, 11, 9))
    # input_dilation and end_padding only where a transposed convolution needs them: the JSON
    # of a plain convolution stays as it was
    assert list(g.document["nodes"][0]) == ["out", "op", "in", "stride", "padding", "dilation",
                                            "groups", "layout"]


def test_conv2d_groups_no_bias():
    check(nn.Conv2d(4, 8, (3, 1), padding=(1, 0), groups=2, bias=False).eval(),
          randn(1, 4, 6, 5))


def test_conv2d_padding_same():
    check(nn.Conv2d(2, 3, 5, padding="same").eval(), randn(1, 2, 7, 7))


def test_conv1d_as_conv2d():
    # a 1-d convolution is a 2-d one over a height of 1
    conv = nn.Conv1d(4, 6, 3, stride=2, padding=1, dilation=2)
    g = check(conv, randn(2, 4, 17))
    assert ops_of(g).count("conv2d") == 1
    check(nn.Conv1d(6, 6, 5, groups=3, bias=False, padding="same"), randn(3, 6, 11))
    check(lambda x, w: F.conv1d(x, w, padding="valid"), randn(2, 3, 9), randn(5, 3, 4))


def test_conv3d():
    g = check(nn.Conv3d(3, 4, 3, stride=2, padding=1, dilation=(1, 2, 1)).eval(),
              randn(2, 3, 7, 9, 8))
    conv = g.document["nodes"][0]
    assert ops_of(g) == ["conv3d"] and conv["stride"] == [2, 2, 2] and \
        conv["dilation"] == [1, 2, 1] and "input_dilation" not in conv
    # an asymmetric kernel, groups, no bias
    check(nn.Conv3d(4, 6, (3, 1, 2), stride=(1, 2, 1), padding=(1, 0, 1), groups=2,
                    bias=False).eval(), randn(1, 4, 5, 6, 7))
    check(nn.Conv3d(2, 3, (3, 5, 1), padding="same").eval(), randn(2, 2, 4, 6, 3))
    check(lambda x, w, bias: F.conv3d(x, w, bias, stride=(3, 1, 2), dilation=(1, 1, 2)),
          randn(2, 3, 8, 5, 9), randn(6, 3, 2, 3, 3), randn(6))
    check(nn.Sequential(nn.Conv3d(2, 4, 3, padding=1), nn.ReLU(), nn.Conv3d(4, 4, 1, groups=4),
                        nn.AdaptiveAvgPool3d(1)).eval(), randn(2, 2, 4, 5, 6))


def test_transposed_conv_of_stride_1_as_conv():
    # the weight flipped and its in/out axes swapped (a const input capture makes), padding
    # d (k - 1) - p
    ct = nn.ConvTranspose2d(4, 6, 3, padding=1)
    g = check(ct, randn(2, 4, 7, 5))
    assert ops_of(g) == ["conv2d"] and "weight" not in g.document["inputs"]
    assert "input_dilation" not in g.document["nodes"][0]
    check(nn.ConvTranspose2d(4, 6, (3, 2), groups=2, dilation=2, bias=False), randn(1, 4, 6, 6))
    check(nn.ConvTranspose1d(3, 5, 4, padding=2), randn(2, 3, 9))
    with pytest.raises(ktune.CaptureError, match=r"unsupported op aten.conv_transpose2d \(a "
                                                 r"transposed convolution with more padding "
                                                 r"than its kernel's extent\)"):
        ktune.capture(nn.ConvTranspose2d(2, 2, 3, stride=2, padding=3), randn(1, 2, 5, 5))


class _TransposedByConvolution(nn.Module):
    """aten.convolution with transposed=True, as a decomposition may leave it."""

    def __init__(self, weight, stride, padding, output_padding, dilation, groups):
        super().__init__()
        self.weight = nn.Parameter(weight)
        self.args = stride, padding, dilation, True, output_padding, groups

    def forward(self, x):
        s, p, d, t, op, g = self.args
        return torch.ops.aten.convolution(x, self.weight, None, s, p, d, t, op, g)


def test_strided_transposed_conv():
    # a stride s spaces the input's elements s apart (input_dilation), output_padding is more
    # zeros at the end (end_padding); the convolution itself has stride 1
    g = check(nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1),
              randn(2, 4, 5, 6))
    conv = g.document["nodes"][0]
    assert ops_of(g) == ["conv2d"] and conv["stride"] == [1, 1] and conv["padding"] == [1, 1]
    assert conv["input_dilation"] == [2, 2] and conv["end_padding"] == [1, 1]
    check(nn.ConvTranspose2d(6, 4, (3, 4), stride=(2, 3), padding=(0, 2), output_padding=(1, 0),
                             dilation=(2, 1), groups=2), randn(2, 6, 4, 5))
    g = check(nn.ConvTranspose1d(4, 6, 5, stride=3, padding=1, output_padding=2, groups=2),
              randn(2, 4, 7))
    conv = [n for n in g.document["nodes"] if n["op"] == "conv2d"][0]
    assert conv["input_dilation"] == [1, 3] and conv["end_padding"] == [0, 2]
    check(nn.ConvTranspose1d(3, 2, 2, stride=2, dilation=3, bias=False), randn(1, 3, 6))
    g = check(nn.ConvTranspose3d(4, 4, 3, stride=2, padding=1, output_padding=1, groups=2),
              randn(1, 4, 3, 4, 5))
    assert ops_of(g) == ["conv3d"] and g.document["nodes"][0]["input_dilation"] == [2, 2, 2]
    check(nn.ConvTranspose3d(2, 3, (2, 3, 3), stride=(1, 2, 3), padding=(1, 0, 1),
                             output_padding=(1, 1, 0), dilation=(2, 1, 1)), randn(2, 2, 3, 4, 3))
    for w, x in ((randn(3, 4, 3), randn(2, 3, 6)), (randn(4, 2, 3, 2), randn(1, 4, 5, 4)),
                 (randn(4, 1, 2, 3, 2), randn(1, 4, 3, 3, 4))):
        nd = x.dim() - 2
        groups = 2 if nd > 1 else 1
        check(_TransposedByConvolution(w, [2] * nd, [1] * nd, [1] * nd, [1] * nd, groups), x)


def test_average_pooling_of_any_windows():
    # the same sums over the same zero-padded windows: a slice per window position (zeros past
    # the edges), their sum, times 1 / divisor
    g = check(nn.AvgPool2d(2, stride=2, padding=1), randn(2, 4, 9, 8))
    assert ops_of(g).count("slice") == 4 and ops_of(g)[-1] == "mul" and not g.params
    # side by side, the ends of sizes left out (KernelBench 1/45): what they cover, the means
    assert ops_of(check(nn.AvgPool2d((2, 4)), randn(1, 3, 6, 9))) == \
        ["slice", "reshape", "permute", "mean"]
    # windows of more positions than the search takes as slices: a depthwise convolution of
    # weights 1 / window, a const input capture makes and the graph remembers
    g = check(nn.AvgPool2d(6, stride=3, padding=2), randn(1, 2, 13, 14), tol=1e-7)
    assert ops_of(g) == ["conv2d"] and len(g.params) == 1
    check(lambda x: F.avg_pool2d(x, 2, divisor_override=8), randn(2, 2, 4, 4))
    check(nn.AvgPool1d(4, stride=1, padding=2), randn(3, 5, 11))
    check(nn.AdaptiveAvgPool2d(1), randn(2, 6, 5, 7))
    check(nn.AdaptiveAvgPool2d((2, 4)), randn(2, 3, 8, 8))
    # 1 / 9 rounds in float32 (3e-8 relatively)
    check(nn.AvgPool2d(3, stride=2, padding=1), randn(2, 4, 9, 8), tol=1e-7)
    with pytest.raises(ktune.CaptureError, match=r"count_include_pad=False"):
        ktune.capture(nn.AvgPool2d(3, padding=1, count_include_pad=False), randn(1, 2, 6, 6))
    with pytest.raises(ktune.CaptureError, match=r"ceil_mode adds a window"):
        ktune.capture(nn.AvgPool2d(2, ceil_mode=True), randn(1, 2, 5, 5))
    with pytest.raises(ktune.CaptureError, match=r"windows of several sizes"):
        ktune.capture(nn.AdaptiveAvgPool2d(3), randn(1, 2, 7, 7))


def test_average_pooling_3d_both_ways():
    # windows that tile the input: a mean over each, x viewed with the window axes last; else a
    # slice per window position (27 at most)
    g = check(nn.AvgPool3d(2), randn(2, 3, 4, 6, 8))
    assert ops_of(g) == ["reshape", "permute", "mean"] and not g.params
    assert ops_of(check(nn.AvgPool2d(2), randn(1, 2, 4, 6))) == ["reshape", "permute", "mean"]
    assert ops_of(check(nn.AvgPool1d(3), randn(2, 2, 9))) == ["reshape", "mean"]
    # 1 / 27 and 1 / 12 round in the float32 weights
    g = check(nn.AvgPool3d(3, stride=2, padding=1), randn(1, 2, 5, 6, 7), tol=1e-7)
    assert ops_of(g).count("slice") == 27 and not g.params
    check(nn.AvgPool3d((2, 2, 3)), randn(1, 2, 5, 4, 7), tol=1e-7)
    check(lambda x: F.avg_pool3d(x, 2, divisor_override=4), randn(1, 2, 4, 4, 4))
    with pytest.raises(ktune.CaptureError, match=r"aten.avg_pool3d \(ceil_mode adds a window"):
        ktune.capture(nn.AvgPool3d(2, ceil_mode=True), randn(1, 2, 4, 5, 4))


def test_adaptive_average_pooling_1d_3d():
    g = check(nn.AdaptiveAvgPool3d(1), randn(2, 3, 4, 5, 6))
    assert ops_of(g) == ["mean"]
    assert ops_of(check(nn.AdaptiveAvgPool1d(1), randn(2, 3, 7))) == ["mean"]
    check(nn.AdaptiveAvgPool1d(4), randn(2, 3, 8))
    g = check(nn.AdaptiveAvgPool3d((2, None, 3)), randn(2, 3, 4, 5, 6))
    assert set(ops_of(g)) == {"reshape", "permute", "mean"}
    with pytest.raises(ktune.CaptureError, match=r"adaptive pooling from 5 x 5 x 5 to 2 x 2 x 2 "
                                                 r"\(windows of several sizes\)"):
        ktune.capture(nn.AdaptiveAvgPool3d(2), randn(1, 2, 5, 5, 5))


def test_max_pooling_of_windows_that_tile():
    # stride = kernel, no padding, sizes multiples of it: x viewed as [N, C, H/k, k, W/k, k],
    # the window axes moved last, a max over them
    g = check(nn.MaxPool2d(2), randn(2, 3, 8, 6))
    assert ops_of(g) == ["reshape", "permute", "max"]
    assert g.document["nodes"][0]["shape"] == [2, 3, 4, 2, 3, 2]
    assert ops_of(check(nn.MaxPool1d(3), randn(2, 4, 12))) == ["reshape", "max"]
    g = check(nn.MaxPool3d((1, 2, 3)), randn(1, 2, 3, 4, 9))
    assert ops_of(g) == ["reshape", "permute", "max"]
    check(nn.MaxPool3d(2), randn(2, 2, 4, 6, 4))
    assert ops_of(check(nn.MaxPool2d(4), randn(2, 3, 4, 4))) == ["max"]  # one window
    check(nn.MaxPool2d(2, ceil_mode=True), randn(1, 2, 4, 6))  # ceil_mode adds no window here
    # the (values, indices) forms, the indices unused
    check(lambda x: F.max_pool2d(x, 2, return_indices=True)[0], randn(1, 2, 4, 4))
    check(lambda x: F.max_pool3d(x, 2, return_indices=True)[0], randn(1, 2, 4, 4, 6))


@pytest.mark.parametrize("pool,shape", [
    (nn.MaxPool2d(3, stride=2), (1, 2, 9, 9)),  # overlapping windows
    (nn.MaxPool3d(2, stride=1), (1, 2, 4, 4, 4)),
    (nn.MaxPool2d(2, padding=1), (1, 2, 8, 7)),  # -inf past the edges, as PyTorch pads
    (nn.MaxPool1d(8, stride=1, padding=4, dilation=3), (2, 3, 40)),  # KernelBench 1/41's form
    (nn.MaxPool2d(4, stride=1, padding=1), (2, 3, 12, 11)),
    (nn.MaxPool3d(3, stride=2, padding=1, dilation=3), (2, 2, 10, 9, 11)),
    (nn.MaxPool1d(2, stride=3), (1, 2, 9)),  # gaps between windows
    (nn.MaxPool2d(2, ceil_mode=True), (1, 2, 5, 4)),  # ceil_mode's window past the edge
    (nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True), (1, 2, 10, 10)),
], ids=["overlap", "overlap3d", "padding", "dilated1d", "padded2d", "dilated3d", "gaps",
        "ceil_mode", "ceil_mode_padded"])
def test_max_pooling_of_any_windows(pool, shape):
    # a slice of x per window position (-inf past its edges), their maximum
    g = check(pool, randn(*shape))
    k = pool.kernel_size if isinstance(pool.kernel_size, tuple) else \
        (pool.kernel_size,) * (len(shape) - 2)
    assert ops_of(g).count("slice") == math.prod(k)
    assert set(ops_of(g)) == {"slice", "max"}


def test_max_pooling_of_windows_that_leave_the_ends_out():
    # side by side windows that do not cover the ends: a slice of what they cover, then the
    # tiled form (KernelBench level 2's pools after a convolution)
    g = check(nn.MaxPool2d(4), randn(2, 3, 30, 29))
    assert ops_of(g) == ["slice", "reshape", "permute", "max"]
    assert g.document["nodes"][0]["shape"] == [-1, -1, 28, 28]
    check(nn.MaxPool3d(3), randn(1, 2, 7, 6, 8))


def test_scans():
    # cumsum and cumprod along any axis; KernelBench's reversed and exclusive forms: flips
    # (slices) around the scan, a narrow before it
    g = check(lambda x: torch.cumsum(x, 1), randn(4, 9))
    assert ops_of(g) == ["cumsum"] and g.document["nodes"][0]["axis"] == 1
    check(lambda x: torch.cumprod(x, dim=0) + torch.cumsum(x, -1), randn(3, 5))
    g = check(lambda x: torch.cumsum(x.flip(1), 1).flip(1), randn(4, 9))
    assert ops_of(g) == ["slice", "cumsum", "slice"]
    check(lambda x: torch.cumsum(x.narrow(1, 0, x.shape[1] - 1), 1), randn(4, 9))


def test_concatenation():
    # each piece a slice reading it at its offset (zeros elsewhere), the slices added; pieces of
    # zeros add nothing (KernelBench 1/92's exclusive cumsum)
    g = check(lambda x: torch.cat((x * 2, x.flip(1), torch.zeros_like(x)), dim=1), randn(4, 9))
    assert ops_of(g) == ["mul", "slice", "slice", "slice", "add"]
    g = check(lambda x: torch.cat((torch.zeros_like(x[:, :1]),
                                   torch.cumsum(x.narrow(1, 0, x.shape[1] - 1), 1)), 1),
              randn(3, 7))
    assert ops_of(g) == ["slice", "cumsum", "slice"]
    assert g.document["nodes"][-1]["start"] == [0, -1] and g.document["nodes"][-1]["fill"] == 0
    check(lambda x, y: torch.cat([x, y], 0), randn(2, 3), randn(4, 3))
    with pytest.raises(ktune.CaptureError, match=r"a tensor of zeros"):
        ktune.capture(lambda x: torch.zeros_like(x) + x, randn(2, 3))


def test_max_pooling_refuses_used_indices():
    with pytest.raises(ktune.CaptureError, match=r"unsupported op aten.max_pool.*_with_indices "
                                                 r"\(return_indices"):
        ktune.capture(nn.MaxPool2d(2, return_indices=True), randn(1, 2, 4, 4))


def test_slicing_ops():
    # Python slices (negative and past-the-end bounds, steps), narrow, select, flip: slice nodes
    check(lambda x: x[:, 1:7:2] + x[:, -3:][:, :3], randn(4, 9))
    check(lambda x: x[1:100, ::3], randn(4, 9))
    check(lambda x: x.narrow(1, 2, 5) * 2, randn(3, 8))
    check(lambda x: x.select(1, -2) + x[:, 0], randn(3, 8))
    g = check(lambda x: x.flip(1, 2) - x, randn(2, 3, 4))
    assert ops_of(g) == ["slice", "sub"]
    assert g.document["nodes"][0]["step"] == [1, -1, -1]
    # KernelBench 1/91's reversed sum over a prefix, by flips around a sum
    check(lambda x: x.flip(0).sum(0) + x.flip(0)[0], randn(5, 3))


def test_softmax_log_softmax():
    check(lambda x: (torch.softmax(x, 1), F.log_softmax(x, dim=-1)), randn(3, 5, 7))


def test_layer_norm_module():
    check(nn.LayerNorm(10, eps=1e-6).eval(), randn(4, 10))


def test_layer_norm_two_axes_without_affine():
    check(lambda x: F.layer_norm(x, (4, 6)), randn(3, 4, 6))


def test_rms_norm():
    m = nn.RMSNorm(12, eps=1e-6)
    with torch.no_grad():
        m.weight.copy_(randn(12))
    g = check(m.eval(), randn(5, 12))
    assert "rmsnorm" in ops_of(g)


def test_sdpa():
    check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), randn(2, 3, 5, 8),
          randn(2, 3, 7, 8), randn(2, 3, 7, 4))


def test_sdpa_causal_scale():
    g = check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3),
              randn(2, 6, 8), randn(2, 6, 8), randn(2, 6, 8))
    att = [n for n in g.document["nodes"] if n["op"] == "attention"][0]
    assert att["causal"] is True and att["scale"] == 0.3


def test_sdpa_grouped_query():
    # 6 query heads over 2 k/v heads (enable_gqa), causal
    g = check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                             enable_gqa=True),
              randn(2, 6, 5, 8), randn(2, 2, 7, 8), randn(2, 2, 7, 4))
    assert "attention" in ops_of(g)


def test_reductions_any_axes():
    check(lambda x: (x.sum((0, 2), keepdim=True), x.mean(), x.amax(-1), x.amin((1, 2)),
                     x.sum(), x.mean(1)), randn(3, 4, 5))


def test_pointwise_unary():
    check(lambda x, p: (-x, torch.exp(x), torch.log(p), torch.tanh(x), torch.sigmoid(x),
                        torch.relu(x), torch.sqrt(p), torch.rsqrt(p), torch.abs(x)),
          randn(4, 6), randn(4, 6, positive=True))


def test_gelu_both_forms_silu():
    g = check(lambda x: (F.gelu(x), F.gelu(x, approximate="tanh"), F.silu(x)), randn(5, 9))
    assert {"gelu", "gelu_tanh", "silu"} <= set(ops_of(g))


def test_pow_clamp_maximum_minimum():
    check(lambda x, y, p: (p ** 3, p ** 0.7, x.pow(2), x.clamp(-0.5, 0.8), x.clamp(min=0.1),
                           torch.maximum(x, y), torch.minimum(x, y)),
          randn(4, 5), randn(4, 5), randn(4, 5, positive=True))


def test_scalars_and_broadcasting():
    check(lambda x, row, col: (x * 2 + 1, 1 - x, 2 / (x.abs() + 1), x / 3 - row, x + col,
                               (x - row) * col),
          randn(4, 5), randn(5), randn(4, 1))


def test_layout_ops():
    check(lambda x: (x.transpose(0, 2).reshape(6, -1) * 1.5, x.permute(2, 0, 1).exp(),
                     x.view(2, 12).t().neg(), x.unsqueeze(1).squeeze(1).relu(),
                     x.flatten(1).sigmoid()), randn(2, 3, 4))


def test_dtype_casts():
    # The reference never rounds (a cast is the identity there): compare with the f64 values.
    g = check(lambda h, w: h.float() * w, randn(4, 4).half(), randn(4, 4),
              want=lambda h, w: h * w)
    assert g.document["inputs"]["h"]["dtype"] == "f16"
    assert "cast" in ops_of(g)
    check(lambda x: (x.to(torch.bfloat16) * 2).float(), randn(3, 3), want=lambda x: x * 2)


def test_decomposed_activations():
    check(lambda x: (F.hardswish(x), F.relu6(x * 4), F.leaky_relu(x, 0.2), F.softplus(x),
                     F.softplus(x, beta=2.0), F.hardsigmoid(x), F.logsigmoid(x), F.mish(x)),
          randn(6, 7))


def test_kernelbench_aliases_min_max_norms():
    # ops KernelBench's modules use (bench/kernelbench): x.T, torch.multiply, torch.max / min
    # with and without a dim (the values of the (values, indices) pair), ELU, SELU and vector
    # norms of ord 1, 2 and inf
    g = check(lambda x, y: (x.T * 2, torch.multiply(x, y), torch.max(x, dim=1)[0],
                            torch.min(x, dim=0, keepdim=True).values, torch.max(x),
                            torch.min(x, y), F.elu(x), F.elu(x, alpha=0.5), F.selu(x),
                            torch.linalg.vector_norm(x), torch.norm(x, p=1, dim=1),
                            torch.linalg.vector_norm(x, ord=float("inf"), dim=0, keepdim=True)),
              randn(6, 7), randn(6, 7))
    assert {"permute", "max", "min", "exp", "sqrt", "abs"} <= set(ops_of(g))
    with pytest.raises(ktune.CaptureError, match=r"unsupported op aten.elu \(elu with a "
                                                 r"negative alpha\)"):
        ktune.capture(lambda x: F.elu(x, alpha=-1.0), randn(3, 3))
    with pytest.raises(ktune.CaptureError, match=r"unsupported op aten.linalg_vector_norm "
                                                 r"\(vector_norm of ord 3"):
        ktune.capture(lambda x: torch.linalg.vector_norm(x, ord=3), randn(3, 3))
    with pytest.raises(ktune.CaptureError, match=r"a result ktune does not compute"):
        ktune.capture(lambda x: torch.max(x, dim=1)[1].float(), randn(3, 3))


def test_group_and_instance_norm():
    # as layernorm over each (sample, group) viewed as a row, then the per-channel affine
    gn = nn.GroupNorm(4, 8)
    with torch.no_grad():
        gn.weight.copy_(randn(8))
        gn.bias.copy_(randn(8))
    g = check(gn, randn(2, 8, 5, 3))
    assert ops_of(g).count("layernorm") == 1
    check(nn.GroupNorm(2, 6, affine=False, eps=1e-3), randn(3, 6, 7))
    inorm = nn.InstanceNorm2d(5, affine=True)
    with torch.no_grad():
        inorm.weight.copy_(randn(5))
    check(inorm, randn(2, 5, 4, 6))
    check(nn.InstanceNorm1d(3), randn(4, 3, 9))
    # with running statistics (track_running_stats, eval mode): batch norm's inference form
    tracked = nn.InstanceNorm2d(3, track_running_stats=True)
    with torch.no_grad():
        tracked.running_mean.copy_(randn(3))
        tracked.running_var.copy_(randn(3, positive=True))
    check(tracked.eval(), randn(2, 3, 4, 4))


def test_batch_norm_training_mode():
    # a module's default mode: the batch's statistics (biased variance), the running statistics'
    # update left out (a side effect on buffers)
    bn = nn.BatchNorm2d(5)
    with torch.no_grad():
        bn.weight.copy_(randn(5))
        bn.bias.copy_(randn(5))
    g = check(bn, randn(4, 5, 3, 2))
    assert "running_mean" not in g.document["inputs"]
    check(nn.BatchNorm1d(6, affine=False), randn(8, 6))
    check(nn.BatchNorm1d(3), randn(4, 3, 7))


def test_var_std_logsumexp():
    check(lambda x: (x.var(-1), x.std(), x.var(0, correction=0, keepdim=True),
                     torch.logsumexp(x, -1)), randn(5, 8))


# ---- KernelBench's losses, triangles and einsum (bench/kernelbench: level 1, 11-15, 96-99) ----

def test_smooth_l1_and_huber_loss():
    # torch.export keeps the loss composite after a broadcast_tensors of input and target:
    # both are the same shape, so it passes them through; the loss is its definition without a
    # select (min(|d|, beta) splits the quadratic and the linear part). |d| of randn straddles
    # beta both sides; smooth_l1 with beta 0 is exported as l1_loss
    x, y = randn(6, 9), randn(6, 9)
    g = check(lambda p, t: (F.smooth_l1_loss(p, t), F.smooth_l1_loss(p, t, beta=0.5,
                                                                      reduction="sum"),
                            F.huber_loss(p, t, delta=0.3, reduction="none"), F.huber_loss(p, t),
                            F.smooth_l1_loss(p, t, beta=0.0), F.l1_loss(p, t, reduction="sum")),
              x, y)
    assert "broadcast_tensors" not in str(g.document) and {"min", "abs", "mean", "sum"} <= \
        set(ops_of(g))
    with pytest.raises(ktune.CaptureError, match=r"unsupported op aten.broadcast_tensors "
                                                 r"\(broadcast_tensors of shapes \[4, 8\], \[8\]; "
                                                 r"ktune has no op that copies"), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch's: a target of another size than the input
        ktune.capture(lambda p, t: F.smooth_l1_loss(p, t), randn(4, 8), randn(8))
    with pytest.raises(ktune.CaptureError, match=r"unsupported op aten.smooth_l1_loss \(a "
                                                 r"negative beta \(-1\)\)"):
        ktune.capture(lambda p, t: F.smooth_l1_loss(p, t, beta=-1.0), x, y)


def test_kl_div_batchmean_and_log_target():
    # KernelBench's kl_div(log(p), q, reduction="batchmean"): a sum torch.export divides by the
    # batch; xlogy(t, t) is t log(max(t, 2^-126)): 0 where the target is 0, as PyTorch's
    p, q = randn(4, 10).softmax(-1), randn(4, 10).softmax(-1)
    q0 = q.clone()
    q0[1, 3] = 0.0
    g = check(lambda p, q, q0: (F.kl_div(torch.log(p), q0, reduction="batchmean"),
                                F.kl_div(torch.log(p), q0, reduction="none"),
                                F.kl_div(torch.log(p), q.log(), reduction="sum",
                                         log_target=True)),
              p, q, q0)
    assert {"log", "max", "exp", "sum", "div"} <= set(ops_of(g))


def test_triplet_margin_loss_and_pairwise_distance():
    # pairwise_distance is the p-norm of a - b + eps over the last axis; the loss
    # max(d(a, p) - d(a, n) + margin, 0), reduced
    a, p, n = randn(6, 16), randn(6, 16), randn(6, 16)
    check(nn.TripletMarginLoss(margin=1.0), a, p, n)
    check(lambda a, p, n: (F.triplet_margin_loss(a, p, n, margin=0.5, p=1, eps=1e-3,
                                                 reduction="none"),
                           F.triplet_margin_loss(a, p, n, margin=2.0, reduction="sum"),
                           F.triplet_margin_loss(a, p, n, p=float("inf")),
                           F.pairwise_distance(a, p), F.pairwise_distance(a, n, keepdim=True)),
          a, p, n)
    check(lambda a, p, n: F.triplet_margin_loss(a, p, n), randn(16), randn(16), randn(16))
    with pytest.raises(ktune.CaptureError, match=r"unsupported op aten.triplet_margin_loss "
                                                 r"\(triplet_margin_loss with p=3; ktune takes 1, "
                                                 r"2 and inf\)"):
        ktune.capture(lambda a, p, n: F.triplet_margin_loss(a, p, n, p=3), a, p, n)
    with pytest.raises(ktune.CaptureError, match=r"unsupported op aten.triplet_margin_loss "
                                                 r"\(swap=True; ktune has no select"):
        ktune.capture(lambda a, p, n: F.triplet_margin_loss(a, p, n, swap=True), a, p, n)
    with pytest.raises(ktune.CaptureError, match=r"unsupported op aten.pairwise_distance "
                                                 r"\(pairwise_distance with p=0.5; "):
        ktune.capture(lambda a, p: F.pairwise_distance(a, p, p=0.5), a, p)


def test_triu_tril_as_a_constant_mask():
    # x times torch.triu/tril(ones) of x's last two sizes, a const input capture makes
    # (graph.params holds it), broadcast over the leading axes; KernelBench's triu(A @ B)
    g = check(lambda x: (torch.triu(x), torch.tril(x, -1), torch.triu(x, 2)), randn(2, 5, 7))
    masks = [k for k in g.document["inputs"] if "_mask" in k]
    assert masks == ["triu_mask", "tril_mask", "triu_mask_1"]
    assert g.document["inputs"]["triu_mask"] == {"dtype": "f32", "shape": [5, 7], "const": True}
    assert torch.equal(g.params["tril_mask"], torch.tril(torch.ones(5, 7), -1))
    assert ops_of(g) == ["mul"] * 3
    g = check(lambda a, b: torch.tril(a @ b), randn(6, 6), randn(6, 6))
    assert ops_of(g) == ["matmul", "mul"]
    with pytest.raises(ktune.CaptureError, match=r"unsupported op aten.triu \(triu of a tensor "
                                                 r"whose last two sizes are not fixed integers"):
        ktune.capture(lambda x: torch.triu(x), randn(4, 6),
                      dynamic_shapes=({1: torch.export.Dim("C")},))


@pytest.mark.parametrize("eq,sa,sb,flags", [
    ("ij,jk->ik", (3, 4), (4, 5), (False, False)),
    ("bij,bjk->bik", (2, 3, 4), (2, 4, 5), (False, False)),
    ("bijl,lk->bijk", (2, 3, 4, 5), (5, 6), (False, False)),  # KernelBench's 11
    ("ik,jk->ij", (3, 4), (5, 4), (False, True)),
    ("bhqd,bhkd->bhqk", (2, 3, 4, 5), (2, 3, 6, 5), (False, True)),
    ("abc,cd->abd", (2, 3, 4), (4, 5), (False, False)),
    ("ij,jk->ki", (3, 4), (4, 5), (True, True)),  # (a b)^T = b^T a^T: the operands swapped
    ("kibj,kjc->bic", (3, 4, 2, 5), (3, 5, 6), (False, False)),  # permutes either side
    ("i,j->ij", (4,), (5,), (False, False)),  # an outer product: K = 1
    ("ij,ij->i", (4, 5), (4, 5), (False, False)),  # a batch of dot products
    ("ij,jk", (3, 4), (4, 5), (False, False)),  # implicit output: ik
])
def test_einsum_as_one_matmul(eq, sa, sb, flags):
    g = check(lambda a, b: torch.einsum(eq, a, b), randn(*sa), randn(*sb))
    mm = [n for n in g.document["nodes"] if n["op"] == "matmul"]
    assert len(mm) == 1 and (mm[0]["transpose_a"], mm[0]["transpose_b"]) == flags
    assert set(ops_of(g)) <= {"matmul", "reshape", "permute"}


def test_einsum_one_operand_and_refusals():
    g = check(lambda x: torch.einsum("ijk->kij", x), randn(2, 3, 4))
    assert ops_of(g) == ["permute"]
    x, y = randn(4, 4), randn(4, 3)
    for eq, xs, why in [
            ("ii,ij->j", (x, y), r"einsum 'ii,ij->j' repeats index i in operand 0 \(a trace or "
                                 r"diagonal\)"),
            ("ij,jk->i", (x, y), r"einsum 'ij,jk->i' sums index k over operand 1 alone"),
            ("ij->i", (x,), r"einsum 'ij->i' sums index j over operand 0 alone"),
            ("...ij,jk->...ik", (x, y), r"einsum '...ij,jk->...ik' with an ellipsis"),
            ("ij,jk,kl->il", (x, y, randn(3, 2)), r"einsum of 3 operands; ktune takes one or two"),
            ("bij,bjk->bik", (randn(1, 4, 4), randn(3, 4, 2)),
             r"einsum 'bij,bjk->bik' with index b of sizes 1 and 3 \(broadcast\)")]:
        with pytest.raises(ktune.CaptureError, match=r"unsupported op aten.einsum \(" + why):
            ktune.capture(lambda *xs: torch.einsum(eq, *xs), *xs)
    with pytest.raises(ktune.CaptureError, match=r"unsupported op aten.einsum \(einsum "
                                                 r"'ij,jk->ik' of an operand whose sizes are not "
                                                 r"fixed integers\)"):
        ktune.capture(lambda a, b: torch.einsum("ij,jk->ik", a, b), x, y,
                      dynamic_shapes=({0: torch.export.Dim("M")}, None))


# ---- realistic chains ----

class MLP(nn.Module):
    def __init__(self, d=16, h=32):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.up = nn.Linear(d, h)
        self.down = nn.Linear(h, d)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x))))


class SwiGLU(nn.Module):
    def __init__(self, d=16, h=24):
        super().__init__()
        self.norm = nn.RMSNorm(d, eps=1e-6)
        self.w1, self.w3 = nn.Linear(d, h, bias=False), nn.Linear(d, h, bias=False)
        self.w2 = nn.Linear(h, d, bias=False)

    def forward(self, x):
        y = self.norm(x)
        return x + self.w2(F.silu(self.w1(y)) * self.w3(y))


class AttentionProj(nn.Module):
    """Self-attention with separate q, k, v and output projections (what export keeps whole)."""

    def __init__(self, d=16, heads=4, causal=True):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.o = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)

    def forward(self, x):
        b, s, d = x.shape
        h = self.heads
        y = self.norm(x)
        q, k, v = (lin(y).view(b, s, h, d // h).transpose(1, 2) for lin in (self.q, self.k,
                                                                              self.v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return x + self.o(att.transpose(1, 2).reshape(b, s, d))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.att = AttentionProj(16, 2, causal=True)
        self.mlp = SwiGLU(16, 32)

    def forward(self, x):
        return self.mlp(self.att(x))


class ConvStack(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 8, 3, padding=1, groups=4)
        self.c3 = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        y = F.relu(self.bn(self.c1(x)))
        y = F.silu(self.c2(y)) + y
        return self.c3(y).mean((2, 3))


class ConvHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, stride=2)
        self.fc = nn.Linear(4 * 3 * 3, 5)

    def forward(self, x):
        return F.log_softmax(self.fc(torch.tanh(self.conv(x)).flatten(1)), dim=-1)


class TwoOutputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x, y):
        h = self.fc(x)
        return torch.softmax(h @ y.t(), -1), h.amax(0)


def _bn_stats(m):
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            with torch.no_grad():
                mod.running_mean.copy_(randn(mod.num_features))
                mod.running_var.copy_(randn(mod.num_features, positive=True))
    return m


CHAINS = [
    ("mlp", lambda: MLP(), (2, 5, 16)),
    ("swiglu", lambda: SwiGLU(), (6, 16)),
    ("mlp_relu_deep", lambda: nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32),
                                             nn.GELU(approximate="tanh"), nn.Linear(32, 4),
                                             nn.Softmax(-1)), (3, 16)),
    ("attention_projections", lambda: AttentionProj(16, 4, causal=True), (2, 7, 16)),
    ("attention_noncausal", lambda: AttentionProj(16, 2, causal=False), (1, 5, 16)),
    ("transformer_block", lambda: Block(), (2, 6, 16)),
    ("conv_stack", lambda: _bn_stats(ConvStack()), (2, 3, 8, 8)),
    ("conv_head", lambda: ConvHead(), (3, 1, 8, 8)),
]


@pytest.mark.parametrize("name,make,shape", CHAINS, ids=[c[0] for c in CHAINS])
def test_chain(name, make, shape):
    check(make().eval(), randn(*shape))


def test_two_inputs_two_outputs_in_order():
    g = check(TwoOutputs().eval(), randn(3, 8), randn(5, 8))
    assert g.user_inputs == ("x", "y") and g.outputs and len(g.document["outputs"]) == 2
    assert list(g.document["inputs"])[:2] == ["x", "y"]


# ---- dynamic dimensions ----

def test_dynamic_batch_becomes_a_symbol():
    batch = torch.export.Dim("batch", min=2, max=64)
    m = MLP().eval()
    g = ktune.capture(m, randn(4, 16), dynamic_shapes=({0: batch},))
    assert g.document["inputs"]["x"]["shape"] == ["batch", 16]
    x = randn(9, 16)  # another batch than captured: bound from the tensor
    with torch.no_grad():
        want = copy.deepcopy(m).double()(x.double())
    assert rel_err(g.reference(x), want) <= TOL
    assert rel_err(g.reference(x, shapes={"batch": 9}), want) <= TOL
    with pytest.raises(ValueError, match=r"batch = 8 from shapes"):
        g.reference(x, shapes={"batch": 8})


def test_dynamic_function_by_name():
    n = torch.export.Dim("n", min=2, max=100)
    g = ktune.capture(lambda a, b: torch.softmax(a * b, -1), randn(3, 5), randn(3, 5),
                      dynamic_shapes={"a": {1: n}, "b": {1: n}})
    assert g.document["inputs"]["a"]["shape"] == [3, "n"]
    a, b = randn(3, 11), randn(3, 11)
    assert rel_err(g.reference(a, b), torch.softmax(a.double() * b.double(), -1)) <= TOL


def test_dynamic_batch_and_sequence_through_attention():
    B, S = torch.export.Dim("B", max=64), torch.export.Dim("S", max=128)
    m = Block().eval()
    g = ktune.capture(m, randn(2, 6, 16), dynamic_shapes=({0: B, 1: S},))
    assert g.document["inputs"]["x"]["shape"] == ["B", "S", 16]
    assert any(n["op"] == "reshape" and n["shape"][:2] == ["B", "S"]
               for n in g.document["nodes"])
    x = randn(3, 9, 16)
    with torch.no_grad():
        want = copy.deepcopy(m).double()(x.double())
    assert rel_err(g.reference(x), want) <= TOL


def test_derived_dynamic_size_is_refused():
    B = torch.export.Dim("B", max=64)
    with pytest.raises(ktune.CaptureError, match=r"unsupported op aten.flatten \(its size "
                                                 r"3\*B is derived from a dynamic dimension"):
        ktune.capture(lambda x: x.flatten(), randn(4, 3), dynamic_shapes=({0: B},))


def test_dynamic_size_in_a_view_and_as_a_value():
    B = torch.export.Dim("B", max=64)

    def f(x):
        n = x.shape[0]
        return x.view(n, 2, 6).sum(-1) * 2
    g = check(f, randn(4, 12), dynamic_shapes=({0: B},))
    assert [n["shape"] for n in g.document["nodes"] if n["op"] == "reshape"] == [["B", 2, 6]]
    x = randn(7, 12)
    assert rel_err(g.reference(x), f(x.double())) <= TOL
    with pytest.raises(ktune.CaptureError, match=r"unsupported op aten.mul \(an operand is the "
                                                 r"size of a dynamic dimension"):
        ktune.capture(lambda x: x * x.shape[0], randn(4, 3), dynamic_shapes=({0: B},))


# ---- the remembered parameters ----

def test_parameters_remembered_and_overridable():
    m = nn.Linear(4, 3).eval()
    g = ktune.capture(m, randn(2, 4))
    x, w2 = randn(2, 4), randn(3, 4)
    assert rel_err(g.reference(x), F.linear(x.double(), m.weight.double(),
                                            m.bias.double())) <= TOL
    got = g.reference(x, weight=w2)
    assert rel_err(got, F.linear(x.double(), w2.double(), m.bias.double())) <= TOL
    got = g.reference(x, w2, torch.zeros(3))  # all inputs positionally, declared order
    assert rel_err(got, x.double() @ w2.double().t()) <= TOL


def test_qualified_names_of_nested_parameters_and_buffers():
    g = ktune.capture(_bn_stats(ConvStack()).eval(), randn(1, 3, 8, 8))
    names = list(g.document["inputs"])
    assert names[0] == "x"
    for want in ("c1.weight", "c1.bias", "bn.running_mean", "bn.running_var", "c3.bias"):
        assert want in names and g.document["inputs"][want]["const"] is True
    assert set(g.params) == set(names[1:])
    assert "bn.num_batches_tracked" not in names  # unused buffers are left out


# ---- bad input ----

def _line_of(fn, text):
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, ln in enumerate(lines) if text in ln)


class Unsupported(nn.Module):
    def forward(self, x):
        y = torch.relu(x)
        return torch.erf(y) + 1


def test_unsupported_op_names_op_and_line(monkeypatch):
    built = []
    monkeypatch.setattr(capture_mod, "Graph", lambda doc: built.append(doc))
    with pytest.raises(ktune.CaptureError) as e:
        ktune.capture(Unsupported(), randn(3, 3))
    line = _line_of(Unsupported.forward, "torch.erf")
    assert str(e.value) == (f"ktune.capture: unsupported op aten.erf at test_capture.py:{line} "
                            f"(in forward)")
    assert "\n" not in str(e.value)
    assert built == []  # nothing half-built


def test_unsupported_argument_names_it():
    with pytest.raises(ktune.CaptureError, match=r"unsupported op aten.scaled_dot_product_"
                                                 r"attention \(attn_mask\) at test_capture"):
        ktune.capture(lambda q, m: F.scaled_dot_product_attention(q, q, q, attn_mask=m),
                      randn(1, 4, 8), randn(4, 4))


def _attention_broadcast_batch(q, k):
    return F.scaled_dot_product_attention(q, k, k)  # torch broadcasts the batch; ktune does not


def test_graph_ktune_refuses_names_the_line():
    with pytest.raises(ktune.CaptureError) as e:
        ktune.capture(_attention_broadcast_batch, randn(2, 3, 5, 8), randn(1, 3, 7, 8))
    line = _line_of(_attention_broadcast_batch, "scaled_dot_product_attention")
    assert str(e.value) == ("ktune.capture: graph: node 0 (attention -> output): conflicting "
                            "dimension: batch dimensions of q and k differ: 2 vs 1 at "
                            f"test_capture.py:{line} (in _attention_broadcast_batch)")


def test_mixed_dtypes_are_promoted():
    g = check(lambda h, x: h + x, randn(4, 3).half(), randn(4, 3), want=lambda h, x: h + x)
    assert ops_of(g) == ["cast", "add"]


def test_capture_bad_keyword_and_inputs():
    with pytest.raises(TypeError, match=r"ktune.capture: unexpected keyword 'dynamic' "):
        ktune.capture(nn.ReLU(), randn(2), dynamic=True)
    with pytest.raises(TypeError, match=r"example input 1 is int"):
        ktune.capture(lambda a, b: a * b, randn(2), 3)
    with pytest.raises(ktune.CaptureError, match=r"input 'b' reaches no output"):
        ktune.capture(lambda a, b: a * 2, randn(2), randn(2))
    with pytest.raises(ktune.CaptureError, match=r"float64"):
        ktune.capture(lambda a: a * 2, randn(2).double())


def test_reference_bad_keywords_name_them():
    g = ktune.capture(nn.Linear(4, 3).eval(), randn(2, 4))
    with pytest.raises(TypeError, match=r"unexpected keyword 'wieght' \(the graph's inputs: "
                                        r"input, weight, bias\)"):
        g.reference(randn(2, 4), wieght=randn(3, 4))
    with pytest.raises(TypeError, match=r"missing input 'input'"):
        g.reference()
    with pytest.raises(TypeError, match=r"input 'input' given twice"):
        g.reference(randn(2, 4), input=randn(2, 4))
    with pytest.raises(TypeError, match=r"takes at most 3 tensors"):
        g.reference(randn(2, 4), randn(3, 4), randn(3), randn(1))
    with pytest.raises(ValueError, match=r"input 'input' axis 1 is 5; the graph declares 4"):
        g.reference(randn(2, 5))
    with pytest.raises(ValueError, match=r"input 'input' has shape \[8\]"):
        g.reference(randn(8))


# ---- Graph.reference on graphs from JSON ----

def test_reference_of_a_json_graph_by_position_and_name():
    g = ktune.Graph(SOFTMAX)
    x = randn(6, 10)
    want = torch.softmax(x.double(), -1)
    assert rel_err(g.reference(x), want) <= TOL
    assert rel_err(g.reference(x=x), want) <= TOL
    with pytest.raises(ktune.KtuneError) as e:
        g.reference(x, shapes={"Q": 3})
    assert e.value.errno == errno.EINVAL and "Q" in str(e.value)


def test_reference_declared_order_of_same_shaped_inputs():
    # Two inputs of one shape: only the declared order says which is which.
    doc = {"name": "sub_ba",
           "inputs": {"a": {"dtype": "f32", "shape": ["M", 3]},
                      "b": {"dtype": "f32", "shape": ["M", 3]}},
           "nodes": [{"out": "y", "op": "sub", "in": ["b", "a"]},
                     {"out": "z", "op": "mul", "in": ["a", 2]}],
           "outputs": ["z", "y"]}
    for g in (ktune.Graph(doc), ktune.Graph(json.dumps(doc))):
        a, b = randn(4, 3), randn(4, 3)
        z, y = g.reference(a, b)
        assert torch.equal(y, b.double() - a.double()) and torch.equal(z, 2 * a.double())
        z2, y2 = g.reference(b=b, a=a)
        assert torch.equal(y2, y) and torch.equal(z2, z)


def test_example_graphs_run():
    # every example whose shapes are all given by its inputs runs on random data
    g = ktune.Graph(os.path.join(ROOT, "examples", "gemm_bias_relu.json"))
    doc = json.load(open(os.path.join(ROOT, "examples", "gemm_bias_relu.json")))
    shp = {"M": 8}
    xs = [randn(*[shp.get(d, d) for d in spec["shape"]]) for spec in doc["inputs"].values()]
    y = g.reference(*xs)
    a, w, bias = (x.double() for x in xs)
    assert rel_err(y, torch.relu(a @ w + bias)) <= TOL
    assert math.isfinite(y.sum().item())


def test_reference_holds_buffers_to_the_loaded_graph(tmp_path):
    # The declared form is read from the file at the first reference() call: a file changed
    # since the load must not make libktune read past a buffer.
    path = tmp_path / "g.json"
    doc = {"inputs": {"x": {"dtype": "f32", "shape": ["M", 3]}},
           "nodes": [{"out": "y", "op": "exp", "in": ["x"]}], "outputs": ["y"]}
    path.write_text(json.dumps(doc))
    g = ktune.Graph(str(path))
    doc["inputs"]["x"]["shape"] = ["M", 4]
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"input 'x' has shape \[2, 4\]; the graph takes "
                                         r"\[2, 3\] there"):
        g.reference(randn(2, 4))
