#!/bin/bash
# Session 8, call 1: HEAD 42b7181 (d757c17 never ran on a GPU): selftest, GPU tests, the Python
# package's selftest/paged/varlen; then where a small decode call's time goes: detattn bench at 1
# and 10 calls a sample, each kernel's duration (Nsight Compute), SDPA and the copy ceiling.
set -u
L=$OUT/logs; mkdir -p $L
S=$L/summary.txt
tar -C .carry -xJf .carry/bundle.tar.xz
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/gpu.txt; date -u >> $L/gpu.txt
NEW=.carry/bin/detattn
timeout 100 $NEW selftest > $L/selftest.log 2>&1; echo "selftest rc=$? $(tail -1 $L/selftest.log)" >> $S
for t in cuda_kvcache cuda_exact cuda_layouts cuda_reliability cuda_tensorcore; do
  timeout 200 .carry/tests/$t --test-threads 4 > $L/test-$t.log 2>&1
  echo "test $t rc=$? $(grep -E '^test result' $L/test-$t.log | tail -1)" >> $S
done
python3 -m pip install -q --no-deps --target /tmp/pyd python/dist/*.whl > $L/pip.log 2>&1
(cd /tmp && PYTHONPATH=/tmp/pyd timeout 200 python3 $OLDPWD/scripts/python-gpu.py --cli $OLDPWD/.carry/bin/detattn --out $L/py --only env,selftest,paged,varlen) > $L/python-gpu.log 2>&1
echo "python-gpu rc=$? $(tail -2 $L/python-gpu.log | tr '\n' ' ')" >> $S
# Where the time goes: bench at 1 and 10 calls a sample.
grid=( "1 8192 1" "1 131072 1" "2 8192 8" "1 32768 8" "2 131072 1" "8 32768 1" "32 8192 1" )
for g in "${grid[@]}"; do
  set -- $g; A="--backend cuda --path tensorcore --dtype bf16 --batch $1 --q-heads $((4*$3)) --kv-heads $3 --q-len 1 --kv-len $2 --head-dim 128"
  line="tc B$1 S$2 H$3:"
  for ps in 1 10 1 10; do
    us=$($NEW bench $A --iters 30 --warmup 5 --per-sample $ps --json 2>>$L/bench.err | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["median_us"],1))')
    line="$line ps$ps=$us"
  done
  $NEW bench $A --warmup 1 --iters 2 > /dev/null 2>&1
  timeout 100 ncu --clock-control none --metrics gpu__time_duration.sum --csv -k regex:tc_ $NEW bench $A --warmup 0 --iters 3 > $L/ncu-B$1-S$2-H$3.csv 2>&1
  line="$line | ncu: $(grep gpu__time_duration $L/ncu-B$1-S$2-H$3.csv | awk -F'","' '{print $5"="$NF}' | tr -d '"' | sed 's/_bf16_d128//' | tr '\n' ' ')"
  echo "$line" >> $S
done
G="--q-heads 32 --kv-heads 8 --q-len 1 --head-dim 128 --dtype bf16"
for path in exact tensorcore; do
  line="$path dec1:"
  for ps in 1 10 1 10; do
    us=$($NEW bench --backend cuda --path $path $G --kv-len 32768 --iters 30 --warmup 5 --per-sample $ps --json 2>>$L/bench.err | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["median_us"],1))')
    line="$line ps$ps=$us"
  done
  timeout 100 ncu --clock-control none --metrics gpu__time_duration.sum --csv $NEW bench --backend cuda --path $path $G --kv-len 32768 --warmup 0 --iters 2 > $L/ncu-dec1-$path.csv 2>&1
  line="$line | ncu: $(grep gpu__time_duration $L/ncu-dec1-$path.csv | awk -F'","' '{print $5"="$NF}' | tr -d '"' | sed 's/_bf16_d128//' | tr '\n' ' ')"
  echo "$line" >> $S
done
timeout 400 python3 scripts/gpu_compare.py $NEW $L/compare.json --paths tensorcore,exact --only dec1,decode,g1_s128k_h1,g2_s8k_h8,g1_s32k_h8,g2_s128k_h1,g8_s32k_h1,g32_s8k_h1 > $L/compare.log 2>&1
echo "compare rc=$?" >> $S
cd $OUT && tar czf logs.tar.gz logs
