#!/bin/bash
# ktune tune --local on the 16-bit GEMM cases with the wgmma16 kernel in the search
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/dist-device/lib KTUNE_SOURCE_ROOT=$PWD KTUNE_WORKER=$PWD/dist-device/bin/ktune-worker KTUNE_NVRTC=$PWD/dist-device/bin/ktune-nvrtc KTUNE_WGMMA16=1
B=${BUDGET:-60s}
K=dist-device/bin/ktune
run() { name=$1; shift; $K tune "$@" --local --budget $B --cache /tmp/tcache --json > $OUT/tune-$name.json 2> $OUT/tune-$name.err; echo "== $name rc=$?"; python3 -c "
import json,sys; d=json.load(open('$OUT/tune-$name.json')); w=d.get('winner') or {}
print(' winner', w.get('family'), w.get('schedule'), round((w.get('time_ns') or 0)/1e3,1), 'us; baseline', round((d.get('baseline_ns') or 0)/1e3,1), 'us; trials', d['trials'], 'failures', d['failures'])
for g in w.get('groups',[]): print('  pick retimed', g.get('retimed'), 'p10/p90', round(g['p10_ns']/1e3,1), round(g['p90_ns']/1e3,1), 'reps', g['reps'], '| own', g.get('own_schedule'), round((g.get('own_ns') or 0)/1e3,1), 'us retimed', g.get('own_retimed'))
"; }
run g8192 bench/cases/gemm_bf16.json --shape M=8192,N=8192,K=8192
run g4096 bench/cases/gemm_bf16.json --shape M=4096,N=4096,K=4096
cp /tmp/tcache/data.mdb $OUT/data.mdb
