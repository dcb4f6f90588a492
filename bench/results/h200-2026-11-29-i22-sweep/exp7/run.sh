#!/usr/bin/env bash
# Call 7 (issue 22): where the row family's cost model and its measured times part. Each graph is
# tuned alone with a long budget (ktune tune --local, every candidate verified before it is
# timed, CUPTI, L2 scrubbed when the I/O passes a quarter of L2), then its trial log is dumped, so
# the measured time of most candidates can be set against `ktune space --list --json`'s estimate.
#   bash bench/results/h200-2026-11-29-i22-sweep/exp7/run.sh   (on the GPU machine, OUT set)
set -u
cd "$(dirname "$0")/../../../.."
E=bench/results/h200-2026-11-29-i22-sweep/exp7
export KTUNE_SOURCE_ROOT=$PWD LD_LIBRARY_PATH=$PWD/dist-device/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export KTUNE_WORKER=$PWD/dist-device/bin/ktune-worker KTUNE_NVRTC=$PWD/dist-device/bin/ktune-nvrtc
K=dist-device/bin/ktune
C=$OUT/cache
one() { # NAME GRAPH SHAPES|- BUDGET
  local shape=(); [ "$3" = - ] || shape=(--shape "$3")
  echo "== $1 $2 $3 $(date -u +%T)"
  $K tune "$2" "${shape[@]}" --local --cache "$C" --budget "$4" --quiet --json > "$OUT/$1.json" 2> "$OUT/$1.err"
  echo "rc $? $(date -u +%T)"
  $K trials "$2" "${shape[@]}" --cache "$C" --json > "$OUT/$1-trials.json" 2>> "$OUT/$1.err"
}
one rmsnorm_bf16_2048x8192 bench/cases/llm_rmsnorm_bf16.json M=2048 ${BUDGET:-75s}
one softmax_f32_1Mx64 bench/cases/kb_l1_softmax.json B=1048576,D=64 ${BUDGET:-75s}
one layernorm_bf16_1x16M $E/sw_row_layernorm_bf16_1x16M.json - ${BUDGET:-75s}
one layernorm_f32_64x256K $E/sw_row_layernorm_f32_64x256K.json - ${BUDGET:-75s}
one pointwise_row_gelu_f32_16Kx4K $E/sw_pointwise_f32_row_gelu_16Kx4K.json - ${BUDGET:-60s}
rm -rf "$C/cubins"
tar -C "$OUT" -czf "$OUT/cache.tgz" cache && rm -rf "$C"
