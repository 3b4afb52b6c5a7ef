#!/bin/bash
# Session 11, call 7 (2026-11-29): the TensorCore split decode under Reject, dudect, d9f75e5's
# binary (the old scan) and the final one (9964189) alternating, three runs each.
set -u
R=${OUT:?}; export OUT=/tmp/o; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
bash scripts/gpu-session.sh info > $OUT/session.txt 2>&1
tar xJf .carry/bin-d9.tar.xz -C .carry
for r in 1 2 3; do for b in bin-d9 bin; do
  echo "=== $b run $r" >> $OUT/dudect.txt
  timeout 60 .carry/$b/detattn-dudect --backend cuda --policy reject --n 10000 --path tensorcore --heads 8 --q-len 1 --kv-len 4200 --head-dim 128 >> $OUT/dudect.txt 2>&1; echo "rc=$?" >> $OUT/dudect.txt
done; done
cd /tmp && tar czf $R/logs.tar.gz o
grep -E '^===|zeros|subnormals|result' $OUT/dudect.txt
