"""bench/torch_graph.py, the PyTorch side of every benchmark, against ktune's fp64 CPU reference on
the convolutions whose PyTorch form is not one call: conv3d, input dilation (a transposed
convolution lowered), end padding, channels last; and TorchGraph.prepare's transposed weight,
which lets PyTorch run its own conv_transpose op, giving the same numbers."""

import json
import os
import sys

import pytest

from conftest import ROOT

torch = pytest.importorskip(
    "torch", reason="PyTorch is not installed (scripts/install-deps installs it with pip)")

import ktune  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "bench"))
from torch_graph import TRANSPOSED, TorchGraph  # noqa: E402


def conv_graph(op, x, w, layout="NCHW", **attrs):
    node = {"out": "y", "op": op, "in": ["x", "w"], "layout": layout}
    node.update(attrs)
    return {"name": "conv", "inputs": {"x": {"dtype": "f32", "shape": x},
                                        "w": {"dtype": "f32", "shape": w, "const": True}},
            "nodes": [node], "outputs": ["y"]}


def agree(doc, tmp_path, prepared):
    path = tmp_path / "g.json"
    path.write_text(json.dumps(doc))
    tg = TorchGraph(doc, {})
    xs = tg.random_inputs(seed=3, device="cpu")
    if prepared:
        xs = tg.prepare(xs)
    got = tg.run(xs)["y"]
    want = ktune.Graph(str(path)).reference(x=xs["x"], w=xs["w"])
    assert got.shape == want.shape
    err = ((got - want).norm() / want.norm()).item()
    assert err < 1e-12, err
    return xs


@pytest.mark.parametrize("prepared", [False, True])
def test_transposed_conv_lowered(tmp_path, prepared):
    # a stride-2 transposed conv as ktune.capture writes it: stride 1, input_dilation 2,
    # padding d (k - 1) - p, end_padding its output_padding
    for op, x, w, attrs in [
        ("conv2d", [2, 4, 5, 6], [6, 2, 3, 3],
         {"padding": [1, 2], "input_dilation": 2, "end_padding": [1, 0], "dilation": [1, 2],
          "groups": 2}),
        ("conv3d", [1, 3, 3, 4, 2], [4, 3, 2, 3, 3],
         {"padding": 1, "input_dilation": [2, 1, 3], "end_padding": [1, 0, 2]}),
    ]:
        xs = agree(conv_graph(op, x, w, **attrs), tmp_path, prepared)
        # prepare adds the weight in PyTorch's transposed layout, and only then
        assert (("w" + TRANSPOSED) in xs) == prepared


def test_conv3d_and_channels_last(tmp_path):
    agree(conv_graph("conv3d", [2, 4, 5, 6, 7], [6, 2, 3, 2, 3], stride=[1, 2, 1],
                     padding=[1, 0, 1], dilation=[2, 1, 1], groups=2), tmp_path, False)
    agree(conv_graph("conv3d", [2, 5, 6, 7, 4], [6, 3, 2, 3, 4], layout="NHWC", padding=1),
          tmp_path, False)


def test_input_dilation_not_a_transposed_conv(tmp_path):
    # padding beyond d (k - 1) has no transposed-conv form: prepare adds nothing, the explicit
    # zeros are used
    doc = conv_graph("conv2d", [1, 2, 4, 4], [3, 2, 2, 2], padding=2, input_dilation=3,
                     stride=2)
    xs = agree(doc, tmp_path, True)
    assert ("w" + TRANSPOSED) not in xs


def test_inputs_of_log_are_positive():
    # kl_div(log(p), q): a p drawn signed makes the output NaN and the check compare nothing
    doc = {"name": "kl", "inputs": {"p": {"dtype": "f32", "shape": [64]},
                                    "q": {"dtype": "f32", "shape": [64]}},
           "nodes": [{"out": "l", "op": "log", "in": ["p"]},
                     {"out": "y", "op": "mul", "in": ["l", "q"]}],
           "outputs": ["y"]}
    xs = TorchGraph(doc, {}).random_inputs(seed=5, device="cpu")
    assert (xs["p"] > 0).all()
    assert (xs["q"] < 0).any()
    assert torch.isfinite(TorchGraph(doc, {}).run(xs)["y"]).all()
