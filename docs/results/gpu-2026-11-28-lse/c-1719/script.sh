#!/bin/bash
# Session 6, call 3: dec_scores with 1, 2 or 4 tiles a block (S1, S2, S4) through the test-only
# override and a binary with the new launch table, against c682dac's binary (old).
set -u
L=$OUT/logs; mkdir -p $L
S=$L/summary.txt
mkdir -p .carry/exp && tar -C .carry/exp -xJf .carry/exp.tar.xz
xz -dc .carry/old/detattn-c682dac.xz > .carry/old/detattn-old; chmod +x .carry/old/detattn-old
OLD=.carry/old/detattn-old; XB=.carry/exp/bin/detattn; X=.carry/exp
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $L/gpu.txt
date -u >> $L/gpu.txt; cat $L/gpu.txt >> $S
for v in S1 S2; do
  DETATTN_TEST_CUBIN_DIR=$X/cubin-$v timeout 150 $X/tests/cuda_exact --test-threads 4 > $L/test-cuda_exact-$v.log 2>&1
  echo "cuda_exact via $v rc=$? $(grep -E '^test result' $L/test-cuda_exact-$v.log | tail -1)" >> $S
done
DETATTN_TEST_CUBIN_DIR=$X/cubin-S1 timeout 150 $X/tests/cuda_kvcache --test-threads 4 > $L/test-cuda_kvcache-S1.log 2>&1
echo "cuda_kvcache via S1 rc=$? $(grep -E '^test result' $L/test-cuda_kvcache-S1.log | tail -1)" >> $S
ab() {
  local lab=$1; shift
  local line="$lab"
  for i in 1 2; do for b in old S4 S1 S2; do
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
ab b8-s8k --dtype bf16 --batch 8 $G --kv-len 8192
ab b32-s8k --dtype bf16 --batch 32 $G --kv-len 8192
ab dec1-f32 --dtype f32 $G --kv-len 32768
ab dec1-f16-d64 --dtype f16 --q-heads 32 --kv-heads 8 --q-len 1 --head-dim 64 --kv-len 32768
ab r16-bf16 --dtype bf16 --q-heads 16 --kv-heads 1 --q-len 1 --head-dim 128 --kv-len 32768
for b in S4 S1 S2; do
  DETATTN_TEST_CUBIN_DIR=$X/cubin-$b timeout 60 ncu --clock-control none --metrics gpu__time_duration.sum,sm__warps_active.avg.pct_of_peak_sustained_active --csv -k regex:detattn_dec_scores $XB bench --backend cuda \
    --path exact --dtype bf16 $G --kv-len 32768 --warmup 1 --iters 1 > $L/ncu-dec1-$b.csv 2>&1
  echo "ncu dec1 $b: $(grep -E 'gpu__time_duration|warps_active' $L/ncu-dec1-$b.csv | awk -F'","' '{print $5":"$(NF-2)"="$NF}' | tr -d '"' | tr '\n' ' ')" >> $S
done
P=(
  "--dtype bf16 --batch 2 --q-heads 8 --kv-heads 2 --q-len 1 --kv-len 700 --head-dim 128 --kv-lens 700,260 --mask full --nonfinite propagate"
  "--dtype f16 --batch 2 --q-heads 4 --kv-heads 1 --q-len 3 --kv-len 530 --head-dim 64 --causal --causal-align top-left --kv-lens 530,7"
  "--dtype f16 --batch 3 --q-heads 2 --kv-heads 2 --q-len 1 --kv-len 2000 --head-dim 80 --kv-lens 2000,0,1999"
)
for tool in synccheck racecheck memcheck; do for a in "${P[@]}"; do
  DETATTN_TEST_CUBIN_DIR=$X/cubin-S1 timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 $XB run --backend cuda --path exact $a >> $L/sanS1.log 2>&1
  echo "san $tool rc=$?" >> $L/sanS1-rc.txt
done; done
sort $L/sanS1-rc.txt | uniq -c >> $S; grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" $L/sanS1.log | sort | uniq -c >> $S
echo "total ${SECONDS}s" >> $S
cd $OUT && tar czf logs.tar.gz logs
