#!/bin/bash
# Session 12, call 6 (2026-11-29): the review's test change (the layout reject test also holds
# `out` untouched when a call is refused): cuda_exact's two reject tests, and the planted scan.
set -u
R=${OUT:?}; export OUT=/tmp/o; rm -rf $OUT; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/gpu.txt 2>&1
date -u > $OUT/date.txt
tar -C .carry -xJf .carry/bundle.tar.xz; tar xJf .carry/plants.tar.xz -C .carry
timeout 250 .carry/tests/cuda_exact reject_scan > $OUT/tests.txt 2>&1; echo "rc=$?" >> $OUT/tests.txt
DETATTN_TEST_CUBIN_DIR=$PWD/.carry/plant-exscan timeout 200 .carry/tests-override/cuda_exact reject_scan_reads_every_layout_and_nothing_else > $OUT/plant.txt 2>&1; echo "rc=$?" >> $OUT/plant.txt
cd /tmp && tar czf $R/logs.tar.gz o; cd - > /dev/null
cat $OUT/gpu.txt $OUT/date.txt; grep -E "calls|test result|rc=" $OUT/tests.txt; grep -E "test result|rc=" $OUT/plant.txt
