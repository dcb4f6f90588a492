#!/bin/bash
# Issue 20's Nsight summary with the tensor pipe's own counters: the bench tunes the two D128
# attention cases (a fresh cache on this machine), then Nsight Compute profiles the kernel the
# cache serves and PyTorch's SDPA at the same shapes (one launch after three, clocks left alone),
# printing duration, SM throughput, the tensor pipe's active cycles and instructions (HMMA, % of
# peak sustained) and the issue/stall lines. From the repository root, dist-device/ carried;
# logs under $OUT (run.txt, ncu-d128-tensor.txt, the bench's JSON and log).
set -u
exec > "$OUT/run.txt" 2>&1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/dist-device/lib:${LD_LIBRARY_PATH:-}
export KTUNE_WORKER=$PWD/dist-device/bin/ktune-worker KTUNE_NVRTC=$PWD/dist-device/bin/ktune-nvrtc
export KTUNE_CACHE=$PWD/build-bench/cache
KTUNE_BENCH_ONLY=attention_f16_d128_full_b2h32s4096,attention_f16_d128_causal_b2h32s4096 \
  KTUNE_BENCH_TOTAL=${TOTAL:-120} scripts/device-run bench
echo "bench rc=$?"
export KTUNE_LIBRARY=$PWD/dist-device/lib/libktune.so PYTHONPATH=$PWD/client/python
NCU=$(ls /usr/local/cuda/bin/ncu 2>/dev/null || which ncu)
M=sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
M=$M,sm__inst_executed_pipe_tensor_op_hmma.avg.pct_of_peak_sustained_active
M=$M,sm__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum
M=$M,smsp__issue_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed
N=$(mktemp -d)
for g in full causal; do
  G=bench/cases/attention_f16_d128_$g.json
  for who in own torch; do
    filt="regex:ktune_attention"; [ $who = torch ] && filt="regex:flash|fmha|attention|sm90"
    $NCU --metrics "$M" --clock-control none --kernel-name "$filt" --launch-skip 3 --launch-count 1 \
      python3 bench/results/h100-2026-11-27-i20-attention/ncu_attn.py $who "$KTUNE_CACHE" $G 2 32 4096 \
      > "$N/ncu-$g-$who.log" 2>&1
    { echo "==== $g $who (rc $?)"; grep -E "==PROF==|^  [a-z_]+.*\(|pipe_tensor|sm__throughput|gpu__time|issue_active|dram__" "$N/ncu-$g-$who.log" | head -20; } >> "$OUT/ncu-d128-tensor.txt"
  done
done
cat "$OUT/ncu-d128-tensor.txt"
