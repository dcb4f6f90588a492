#!/usr/bin/env python3
"""The benchmark harness of bench/run: times ktune's cached kernels against PyTorch on a GPU.

For every case of a cases file (bench/cases/cases.jsonl: one JSON object a line, {"graph",
"shapes", "precision", "name", "source", "group"}), in one process and with one protocol for all,
four contenders run the same graph on the same inputs (TorchGraph.random_inputs):
  ktune         the kernel `ktune batch` cached, launched through the Python binding into
                preallocated outputs (and workspace; const inputs pre-packed once when the
                kernel asks for it), so no allocation is timed;
  eager         PyTorch eager in the graph's own dtypes (TorchGraph.run(xs, dtype=None));
  compile       torch.compile of that same eager function;
  max_autotune  torch.compile(mode="max-autotune-no-cudagraphs") of it.
Each is timed with CUDA events around one call, the L2 scrubbed before every rep (a 256 MiB write,
then a read of the same buffer: the read writes the write's dirty lines back before the call, so
the call's own reads do not pay for them; measured on the H100, a write alone added ~10 us to
every decode GEMM of 50-235 MB of weights) and the GPU kept busy (a spin of about 1 ms) until the call is enqueued, so the events time
the GPU's work; the host's time to enqueue a call is recorded apart (host_us). After a warm-up (the first call, which compiles, then at least 25 ms of calls); median and
p10/p90 of up to --reps reps or --rep-seconds of them. Then every contender runs once on fresh
inputs and its outputs are compared with PyTorch in float64: normwise error, which for ktune must
be within the record's tolerance. Tuning cost per case comes from `ktune batch --json`.

Rates: each case records its work (bench/work.py: the GEMM flops, the const weights' bytes, and
whether it is a decode case, every matmul with a const weight and at most 64 token rows), from
which the report derives TFLOP/s, or for decode cases weight bytes per second. Once per run,
before the cases, a device-to-device copy of COPY_BYTES (1 GiB) is timed like the contenders: the
copy bandwidth (bytes read + written over the median time) a decode case's rate is a fraction of.

    bench/harness.py --make-batch CASES [--only a,b] [--group g,h] > batch.jsonl  (no GPU, torch)
    bench/harness.py --cases CASES --batch-json BATCH.json --cache DIR --out RESULTS.json
                     [--only a,b] [--group g,h] [--batch-wall-s S] [--budget-total S]
                     [--command TEXT]

--only keeps the cases named, --group those of the groups named (the case's "group"); given
both, a case must pass both.

A case whose kernel is missing or fails, or a peer that fails (torch.compile raising, say), is
recorded with its exception; nothing is skipped silently. Exit status 1 when any ktune kernel is
missing, fails to launch or is outside its tolerance; 2 for bad arguments or a bad cases file.
"""
import argparse
import datetime
import errno
import gc
import importlib.util
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import time
import traceback
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from work import case_work  # noqa: E402  (bench/work.py: standard library only)
PEERS = ("eager", "compile", "max_autotune")
CONTENDERS = ("ktune",) + PEERS
# Keys of a case: the batch's (BATCH_KEYS) and the harness's own (source; notes: what the case is
# in PyTorch's words, recorded; group: what --group picks it by; module: what the peers run,
# Case.module_peer).
CASE_KEYS = {"graph", "shapes", "precision", "name", "source", "notes", "group", "module",
             "budget", "tolerance", "priority", "gpu"}
BATCH_KEYS = ("graph", "shapes", "precision", "name", "budget", "tolerance", "priority", "gpu")
SCRUB_BYTES = 256 << 20  # > 2x the H100's 50 MB L2
# how Timer scrubs: written then read (see the module docstring); results before 2026-11-28 have
# no "scrub" in their protocol: a write alone
SCRUB_KIND = "write+read"
SPIN_CYCLES = 2_000_000
COPY_BYTES = 1 << 30  # the copy bandwidth's buffer: far past the L2, like a decode's weights


class CasesError(Exception):
    pass


# ---- cases (no torch needed) ----

def load_cases(path, only=None, groups=None):
    """The cases of a JSONL file, in file order: dicts with 'graph' made absolute. only: a set of
    names to keep (each must exist); groups: a set of groups to keep (each must have a case).
    Raises CasesError naming the file and line."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise CasesError(f"{path}: {e.strerror}") from None
    base = os.path.dirname(os.path.abspath(path))
    cases, names = [], set()
    for no, text in enumerate(lines, 1):
        s = text.strip()
        if not s or s.startswith("#"):
            continue
        where = f"{path}:{no}"
        try:
            c = json.loads(s)
        except ValueError as e:
            raise CasesError(f"{where}: not JSON: {e}") from None
        if not isinstance(c, dict):
            raise CasesError(f"{where}: a case is a JSON object")
        unknown = sorted(set(c) - CASE_KEYS)
        if unknown:
            raise CasesError(f"{where}: unknown key '{unknown[0]}' (known: "
                             f"{', '.join(sorted(CASE_KEYS))})")
        for key, kind in (("graph", str), ("name", str), ("source", str)):
            if not isinstance(c.get(key), kind) or not c[key]:
                raise CasesError(f"{where}: '{key}' must be a non-empty string")
        if "group" in c and (not isinstance(c["group"], str) or not c["group"]):
            raise CasesError(f"{where}: 'group' must be a non-empty string")
        if not isinstance(c.get("shapes", {}), dict):
            raise CasesError(f"{where}: 'shapes' must be an object like {{\"M\": 1024}}")
        if c["name"] in names:
            raise CasesError(f"{where}: the name '{c['name']}' is used twice")
        names.add(c["name"])
        c = dict(c)
        c.setdefault("shapes", {})
        c.setdefault("precision", "exact")
        if not os.path.isabs(c["graph"]):
            c["graph"] = os.path.join(base, c["graph"])
        c["line"] = no
        cases.append(c)
    if only:
        missing = sorted(only - names)
        if missing:
            raise CasesError(f"{path}: no case named {', '.join(missing)} (--only)")
        cases = [c for c in cases if c["name"] in only]
    if groups:
        have = {c.get("group") for c in cases}
        missing = sorted(groups - have)
        if missing:
            raise CasesError(f"{path}: no case{' named with --only' if only else ''} in group "
                             f"{', '.join(missing)} (--group; groups: "
                             f"{', '.join(sorted(g for g in have if g)) or 'none'})")
        cases = [c for c in cases if c.get("group") in groups]
    if not cases:
        raise CasesError(f"{path}: no cases")
    return cases


def batch_lines(cases):
    """The `ktune batch` lines of the cases (it rejects keys it does not know, like source)."""
    return [json.dumps({k: c[k] for k in BATCH_KEYS if k in c}) for c in cases]


def batch_jobs_by_line(batch):
    """Job objects of `ktune batch --json` by their 1-based line in the batch file."""
    return {j.get("line"): j for j in (batch or {}).get("jobs", []) if isinstance(j, dict)}


def tuning_cost(job):
    """The tuning cost of one case from its `ktune batch --json` job."""
    if job is None:
        return {"reported": False, "note": "no job for this case in the batch JSON"}
    t = {"reported": True}
    for k in ("job", "state", "joined", "record", "budget_s", "elapsed_s", "trials", "measured",
              "resumed", "best_ns", "baseline_ns", "speedup", "err_norm", "family", "schedule",
              "error"):
        if k in job:
            t[k] = job[k]
    t["failures"] = job.get("failures")
    if t["failures"] is None:
        t["failures_note"] = "not reported by this ktune batch --json"
    compile_s = job.get("compile_s", job.get("compile_seconds"))
    measure_s = job.get("measure_s", job.get("measure_seconds"))
    t["compile_s"], t["measure_s"] = compile_s, measure_s
    if compile_s is None or measure_s is None:
        t["compile_measure_note"] = ("compile vs measure time not reported by this ktune batch "
                                     "--json (only the job's elapsed_s)")
    return t


# ---- timing (torch from here on) ----

def percentile(xs, q):
    """Linear-interpolated percentile of a non-empty list (q in [0, 100])."""
    s = sorted(xs)
    pos = (len(s) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


class Timer:
    """CUDA-event timing of one call with a cold L2 (see the module docstring)."""

    def __init__(self, torch, reps, rep_seconds, warmup_ms):
        self.torch = torch
        self.reps, self.rep_seconds, self.warmup_ms = reps, rep_seconds, warmup_ms
        self.scrub = torch.empty(SCRUB_BYTES // 4, dtype=torch.float32, device="cuda")
        self.sink = torch.empty((), dtype=torch.float32, device="cuda")
        # GPU cycles of spin after the scrub (about 1 ms at the H100's clocks); 0 where torch
        # has no torch.cuda._sleep (then a call's host overhead beyond the scrub's ~0.1 ms
        # shows in its time)
        self.spin_cycles = SPIN_CYCLES if hasattr(torch.cuda, "_sleep") else 0

    def time(self, fn):
        """fn has been called once already (compiled). Returns the time dict, in microseconds."""
        torch = self.torch
        torch.cuda.synchronize()
        t0, warm = time.perf_counter(), 0
        while warm < 3 or (time.perf_counter() - t0) * 1e3 < self.warmup_ms:
            fn()
            torch.cuda.synchronize()
            warm += 1
        times, host = [], []
        t0 = time.perf_counter()
        while len(times) < self.reps and (len(times) < 10 or
                                          time.perf_counter() - t0 < self.rep_seconds):
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            self.scrub.zero_()  # evicts fn's data from L2; runs before a on the same stream
            # ... and leaves L2 dirty: reading the buffer back writes those lines out now
            torch.sum(self.scrub, dim=0, out=self.sink)
            if self.spin_cycles:
                # keeps the GPU busy until the host has enqueued fn: the events then time the
                # GPU's work, not the host's launch overhead (measured apart, host_us)
                torch.cuda._sleep(self.spin_cycles)
            a.record()
            h = time.perf_counter()
            fn()
            host.append((time.perf_counter() - h) * 1e6)
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) * 1e3)  # ms -> us
        return {"median_us": statistics.median(times), "p10_us": percentile(times, 10),
                "p90_us": percentile(times, 90), "min_us": min(times), "reps": len(times),
                "warmup_calls": warm, "host_us": statistics.median(host),
                "times_us": [round(t, 3) for t in times]}


def measure_copy(torch, timer, nbytes=COPY_BYTES):
    """The copy bandwidth of this run: dst.copy_(src) over nbytes, device to device, timed by
    timer like a contender. Its rate counts the bytes read and written (2 * nbytes), as a
    decode kernel's weight bytes are each read once. Returns the record (an error on failure:
    the run goes on, decode cases then have no fraction)."""
    rec = {"bytes": nbytes, "traffic_bytes": 2 * nbytes,
           "what": "torch: dst.copy_(src), two uint8 buffers on the device, read + written"}
    buf = {}  # 2 GiB, freed before the cases
    try:
        buf["src"] = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device="cuda")
        buf["dst"] = torch.empty_like(buf["src"])
        fn = lambda: buf["dst"].copy_(buf["src"])  # noqa: E731
        fn()
        rec["time"] = timer.time(fn)
        rec["tb_s"] = 2 * nbytes / (rec["time"]["median_us"] * 1e-6) / 1e12
        if not torch.equal(buf["src"][-4096:], buf["dst"][-4096:]):
            rec["error"] = "the copy's destination differs from its source"
    except Exception as e:  # out of memory, say: recorded, the cases still run
        rec["error"] = exc_text(e)
    finally:
        buf.clear()
        torch.cuda.empty_cache()
    return rec


def exc_text(e):
    return f"{type(e).__name__}: {e}".strip().splitlines()[0][:500]


def set_precision(torch, precision):
    """PyTorch's peers get the precision class ktune's case was tuned for: 'exact' forbids TF32
    in matmul and cuDNN (cuDNN allows it by default), 'tf32' and 'reduced' allow it."""
    tf32 = precision in ("tf32", "reduced")
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    return {"matmul.allow_tf32": tf32, "cudnn.allow_tf32": tf32,
            "float32_matmul_precision": "high" if tf32 else "highest",
            "matmul.allow_fp16_reduced_precision_reduction (left as is)":
                torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction}


def output_errors(outs, ref, names):
    """{name: {"err": normwise error vs ref, "finite": bool}} for outputs given in names order."""
    from torch_graph import normwise_error
    res = {}
    for name, out in zip(names, outs):
        res[name] = {"err": normwise_error(out, ref[name]),
                     "finite": bool(out.isfinite().all().item())}
    return res


class Case:
    def __init__(self, torch, ktune, tg_cls, c, args, timer):
        self.torch, self.ktune, self.c, self.args, self.timer = torch, ktune, c, args, timer
        self.tg = tg_cls.load(c["graph"], c["shapes"])
        self.out_names = list(self.tg.graph["outputs"])
        seed = args.seed + zlib.crc32(c["name"].encode()) % 100000  # stable per case
        # the timing and the checking inputs, with what TorchGraph.prepare adds for PyTorch's
        # side (load-time work, untimed, like ktune's prepacking)
        self.xs = self.tg.prepare(self.tg.random_inputs(seed=seed))
        self.fresh = self.tg.prepare(self.tg.random_inputs(seed=seed + 1))
        self.names = list(self.xs)
        self.ref = self.tg.run(self.fresh, dtype=torch.float64)
        # The peers run the graph's ops in PyTorch, or, for a case captured from a module (a
        # KernelBench problem), the module itself: where capture decomposed an op PyTorch has
        # (max pooling as a maximum of slices), the graph's ops would time the decomposition.
        if c.get("module"):
            self.peer_fn, self.peer_names = self.module_peer(c["module"])
        else:
            self.peer_names = self.names
            self.peer_fn = lambda *a: tuple(
                self.tg.run(dict(zip(self.names, a)), dtype=None)[o] for o in self.out_names)

    def module_peer(self, m):
        """(fn, input names): the module of m["file"] built where the inputs are (the GPU) as the
        problem builds it
        (Model(*get_init_inputs()), in the training mode modules start in), its parameters and
        buffers set to this case's values of the const inputs of the same names, called on the
        user inputs m["user_inputs"] with m["fixed"] (position -> number) between them; fn
        returns the outputs as a tuple."""
        torch = self.torch
        # registered under its own name: torch.compile looks the model's module up by name
        name = "ktune_case_" + re.sub(r"\W", "_", self.c["name"])
        spec = importlib.util.spec_from_file_location(name, m["file"])
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        with torch.device(next(iter(self.xs.values())).device if self.xs else "cuda"):
            model = mod.Model(*mod.get_init_inputs())
        with torch.no_grad():
            for name, t in model.state_dict().items():
                if name in self.xs and tuple(self.xs[name].shape) == tuple(t.shape):
                    t.copy_(self.xs[name])
        fixed = {int(k): v for k, v in m.get("fixed", {}).items()}
        n_args = len(m["user_inputs"]) + len(fixed)

        def fn(*tensors):
            it = iter(tensors)
            y = model(*(fixed[i] if i in fixed else next(it) for i in range(n_args)))
            return tuple(y) if isinstance(y, (tuple, list)) else (y,)
        return fn, list(m["user_inputs"])

    # ktune
    def run_ktune(self, rt):
        torch, ktune = self.torch, self.ktune
        from torch_graph import DTYPES
        kg = ktune.Graph(self.c["graph"])
        kern = rt.lookup(kg, self.c["shapes"], precision=self.c["precision"])
        info = kern.info
        res = {"match": kern.match, "family": info.family, "schedule": info.schedule,
               "tuned_ns": info.time_ns, "tuned_err_norm": info.err_norm,
               "tolerance": info.tolerance, "cublaslt_ns": info.cublaslt_ns or None,
               "n_launches": info.n_launches, "workspace_bytes": kern.workspace_size,
               "prepacked_inputs": [name for name in kern.inputs if kern.prepack_size(name)]}

        def prepared(xs):
            # By name (kern.inputs: declared names). Packing const inputs is load-time work
            # (once per weight), not timed.
            return {name: kern.prepack(name, xs[name]) if kern.prepack_size(name) else xs[name]
                    for name in kern.inputs}

        outs = [torch.empty(d.shape, dtype=DTYPES[d.dtype], device="cuda")
                for d in kern.output_descs]
        ws = (torch.empty(kern.workspace_size, dtype=torch.uint8, device="cuda")
              if kern.workspace_size else None)
        inp = prepared(self.xs)
        fn = lambda: kern(**inp, out=outs, workspace=ws)  # noqa: E731
        fn()
        res["time"] = self.timer.time(fn)
        check = prepared(self.fresh)
        kern(**check, out=outs, workspace=ws)
        torch.cuda.synchronize()
        res["errors"] = output_errors(outs, self.ref, list(kern.outputs))
        res["ok"] = all(e["finite"] and e["err"] <= info.tolerance
                        for e in res["errors"].values())
        if not res["ok"]:
            res["error"] = "outputs outside the record's tolerance or not finite"
        return res

    # PyTorch peers
    def run_peer(self, which):
        torch = self.torch
        res = {}
        if self.peer_names is not self.names:
            res["runs"] = "module"  # the problem's own module (module_peer)
        if which == "eager":
            fn_args = self.peer_fn
        else:
            torch._dynamo.reset()  # a fresh compile per case and mode (no recompile limit hit)
            mode = "max-autotune-no-cudagraphs" if which == "max_autotune" else None
            fn_args = torch.compile(self.peer_fn, mode=mode)
            res["mode"] = mode or "default"
        args = [self.xs[n] for n in self.peer_names]
        counters = None
        if which != "eager":
            try:
                from torch._dynamo.utils import counters
                counters.clear()
            except ImportError:
                counters = None
        t0 = time.perf_counter()
        fn_args(*args)  # compiles
        torch.cuda.synchronize()
        res["first_call_s"] = time.perf_counter() - t0
        if counters is not None:  # > 0: dynamo did not capture the whole graph in one piece
            res["graph_breaks"] = sum(counters["graph_break"].values())
        res["time"] = self.timer.time(lambda: fn_args(*args))
        outs = fn_args(*[self.fresh[n] for n in self.peer_names])
        torch.cuda.synchronize()
        res["errors"] = output_errors(outs, self.ref, self.out_names)
        return res


def speedups(rec):
    ktune = rec["ktune"]
    if "time" not in ktune or not ktune.get("ok"):
        return None
    k = ktune["time"]["median_us"]
    out = {}
    timed = {p: rec[p]["time"]["median_us"] for p in PEERS if "time" in rec[p]}
    for p in PEERS:
        out[p] = timed[p] / k if p in timed else None
        # the noise: the ratio's range from the p10/p90 of both sides
        if p in timed:
            out[p + "_range"] = [rec[p]["time"]["p10_us"] / ktune["time"]["p90_us"],
                                 rec[p]["time"]["p90_us"] / ktune["time"]["p10_us"]]
    if timed:
        best = min(timed, key=timed.get)
        out["best_peer"] = best
        out["over_best_peer"] = timed[best] / k
    else:
        out["best_peer"], out["over_best_peer"] = None, None
    return out


def case_status(rec):
    k = rec["ktune"]
    if k.get("missing"):
        return "kernel missing"
    if "error" in k and "time" not in k:
        return "ktune failed"
    if not k.get("ok"):
        return "wrong"
    return "ok"


def graph_work(c):
    """bench/work.py's counts of a case, or {"error": ...} (then the report shows no rate)."""
    try:
        with open(c["graph"]) as f:
            return case_work(json.load(f), c["shapes"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        return {"error": exc_text(e)}


def run_case(c, args, torch, ktune, tg_cls, rt, timer, jobs, copy=None):
    rec = {"name": c["name"], "source": c["source"], "graph": os.path.relpath(c["graph"]),
           "shapes": c["shapes"], "precision": c["precision"]}
    if "group" in c:
        rec["group"] = c["group"]
    if "notes" in c:
        rec["torch_expr"] = c["notes"]
    rec["work"] = graph_work(c)
    if copy and copy.get("tb_s"):
        rec["copy_tb_s"] = copy["tb_s"]  # this run's copy bandwidth, kept when parts are merged
    rec["tuning"] = tuning_cost(jobs.get(c["index"] + 1))
    rec["torch_precision"] = set_precision(torch, c["precision"])
    try:
        case = Case(torch, ktune, tg_cls, c, args, timer)
    except Exception as e:  # the graph itself cannot run in PyTorch
        rec["error"] = exc_text(e)
        for who in CONTENDERS:
            rec[who] = {"error": rec["error"]}
        rec["status"] = "case failed"
        rec["speedup"] = None
        return rec
    try:
        rec["ktune"] = case.run_ktune(rt)
    except ktune.KtuneError as e:
        rec["ktune"] = {"error": exc_text(e), "missing": e.errno == errno.ENOENT}  # not cached
    except Exception as e:
        rec["ktune"] = {"error": exc_text(e)}
        traceback.print_exc()
    for p in PEERS:
        if p not in args.peers:
            rec[p] = {"error": "not run (--peers)", "not_run": True}
            continue
        try:
            rec[p] = case.run_peer(p)
        except Exception as e:  # torch.compile failures among them: recorded, the case goes on
            rec[p] = {"error": exc_text(e)}
            traceback.print_exc()
    rec["status"] = case_status(rec)
    rec["speedup"] = speedups(rec)
    # The case's tensors go before the next case's come: torch.compile's caches hold the
    # compiled function, whose closure holds the case (two KernelBench cases of 1.6G elements,
    # with their float64 references, filled the GPU), and an exception's traceback its frames.
    del case
    if any(p in args.peers for p in PEERS if p != "eager"):
        torch._dynamo.reset()
    gc.collect()
    torch.cuda.empty_cache()
    return rec


def rate_text(rec, who):
    """ktune's (or a peer's) rate: TFLOP/s of a GEMM case, TB/s of weights and the fraction of
    the copy bandwidth of a decode case; "" for other cases."""
    w, t = rec.get("work") or {}, ((rec.get(who) or {}).get("time") or {}).get("median_us")
    if not t or not w.get("kind"):
        return ""
    if w["kind"] == "decode":
        tb = w["weight_bytes"] / (t * 1e-6) / 1e12
        copy = rec.get("copy_tb_s")
        return f"{tb:.2f} TB/s" + (f" ({tb / copy:.0%} of copy)" if copy else "")
    return f"{w['flops'] / (t * 1e-6) / 1e12:.0f} TFLOP/s"


def show(rec):
    def t(who):
        x = rec.get(who, {})
        return f"{x['time']['median_us']:9.1f}" if "time" in x else f"{'-':>9}"
    sp = rec.get("speedup") or {}
    best = sp.get("over_best_peer")
    rate = rate_text(rec, "ktune")
    print(f"{rec['name']:28} {rec['status']:14} ktune {t('ktune')} eager {t('eager')} "
          f"compile {t('compile')} max-autotune {t('max_autotune')} us  "
          f"vs best {'%.2fx' % best if best else '-'}" + (f"  ktune {rate}" if rate else ""),
          flush=True)
    for who in CONTENDERS:
        if "error" in rec.get(who, {}):
            print(f"  {who}: {rec[who]['error']}", flush=True)
    tu = rec.get("tuning") or {}
    if rec["status"] != "ok" and tu.get("reported"):
        # why the tuning job kept no kernel: its state, its error, its failures by kind
        fails = ", ".join(f"{k} {v}" for k, v in sorted((tu.get("failures") or {}).items()))
        print(f"  tuning: {tu.get('state')} after {tu.get('elapsed_s') or 0:.1f} s, "
              f"{tu.get('trials', 0)} trials, {tu.get('measured', 0)} measured"
              + (f"; {tu['error']}" if tu.get("error") else "")
              + (f"; failures: {fails}" if fails else ""), flush=True)


def versions(torch, ktune, args):
    v = {"python": platform.python_version(), "torch": torch.__version__,
         "torch_cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
         "ktune_binding": ktune.__version__, "libktune": ktune.library_version()}
    try:
        import triton
        v["triton"] = triton.__version__
    except Exception as e:
        v["triton"] = f"unavailable ({exc_text(e)})"
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,"
                              "clocks.max.sm", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        v["nvidia_smi"] = smi.stdout.strip().splitlines()
        v["driver"] = v["nvidia_smi"][0].split(",")[1].strip() if v["nvidia_smi"] else None
    except (OSError, subprocess.SubprocessError, IndexError) as e:
        v["driver"] = f"unknown ({exc_text(e)})"
    v["commit"] = args.commit
    ind = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    v["inductor_cache"] = {"dir": ind or "(default)", "warm_at_start": args.inductor_warm}
    return v


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def summarise(recs):
    sp = [r["speedup"]["over_best_peer"] for r in recs
          if r.get("speedup") and r["speedup"].get("over_best_peer")]
    return {"cases": len(recs), "ok": sum(r["status"] == "ok" for r in recs),
            "not_ok": [{"name": r["name"], "status": r["status"]} for r in recs
                       if r["status"] != "ok"],
            "geomean_over_best_peer": geomean(sp), "geomean_cases": len(sp),
            "below_0_95": [r["name"] for r in recs if r.get("speedup")
                           and r["speedup"].get("over_best_peer") is not None
                           and r["speedup"]["over_best_peer"] < 0.95]}


def run_result(args, started, copy, batch, jobs, torch, ktune, timer):
    """The run's JSON, its cases to come: main() writes it after every case (complete false,
    so that a run cut short keeps the cases it timed) and once more at the end."""
    return {
        "schema": "ktune-bench/1",
        "date": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": args.command or " ".join(sys.argv),
        "harness_command": " ".join(sys.argv),
        "device": {"name": torch.cuda.get_device_name(),
                   "capability": ".".join(map(str, torch.cuda.get_device_capability())),
                   "sm_count": torch.cuda.get_device_properties(0).multi_processor_count,
                   "host": platform.node()},
        "versions": versions(torch, ktune, args),
        "protocol": {
            "text": "one process; inputs from TorchGraph.random_inputs; each contender timed "
                    "with CUDA events around one call, the L2 scrubbed before every rep by a 256 MiB "
                    "write then a read of it (L2 cold and clean: no write-back of the scrub's "
                    "dirty lines in the timed call), then a GPU spin of spin_cycles (so the host has enqueued the "
                    "call before the start event runs: the events time GPU work; the host's "
                    "time to enqueue one call is host_us), after the first call (compile) and "
                    ">= warmup_ms of calls; "
                    "median and p10/p90 of up to reps reps or rep_seconds; ktune launched "
                    "through the Python binding into preallocated outputs and workspace, const "
                    "inputs pre-packed once when the kernel asks; peers in the case's precision "
                    "class (exact: no TF32 in matmul or cuDNN); errors: normwise, vs PyTorch "
                    "float64, on fresh inputs; speed-up = peer median / ktune median; rates: "
                    "GEMM cases 2*M*N*K per matmul / median (TFLOP/s), decode cases (every "
                    "matmul with a const weight, at most 64 token rows) the weights' bytes / "
                    "median, against the copy bandwidth: a device-to-device copy of 1 GiB timed "
                    "like the contenders once per run, its bytes read + written / median",
            "reps": args.reps, "rep_seconds": args.rep_seconds, "warmup_ms": args.warmup_ms,
            "scrub_bytes": SCRUB_BYTES, "scrub": SCRUB_KIND, "spin_cycles": timer.spin_cycles, "seed": args.seed,
            "peers": args.peers},
        "copy_bandwidth": copy,
        "batch": {"file_cases": os.path.relpath(args.cases), "wall_s": args.batch_wall_s,
                  "budget_total_s": args.budget_total, "cache": args.cache,
                  "counts": {k: batch.get(k) for k in ("total", "done", "failed", "cancelled",
                                                         "no_record", "not_submitted")}
                  if batch else None,
                  "joined": sum(bool(j.get("joined")) for j in jobs.values()),
                  "note": "joined: jobs that joined a finished twin in the cache's journal (a "
                          "rerun); their tuning cost is the original job's"},
        "complete": False,
        "cases": [],
        "summary": summarise([]),
    }


def write_result(path, result):
    """Replace PATH atomically: a reader (or a cut) never sees half a file."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(json.dumps(result, indent=1) + "\n")
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--make-batch", metavar="CASES",
                    help="print the `ktune batch` file of CASES and exit (no GPU needed)")
    ap.add_argument("--cases", default=os.path.join(HERE, "cases", "cases.jsonl"))
    ap.add_argument("--only", help="comma-separated case names")
    ap.add_argument("--group", help="comma-separated groups (a case's \"group\")")
    ap.add_argument("--batch-json", help="`ktune batch --json` output of the same cases")
    ap.add_argument("--batch-wall-s", type=float)
    ap.add_argument("--budget-total", type=float)
    ap.add_argument("--cache", default=os.environ.get("KTUNE_CACHE"))
    ap.add_argument("--out", help="results JSON (default: stdout)")
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--rep-seconds", type=float, default=2.0)
    ap.add_argument("--warmup-ms", type=float, default=25.0)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--peers", default=",".join(PEERS),
                    help="the PyTorch peers timed, comma-separated (default: all of "
                         f"{', '.join(PEERS)}; max-autotune compiles for minutes a graph)")
    ap.add_argument("--command", help="the command line that produced the run (recorded)")
    ap.add_argument("--commit", help="the ktune commit (recorded)")
    args = ap.parse_args()
    args.peers = [p for p in args.peers.split(",") if p]
    bad = [p for p in args.peers if p not in PEERS]
    if bad or not args.peers:
        print(f"harness: --peers '{','.join(bad) or args.peers}': expected some of "
              f"{', '.join(PEERS)}", file=sys.stderr)
        return 2
    only = set(filter(None, (args.only or "").split(","))) or None
    groups = set(filter(None, (args.group or "").split(","))) or None
    try:
        cases = load_cases(args.make_batch or args.cases, only, groups)
    except CasesError as e:
        print(f"harness: {e}", file=sys.stderr)
        return 2
    for i, c in enumerate(cases):
        c["index"] = i  # its line in the batch file is i + 1
    if args.make_batch:
        print("\n".join(batch_lines(cases)))
        return 0
    if not args.cache:
        print("harness: --cache DIR (or $KTUNE_CACHE) is needed", file=sys.stderr)
        return 2
    batch = None
    if args.batch_json:
        try:
            with open(args.batch_json) as f:
                batch = json.load(f)
        except (OSError, ValueError) as e:
            print(f"harness: {args.batch_json}: {e} (tuning cost left unreported)",
                  file=sys.stderr)
    jobs = batch_jobs_by_line(batch)

    try:
        import torch
        from torch_graph import TorchGraph
        import ktune
    except ImportError as e:
        print(f"harness: {e} (PyTorch, and the ktune binding: PYTHONPATH=client/python, "
              "KTUNE_LIBRARY=.../libktune.so)", file=sys.stderr)
        return 2

    if not torch.cuda.is_available():
        print("harness: PyTorch sees no CUDA device", file=sys.stderr)
        return 2
    ind = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    # A warm torch.compile cache shortens the peers' first calls (recorded), not their times.
    args.inductor_warm = bool(ind and os.path.isdir(ind) and os.listdir(ind))
    timer = Timer(torch, args.reps, args.rep_seconds, args.warmup_ms)
    rt = ktune.Runtime(args.cache)
    started = datetime.datetime.now(datetime.timezone.utc)
    copy = measure_copy(torch, timer)
    print(f"copy bandwidth: {copy['tb_s']:.2f} TB/s ({COPY_BYTES >> 20} MiB device to device, "
          f"read + written, {copy['time']['median_us']:.0f} us)" if "tb_s" in copy else
          f"copy bandwidth: not measured: {copy.get('error')}", flush=True)
    result = run_result(args, started, copy, batch, jobs, torch, ktune, timer)
    recs = result["cases"]
    for c in cases:
        rec = run_case(c, args, torch, ktune, TorchGraph, rt, timer, jobs, copy)
        recs.append(rec)
        show(rec)
        result["summary"] = summarise(recs)
        if args.out:
            write_result(args.out, result)
    result["complete"] = True
    if args.out:
        write_result(args.out, result)
    else:
        print(json.dumps(result, indent=1))
    s = result["summary"]
    gm = s["geomean_over_best_peer"]
    print(f"{s['ok']}/{s['cases']} cases ok; geometric-mean speed-up over the best peer "
          f"{'%.3fx' % gm if gm else '-'} over {s['geomean_cases']} cases", file=sys.stderr)
    return 0 if s["ok"] == s["cases"] else 1


if __name__ == "__main__":
    sys.exit(main())
