#!/bin/bash
# Issue 19 on the lent H200, call 2: the plain 16-bit GEMMs where the last wave is partial
# (4096^3 bf16 and f16: 512 tiles of 128 x 256 on 132 SMs, 3.9 waves; the Llama-3-8B O and down
# projections), the search free to take stream-K or its data-parallel twin or cuBLASLt; PyTorch
# eager and torch.compile timed in the same run. From the repository root, dist-device/ carried.
set -u
date -u +%FT%TZ > "$OUT/times.txt"
KTUNE_BENCH_ONLY=gemm_bf16_4096x4096x4096,gemm_f16_4096x4096x4096,llama3_8b_o_bf16_4096x4096x4096,llama3_8b_down_bf16_4096x4096x14336 \
  KTUNE_BENCH_TOTAL=${TOTAL:-280} KTUNE_BENCH_PEERS=eager,compile scripts/device-run bench > "$OUT/bench.txt" 2>&1
echo "bench rc=$?"; tail -14 "$OUT/bench.txt"
date -u +%FT%TZ >> "$OUT/times.txt"
