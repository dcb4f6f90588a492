"""ctypes declarations of client/ktune.h and the loading of libktune.

Every struct here mirrors its C declaration field by field, in the same order and with the same
types (tests/test_abi.py compiles a C program against ktune.h and compares every offset). The
library is found at import time:

1. ``$KTUNE_LIBRARY``: a path to libktune.so (or to the folder holding it);
2. next to this package (a wheel or an install that ships the library inside ``ktune/``);
3. ``ctypes.util.find_library("ktune")`` (the system's library path, e.g. after ``meson install``).
"""

import ctypes
import ctypes.util
import errno
import os

from ._version import __version__

c_int, c_double, c_uint64, c_int64, c_bool = (ctypes.c_int, ctypes.c_double, ctypes.c_uint64,
                                              ctypes.c_int64, ctypes.c_bool)
c_char_p, c_void_p, c_size_t, c_uint = (ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t,
                                        ctypes.c_uint)

_LIB_NAMES = ("libktune.so", "libktune.so.2")


class ktune_error(ctypes.Structure):
    _fields_ = [("code", c_int), ("msg", ctypes.c_char * 512)]


class ktune_shape(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("value", c_int64)]


class ktune_tensor_desc(ctypes.Structure):
    _fields_ = [
        ("name", c_char_p),
        ("dtype", ctypes.c_char * 8),
        ("is_const", c_bool),
        ("rank", c_int),
        ("shape", c_int64 * 8),
    ]


class ktune_job_failure(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 16), ("count", c_int)]


class ktune_job(ctypes.Structure):
    _fields_ = [
        ("id", c_uint64),
        ("state", c_int),
        ("name", ctypes.c_char * 64),
        ("priority", c_int),
        ("gpu", c_int),
        ("signature", ctypes.c_char * 65),
        ("shapes", ctypes.c_char * 256),
        ("precision", ctypes.c_char * 16),
        ("budget_s", c_double),
        ("tolerance", c_double),
        ("submitted", c_int64),
        ("started", c_int64),
        ("finished", c_int64),
        ("phase", ctypes.c_char * 16),
        ("trials", c_int),
        ("measured", c_int),
        ("resumed", c_int),
        ("elapsed_s", c_double),
        ("best_ns", c_double),
        ("baseline_ns", c_double),
        ("err_norm", c_double),
        ("family", ctypes.c_char * 32),
        ("schedule", ctypes.c_char * 256),
        ("record", c_bool),
        ("error", ctypes.c_char * 256),
        ("n_failures", c_int),
        ("failures", ktune_job_failure * 8),
        ("compile_s", c_double),
        ("measure_s", c_double),
        ("owner", c_int64),
        ("floor_ns", c_double),
    ]


# ktune_submit2's flags (ktune.h)
SUBMIT_RETUNE = 1 << 0
SUBMIT_REMEASURE = 1 << 1


class ktune_submit_opts(ctypes.Structure):
    _fields_ = [
        ("precision", c_char_p),
        ("budget_s", c_double),
        ("tolerance", c_double),
        ("priority", c_int),
        ("gpu", c_int),
        ("name", c_char_p),
    ]


class ktune_gpu(ctypes.Structure):
    _fields_ = [
        ("index", c_int),
        ("name", ctypes.c_char * 128),
        ("sm_major", c_int),
        ("sm_minor", c_int),
        ("sm_count", c_int),
        ("mem_bytes", c_uint64),
        ("driver_version", c_int),
        ("cuda_version", c_int),
        ("state", ctypes.c_char * 16),
        ("job", c_uint64),
        ("restarts", c_int),
        ("error", ctypes.c_char * 256),
    ]


class ktune_stats(ctypes.Structure):
    _fields_ = [
        ("uptime_s", c_double),
        ("clients", c_int),
        ("requests", c_uint64),
        ("jobs", c_int * 5),
        ("gpus", c_int),
        ("rss_bytes", c_uint64),
        ("cache_path", ctypes.c_char * 256),
        ("cache_records", c_uint64),
        ("cache_keys", c_uint64),
        ("cache_trials", c_uint64),
        ("cache_map_size", c_uint64),
        ("cache_map_used", c_uint64),
    ]


class ktune_record_info(ctypes.Structure):
    _fields_ = [
        ("family", ctypes.c_char * 32),
        ("schedule", ctypes.c_char * 256),
        ("time_ns", c_double),
        ("p10_ns", c_double),
        ("p90_ns", c_double),
        ("err_norm", c_double),
        ("tolerance", c_double),
        ("cublaslt_ns", c_double),
        ("workspace_bytes", c_uint64),
        ("n_kernels", c_int),
        ("created", c_int64),
        ("gpu", ctypes.c_char * 128),
    ]


class ktune_kernel_info(ctypes.Structure):
    _fields_ = [
        ("match", c_int),
        ("family", c_char_p),
        ("schedule", c_char_p),
        ("source", c_char_p),
        ("time_ns", c_double),
        ("err_norm", c_double),
        ("tolerance", c_double),
        ("cublaslt_ns", c_double),
        ("workspace_bytes", c_uint64),
        ("n_launches", c_int),
        ("n_inputs", c_int),
        ("n_outputs", c_int),
        ("gpu", ctypes.c_char * 128),
        ("driver_version", c_int),
        ("cuda_version", c_int),
    ]


# Every struct of ktune.h, by its C name (tests/test_abi.py checks each against the header).
STRUCTS = {cls.__name__: cls for cls in (
    ktune_error, ktune_shape, ktune_tensor_desc, ktune_job, ktune_submit_opts, ktune_gpu,
    ktune_stats, ktune_record_info, ktune_kernel_info)}

WATCH_CB = ctypes.CFUNCTYPE(c_int, ctypes.POINTER(ktune_job), c_void_p)

_P = ctypes.POINTER
# name: (restype, argtypes); opaque handles are void pointers.
_PROTOTYPES = {
    "ktune_version": (c_char_p, []),
    "ktune_graph_load": (c_int, [c_char_p, _P(c_void_p), _P(ktune_error)]),
    "ktune_graph_parse": (c_int, [c_char_p, c_size_t, _P(c_void_p), _P(ktune_error)]),
    "ktune_graph_free": (None, [c_void_p]),
    "ktune_graph_name": (c_char_p, [c_void_p]),
    "ktune_graph_signature": (c_char_p, [c_void_p]),
    "ktune_graph_n_inputs": (c_int, [c_void_p]),
    "ktune_graph_n_outputs": (c_int, [c_void_p]),
    "ktune_graph_input_name": (c_char_p, [c_void_p, c_int]),
    "ktune_graph_output_name": (c_char_p, [c_void_p, c_int]),
    "ktune_graph_describe": (c_int, [c_void_p, _P(ktune_shape), c_int, _P(ktune_tensor_desc),
                                     _P(ktune_tensor_desc), _P(ktune_error)]),
    "ktune_graph_reference": (c_int, [c_void_p, _P(ktune_shape), c_int, _P(c_void_p),
                                      _P(c_void_p), _P(ktune_error)]),
    "ktune_default_socket": (c_char_p, []),
    "ktune_connect": (c_int, [c_char_p, _P(c_void_p), _P(ktune_error)]),
    "ktune_disconnect": (None, [c_void_p]),
    "ktune_client_set_timeout": (None, [c_void_p, c_double]),
    "ktune_job_state_name": (c_char_p, [c_int]),
    "ktune_submit": (c_int, [c_void_p, c_void_p, _P(ktune_shape), c_int, _P(ktune_submit_opts),
                             _P(ktune_job), _P(c_bool), _P(ktune_error)]),
    "ktune_submit2": (c_int, [c_void_p, c_void_p, _P(ktune_shape), c_int, _P(ktune_submit_opts),
                              ctypes.c_uint, _P(ktune_job), _P(c_bool), _P(ktune_error)]),
    "ktune_status": (c_int, [c_void_p, c_uint64, _P(ktune_job), _P(ktune_error)]),
    "ktune_cancel": (c_int, [c_void_p, c_uint64, _P(ktune_job), _P(ktune_error)]),
    "ktune_watch": (c_int, [c_void_p, c_uint64, WATCH_CB, c_void_p, _P(ktune_job),
                            _P(ktune_error)]),
    "ktune_jobs": (c_int, [c_void_p, c_uint, c_int, _P(_P(ktune_job)), _P(c_size_t),
                           _P(ktune_error)]),
    "ktune_gpus": (c_int, [c_void_p, _P(_P(ktune_gpu)), _P(c_size_t), _P(ctypes.c_char),
                           _P(ktune_error)]),
    "ktune_stats_get": (c_int, [c_void_p, _P(ktune_stats), _P(ktune_error)]),
    "ktune_lookup_remote": (c_int, [c_void_p, c_void_p, _P(ktune_shape), c_int, c_char_p, c_int,
                                    _P(c_bool), _P(ktune_record_info), _P(c_void_p),
                                    _P(ktune_error)]),
    "ktune_runtime_open": (c_int, [c_char_p, _P(c_void_p), _P(ktune_error)]),
    "ktune_runtime_close": (None, [c_void_p]),
    "ktune_lookup": (c_int, [c_void_p, c_void_p, _P(ktune_shape), c_int, c_char_p, c_int,
                             _P(c_void_p), _P(c_int), _P(ktune_error)]),
    "ktune_lookup_within": (c_int, [c_void_p, c_void_p, _P(ktune_shape), c_int, c_char_p,
                                    c_double, c_int, _P(c_void_p), _P(c_int), _P(ktune_error)]),
    "ktune_kernel_get_info": (None, [c_void_p, _P(ktune_kernel_info)]),
    "ktune_kernel_workspace_size": (c_uint64, [c_void_p]),
    "ktune_prepack_size": (c_uint64, [c_void_p, c_int]),
    "ktune_prepack": (c_int, [c_void_p, c_int, c_void_p, c_void_p, c_void_p, _P(ktune_error)]),
    "ktune_launch": (c_int, [c_void_p, _P(c_void_p), _P(c_void_p), c_void_p, c_void_p,
                             _P(ktune_error)]),
}


def _candidates():
    """(what was searched, paths to try) in lookup order."""
    searched, paths = [], []
    env = os.environ.get("KTUNE_LIBRARY")
    if env:
        searched.append(f"$KTUNE_LIBRARY={env}")
        if os.path.isdir(env):
            paths += [os.path.join(env, n) for n in _LIB_NAMES]
        else:
            paths.append(env)
        return searched, paths  # an explicit choice is never second-guessed
    here = os.path.dirname(os.path.abspath(__file__))
    searched.append(f"{here}/{{{','.join(_LIB_NAMES)}}}")
    paths += [os.path.join(here, n) for n in _LIB_NAMES if os.path.exists(os.path.join(here, n))]
    found = ctypes.util.find_library("ktune")
    searched.append(f"find_library('ktune') -> {found or 'nothing'}")
    if found:
        paths.append(found)
    return searched, paths


def _load():
    searched, paths = _candidates()
    errors = []
    for p in paths:
        try:
            lib = ctypes.CDLL(p)
        except OSError as e:
            errors.append(f"{p}: {e}")
            continue
        missing = [n for n in _PROTOTYPES if not hasattr(lib, n)]
        if missing:
            errors.append(f"{p}: lacks {', '.join(missing[:4])}"
                          f"{' and more' if len(missing) > 4 else ''} (an older libktune?)")
            continue
        for name, (res, args) in _PROTOTYPES.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
        return lib, p
    why = "; ".join(errors) if errors else "no candidate file exists"
    raise ImportError(
        f"ktune: cannot load libktune ({why}). Searched: {'; '.join(searched)}. "
        "Set KTUNE_LIBRARY to the path of libktune.so (e.g. build/client/libktune.so), or "
        "install ktune so that the dynamic linker finds it.")


lib, path = _load()

_lib_version = lib.ktune_version().decode()
if _lib_version.split(".")[:2] != __version__.split(".")[:2]:
    raise ImportError(f"ktune: {path} is libktune {_lib_version}, but this binding is "
                      f"{__version__}: the C structs may differ; use matching versions")


class KtuneError(OSError):
    """An error from libktune: errno (a positive errno number), code (the negative errno the C
    function returned) and the library's one-line message."""

    def __init__(self, code, msg):
        self.code = code
        super().__init__(-code if code < 0 else code, msg)

    def __str__(self):
        name = errno.errorcode.get(self.errno, str(self.errno))
        return f"{self.strerror} [{name}]"


_libc = ctypes.CDLL(None)
_libc.free.restype, _libc.free.argtypes = None, [c_void_p]


def free(p):
    """free() for what libktune malloc'd (job and GPU arrays, sources)."""
    _libc.free(ctypes.cast(p, c_void_p))


def check(rc, err, what=None):
    """Raises KtuneError for a negative rc, with the C message (or what, when it is empty)."""
    if rc >= 0:
        return rc
    msg = err.msg.decode(errors="replace") if err is not None else ""
    if not msg:
        msg = f"{what or 'libktune'}: {os.strerror(-rc)}"
    raise KtuneError(rc, msg)


def text(b):
    """A fixed char array or char pointer as str ('' for NULL)."""
    return b.decode(errors="replace") if b else ""


def encode(s):
    return None if s is None else str(s).encode()
