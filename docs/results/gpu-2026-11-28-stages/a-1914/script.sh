#!/bin/bash
# Session 7, call 1: HEAD (d64bbf4: 3708ee8 and 2baa477 never ran on a GPU) - selftest, every GPU
# test binary; and the SPI=2 variant of dec_values_narrow through the test-only override: its
# bits (cuda_exact), A/B against HEAD, kernel times, a profile, and the sanitizer.
set -u
L=$OUT/logs; mkdir -p $L
S=$L/summary.txt
mkdir -p $L/rec
tar -C .carry -xJf .carry/bundle.tar.xz
mkdir -p .carry/v && tar -C .carry/v -xJf .carry/variants.tar.xz
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $L/gpu.txt
date -u >> $L/gpu.txt
NEW=.carry/bin/detattn
timeout 200 $NEW selftest > $L/selftest.log 2>&1; echo "selftest rc=$? $(tail -1 $L/selftest.log)" >> $S
for t in cuda_kvcache cuda_exact cuda_layouts cuda_reliability cuda_tensorcore override; do
  DETATTN_RECORD=$L/rec timeout 300 .carry/tests/$t --test-threads 4 > $L/test-$t.log 2>&1
  echo "test $t rc=$? $(grep -E '^test result' $L/test-$t.log | tail -1)" >> $S
done
cmp -s $L/rec/tensorcore.sm_90.txt golden/tensorcore.sm_90.txt && echo "rec digests = golden" >> $S || echo "rec digests DIFFER or missing" >> $S
V=$PWD/.carry/v/cubin-spi2
DETATTN_TEST_CUBIN_DIR=$V timeout 300 .carry/tests-override/cuda_exact --test-threads 4 > $L/variant-cuda_exact.log 2>&1
echo "variant cuda_exact rc=$? $(grep -E '^test result' $L/variant-cuda_exact.log | tail -1)" >> $S
DETATTN_TEST_CUBIN_DIR=$V timeout 200 .carry/bin-override/detattn selftest > $L/variant-selftest.log 2>&1
echo "variant selftest rc=$? $(tail -1 $L/variant-selftest.log)" >> $S
run_bin() {  # run_bin old|new ARGS...
  local b=$1; shift
  if [ $b = new ]; then DETATTN_TEST_CUBIN_DIR=$V .carry/bin-override/detattn "$@"; else .carry/bin/detattn "$@"; fi
}
ab() {
  local lab=$1; shift
  local line="$lab"
  for i in 1 2; do for b in old new; do
    us=$(run_bin $b bench --backend cuda --path exact "$@" --iters 30 --warmup 5 --json 2>>$L/ab.err \
      | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["median_us"],1))')
    line="$line $b=$us"
  done; done
  echo "$line" | tee -a $L/ab.txt >> $S
}
G="--q-heads 32 --kv-heads 8 --q-len 1 --head-dim 128"
ab dec1-bf16 --dtype bf16 $G --kv-len 32768
ab b2-s8k --dtype bf16 --batch 2 $G --kv-len 8192
ab b4-s8k --dtype bf16 --batch 4 $G --kv-len 8192
ab b8-s8k --dtype bf16 --batch 8 $G --kv-len 8192
ab b32-s8k-wide --dtype bf16 --batch 32 $G --kv-len 8192
ab dec1-f32 --dtype f32 $G --kv-len 32768
ab dec1-f16-d64 --dtype f16 --q-heads 32 --kv-heads 8 --q-len 1 --head-dim 64 --kv-len 32768
ab r16-bf16 --dtype bf16 --q-heads 16 --kv-heads 1 --q-len 1 --head-dim 128 --kv-len 32768
ab prop-dec1 --dtype bf16 $G --kv-len 32768 --nonfinite propagate
for b in old new; do
  for shape in "dec1 --kv-len 32768" "b8 --batch 8 --kv-len 8192"; do
    set -- $shape; n=$1; shift
    run_bin $b bench --backend cuda --path exact --dtype bf16 $G "$@" --warmup 1 --iters 2 > /dev/null 2>&1
    if [ $b = new ]; then E="env DETATTN_TEST_CUBIN_DIR=$V"; B=.carry/bin-override/detattn; else E=env; B=.carry/bin/detattn; fi
    timeout 120 $E ncu --clock-control none --metrics gpu__time_duration.sum --csv -k regex:detattn_dec_ $B bench --backend cuda \
      --path exact --dtype bf16 $G "$@" --warmup 1 --iters 2 > $L/ncu-$n-$b.csv 2>&1
    echo "ncu $n $b: $(grep gpu__time_duration $L/ncu-$n-$b.csv | awk -F'","' '{print $5"="$NF}' | tr -d '"' | tr '\n' ' ')" >> $S
  done
done
DETATTN_TEST_CUBIN_DIR=$V timeout 150 ncu --clock-control none --set full -f -o $L/values-dec1 \
  -k regex:detattn_dec_values_bf16 -c 1 .carry/bin-override/detattn bench --backend cuda --path exact --dtype bf16 $G --kv-len 32768 --warmup 0 --iters 1 \
  > $L/ncu-values-run.txt 2>&1
ncu --import $L/values-dec1.ncu-rep --print-details all > $L/ncu-values-new.txt 2>&1
ncu --import $L/values-dec1.ncu-rep --page source --csv --print-source sass > $L/ncu-values-sass.csv 2>&1
rm -f $L/values-dec1.ncu-rep
P=(
  "--dtype bf16 --batch 2 --q-heads 8 --kv-heads 2 --q-len 1 --kv-len 700 --head-dim 128 --kv-lens 700,260 --mask full --nonfinite propagate"
  "--dtype f16 --batch 2 --q-heads 4 --kv-heads 1 --q-len 3 --kv-len 530 --head-dim 64 --causal --causal-align top-left --kv-lens 530,7"
  "--dtype f32 --batch 1 --q-heads 16 --kv-heads 1 --q-len 1 --kv-len 1100 --head-dim 256 --mask shared --nonfinite propagate"
  "--dtype bf16 --batch 1 --q-heads 6 --kv-heads 2 --q-len 2 --kv-len 333 --head-dim 100 --layout bshd --causal"
  "--dtype f16 --batch 3 --q-heads 2 --kv-heads 2 --q-len 1 --kv-len 2000 --head-dim 80 --kv-lens 2000,0,1999"
)
for args in "${P[@]}"; do for tool in memcheck racecheck synccheck initcheck; do
  DETATTN_TEST_CUBIN_DIR=$V timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 .carry/bin-override/detattn run --backend cuda --path exact $args >> $L/variant-san.log 2>&1
  echo "san $tool rc=$?" >> $L/variant-san-rc.txt
done; done
echo "variant sanitizer: $(sort $L/variant-san-rc.txt | uniq -c | tr '\n' ' ')" >> $S
grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" $L/variant-san.log | sort | uniq -c >> $S
cd $OUT && tar czf logs.tar.gz logs
