#!/bin/bash
# Session 6, call 5: the Python package on torch CUDA tensors, every check (varlen and lse new).
set -u
L=$OUT/logs; mkdir -p $L
tar -C .carry -xJf .carry/bundle.tar.xz bin/detattn
python3 -m pip install -q --no-deps --target /tmp/pyd python/dist/*.whl > $L/pip.log 2>&1
(cd /tmp && PYTHONPATH=/tmp/pyd timeout 300 python3 $OLDPWD/scripts/python-gpu.py --cli $OLDPWD/.carry/bin/detattn --out $L) > $L/python-gpu.log 2>&1
echo "python-gpu rc=$?" >> $L/python-gpu.log
cd $OUT && tar czf logs.tar.gz logs
