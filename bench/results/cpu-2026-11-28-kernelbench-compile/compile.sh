#!/bin/bash
# Compile a spread of candidates of every captured KernelBench case with NVRTC (sm_90a).
cd /tmp/kb-dry2/graphs
out=/tmp/kb-compile; mkdir -p $out
python3 -c "
import json
for l in open('cases.jsonl'):
    c=json.loads(l); print(c['name'], c['graph'])
" | while read name graph; do
  /work/main/build/client/ktune compile "$graph" --limit 6 --jobs 2 --timeout 120 --emit $out/$name --json > $out/$name.json 2> $out/$name.err
  echo "$name rc=$? $(python3 -c "import json,sys; d=json.load(open('$out/$name.json')); print('compiled',d.get('compiled'),'failed',d.get('failed'),'spilled',d.get('spilled'))" 2>/dev/null)"
done
