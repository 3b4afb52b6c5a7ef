#!/bin/bash
# Session 7, call 4: tests/override on the shipped build (needs kernels/cubin in the tree, which
# call 3 left out); and issue 13's open dudect item: the causal split prefill (bf16 D 128, 2
# heads, 512 rows, 4200 keys) that crossed 4.5 on the H200, beside the driver's memcpy of the
# same classes' K and V (the GPU's own dependence on the values moved), alternating.
set -u
L=$OUT/logs; mkdir -p $L
S=$L/summary.txt
pack() { (cd $OUT && tar czf logs.tar.gz logs); }
tar -C .carry -xJf .carry/bundle.tar.xz
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $L/gpu.txt
date -u >> $L/gpu.txt
timeout 120 .carry/tests/override --test-threads 1 > $L/test-override.log 2>&1
echo "test override rc=$? $(grep -E '^test result' $L/test-override.log | tail -1)" >> $S
pack
A="--backend cuda --path tensorcore --dtype bf16 --head-dim 128 --causal --heads 2 --q-len 512 --kv-len 4200 --n 10000"
for i in 1 2; do
  for k in library memcpy; do
    timeout 110 .carry/bin/detattn-dudect $A --kernel $k --json-out $L/dud-$k-$i.json > $L/dud-$k-$i.log 2>&1
    echo "dudect split-prefill $k run $i rc=$? $(grep -E 'result:' $L/dud-$k-$i.log | tail -1)" >> $S
    grep -E "PASS|FAIL" $L/dud-$k-$i.log | cut -c1-150 >> $S
    pack
  done
done
