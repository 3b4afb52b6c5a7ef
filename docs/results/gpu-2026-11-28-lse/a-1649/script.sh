#!/bin/bash
# Session 6, call 1: the log-sum-exp through the device entry points (default build: GPU tests,
# a planted fault, the Python package on torch CUDA tensors); variant E of the narrow values kernel
# (warp index through a shuffle) through the test-only override: bits, A/B, kernel times, synccheck.
set -u
L=$OUT/logs; mkdir -p $L
S=$L/summary.txt
tar -C .carry -xJf .carry/bundle.tar.xz
BIN=.carry/bin/detattn; OB=.carry/bin-override/detattn; E=.carry/cubin-E
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $L/gpu.txt
date -u >> $L/gpu.txt; cat $L/gpu.txt >> $S
timeout 200 $BIN selftest > $L/selftest.log 2>&1; echo "selftest rc=$? $(tail -1 $L/selftest.log)" >> $S
for t in cuda_kvcache cuda_exact cuda_layouts cuda_reliability cuda_tensorcore override; do
  timeout 300 .carry/tests/$t --test-threads 4 > $L/test-$t.log 2>&1
  echo "test $t rc=$? $(grep -E '^test result' $L/test-$t.log | tail -1)" >> $S
done
grep -h "device lse errors\|varlen problems on\|paged cache on" $L/test-cuda_kvcache.log >> $S
# The planted fault: device_io never passes the log-sum-exp (kernels then leave it unwritten).
xz -dc .carry/plant/cuda_kvcache-lse-plant.xz > .carry/plant/p; chmod +x .carry/plant/p
timeout 200 .carry/plant/p --test-threads 4 > $L/test-plant.log 2>&1
echo "PLANT (must fail) rc=$? $(grep -E '^test result' $L/test-plant.log | tail -1)" >> $S
grep -E "^test .*(ok|FAILED)$|panicked|lse" $L/test-plant.log | head -20 >> $S
# The Python package on torch CUDA tensors.
python3 -m pip install -q --no-deps --target /tmp/pyd python/dist/*.whl > $L/pip.log 2>&1; echo "pip rc=$?" >> $S
(cd /tmp && PYTHONPATH=/tmp/pyd timeout 240 python3 $OLDPWD/scripts/python-gpu.py --cli $OLDPWD/$BIN --out $L) > $L/python-gpu.log 2>&1
echo "python-gpu rc=$?" >> $S; grep -E "^  (PASS|FAIL)|checks passed" $L/python-gpu.log >> $S
# Variant E: bits, then A/B against the shipped kernels (the default binary), alternating twice.
DETATTN_TEST_CUBIN_DIR=$E timeout 150 .carry/tests-override/cuda_exact --test-threads 4 > $L/test-cuda_exact-E.log 2>&1
echo "cuda_exact via E rc=$? $(grep -E '^test result' $L/test-cuda_exact-E.log | tail -1)" >> $S
ab() {
  local lab=$1; shift
  local line="$lab"
  for i in 1 2; do for b in old E; do
    local bin=$BIN e=""
    [ $b = E ] && { bin=$OB; e="DETATTN_TEST_CUBIN_DIR=$E"; }
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
ab dec1-f32 --dtype f32 $G --kv-len 32768
ab dec1-f16-d64 --dtype f16 --q-heads 32 --kv-heads 8 --q-len 1 --head-dim 64 --kv-len 32768
ab r16-bf16 --dtype bf16 --q-heads 16 --kv-heads 1 --q-len 1 --head-dim 128 --kv-len 32768
ab prop-dec1 --dtype bf16 $G --kv-len 32768 --nonfinite propagate
for b in old E; do
  bin=$BIN; e=""; [ $b = E ] && { bin=$OB; e="DETATTN_TEST_CUBIN_DIR=$E"; }
  env $e timeout 60 ncu --clock-control none --metrics gpu__time_duration.sum --csv -k regex:detattn_dec_ $bin bench --backend cuda \
    --path exact --dtype bf16 $G --kv-len 32768 --warmup 1 --iters 1 > $L/ncu-dec1-$b.csv 2>&1
  echo "ncu dec1 $b: $(grep gpu__time_duration $L/ncu-dec1-$b.csv | awk -F'","' '{print $5"="$NF}' | tr -d '"' | tr '\n' ' ')" >> $S
done
# synccheck and racecheck of E on the narrow decodes (the problems of gpu-session.sh decsan 1-5).
P=(
  "--dtype bf16 --batch 2 --q-heads 8 --kv-heads 2 --q-len 1 --kv-len 700 --head-dim 128 --kv-lens 700,260 --mask full --nonfinite propagate"
  "--dtype f16 --batch 2 --q-heads 4 --kv-heads 1 --q-len 3 --kv-len 530 --head-dim 64 --causal --causal-align top-left --kv-lens 530,7"
  "--dtype f32 --batch 1 --q-heads 16 --kv-heads 1 --q-len 1 --kv-len 1100 --head-dim 256 --mask shared --nonfinite propagate"
  "--dtype bf16 --batch 1 --q-heads 6 --kv-heads 2 --q-len 2 --kv-len 333 --head-dim 100 --layout bshd --causal"
  "--dtype f16 --batch 3 --q-heads 2 --kv-heads 2 --q-len 1 --kv-len 2000 --head-dim 80 --kv-lens 2000,0,1999"
)
for tool in synccheck racecheck memcheck; do for a in "${P[@]}"; do
  DETATTN_TEST_CUBIN_DIR=$E timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 $OB run --backend cuda --path exact $a >> $L/sanE.log 2>&1
  echo "san $tool rc=$?" >> $L/sanE-rc.txt
done; done
sort $L/sanE-rc.txt | uniq -c >> $S; grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" $L/sanE.log | sort | uniq -c >> $S
echo "total ${SECONDS}s" >> $S
cd $OUT && tar czf logs.tar.gz logs
