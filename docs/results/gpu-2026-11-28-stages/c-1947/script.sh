#!/bin/bash
# Session 7, call 3: HEAD after f31ddc3 (dec_scores' row facts) and the Python paged cache
# (run_device_raw_paged, attention_with_kvcache): selftest, every GPU test binary, decsan,
# the Python package's GPU checks, A/B against c682dac's binary (the kernels before f31ddc3),
# SDPA in one command, dudect of the narrow decode and its planted leak.
set -u
L=$OUT/logs; mkdir -p $L
S=$L/summary.txt
pack() { (cd $OUT && tar czf logs.tar.gz logs); }
tar -C .carry -xJf .carry/bundle.tar.xz
xz -dc .carry/old/detattn-c682dac.xz > .carry/old/detattn-old; chmod +x .carry/old/detattn-old
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $L/gpu.txt
date -u >> $L/gpu.txt
NEW=.carry/bin/detattn; OLD=.carry/old/detattn-old
timeout 200 $NEW selftest > $L/selftest.log 2>&1; echo "selftest rc=$? $(tail -1 $L/selftest.log)" >> $S
mkdir -p $L/rec
for t in cuda_kvcache cuda_exact cuda_layouts cuda_reliability cuda_tensorcore override; do
  DETATTN_RECORD=$L/rec timeout 300 .carry/tests/$t --test-threads 4 > $L/test-$t.log 2>&1
  echo "test $t rc=$? $(grep -E '^test result' $L/test-$t.log | tail -1)" >> $S
done
diff <(sed '1,/^---/d' $L/rec/tensorcore.sm_90.txt) <(sed '1,/^---/d' golden/tensorcore.sm_90.txt) > /dev/null && echo "recorded sm_90 digests = golden" >> $S || echo "recorded sm_90 digests DIFFER" >> $S
pack
python3 -m pip install -q --no-deps --target /tmp/pyd python/dist/*.whl > $L/pip.log 2>&1
(cd /tmp && PYTHONPATH=/tmp/pyd timeout 200 python3 $OLDPWD/scripts/python-gpu.py --cli $OLDPWD/$NEW --out $L --only env,selftest,paged,varlen,lse,cli) > $L/python-gpu.log 2>&1
echo "python-gpu rc=$?" >> $S; grep -E "^  (PASS|FAIL)|checks passed" $L/python-gpu.log | cut -c1-400 >> $S
pack
ab() {
  local lab=$1; shift
  local line="$lab"
  for i in 1 2; do for b in old new; do
    local bin=$OLD; [ $b = new ] && bin=$NEW
    us=$(timeout 120 $bin bench --backend cuda --path exact "$@" --iters 30 --warmup 5 --json 2>>$L/ab.err \
      | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["median_us"],1))')
    line="$line $b=$us"
  done; done
  echo "$line" | tee -a $L/ab.txt >> $S
}
G="--q-heads 32 --kv-heads 8 --q-len 1 --head-dim 128"
ab dec1-bf16 --dtype bf16 $G --kv-len 32768
ab b8-s8k --dtype bf16 --batch 8 $G --kv-len 8192
ab b32-s8k-wide --dtype bf16 --batch 32 $G --kv-len 8192
ab r16-bf16 --dtype bf16 --q-heads 16 --kv-heads 1 --q-len 1 --head-dim 128 --kv-len 32768
pack
D=.carry/bin/detattn-dudect
timeout 90 $D --backend cuda --n 10000 --q-len 1 --kv-len 1024 --heads 8 --head-dim 128 --dtype bf16 \
  --json-out $L/dudect-narrow-bf16.json > $L/dudect-narrow-bf16.log 2>&1
echo "dudect narrow bf16 rc=$? $(grep -E 'result:' $L/dudect-narrow-bf16.log | tail -3 | tr '\n' ' ')" >> $S
DETATTN_TEST_CUBIN_DIR=.carry/cubin-leaky timeout 60 .carry/bin-override/detattn-dudect --backend cuda --n 10000 \
  --q-len 1 --kv-len 1024 --heads 8 --head-dim 128 --dtype f32 --expect-leak > $L/dudect-leaky-f32.log 2>&1
echo "leaky narrow f32 rc=$? $(grep -E 'result:' $L/dudect-leaky-f32.log | tail -3 | tr '\n' ' ')" >> $S
pack
timeout 150 python3 scripts/gpu_compare.py $NEW $L/exdec.json --paths exact --only decode,dec1 > $L/compare.log 2>&1
echo "compare rc=$?" >> $S
grep -E "ceiling|^\| detattn|^\| SDPA" $L/compare.log | head -12 >> $S
pack
OUT=$L timeout 200 bash scripts/gpu-session.sh decsan > $L/decsan-summary.txt 2>&1
echo "decsan rc=$?" >> $S; grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" $L/decsan.log | sort | uniq -c >> $S
pack
