#!/bin/bash
# Session 9, call 9: scripts/probe_load_rate.cu with the reading blocks spread over the SMs (1 in 2,
# 1 in 4) against side by side: is the 64-block bound each SM's or that of shared paths?
set -u
L=$OUT/logs; mkdir -p $L
S=$L/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/gpu.txt; date -u >> $L/gpu.txt
nvcc -arch=sm_90a -O3 -o /tmp/probe_load scripts/probe_load_rate.cu > $L/nvcc.log 2>&1; echo "nvcc rc=$?" >> $S
timeout 120 /tmp/probe_load >> $S 2>&1; echo "probe rc=$?" >> $S
cd $OUT && tar czf logs.tar.gz logs
