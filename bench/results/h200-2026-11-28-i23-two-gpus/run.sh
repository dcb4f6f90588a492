#!/bin/bash
# Issue 23 on the lent nvidia-h200-x2: does a second GPU halve a batch? bench/gpu_scaling tunes
# the first LIMIT bench cases, BUDGET seconds each, on GPU 0 alone and then on GPUs 0 and 1
# (one ktuned, a worker a GPU), fresh caches; carry dist-device. From the repository root.
set -u
export LD_LIBRARY_PATH=$PWD/dist-device/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
date -u +%FT%TZ > "$OUT/times.txt"
{ nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv; nproc; } > "$OUT/device.txt"
python3 bench/gpu_scaling --gpus 0,1 --limit "${LIMIT:-24}" --budget "${BUDGET:-8}" \
  --work "$OUT/work" --out "$OUT/scaling.json" 2>&1 | tee "$OUT/scaling.log"
echo "gpu_scaling rc=${PIPESTATUS[0]}" | tee -a "$OUT/scaling.log"
date -u +%FT%TZ >> "$OUT/times.txt"
# the logs back as one archive (at most eight files come back); the caches stay
(cd "$OUT/work" && tar -czf "$OUT/logs.tgz" ktuned-*.log batch.jsonl) && rm -rf "$OUT/work"
