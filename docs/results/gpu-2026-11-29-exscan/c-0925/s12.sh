#!/bin/bash
# Session 12, call 3 (2026-11-29): dudect of the Exact decodes under Reject (the timed call now
# scans with detattn_scan_*): this build's binary, and d9f75e5's (bin-d9: prepare's scan) as the
# control of the GPU's all-zero effect on the wide decode, alternating.
set -u
R=${OUT:?}; export OUT=/tmp/o; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
date -u > $OUT/date.txt
tar xJf .carry/bundle.tar.xz -C .carry 2>/dev/null; tar xJf .carry/bin-d9.tar.xz -C .carry
for b in bin bin-d9 bin; do
  for a in "--q-len 1 --kv-len 1024 --heads 8 --head-dim 128 --dtype bf16" "--batch 32 --q-len 1 --kv-len 256 --heads 4 --head-dim 128 --dtype bf16"; do
    echo "=== $b $a" >> $OUT/dudect.txt
    timeout 90 .carry/$b/detattn-dudect --backend cuda --path exact --policy reject --n 10000 $a >> $OUT/dudect.txt 2>&1; echo "rc=$?" >> $OUT/dudect.txt
    cd /tmp && tar czf $R/logs.tar.gz o; cd - > /dev/null
  done
done
cat $OUT/gpu.txt $OUT/date.txt
grep -E '^===|zeros|subnormals|huge|onehot|all-|result|rc=' $OUT/dudect.txt
