#!/bin/bash
# Session 11, call 8 (2026-11-29): the review's test refactor (gpu_common::reject_problems shared
# by both paths' reject_scan_finds_a_nonfinite_anywhere): the two tests on the GPU.
set -u
R=${OUT:?}; export OUT=/tmp/o; mkdir -p $OUT
bash scripts/gpu-session.sh info > $OUT/session.txt 2>&1
for t in cuda_exact cuda_tensorcore; do
  timeout 200 .carry/tests/$t reject_scan_finds_a_nonfinite_anywhere --nocapture > $OUT/$t.txt 2>&1; echo "rc=$?" >> $OUT/$t.txt
done
cd /tmp && tar czf $R/logs.tar.gz o
grep -h -E 'device calls|test result|rc=' $OUT/cuda_*.txt
