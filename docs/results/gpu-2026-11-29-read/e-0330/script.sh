#!/bin/bash
# Session 10, call 6 (2026-11-29): the working tree's build (the merge early for every split decode;
# a call's memory in one allocation; one pointer query a tensor): selftest, every GPU test binary,
# the Python package's GPU checks; then scripts/py_call_cost.py with e89d1a4's wheel (old) and this
# one (new), alternating twice.
set -u
R=${OUT:?}; export OUT=/tmp/o; mkdir -p $OUT
bash scripts/gpu-session.sh info selftest tests > $OUT/session.txt 2>&1
python3 -m pip install -q --no-deps --target /tmp/pynew python/dist/*.whl > $OUT/pip.log 2>&1
python3 -m pip install -q --no-deps --target /tmp/pyold .carry/oldwheel/*.whl >> $OUT/pip.log 2>&1
PYTHONPATH=/tmp/pynew python3 scripts/python-gpu.py --cli .carry/bin/detattn --only env,selftest,paged,varlen,lse,stream --out $OUT > $OUT/python-gpu.txt 2>&1
for r in 1 2; do
  for w in old new; do
    PYTHONPATH=/tmp/py$w python3 scripts/py_call_cost.py --burst 100 --json $OUT/pycost-$w-$r.json > $OUT/pycost-$w-$r.txt 2>&1
  done
done
cd /tmp && tar czf $R/logs.tar.gz o
tail -12 $OUT/session.txt; tail -12 $OUT/python-gpu.txt
for f in $OUT/pycost-*.txt; do echo "== $f"; grep -E 'detattn (tensorcore|exact) propagate|sdpa cudnn' $f; done
