#!/bin/bash
# Session 10, call 1 (2026-11-29): HEAD e89d1a4's binaries (the early merge gated on the driver's
# version) through selftest and the GPU tests; the probes stage (now with probe_read_bound.cu:
# the best read of issue 11's 67 and 134 MB caches by the rows' protocol, and a chunk read by a
# cluster of two SMs).
set -u
R=${OUT:?}; export OUT=/tmp/o; mkdir -p $OUT
bash scripts/gpu-session.sh info selftest tests probes > $OUT/session.txt 2>&1
rm -f $OUT/probe_load $OUT/probe_read $OUT/probe_launch
cd /tmp && tar czf $R/logs.tar.gz o
tail -30 $OUT/session.txt; grep -A40 'ceiling (1 GiB' $OUT/probes.log
