"""ktune: Python binding of libktune (client/ktune.h), through ctypes.

- Graph: an op graph (JSON file, JSON text or dict), its name, signature, inputs and outputs.
- Client: talks to the ktuned daemon: submit, status, wait, cancel, jobs, gpus, stats, lookup.
- Runtime: opens a kernel cache read-only (no daemon needed), looks kernels up and launches them
  on PyTorch tensors (torch is imported only to launch).
- capture: a Graph from a PyTorch module or function (torch.export); Graph.reference runs the
  fp64 CPU reference on tensors.
- KtuneError: every error from the C library (an OSError with errno set).

The library is found through $KTUNE_LIBRARY, next to this package, or the system's library path.
"""

from ._lib import KtuneError, path as library_path
from ._version import __version__
from .capture import CaptureError, capture
from .client import Client, Gpu, GpuList, Job, RecordInfo, Stats, JOB_STATES
from .graph import Graph, TensorDesc
from .runtime import Kernel, KernelInfo, Runtime


def library_version():
    """The loaded libktune's version string."""
    from ._lib import lib
    return lib.ktune_version().decode()


def default_socket():
    """The socket path used when none is given: $KTUNE_SOCKET, else /run/ktune/ktuned.sock."""
    from ._lib import lib
    return lib.ktune_default_socket().decode()


__all__ = ["CaptureError", "Client", "Gpu", "GpuList", "Graph", "Job", "JOB_STATES", "Kernel",
           "KernelInfo", "KtuneError", "RecordInfo", "Runtime", "Stats", "TensorDesc",
           "__version__", "capture", "default_socket", "library_path", "library_version"]
