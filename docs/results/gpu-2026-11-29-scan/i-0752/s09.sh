#!/bin/bash
# Session 11, call 9 (2026-11-29): the review's build (Exact prepare without blockIdx.z; the scan's
# word counts in one place). selftest, every GPU test binary, then issue 11's decode rows with SDPA.
set -u
R=${OUT:?}; export OUT=/tmp/o; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/gpu.txt 2>&1
bash scripts/gpu-session.sh info selftest tests > $OUT/session.txt 2>&1
cd /tmp && tar czf $R/logs.tar.gz o; cd - > /dev/null
tail -7 $OUT/session.txt
timeout 100 python3 scripts/gpu_compare.py .carry/bin/detattn $OUT/compare.json --paths tensorcore,exact --only dec1,decode > $OUT/compare.log 2>&1
echo "compare rc=$?"
cd /tmp && tar czf $R/logs.tar.gz o
tail -25 $OUT/compare.log
