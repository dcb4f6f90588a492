#!/bin/bash
# Issue 20: Nsight Compute on ktune's D128 attention kernels (non-causal and causal, B2 H32 S4096,
# from the cache the attention bench left in build-bench/cache on this warm machine) and on
# PyTorch's SDPA at the same shapes. From the repository root, dist-device/ carried; one file back.
set -u
D=bench/results/h100-2026-11-27-i20-attention
export KTUNE_CACHE=$PWD/build-bench/cache
export KTUNE_LIBRARY=$PWD/dist-device/lib/libktune.so PYTHONPATH=$PWD/client/python
export LD_LIBRARY_PATH=$PWD/dist-device/lib:/usr/local/cuda/lib64
NCU=$(ls /usr/local/cuda/bin/ncu 2>/dev/null || which ncu)
N=$(mktemp -d)
for g in full causal; do
  G=bench/cases/attention_f16_d128_$g.json
  for who in own torch; do
    filt="regex:ktune_attention"; [ $who = torch ] && filt="regex:flash|fmha|attention|sm90"
    $NCU --set full --clock-control none --kernel-name "$filt" --launch-skip 3 --launch-count 1 \
      -o "$N/ncu-$g-$who" python3 $D/ncu_attn.py $who "$KTUNE_CACHE" $G 2 32 4096 \
      > "$N/ncu-$g-$who.log" 2>&1
    { echo "==== $g $who"; tail -3 "$N/ncu-$g-$who.log";
      $NCU --import "$N/ncu-$g-$who.ncu-rep" --print-summary none --page details 2>&1 |
      grep -E "Duration|Throughput|Pipe|Stall|stall|Eligible|Issued|L2 Hit|Registers|Achieved|Grid|Block Size|Function Name|  ktune|flash|fmha" |
      head -45; } >> "$OUT/ncu-d128.txt"
  done
done
head -c 4000 "$OUT/ncu-d128.txt"
