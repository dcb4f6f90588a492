#!/bin/bash
# At the session's last kernel commit: the whole GPU suite (scripts/device-run gpu: every
# tests/gpu program, test_gpu_families at 4 candidates a family per case) -> gpu-suite.txt, then
# the bench's decode attention cases (run.sh's bench part, SKIP_CASES=1). From the repository
# root, dist-device/ carried.
set -u
G=$(mktemp -d)
OUT0=$OUT
OUT=$G KTUNE_GPU_PER_FAMILY=4 scripts/device-run gpu > "$OUT0/gpu-suite.txt" 2>&1
echo "gpu suite rc=$?" | tee -a "$OUT0/gpu-suite.txt"
cat "$G/test_gpu_families.log" >> "$OUT0/gpu-suite.txt" 2>/dev/null
grep -E "^FAIL|cases failed|exit|rc=" "$OUT0/gpu-suite.txt" | tail -20
SKIP_CASES=1 ONLY=${ONLY:-llama3_8b_gqa_decode_bf16_b16kv8192,llama3_8b_gqa_decode_bf16_b16kv32768} \
  TOTAL=${TOTAL:-100} bash "$(dirname "$0")/run.sh"
grep -E "ok .*vs best|geometric" "$OUT0/run.txt"
