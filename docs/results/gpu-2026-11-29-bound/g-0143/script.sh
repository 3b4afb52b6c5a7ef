#!/bin/bash
# Session 9, call 7: the final build (HEAD with host_us and ParamBytes): selftest, every GPU test
# binary and the override's, the Python package; SDPA + ceiling + same-bytes copies in one command;
# the floor of one call (the smallest decode) at 1 and 10 calls a sample, with host_us.
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
for t in $(ls .carry/tests-override/ 2>/dev/null); do
  timeout 200 .carry/tests-override/$t --test-threads 4 > $L/testov-$t.log 2>&1
  echo "override $t rc=$? $(grep -E '^test result' $L/testov-$t.log | tail -1)" >> $S
done
python3 -m pip install -q --no-deps --target /tmp/pyd python/dist/*.whl > $L/pip.log 2>&1
(cd /tmp && PYTHONPATH=/tmp/pyd timeout 200 python3 $OLDPWD/scripts/python-gpu.py --cli $OLDPWD/.carry/bin/detattn --out $L/py --only env,selftest,paged,varlen,lse) > $L/python-gpu.log 2>&1
echo "python-gpu rc=$? $(tail -1 $L/python-gpu.log)" >> $S
date -u >> $S
timeout 300 python3 scripts/gpu_compare.py $NEW $L/compare.json --paths tensorcore,exact --only dec1,decode,g1_s8k_h1,g1_s128k_h1,g2_s8k_h8,g1_s32k_h8,g2_s128k_h1,g8_s32k_h1,g32_s8k_h1 > $L/compare.log 2>&1
echo "compare rc=$?" >> $S
# The floor of one call: the smallest decode (one kernel, 16 keys) at 1 and 10 calls a sample.
for path in tensorcore exact; do
  line="floor $path B1 H1 S16 D64:"
  for ps in 1 10 1 10; do
    us=$($NEW bench --backend cuda --path $path --dtype f16 --q-heads 1 --kv-heads 1 --q-len 1 --kv-len 16 --head-dim 64 --iters 30 --warmup 5 --per-sample $ps --json 2>>$L/bench.err | python3 -c 'import json,sys; j=json.load(sys.stdin); print(round(j["median_us"],1), "host", round(j["host_us"],2))')
    line="$line ps$ps=$us"
  done
  echo "$line" >> $S
done
date -u >> $S
date -u >> $S
cd $OUT && tar czf logs.tar.gz logs
