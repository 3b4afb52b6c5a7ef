#!/bin/bash
# 2026-11-29 call 4: the SASS source page of b-1222's Nsight Compute report of dec_pipe (second
# form), for scripts/ncu_segments.py: where its warps spent their samples.
set -u
R=${OUT:?}; export OUT=/tmp/o; rm -rf $OUT; mkdir -p $OUT
date -u > $OUT/date.txt
xz -dc .carry/pipe-rep.xz > /tmp/pipe.ncu-rep
timeout 300 ncu --import /tmp/pipe.ncu-rep --page source --csv --print-source sass > $OUT/pipe-source.csv 2> $OUT/import.err
ls -la $OUT; head -c 600 $OUT/pipe-source.csv
python3 scripts/ncu_segments.py $OUT/pipe-source.csv 30 > $OUT/segments.txt 2>&1
head -60 $OUT/segments.txt
cd /tmp && tar czf $R/logs.tar.gz o
