#!/bin/bash
# Session 7, call 8: dec_scores' row facts kept for up to 8 rows too (variant cubin-rf2 through the
# test-only override) against HEAD (facts kept for up to 4 rows): bits, A/B, dec_scores' time.
set -u
L=$OUT/logs; mkdir -p $L
S=$L/summary.txt
tar -C .carry -xJf .carry/bundle.tar.xz
mkdir -p .carry/v && tar -C .carry/v -xJf .carry/variants.tar.xz
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/gpu.txt; date -u >> $L/gpu.txt
V=$PWD/.carry/v/cubin-rf2
DETATTN_TEST_CUBIN_DIR=$V timeout 300 .carry/tests-override/cuda_exact --test-threads 4 > $L/variant-cuda_exact.log 2>&1
echo "variant cuda_exact rc=$? $(grep -E '^test result' $L/variant-cuda_exact.log | tail -1)" >> $S
DETATTN_TEST_CUBIN_DIR=$V timeout 200 .carry/bin-override/detattn selftest > $L/variant-selftest.log 2>&1
echo "variant selftest rc=$? $(tail -1 $L/variant-selftest.log)" >> $S
run_bin() { local b=$1; shift; if [ $b = new ]; then DETATTN_TEST_CUBIN_DIR=$V .carry/bin-override/detattn "$@"; else .carry/bin/detattn "$@"; fi; }
ab() {
  local lab=$1; shift; local line="$lab"
  for i in 1 2; do for b in old new; do
    us=$(run_bin $b bench --backend cuda --path exact "$@" --iters 30 --warmup 5 --json 2>>$L/ab.err | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["median_us"],1))')
    line="$line $b=$us"
  done; done
  echo "$line" | tee -a $L/ab.txt >> $S
}
ab g8-dec1 --dtype bf16 --q-heads 64 --kv-heads 8 --q-len 1 --head-dim 128 --kv-len 32768
ab g8-b8 --dtype bf16 --batch 8 --q-heads 64 --kv-heads 8 --q-len 1 --head-dim 128 --kv-len 8192
ab g8-b32 --dtype bf16 --batch 32 --q-heads 64 --kv-heads 8 --q-len 1 --head-dim 128 --kv-len 8192
ab r8-spec2 --dtype bf16 --q-heads 32 --kv-heads 8 --q-len 2 --head-dim 128 --kv-len 32768
ab dec1-g4 --dtype bf16 --q-heads 32 --kv-heads 8 --q-len 1 --head-dim 128 --kv-len 32768
for b in old new; do
  if [ $b = new ]; then E="env DETATTN_TEST_CUBIN_DIR=$V"; B=.carry/bin-override/detattn; else E=env; B=.carry/bin/detattn; fi
  timeout 120 $E ncu --clock-control none --metrics gpu__time_duration.sum,smsp__inst_executed.sum --csv -k regex:detattn_dec_scores $B bench --backend cuda \
    --path exact --dtype bf16 --q-heads 64 --kv-heads 8 --q-len 1 --head-dim 128 --kv-len 32768 --warmup 1 --iters 2 > $L/ncu-g8-$b.csv 2>&1
  echo "ncu g8 $b: $(grep -E 'gpu__time_duration|inst_executed' $L/ncu-g8-$b.csv | awk -F'","' '{print $(NF-2)"="$NF}' | tr -d '"' | tr '\n' ' ')" >> $S
done
for args in "--dtype bf16 --batch 2 --q-heads 16 --kv-heads 2 --q-len 1 --kv-len 700 --head-dim 128 --kv-lens 700,260 --mask full --nonfinite propagate" \
            "--dtype f16 --batch 2 --q-heads 8 --kv-heads 2 --q-len 2 --kv-len 530 --head-dim 64 --causal --causal-align top-left --kv-lens 530,7"; do
  for tool in memcheck initcheck; do
    DETATTN_TEST_CUBIN_DIR=$V timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 .carry/bin-override/detattn run --backend cuda --path exact $args >> $L/variant-san.log 2>&1
    echo "san $tool rc=$?" >> $L/variant-san-rc.txt
  done
done
echo "variant sanitizer: $(sort $L/variant-san-rc.txt | uniq -c | tr '\n' ' ')" >> $S
cd $OUT && tar czf logs.tar.gz logs
