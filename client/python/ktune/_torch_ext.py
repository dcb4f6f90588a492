"""The C++ launcher of ktune's custom ops (_torch_ext.cpp): built once per torch installation,
loaded once per process, used by torch_op.py to bind each op to its kernel.

Why C++: an op whose CUDA implementation is a Python function costs the dispatcher's trip into
Python plus the Python body on every call (about 8 µs more than eager PyTorch on an H100
machine); a C++ kernel of the op is called by the dispatcher directly.

Built with the C++ compiler here ($CXX, else c++) against the headers and libraries of the
torch imported, into $KTUNE_TORCH_EXT_DIR (else $XDG_CACHE_HOME/ktune, else ~/.cache/ktune),
named by a hash of the source, the torch version and build, and the compiler, so that a torch
upgrade builds a fresh one. $KTUNE_TORCH_EXT: "0" never uses it (the ops launch through Python),
"1" always builds it, unset builds it only where torch sees a CUDA device. Where it cannot be
built or loaded, the ops launch through Python and one warning says why."""

import ctypes
import hashlib
import os
import subprocess
import sys
import threading
import warnings

from . import _lib
from ._lib import lib

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_torch_ext.cpp")
ABI = 1  # ktune_torch_ext_abi() of the source shipped alongside

_state = None  # None: not tried yet; False: not in use; else the _Launcher
_lock = threading.Lock()


class Unavailable(Exception):
    """Why the C++ launcher cannot be used here (one line)."""


def launcher(torch):
    """The loaded _Launcher, or None where the ops launch through Python (see the module
    docstring). Builds and loads at the first call of a process; never raises."""
    global _state
    if _state is None:
        with _lock:
            if _state is None:
                _state = _load(torch)
    return _state or None


def _load(torch):
    mode = os.environ.get("KTUNE_TORCH_EXT", "")
    if mode == "0":
        return False
    if mode != "1" and not torch.cuda.is_available():
        return False  # nothing to launch on: the Python path raises the device errors
    try:
        return _Launcher(torch, build(torch))
    except Unavailable as e:
        warnings.warn(f"ktune: custom ops launch through Python (several µs more per call): "
                      f"{e} (KTUNE_TORCH_EXT=0 silences this)", RuntimeWarning, stacklevel=3)
        return False


def _torch_dirs(torch):
    root = os.path.dirname(os.path.abspath(torch.__file__))
    return os.path.join(root, "include"), os.path.join(root, "lib")


def path_for(torch, cxx):
    """Where the build for this torch, compiler and source lives."""
    with open(SOURCE, "rb") as f:
        src = f.read()
    key = hashlib.sha256(b"\0".join([
        src, torch.__version__.encode(), str(torch.version.cuda).encode(),
        str(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", "")).encode(),
        os.path.abspath(torch.__file__).encode(), cxx.encode()])).hexdigest()[:16]
    base = os.environ.get("KTUNE_TORCH_EXT_DIR")
    if not base:
        cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        base = os.path.join(cache, "ktune")
    return os.path.join(base, f"torch_ext-{key}.so")


def build(torch):
    """The path of the built launcher, building it first when it is not there. Raises
    Unavailable naming what failed."""
    cxx = os.environ.get("CXX") or "c++"
    path = path_for(torch, cxx)
    if os.path.exists(path):
        return path
    include, libdir = _torch_dirs(torch)
    if not os.path.isdir(os.path.join(include, "torch")):
        raise Unavailable(f"torch has no C++ headers at {include}")
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
    except OSError as e:
        raise Unavailable(f"cannot create {os.path.dirname(path)}: {e.strerror}") from None
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    abi = int(bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True)))
    cmd = [cxx, "-O2", "-std=c++20", "-shared", "-fPIC", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
           f"-I{include}", SOURCE, "-o", tmp, f"-L{libdir}", f"-Wl,-rpath,{libdir}", "-lc10",
           "-ltorch_cpu"]
    print(f"ktune: building the C++ launcher of custom ops for torch {torch.__version__} "
          f"(once per torch installation; about a minute) into {path}", file=sys.stderr)
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    except FileNotFoundError:
        raise Unavailable(f"no C++ compiler '{cxx}' (set CXX)") from None
    except subprocess.TimeoutExpired:
        raise Unavailable(f"{cxx} took over 15 minutes building {SOURCE}") from None
    if r.returncode != 0:
        _remove(tmp)
        errors = [ln for ln in r.stderr.splitlines() if "error" in ln] or \
            r.stderr.strip().splitlines() or [f"exit status {r.returncode}"]
        raise Unavailable(f"{cxx} failed building {SOURCE}: {errors[0].strip()}")
    os.replace(tmp, path)  # atomic: a concurrent builder's copy is as good
    return path


def _remove(p):
    try:
        os.unlink(p)
    except OSError:
        pass


class _Launcher:
    """The loaded launcher: binds ops (defined already) to kernels."""

    def __init__(self, torch, path):
        try:
            torch.ops.load_library(path)  # runs its static registrations (none) in torch
            so = ctypes.CDLL(path)
        except (OSError, RuntimeError) as e:
            raise Unavailable(f"cannot load {path}: {str(e).splitlines()[0]}") from None
        C, P = ctypes, ctypes.POINTER
        so.ktune_torch_ext_abi.restype = C.c_int
        so.ktune_torch_ext_error_size.restype = C.c_size_t
        so.ktune_torch_ext_dtypes.argtypes = [P(C.c_int)]
        so.ktune_torch_ext_bind.restype = C.c_int
        so.ktune_torch_ext_bind.argtypes = [
            C.c_char_p, C.c_void_p, C.c_void_p, C.c_int,
            C.c_int, P(C.c_char_p), P(C.c_int), P(C.c_int), P(C.c_int64), P(C.c_int64),
            C.c_int, P(C.c_char_p), P(C.c_int), P(C.c_int), P(C.c_int64),
            C.c_uint64, C.c_char_p, C.c_char_p, C.c_size_t]
        so.ktune_torch_ext_unbind.argtypes = [C.c_char_p]
        so.ktune_torch_ext_drop.argtypes = [C.c_char_p]
        if so.ktune_torch_ext_abi() != ABI:
            raise Unavailable(f"{path} is not this ktune's launcher (ABI "
                              f"{so.ktune_torch_ext_abi()}, expected {ABI})")
        if so.ktune_torch_ext_error_size() != ctypes.sizeof(_lib.ktune_error):
            raise Unavailable(f"{path} disagrees with libktune on ktune_error's size")
        codes = (C.c_int * 4)()
        so.ktune_torch_ext_dtypes(codes)
        self._codes = {"f32": codes[0], "f16": codes[1], "bf16": codes[2]}
        self._uint8 = codes[3]
        self._so, self.path = so, path
        self._launch = ctypes.cast(lib.ktune_launch, C.c_void_p)

    def bind(self, name, kernel, device):
        """Binds op ktune::<name> to kernel on device: the first bind registers its CUDA kernel,
        a later one changes the kernel it launches."""
        C = ctypes
        ins, outs = kernel.input_descs, kernel.output_descs
        packed = [int(p) for p in kernel._packed]

        def arrays(descs):
            names = (C.c_char_p * len(descs))(*[d.name.encode() for d in descs])
            dtypes = (C.c_int * len(descs))(*[self._codes[d.dtype] for d in descs])
            ranks = (C.c_int * len(descs))(*[len(d.shape) for d in descs])
            flat = [int(v) for d in descs for v in d.shape]
            dims = (C.c_int64 * max(len(flat), 1))(*flat)
            return names, dtypes, ranks, dims
        err = C.create_string_buffer(512)
        rc = self._so.ktune_torch_ext_bind(
            name.encode(), kernel._k, self._launch, int(device),
            len(ins), *arrays(ins), (C.c_int64 * max(len(packed), 1))(*packed),
            len(outs), *arrays(outs), int(kernel.workspace_size),
            kernel._shape_text().encode(), err, len(err))
        if rc != 0:
            raise RuntimeError(f"ktune::{name}: binding the C++ launcher failed: "
                               f"{err.value.decode(errors='replace')}")

    def unbind(self, name):
        """Calls of ktune::<name> raise until a bind gives it a kernel again."""
        self._so.ktune_torch_ext_unbind(name.encode())

    def drop(self, name):
        """Removes ktune::<name>'s CUDA kernel registration."""
        self._so.ktune_torch_ext_drop(name.encode())
