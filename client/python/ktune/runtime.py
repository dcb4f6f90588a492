"""The deploy-time runtime (ktune_runtime_open ... ktune_launch): look a tuned kernel up in a
cache, without the daemon, and launch it on PyTorch tensors.

torch is imported only by Kernel.__call__ and Kernel.prepack: opening a cache and looking kernels
up work without it."""

import ctypes
import errno
import sys
from dataclasses import dataclass
from types import SimpleNamespace as _Fast

from . import _lib
from ._lib import lib
from ._lib import KtuneError
from .graph import Graph, shapes_array, shapes_items

MATCHES = ("exact", "compatible")
_TORCH_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}


def _torch():
    try:
        import torch
    except ImportError as e:
        raise ImportError("ktune.Kernel needs PyTorch to launch on tensors (pip install torch); "
                          "lookups work without it") from e
    return torch


@dataclass(frozen=True)
class KernelInfo:
    match: str  # "exact": tuned on this GPU, driver and toolkit; "compatible": same GPU model
    family: str
    schedule: str
    source: str  # the CUDA C source
    time_ns: float
    err_norm: float
    tolerance: float
    cublaslt_ns: float
    workspace_bytes: int
    n_launches: int
    n_inputs: int
    n_outputs: int
    gpu: str
    driver_version: int
    cuda_version: int

    def __getitem__(self, key):
        """info["family"] as well as info.family."""
        if key not in self.__dataclass_fields__:
            raise KeyError(key)
        return getattr(self, key)


def _device_index(device):
    """None -> PyTorch's current device when torch is in use, else -1 (the library decides:
    the current context's device, else 0); int, "cuda:1" or torch.device -> its index."""
    if device is None:
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            return torch.cuda.current_device()
        return -1
    if isinstance(device, bool):
        raise TypeError("device: expected an index, 'cuda:N' or a torch.device, not a bool")
    if hasattr(device, "__index__"):
        return int(device)
    kind = getattr(device, "type", None)
    if kind is not None:  # torch.device
        if kind != "cuda":
            raise ValueError(f"device: {device} is not a CUDA device")
        return 0 if device.index is None else device.index
    if isinstance(device, str):
        if device == "cuda":
            return 0
        if device.startswith("cuda:") and device[5:].isdigit():
            return int(device[5:])
    raise ValueError(f"device: {device!r} is not a CUDA device index, 'cuda:N' or a "
                     "torch.device")


class Runtime:
    """A kernel cache opened read-only. cache_dir None: $KTUNE_CACHE, else
    /var/lib/ktune/cache. Needs only read access. Kernels from it are valid until close()."""

    def __init__(self, cache_dir=None):
        err, handle = _lib.ktune_error(), ctypes.c_void_p()
        self.cache_dir = cache_dir
        rc = lib.ktune_runtime_open(_lib.encode(cache_dir), ctypes.byref(handle),
                                    ctypes.byref(err))
        _lib.check(rc, err, f"ktune_runtime_open {cache_dir or '(default)'}")
        self._handle = handle
        self._kernels = {}  # ktune_kernel pointer -> _KernelFixed

    def _h(self):
        if self._handle is None:
            raise ValueError("ktune.Runtime: closed (its kernels are no longer valid)")
        return self._handle

    def close(self, _close=lib.ktune_runtime_close):
        """Unloads every module and closes the cache; every Kernel from here becomes invalid."""
        h = getattr(self, "_handle", None)
        if h is None or not h.value:
            self._handle = None
            return
        ops = getattr(sys, "modules", {}).get("ktune.torch_op")  # (at exit: maybe torn down)
        if ops is not None:  # no custom op may launch a kernel of this runtime from now on
            ops.runtime_closing(self)
        self._handle = None
        _close(h)

    __del__ = close

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def lookup(self, graph, shapes, precision="exact", device=None, tolerance=None):
        """The best verified kernel for (graph, shapes, precision) on a CUDA device, loaded.
        Only records verified within tolerance are served: None (the default) for the default
        of the graph's dtypes and precision, else the tolerance a tuning job was given. Raises
        KtuneError: ENOENT when nothing is cached for that key, ENODEV without a driver or
        device. Repeated lookups are served from memory (keep the Kernel for the hot path: a
        lookup costs tens of microseconds, a launch a few)."""
        g = graph if isinstance(graph, Graph) else Graph(graph)
        items = shapes_items(shapes)
        arr, n = shapes_array(items)
        dev = _device_index(device)
        k, match, err = ctypes.c_void_p(), ctypes.c_int(), _lib.ktune_error()
        tol = 0.0 if tolerance is None else float(tolerance)
        rc = lib.ktune_lookup_within(self._h(), g.handle, arr, n, _lib.encode(precision), tol, dev,
                                     ctypes.byref(k), ctypes.byref(match), ctypes.byref(err))
        _lib.check(rc, err, "ktune_lookup")
        fixed = self._kernels.get(k.value)
        if fixed is None:  # what the C kernel says about itself, once per loaded kernel
            fixed = self._kernels[k.value] = _KernelFixed(k)
        return Kernel(self, k, g, items, precision, None if dev < 0 else dev, fixed)

    def __repr__(self):
        return f"<ktune.Runtime {self.cache_dir or '(default cache)'}>"


class _KernelFixed:
    """The parts of a loaded kernel that never change: info, workspace and prepack sizes."""

    def __init__(self, k):
        info = _lib.ktune_kernel_info()
        lib.ktune_kernel_get_info(k, ctypes.byref(info))
        self.info = KernelInfo(
            match=MATCHES[info.match] if 0 <= info.match < len(MATCHES) else str(info.match),
            family=_lib.text(info.family), schedule=_lib.text(info.schedule),
            source=_lib.text(info.source), time_ns=info.time_ns, err_norm=info.err_norm,
            tolerance=info.tolerance, cublaslt_ns=info.cublaslt_ns,
            workspace_bytes=int(info.workspace_bytes), n_launches=info.n_launches,
            n_inputs=info.n_inputs, n_outputs=info.n_outputs, gpu=_lib.text(info.gpu),
            driver_version=info.driver_version, cuda_version=info.cuda_version)
        self.workspace_size = int(lib.ktune_kernel_workspace_size(k))
        self.packed = tuple(int(lib.ktune_prepack_size(k, i)) for i in range(info.n_inputs))


def _raw_stream_getter(torch):
    """device -> the current CUstream of that device as an int, the cheapest way torch has."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw
    return lambda device: torch.cuda.current_stream(device).cuda_stream


def bind_inputs(names, args, named):
    """The tensors of a call in declared order: args by position (declared order), named by
    input name, not both for one input. A missing, unknown or doubly given input raises a
    TypeError naming it."""
    n = len(names)
    if len(args) > n:
        raise TypeError(f"kernel takes {n} inputs ({', '.join(names)}), got {len(args)} "
                        "positional")
    if not named:
        if len(args) < n:
            missing = ", ".join(repr(x) for x in names[len(args):])
            raise TypeError(f"missing input {missing} (inputs in declared order: "
                            f"{', '.join(names)})")
        return list(args)
    bound = list(args) + [None] * (n - len(args))
    index = {name: i for i, name in enumerate(names)}
    for name, t in named.items():
        i = index.get(name)
        if i is None:
            raise TypeError(f"unexpected input {name!r} (inputs: {', '.join(names)})")
        if i < len(args):
            raise TypeError(f"input {name!r} given both by position ({i}) and by name")
        bound[i] = t
    missing = [names[i] for i in range(len(args), n) if names[i] not in named]
    if missing:
        raise TypeError(f"missing input {', '.join(repr(x) for x in missing)} (inputs in "
                        f"declared order: {', '.join(names)})")
    return bound


class Kernel:
    """A tuned kernel loaded on one device (owned by its Runtime).

    kernel(*inputs, out=None, workspace=None, stream=None, **named) launches it on CUDA tensors
    given in the graph's declared input order (the order of the graph file's "inputs":
    kernel.inputs, graph.inputs) or by name (kernel(x=..., w=..., bias=...)), or both (leading
    ones by position, the rest by name; not one input both ways), and returns the output tensor
    (a tuple when the graph has several outputs, in declared order: kernel.outputs). The order
    the cached kernel takes its arguments in is ktune's business, mapped at lookup. A missing,
    unknown or doubly given input raises a TypeError naming it; each tensor's device, dtype,
    shape and contiguity are checked against the graph with its shapes bound (a ValueError, a
    TypeError for a non-tensor, names the input as declared) before anything is allocated or
    launched. An input named out, workspace or stream can only be passed by position. Outputs
    and workspace are allocated with torch unless given; the launch goes on
    torch.cuda.current_stream() unless stream (a torch.cuda.Stream or a CUstream handle) is
    given. An output must not overlap an input, another output or the workspace (the kernels
    assume their buffers do not alias): ktune_launch refuses that with a KtuneError (EINVAL)
    naming both. Like any kernel launch it is asynchronous. No autograd."""

    def __init__(self, runtime, handle, graph, shapes, precision, device, fixed):
        self.runtime, self._k, self.graph = runtime, handle, graph
        self.precision, self.device = precision, device
        self.shapes = dict(shapes)
        # declared order, shapes bound: TensorDesc of each input and output
        self.input_descs, self.output_descs = graph.describe(shapes)
        self.inputs = tuple(d.name for d in self.input_descs)  # declared names
        self.outputs = tuple(d.name for d in self.output_descs)
        self.info, self.match = fixed.info, fixed.info.match
        self.workspace_size = fixed.workspace_size
        self._packed = fixed.packed
        if len(self._packed) != len(self.inputs) or self.info.n_outputs != len(self.outputs):
            raise KtuneError(-errno.EPROTO, f"kernel for {graph.name!r} takes "
                             f"{len(self._packed)} inputs and {self.info.n_outputs} outputs, "
                             f"the graph has {len(self.inputs)} and {len(self.outputs)}")
        self._t = None  # per-tensor torch dtypes, filled at the first call
        self._fast = None  # _Fast, filled at the first call

    def _h(self):
        self.runtime._h()  # raises once the runtime is closed
        return self._k

    def prepack_size(self, i):
        """Bytes of the packed form of input i (declared index or name; 0: pass the tensor as it
        is)."""
        return self._packed[self._input_index(i)]

    def _input_index(self, i):
        if isinstance(i, str):
            if i not in self.inputs:
                raise ValueError(f"no input named {i!r} (inputs: {', '.join(self.inputs)})")
            return self.inputs.index(i)
        if not 0 <= int(i) < len(self.inputs):
            raise IndexError(f"input {i} out of range (the graph has {len(self.inputs)})")
        return int(i)

    # ---- launching (PyTorch) ----

    def _torch_state(self):
        if self._t is None:
            torch = _torch()
            dt = lambda d: getattr(torch, _TORCH_DTYPES[d.dtype])  # noqa: E731
            self._t = (torch, [dt(d) for d in self.input_descs],
                       [dt(d) for d in self.output_descs], _raw_stream_getter(torch))
        return self._t

    def _check(self, torch, what, t, desc, want, device):
        """Checks one tensor against its TensorDesc; returns its device index."""
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{what} '{desc.name}': expected a torch.Tensor, got "
                            f"{type(t).__name__}")
        if not t.is_cuda:
            raise ValueError(f"{what} '{desc.name}': is on {t.device}, not on a CUDA device")
        index = t.device.index
        if device is not None and index != device:
            raise ValueError(f"{what} '{desc.name}': is on {t.device}, but this kernel runs "
                             f"on cuda:{device}")
        if t.dtype != want:
            raise ValueError(f"{what} '{desc.name}': dtype is {t.dtype}, expected {want} "
                             f"({desc.dtype})")
        if t.shape != desc.shape:
            raise ValueError(f"{what} '{desc.name}': shape is {list(t.shape)}, expected "
                             f"{list(desc.shape)} (shapes {self._shape_text()})")
        if not t.is_contiguous():
            raise ValueError(f"{what} '{desc.name}': is not contiguous (call .contiguous())")
        return index

    def _shape_text(self):
        return ", ".join(f"{k}={v}" for k, v in self.shapes.items()) or "none"

    def _stream(self, torch, stream, device, raw_stream):
        """(CUstream as int, torch stream object or None when it is the current one)."""
        if stream is None:
            return raw_stream(device), None
        if isinstance(stream, torch.cuda.Stream):
            return stream.cuda_stream, stream
        if hasattr(stream, "__index__"):
            return int(stream), torch.cuda.ExternalStream(int(stream), device=device)
        raise TypeError(f"stream: expected a torch.cuda.Stream or a CUstream handle (int), "
                        f"not {type(stream).__name__}")

    def __call__(self, *args, out=None, workspace=None, stream=None, **named):
        inputs = bind_inputs(self.inputs, args, named)  # declared order
        if stream is None:
            return self._launch_declared(inputs, out, workspace)
        return self._call(inputs, out, workspace, stream)

    def as_torch_op(self):
        """This kernel as a PyTorch custom op, torch.ops.ktune.<graph name>_<hash>, registered
        once per kernel and process: a ktune.torch_op.TorchOp, called like the kernel (declared
        order or names) and usable inside torch.compile(fullgraph=True) and CUDA graph capture.
        See ktune/torch_op.py."""
        op = getattr(self, "_torch_op", None)
        if op is None:
            from .torch_op import register
            op = self._torch_op = register(self)
        return op

    def _fast_state(self):
        """What a launch on the current stream needs, computed once: each input's and output's
        expected dtype and shape. False where the quick path does not apply (the device was not
        known at lookup)."""
        if self.device is None:
            return False
        torch, in_dt, out_dt, raw_stream = self._torch_state()
        return _Fast(
            device=self.device, torch_device=torch.device("cuda", self.device),
            checks=tuple((torch.uint8, (p,)) if p else (dt, tuple(d.shape))
                         for p, dt, d in zip(self._packed, in_dt, self.input_descs)),
            outs=tuple((dt, tuple(d.shape)) for d, dt in zip(self.output_descs, out_dt)),
            in_type=ctypes.c_void_p * len(self.inputs),
            out_type=ctypes.c_void_p * len(self.outputs), empty=torch.empty,
            tensor=torch.Tensor, uint8=torch.uint8, raw_stream=raw_stream)

    def _launch_declared(self, inputs, out=None, workspace=None):
        """A launch on inputs (declared order) on the current stream, into out or fresh outputs:
        the hot path of a plain call and of the custom op (nothing here synchronises the host;
        outputs and workspace come from PyTorch's caching allocator, so CUDA graph capture
        works). Tensors the quick checks do not accept take the full path (_call), whose checks
        name what is wrong."""
        f = self._fast
        if f is None:
            f = self._fast = self._fast_state()
        rt = self.runtime
        if not f or len(inputs) != len(f.checks) or rt is None or rt._handle is None:
            return self._call(inputs, out, workspace, None)  # _call raises when rt is closed
        dev = f.device
        try:
            for t, (dt, shape) in zip(inputs, f.checks):
                if not (t.dtype is dt and t.shape == shape and t.get_device() == dev
                        and t.is_contiguous()):
                    return self._call(inputs, out, workspace, None)
            if out is not None:
                outs = [out] if isinstance(out, f.tensor) else list(out)
                if len(outs) != len(f.outs):
                    return self._call(inputs, out, workspace, None)
                for t, (dt, shape) in zip(outs, f.outs):
                    if not (t.dtype is dt and t.shape == shape and t.get_device() == dev
                            and t.is_contiguous()):
                        return self._call(inputs, out, workspace, None)
            ws = None
            if self.workspace_size:
                if workspace is None:
                    # alive until the launch is enqueued; then the allocator may hand it out
                    # again, ordered on this stream
                    ws = f.empty(self.workspace_size, dtype=f.uint8, device=f.torch_device)
                elif (workspace.get_device() == dev and workspace.is_contiguous() and
                      workspace.numel() * workspace.element_size() >= self.workspace_size):
                    ws = workspace
                else:
                    return self._call(inputs, out, workspace, None)
        except (AttributeError, TypeError):  # not a tensor
            return self._call(inputs, out, workspace, None)
        if out is None:
            empty, tdev = f.empty, f.torch_device
            outs = [empty(shape, dtype=dt, device=tdev) for dt, shape in f.outs]
        err = _lib.ktune_error()
        rc = lib.ktune_launch(self._k, f.in_type(*[t.data_ptr() for t in inputs]),
                              f.out_type(*[t.data_ptr() for t in outs]),
                              None if ws is None else ws.data_ptr(), f.raw_stream(dev),
                              ctypes.byref(err))
        if rc:
            _lib.check(rc, err, "ktune_launch")
        if out is not None:
            return out
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _call(self, inputs, out, workspace, stream):
        """A launch with everything checked (inputs in declared order)."""
        torch, in_dt, out_dt, raw_stream = self._torch_state()
        n_in = len(self.inputs)
        device = self.device
        for i in range(n_in):
            if self._packed[i]:
                device = self._check_packed(torch, inputs[i], i, device)
            else:
                device = self._check(torch, f"input {i}", inputs[i], self.input_descs[i],
                                     in_dt[i], device)
        if out is not None:
            outs = [out] if isinstance(out, torch.Tensor) else list(out)
            if len(outs) != len(self.outputs):
                raise TypeError(f"out: the kernel has {len(self.outputs)} outputs "
                                f"({', '.join(self.outputs)}), got {len(outs)}")
            for i, t in enumerate(outs):
                self._check(torch, f"output {i}", t, self.output_descs[i], out_dt[i], device)
        if workspace is not None:
            self._workspace(torch, workspace, device)  # checked before anything is allocated
        s, s_obj = self._stream(torch, stream, device, raw_stream)
        allocated = []
        if out is None:
            outs = [torch.empty(d.shape, dtype=dt, device=inputs[0].device)
                    for d, dt in zip(self.output_descs, out_dt)]
            allocated += outs
        ws = self._workspace(torch, workspace, device)
        if ws is not None and workspace is None:
            allocated.append(ws)
        in_arr = (ctypes.c_void_p * n_in)(*[t.data_ptr() for t in inputs])
        out_arr = (ctypes.c_void_p * len(outs))(*[t.data_ptr() for t in outs])
        err = _lib.ktune_error()
        rc = lib.ktune_launch(self._h(), in_arr, out_arr,
                              ws.data_ptr() if ws is not None else None, s, ctypes.byref(err))
        _lib.check(rc, err, "ktune_launch")
        if s_obj is not None and allocated and s_obj != torch.cuda.current_stream(device):
            # Memory allocated here on the current stream is used on s: keep the caching
            # allocator from reusing it before s gets there.
            for t in allocated:
                t.record_stream(s_obj)
        if out is not None:
            return out
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _check_packed(self, torch, t, i, device):
        name = self.inputs[i]
        if (not isinstance(t, torch.Tensor) or t.dtype != torch.uint8
                or t.numel() != self._packed[i] or not t.is_cuda or not t.is_contiguous()):
            raise ValueError(f"input {i} '{name}': this kernel wants it pre-packed "
                             f"({self._packed[i]} bytes): pass kernel.prepack({name!r}, {name})")
        if device is not None and t.device.index != device:
            raise ValueError(f"input {i} '{name}': is on {t.device}, but this kernel runs on "
                             f"cuda:{device}")
        return t.device.index

    def _workspace(self, torch, workspace, device):
        if self.workspace_size == 0:
            return None
        if workspace is None:
            return torch.empty(self.workspace_size, dtype=torch.uint8, device=f"cuda:{device}")
        if (not isinstance(workspace, torch.Tensor) or not workspace.is_cuda
                or workspace.device.index != device or not workspace.is_contiguous()):
            raise ValueError(f"workspace: expected a contiguous tensor on cuda:{device}")
        have = workspace.numel() * workspace.element_size()
        if have < self.workspace_size:
            raise ValueError(f"workspace: {have} bytes, the kernel needs {self.workspace_size}")
        return workspace

    def prepack(self, i, tensor, stream=None):
        """The packed form of const input i (index or name) as a uint8 CUDA tensor: pack once at
        load time and pass the result as that input to every call."""
        torch, in_dt, _, raw_stream = self._torch_state()
        i = self._input_index(i)
        device = self._check(torch, f"input {i}", tensor, self.input_descs[i], in_dt[i],
                             self.device)
        s, s_obj = self._stream(torch, stream, device, raw_stream)
        dst = torch.empty(max(self._packed[i], 1), dtype=torch.uint8,
                          device=tensor.device)[:self._packed[i]]
        err = _lib.ktune_error()
        rc = lib.ktune_prepack(self._h(), i, tensor.data_ptr(), dst.data_ptr(), s,
                               ctypes.byref(err))
        _lib.check(rc, err, "ktune_prepack")
        if s_obj is not None and s_obj != torch.cuda.current_stream(device):
            dst.record_stream(s_obj)
        return dst

    def __repr__(self):
        return (f"<ktune.Kernel {self.graph.name!r} {self.info.family} {self.match} "
                f"{self.info.time_ns / 1000:.2f} us on {self.info.gpu or '?'}>")
