"""Runs a ktune op graph (the JSON form, docs/formats.md) with PyTorch.

This is the PyTorch side of every comparison ktune makes against PyTorch: the deploy-time check
(bench/deploy_check.py) and the benchmarks. It follows the semantics of docs/formats.md op by
op, so a difference between ktune's kernel and this is a finding, not a convention mismatch.

    g = TorchGraph.load("examples/softmax.json", {"M": 4096, "N": 8192})
    xs = g.random_inputs(seed=0)            # dict name -> tensor, in the graph's dtypes
    ys = g.run(xs)                          # dict name -> tensor (compute dtype: float64 by
    ys = g.run(xs, dtype=None)              #   default; None: the graph's own dtypes, eager)
"""
import json
import math

import torch

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def _pair(v):
    return tuple(v) if isinstance(v, (list, tuple)) else (v, v)


def _nd(v, nd):
    return tuple(v) if isinstance(v, (list, tuple)) else (v,) * nd


# prepare()'s name for a weight in the layout of the transposed convolution it came from
TRANSPOSED = ".transposed"


def _spread(x, idil, pad, end):
    """x [N, C, *sizes] with idil - 1 zeros between its elements, pad zeros before and pad + end
    after each spatial dimension: what a convolution with input_dilation reads (docs/formats.md)."""
    sizes = [(s - 1) * d + 1 + 2 * p + e for s, d, p, e in zip(x.shape[2:], idil, pad, end)]
    y = x.new_zeros(tuple(x.shape[:2]) + tuple(sizes))
    y[(slice(None), slice(None)) + tuple(slice(p, p + (s - 1) * d + 1, d)
                                         for s, d, p in zip(x.shape[2:], idil, pad))] = x
    return y


class TorchGraph:
    def __init__(self, graph, shapes):
        self.graph = graph
        self.shapes = dict(shapes)
        self.name = graph.get("name", "graph")

    @classmethod
    def load(cls, path, shapes):
        with open(path) as f:
            return cls(json.load(f), shapes)

    def dim(self, d):
        if isinstance(d, int):
            return d
        if d not in self.shapes:
            raise ValueError(f"{self.name}: dimension {d} is not bound")
        return int(self.shapes[d])

    def input_shape(self, name):
        return [self.dim(d) for d in self.graph["inputs"][name]["shape"]]

    def input_dtype(self, name):
        return DTYPES[self.graph["inputs"][name]["dtype"]]

    def random_inputs(self, seed=0, device="cuda"):
        """Normal inputs in each input's dtype (weights scaled like an initialiser); an input
        that log, sqrt or rsqrt reads takes the magnitudes (as ktune's verification draws it:
        docs/evaluation.md), else the output would be NaN and compare as nothing."""
        gen = torch.Generator(device=device).manual_seed(seed)
        positive = {i for n in self.graph["nodes"] if n["op"] in ("log", "sqrt", "rsqrt")
                    for i in n["in"] if isinstance(i, str)}
        xs = {}
        for name, spec in self.graph["inputs"].items():
            shape = self.input_shape(name)
            t = torch.randn(shape, generator=gen, device=device, dtype=torch.float32)
            if spec.get("const") and len(shape) >= 2:
                t = t / math.sqrt(max(1, shape[-2] if len(shape) == 2 else math.prod(shape[1:])))
            if name in positive:
                t = t.abs()
            xs[name] = t.to(DTYPES[spec["dtype"]])
        return xs

    def _transposable(self, n):
        """For a conv node with input_dilation: (nd, the PyTorch transposed convolution's stride,
        padding, output_padding) when it is one (what ktune.capture lowers them to: stride 1,
        padding d (k - 1) - p >= 0, output_padding below the stride or the dilation), else
        None."""
        if n["op"] not in ("conv2d", "conv3d") or n.get("layout", "NCHW") != "NCHW":
            return None
        nd = 3 if n["op"] == "conv3d" else 2
        idil = _nd(n.get("input_dilation", 1), nd)
        w = n["in"][1]
        spec = self.graph["inputs"].get(w) if isinstance(w, str) else None
        if all(i == 1 for i in idil) or not spec or not spec.get("const"):
            return None
        k = [self.dim(d) for d in spec["shape"][2:]]
        stride, pad = _nd(n.get("stride", 1), nd), _nd(n.get("padding", 0), nd)
        dil, end = _nd(n.get("dilation", 1), nd), _nd(n.get("end_padding", 0), nd)
        tpad = tuple(d * (kk - 1) - p for d, kk, p in zip(dil, k, pad))
        if any(s != 1 for s in stride) or any(p < 0 for p in tpad) or \
                any(e >= max(i, d) for e, i, d in zip(end, idil, dil)):
            return None
        return nd, idil, tpad, end

    def prepare(self, inputs):
        """inputs plus, for each convolution that is a PyTorch transposed convolution lowered
        (_transposable), its weight back in PyTorch's layout [Cin, Cout/g, *k] unflipped, under
        the weight's name + TRANSPOSED: load-time work, as ktune's prepacking of const inputs,
        so PyTorch runs its own conv_transpose op on its own layout."""
        out = dict(inputs)
        for n in self.graph["nodes"]:
            t = self._transposable(n)
            if t is None:
                continue
            nd, w, g = t[0], inputs[n["in"][1]], n.get("groups", 1)
            cout, cin_g, k = w.shape[0], w.shape[1], tuple(w.shape[2:])
            wt = (w.flip(dims=list(range(2, 2 + nd))).reshape(g, cout // g, cin_g, *k)
                  .transpose(1, 2).reshape(g * cin_g, cout // g, *k).contiguous())
            out[n["in"][1] + TRANSPOSED] = wt
        return out

    def run(self, inputs, dtype=torch.float64):
        """Evaluates every node; returns the graph outputs by name. With dtype set, inputs are
        cast to it first (a reference); with None, ops run in the inputs' own dtypes (PyTorch
        eager as a user would write it)."""
        env = {k: (v.to(dtype) if dtype is not None else v) for k, v in inputs.items()}
        pending = list(self.graph["nodes"])
        while pending:
            progressed = False
            for node in list(pending):
                ins = node["in"]
                if all(not isinstance(i, str) or i in env for i in ins):
                    args = [env[i] if isinstance(i, str) else i for i in ins]
                    env[node["out"]] = self._op(node, args, dtype, env)
                    pending.remove(node)
                    progressed = True
            if not progressed:
                raise ValueError(f"{self.name}: nodes with undefined operands: {pending}")
        return {name: env[name] for name in self.graph["outputs"]}

    def _op(self, n, a, dtype, env):
        op = n["op"]
        x = a[0]
        unary = {
            "neg": torch.neg, "abs": torch.abs, "relu": torch.relu, "sigmoid": torch.sigmoid,
            "tanh": torch.tanh, "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt,
            "rsqrt": torch.rsqrt, "square": torch.square, "recip": torch.reciprocal,
            "silu": torch.nn.functional.silu, "mish": torch.nn.functional.mish,
            "softplus": torch.nn.functional.softplus,
            "gelu": lambda t: torch.nn.functional.gelu(t),
            "gelu_tanh": lambda t: torch.nn.functional.gelu(t, approximate="tanh"),
        }
        if op in unary:
            return unary[op](x)
        if op == "hardtanh":
            return torch.clamp(x, n.get("min", -1.0), n.get("max", 1.0))
        if op == "leaky_relu":
            return torch.nn.functional.leaky_relu(x, n.get("alpha", 0.01))
        if op == "clamp":
            return torch.clamp(x, n.get("min"), n.get("max"))
        if op == "cast":
            return x.to(DTYPES[n["dtype"]]) if dtype is None else x
        if op in ("add", "sub", "mul", "div", "pow", "max", "min") and len(a) == 2:
            # A scalar operand stays a Python number: it takes the tensor's dtype (as in
            # docs/formats.md) and costs no host-to-device copy per call, which would slow the
            # eager peer and break torch.compile's graph.
            l, r = a
            if op == "add":
                return l + r
            if op == "sub":
                return l - r
            if op == "mul":
                return l * r
            if op == "div":
                return l / r
            if op == "pow":
                return l ** r
            if not torch.is_tensor(l):
                l, r = r, l  # max and min commute
            if not torch.is_tensor(r):
                return torch.clamp(l, min=r) if op == "max" else torch.clamp(l, max=r)
            return torch.maximum(l, r) if op == "max" else torch.minimum(l, r)
        if op in ("sum", "mean", "max", "min"):
            axes = n["axes"]
            keep = n.get("keepdim", False)
            if op == "sum":
                return torch.sum(x, dim=axes, keepdim=keep)
            if op == "mean":
                return torch.mean(x, dim=axes, keepdim=keep)
            return (torch.amax if op == "max" else torch.amin)(x, dim=axes, keepdim=keep)
        if op == "softmax":
            return torch.softmax(x, dim=n.get("axis", -1))
        if op == "log_softmax":
            return torch.log_softmax(x, dim=n.get("axis", -1))
        if op == "logsumexp":
            return torch.logsumexp(x, dim=n.get("axis", -1), keepdim=n.get("keepdim", False))
        if op in ("layernorm", "rmsnorm"):
            axis = n.get("axis", -1) % x.dim()
            norm_shape = list(x.shape[axis:])
            w = a[1] if len(a) > 1 else None
            if op == "layernorm":
                b = a[2] if len(a) > 2 else None
                return torch.nn.functional.layer_norm(x, norm_shape, w, b, n.get("eps", 1e-5))
            eps = n.get("eps", 1e-6)
            if hasattr(torch.nn.functional, "rms_norm"):  # PyTorch >= 2.4
                return torch.nn.functional.rms_norm(x, norm_shape, w, eps)
            dims = list(range(axis, x.dim()))
            y = x * torch.rsqrt(torch.mean(x * x, dim=dims, keepdim=True) + eps)
            return y * w if w is not None else y
        if op == "matmul":
            l, r = a
            if n.get("transpose_a"):
                l = l.transpose(-1, -2)
            if n.get("transpose_b"):
                r = r.transpose(-1, -2)
            return torch.matmul(l, r)
        if op in ("conv2d", "conv3d"):
            nd = 3 if op == "conv3d" else 2
            F = torch.nn.functional
            w = a[1]
            b = a[2] if len(a) > 2 else None
            groups, dil = n.get("groups", 1), _nd(n.get("dilation", 1), nd)
            t = self._transposable(n)
            wt = env.get(n["in"][1] + TRANSPOSED) if t else None
            if wt is not None:  # a PyTorch transposed convolution, lowered: run it as one
                _, idil, tpad, end = t
                conv_t = F.conv_transpose3d if nd == 3 else F.conv_transpose2d
                return conv_t(x, wt, b, idil, tpad, end, groups, dil)
            nhwc = n.get("layout", "NCHW") == "NHWC"
            if nhwc:  # channels last to first, and back at the end
                x = x.permute(0, nd + 1, *range(1, nd + 1))
                w = w.permute(0, nd + 1, *range(1, nd + 1))
            pad = _nd(n.get("padding", 0), nd)
            idil, end = _nd(n.get("input_dilation", 1), nd), _nd(n.get("end_padding", 0), nd)
            if any(i != 1 for i in idil) or any(end):
                x, pad = _spread(x, idil, pad, end), (0,) * nd
            conv = F.conv3d if nd == 3 else F.conv2d
            y = conv(x, w, b, _nd(n.get("stride", 1), nd), pad, dil, groups)
            return y.permute(0, *range(2, nd + 2), 1).contiguous() if nhwc else y
        if op == "attention":
            q, k, v = a
            scale = n.get("scale")
            if scale is None:
                scale = 1.0 / math.sqrt(q.shape[-1])
            # PyTorch's own attention (flash / memory-efficient kernels in f16 and bf16, the math
            # path in float64): what a user writes, and no B*H*Sq*Skv score tensor in memory.
            # is_causal masks key j > query i (top-left aligned), as docs/formats.md does.
            # fewer k/v heads than query heads: grouped-query attention (docs/formats.md)
            gqa = q.dim() >= 3 and k.shape[-3] != q.shape[-3]
            return torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=bool(n.get("causal", False)), scale=scale,
                **({"enable_gqa": True} if gqa else {}))
        if op == "transpose":
            perm = n.get("perm")
            return x.permute(*perm) if perm else x.transpose(-1, -2)
        if op == "permute":
            return x.permute(*n["perm"])
        if op == "reshape":
            return x.reshape([self.dim(d) if not isinstance(d, int) else d for d in n["shape"]])
        if op == "slice":
            return slice_tensor(x, n)
        if op in ("cumsum", "cumprod"):
            return getattr(torch, op)(x, dim=n.get("axis", -1))
        raise ValueError(f"{self.name}: op {op} has no PyTorch mapping here")


def slice_tensor(x, n):
    """ktune's slice: per axis x[start + i * step] for i < size (-1 keeps the axis), the fill
    where that falls outside x (docs/formats.md)."""
    fill = n.get("fill")
    if isinstance(fill, str):
        fill = float(fill)  # "inf", "-inf"
    starts = n.get("start") or [0] * x.dim()
    steps = n.get("step") or [1] * x.dim()
    for axis, (size, start, step) in enumerate(zip(n["shape"], starts, steps)):
        if size == -1:
            continue
        idx = start + step * torch.arange(size, device=x.device)
        inside = (idx >= 0) & (idx < x.shape[axis])
        x = x.index_select(axis, idx.clamp(0, x.shape[axis] - 1))
        if not bool(inside.all()):
            shape = [1] * x.dim()
            shape[axis] = size
            x = x.masked_fill(~inside.reshape(shape), fill)
    return x


def normwise_error(out, ref, chunk=1 << 26):
    """||out - ref|| / ||ref|| in float64 (the error docs/evaluation.md defines), over chunks
    of the flattened tensors: KernelBench's level-1 tensors hold 1.6G elements, and whole
    float64 copies of them (13 GB each) exhausted the GPU's memory."""
    out, ref = out.reshape(-1), ref.reshape(-1)
    num = den = 0.0
    for i in range(0, ref.numel(), chunk):
        r = ref[i:i + chunk].double()
        den += torch.linalg.vector_norm(r).item() ** 2
        num += torch.linalg.vector_norm(out[i:i + chunk].double() - r).item() ** 2
    return math.sqrt(num) / math.sqrt(den) if den > 0 else math.sqrt(num)
