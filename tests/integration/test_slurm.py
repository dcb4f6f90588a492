#!/usr/bin/env python3
"""The fleet on a real Slurm (fleet/slurm, docs/operations.md "A fleet").

Starts a one-node cluster from the Debian packages (munged, slurmctld, slurmd; no systemd) in a
private directory, then:
  1. the reference: one ktuned on this host tunes the whole batch file;
  2. the fleet: tune.sbatch as a 4-task array (the fake GPU worker, slowed so that a job takes
     seconds), merge.sbatch after it (--dependency=afterok); task 1 is requeued in the middle
     of its first job (`scontrol requeue`, as a preemption does) and run again.
Checks: the merged cache holds exactly the reference's keys; the key two tasks both tuned (a
batch line given twice, in two shards) holds the faster of the two tasks' records; task 1
resumed from its checkpoint, and no candidate it had measured before the requeue was measured
again after it, but the one in flight (at most one: one GPU).

Environment: KTUNE_BIN, KTUNED_BIN, KTUNE_FAKE_WORKER, KTUNE_SOURCE_ROOT (meson sets them).
Exits 77 (skipped) when the Slurm or munge programs are missing or it does not run as root
(slurmd starts jobs as their user); scripts/install-deps installs the packages.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

SKIP = 77
TASKS = 4
DELAY_MS = 150  # the fake worker's time per candidate


def fail(msg):
    print(f"test_slurm: FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(cmd, env=None, check=True, timeout=120):
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        fail(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()}")
    return r


def wait_for(what, pred, timeout):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        v = pred()
        if v:
            return v
        time.sleep(0.5)
    fail(f"timed out after {timeout} s waiting for {what}")


class Cluster:
    """munged, slurmctld and slurmd in dir, one node (this host), one partition."""

    def __init__(self, root):
        self.dir = os.path.join(root, "slurm")
        for d in ("etc", "run", "log", "spool/ctld", "spool/d"):
            os.makedirs(os.path.join(self.dir, d), exist_ok=True)
        os.chmod(os.path.join(self.dir, "etc"), 0o700)
        self.sock = os.path.join(self.dir, "run", "munge.sock")
        self.conf = os.path.join(self.dir, "etc", "slurm.conf")
        self.env = dict(os.environ, SLURM_CONF=self.conf)
        self.started = []

    def start(self):
        key = os.path.join(self.dir, "etc", "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        d = self.dir
        run(["munged", "--force", f"--key-file={key}", f"--socket={self.sock}",
             f"--pid-file={d}/run/munged.pid", f"--log-file={d}/log/munged.log",
             f"--seed-file={d}/run/munged.seed"])
        self.started.append("munged")
        host = socket.gethostname().split(".")[0]
        with open(self.conf, "w") as f:
            f.write(f"""ClusterName=ktunetest
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AuthType=auth/munge
AuthInfo=socket={self.sock}
CredType=cred/munge
StateSaveLocation={d}/spool/ctld
SlurmdSpoolDir={d}/spool/d
SlurmctldPidFile={d}/run/slurmctld.pid
SlurmdPidFile={d}/run/slurmd.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
JobRequeue=1
MinJobAge=600
KillWait=30
NodeName={host} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} State=UNKNOWN
PartitionName=test Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:{TASKS + 1}
""")
        run(["slurmctld", "-c"], env=self.env)
        self.started.append("slurmctld")
        run(["slurmd"], env=self.env)
        self.started.append("slurmd")
        wait_for("the node to be idle", lambda: "idle" in run(
            ["sinfo", "-h", "-o", "%T"], env=self.env, check=False).stdout, 60)

    def stop(self):
        subprocess.run(["scancel", "--full", "-u", "root"], env=self.env, capture_output=True)
        for name in ("slurmd", "slurmctld", "munged"):
            if name not in self.started:
                continue
            try:
                with open(os.path.join(self.dir, "run", f"{name}.pid")) as f:
                    os.kill(int(f.read().strip()), signal.SIGTERM)
            except (OSError, ValueError):
                pass
        time.sleep(1)

    def job_state(self, job):
        out = run(["scontrol", "show", "job", job], env=self.env, check=False).stdout
        for word in out.split():
            if word.startswith("JobState="):
                return word.split("=", 1)[1]
        return None

    def queue_empty(self):
        return run(["squeue", "-h"], env=self.env).stdout.strip() == ""


def write_batch(root, examples):
    """Eight jobs, each with its own M (the fake worker's log names the bindings), and line 2
    once more at the end: two shards (2 and 0) tune that key."""
    lines = []
    for i in range(8):
        m = 64 * (i + 1)
        if i % 2 == 0:
            lines.append({"graph": os.path.join(examples, "softmax.json"),
                          "shapes": {"M": m, "N": 1024}, "budget": 6})
        else:
            lines.append({"graph": os.path.join(examples, "rmsnorm.json"), "shapes": {"M": m},
                          "budget": 6})
    lines.append(dict(lines[2]))
    path = os.path.join(root, "batch.jsonl")
    with open(path, "w") as f:
        f.write("".join(json.dumps(x) + "\n" for x in lines))
    return path, lines


def records(ktune, cache):
    r = run([ktune, "cache", "ls", "--cache", cache, "--json"])
    out = {}
    for rec in json.loads(r.stdout)["records"]:
        key = (rec["gpu"]["name"], rec["signature"], tuple(sorted(rec["shapes"].items())),
               rec["precision"])
        out[key] = rec
    return out


def reference_run(root, ktune, ktuned, worker, batch):
    """The whole batch on one ktuned of this host: the keys a single-host run produces."""
    cache, sock = os.path.join(root, "ref-cache"), os.path.join(root, "ref.sock")
    with open(os.path.join(root, "ref-ktuned.log"), "w") as log:
        d = subprocess.Popen([ktuned, "--socket", sock, "--cache", cache, "--gpus", "0,1",
                              "--worker", worker, "--compile-jobs", "1"], stdout=log,
                             stderr=subprocess.STDOUT)
    try:
        wait_for("the reference ktuned", lambda: run(
            [ktune, "jobs", "--socket", sock], check=False).returncode == 0, 60)
        run([ktune, "batch", batch, "--socket", sock, "--quiet"], timeout=600)
    finally:
        d.send_signal(signal.SIGTERM)
        d.wait(60)
    return records(ktune, cache)


def fake_evals(path):
    """(key, group, bindings, ms, kind) of every evaluation the fake workers logged."""
    out = []
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            p = line.rstrip("\n").split("\t")
            if len(p) >= 5:
                out.append((p[0], p[1], p[2], int(p[4]), p[5] if len(p) > 5 else ""))
    return out


def m_of(bindings):
    for b in bindings.split(","):
        if b.startswith("M="):
            return int(b[2:])
    return None


def main():
    src = os.environ.get("KTUNE_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), "..", ".."))
    ktune, ktuned = os.environ.get("KTUNE_BIN"), os.environ.get("KTUNED_BIN")
    worker = os.environ.get("KTUNE_FAKE_WORKER")
    missing = [p for p in ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol")
               if not shutil.which(p)]
    if missing:
        print(f"test_slurm: skipped: {', '.join(missing)} not installed (scripts/install-deps)")
        return SKIP
    if os.geteuid() != 0:
        print("test_slurm: skipped: slurmd must run as root to start jobs")
        return SKIP
    if not (ktune and ktuned and worker):
        fail("KTUNE_BIN, KTUNED_BIN and KTUNE_FAKE_WORKER are needed")
    fleet = os.path.join(src, "fleet", "slurm")
    root = tempfile.mkdtemp(prefix="ktune-slurm-")
    cluster = Cluster(root)
    try:
        batch, lines = write_batch(root, os.path.join(src, "examples"))
        t0 = time.monotonic()
        ref = reference_run(root, ktune, ktuned, worker, batch)
        print(f"reference: {len(ref)} keys in {time.monotonic() - t0:.0f} s on one host")
        if len(ref) != 8:
            fail(f"the reference run cached {len(ref)} keys, expected 8")

        cluster.start()
        shared, scratch = os.path.join(root, "shared"), os.path.join(root, "scratch")
        os.makedirs(scratch)
        fake_log = os.path.join(root, "fake.log")
        env = dict(cluster.env, KTUNE=ktune, KTUNED=ktuned, KTUNE_SCRATCH=scratch,
                   KTUNE_TASK=os.path.join(src, "fleet", "ktune-task"),
                   KTUNE_MERGE=os.path.join(src, "fleet", "ktune-merge"),
                   KTUNED_OPTS=f"--gpus 0 --worker {worker} --compile-jobs 1",
                   KTUNE_CHECKPOINT_S="2", FAKE_DELAY_MS=str(DELAY_MS), FAKE_LOG=fake_log,
                   FAKE_LOG_DETAIL="1")
        env.pop("KTUNE_KEYS", None)
        t0 = time.monotonic()
        jid = run(["sbatch", "--parsable", f"--array=0-{TASKS - 1}",
                   "-o", os.path.join(root, "tune-%a.out"),
                   os.path.join(fleet, "tune.sbatch"), batch, shared], env=env).stdout.strip()
        mid = run(["sbatch", "--parsable", f"--dependency=afterok:{jid}",
                   "-o", os.path.join(root, "merge.out"),
                   os.path.join(fleet, "merge.sbatch"), shared], env=env).stdout.strip()

        # task 1 (lines 1 and 5): requeue it a few candidates into its first job
        task1_m = {lines[i]["shapes"]["M"] for i in range(len(lines)) if i % TASKS == 1}

        def task1_evals():
            return [e for e in fake_evals(fake_log) if m_of(e[2]) in task1_m and e[4] != "load"]
        wait_for("task 1's first candidates", lambda: len(task1_evals()) >= 3, 180)
        run(["scontrol", "requeue", f"{jid}_1"], env=env)
        wait_for("task 1 to stop and wait in the queue",
                 lambda: cluster.job_state(f"{jid}_1") == "PENDING", 90)
        release_ms = int(time.time() * 1000)
        before = task1_evals()
        # a requeued job waits a while before it may start again: now, here
        run(["scontrol", "update", f"JobId={jid}_1", "StartTime=now"], env=env)
        wait_for("the array and the merge job", cluster.queue_empty, 400)
        state = cluster.job_state(mid)
        with open(os.path.join(root, "merge.out")) as f:
            merge_out = f.read()
        if state != "COMPLETED":
            fail(f"the merge job ended {state}: {merge_out[-2000:]}")
        print(f"fleet: {TASKS} tasks and the merge in {time.monotonic() - t0:.0f} s")
        print(merge_out[:merge_out.find("cache=")].rstrip())

        with open(os.path.join(root, "tune-1.out")) as f:
            t1 = f.read()
        if "restart 1" not in t1 or "resuming from the checkpoint" not in t1:
            fail(f"task 1 did not run again from its checkpoint:\n{t1}")

        merged = records(ktune, os.path.join(shared, "cache"))
        if set(merged) != set(ref):
            fail(f"merged keys differ from the single-host run's: only merged "
                 f"{sorted(set(merged) - set(ref))}, only reference {sorted(set(ref) - set(merged))}")
        # the key of line 2 and line 8: the faster of the two tasks' best records
        dup_m = lines[2]["shapes"]["M"]
        (dkey,) = [k for k in merged if ("M", dup_m) in k[2]]
        times = []
        for t in (2 % TASKS, 8 % TASKS):
            recs = records(ktune, os.path.join(shared, "tasks", str(t), "cache"))
            times.append(recs[dkey]["time"]["median_ns"])
        if merged[dkey]["time"]["median_ns"] != min(times):
            fail(f"the key both tasks tuned holds {merged[dkey]['time']['median_ns']} ns, "
                 f"not the faster of {times}")

        # nothing measured again after the requeue but the candidate in flight
        after = [e for e in task1_evals() if e[3] > release_ms]
        if not after:
            fail("task 1 measured nothing after it was requeued")
        again = {(e[0], e[1], e[2]) for e in before} & {(e[0], e[1], e[2]) for e in after}
        print(f"task 1: {len(before)} candidates measured before the requeue, {len(after)} "
              f"after, {len(again)} measured again {sorted(again)}")
        if len(again) > 1:
            fail(f"{len(again)} candidates measured before the requeue were measured again")
        print("test_slurm: ok")
        return 0
    finally:
        cluster.stop()
        if os.environ.get("KTUNE_KEEP_TEST_DIR"):
            print(f"test_slurm: kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
