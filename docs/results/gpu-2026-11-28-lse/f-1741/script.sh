#!/bin/bash
# Session 6, call 6: the raw-address entry point's varlen fix: cuda_kvcache with the fix and
# without it (must fail: the raw entry ran a packed batch as one sequence), the Python package.
set -u
L=$OUT/logs; mkdir -p $L
S=$L/summary.txt
tar -C .carry -xJf .carry/bundle.tar.xz bin/detattn
tar -C .carry/plant -xJf .carry/plant/kv.tar.xz
for t in kv-fixed kv-unfixed; do
  timeout 200 .carry/plant/$t --test-threads 4 > $L/test-$t.log 2>&1
  echo "$t rc=$? $(grep -E '^test result' $L/test-$t.log | tail -1)" >> $S
  grep -E "^test .*(ok|FAILED)$|panicked at|raw device" $L/test-$t.log | head -12 >> $S
done
python3 -m pip install -q --no-deps --target /tmp/pyd python/dist/*.whl > $L/pip.log 2>&1
(cd /tmp && PYTHONPATH=/tmp/pyd timeout 300 python3 $OLDPWD/scripts/python-gpu.py --cli $OLDPWD/.carry/bin/detattn --out $L) > $L/python-gpu.log 2>&1
echo "python-gpu rc=$?" >> $S; grep -E "^  (PASS|FAIL)|checks passed" $L/python-gpu.log >> $S
cd $OUT && tar czf logs.tar.gz logs
