#!/bin/bash
# Session 7, call 5: scripts/probe_value_timing.cu (does the GPU time some operand values
# differently on HMMA, MUFU.EX2, FFMA?), twice, now with subnormal operands too.
set -u
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,power.limit --format=csv > $L/gpu.txt
date -u >> $L/gpu.txt
nvcc -arch=sm_90 -O3 -o /tmp/probe_values scripts/probe_value_timing.cu > $L/nvcc.log 2>&1 || { cat $L/nvcc.log; exit 1; }
cuobjdump -sass /tmp/probe_values | grep -E "HMMA|MUFU|FFMA" | awk '{print $2}' | sort | uniq -c > $L/sass-ops.txt
for i in 1 2; do timeout 120 /tmp/probe_values 2000 > $L/probe-$i.log 2>&1; echo "rc=$?" >> $L/probe-$i.log; done
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv >> $L/gpu.txt
cat $L/gpu.txt $L/sass-ops.txt $L/probe-*.log
