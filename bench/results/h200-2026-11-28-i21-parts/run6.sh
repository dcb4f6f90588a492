#!/bin/bash
# Issue 21 on a lent multi-GPU H200 host: run4.sh with several parts a GPU, one after another.
# KB_GROUPS names one group a GPU, its parts joined by commas: KB_GROUPS="11,3 12,4" runs parts 11
# then 3 on GPU 0, 12 then 4 on GPU 1. Every part gets the time left of CALL seconds (the
# results JSON is written after every timed case, so a part cut short keeps what it timed).
# From the repository root, carry dist-device and build-kb.
set -u
start=$(date +%s)
date -u +%FT%TZ > "$OUT/times.txt"
nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv > "$OUT/device.txt"
groups=(${KB_GROUPS:?KB_GROUPS names the parts, one comma-separated group a GPU})
gpus=$(nvidia-smi --list-gpus | wc -l)
[ "${#groups[@]}" -le "$gpus" ] || { echo "run6.sh: ${#groups[@]} groups for $gpus GPUs" >&2; exit 2; }
run_group() { # GPU PARTS...
  local gpu=$1; shift
  for p in "$@"; do
    local left=$(( ${CALL:-570} - ($(date +%s) - start) ))
    [ "$left" -gt 30 ] || { echo "kernelbench part $p on GPU $gpu: no time left" >> "$OUT/kb-$p.txt"; continue; }
    KTUNE_BENCH_GPU=$gpu KTUNE_BENCH_COMPILE_JOBS=$(( $(nproc) / ${#groups[@]} )) \
      KTUNE_KB_LEVELS=1,2 KTUNE_KB_PART=$p/20 KTUNE_KB_TOTAL=${TOTAL:-120} \
      timeout "$left" scripts/device-run kernelbench > "$OUT/kb-$p.txt" 2>&1
    echo "kernelbench part $p on GPU $gpu rc=$? ($(date -u +%T))" >> "$OUT/kb-$p.txt"
    sleep 1 # distinct start seconds: work directories are named by time and GPU
  done
}
for i in "${!groups[@]}"; do
  run_group "$i" ${groups[$i]//,/ } &
  sleep 1
done
wait
date -u +%FT%TZ >> "$OUT/times.txt"
for d in "$OUT"/kernelbench-*/; do
  [ -d "$d" ] || continue
  p=$(basename "$d")
  cp build-bench/kb-${p#kernelbench-}/batch.json build-bench/kb-${p#kernelbench-}/ktuned.log "$d" 2>/dev/null
  rm -rf "$d/graphs"
done
grep -hE "^kb|cases ok|batch took|rc=" "$OUT"/kb-*.txt
# at most eight files come back: everything as one archive
(cd "$OUT" && tar -czf parts.tgz kernelbench-* kb-*.txt && rm -rf kernelbench-* kb-*.txt)
