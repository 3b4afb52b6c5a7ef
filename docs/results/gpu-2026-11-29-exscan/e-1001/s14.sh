#!/bin/bash
# Session 12, call 5 (2026-11-29): the session's last build (dc1faa1): the Python package's GPU
# checks, and issue 11's decode rows with SDPA in one command.
set -u
R=${OUT:?}; export OUT=/tmp/o; rm -rf $OUT; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
date -u > $OUT/date.txt
tar -C .carry -xJf .carry/bundle.tar.xz
python3 -m pip install -q --no-deps --target /tmp/pynew .carry/wheel-new/*.whl > $OUT/pip.log 2>&1
PYTHONPATH=/tmp/pynew timeout 150 python3 scripts/python-gpu.py --cli .carry/bin/detattn --out $OUT > $OUT/python-gpu.txt 2>&1
cd /tmp && tar czf $R/logs.tar.gz o; cd - > /dev/null
timeout 150 python3 scripts/gpu_compare.py .carry/bin/detattn $OUT/compare.json --paths tensorcore,exact --only dec1,decode > $OUT/compare.log 2>&1
echo "compare rc=$?"
cd /tmp && tar czf $R/logs.tar.gz o; cd - > /dev/null
cat $OUT/gpu.txt $OUT/date.txt; tail -12 $OUT/python-gpu.txt | cut -c1-160; tail -25 $OUT/compare.log
