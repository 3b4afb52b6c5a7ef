#!/bin/bash
# Session 9, call 8: issue 11's whole decode grid (TensorCore, one call a sample, SDPA, the copy
# ceiling and same-bytes copies in one command), caches up to 4.5 GB.
set -u
L=$OUT/logs; mkdir -p $L
S=$L/summary.txt
tar -C .carry -xJf .carry/bundle.tar.xz
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/gpu.txt; date -u >> $L/gpu.txt
timeout 470 python3 scripts/gpu_compare.py .carry/bin/detattn $L/grid.json --paths tensorcore --only grid --max-cache-gb 4.5 > $L/grid.log 2>&1
echo "grid rc=$?" >> $S
date -u >> $S
cd $OUT && tar czf logs.tar.gz logs
