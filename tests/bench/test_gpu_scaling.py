#!/usr/bin/env python3
"""bench/gpu_scaling end to end with the fake GPU worker (no GPU): two jobs tuned on one GPU,
then on two, into fresh caches; the JSON holds both wall times, their ratio, every job done in
both runs, and a verdict for every key. Environment: KTUNED_BIN, KTUNE_BIN, KTUNE_FAKE_WORKER."""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
with tempfile.TemporaryDirectory() as tmp:
    os.makedirs(os.path.join(tmp, "bin"))
    for name, env in (("ktuned", "KTUNED_BIN"), ("ktune", "KTUNE_BIN")):
        os.symlink(os.environ[env], os.path.join(tmp, "bin", name))
    out = os.path.join(tmp, "scaling.json")
    env = dict(os.environ, KTUNE_DIST=tmp, KTUNE_WORKER=os.environ["KTUNE_FAKE_WORKER"])
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "gpu_scaling"), "--gpus",
                        "0,1", "--only", "kb1_softmax_16x16384,kb1_sum_dim1_16x256x256", "--budget", "1",
                        "--out", out], env=env, capture_output=True, text=True, timeout=300)
    print(r.stderr)
    assert r.returncode == 0, f"exit {r.returncode}"
    with open(out) as f:
        d = json.load(f)
    assert d["jobs"] == 2 and d["budget_s_per_job"] == 1, d
    one, many = d["runs"]
    assert (one["gpus"], many["gpus"]) == ("0", "0,1"), d["runs"]
    for run in (one, many):
        assert run["counts"]["done"] == 2 and run["wall_s"] > 0, run
    assert abs(d["wall_ratio"] - many["wall_s"] / one["wall_s"]) < 1e-3
    assert sum(d["winners"].values()) == len(d["keys"]) == 2, d["winners"]
    assert all(k["verdict"] in ("same kernel", "tie", "one faster", "many faster") for k in d["keys"])
    bad = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "gpu_scaling"), "--gpus",
                          "0"], env=env, capture_output=True, text=True)
    assert bad.returncode == 2 and "two or more" in bad.stderr, bad.stderr
print("test_gpu_scaling: ok")
