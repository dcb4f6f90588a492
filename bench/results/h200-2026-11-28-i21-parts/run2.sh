#!/bin/bash
# Issue 21 on the lent H200: more parts of the whole suite in one call, as run1.sh does one:
# PARTS="2 3" runs bench/kernelbench --part 2/20 then 3/20 (problems in file order, each tuned
# with its share of KTUNE_KB_TOTAL, timed against eager and torch.compile), each cut at LIMIT
# seconds. From the repository root, carry dist-device and build-kb.
set -u
date -u +%FT%TZ > "$OUT/times.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv > "$OUT/device.txt"
for part in ${PARTS:-2 3}; do
  KTUNE_KB_LEVELS=1,2 KTUNE_KB_PART=$part/20 KTUNE_KB_TOTAL=${TOTAL:-150} \
    timeout "${LIMIT:-280}" scripts/device-run kernelbench > "$OUT/kb-$part.txt" 2>&1
  echo "kernelbench part $part rc=$?" | tee -a "$OUT/kb-$part.txt"
  date -u +%FT%TZ >> "$OUT/times.txt"
done
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
