#!/bin/bash
# Issue 21 on the lent H200: the first part of the whole suite, KernelBench levels 1 and 2 split
# into 20 equal runs (bench/kernelbench --part 1/20, the problems in file order), each problem
# tuned with its share of KTUNE_KB_TOTAL and timed against eager and torch.compile. Merge the
# parts' results with bench/report.py A.json B.json --merged. From the repository root, carry
# dist-device and build-kb.
set -u
date -u +%FT%TZ > "$OUT/times.txt"
KTUNE_KB_LEVELS=1,2 KTUNE_KB_PART=${PART:-1/20} KTUNE_KB_TOTAL=${TOTAL:-150} \
  timeout 330 scripts/device-run kernelbench > "$OUT/kb.txt" 2>&1
echo "kernelbench rc=$?" | tee -a "$OUT/kb.txt"
# a run cut short by the timeout leaves its files unarchived: bring back what there is
for d in "$OUT"/kernelbench-*/; do
  [ -d "$d" ] || continue
  p=$(basename "$d")
  cp build-bench/kb-${p#kernelbench-}/batch.json build-bench/kb-${p#kernelbench-}/ktuned.log "$d" 2>/dev/null
  rm -rf "$d/graphs"
  tar -C "$OUT" -czf "$OUT/$p.tgz" "$p" && rm -rf "$d"
done
grep -E "^kb|cases ok|batch took" "$OUT/kb.txt"
date -u +%FT%TZ >> "$OUT/times.txt"
