#!/bin/bash
# Session 9, call 3: what one block's copies alone reach at 64 and 128 blocks (scripts/probe_load_rate.cu),
# and the decode grid with SDPA, the ceiling and same-bytes copies at 10 calls a sample.
set -u
L=$OUT/logs; mkdir -p $L
S=$L/summary.txt
tar -C .carry -xJf .carry/bundle.tar.xz
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/gpu.txt; date -u >> $L/gpu.txt
nvcc -arch=sm_90a -O3 -o /tmp/probe_load scripts/probe_load_rate.cu > $L/nvcc.log 2>&1; echo "nvcc rc=$?" >> $S
timeout 120 /tmp/probe_load > $L/probe.txt 2>&1; echo "probe rc=$?" >> $S
cat $L/probe.txt >> $S
timeout 300 python3 scripts/gpu_compare.py .carry/bin/detattn $L/compare-ps10.json --paths tensorcore --per-sample 10 --only dec1,decode,g1_s8k_h1,g1_s128k_h1,g2_s8k_h8,g1_s32k_h8,g2_s128k_h1,g8_s32k_h1,g32_s8k_h1 > $L/compare-ps10.log 2>&1
echo "compare ps10 rc=$?" >> $S
date -u >> $S
cd $OUT && tar czf logs.tar.gz logs
