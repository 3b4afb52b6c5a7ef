#!/bin/bash
# Session 6, call 4: P1, P2, P4 (dec_scores' first tile issued before the query rows) through the
# override, against c682dac's binary (old).
set -u
L=$OUT/logs; mkdir -p $L
S=$L/summary.txt
mkdir -p .carry/exp && tar -C .carry/exp -xJf .carry/exp.tar.xz
xz -dc .carry/old/detattn-c682dac.xz > .carry/old/detattn-old; chmod +x .carry/old/detattn-old
OLD=.carry/old/detattn-old; XB=.carry/exp/bin/detattn; X=.carry/exp
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $L/gpu.txt
date -u >> $L/gpu.txt; cat $L/gpu.txt >> $S
DETATTN_TEST_CUBIN_DIR=$X/cubin-P1 timeout 150 $X/tests/cuda_exact --test-threads 4 > $L/test-cuda_exact-P1.log 2>&1
echo "cuda_exact via P1 rc=$? $(grep -E '^test result' $L/test-cuda_exact-P1.log | tail -1)" >> $S
ab() {
  local lab=$1; shift
  local line="$lab"
  for i in 1 2; do for b in old P4 P1 P2; do
    local bin=$XB e="DETATTN_TEST_CUBIN_DIR=$X/cubin-$b"
    [ $b = old ] && { bin=$OLD; e=""; }
    us=$(env $e timeout 60 $bin bench --backend cuda --path exact "$@" --iters 30 --warmup 5 --json 2>>$L/ab.err \
      | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["median_us"],1))')
    line="$line $b=$us"
  done; done
  echo "$line" | tee -a $L/ab.txt >> $S
}
G="--q-heads 32 --kv-heads 8 --q-len 1 --head-dim 128"
ab dec1-bf16 --dtype bf16 $G --kv-len 32768
ab b2-s8k --dtype bf16 --batch 2 $G --kv-len 8192
ab b32-s8k --dtype bf16 --batch 32 $G --kv-len 8192
ab r16-bf16 --dtype bf16 --q-heads 16 --kv-heads 1 --q-len 1 --head-dim 128 --kv-len 32768
for b in P4 P1 P2; do
  DETATTN_TEST_CUBIN_DIR=$X/cubin-$b timeout 60 ncu --clock-control none --metrics gpu__time_duration.sum --csv -k regex:detattn_dec_scores $XB bench --backend cuda \
    --path exact --dtype bf16 $G --kv-len 32768 --warmup 1 --iters 1 > $L/ncu-dec1-$b.csv 2>&1
  echo "ncu dec1 $b: $(grep -E 'gpu__time_duration' $L/ncu-dec1-$b.csv | awk -F'","' '{print $NF}' | tr -d '"' | tr '\n' ' ')" >> $S
done
echo "total ${SECONDS}s" >> $S
cd $OUT && tar czf logs.tar.gz logs
