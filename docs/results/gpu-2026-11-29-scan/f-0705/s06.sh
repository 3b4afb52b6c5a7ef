#!/bin/bash
# Session 11, call 6 (2026-11-29): dudect under Reject on the final binaries (9964189): the
# TensorCore split decode (twice), a TensorCore prefill, the Exact decode and an Exact prefill.
set -u
R=${OUT:?}; export OUT=/tmp/o; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
bash scripts/gpu-session.sh info > $OUT/session.txt 2>&1
B=.carry/bin/detattn-dudect
run() { echo "=== $*" >> $OUT/dudect.txt; timeout 100 $B --backend cuda --policy reject --n 10000 "$@" >> $OUT/dudect.txt 2>&1; echo "rc=$?" >> $OUT/dudect.txt; }
run --path tensorcore --heads 8 --q-len 1 --kv-len 4200 --head-dim 128
run --path tensorcore --heads 8 --q-len 1 --kv-len 4200 --head-dim 128
run --path tensorcore --heads 4 --q-len 256 --kv-len 256 --head-dim 64 --dtype f16
run --path exact --heads 8 --q-len 1 --kv-len 1024 --head-dim 128 --dtype bf16
run --path exact --heads 2 --q-len 64 --kv-len 200 --head-dim 64 --dtype f32
cd /tmp && tar czf $R/logs.tar.gz o
cat $OUT/gpu.txt; grep -E '^===|problem:|zeros|subnormals|huge|onehot|all-|result|rc=' $OUT/dudect.txt
