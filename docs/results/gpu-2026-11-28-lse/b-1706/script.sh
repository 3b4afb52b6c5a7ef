#!/bin/bash
# Session 6, call 2: variant E embedded (the narrow values kernel's warp index through a shuffle)
# with the device log-sum-exp: every check of the shipped build, A/B against 376165b's binary (the
# previous kernels), kernel times, SDPA in one command, sanitizer, dudect, the Python selftest.
set -u
L=$OUT/logs; mkdir -p $L
S=$L/summary.txt
tar -C .carry -xJf .carry/bundle.tar.xz
xz -dc .carry/old/detattn-376165b.xz > .carry/old/detattn-old; chmod +x .carry/old/detattn-old
NEW=.carry/bin/detattn; OLD=.carry/old/detattn-old
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $L/gpu.txt
date -u >> $L/gpu.txt; cat $L/gpu.txt >> $S
timeout 200 $NEW selftest > $L/selftest.log 2>&1; echo "selftest rc=$? $(tail -1 $L/selftest.log)" >> $S
for t in cuda_exact cuda_kvcache cuda_layouts cuda_reliability cuda_tensorcore override; do
  timeout 300 .carry/tests/$t --test-threads 4 > $L/test-$t.log 2>&1
  echo "test $t rc=$? $(grep -E '^test result' $L/test-$t.log | tail -1)" >> $S
done
OUT=$L timeout 300 bash scripts/gpu-session.sh decsan > $L/decsan-summary.txt 2>&1
echo "decsan rc=$?" >> $S; grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" $L/decsan.log | sort | uniq -c >> $S
python3 -m pip install -q --no-deps --target /tmp/pyd python/dist/*.whl > $L/pip.log 2>&1
(cd /tmp && PYTHONPATH=/tmp/pyd timeout 120 python3 $OLDPWD/scripts/python-gpu.py --cli $OLDPWD/$NEW --out $L --only env,selftest,lse) > $L/python-gpu.log 2>&1
echo "python-gpu rc=$?" >> $S; grep -E "^  (PASS|FAIL)|checks passed" $L/python-gpu.log >> $S
ab() {
  local lab=$1; shift
  local line="$lab"
  for i in 1 2; do for b in old new; do
    local bin=$OLD; [ $b = new ] && bin=$NEW
    us=$(timeout 60 $bin bench --backend cuda --path exact "$@" --iters 30 --warmup 5 --json 2>>$L/ab.err \
      | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["median_us"],1))')
    line="$line $b=$us"
  done; done
  echo "$line" | tee -a $L/ab.txt >> $S
}
G="--q-heads 32 --kv-heads 8 --q-len 1 --head-dim 128"
ab dec1-bf16 --dtype bf16 $G --kv-len 32768
ab b2-s8k --dtype bf16 --batch 2 $G --kv-len 8192
ab b8-s8k --dtype bf16 --batch 8 $G --kv-len 8192
ab dec1-f32 --dtype f32 $G --kv-len 32768
ab dec1-f16-d64 --dtype f16 --q-heads 32 --kv-heads 8 --q-len 1 --head-dim 64 --kv-len 32768
ab r16-bf16 --dtype bf16 --q-heads 16 --kv-heads 1 --q-len 1 --head-dim 128 --kv-len 32768
ab prop-dec1 --dtype bf16 $G --kv-len 32768 --nonfinite propagate
ab b32-s8k-wide --dtype bf16 --batch 32 $G --kv-len 8192
timeout 60 ncu --clock-control none --metrics gpu__time_duration.sum --csv -k regex:detattn_dec_ $NEW bench --backend cuda \
  --path exact --dtype bf16 $G --kv-len 32768 --warmup 1 --iters 1 > $L/ncu-dec1-new.csv 2>&1
echo "ncu dec1 new: $(grep gpu__time_duration $L/ncu-dec1-new.csv | awk -F'","' '{print $5"="$NF}' | tr -d '"' | tr '\n' ' ')" >> $S
timeout 240 python3 scripts/gpu_compare.py $NEW $L/exdec.json --paths exact --only decode,dec1,batches > $L/compare.log 2>&1
echo "compare rc=$?" >> $S
grep -E "dec1|decode|ceiling|^ *[0-9]|^\|" $L/compare.log | head -40 >> $S
# Where dec_scores' 43 us at dec1 go (a launch of it cost >= 22 us whatever its keys: perf.md).
SEC="--section SpeedOfLight --section LaunchStats --section Occupancy --section SchedulerStats --section WarpStateStats --section MemoryWorkloadAnalysis --section SourceCounters"
timeout 90 ncu --clock-control none -k regex:detattn_dec_scores -c 1 $SEC -f -o $L/scores $NEW bench --backend cuda \
  --path exact --dtype bf16 $G --kv-len 32768 --warmup 0 --iters 1 > $L/scores.run.log 2>&1
ncu --import $L/scores.ncu-rep --print-details all > $L/scores.txt 2>&1
ncu --import $L/scores.ncu-rep --page source --csv --print-source sass > $L/scores.sass.csv 2>&1
python3 scripts/ncu_segments.py $L/scores.sass.csv 25 > $L/scores.segments.txt 2>&1
rm -f $L/scores.ncu-rep; gzip -f $L/scores.sass.csv
grep -E "Duration|Grid Size|Block Size|Registers Per|Achieved Occupancy|Theoretical Occupancy|Waves Per SM|DRAM Throughput|Memory Throughput|Issue Slots Busy|No Eligible|Warp Cycles Per Issued" $L/scores.txt | head -16 >> $S
head -12 $L/scores.segments.txt >> $S
D=.carry/bin/detattn-dudect
timeout 90 $D --backend cuda --n 10000 --q-len 1 --kv-len 1024 --heads 8 --head-dim 128 --dtype bf16 \
  --json-out $L/dudect-narrow-bf16.json > $L/dudect-narrow-bf16.log 2>&1
echo "dudect narrow bf16 rc=$? $(grep -E 'result:' $L/dudect-narrow-bf16.log | tail -3 | tr '\n' ' ')" >> $S
DETATTN_TEST_CUBIN_DIR=.carry/cubin-leaky timeout 60 .carry/bin-override/detattn-dudect --backend cuda --n 10000 \
  --q-len 1 --kv-len 1024 --heads 8 --head-dim 128 --dtype f32 --expect-leak > $L/dudect-leaky-f32.log 2>&1
echo "leaky narrow f32 rc=$? $(grep -E 'result:' $L/dudect-leaky-f32.log | tail -3 | tr '\n' ' ')" >> $S
echo "total ${SECONDS}s" >> $S
cd $OUT && tar czf logs.tar.gz logs
