#!/bin/bash
# Issue 21 on a lent multi-GPU H200 host (nvidia-h200-x2 or -x4): several KernelBench parts side
# by side, part k of PARTS on GPU k (bench/run's KTUNE_BENCH_GPU: its own ktuned, cache and
# compile processes, the harness on that GPU), each cut at LIMIT seconds. From the repository
# root, carry dist-device and build-kb. E.g. PARTS="5 6 7 8" bash run4.sh on four GPUs.
set -u
date -u +%FT%TZ > "$OUT/times.txt"
nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv > "$OUT/device.txt"
parts=(${PARTS:?PARTS names the parts, one a GPU})
gpus=$(nvidia-smi --list-gpus | wc -l)
[ "${#parts[@]}" -le "$gpus" ] || { echo "run4.sh: ${#parts[@]} parts for $gpus GPUs" >&2; exit 2; }
pids=()
for i in "${!parts[@]}"; do
  p=${parts[$i]}
  KTUNE_BENCH_GPU=$i KTUNE_BENCH_COMPILE_JOBS=$(( $(nproc) / ${#parts[@]} )) \
    KTUNE_KB_LEVELS=1,2 KTUNE_KB_PART=$p/20 KTUNE_KB_TOTAL=${TOTAL:-120} \
    timeout "${LIMIT:-500}" scripts/device-run kernelbench > "$OUT/kb-$p.txt" 2>&1 &
  pids+=($!)
  sleep 1 # distinct start seconds: the parts' work directories are named by time and GPU
done
for i in "${!pids[@]}"; do
  wait "${pids[$i]}"
  echo "kernelbench part ${parts[$i]} on GPU $i rc=$?" | tee -a "$OUT/kb-${parts[$i]}.txt"
done
date -u +%FT%TZ >> "$OUT/times.txt"
# a run cut short by the timeout leaves its files unarchived: bring back what there is
for d in "$OUT"/kernelbench-*/; do
  [ -d "$d" ] || continue
  p=$(basename "$d")
  cp build-bench/kb-${p#kernelbench-}/batch.json build-bench/kb-${p#kernelbench-}/ktuned.log "$d" 2>/dev/null
  rm -rf "$d/graphs"
  tar -C "$OUT" -czf "$OUT/$p.tgz" "$p" && rm -rf "$d"
done
grep -hE "^kb|cases ok|batch took|rc=" "$OUT"/kb-*.txt
# at most eight files come back: the logs as one archive
(cd "$OUT" && tar -czf logs.tgz kb-*.txt kernelbench-*.log && rm -f kb-*.txt kernelbench-*.log)
