"""A tuned kernel as a PyTorch custom op (torch.library): kernel.as_torch_op().

The op, ktune::<graph name>_<hash of the kernel's key>, takes the graph's inputs in declared
order and returns its outputs (a tuple for several). Its CUDA implementation launches the kernel
on the current stream, outputs and workspace from PyTorch's caching allocator and nothing that
synchronises the host, so it can be captured in a CUDA graph; its fake implementation returns
empty tensors of the outputs' shapes and dtypes, so torch.compile(fullgraph=True) traces through
it without a GPU kernel running. The kernel is for one shape: the fake checks the inputs' shapes,
dtypes and contiguity against the graph with its shapes bound, and a symbolic dimension is
pinned to the kernel's size (torch.compile then keeps a graph specialised to it).

The CUDA implementation is C++ (_torch_ext.cpp, built once per torch installation by
_torch_ext.py) where it can be built: the dispatcher then launches without entering Python.
Elsewhere it is the Python launch of a plain call (Kernel._launch_declared). The CPU
implementation is always the Python one: it raises the error naming the input not on CUDA.

Registration happens once per kernel and process: as_torch_op() on a kernel with the same key
(the same cached kernel, looked up again, or from a reopened cache) reuses the op registered,
which launches the newest such kernel whose Runtime is open. Either everything of an op is
registered or nothing is. No autograd."""

import hashlib
import keyword
import re
import threading
import weakref

from . import _torch_ext
from .runtime import bind_inputs, _TORCH_DTYPES

_ops = {}  # op name -> _Entry (a process-wide registry: torch.library's is too)
_lock = threading.RLock()  # reentrant: a Runtime collected inside register() closes
_NAME_MAX = 40  # characters of the graph name kept in the op name


def _ident(s, fallback):
    """s as an identifier torch's schema parser takes: [A-Za-z0-9_], not a leading digit, not a
    keyword."""
    s = re.sub(r"[^A-Za-z0-9_]", "_", s or "")
    if not s or s[0].isdigit() or keyword.iskeyword(s) or s.startswith("__"):
        s = f"{fallback}_{s}".rstrip("_") if s else fallback
    return s


def op_name(kernel):
    """The op's name in the ktune namespace: the graph's name, sanitised, and 12 hex digits of a
    hash of what identifies the kernel (graph signature, declared inputs and outputs with shapes
    bound, precision, device, cache, and the kernel's family, schedule and source)."""
    info = kernel.info
    key = repr((
        kernel.graph.signature, kernel.graph.name,
        tuple((d.name, d.dtype, d.shape, d.is_const) for d in kernel.input_descs),
        tuple((d.name, d.dtype, d.shape) for d in kernel.output_descs),
        tuple(sorted(kernel.shapes.items())), kernel.precision, kernel.device,
        getattr(kernel.runtime, "cache_dir", None), tuple(kernel._packed),
        getattr(info, "family", ""), getattr(info, "schedule", ""),
        hashlib.sha256((getattr(info, "source", "") or "").encode()).hexdigest(),
        getattr(info, "tolerance", None)))
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return f"{_ident(kernel.graph.name, 'graph')[:_NAME_MAX]}_{digest}"


def _schema_args(names):
    """Unique schema argument names for the declared input names."""
    out, seen = [], set()
    for i, n in enumerate(names):
        a = _ident(n, f"in{i}")
        while a in seen:
            a = f"{a}_{i}"
        seen.add(a)
        out.append(a)
    return out


def _torch():
    from .runtime import _torch as t
    return t()


class TorchOp:
    """A kernel registered as torch.ops.ktune.<name> (see the module docstring).

    op(*inputs, **named) takes the inputs as a Kernel call does (declared order, by name, or
    both); for a captured graph (ktune.capture) the parameters it remembers (graph.params) are
    filled in, moved to the kernel's device in the declared dtype and pre-packed once, here,
    when the kernel asks (they belong to this TorchOp: two captures with one structure share
    the op, not the weights). It calls the registered op, so it works inside
    torch.compile(fullgraph=True) and under CUDA graph capture. op.op is the torch OpOverload
    (torch.ops.ktune.<name>.default), which takes every input in declared order; op.name is
    "ktune::<name>"."""

    def __init__(self, kernel, entry):
        self.kernel = kernel
        self.name = f"ktune::{entry.name}"
        self.inputs, self.outputs = kernel.inputs, kernel.outputs
        self.op = entry.overload
        self.launcher = "python" if entry.launcher is None else "c++"  # of the CUDA kernel
        self._params = self._bind_params(kernel)

    @staticmethod
    def _bind_params(kernel):
        params = getattr(kernel.graph, "params", None) or {}
        if not params:
            return {}
        torch = _torch()
        dev = kernel.device
        if dev is None and torch.cuda.is_available():
            dev = torch.cuda.current_device()
        bound = {}
        for i, d in enumerate(kernel.input_descs):
            t = params.get(d.name)
            if t is None:
                continue
            dt = getattr(torch, _TORCH_DTYPES[d.dtype])
            t = t.detach() if t.requires_grad else t
            t = t.to(device=t.device if dev is None else f"cuda:{dev}", dtype=dt)
            t = t.contiguous()
            bound[d.name] = kernel.prepack(i, t) if kernel.prepack_size(i) else t
        return bound

    def __call__(self, *args, **named):
        if not named and len(args) == len(self.inputs):
            return self.op(*args)  # every input, in declared order: nothing to bind
        if self._params:
            for name, t in self._params.items():
                if name not in named and self.inputs.index(name) >= len(args):
                    named[name] = t
        return self.op(*bind_inputs(self.inputs, args, named))

    def __repr__(self):
        return f"<ktune.TorchOp {self.name} inputs={list(self.inputs)} " \
               f"outputs={list(self.outputs)}>"


def _fake_impl(torch, kernel):
    """The fake (meta) implementation: checks what it can of the inputs, returns empty outputs
    of the bound shapes and dtypes on the first input's device."""
    in_dt = [getattr(torch, _TORCH_DTYPES[d.dtype]) for d in kernel.input_descs]
    out = [(tuple(d.shape), getattr(torch, _TORCH_DTYPES[d.dtype])) for d in kernel.output_descs]
    packed = tuple(kernel._packed)
    descs = kernel.input_descs

    def fake(*ts):
        for i, (t, d) in enumerate(zip(ts, descs)):
            what = f"input {i} '{d.name}'"
            if packed[i]:
                if t.dtype != torch.uint8 or t.numel() != packed[i]:
                    raise ValueError(f"{what}: this kernel wants it pre-packed ({packed[i]} "
                                     f"bytes): pass kernel.prepack({d.name!r}, {d.name})")
                continue
            if t.dtype != in_dt[i]:
                raise ValueError(f"{what}: dtype is {t.dtype}, expected {in_dt[i]} ({d.dtype})")
            _check_shape(torch, what, t, d.shape, kernel)
            if not t.is_contiguous():
                raise ValueError(f"{what}: is not contiguous (call .contiguous())")
        dev = ts[0].device
        outs = tuple(torch.empty(s, dtype=dt, device=dev) for s, dt in out)
        return outs[0] if len(outs) == 1 else outs
    return fake


def _check_shape(torch, what, t, want, kernel):
    shape = t.shape
    msg = (f"{what}: shape is {list(shape)}, expected {list(want)} (the kernel is for "
           f"shapes {kernel._shape_text()})")
    if len(shape) != len(want):
        raise ValueError(msg)
    for have, w in zip(shape, want):
        if isinstance(have, torch.SymInt):
            # a dynamic dimension: pin it to the kernel's size (a guard), or fail
            torch._check(have == w, lambda: msg)
        elif have != w:
            raise ValueError(msg)


def _handles(kernel):
    """(kernel handle, runtime handle or None) as ints: which loaded kernel a Kernel is."""
    rt = kernel.runtime
    return kernel._k.value, (None if rt is None or rt._handle is None else rt._handle.value)


class _Entry:
    """One registered op: its library fragment, the OpOverload, the kernels (weak references,
    newest last) that can launch it, and the C++ launcher when it launches through that (bound
    to the kernel of runtime handle bound_runtime)."""

    def __init__(self, name, lib, overload, launcher):
        self.name, self.lib, self.overload, self.launcher = name, lib, overload, launcher
        self.kernels = []
        self.bound_runtime = None
        self.bound = None  # (kernel handle, runtime handle) the C++ launcher launches

    def add(self, kernel):
        self.kernels = [r for r in self.kernels if r() is not None and r() is not kernel]
        self.kernels.append(weakref.ref(kernel))
        self.newest = self.kernels[-1]
        if self.launcher is not None and self.bound != _handles(kernel):
            self._bind(kernel)

    def _bind(self, kernel):
        self.launcher.bind(self.name, kernel, kernel.device)
        self.bound = _handles(kernel)
        self.bound_runtime = self.bound[1]

    def runtime_closing(self, handle):
        """The runtime of handle (an int) is about to close: the C++ launcher moves to the
        newest kernel of another open runtime, or launches nothing (calls raise)."""
        if self.launcher is None or self.bound_runtime != handle:
            return
        for r in reversed(self.kernels):
            k = r()
            h = None if k is None or k.runtime is None else k.runtime._handle
            if h is not None and h.value != handle:
                self._bind(k)
                return
        self.launcher.unbind(self.name)
        self.bound_runtime = self.bound = None

    def destroy(self):
        """Undoes the registration: the C++ kernel, then the schema and the Python kernels."""
        if self.launcher is not None:
            self.launcher.drop(self.name)
        self.lib._destroy()

    def kernel(self):
        """The newest kernel whose runtime is open, else the newest alive (its launch says
        that its runtime is closed)."""
        k = self.newest()  # the usual case, first
        if k is not None and (k.runtime is None or k.runtime._handle is not None):
            return k
        alive = None
        for r in reversed(self.kernels):
            k = r()
            if k is None:
                continue
            if k.runtime is None or k.runtime._handle is not None:
                return k
            alive = alive or k
        if alive is None:
            raise ValueError(f"ktune::{self.name}: no kernel for this op is loaded any more "
                             "(look it up again and call as_torch_op())")
        return alive


def register(kernel):
    """kernel as a TorchOp (Kernel.as_torch_op; see the module docstring)."""
    torch = _torch()
    for d in list(kernel.input_descs) + list(kernel.output_descs):
        if d.dtype not in _TORCH_DTYPES:
            raise ValueError(f"'{d.name}': dtype {d.dtype} has no torch equivalent")
        if any(v is None for v in d.shape):
            raise ValueError(f"'{d.name}': shape {list(d.shape)} has an unbound dimension "
                             f"(shapes {kernel._shape_text()})")
    name = op_name(kernel)
    with _lock:
        entry = _ops.get(name)
        fresh = entry is None
        if fresh:
            entry = _define(torch, kernel, name)
        try:
            op = TorchOp(kernel, entry)  # binds the captured parameters
        except Exception:
            if fresh:
                entry.destroy()
            raise
        if fresh:
            _ops[name] = entry
        entry.add(kernel)  # launches go to this kernel from now on
        return op


def _define(torch, kernel, name):
    args = ", ".join(f"Tensor {a}" for a in _schema_args(kernel.inputs))
    n_out = len(kernel.outputs)
    ret = "Tensor" if n_out == 1 else "(" + ", ".join(["Tensor"] * n_out) + ")"
    lib = torch.library.Library("ktune", "FRAGMENT")
    entry = None
    # the C++ launcher needs the device the kernel was loaded on (known unless the lookup ran
    # without torch's current device)
    launcher = _torch_ext.launcher(torch) if kernel.device is not None else None

    def real(*ts):  # CPU (the checks name the input not on CUDA), and CUDA without launcher
        return entry.kernel()._launch_declared(ts)
    try:
        lib.define(f"{name}({args}) -> {ret}")
        entry = _Entry(name, lib, getattr(torch.ops.ktune, name).default, launcher)
        if launcher is not None:
            entry._bind(kernel)  # registers the C++ kernel for CUDA
        else:
            lib.impl(name, real, "CUDA")
        lib.impl(name, real, "CPU")
        torch.library.register_fake(f"ktune::{name}", _fake_impl(torch, kernel), lib=lib)
    except Exception:
        if launcher is not None:
            launcher.drop(name)
        lib._destroy()  # nothing registered half-way
        raise
    return entry


def runtime_closing(runtime):
    """Called by Runtime.close before its kernels go: no op's C++ launcher keeps one."""
    handle = runtime._handle
    if handle is None or not handle.value:
        return
    with _lock:
        for entry in _ops.values():
            entry.runtime_closing(handle.value)
