#!/bin/bash
# Session 7, call 6: the copy control now copies a mask class's mask too (detattn-dudect built
# from the working tree); the causal split prefill's classes: memcpy, the kernel, memcpy,
# memcpy-reread.
set -u
L=$OUT/logs; mkdir -p $L
S=$L/summary.txt
tar -C .carry -xJf .carry/bundle.tar.xz
mkdir -p /tmp/dd && tar -C /tmp/dd -xJf .carry/dudect.tar.xz
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $L/gpu.txt
date -u >> $L/gpu.txt
A="--backend cuda --path tensorcore --dtype bf16 --head-dim 128 --causal --heads 2 --q-len 512 --kv-len 4200 --n 10000"
i=0
for k in memcpy library memcpy memcpy-reread; do
  i=$((i+1))
  timeout 110 /tmp/dd/detattn-dudect $A --kernel $k > $L/dud-$i-$k.log 2>&1
  echo "dudect $i $k rc=$? $(grep -E 'result:' $L/dud-$i-$k.log | tail -1)" >> $S
  grep -E "PASS|FAIL" $L/dud-$i-$k.log | cut -c1-150 >> $S
done
head -2 $L/dud-1-memcpy.log >> $S
cd $OUT && tar czf logs.tar.gz logs
