#!/usr/bin/env python3
"""The Kubernetes manifests of the fleet (fleet/kubernetes) hold together: each parses as YAML
and is a batch/v1 Job; the tuning Job is Indexed, its completions and parallelism equal the
task count it passes ktune-task, whose task index is the pod's $(JOB_COMPLETION_INDEX); every
mounted volume is declared; both Jobs share the volume claim and the run directory. No packaged
validator of the Kubernetes schema exists for Debian, so this is a structural check, not one
against a cluster (docs/operations.md, "A fleet", says so). Exits 77 without python3-yaml."""
import os
import sys

try:
    import yaml
except ImportError:
    # Debian's python3-yaml is the system interpreter's; python3 on PATH may be another one
    if os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3") and \
            os.access("/usr/bin/python3", os.X_OK):
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    print("test_fleet_manifests: skipped: no python3-yaml")
    sys.exit(77)

ROOT = os.environ.get("KTUNE_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), "..", ".."))
DIR = os.path.join(ROOT, "fleet", "kubernetes")
errors = []


def check(cond, what):
    if not cond:
        errors.append(what)


def load(name):
    with open(os.path.join(DIR, name)) as f:
        docs = [d for d in yaml.safe_load_all(f) if d is not None]
    check(len(docs) == 1, f"{name}: expected one document, found {len(docs)}")
    job = docs[0]
    check(job.get("apiVersion") == "batch/v1" and job.get("kind") == "Job",
          f"{name}: not a batch/v1 Job")
    pod = job["spec"]["template"]["spec"]
    check(pod.get("restartPolicy") in ("Never", "OnFailure"),
          f"{name}: a Job's pods need restartPolicy Never or OnFailure")
    (c,) = pod["containers"]
    declared = {v["name"] for v in pod.get("volumes", [])}
    for m in c.get("volumeMounts", []):
        check(m["name"] in declared, f"{name}: volume {m['name']} mounted but not declared")
    env = {e["name"]: e.get("value") for e in c.get("env", [])}
    check(env.get("KTUNE_SCRATCH") in {m["mountPath"] for m in c.get("volumeMounts", [])},
          f"{name}: KTUNE_SCRATCH is not a mounted volume")
    claims = {v["persistentVolumeClaim"]["claimName"] for v in pod.get("volumes", [])
              if "persistentVolumeClaim" in v}
    return job, c, claims


tune, tc, tune_claims = load("tune-job.yaml")
merge, mc, merge_claims = load("merge-job.yaml")
spec = tune["spec"]
cmd = [str(x) for x in tc["command"]]
check(spec.get("completionMode") == "Indexed", "tune-job.yaml: completionMode is not Indexed")
check(cmd[0] == "ktune-task", "tune-job.yaml: the command is not ktune-task")
check(cmd[1] == "$(JOB_COMPLETION_INDEX)", "tune-job.yaml: the task is not the completion index")
check(cmd[2] == str(spec.get("completions")) == str(spec.get("parallelism")),
      f"tune-job.yaml: ktune-task's count {cmd[2]}, completions {spec.get('completions')} and "
      f"parallelism {spec.get('parallelism')} differ")
check(tc["resources"]["limits"].get("nvidia.com/gpu", 0) >= 1, "tune-job.yaml: no GPU asked")
check(mc["command"][0] == "ktune-merge", "merge-job.yaml: the command is not ktune-merge")
check(mc["command"][1] == cmd[4], f"merge-job.yaml merges {mc['command'][1]}, the tasks write {cmd[4]}")
check(tune_claims == merge_claims and tune_claims, "the Jobs do not share one volume claim")
task = os.path.join(ROOT, "fleet", "ktune-task")
check(os.access(task, os.X_OK), "fleet/ktune-task is not executable")
if errors:
    print("\n".join(f"test_fleet_manifests: {e}" for e in errors), file=sys.stderr)
    sys.exit(1)
print("test_fleet_manifests: ok")
