#!/bin/bash
# Session 10, call 4 (2026-11-29): what a whole Python call costs (scripts/py_call_cost.py), with the
# wheel of the working tree (python/dist), beside SDPA; and `detattn bench` (launches only) for the same
# shapes.
set -u
R=${OUT:?}; O=/tmp/o; mkdir -p $O
[ -x .carry/bin/detattn ] || tar -C .carry -xJf .carry/bundle.tar.xz
nvidia-smi --query-gpu=name,driver_version --format=csv > $O/gpu.txt; date -u >> $O/gpu.txt
python3 -m pip install -q --no-deps --target /tmp/pyd python/dist/*.whl > $O/pip.log 2>&1
PYTHONPATH=/tmp/pyd python3 scripts/py_call_cost.py --json $O/py_call_cost.json > $O/py_call_cost.txt 2>&1
C="--backend cuda --dtype bf16 --q-len 1 --head-dim 128 --q-heads 32 --kv-heads 8 --warmup 5 --iters 30 --json"
for path in tensorcore exact; do
  for shape in "--batch 1 --kv-len 32768" "--batch 32 --kv-len 8192" "--batch 1 --kv-len 1024"; do
    for ps in 1 10; do
      echo "$path $shape ps$ps: $(.carry/bin/detattn bench --path $path $C $shape --per-sample $ps | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["median_us"], j.get("host_us"))')" >> $O/bench.txt
    done
  done
done
cd /tmp && tar czf $R/logs.tar.gz o
cat $O/py_call_cost.txt $O/bench.txt
