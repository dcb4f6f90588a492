#!/bin/bash
# Issue 19 on the lent H100: the gemm16 bench cases with store=tma (bench/run through
# scripts/device-run), then Nsight Compute on ktune's bf16 8192^3 kernel from that bench's cache
# and on cuBLAS's (torch) at the same shape. From the repository root, dist-device/ carried.
set -u
D=bench/results/h100-2026-11-27-i19-bench-ncu
export KTUNE_CACHE=$PWD/build-bench/cache
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  KTUNE_BENCH_GROUP=${GROUP:-gemm16} KTUNE_BENCH_TOTAL=${TOTAL:-240} scripts/device-run bench \
    > "$OUT/bench.txt" 2>&1
  echo "bench rc=$?"; tail -25 "$OUT/bench.txt"
fi
[ "${SKIP_NCU:-0}" = 1 ] && exit 0
export KTUNE_LIBRARY=$PWD/dist-device/lib/libktune.so PYTHONPATH=$PWD/client/python
export LD_LIBRARY_PATH=$PWD/dist-device/lib:/usr/local/cuda/lib64
NCU=$(ls /usr/local/cuda/bin/ncu 2>/dev/null || which ncu)
# one file back: the device tool returns 8 files at most
N=$(mktemp -d)
python3 $D/ncu_launch.py own "$KTUNE_CACHE" bench/cases/gemm_bf16.json 8192 8192 8192 bf16 \
  > "$N/own-info.txt" 2>&1
for who in own torch; do
  filt="regex:ktune_gemm"; [ $who = torch ] && filt="regex:gemm|sm90|cutlass"
  $NCU --set full --clock-control none --kernel-name "$filt" --launch-skip 3 --launch-count 1 \
    -o "$N/ncu-$who" python3 $D/ncu_launch.py $who "$KTUNE_CACHE" bench/cases/gemm_bf16.json \
    8192 8192 8192 bf16 > "$N/ncu-$who.log" 2>&1
  $NCU --import "$N/ncu-$who.ncu-rep" --print-summary none --page details 2>&1 |
    grep -E "Duration|Throughput|Pipe|Stall|stall|Eligible|Issued|L2 Hit|Registers|Shared Memory Config|Achieved|Grid|Block Size|Cluster|Function Name|  ktune|gemm" |
    head -60 > "$N/ncu-$who.txt"
done
for f in own-info.txt ncu-own.txt ncu-torch.txt ncu-own.log ncu-torch.log; do echo "==== $f"; cat "$N/$f"; done > "$OUT/ncu-8192.txt"
head -c 3000 "$OUT/ncu-8192.txt"
