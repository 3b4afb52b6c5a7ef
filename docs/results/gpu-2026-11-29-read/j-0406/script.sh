#!/bin/bash
# Session 10, call 11 (2026-11-29): py_call_cost with the final wheel (1d00ec4: the Python wrapper's
# dtype tags by object), three runs; the Python package's GPU checks once more.
set -u
R=${OUT:?}; O=/tmp/o; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version --format=csv > $O/gpu.txt; date -u >> $O/gpu.txt
python3 -m pip install -q --no-deps --target /tmp/pynew python/dist/*.whl > $O/pip.log 2>&1
PYTHONPATH=/tmp/pynew python3 scripts/python-gpu.py --only env,selftest,paged,varlen,lse,stream,nocopy,threads --out $O > $O/python-gpu.txt 2>&1
for r in 1 2 3; do
  PYTHONPATH=/tmp/pynew python3 scripts/py_call_cost.py --burst 100 --json $O/pycost-$r.json > $O/pycost-$r.txt 2>&1
done
cd /tmp && tar czf $R/logs.tar.gz o
tail -3 $O/python-gpu.txt | cut -c1-120
for f in $O/pycost-*.txt; do echo "== $f"; grep -E 'detattn|sdpa cudnn' $f; done
