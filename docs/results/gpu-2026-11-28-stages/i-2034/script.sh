#!/bin/bash
# Session 7, call 9: the shipped build of 727ce3a (row facts for up to eight rows): selftest, three
# GPU test binaries, dudect of the narrow decode at eight rows and its planted leak, synccheck and
# memcheck on two decodes.
set -u
L=$OUT/logs; mkdir -p $L
S=$L/summary.txt
tar -C .carry -xJf .carry/bundle.tar.xz
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/gpu.txt; date -u >> $L/gpu.txt
NEW=.carry/bin/detattn
timeout 100 $NEW selftest > $L/selftest.log 2>&1; echo "selftest rc=$? $(tail -1 $L/selftest.log)" >> $S
for t in cuda_exact cuda_kvcache cuda_tensorcore; do
  timeout 100 .carry/tests/$t --test-threads 4 > $L/test-$t.log 2>&1
  echo "test $t rc=$? $(grep -E '^test result' $L/test-$t.log | tail -1)" >> $S
done
timeout 60 .carry/bin/detattn-dudect --backend cuda --n 10000 --q-len 8 --kv-len 1024 --heads 8 --head-dim 128 \
  --dtype bf16 > $L/dudect-r8-bf16.log 2>&1
echo "dudect 8 rows bf16 rc=$? $(grep -E 'result:' $L/dudect-r8-bf16.log | tail -1)" >> $S
DETATTN_TEST_CUBIN_DIR=.carry/cubin-leaky timeout 40 .carry/bin-override/detattn-dudect --backend cuda --n 10000 \
  --q-len 1 --kv-len 1024 --heads 8 --head-dim 128 --dtype f32 --expect-leak > $L/dudect-leaky-f32.log 2>&1
echo "leaky narrow f32 rc=$? $(grep -E 'result:' $L/dudect-leaky-f32.log | tail -1)" >> $S
for tool in memcheck synccheck racecheck; do
  timeout 40 compute-sanitizer --tool $tool --error-exitcode 9 $NEW run --backend cuda --path exact --dtype bf16 --batch 2 \
    --q-heads 16 --kv-heads 2 --q-len 1 --kv-len 700 --head-dim 128 --kv-lens 700,260 --mask full --nonfinite propagate >> $L/san.log 2>&1
  echo "san 8 rows $tool rc=$?" >> $S
done
grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" $L/san.log | sort | uniq -c >> $S
cd $OUT && tar czf logs.tar.gz logs
