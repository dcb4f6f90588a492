#!/bin/bash
# Issue 19 on the lent H200, call 4 (call 3 again after stream-K shares out only the units past
# the whole waves): stream-K against its data-parallel twin and cuBLASLt, from
# the trial log. `ktune tune --local` (the search in this process, CUPTI, L2 scrubbed, finalists
# re-timed: docs/evaluation.md) on three bf16/f16 GEMMs: 3072 x 3072 x 4096 (288 tiles of 128 x
# 256 on 132 SMs: 2.2 waves, the last one 18% full), 4096^3 (3.9 waves) and DeepBench's 1760 x
# 128 x 1760 (14 tiles); then `ktune trials --json` of each. From the repository root,
# dist-device/ carried.
set -u
export KTUNE_SOURCE_ROOT=$PWD KTUNE_WORKER=$PWD/dist-device/bin/ktune-worker \
  KTUNE_NVRTC=$PWD/dist-device/bin/ktune-nvrtc
export LD_LIBRARY_PATH=$PWD/dist-device/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
date -u +%FT%TZ > "$OUT/times.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv > "$OUT/device.txt"
C=$(mktemp -d)/cache
X=$(mktemp -d)/streamk; mkdir -p "$X"
while read -r graph shapes; do
  tag=$(echo "$shapes" | tr -d 'MNK=' | tr ',' 'x')
  dist-device/bin/ktune tune "$graph" --shape "$shapes" --local --budget "${BUDGET:-45}s" \
    --cache "$C" --json > "$X/tune-$tag.json" 2> "$X/tune-$tag.err"
  echo "tune $graph $shapes rc=$?"
  dist-device/bin/ktune trials "$graph" --shape "$shapes" --cache "$C" --json > "$X/trials-$tag.json"
  python3 - "$X/tune-$tag.json" "$X/trials-$tag.json" <<'PY'
import json, sys
tune = json.load(open(sys.argv[1])); trials = json.load(open(sys.argv[2]))["trials"]
ok = [t for t in trials if t["status"] == "ok" and t["time_ns"] > 0]
def best(pred):
    c = [t for t in ok if pred(t["candidate"])]
    return (c[0]["time_ns"] / 1e3, c[0]["candidate"]) if c else (None, "-")
w = tune.get("winner") or {}
print("  winner %s  %.2f us; cuBLASLt %.2f us" % (w.get("schedule", "-"), (w.get("time_ns") or 0) / 1e3,
      (tune.get("baseline_ns") or 0) / 1e3))
for name, pred in (("stream-K", lambda c: "splitk_mode=stream" in c),
                   ("own, not stream-K", lambda c: "gemm " in c and "splitk_mode=stream" not in c),
                   ("cuBLASLt", lambda c: "library" in c)):
    t, c = best(pred)
    print("  best %-18s %s  %s" % (name, "%.2f us" % t if t else "-", c))
print("  trials: %d (%d verified and timed)" % (len(trials), len(ok)))
PY
done <<'EOF2'
bench/cases/gemm_bf16.json M=3072,N=3072,K=4096
bench/cases/gemm_bf16.json M=4096,N=4096,K=4096
bench/cases/deepbench_gemm_f16.json M=1760,N=128,K=1760
EOF2
tar -C "$(dirname "$X")" -czf "$OUT/streamk.tgz" streamk
date -u +%FT%TZ >> "$OUT/times.txt"
