#!/bin/bash
# 2026-11-29 call 5: the shipped build (167a3cc's binary = HEAD's code) against SDPA: the decode
# targets of issue 11 on both paths, for the standing table.
set -u
R=${OUT:?}; export OUT=/tmp/o; rm -rf $OUT; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
date -u > $OUT/date.txt
tar xJf .carry/bin-old.tar.xz -C .carry
timeout 400 python3 scripts/gpu_compare.py .carry/bin-old/detattn $OUT/compare.json --paths tensorcore,exact --only dec1,decode > $OUT/compare.txt 2>&1
grep -B2 -A8 "#### " $OUT/compare.txt | grep -E "####|detattn|SDPA cudnn|copy of|Copy ceiling" | head -30
cd /tmp && tar czf $R/logs.tar.gz o
