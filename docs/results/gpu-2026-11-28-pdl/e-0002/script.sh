#!/bin/bash
# Session 8, call 5: dec_scores' exponent pass through the largest magnitude's bits (one integer
# max an element). Checks, A/B against 42b7181's binary (the same Exact kernels as 6a397af), the
# kernel's time and instruction count, dudect and memcheck of a decode.
set -u
L=$OUT/logs; mkdir -p $L
S=$L/summary.txt
tar -C .carry -xJf .carry/bundle.tar.xz
xz -dc .carry/old/detattn-42b7181.xz > /tmp/detattn-old && chmod +x /tmp/detattn-old
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/gpu.txt; date -u >> $L/gpu.txt
NEW=.carry/bin/detattn
timeout 60 $NEW selftest > $L/selftest.log 2>&1; echo "selftest rc=$? $(tail -1 $L/selftest.log)" >> $S
for t in cuda_exact cuda_kvcache; do
  timeout 60 .carry/tests/$t --test-threads 4 > $L/test-$t.log 2>&1
  echo "test $t rc=$? $(grep -E '^test result' $L/test-$t.log | tail -1)" >> $S
done
run_bin() { local b=$1; shift; if [ $b = new ]; then $NEW "$@"; else /tmp/detattn-old "$@"; fi; }
ab() {
  local lab=$1; shift; local line="$lab"
  for i in 1 2; do for b in old new; do
    us=$(run_bin $b bench --backend cuda --path exact "$@" --iters 25 --warmup 3 --json 2>>$L/ab.err | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["median_us"],1))')
    line="$line $b=$us"
  done; done
  echo "$line" | tee -a $L/ab.txt >> $S
}
G="--q-heads 32 --kv-heads 8 --q-len 1 --head-dim 128"
ab b32-bf16 --dtype bf16 --batch 32 $G --kv-len 8192
ab dec1-bf16 --dtype bf16 $G --kv-len 32768
ab b8-bf16 --dtype bf16 --batch 8 $G --kv-len 8192
ab dec1-f32 --dtype f32 $G --kv-len 32768
ab dec1-f16-d64 --dtype f16 --q-heads 32 --kv-heads 8 --q-len 1 --head-dim 64 --kv-len 32768
for b in old new; do
  if [ $b = new ]; then B=$NEW; else B=/tmp/detattn-old; fi
  timeout 60 ncu --clock-control none --metrics gpu__time_duration.sum,smsp__inst_executed.sum --csv -k regex:detattn_dec_scores_bf16 \
    $B bench --backend cuda --path exact --dtype bf16 --batch 32 $G --kv-len 8192 --warmup 0 --iters 2 > $L/ncu-$b.csv 2>&1
  echo "ncu dec_scores B32 $b: $(grep -E 'gpu__time_duration|inst_executed' $L/ncu-$b.csv | awk -F'","' '{print $(NF-2)"="$NF}' | tr -d '"' | tr '\n' ' ')" >> $S
done
timeout 60 .carry/bin/detattn-dudect --backend cuda --n 10000 --q-len 1 --kv-len 1024 --heads 8 --head-dim 128 --dtype bf16 > $L/dudect.log 2>&1
echo "dudect decode bf16 rc=$? $(grep -E 'result:' $L/dudect.log | tail -1)" >> $S
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 $NEW run --backend cuda --path exact --dtype f16 --batch 2 \
  --q-heads 16 --kv-heads 2 --q-len 1 --kv-len 700 --head-dim 80 --kv-lens 700,260 --mask full > $L/san.log 2>&1
echo "memcheck rc=$? $(grep 'ERROR SUMMARY' $L/san.log)" >> $S
cd $OUT && tar czf logs.tar.gz logs
