"""The client of ktuned (ktune_connect ... ktune_lookup_remote): submit tuning jobs, follow them,
cancel them, query the daemon. Protocol: docs/protocol.md."""

import ctypes
from dataclasses import dataclass, field

from . import _lib
from ._lib import lib
from .graph import Graph, shapes_array

JOB_STATES = ("queued", "running", "done", "failed", "cancelled")
_ENDED = frozenset(("done", "failed", "cancelled"))
_PRECISIONS = ("exact", "tf32", "reduced")


def _opt(v):
    """The C side's 0 ("none yet") as None."""
    return v if v else None


def _parse_shapes(s):
    out = {}
    for part in filter(None, s.split(";")):
        name, _, value = part.partition("=")
        try:
            out[name] = int(value)
        except ValueError:
            out[name] = value
    return out


def _seconds(v, what):
    """90, 90.5, "90", "90s", "2m", "1h" -> seconds."""
    if isinstance(v, bool):
        raise TypeError(f"{what}: expected seconds, not a bool")
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        units = {"s": 1, "m": 60, "min": 60, "h": 3600}
        s = v.strip()
        for suffix in ("min", "s", "m", "h"):
            if s.endswith(suffix):
                try:
                    return float(s[:-len(suffix)]) * units[suffix]
                except ValueError:
                    break
        try:
            return float(s)
        except ValueError:
            pass
    raise ValueError(f"{what}: {v!r} is not a duration (90, '90s', '2m', '1h')")


@dataclass(frozen=True)
class Job:
    """A job as the daemon reports it (docs/protocol.md, "Job"). Times in unix seconds (None: not
    yet); best_ns, baseline_ns, err_norm None until there is one."""
    id: int
    state: str
    name: str
    priority: int
    gpu: object  # int, or None while not placed
    signature: str
    shapes: dict
    precision: str
    budget_s: float
    tolerance: float
    submitted: object
    started: object
    finished: object
    phase: str
    trials: int
    measured: int
    resumed: int
    elapsed_s: float
    best_ns: object
    baseline_ns: object
    err_norm: object
    family: str
    schedule: str
    record: bool
    error: str
    joined: bool = False  # from submit: an identical job existed and this submission joined it
    failures: dict = field(default_factory=dict)  # class -> count of rejected candidates
    compile_s: float = 0.0  # NVRTC seconds, summed over the compile pool
    measure_s: float = 0.0  # seconds measuring on the GPU
    owner: object = None  # the uid that submitted it (None: the daemon did not say)
    # the roofline floor of its graph on its GPU (docs/search.md, "Roofline"); None: not known
    floor_ns: object = None

    @property
    def ended(self):
        """True once done, failed or cancelled."""
        return self.state in _ENDED

    @property
    def speedup(self):
        """baseline_ns / best_ns, or None."""
        return self.baseline_ns / self.best_ns if self.best_ns and self.baseline_ns else None

    @property
    def roofline_fraction(self):
        """floor_ns / best_ns: how close the best kernel is to the limit (1.0), or None."""
        return self.floor_ns / self.best_ns if self.best_ns and self.floor_ns else None

    @classmethod
    def _from_c(cls, j, joined=False):
        state = _lib.text(lib.ktune_job_state_name(j.state))
        return cls(
            id=int(j.id), state=state, name=_lib.text(j.name), priority=j.priority,
            gpu=None if j.gpu < 0 else j.gpu, signature=_lib.text(j.signature),
            shapes=_parse_shapes(_lib.text(j.shapes)), precision=_lib.text(j.precision),
            budget_s=j.budget_s, tolerance=j.tolerance, submitted=_opt(j.submitted),
            started=_opt(j.started), finished=_opt(j.finished), phase=_lib.text(j.phase),
            trials=j.trials, measured=j.measured, resumed=j.resumed, elapsed_s=j.elapsed_s,
            best_ns=_opt(j.best_ns), baseline_ns=_opt(j.baseline_ns), err_norm=_opt(j.err_norm),
            family=_lib.text(j.family), schedule=_lib.text(j.schedule), record=bool(j.record),
            error=_lib.text(j.error), joined=bool(joined),
            failures={_lib.text(f.name): f.count for f in j.failures[:j.n_failures]},
            compile_s=j.compile_s, measure_s=j.measure_s,
            owner=None if j.owner < 0 else int(j.owner), floor_ns=_opt(j.floor_ns))


@dataclass(frozen=True)
class Gpu:
    """One of the daemon's GPUs."""
    index: int
    name: str
    sm: str  # "9.0"
    sm_count: int
    mem_bytes: int
    driver_version: int
    cuda_version: int
    state: str  # "idle", "busy", "down"
    job: object  # the running job's id, or None
    restarts: int
    error: str

    @classmethod
    def _from_c(cls, g):
        return cls(index=g.index, name=_lib.text(g.name), sm=f"{g.sm_major}.{g.sm_minor}",
                   sm_count=g.sm_count, mem_bytes=int(g.mem_bytes),
                   driver_version=g.driver_version, cuda_version=g.cuda_version,
                   state=_lib.text(g.state), job=_opt(int(g.job)), restarts=g.restarts,
                   error=_lib.text(g.error))


class GpuList(list):
    """A list of Gpu; when empty, note says why (the daemon's one line)."""

    def __init__(self, gpus, note=""):
        super().__init__(gpus)
        self.note = note


@dataclass(frozen=True)
class Stats:
    uptime_s: float
    clients: int
    requests: int
    jobs: dict  # state -> count
    gpus: int
    rss_bytes: int
    cache: dict = field(default_factory=dict)  # path, records, keys, trials, map_size, map_used


@dataclass(frozen=True)
class RecordInfo:
    """The cached winner's summary, through the daemon (Client.lookup)."""
    family: str
    schedule: str
    time_ns: float
    p10_ns: float
    p90_ns: float
    err_norm: float
    tolerance: float
    cublaslt_ns: float
    workspace_bytes: int
    n_kernels: int
    created: int
    gpu: str
    source: object = None  # the CUDA source when asked for


def _job_id(job):
    if isinstance(job, Job):
        return job.id
    if isinstance(job, bool) or not hasattr(job, "__index__") or int(job) <= 0:
        raise TypeError(f"expected a Job or a positive job id, not {job!r}")
    return int(job)


def _as_graph(graph):
    return graph if isinstance(graph, Graph) else Graph(graph)


class Client:
    """A connection to ktuned. socket: the socket path (None: $KTUNE_SOCKET, else
    /run/ktune/ktuned.sock). timeout: seconds to wait for each reply (None: the library's
    default, 30 s). Calls from several threads serialise on the connection.

    Errors raise KtuneError (an OSError): ENOENT/ECONNREFUSED when no daemon listens, EACCES when
    the socket refuses this user (join group ktune), EUSERS when ktuned refused the connection
    (too many connections), EPERM as root for a socket not owned and served by root or the
    service user (docs/operations.md, "The socket"), ENODEV when the daemon has no GPU. ktuned
    closes a connection left idle (no watch) for its idle-timeout (300 s by default); the
    library connects again by itself before the next call."""

    def __init__(self, socket=None, timeout=None):
        self.socket = socket if socket is not None else _lib.text(lib.ktune_default_socket())
        err = _lib.ktune_error()
        handle = ctypes.c_void_p()
        rc = lib.ktune_connect(_lib.encode(self.socket), ctypes.byref(handle), ctypes.byref(err))
        _lib.check(rc, err, f"ktune_connect {self.socket}")
        self._handle = handle
        if timeout is not None:
            lib.ktune_client_set_timeout(self._handle, float(timeout))

    def _h(self):
        if self._handle is None:
            raise ValueError("ktune.Client: the connection is closed")
        return self._handle

    def close(self, _disconnect=lib.ktune_disconnect):
        h, self._handle = getattr(self, "_handle", None), None
        if h is not None and h.value:
            _disconnect(h)

    __del__ = close

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def set_timeout(self, seconds):
        lib.ktune_client_set_timeout(self._h(), float(seconds))

    def submit(self, graph, shapes, precision="exact", budget=60, priority=0, gpu=None,
               tolerance=None, name=None, retune=False, remeasure=False):
        """Submits a tuning job; returns its Job (joined=True when it joined an identical one).
        graph: a Graph, a path or JSON text; shapes: {"M": 1024}; budget: seconds or "2m";
        priority: -100..100 (higher first); gpu: an index, None for any. retune: a new job even
        when an identical one is done (its trial log is read back: only candidates not measured
        before are measured); remeasure: a retune that measures everything again."""
        g = _as_graph(graph)
        if precision not in _PRECISIONS:
            raise ValueError(f"submit: precision must be one of {', '.join(_PRECISIONS)}, "
                             f"not {precision!r}")
        arr, n = shapes_array(shapes)
        opts = _lib.ktune_submit_opts(
            precision=_lib.encode(precision), budget_s=_seconds(budget, "submit: budget"),
            tolerance=float(tolerance or 0.0), priority=int(priority),
            gpu=-1 if gpu is None else int(gpu), name=_lib.encode(name))
        out, joined, err = _lib.ktune_job(), ctypes.c_bool(), _lib.ktune_error()
        flags = (_lib.SUBMIT_RETUNE if retune else 0) | (_lib.SUBMIT_REMEASURE if remeasure else 0)
        rc = lib.ktune_submit2(self._h(), g.handle, arr, n, ctypes.byref(opts), flags,
                               ctypes.byref(out), ctypes.byref(joined), ctypes.byref(err))
        _lib.check(rc, err, "submit")
        return Job._from_c(out, joined.value)

    def status(self, job):
        out, err = _lib.ktune_job(), _lib.ktune_error()
        rc = lib.ktune_status(self._h(), _job_id(job), ctypes.byref(out), ctypes.byref(err))
        _lib.check(rc, err, "status")
        return Job._from_c(out)

    def cancel(self, job):
        """Cancels a job: a queued one at once, a running one after its candidate in flight.
        Returns the Job as the daemon reports it now. Cancelling a finished job is EINVAL."""
        out, err = _lib.ktune_job(), _lib.ktune_error()
        rc = lib.ktune_cancel(self._h(), _job_id(job), ctypes.byref(out), ctypes.byref(err))
        _lib.check(rc, err, "cancel")
        return Job._from_c(out)

    def wait(self, job, progress=None):
        """Follows a job until it is done, failed or cancelled and returns its final Job.
        progress(job) is called with the job at once, at each progress event (at most 4 a
        second while it runs) and at the end. An exception raised by progress (Ctrl-C included)
        stops the wait and propagates; the job goes on. progress runs while this connection is
        busy: calls on this Client from inside it fail (EDEADLK); use another Client there."""
        raised = []

        def cb(jp, _ctx):
            if progress is None:
                return 0
            try:
                progress(Job._from_c(jp.contents))
                return 0
            except BaseException as e:  # noqa: B902 - re-raised below, after the C call returns
                raised.append(e)
                return 1

        c_cb = _lib.WATCH_CB(cb)
        final, err = _lib.ktune_job(), _lib.ktune_error()
        rc = lib.ktune_watch(self._h(), _job_id(job), c_cb, None, ctypes.byref(final),
                             ctypes.byref(err))
        if raised:
            raise raised[0]
        _lib.check(rc, err, "watch")
        return Job._from_c(final)

    def jobs(self, state=None, limit=1000):
        """Jobs, newest first; state: one state name or several (None: all)."""
        states = [state] if isinstance(state, str) else list(state or [])
        mask = 0
        for s in states:
            if s not in JOB_STATES:
                raise ValueError(f"jobs: unknown state {s!r} (one of {', '.join(JOB_STATES)})")
            mask |= 1 << JOB_STATES.index(s)
        out, n, err = ctypes.POINTER(_lib.ktune_job)(), ctypes.c_size_t(), _lib.ktune_error()
        rc = lib.ktune_jobs(self._h(), mask, int(limit), ctypes.byref(out), ctypes.byref(n),
                            ctypes.byref(err))
        _lib.check(rc, err, "jobs")
        try:
            return [Job._from_c(out[i]) for i in range(n.value)]
        finally:
            if out:
                _lib.free(out)

    def gpus(self):
        """The daemon's GPUs (a GpuList; with none, .note says why)."""
        out, n, err = ctypes.POINTER(_lib.ktune_gpu)(), ctypes.c_size_t(), _lib.ktune_error()
        note = ctypes.create_string_buffer(256)
        rc = lib.ktune_gpus(self._h(), ctypes.byref(out), ctypes.byref(n), note,
                            ctypes.byref(err))
        _lib.check(rc, err, "gpus")
        try:
            return GpuList([Gpu._from_c(out[i]) for i in range(n.value)], _lib.text(note.value))
        finally:
            if out:
                _lib.free(out)

    def stats(self):
        out, err = _lib.ktune_stats(), _lib.ktune_error()
        rc = lib.ktune_stats_get(self._h(), ctypes.byref(out), ctypes.byref(err))
        _lib.check(rc, err, "stats")
        return Stats(
            uptime_s=out.uptime_s, clients=out.clients, requests=int(out.requests),
            jobs=dict(zip(JOB_STATES, out.jobs)), gpus=out.gpus, rss_bytes=int(out.rss_bytes),
            cache={"path": _lib.text(out.cache_path), "records": int(out.cache_records),
                   "keys": int(out.cache_keys), "trials": int(out.cache_trials),
                   "map_size": int(out.cache_map_size), "map_used": int(out.cache_map_used)})

    def lookup(self, graph, shapes, precision="exact", gpu=0, source=False):
        """The cached winner for (graph, shapes, precision) on the daemon's GPU `gpu`, as a
        RecordInfo, or None when the cache has nothing for that key."""
        g = _as_graph(graph)
        arr, n = shapes_array(shapes)
        found, info, err = ctypes.c_bool(), _lib.ktune_record_info(), _lib.ktune_error()
        src = ctypes.c_void_p()
        rc = lib.ktune_lookup_remote(self._h(), g.handle, arr, n, _lib.encode(precision),
                                     int(gpu), ctypes.byref(found), ctypes.byref(info),
                                     ctypes.byref(src) if source else None, ctypes.byref(err))
        try:
            _lib.check(rc, err, "lookup")
            if not found.value:
                return None
            text = ctypes.string_at(src.value).decode(errors="replace") if src.value else None
        finally:
            if src.value:
                _lib.free(src.value)
        return RecordInfo(
            family=_lib.text(info.family), schedule=_lib.text(info.schedule),
            time_ns=info.time_ns, p10_ns=info.p10_ns, p90_ns=info.p90_ns, err_norm=info.err_norm,
            tolerance=info.tolerance, cublaslt_ns=info.cublaslt_ns,
            workspace_bytes=int(info.workspace_bytes), n_kernels=info.n_kernels,
            created=int(info.created), gpu=_lib.text(info.gpu), source=text)

    def __repr__(self):
        return f"<ktune.Client {self.socket}{' closed' if self._handle is None else ''}>"
