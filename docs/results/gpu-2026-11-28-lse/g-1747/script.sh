#!/bin/bash
# Session 6, call 7: the raw entry point through the one with_path! (the varlen fix restated):
# cuda_kvcache, the Python package's selftest, varlen and lse checks.
set -u
L=$OUT/logs; mkdir -p $L
S=$L/summary.txt
tar -C .carry -xJf .carry/bundle.tar.xz bin/detattn
xz -dc .carry/plant/kv-macro.xz > .carry/plant/kv; chmod +x .carry/plant/kv
timeout 200 .carry/plant/kv --test-threads 4 > $L/test-cuda_kvcache.log 2>&1
echo "cuda_kvcache rc=$? $(grep -E '^test result' $L/test-cuda_kvcache.log | tail -1)" >> $S
python3 -m pip install -q --no-deps --target /tmp/pyd python/dist/*.whl > $L/pip.log 2>&1
(cd /tmp && PYTHONPATH=/tmp/pyd timeout 200 python3 $OLDPWD/scripts/python-gpu.py --cli $OLDPWD/.carry/bin/detattn --out $L --only env,selftest,cli,lse,varlen,threads) > $L/python-gpu.log 2>&1
echo "python-gpu rc=$?" >> $S; grep -E "^  (PASS|FAIL)|checks passed" $L/python-gpu.log >> $S
cd $OUT && tar czf logs.tar.gz logs
