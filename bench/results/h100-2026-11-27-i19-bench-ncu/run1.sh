#!/bin/bash
# Issue 19 on the lent H100: the gemm16 bench cases with store=tma (bench/run through
# scripts/device-run), then Nsight Compute on ktune's bf16 8192^3 kernel from that bench's cache
# and on cuBLAS's (torch) at the same shape. From the repository root, dist-device/ carried.
set -u
D=bench/results/h100-2026-11-27-i19-bench-ncu
export KTUNE_CACHE=$PWD/build-bench/cache
KTUNE_BENCH_GROUP=${GROUP:-gemm16} KTUNE_BENCH_TOTAL=${TOTAL:-240} scripts/device-run bench \
  > "$OUT/bench.txt" 2>&1
echo "bench rc=$?"; tail -25 "$OUT/bench.txt"
[ "${SKIP_NCU:-0}" = 1 ] && exit 0
export KTUNE_LIBRARY=$PWD/dist-device/lib/libktune.so PYTHONPATH=$PWD/client/python
export LD_LIBRARY_PATH=$PWD/dist-device/lib:/usr/local/cuda/lib64
NCU=$(ls /usr/local/cuda/bin/ncu 2>/dev/null || which ncu)
python3 $D/ncu_launch.py own "$KTUNE_CACHE" bench/cases/gemm_bf16.json 8192 8192 8192 bf16 \
  > "$OUT/ncu-own-info.txt" 2>&1
for who in own torch; do
  filt="regex:ktune_gemm"; [ $who = torch ] && filt="regex:gemm|sm90|cutlass"
  $NCU --set full --clock-control none --kernel-name "$filt" --launch-skip 3 --launch-count 1 \
    -o "$OUT/ncu-$who" python3 $D/ncu_launch.py $who "$KTUNE_CACHE" bench/cases/gemm_bf16.json \
    8192 8192 8192 bf16 > "$OUT/ncu-$who.log" 2>&1
  $NCU --import "$OUT/ncu-$who.ncu-rep" --print-summary none --page details 2>&1 |
    grep -E "Duration|Throughput|Pipe|Stall|stall|Eligible|Issued|L2 Hit|Registers|Shared Memory Config|Achieved|Grid|Block Size|Cluster|Function Name|  ktune|gemm" |
    head -60 > "$OUT/ncu-$who.txt"
  rm -f "$OUT/ncu-$who.ncu-rep"
  head -30 "$OUT/ncu-$who.txt"
done
