#!/bin/bash
# Session 8, call 3: the merge launched early only where both grids fit side by side (tc_merge as before:
# static shared memory). Checks of the new build, the planted missing wait, A/B against 42b7181's
# binary at 1 and 10 calls a sample, SDPA and the copy ceiling, sanitizer, dudect of a split decode.
set -u
L=$OUT/logs; mkdir -p $L
S=$L/summary.txt
tar -C .carry -xJf .carry/bundle.tar.xz
xz -dc .carry/old/detattn-42b7181.xz > /tmp/detattn-old && chmod +x /tmp/detattn-old
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/gpu.txt; date -u >> $L/gpu.txt
NEW=.carry/bin/detattn
timeout 100 $NEW selftest > $L/selftest.log 2>&1; echo "selftest rc=$? $(tail -1 $L/selftest.log)" >> $S
mkdir -p $L/rec
for t in cuda_tensorcore cuda_kvcache cuda_exact cuda_layouts cuda_reliability override; do
  DETATTN_RECORD=$L/rec timeout 200 .carry/tests/$t --test-threads 4 > $L/test-$t.log 2>&1
  echo "test $t rc=$? $(grep -E '^test result' $L/test-$t.log | tail -1)" >> $S
done
cmp -s $L/rec/tensorcore.sm_90.txt golden/tensorcore.sm_90.txt && echo "rec digests = golden" >> $S || echo "rec digests DIFFER or missing" >> $S
for i in 1 2 3; do
  DETATTN_TEST_CUBIN_DIR=.carry/cubin-nowait timeout 200 .carry/tests-override/cuda_tensorcore merge_across_many_chunks > $L/plant-nowait-$i.log 2>&1
  echo "PLANT no wait ($i) rc=$? (must fail) $(grep -m1 -E 'differs|panicked' $L/plant-nowait-$i.log | cut -c1-200)" >> $S
done
DETATTN_TEST_CUBIN_DIR=$PWD/kernels/cubin timeout 200 .carry/tests-override/cuda_tensorcore merge_across_many_chunks > $L/plant-control.log 2>&1
echo "control (shipped cubins through the override) rc=$? $(grep -E '^test result' $L/plant-control.log)" >> $S
run_bin() { local b=$1; shift; case $b in new) $NEW "$@";; old) /tmp/detattn-old "$@";; exp) DETATTN_EXP_HOIST=1 /tmp/detattn-exp "$@";; esac; }
VARS="old new"
ab() {
  local lab=$1; local ps=$2; shift 2
  local line="$lab ps$ps"
  local vars=$VARS; [ $ps = 1 ] || vars="old new"
  for i in 1 2; do for b in $vars; do
    us=$(run_bin $b bench "$@" --iters 30 --warmup 5 --per-sample $ps --json 2>>$L/ab.err | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["median_us"],1))')
    line="$line $b=$us"
  done; done
  echo "$line" | tee -a $L/ab.txt >> $S
}
grid=( "1 8192 1" "1 131072 1" "2 8192 8" "1 32768 8" "2 131072 1" "8 32768 1" "32 8192 1" "32 8192 8" )
for g in "${grid[@]}"; do
  set -- $g; A="--backend cuda --path tensorcore --dtype bf16 --batch $1 --q-heads $((4*$3)) --kv-heads $3 --q-len 1 --kv-len $2 --head-dim 128"
  if [ $1 = 32 ] && [ $3 = 8 ]; then ab "tc B$1 S$2 H$3" 1 $A; continue; fi
  for ps in 1 10; do ab "tc B$1 S$2 H$3" $ps $A; done
done
A="--backend cuda --path tensorcore --dtype bf16 --q-heads 32 --kv-heads 8 --q-len 1 --head-dim 128 --kv-len 32768"
for ps in 1 10; do ab "tc dec1" $ps $A; done
ab "tc f16 d64 B1 S65536 H2" 1 --backend cuda --path tensorcore --dtype f16 --q-heads 8 --kv-heads 2 --q-len 1 --head-dim 64 --kv-len 65536
ab "tc bf16 d128 B1 S32768 H2 Sq4 G4 (16 rows)" 1 --backend cuda --path tensorcore --dtype bf16 --q-heads 8 --kv-heads 2 --q-len 4 --head-dim 128 --kv-len 32768
ab "tc bf16 d256 B1 S32768 H2" 1 --backend cuda --path tensorcore --dtype bf16 --q-heads 8 --kv-heads 2 --q-len 1 --head-dim 256 --kv-len 32768
A="--backend cuda --path tensorcore --dtype bf16 --batch 1 --q-heads 4 --kv-heads 1 --q-len 1 --kv-len 131072 --head-dim 128"
$NEW bench $A --warmup 1 --iters 2 > /dev/null 2>&1
timeout 100 ncu --clock-control none --metrics gpu__time_duration.sum --csv -k regex:tc_ $NEW bench $A --warmup 0 --iters 3 > $L/ncu-new.csv 2>&1
echo "ncu new B1 S131072 H1: $(grep gpu__time_duration $L/ncu-new.csv | awk -F'","' '{print $5"="$NF}' | tr -d '"' | sed 's/_bf16_d128//' | tr '\n' ' ')" >> $S
P=(
  "--path tensorcore --dtype bf16 --batch 2 --q-heads 16 --kv-heads 1 --q-len 1 --kv-len 4500 --head-dim 128 --kv-lens 4500,2049 --mask full --nonfinite propagate"
  "--path tensorcore --dtype bf16 --batch 2 --q-heads 8 --kv-heads 2 --q-len 1 --kv-len 4500 --head-dim 128 --kv-lens 4500,0 --nonfinite propagate --lse"
  "--path tensorcore --dtype f16 --batch 1 --q-heads 4 --kv-heads 1 --q-len 2 --kv-len 40000 --head-dim 64 --causal --lse"
  "--path tensorcore --dtype f16 --batch 1 --q-heads 2 --kv-heads 1 --q-len 1 --kv-len 9000 --head-dim 256"
)
for args in "${P[@]}"; do for tool in memcheck racecheck synccheck initcheck; do
  timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 $NEW run --backend cuda $args >> $L/san.log 2>&1
  echo "san $tool rc=$?" >> $L/san-rc.txt
done; done
echo "sanitizer: $(sort $L/san-rc.txt | uniq -c | tr '\n' ' ')" >> $S
grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" $L/san.log | sort | uniq -c >> $S
timeout 200 .carry/bin/detattn-dudect --backend cuda --path tensorcore --dtype bf16 --head-dim 128 --q-len 1 --kv-len 4200 --heads 8 --n 10000 > $L/dudect-split.log 2>&1
echo "dudect split decode rc=$? $(grep -E 'result:' $L/dudect-split.log | tail -1)" >> $S
timeout 300 python3 scripts/gpu_compare.py $NEW $L/compare.json --paths tensorcore --only dec1,decode,g1_s8k_h1,g1_s128k_h1,g2_s8k_h8,g1_s32k_h8,g2_s128k_h1,g8_s32k_h1,g32_s8k_h1 > $L/compare.log 2>&1
echo "compare rc=$?" >> $S
cd $OUT && tar czf logs.tar.gz logs
