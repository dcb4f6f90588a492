"""ktune.capture: a ktune.Graph from a PyTorch module or function, through torch.export.

The exported program's ATen graph is walked node by node; each aten op becomes one ktune node
or a short composition of them (docs/formats.md, "Ops"; client/python/README.md, "From
PyTorch"). Parameters, buffers and lifted constants become const inputs named by their
qualified names, after the user's arguments (names and order kept); the graph remembers those
tensors, so Graph.reference (and a kernel call) takes the user's arguments alone. Dimensions
torch.export marks dynamic become symbols (the torch.export.Dim's name where one is given).

An op ktune lacks raises CaptureError naming the op and the user's source line; nothing is
built, registered or cached until every node has been translated."""

import inspect
import math
import operator
import os
import re
import types

from ._lib import KtuneError
from .graph import Graph

_DTYPES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}
_OPTIONS = ("name", "dynamic_shapes", "strict")


class CaptureError(ValueError):
    """A module that ktune.capture cannot turn into a ktune graph (one line: the op and where)."""


class _T:
    """A ktune tensor: its name, shape (ints and symbol names) and dtype. transposed_of: the
    tensor this one swaps the last two axes of (a matmul takes that with a transpose flag)."""
    __slots__ = ("name", "shape", "dtype", "transposed_of")

    def __init__(self, name, shape, dtype, transposed_of=None):
        self.name, self.shape, self.dtype = name, tuple(shape), dtype
        self.transposed_of = transposed_of

    @property
    def rank(self):
        return len(self.shape)


class _Bad:
    """A weight ktune cannot take (why says so): an error only where an op uses it."""

    def __init__(self, why):
        self.why = why


class _Zeros:
    """A tensor of zeros (aten.zeros_like, aten.zeros): no node of its own; a concatenation
    takes it as the fill of a slice (_h_cat), any other op refuses it."""
    __slots__ = ("shape", "dtype")

    def __init__(self, shape, dtype):
        self.shape, self.dtype = tuple(shape), dtype

    @property
    def rank(self):
        return len(self.shape)


class _Sym:
    """A symbolic size (aten.sym_size and arithmetic on it): only shapes may use it, and those
    are read from the node's result instead."""


# Functions captured through a renamed copy (capture()): (file, first line, last line, name).
_RENAMED = []


def _where(node):
    """'file.py:LINE (in fn)' of the innermost user frame of node's stack trace, or ''."""
    trace = node.meta.get("stack_trace") or ""
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', trace)
    if not frames:
        return ""
    torch_dir, here = os.sep + "torch" + os.sep, os.path.dirname(os.path.abspath(__file__))
    user = [f for f in frames if torch_dir not in f[0] and os.path.dirname(f[0]) != here]
    user = user or frames
    path, line, fn = user[-1]
    for file, first, last, name in _RENAMED:
        if fn == "forward" and path == file and first <= int(line) <= last:
            fn = name
    return f"{os.path.basename(path)}:{line} (in {fn})"


def _op_name(node):
    t = node.target
    s = str(t)
    return s.rsplit(".", 1)[0] if s.startswith("aten.") else getattr(t, "__name__", s)


class _Builder:
    def __init__(self, symbols):
        self.inputs = {}  # name -> {"dtype", "shape", "const"?}
        self.nodes = []
        self.taken = set()
        self.symbols = symbols  # str(sympy symbol) -> ktune symbol name
        self.node = None  # the fx node being translated, for messages
        self.origin = {}  # ktune node output -> the fx node it comes from
        self.made = {}  # const inputs capture made (a pooling's weights): name -> tensor
        self.params = {}  # the module's tensors by const input name (capture fills it)

    # ---- names, shapes, errors ----

    def fail(self, msg):
        where = _where(self.node) if self.node is not None else ""
        raise CaptureError(f"ktune.capture: {msg}{' at ' + where if where else ''}")

    def unsupported(self, why=""):
        self.fail(f"unsupported op {_op_name(self.node)}{' (' + why + ')' if why else ''}")

    def fresh(self, base):
        base = re.sub(r"[^A-Za-z0-9_.]", "_", base) or "t"
        name, i = base, 1
        while name in self.taken:
            name, i = f"{base}_{i}", i + 1
        self.taken.add(name)
        return name

    def dim(self, d):
        if isinstance(d, int):
            return d
        expr = getattr(getattr(d, "node", None), "expr", None)
        if expr is None or getattr(expr, "is_number", False):
            return int(d)  # int() of a symbolic size would specialise it: never called there
        key = str(expr)
        if key not in self.symbols:
            pretty = re.sub(r"\b\w+\b", lambda m: self.symbols.get(m.group(0), m.group(0)), key)
            self.unsupported(f"its size {pretty} is derived from a dynamic dimension; ktune "
                             f"symbols are dimensions of the inputs")
        return self.symbols[key]

    def val_shape(self, node=None):
        v = (node or self.node).meta.get("val")
        if not hasattr(v, "shape"):
            self.unsupported("its result is not a tensor")
        return tuple(self.dim(d) for d in v.shape)

    def val_dtype(self, node=None):
        v = (node or self.node).meta.get("val")
        dt = str(getattr(v, "dtype", "")).replace("torch.", "")
        if dt not in _DTYPES:
            self.unsupported(f"its result is {dt or 'not a tensor'}; ktune graphs compute in "
                             f"float32, float16 or bfloat16")
        return _DTYPES[dt]

    # ---- emitting ----

    def add_input(self, name, shape, dtype, const):
        if name in self.inputs:
            self.fail(f"the argument '{name}' and the module's tensor '{name}' share a name; "
                      f"rename the argument")
        self.taken.add(name)
        spec = {"dtype": dtype, "shape": list(shape)}
        if const:
            spec["const"] = True
        self.inputs[name] = spec
        return _T(name, shape, dtype)

    def value(self, x, what):
        """The tensor behind const input x (a module's parameter), for a rewrite of its values."""
        t = self.params.get(x.name) if isinstance(x, _T) else None
        if t is None:
            self.unsupported(f"its {what} is not a parameter of the module")
        return t

    def constant(self, base, tensor):
        """A const input holding tensor, which capture made (the graph remembers it with the
        module's parameters)."""
        dt = _DTYPES[str(tensor.dtype).replace("torch.", "")]
        name = self.fresh(base)
        x = self.add_input(name, tuple(tensor.shape), dt, True)
        self.made[name] = tensor
        return x

    def emit(self, op, ins, shape=None, dtype=None, /, **attrs):
        """One ktune node (attrs: its JSON attributes); shape and dtype of its output default to
        the fx node's result and to the first tensor operand's dtype."""
        name = self.fresh(self.node.name if self.node is not None else op)
        shape = self.val_shape() if shape is None else shape
        dtype = dtype or next((x.dtype for x in ins if isinstance(x, _T)), None) or \
            self.val_dtype()
        self.origin[name] = self.node
        self.nodes.append({"out": name, "op": op,
                           "in": [x.name if isinstance(x, _T) else float(x) for x in ins],
                           **attrs})
        return _T(name, shape, dtype)

    def tensor(self, x, what="operand"):
        if isinstance(x, _T):
            return x
        if isinstance(x, _Zeros):
            self.unsupported(f"its {what} is a tensor of zeros, which ktune makes only beside "
                             f"others in a concatenation")
        self.unsupported(f"its {what} is {type(x).__name__}, not a tensor")

    def unary(self, op, x, **attrs):
        x = self.tensor(x)
        return self.emit(op, [x], x.shape, **attrs)

    def binary(self, op, a, b, shape=None):
        for v in (a, b):
            if isinstance(v, _Sym):
                self.unsupported("an operand is the size of a dynamic dimension, which a ktune "
                                 "graph has no value for")
            if isinstance(v, _Zeros):
                self.tensor(v)  # says why
            if not isinstance(v, _T) and (isinstance(v, bool) or not isinstance(v, (int, float))):
                self.unsupported(f"an operand is {type(v).__name__}")
        if not isinstance(a, _T) and not isinstance(b, _T):
            self.unsupported("both operands are numbers")
        if isinstance(a, _T) and isinstance(b, _T) and a.dtype != b.dtype:
            # PyTorch promotes mixed dtypes; ktune's binary ops take one: cast to the result's
            target = self.val_dtype()
            a, b = (x if x.dtype == target else self.emit("cast", [x], x.shape, target,
                                                          dtype=target) for x in (a, b))
        if shape is None:
            shape = _broadcast(a.shape if isinstance(a, _T) else (),
                               b.shape if isinstance(b, _T) else ())
        return self.emit(op, [a, b], shape)

    def permute(self, x, perm):
        perm = [p % x.rank for p in perm] if x.rank else []
        if perm == list(range(x.rank)):
            return x
        out = self.emit("permute", [x], tuple(x.shape[p] for p in perm), perm=perm)
        if x.rank >= 2 and perm == list(range(x.rank - 2)) + [x.rank - 1, x.rank - 2]:
            out.transposed_of = x
        return out

    def reshape(self, x, shape):
        shape = tuple(shape)
        if shape == x.shape:
            return x
        return self.emit("reshape", [x], shape, shape=list(shape))

    def slice(self, x, start, step, sizes, fill=None):
        """x[start + i * step] per axis for i < sizes (None: the whole axis), reading fill past
        x's edges (None: every read is inside x). Sizes, starts and steps are integers."""
        shape = tuple(x.shape[i] if n is None else n for i, n in enumerate(sizes))
        if all(n is None or (s0 == 0 and st == 1 and n == x.shape[i])
               for i, (s0, st, n) in enumerate(zip(start, step, sizes))):
            return x
        for i, n in enumerate(sizes):
            if n is not None and not isinstance(x.shape[i], int):
                self.unsupported(f"a slice of the dynamic axis {i}")
        attrs = {"shape": [-1 if n is None else n for n in sizes], "start": list(start),
                 "step": list(step)}
        if fill is not None:
            attrs["fill"] = fill if math.isfinite(fill) else ("inf" if fill > 0 else "-inf")
        return self.emit("slice", [x], shape, **attrs)

    def reduce(self, op, x, axes, keepdim):
        x = self.tensor(x)
        if x.rank == 0:
            return x
        axes = sorted({a % x.rank for a in axes}) if axes else list(range(x.rank))
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape) if keepdim or
                      i not in axes)
        return self.emit(op, [x], shape, axes=axes, keepdim=bool(keepdim))

    def matmul(self, a, b, shape=None):
        a, b = self.tensor(a), self.tensor(b)
        if a.rank == 0 or b.rank == 0:
            self.unsupported("a matmul operand is a scalar")
        final = self.val_shape() if shape is None else shape
        if a.rank == 1:
            a = self.reshape(a, (1,) + a.shape)
        if b.rank == 1:
            b = self.reshape(b, b.shape + (1,))
        ta = tb = False
        if a.transposed_of is not None:
            a, ta = a.transposed_of, True
        if b.transposed_of is not None:
            b, tb = b.transposed_of, True
        m = a.shape[-1] if ta else a.shape[-2]
        n = b.shape[-2] if tb else b.shape[-1]
        batch = _broadcast(a.shape[:-2], b.shape[:-2])
        out = self.emit("matmul", [a, b], batch + (m, n), transpose_a=ta, transpose_b=tb)
        return self.reshape(out, final)

    def finish(self, outputs, user_names):
        """The document: unused const inputs and nodes dropped, outputs named output[N]."""
        producer = {n["out"]: n for n in self.nodes}
        live, stack = set(), [o.name for o in outputs]
        while stack:
            t = stack.pop()
            if t in live:
                continue
            live.add(t)
            if t in producer:
                stack += [x for x in producer[t]["in"] if isinstance(x, str)]
        for name in user_names:
            if name not in live:
                raise CaptureError(f"ktune.capture: input '{name}' reaches no output; a ktune "
                                   f"graph takes only inputs its outputs use")
        seen = set()
        for i, o in enumerate(outputs):
            if o.name in self.inputs:
                raise CaptureError(f"ktune.capture: output {i} is the input '{o.name}' itself; "
                                   f"a kernel writes only computed outputs")
            if o.name in seen:
                raise CaptureError(f"ktune.capture: output {i} repeats an earlier output; "
                                   f"return each tensor once")
            seen.add(o.name)
        # The outputs are called output (one) or output0, output1, ...: rename them.
        rename = {}
        for i, o in enumerate(outputs):
            want = "output" if len(outputs) == 1 else f"output{i}"
            if want in self.inputs:
                want = self.fresh(want)
            rename[o.name] = want
        taken_after = set(rename.values())
        for n in self.nodes:  # a node already called like a new output name gives it up
            if n["out"] in taken_after and n["out"] not in rename:
                rename[n["out"]] = self.fresh(n["out"] + "_")
        nodes = []
        for n in self.nodes:
            if n["out"] not in live:
                continue
            n = dict(n, out=rename.get(n["out"], n["out"]),
                     **{"in": [rename.get(x, x) if isinstance(x, str) else x for x in n["in"]]})
            nodes.append(n)
        inputs = {k: v for k, v in self.inputs.items() if k in live}
        return inputs, nodes, [rename[o.name] for o in outputs]


def _broadcast(a, b):
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        out.append(y if x == 1 else x)
    return tuple(reversed(out))


def _args(node):
    """The node's arguments by schema name, defaults filled in."""
    schema = node.target._schema
    vals = {}
    for i, a in enumerate(schema.arguments):
        if i < len(node.args):
            vals[a.name] = node.args[i]
        elif a.name in node.kwargs:
            vals[a.name] = node.kwargs[a.name]
        elif a.has_default_value():
            vals[a.name] = a.default_value
        else:
            vals[a.name] = None
    return vals


# ---- the op table: aten overload packet name -> handler(builder, args) ----

_UNARY = {"neg": "neg", "exp": "exp", "log": "log", "tanh": "tanh", "sigmoid": "sigmoid",
          "relu": "relu", "silu": "silu", "sqrt": "sqrt", "rsqrt": "rsqrt", "abs": "abs",
          "square": "square", "reciprocal": "recip", "mish": "mish"}
_IDENTITY = {"clone", "contiguous", "alias", "detach", "detach_", "lift_fresh_copy", "dropout",
             "feature_dropout", "alpha_dropout"}


def _h_unary(op):
    return lambda b, a: b.unary(op, a["self"])


def _scalar(b, v, what):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        b.unsupported(f"{what} must be a number")
    return float(v)


def _h_add(sign):
    def h(b, a):
        other = a["other"]
        alpha = a.get("alpha", 1)
        if alpha != 1:
            other = b.binary("mul", other, _scalar(b, alpha, "alpha")) if isinstance(
                other, _T) else other * alpha
        return b.binary("add" if sign > 0 else "sub", a["self"], other, b.val_shape())
    return h


def _h_rsub(b, a):
    x = a["self"]
    if a.get("alpha", 1) != 1:
        x = b.binary("mul", x, _scalar(b, a["alpha"], "alpha"))
    return b.binary("sub", a["other"], x, b.val_shape())


def _h_binary(op):
    return lambda b, a: b.binary(op, a["self"], a["other"], b.val_shape())


def _h_div(b, a):
    if a.get("rounding_mode") is not None:
        b.unsupported(f"rounding_mode={a['rounding_mode']!r}")
    return b.binary("div", a["self"], a["other"], b.val_shape())


def _h_pow(b, a):
    base, exp = a["self"], a["exponent"]
    if isinstance(exp, (int, float)) and not isinstance(exp, bool) and isinstance(base, _T):
        if exp == 1:
            return base
        if exp == 2:
            return b.unary("square", base)
        if exp == 0.5:
            return b.unary("sqrt", base)
        if exp == -0.5:
            return b.unary("rsqrt", base)
        if exp == -1:
            return b.unary("recip", base)
    return b.binary("pow", base, exp, b.val_shape())


def _h_gelu(b, a):
    approx = a.get("approximate", "none")
    if approx not in ("none", "tanh"):
        b.unsupported(f"approximate={approx!r}")
    return b.unary("gelu" if approx == "none" else "gelu_tanh", a["self"])


def _clamp_attrs(b, lo, hi):
    attrs = {}
    if lo is not None:
        attrs["min"] = _scalar(b, lo, "min")
    if hi is not None:
        attrs["max"] = _scalar(b, hi, "max")
    return attrs


def _h_clamp(b, a):
    lo, hi = a.get("min"), a.get("max")
    if isinstance(lo, _T) or isinstance(hi, _T):  # clamp.Tensor: max(min(x, hi), lo)
        x = a["self"]
        if hi is not None:
            x = b.binary("min", x, hi, b.val_shape())
        if lo is not None:
            x = b.binary("max", x, lo, b.val_shape())
        return x
    if lo is None and hi is None:
        return a["self"]
    return b.unary("clamp", a["self"], **_clamp_attrs(b, lo, hi))


def _h_hardtanh(b, a):
    return b.unary("hardtanh", a["self"], min=_scalar(b, a["min_val"], "min_val"),
                   max=_scalar(b, a["max_val"], "max_val"))


def _h_hardsigmoid(b, a):  # clamp(x / 6 + 1/2, 0, 1)
    x = a["self"]
    t = b.binary("div", x, 6.0, x.shape)
    t = b.binary("add", t, 0.5, x.shape)
    return b.unary("clamp", t, min=0.0, max=1.0)


def _h_hardswish(b, a):  # x * hardsigmoid(x)
    return b.binary("mul", a["self"], _h_hardsigmoid(b, a), b.val_shape())


def _h_leaky_relu(b, a):
    return b.unary("leaky_relu", a["self"], alpha=_scalar(b, a["negative_slope"],
                                                          "negative_slope"))


def _h_softplus(b, a):
    # ktune's softplus is PyTorch's without its linear cut-off above `threshold`, where the two
    # differ by less than exp(-threshold) relatively.
    beta = _scalar(b, a.get("beta", 1), "beta")
    x = a["self"]
    if beta == 1:
        return b.unary("softplus", x)
    t = b.unary("softplus", b.binary("mul", x, beta, x.shape))
    return b.binary("div", t, beta, x.shape)


def _h_log_sigmoid(b, a):  # -softplus(-x)
    x = a["self"]
    return b.unary("neg", b.unary("softplus", b.unary("neg", x)))


def _h_log_base(base):
    import math

    def h(b, a):
        return b.binary("div", b.unary("log", a["self"]), math.log(base), b.val_shape())
    return h


def _h_exp2(b, a):
    return b.binary("pow", 2.0, a["self"], b.val_shape())


def _h_cast(b, a):
    x = a["self"]
    target = b.val_dtype()
    if not isinstance(x, _T):
        b.unsupported("a cast of a number")
    return x if target == x.dtype else b.emit("cast", [x], x.shape, target, dtype=target)


def _h_identity(b, a):
    x = next(iter(a.values()))
    if a.get("train") and a.get("p", 0) > 0:
        b.unsupported("dropout in training mode (call module.eval() before capturing)")
    return x


def _expand(b, x, shape, why="an expand that changes the shape; let the operation that uses "
                              "it broadcast instead"):
    """x expanded to shape: x itself where the shape stays (ktune has no op that copies a
    tensor along new or size-1 axes); why refuses any other."""
    x = b.tensor(x)
    if tuple(shape) != x.shape:
        b.unsupported(why)
    return x


def _h_expand(b, a):
    return _expand(b, a["self"], b.val_shape())


def _h_broadcast_tensors(b, a):
    """Each operand expanded to the common shape (_expand: operands of that shape already, as a
    loss's input and target are)."""
    xs = [b.tensor(x) for x in a["tensors"]]
    shapes = ", ".join(str(list(x.shape)) for x in xs)
    return tuple(_expand(b, x, tuple(b.dim(d) for d in v.shape),
                         f"broadcast_tensors of shapes {shapes}; ktune has no op that copies a "
                         f"tensor along new or size-1 axes")
                 for x, v in zip(xs, b.node.meta.get("val") or ()))


def _h_reshape(b, a):
    x = b.tensor(a["self"])
    return b.reshape(x, b.val_shape())


def _h_permute(b, a):
    return b.permute(b.tensor(a["self"]), list(a["dims"]))


def _fixed_axis(b, x, dim, what):
    """Axis dim of x (negative from the end) and its size, which must be fixed."""
    if not -x.rank <= dim < max(x.rank, 1):
        b.unsupported(f"a {what} of axis {dim} of a rank-{x.rank} tensor")
    dim %= max(x.rank, 1)
    if not isinstance(x.shape[dim], int):
        b.unsupported(f"a {what} of a dynamic axis")
    return dim, x.shape[dim]


def _slice_axis(b, x, dim, start, count, step):
    """x with axis dim cut to count elements start, start + step, ... (a slice node)."""
    r = x.rank
    starts, steps, sizes = [0] * r, [1] * r, [None] * r
    starts[dim], steps[dim], sizes[dim] = start, step, count
    return b.slice(x, starts, steps, sizes)


def _h_slice(b, a):
    """aten.slice: Python's x[start:end:step] along dim (negative or past-the-end bounds
    clamped as Python clamps them)."""
    x = b.tensor(a["self"])
    dim, size = _fixed_axis(b, x, a.get("dim", 0), "slice")
    step = a.get("step", 1)
    if not all(isinstance(v, int) for v in (a.get("start") or 0, a.get("end") or 0, step)):
        b.unsupported("a slice with bounds derived from a dynamic dimension")
    start, end, step = slice(a.get("start"), a.get("end"), step).indices(size)
    count = len(range(start, end, step))
    if count == 0:
        b.unsupported("an empty slice")
    return _slice_axis(b, x, dim, start, count, step)


def _h_narrow(b, a):
    x = b.tensor(a["self"])
    dim, size = _fixed_axis(b, x, a["dim"], "narrow")
    start, length = a["start"], a["length"]
    if not isinstance(start, int) or not isinstance(length, int):
        b.unsupported("a narrow with bounds derived from a dynamic dimension")
    if length <= 0:
        b.unsupported("an empty narrow")
    return _slice_axis(b, x, dim, start % size if start < 0 else start, length, 1)


def _h_select(b, a):
    """x[..., index, ...]: a slice of one element, the axis then dropped (a reshape)."""
    x = b.tensor(a["self"])
    dim, size = _fixed_axis(b, x, a["dim"], "select")
    index = a["index"]
    if not isinstance(index, int):
        b.unsupported("a select at an index derived from a dynamic dimension")
    y = _slice_axis(b, x, dim, index % size, 1, 1)
    return b.reshape(y, y.shape[:dim] + y.shape[dim + 1:])


def _h_flip(b, a):
    """x reversed along dims: a slice from the last element with step -1."""
    x = b.tensor(a["self"])
    starts, steps, sizes = [0] * x.rank, [1] * x.rank, [None] * x.rank
    for d in a["dims"]:
        d, size = _fixed_axis(b, x, d, "flip")
        if size > 1:
            starts[d], steps[d], sizes[d] = size - 1, -1, size
    return b.slice(x, starts, steps, sizes)


def _h_scan(op):
    """cumsum, cumprod along dim (a dtype= casts first, as PyTorch does)."""
    def h(b, a):
        x = b.tensor(a["self"])
        if x.rank == 0:
            b.unsupported(f"a {op} of a scalar")
        dim = a["dim"]
        if not -x.rank <= dim < x.rank:
            b.unsupported(f"a {op} over axis {dim} of a rank-{x.rank} tensor")
        target = b.val_dtype()
        if target != x.dtype:
            x = b.emit("cast", [x], x.shape, target, dtype=target)
        return b.emit(op, [x], x.shape, axis=dim % x.rank)
    return h


def _h_zeros_like(b, a):
    return _Zeros(b.val_shape(), b.val_dtype())


def _h_cat(b, a):
    """torch.cat along dim: each tensor a slice reading it at its offset in the result, zeros
    elsewhere (fill 0), the slices added (exact: x + 0 is x); pieces of zeros (zeros_like) add
    nothing. KernelBench 1/92's exclusive cumsum: zeros, then the cumsum of all but the last."""
    pieces = list(a["tensors"])
    out, dtype = b.val_shape(), b.val_dtype()
    dim = a.get("dim", 0) % len(out)
    if not isinstance(out[dim], int):
        b.unsupported("a concatenation along a dynamic axis")
    at, parts = 0, []
    for p in pieces:
        if not isinstance(p, (_T, _Zeros)):
            b.tensor(p, "piece")
        size = p.shape[dim]
        if not isinstance(size, int):
            b.unsupported("a concatenation of pieces of dynamic size")
        if isinstance(p, _T):
            if p.dtype != dtype:
                p = b.emit("cast", [p], p.shape, dtype, dtype=dtype)
            starts, steps = [0] * len(out), [1] * len(out)
            sizes = [None] * len(out)
            starts[dim], sizes[dim] = -at, out[dim]
            parts.append(b.slice(p, starts, steps, sizes, fill=0.0))
        at += size
    if not parts:
        b.unsupported("a concatenation of zeros alone")
    y = parts[0]
    for p in parts[1:]:
        y = b.binary("add", y, p)
    return y


def _h_transpose(b, a):
    x = b.tensor(a["self"])
    if x.rank < 2:
        return x
    perm = list(range(x.rank))
    i, j = a["dim0"] % x.rank, a["dim1"] % x.rank
    perm[i], perm[j] = perm[j], perm[i]
    return b.permute(x, perm)


def _h_t(b, a):
    x = b.tensor(a["self"])
    return x if x.rank < 2 else b.permute(x, [1, 0])


def _h_linear(b, a):
    x, w, bias = b.tensor(a["input"]), b.tensor(a["weight"]), a.get("bias")
    wt = b.permute(w, [1, 0]) if w.rank == 2 else w
    y = b.matmul(x, wt, b.val_shape())
    return y if bias is None else b.binary("add", y, bias, b.val_shape())


def _h_mm(b, a):
    return b.matmul(a["self"], a.get("mat2", a.get("other")))


def _h_addmm(b, a):  # beta * self + alpha * (mat1 @ mat2)
    shape = b.val_shape()
    p = b.matmul(a["mat1"], a["mat2"], shape)
    alpha, beta = a.get("alpha", 1), a.get("beta", 1)
    if alpha != 1:
        p = b.binary("mul", p, _scalar(b, alpha, "alpha"), shape)
    if beta == 0:
        return p
    s = a["self"]
    if beta != 1:
        s = b.binary("mul", s, _scalar(b, beta, "beta")) if isinstance(s, _T) else s * beta
    return b.binary("add", p, s, shape)


def _nd(v, nd):
    """An int or a list of them as nd values (one repeated)."""
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return v * nd if len(v) == 1 else v


def _pair(v):
    return _nd(v, 2)


def _conv(b, x, w, bias, stride, padding, dilation, groups, shape=None, input_dilation=1,
          end_padding=0):
    """conv2d of x [N, C, H, W] or conv3d of x [N, C, D, H, W] (shape: its result's, default the
    fx node's). input_dilation and end_padding (a transposed convolution's stride and
    output_padding) are written only where they differ from their defaults, so a graph without
    them reads as before."""
    x, w = b.tensor(x), b.tensor(w)
    if x.rank not in (4, 5) or w.rank != x.rank:
        b.unsupported("only 2-d and 3-d convolutions of batched [N, C, ...] inputs")
    nd = x.rank - 2
    dil = _nd(dilation, nd)
    if isinstance(padding, str):
        if padding == "valid":
            padding = [0] * nd
        elif padding == "same":
            total = [d * (k - 1) for d, k in zip(dil, w.shape[2:])]
            if any(t % 2 for t in total):
                b.unsupported("padding='same' with an even kernel extent (asymmetric padding)")
            padding = [t // 2 for t in total]
        else:
            b.unsupported(f"padding={padding!r}")
    extra = {}
    if any(v != 1 for v in _nd(input_dilation, nd)):
        extra["input_dilation"] = _nd(input_dilation, nd)
    if any(_nd(end_padding, nd)):
        extra["end_padding"] = _nd(end_padding, nd)
    ins = [x, w] + ([bias] if bias is not None else [])
    return b.emit(f"conv{nd}d", ins, shape or b.val_shape(), stride=_nd(stride, nd),
                  padding=_nd(padding, nd), dilation=dil, groups=int(groups), layout="NCHW",
                  **extra)


def _over_width(v, height):
    """A 1-d convolution's knob as the [h, w] of the 2-d one over a height of 1 it becomes."""
    return [height, _nd(v, 1)[0]]


def _conv1d(b, x, w, bias, stride, padding, dilation, groups, input_dilation=1, end_padding=0):
    """A 1-d convolution of x [N, C, L] as a 2-d one over [N, C, 1, L] (w [O, C/g, K] as
    [O, C/g, 1, K], or given so), its result viewed back as [N, O, L']."""
    x, w = b.tensor(x), b.tensor(w)
    if x.rank != 3 or w.rank not in (3, 4):
        b.unsupported("only 1-d convolutions of batched [N, C, L] inputs")
    if w.rank == 3:
        w = b.reshape(w, (w.shape[0], w.shape[1], 1, w.shape[2]))
    if not isinstance(padding, str):  # "valid" and "same" _conv resolves over [1, K]
        padding = _over_width(padding, 0)
    out = b.val_shape()
    y = _conv(b, b.reshape(x, (x.shape[0], x.shape[1], 1, x.shape[2])), w, bias,
              _over_width(stride, 1), padding, _over_width(dilation, 1), groups,
              shape=(out[0], out[1], 1, out[2]), input_dilation=_over_width(input_dilation, 1),
              end_padding=_over_width(end_padding, 0))
    return b.reshape(y, out)


def _h_conv(nd=None):
    """conv1d/2d/3d, and aten.convolution (nd None: from the input's rank; transposed or not)."""
    def h(b, a):
        n = nd or b.tensor(a["input"]).rank - 2
        if a.get("transposed"):
            if n not in (1, 2, 3):
                b.unsupported("a transposed convolution other than 1-d, 2-d or 3-d")
            return _h_conv_transpose(n)(b, a)
        return (_conv1d if n == 1 else _conv)(b, a["input"], a["weight"], a.get("bias"),
                                              a["stride"], a["padding"], a["dilation"],
                                              a["groups"])
    return h


def _h_conv_transpose(nd):
    """A transposed convolution as a convolution: the weight [Cin, Cout/g, K...] becomes
    [Cout, Cin/g, K...] flipped along its kernel axes (a const input capture makes from the
    module's weight, so later changes to the weight do not reach it); its stride s spaces the
    input's elements s apart (input_dilation), padding d (k - 1) - p on both sides and
    output_padding more at the end (end_padding); stride 1."""
    def h(b, a):
        x = b.tensor(a["input"])
        w = b.value(b.tensor(a["weight"]), "weight")
        stride, outpad = _nd(a.get("stride", 1), nd), _nd(a.get("output_padding", 0), nd)
        pad, dil, groups = _nd(a.get("padding", 0), nd), _nd(a.get("dilation", 1), nd), \
            int(a["groups"])
        k = list(w.shape[2:])
        padding = [d * (kk - 1) - p for d, kk, p in zip(dil, k, pad)]
        if any(p < 0 for p in padding):
            b.unsupported("a transposed convolution with more padding than its kernel's extent")
        cin, cout_g = w.shape[0], w.shape[1]
        flipped = (w.reshape(groups, cin // groups, cout_g, *k).transpose(1, 2)
                   .reshape(groups * cout_g, cin // groups, *k)
                   .flip(dims=list(range(2, 2 + nd))))
        if nd == 1:
            flipped = flipped.unsqueeze(2)  # [O, C/g, 1, K]: the conv2d it becomes
        wc = b.constant(b.tensor(a["weight"]).name + "_flipped", flipped.contiguous())
        return (_conv1d if nd == 1 else _conv)(b, x, wc, a.get("bias"), 1, padding, dil, groups,
                                               input_dilation=stride, end_padding=outpad)
    return h


# ---- pooling ----

def _pool_out(b):
    """The pooling's output shape (a _with_indices form's: its values')."""
    val = b.node.meta.get("val")
    if isinstance(val, (tuple, list)):
        return tuple(b.dim(d) for d in val[0].shape)
    return b.val_shape()


def _pool_args(b, a, nd, ceil_ok=False):
    """x, kernel, stride, padding and dilation of an nd-d pooling (aten's defaults: stride the
    kernel, no padding or dilation). Refuses an x other than [N, C, *fixed sizes] and, unless
    ceil_ok, a ceil_mode that adds a window past the edge (a result larger than floor mode's)."""
    x = b.tensor(a["self"])
    if x.rank != nd + 2 or not all(isinstance(d, int) for d in x.shape[1:]):
        b.unsupported(f"a {nd}-d pooling of a tensor other than [N, C, ...] with fixed C and "
                      f"sizes")
    k = _nd(a["kernel_size"], nd)
    stride = _nd(a.get("stride") or k, nd)  # PyTorch's default stride: the window
    pad, dil = _nd(a.get("padding", 0), nd), _nd(a.get("dilation", 1), nd)
    out = _pool_out(b)
    for i, size in enumerate(x.shape[2:]):
        if (size + 2 * pad[i] - dil[i] * (k[i] - 1) - 1) // stride[i] + 1 != out[2 + i] \
                and not ceil_ok:
            b.unsupported("ceil_mode adds a window past the edge")
    return x, k, stride, pad, dil


def _pool_tiles(b, op, x, k):
    """op ("max", "mean") over each window of x [N, C, *sizes] where the windows tile it: x viewed
    as [N, C, S1/k1, k1, S2/k2, k2, ...] with the window axes moved last and reduced away (ktune's
    row kernels reduce trailing axes; no family reduces [3, 5] in place). One window: a reduction
    over all of each channel's."""
    sizes = x.shape[2:]
    if list(sizes) == list(k):
        return b.reduce(op, x, list(range(2, x.rank)), True)
    shape, outer, inner = list(x.shape[:2]), [0, 1], []
    for s, kk in zip(sizes, k):
        outer.append(len(shape))
        shape.append(s // kk)
        if kk > 1:  # a window of extent 1 adds no axis
            inner.append(len(shape))
            shape.append(kk)
    if not inner:
        return x
    y = b.permute(b.reshape(x, shape), outer + inner)
    return b.reduce(op, y, list(range(len(outer), len(shape))), False)


def _indices_unused(b):
    """Refuses a pooling whose indices (result 1 of a _with_indices form) something reads."""
    for u in b.node.users:
        if u.target is operator.getitem and u.args[1] == 1 and u.users:
            b.unsupported("return_indices: ktune computes the maxima, not where they are")


def _pool_window(b, op, fill, x, k, stride, pad, dil, out):
    """Pooling of any windows (overlap, padding, dilation, sizes left over) as op ("max",
    "add") over one slice of x [N, C, *sizes] per window position: the slice for offsets (j1,
    j2, ...) holds x[o * stride + j * dil - pad] for every output position o, fill past x's
    edges (-inf for max pooling, as PyTorch pads it; 0 for the sums of average pooling). The
    pointwise family fuses the slices and the op into one kernel that reads each output's
    window."""
    import itertools
    slices = []
    for offs in itertools.product(*(range(kk) for kk in k)):
        starts = [0, 0] + [j * d - p for j, d, p in zip(offs, dil, pad)]
        slices.append(b.slice(x, starts, [1, 1] + list(stride), [None, None] + list(out),
                              fill=fill))
    while len(slices) > 1:  # a balanced tree: the kernel's dependency chains stay short
        pairs = [b.binary(op, p, q) for p, q in zip(slices[::2], slices[1::2])]
        slices = pairs + ([slices[-1]] if len(slices) % 2 else [])
    return slices[0]


# Window positions up to which pooling takes a slice each (2 nodes a position: 27, a 3 x 3 x 3
# window, is 53 of the search's 64); larger windows: average pooling as a convolution.
_POOL_SLICES_MAX = 27


def _pool_trimmed(b, x, k, stride, pad, dil, out):
    """x cut to what side-by-side windows cover, when they do (stride = kernel, no padding or
    dilation, floor mode leaving the ends of sizes out), for _pool_tiles; else None."""
    side_by_side = not any(pad) and list(stride) == list(k) and \
        all(d == 1 or kk == 1 for d, kk in zip(dil, k))
    if not side_by_side or out != [s // kk for s, kk in zip(x.shape[2:], k)]:
        return None
    covered = [o * kk for o, kk in zip(out, k)]
    if covered == list(x.shape[2:]):
        return x
    return b.slice(x, [0] * x.rank, [1] * x.rank, [None, None] + covered)


def _h_max_pool(nd, with_indices=False):
    """Max pooling: where side-by-side windows cover the input (or a slice of it:
    _pool_trimmed), a max over each (_pool_tiles); other windows (overlapping, padded, dilated,
    ceil_mode's extra one) as the maximum of a slice per window position (_pool_window).
    with_indices: the (values, indices) form, its indices unused."""
    def h(b, a):
        if with_indices:
            _indices_unused(b)
        # ceil_mode's extra windows start inside x (PyTorch's rule) and read -inf past it
        x, k, stride, pad, dil = _pool_args(b, a, nd, ceil_ok=True)
        out = list(_pool_out(b)[2:])
        # windows side by side, the ends of sizes they do not cover left out: a slice of what
        # they cover, then a max over each (3 nodes, where a slice per window position would
        # be 2 * kernel volume)
        trimmed = _pool_trimmed(b, x, k, stride, pad, dil, out)
        if trimmed is not None:
            y = _pool_tiles(b, "max", trimmed, k)
        elif math.prod(k) <= _POOL_SLICES_MAX:
            y = _pool_window(b, "max", -math.inf, x, k, stride, pad, dil, out)
        else:
            b.unsupported(f"max pooling of {math.prod(k)}-element windows that neither tile "
                          f"nor fit the search as {math.prod(k)} slices")
        return (y, None) if with_indices else y
    return h


def _h_avg_pool(nd):
    """Average pooling: where side-by-side windows cover the input (or a slice of it), a mean
    over each (_pool_tiles); windows of at most _POOL_SLICES_MAX positions, the sum of a slice
    per position (zeros past the edges, as padding counts: count_include_pad, the default)
    times 1 / divisor; larger ones a depthwise convolution whose weights are all 1 / divisor, a
    const input capture makes. (The convolution was PyTorch's avg_pool's 0.27-0.48x on the
    H200: KernelBench 1/44-46.)"""
    def h(b, a):
        import torch
        x, k, stride, pad, dil = _pool_args(b, a, nd)
        if not a.get("count_include_pad", True) and any(pad):
            b.unsupported("count_include_pad=False with padding (edge windows average fewer)")
        window = 1
        for v in k:
            window *= v
        div = a.get("divisor_override") or window
        out = list(_pool_out(b)[2:])
        trimmed = _pool_trimmed(b, x, k, stride, pad, dil, out)
        if div == window and trimmed is not None:
            return _pool_tiles(b, "mean", trimmed, k)
        if window <= _POOL_SLICES_MAX:
            y = _pool_window(b, "add", 0.0, x, k, stride, pad, dil, out)
            return b.binary("mul", y, 1.0 / div)
        val = b.node.meta.get("val")
        torch_dtype = _torch_dtype(x.dtype)
        # [C, 1, *K]; a 1-d pooling's as [C, 1, 1, K], the 2-d convolution it becomes
        w = b.constant("avg_pool_weight", torch.full((x.shape[1], 1) + (1,) * (nd == 1) +
                                                     tuple(k), 1.0 / div, dtype=torch_dtype,
                                                     device=getattr(val, "device", "cpu")))
        return (_conv1d if nd == 1 else _conv)(b, x, w, None, stride, pad, 1, x.shape[1])
    return h


def _h_adaptive_avg_pool(nd):
    """Adaptive average pooling to sizes that divide the input's: windows of input / output,
    which tile it (_pool_tiles)."""
    def h(b, a):
        x = b.tensor(a["self"])
        if x.rank != nd + 2 or not all(isinstance(d, int) for d in x.shape[2:]):
            b.unsupported(f"adaptive pooling of a tensor other than [N, C, ...] with {nd} "
                          f"fixed sizes")
        sizes = x.shape[2:]
        out = [s if o is None else o for s, o in zip(sizes, _nd(a["output_size"], nd))]
        if any(s % o for s, o in zip(sizes, out)):
            b.unsupported(f"adaptive pooling from {' x '.join(map(str, sizes))} to "
                          f"{' x '.join(map(str, out))} (windows of several sizes)")
        return _pool_tiles(b, "mean", x, [s // o for s, o in zip(sizes, out)])
    return h


def _h_softmax(op):
    def h(b, a):
        x = b.tensor(a["self"])
        y = b.emit(op, [x], x.shape, axis=int(a["dim"]))
        target = b.val_dtype()
        return y if target == y.dtype else b.emit("cast", [y], y.shape, target, dtype=target)
    return h


def _h_logsumexp(b, a):
    x = b.tensor(a["self"])
    dims = list(a["dim"]) or list(range(x.rank))
    if len(dims) != 1:
        b.unsupported("logsumexp over several axes")
    keep = bool(a.get("keepdim", False))
    return b.emit("logsumexp", [x], b.val_shape(), axis=int(dims[0]), keepdim=keep)


def _norm_axis(b, x, normalized_shape):
    n = len(normalized_shape)
    if n == 0 or n > x.rank:
        b.unsupported(f"normalized_shape {list(normalized_shape)} for rank {x.rank}")
    return x.rank - n


def _h_layer_norm(b, a):
    x = b.tensor(a["input"])
    axis = _norm_axis(b, x, a["normalized_shape"])
    w, bias, eps = a.get("weight"), a.get("bias"), _scalar(b, a.get("eps", 1e-5), "eps")
    ins = [x] + ([w] if w is not None else []) + ([bias] if w is not None and
                                                   bias is not None else [])
    y = b.emit("layernorm", ins, x.shape, axis=axis, eps=eps)
    if w is None and bias is not None:  # ktune takes a bias only after a weight
        y = b.binary("add", y, bias, x.shape)
    return y


def _h_native_layer_norm(b, a):
    return (_h_layer_norm(b, a), None, None)


def _group_norm(b, x, groups, w, bias, eps):
    """Group norm of x [N, C, *spatial]: layernorm over the last axis of x viewed as
    [N, groups, C / groups * spatial], then the per-channel weight and bias."""
    x = b.tensor(x)
    if x.rank < 2 or not all(isinstance(d, int) for d in x.shape[1:]):
        b.unsupported("group norm of a tensor without static channel and spatial sizes")
    c = x.shape[1]
    if not isinstance(groups, int) or groups < 1 or c % groups:
        b.unsupported(f"{groups} groups of {c} channels")
    per_group = c // groups
    for d in x.shape[2:]:
        per_group *= d
    y = b.emit("layernorm", [b.reshape(x, (x.shape[0], groups, per_group))],
               (x.shape[0], groups, per_group), axis=2, eps=_scalar(b, eps, "eps"))
    y = b.reshape(y, x.shape)
    per_channel = (c,) + (1,) * (x.rank - 2)  # [C] broadcast over [N, C, ...]
    if w is not None:
        y = b.binary("mul", y, b.reshape(b.tensor(w), per_channel), x.shape)
    if bias is not None:
        y = b.binary("add", y, b.reshape(b.tensor(bias), per_channel), x.shape)
    return y


def _h_group_norm(b, a):
    return _group_norm(b, a["input"], a["num_groups"], a.get("weight"), a.get("bias"),
                       a.get("eps", 1e-5))


def _h_instance_norm(b, a):
    """Instance norm: with the input's statistics (use_input_stats, the module's default) a group
    norm of one channel a group; with running statistics, batch norm's inference form."""
    if not a.get("use_input_stats", True):
        return _h_batch_norm(b, {"input": a["input"], "weight": a.get("weight"),
                                 "bias": a.get("bias"), "running_mean": a.get("running_mean"),
                                 "running_var": a.get("running_var"), "eps": a.get("eps", 1e-5),
                                 "training": False})
    x = b.tensor(a["input"])
    return _group_norm(b, x, x.shape[1] if x.rank >= 2 else 0, a.get("weight"), a.get("bias"),
                       a.get("eps", 1e-5))


def _h_batch_norm(b, a):
    """(x - mean) * rsqrt(var + eps) * weight + bias per channel: in eval mode with the running
    statistics; in training mode (a module's default) with the batch's, mean and biased variance
    over every axis but the channel's. The running statistics' update in training mode is a side
    effect on buffers, not an output: the graph leaves it out."""
    x = b.tensor(a["input"])
    if x.rank < 2:
        b.unsupported("batch norm of a tensor without a channel axis")
    c = x.shape[1]
    per_channel = (c,) + (1,) * (x.rank - 2)  # [C] broadcast over [N, C, ...]

    def chan(t):
        return b.reshape(b.tensor(t), per_channel)
    if a.get("training"):
        axes = [0] + list(range(2, x.rank))
        mean = b.reduce("mean", x, axes, True)
        d = b.binary("sub", x, mean, x.shape)
        var = b.reduce("mean", b.unary("square", d), axes, True)
    else:
        mean, var = a.get("running_mean"), a.get("running_var")
        if not isinstance(mean, _T) or not isinstance(var, _T):
            b.unsupported("batch norm in eval mode without running statistics")
        mean, var = chan(mean), chan(var)
        d = b.binary("sub", x, mean, x.shape)
    stat_shape = var.shape
    rstd = b.unary("rsqrt", b.binary("add", var, _scalar(b, a["eps"], "eps"), stat_shape))
    y = b.binary("mul", d, rstd, x.shape)
    if a.get("weight") is not None:
        y = b.binary("mul", y, chan(a["weight"]), x.shape)
    if a.get("bias") is not None:
        y = b.binary("add", y, chan(a["bias"]), x.shape)
    return y


def _h_rms_norm(b, a):
    import torch
    x = b.tensor(a["input"])
    axis = _norm_axis(b, x, a["normalized_shape"])
    eps = a.get("eps")
    if eps is None:  # PyTorch's default: the machine epsilon of the input's dtype
        eps = torch.finfo({"f32": torch.float32, "f16": torch.float16,
                           "bf16": torch.bfloat16}[x.dtype]).eps
    w = a.get("weight")
    return b.emit("rmsnorm", [x] + ([w] if w is not None else []), x.shape, axis=axis,
                  eps=_scalar(b, eps, "eps"))


def _h_sdpa(b, a):
    if a.get("attn_mask") is not None:
        b.unsupported("attn_mask")
    if a.get("dropout_p", 0.0):
        b.unsupported("dropout_p > 0")
    # grouped-query attention (enable_gqa): k and v with fewer heads, a divisor of q's; the
    # graph's attention reads them as PyTorch does (query head h, k/v head h / group)
    q, k, v = (b.tensor(a[n]) for n in ("query", "key", "value"))
    attrs = {"causal": bool(a.get("is_causal", False))}
    if a.get("scale") is not None:
        attrs["scale"] = _scalar(b, a["scale"], "scale")
    return b.emit("attention", [q, k, v], b.val_shape(), **attrs)


def _dims(a):
    d = a.get("dim")
    return [] if d is None else ([d] if isinstance(d, int) else list(d))


def _h_reduce(op):
    def h(b, a):
        if a.get("dtype") is not None:
            b.unsupported("a reduction with dtype=")
        return b.reduce(op, a["self"], _dims(a), a.get("keepdim", False))
    return h


def _h_var(std):
    def h(b, a):  # mean((x - mean(x))^2) * n / (n - correction), sqrt for std
        x = b.tensor(a["self"])
        axes = sorted({d % x.rank for d in _dims(a)}) or list(range(x.rank))
        n = 1
        for i in axes:
            if not isinstance(x.shape[i], int):
                b.unsupported("var/std over a symbolic dimension")
            n *= x.shape[i]
        if "unbiased" in a:  # var.dim, std.dim
            corr = 1 if a["unbiased"] else 0
        else:
            corr = 1 if a.get("correction") is None else a["correction"]
        if n <= corr:
            b.unsupported(f"var/std of {n} elements with correction {corr} (a division by zero)")
        keep = bool(a.get("keepdim", False))
        m = b.reduce("mean", x, axes, True)
        d = b.binary("sub", x, m, x.shape)
        y = b.reduce("mean", b.unary("square", d), axes, keep)
        if corr:
            y = b.binary("mul", y, n / (n - corr), y.shape)
        return b.unary("sqrt", y) if std else y
    return h


def _h_min_max(op):
    """max / min: of two tensors (.other), over one dim with the indices (.dim: a (values,
    indices) pair whose indices ktune does not compute), or over everything."""
    def h(b, a):
        if "other" in a:
            return b.binary(op, a["self"], a["other"], b.val_shape())
        if "dim" in a:
            return b.reduce(op, a["self"], [a["dim"]], a.get("keepdim", False)), None
        return b.reduce(op, a["self"], [], False)
    return h


def _elu(b, x, alpha, scale, input_scale):
    """scale * (x > 0 ? x : alpha * (exp(input_scale * x) - 1)), as
    scale * (max(x, 0) + min(alpha * (exp(input_scale * x) - 1), 0)) for alpha >= 0."""
    x = b.tensor(x)
    alpha, scale, input_scale = (_scalar(b, v, n) for v, n in ((alpha, "alpha"), (scale, "scale"),
                                                                (input_scale, "input_scale")))
    if alpha < 0:
        b.unsupported("elu with a negative alpha")
    e = b.unary("exp", x if input_scale == 1 else b.binary("mul", x, input_scale, x.shape))
    neg = b.binary("min", b.binary("mul", b.binary("sub", e, 1.0, x.shape), alpha, x.shape),
                   0.0, x.shape)
    y = b.binary("add", b.unary("relu", x), neg, x.shape)
    return y if scale == 1 else b.binary("mul", y, scale, x.shape)


def _h_elu(b, a):
    return _elu(b, a["self"], a.get("alpha", 1.0), a.get("scale", 1.0), a.get("input_scale", 1.0))


# SELU's constants (Klambauer et al. 2017, as torch.nn.SELU defines them)
_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946


def _vector_norm(b, x, order, dims, keep, what):
    """The norm of ord 1, 2 or inf of x over dims: sum |x|, sqrt(sum x^2), max |x|; what (the
    op and its knob) names another ord in the refusal."""
    x = b.tensor(x)
    if order == 2:
        return b.unary("sqrt", b.reduce("sum", b.unary("square", x), dims, keep))
    if order == 1:
        return b.reduce("sum", b.unary("abs", x), dims, keep)
    if order == float("inf"):
        return b.reduce("max", b.unary("abs", x), dims, keep)
    shown = f"{order:g}" if isinstance(order, (int, float)) else repr(order)
    b.unsupported(f"{what}{shown}; ktune takes 1, 2 and inf")


def _h_vector_norm(b, a):
    """linalg.vector_norm for ord 1, 2 and inf: sum |x|, sqrt(sum x^2), max |x| over dim."""
    if a.get("dtype") is not None:
        b.unsupported("vector_norm with dtype=")
    return _vector_norm(b, a["self"], a.get("ord", 2), _dims(a), a.get("keepdim", False),
                        "vector_norm of ord ")


# ---- losses: their definitions from pointwise ops and a reduction ----

def _loss_reduction(b, loss, reduction):
    """aten's reduction enum: 0 none, 1 mean, 2 sum (over every element)."""
    if reduction == 0:
        return loss
    if reduction in (1, 2):
        return b.reduce("mean" if reduction == 1 else "sum", loss, [], False)
    b.unsupported(f"reduction {reduction!r}")


def _h_smooth_l1(huber):
    """smooth_l1_loss (beta) and huber_loss (delta) of d = x - y, without a select: with
    a = |d| and m = min(a, beta), smooth L1 is m^2 / (2 beta) + (a - m) (a^2 / (2 beta) below
    beta, a - beta / 2 above) and Huber m^2 / 2 + delta (a - m), which is delta times it. Smooth
    L1 with beta 0 is |d|."""
    def h(b, a):
        knob = "delta" if huber else "beta"
        beta = _scalar(b, a.get(knob, 1.0), knob)
        if beta < 0:  # torch checks huber_loss's delta itself
            b.unsupported(f"a negative {knob} ({beta:g})")
        x, y = a["self"], a["target"]
        ad = b.unary("abs", b.binary("sub", x, y))
        if beta == 0:
            return _loss_reduction(b, ad, a.get("reduction", 1))
        m = b.binary("min", ad, beta, ad.shape)
        quad = b.binary("mul", b.unary("square", m), 0.5 if huber else 0.5 / beta, ad.shape)
        lin = b.binary("sub", ad, m, ad.shape)
        if huber and beta != 1:
            lin = b.binary("mul", lin, beta, ad.shape)
        return _loss_reduction(b, b.binary("add", quad, lin, ad.shape), a.get("reduction", 1))
    return h


def _h_l1_loss(b, a):  # |x - y|, reduced (smooth_l1_loss with beta 0 becomes this)
    return _loss_reduction(b, b.unary("abs", b.binary("sub", a["self"], a["target"])),
                           a.get("reduction", 1))


# log(max(t, this)): xlogy(t, t) = 0 at t = 0, where t log t would be 0 * -inf; a t in
# (0, this) moves by at most this / e (float32's smallest normal number)
_TINY = 2.0 ** -126


def _h_kl_div(b, a):
    """kl_div(input, target) as PyTorch defines it pointwise: with log_target, exp(t) (t - x);
    else xlogy(t, t) - t x, xlogy(t, t) as t log(max(t, 2^-126)), which is 0 at t = 0 (and
    finite for a negative t, where PyTorch's is NaN). reduction 'batchmean' is a sum that
    torch.export divides by the batch size itself."""
    x, t = b.tensor(a["self"]), b.tensor(a["target"])
    if a.get("log_target"):
        loss = b.binary("mul", b.unary("exp", t), b.binary("sub", t, x))
    else:
        tlogt = b.binary("mul", t, b.unary("log", b.binary("max", t, _TINY, t.shape)))
        loss = b.binary("sub", tlogt, b.binary("mul", t, x))
    return _loss_reduction(b, loss, a.get("reduction", 1))


def _pairwise_distance(b, x1, x2, p, eps, keepdim, what):
    """The p-norm of x1 - x2 + eps over the last axis (PyTorch's pairwise_distance)."""
    x1, x2 = b.tensor(x1), b.tensor(x2)
    rank = max(x1.rank, x2.rank)
    if rank == 0:
        b.unsupported("a distance between scalars")
    d = b.binary("add", b.binary("sub", x1, x2), _scalar(b, eps, "eps"))
    return _vector_norm(b, d, p, [rank - 1], keepdim, what)


def _h_pairwise_distance(b, a):
    return _pairwise_distance(b, a["x1"], a["x2"], a.get("p", 2.0), a.get("eps", 1e-6),
                              a.get("keepdim", False), "pairwise_distance with p=")


def _h_triplet_margin_loss(b, a):
    """max(d(anchor, positive) - d(anchor, negative) + margin, 0), d pairwise_distance (p 1, 2
    or inf, eps), reduced; no swap (the distance of positive to negative would need a
    select)."""
    if a.get("swap"):
        b.unsupported("swap=True; ktune has no select for the smaller of two distances")
    p, eps = a.get("p", 2.0), a.get("eps", 1e-6)
    what = "triplet_margin_loss with p="
    dp = _pairwise_distance(b, a["anchor"], a["positive"], p, eps, False, what)
    dn = _pairwise_distance(b, a["anchor"], a["negative"], p, eps, False, what)
    gap = b.binary("add", b.binary("sub", dp, dn), _scalar(b, a.get("margin", 1.0), "margin"))
    return _loss_reduction(b, b.unary("clamp", gap, min=0.0), a.get("reduction", 1))


# ---- triangles and einsum ----

def _torch_dtype(dt):
    import torch
    return getattr(torch, next(t for t, d in _DTYPES.items() if d == dt))


def _h_triangle(op):
    """triu / tril (diagonal k): x times a 0/1 mask of x's last two sizes, torch.triu/tril of
    ones made at capture time (a const input; broadcast over the leading axes). An inf or NaN
    outside the triangle becomes NaN, not 0."""
    def h(b, a):
        import torch
        x = b.tensor(a["self"])
        if x.rank < 2 or not all(isinstance(d, int) for d in x.shape[-2:]):
            b.unsupported(f"{op} of a tensor whose last two sizes are not fixed integers (its "
                          f"mask is a constant)")
        k = a.get("diagonal", 0)
        if isinstance(k, bool) or not isinstance(k, int):
            b.unsupported("a diagonal that is not a fixed integer")
        val = b.node.meta.get("val")
        ones = torch.ones(x.shape[-2:], dtype=_torch_dtype(x.dtype),
                          device=getattr(val, "device", "cpu"))
        mask = b.constant(f"{op}_mask", getattr(torch, op)(ones, k))
        return b.binary("mul", x, mask, x.shape)
    return h


def _h_einsum(b, a):
    """einsum of one operand (a permute) or two (a matmul): each index is batch (both operands
    and the output), contracted (both operands only) or free (one operand and the output). Each
    operand is permuted to [batch, free, contracted] (the second to [batch, contracted, free]),
    viewed as [B, M, K] / [B, K, N] ([M, K] / [K, N] without batch indices; an operand already
    laid out the other way round becomes a transpose flag), one matmul, and its result viewed as
    [batch, free of the first, free of the second] and permuted to the output's order (the
    operands swapped where that saves the permute)."""
    eq = a["equation"].replace(" ", "")
    xs = list(a["tensors"])
    if "." in eq:
        b.unsupported(f"einsum '{eq}' with an ellipsis")
    if len(xs) > 2:
        b.unsupported(f"einsum of {len(xs)} operands; ktune takes one or two (a matmul)")
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    if not arrow:  # implicit output: the indices used once, in alphabetical order
        out = "".join(sorted(c for c in set(lhs) if c != "," and lhs.count(c) == 1))
    xs = [b.tensor(x) for x in xs]
    if len(terms) != len(xs) or any(len(t) != x.rank for t, x in zip(terms, xs)):
        b.unsupported(f"einsum '{eq}' does not match its operands' ranks")
    size = {}
    for i, (t, x) in enumerate(zip(terms, xs)):
        rep = next((c for c in t if t.count(c) > 1), None)
        if rep is not None:
            b.unsupported(f"einsum '{eq}' repeats index {rep} in operand {i} (a trace or "
                          f"diagonal)")
        if not all(isinstance(d, int) for d in x.shape):
            b.unsupported(f"einsum '{eq}' of an operand whose sizes are not fixed integers")
        for c, d in zip(t, x.shape):
            if size.setdefault(c, d) != d:
                b.unsupported(f"einsum '{eq}' with index {c} of sizes {size[c]} and {d} "
                              f"(broadcast)")
        alone = next((c for c in t if c not in out and
                      not any(c in u for j, u in enumerate(terms) if j != i)), None)
        if alone is not None:
            b.unsupported(f"einsum '{eq}' sums index {alone} over operand {i} alone")
    if len(set(out)) != len(out) or any(c not in size for c in out):
        b.unsupported(f"einsum '{eq}' has an output index twice or in no operand")
    if len(xs) == 1:
        return b.permute(xs[0], [terms[0].index(c) for c in out])

    def prod(idx):
        n = 1
        for c in idx:
            n *= size[c]
        return n
    (x, tx), (y, ty) = zip(xs, terms)
    batch = [c for c in out if c in tx and c in ty]
    fx, fy = [c for c in tx if c not in ty], [c for c in ty if c not in tx]
    rest = [c for c in out if c not in batch]
    if rest != fx + fy and rest == fy + fx:  # out = y^T x^T: swap the operands
        (x, tx, fx), (y, ty, fy) = (y, ty, fy), (x, tx, fx)
    con = [c for c in tx if c in ty and c not in out]
    lead = [prod(batch)] if batch else []

    def side(v, t, rows, cols):  # v as [B, rows, cols], its last two swapped where t says so
        flipped = batch + cols + rows
        if list(t) == flipped and flipped != batch + rows + cols:
            v = b.reshape(b.permute(v, [t.index(c) for c in flipped]),
                          lead + [prod(cols), prod(rows)])
            return b.permute(v, list(range(len(lead))) + [len(lead) + 1, len(lead)])
        order = batch + rows + cols
        return b.reshape(b.permute(v, [t.index(c) for c in order]),
                         lead + [prod(rows), prod(cols)])
    mm = b.matmul(side(x, tx, fx, con), side(y, ty, con, fy),
                  tuple(lead + [prod(fx), prod(fy)]))
    have = batch + fx + fy
    mm = b.reshape(mm, [size[c] for c in have])
    return b.permute(mm, [have.index(c) for c in out])


def _is_state_update(b, node, env):
    """An in-place add to a module's buffer that nothing reads after (batch norm's
    num_batches_tracked += 1 in training mode): a side effect on the module's state, not part
    of what the graph computes."""
    if _op_name(node) != "aten.add_" or node.users or not node.args:
        return False
    x = env.get(node.args[0])
    return isinstance(x, _Bad) or (isinstance(x, _T) and
                                   bool(b.inputs.get(x.name, {}).get("const")))


def _h_getitem(b, node, env):
    src, i = node.args
    v = env[src]
    if isinstance(v, tuple) and v[i] is None and not node.users:
        return None  # torch.export keeps a getitem of every result, used or not
    if not isinstance(v, tuple) or v[i] is None:
        b.unsupported("it uses a result ktune does not compute")
    return v[i]


_OPS = {
    "linear": _h_linear, "mm": _h_mm, "bmm": _h_mm, "matmul": _h_mm, "addmm": _h_addmm,
    "conv1d": _h_conv(1), "conv2d": _h_conv(2), "conv3d": _h_conv(3),
    "convolution": _h_conv(),
    "conv_transpose1d": _h_conv_transpose(1), "conv_transpose2d": _h_conv_transpose(2),
    "conv_transpose3d": _h_conv_transpose(3),
    "avg_pool1d": _h_avg_pool(1), "avg_pool2d": _h_avg_pool(2), "avg_pool3d": _h_avg_pool(3),
    "max_pool1d": _h_max_pool(1), "max_pool2d": _h_max_pool(2), "max_pool3d": _h_max_pool(3),
    "max_pool2d_with_indices": _h_max_pool(2, True),
    "max_pool3d_with_indices": _h_max_pool(3, True),
    "adaptive_avg_pool1d": _h_adaptive_avg_pool(1),
    "adaptive_avg_pool2d": _h_adaptive_avg_pool(2),
    "adaptive_avg_pool3d": _h_adaptive_avg_pool(3),
    "softmax": _h_softmax("softmax"), "_softmax": _h_softmax("softmax"),
    "log_softmax": _h_softmax("log_softmax"), "_log_softmax": _h_softmax("log_softmax"),
    "logsumexp": _h_logsumexp,
    "layer_norm": _h_layer_norm, "native_layer_norm": _h_native_layer_norm,
    "rms_norm": _h_rms_norm, "batch_norm": _h_batch_norm, "group_norm": _h_group_norm,
    "instance_norm": _h_instance_norm,
    "scaled_dot_product_attention": _h_sdpa,
    "sum": _h_reduce("sum"), "mean": _h_reduce("mean"), "amax": _h_reduce("max"),
    "amin": _h_reduce("min"), "var": _h_var(False), "std": _h_var(True),
    "add": _h_add(1), "sub": _h_add(-1), "rsub": _h_rsub, "mul": _h_binary("mul"),
    "div": _h_div, "maximum": _h_binary("max"), "minimum": _h_binary("min"),
    "pow": _h_pow, "gelu": _h_gelu, "clamp": _h_clamp,
    "clamp_min": lambda b, a: _h_clamp(b, {"self": a["self"], "min": a["min"]}),
    "clamp_max": lambda b, a: _h_clamp(b, {"self": a["self"], "max": a["max"]}),
    "hardtanh": _h_hardtanh, "relu6": lambda b, a: b.unary("hardtanh", a["self"], min=0.0,
                                                           max=6.0),
    "hardsigmoid": _h_hardsigmoid, "hardswish": _h_hardswish, "leaky_relu": _h_leaky_relu,
    "softplus": _h_softplus, "log_sigmoid": _h_log_sigmoid, "log2": _h_log_base(2),
    "log10": _h_log_base(10), "exp2": _h_exp2,
    "_to_copy": _h_cast, "to": _h_cast, "type_as": _h_cast,
    "view": _h_reshape, "reshape": _h_reshape, "_unsafe_view": _h_reshape,
    "unsqueeze": _h_reshape, "squeeze": _h_reshape, "flatten": _h_reshape,
    "unflatten": _h_reshape, "expand": _h_expand, "permute": _h_permute,
    "slice": _h_slice, "narrow": _h_narrow, "select": _h_select, "flip": _h_flip,
    "cumsum": _h_scan("cumsum"), "cumprod": _h_scan("cumprod"),
    "zeros_like": _h_zeros_like, "cat": _h_cat, "concat": _h_cat,
    "transpose": _h_transpose, "t": _h_t,
    "numpy_T": lambda b, a: b.permute(b.tensor(a["self"]),
                                      list(range(b.tensor(a["self"]).rank))[::-1]),
    "max": _h_min_max("max"), "min": _h_min_max("min"), "multiply": _h_binary("mul"),
    "elu": _h_elu, "selu": lambda b, a: _elu(b, a["self"], _SELU_ALPHA, _SELU_SCALE, 1.0),
    "linalg_vector_norm": _h_vector_norm,
    "broadcast_tensors": _h_broadcast_tensors, "smooth_l1_loss": _h_smooth_l1(False),
    "huber_loss": _h_smooth_l1(True), "l1_loss": _h_l1_loss, "kl_div": _h_kl_div,
    "pairwise_distance": _h_pairwise_distance, "triplet_margin_loss": _h_triplet_margin_loss,
    "triu": _h_triangle("triu"), "tril": _h_triangle("tril"), "einsum": _h_einsum,
}
_OPS.update({k: _h_unary(v) for k, v in _UNARY.items()})
_OPS.update({k: _h_identity for k in _IDENTITY})
_SKIP = {"_assert_tensor_metadata", "_assert_scalar", "sym_constrain_range_for_size",
         "_assert_async", "sym_constrain_range"}


def _user_names(target, n):
    """The names of the user's n positional arguments: the parameters of forward (or fn)."""
    try:
        params = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = []
    for p in params:
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            names.append(p.name)
        elif p.kind == p.VAR_POSITIONAL:
            names += [f"{p.name}{i}" for i in range(n - len(names))]
            break
    return names[:n] if len(names) >= n else names + [f"input{i}" for i in range(len(names), n)]


def _dim_names(dynamic_shapes, user_names, placeholders):
    """str(sympy symbol) -> the name of the torch.export.Dim at that place, where one is named."""
    out = {}
    if dynamic_shapes is None:
        return out
    if isinstance(dynamic_shapes, dict):
        specs = [dynamic_shapes.get(n) for n in user_names]
    else:
        specs = list(dynamic_shapes)
    for spec, ph in zip(specs, placeholders):
        if spec is None or ph is None:
            continue
        items = spec.items() if isinstance(spec, dict) else enumerate(spec)
        shape = getattr(ph.meta.get("val"), "shape", ())
        for axis, d in items:
            name = getattr(d, "__name__", None)
            if not name or axis >= len(shape) or not re.fullmatch(r"[A-Za-z_]\w*", name):
                continue
            expr = getattr(getattr(shape[axis], "node", None), "expr", None)
            if expr is not None and getattr(expr, "is_Symbol", False):
                out.setdefault(str(expr), name)
    return out


def capture(fn_or_module, *example_inputs, **options):
    """A ktune.Graph of fn_or_module (a torch.nn.Module or a function of tensors) called on
    example_inputs, through torch.export (docs: client/python/README.md, "From PyTorch").

    Options: name= (the graph's name; default the module's class or the function's name),
    dynamic_shapes= (as torch.export.export takes it; each dynamic dimension becomes a symbol
    named after its torch.export.Dim), strict= (torch.export's tracing mode, default False).
    The graph's inputs are the user's arguments (their parameter names, in order), then the
    module's parameters, buffers and constants as const inputs by qualified name; graph.params
    holds those tensors and graph.user_inputs the argument names. Raises CaptureError (one
    line: the op and the user's source line) for an op ktune lacks."""
    for k in options:
        if k not in _OPTIONS:
            raise TypeError(f"ktune.capture: unexpected keyword '{k}' (options: "
                            f"{', '.join(_OPTIONS)})")
    import torch

    if isinstance(fn_or_module, torch.nn.Module):
        module, target = fn_or_module, fn_or_module.forward
        default_name = type(fn_or_module).__name__
    elif callable(fn_or_module):
        fn = fn_or_module
        # torch.export keeps only the frames of functions named forward in a node's stack
        # trace (later versions also of registered anchors): the function is called through a
        # copy of it named forward, so its own lines name an unsupported op (_where maps the
        # name back)
        call = fn
        code = getattr(fn, "__code__", None)
        if isinstance(fn, types.FunctionType) and code is not None:
            call = types.FunctionType(code.replace(co_name="forward"), fn.__globals__, "forward",
                                      fn.__defaults__, fn.__closure__)
            call.__kwdefaults__ = fn.__kwdefaults__
            last = max((ln for _, _, ln in code.co_lines() if ln), default=code.co_firstlineno)
            entry = (code.co_filename, code.co_firstlineno, last, fn.__name__)
            if entry not in _RENAMED:
                _RENAMED.append(entry)

        class _Fn(torch.nn.Module):
            def forward(self, *args):
                return call(*args)
        module, target = _Fn(), fn
        default_name = getattr(fn, "__name__", "graph")
    else:
        raise TypeError(f"ktune.capture: expected a torch.nn.Module or a function, not "
                        f"{type(fn_or_module).__name__}")
    for i, x in enumerate(example_inputs):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"ktune.capture: example input {i} is {type(x).__name__}, not a "
                            f"tensor")
    names = _user_names(target, len(example_inputs))
    dynamic = options.get("dynamic_shapes")
    if dynamic is not None and not isinstance(fn_or_module, torch.nn.Module):
        # the wrapper's forward takes *args: its specs, by position or by the function's names
        if isinstance(dynamic, dict):
            unknown = [k for k in dynamic if k not in names]
            if unknown:
                raise TypeError(f"ktune.capture: dynamic_shapes names '{unknown[0]}', which is "
                                f"not an argument ({', '.join(names)})")
            dynamic = {"args": tuple(dynamic.get(n) for n in names)}
        else:
            dynamic = {"args": tuple(dynamic)}
    try:
        ep = torch.export.export(module, tuple(example_inputs), dynamic_shapes=dynamic,
                                 strict=bool(options.get("strict", False)))
    except Exception as e:  # torch's own errors: one line naming what failed
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CaptureError(f"ktune.capture: torch.export failed: {first}") from e

    from torch.export.graph_signature import InputKind
    sig = ep.graph_signature
    placeholders = [n for n in ep.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(sig.input_specs):
        raise CaptureError("ktune.capture: the exported program's inputs do not match its "
                           "signature")
    user_ph = [ph for ph, s in zip(placeholders, sig.input_specs) if s.kind == InputKind.USER_INPUT]
    dim_names = _dim_names(options.get("dynamic_shapes"), names, user_ph + [None] * len(names))

    symbols = {}
    used = set()

    def sym_name(key):
        base = dim_names.get(key) or re.sub(r"\W", "_", key)
        name, i = base, 1
        while name in used:
            name, i = f"{base}_{i}", i + 1
        used.add(name)
        return name

    for ph in user_ph:  # symbols in order of first appearance in the user's inputs
        for d in getattr(ph.meta.get("val"), "shape", ()):
            expr = getattr(getattr(d, "node", None), "expr", None)
            if expr is not None and getattr(expr, "is_Symbol", False) and str(expr) not in symbols:
                symbols[str(expr)] = sym_name(str(expr))

    b = _Builder(symbols)
    env, params, user_inputs = {}, b.params, []
    ui = 0
    # The user's arguments first (declared order is what a call takes), then the weights.
    order = sorted(zip(placeholders, sig.input_specs),
                   key=lambda p: p[1].kind != InputKind.USER_INPUT)
    for ph, spec in order:
        b.node = ph
        val = ph.meta.get("val")
        if spec.kind == InputKind.USER_INPUT:
            if not isinstance(val, torch.Tensor):
                b.fail(f"argument {ui} is not a tensor")
            name = names[ui] if ui < len(names) else ph.name
            ui += 1
            user_inputs.append(name)
            const = False
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            name = spec.target
            tensor = (ep.state_dict.get(name) if spec.kind != InputKind.CONSTANT_TENSOR
                      else None)
            if tensor is None:
                tensor = ep.constants.get(name)
            if tensor is None:
                b.fail(f"no tensor for the module's '{name}'")
            params[name] = tensor
            const = True
        else:
            b.fail(f"an input of kind {spec.kind.name} (ktune graphs take tensors only)")
        dt = str(getattr(val, "dtype", "")).replace("torch.", "")
        if dt in _DTYPES:
            env[ph] = b.add_input(name, b.val_shape(ph), _DTYPES[dt], const)
        elif const:  # an error only where an op uses it (BatchNorm's step counter is int64)
            env[ph] = _Bad(f"the module's '{name}' is {dt}; ktune graphs compute in "
                           f"float32, float16 or bfloat16")
        else:
            b.fail(f"input '{name}' is {dt}; ktune graphs take float32, float16 or bfloat16")

    outputs = None
    for node in ep.graph.nodes:
        b.node = node
        if node.op == "placeholder":
            continue
        if node.op == "output":
            outs = node.args[0]
            outputs = [env.get(o) if isinstance(o, torch.fx.Node) else o for o in outs]
            continue
        if node.op != "call_function":
            b.unsupported(f"an fx {node.op} node")
        if node.target is operator.getitem:
            env[node] = _h_getitem(b, node, env)
            continue
        name = _op_name(node)
        packet = name[5:] if name.startswith("aten.") else name
        if packet in _SKIP:
            continue
        if isinstance(node.meta.get("val"), (torch.SymInt, torch.SymFloat, torch.SymBool)):
            env[node] = _Sym()  # a size computation: shapes are read from results instead
            continue
        if _is_state_update(b, node, env):
            continue
        handler = _OPS.get(packet) if name.startswith("aten.") else None
        if handler is None:
            b.unsupported()
        args = _args(node)
        args = {k: _lookup(env, v) for k, v in args.items()}
        bad = next((v for v in _flat(args.values()) if isinstance(v, _Bad)), None)
        if bad is not None:
            b.fail(f"{_op_name(node)} uses {bad.why}")
        env[node] = handler(b, args)

    b.node = None
    for i, o in enumerate(outputs or []):
        if not isinstance(o, _T):
            raise CaptureError(f"ktune.capture: output {i} is {type(o).__name__}, not a tensor "
                               f"ktune computes")
    if not outputs:
        raise CaptureError("ktune.capture: the module returns no tensor")
    inputs, nodes, out_names = b.finish(outputs, user_inputs)
    rename_back = {new: o.name for new, o in zip(out_names, outputs)}
    doc = {"name": options.get("name") or default_name, "inputs": inputs, "nodes": nodes,
           "outputs": out_names}
    try:
        g = Graph(doc)
    except KtuneError as e:  # name the user's line of the node the validator refused
        m = re.search(r"\(\S+ -> ([^)]+)\)", e.strerror)
        origin = b.origin.get(rename_back.get(m.group(1), m.group(1))) if m else None
        where = _where(origin) if origin is not None else ""
        raise CaptureError(f"ktune.capture: {e.strerror}{' at ' + where if where else ''}") \
            from None
    g.user_inputs = tuple(user_inputs)
    params.update(b.made)
    g.params = {k: v for k, v in params.items() if k in inputs}
    g.document = doc
    return g


def _flat(vals):
    for v in vals:
        if isinstance(v, (list, tuple)):
            yield from _flat(v)
        else:
            yield v


def _lookup(env, v):
    import torch
    if isinstance(v, torch.fx.Node):
        return env[v]
    if isinstance(v, (list, tuple)):
        return type(v)(_lookup(env, x) for x in v)
    return v
