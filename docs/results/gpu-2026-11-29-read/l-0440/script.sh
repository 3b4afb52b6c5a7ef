#!/bin/bash
# Session 10, call 13 (2026-11-29): HEAD 5671c98's binaries (the shipped cubins) through selftest and
# every GPU test binary.
set -u
R=${OUT:?}; export OUT=/tmp/o; mkdir -p $OUT
bash scripts/gpu-session.sh info selftest tests > $OUT/session.txt 2>&1
cd /tmp && tar czf $R/logs.tar.gz o
tail -6 $OUT/session.txt; grep -E 'test result|selftest PASSED' $OUT/tests.log $OUT/selftest.log
