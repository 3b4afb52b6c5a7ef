#!/bin/bash
# Session 9, call 5: what a bare launch costs the host (scripts/probe_launch_cost.cu), and where a
# detattn call's host time goes (an experiment binary timing the benchmark closure's phases).
set -u
L=$OUT/logs; mkdir -p $L
S=$L/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/gpu.txt; date -u >> $L/gpu.txt
nvcc -arch=sm_90a -O3 -o /tmp/probe_launch scripts/probe_launch_cost.cu -lcuda > $L/nvcc.log 2>&1; echo "nvcc rc=$?" >> $S
timeout 60 /tmp/probe_launch >> $S 2>&1
X=/tmp/detattn-phases; xz -dc .carry/hostexp/detattn-phases.xz > $X; chmod +x $X
G="--backend cuda --path tensorcore --dtype bf16 --head-dim 128 --q-len 1"
ph() { local lab=$1; shift; echo "$lab: $("$@" --iters 30 --warmup 5 --json 2>$L/ph.err | python3 -c 'import json,sys; j=json.load(sys.stdin); print(round(j["median_us"],1), round(j["host_us"],2))') :: $(grep EXP $L/ph.err)" >> $S; }
for ps in 1 10; do
  ph "floor tc ps$ps" $X bench --backend cuda --path tensorcore --dtype f16 --q-heads 1 --kv-heads 1 --q-len 1 --kv-len 16 --head-dim 64 --per-sample $ps
  ph "floor exact ps$ps" $X bench --backend cuda --path exact --dtype f16 --q-heads 1 --kv-heads 1 --q-len 1 --kv-len 16 --head-dim 64 --per-sample $ps
  ph "dec1 tc ps$ps" $X bench $G --batch 1 --q-heads 32 --kv-heads 8 --kv-len 32768 --per-sample $ps
  ph "W1 tc ps$ps" $X bench --backend cuda --path tensorcore --dtype f16 --q-heads 16 --kv-heads 16 --q-len 1024 --kv-len 1024 --head-dim 64 --per-sample $ps
done
date -u >> $S
cd $OUT && tar czf logs.tar.gz logs
