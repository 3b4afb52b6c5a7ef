#!/bin/bash
# 2026-11-29 call 1: the pipelined Exact decode (dec_pipe). A hang check first, then the GPU tests,
# A/B against 167a3cc's binary (bin-old), Nsight Compute of dec1, compute-sanitizer, SDPA compare.
set -u
R=${OUT:?}; export OUT=/tmp/o; rm -rf $OUT; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
date -u > $OUT/date.txt
tar xJf .carry/bundle.tar.xz -C .carry; tar xJf .carry/bin-old.tar.xz -C .carry
B=.carry/bin/detattn
DEC1="--backend cuda --path exact --dtype bf16 --batch 1 --q-heads 32 --kv-heads 8 --q-len 1 --kv-len 32768 --head-dim 128"
timeout 60 $B run $DEC1 > $OUT/hang-check.txt 2>&1; echo "rc=$?" >> $OUT/hang-check.txt
cat $OUT/hang-check.txt | tail -3
if ! grep -q "rc=0" $OUT/hang-check.txt; then cd /tmp && tar czf $R/logs.tar.gz o; exit 1; fi
timeout 120 .carry/bin-old/detattn run $DEC1 > $OUT/old-run.txt 2>&1
grep -i digest $OUT/hang-check.txt $OUT/old-run.txt
E="--backend cuda --path exact --dtype bf16 --head-dim 128 --q-len 1"
python3 scripts/ab_bench.py --old .carry/bin-old/detattn --new $B --rounds 2 --iters 30 --warmup 5 \
  --case "dec1: $E --batch 1 --q-heads 32 --kv-heads 8 --kv-len 32768" \
  --case "B2 S8192: $E --batch 2 --q-heads 32 --kv-heads 8 --kv-len 8192" \
  --case "B1 S8192: $E --batch 1 --q-heads 32 --kv-heads 8 --kv-len 8192" \
  --case "B1 S4096 Hkv1: $E --batch 1 --q-heads 4 --kv-heads 1 --kv-len 4096" \
  --case "B3 S8192: $E --batch 3 --q-heads 32 --kv-heads 8 --kv-len 8192" \
  --case "dec1 f32: --backend cuda --path exact --dtype f32 --head-dim 128 --q-len 1 --batch 1 --q-heads 32 --kv-heads 8 --kv-len 32768" \
  --case "dec1 f16 D64: --backend cuda --path exact --dtype f16 --head-dim 64 --q-len 1 --batch 1 --q-heads 32 --kv-heads 8 --kv-len 32768" \
  --case "16 rows: $E --batch 1 --q-heads 16 --kv-heads 1 --kv-len 32768" \
  --case "dec1 Sq2: --backend cuda --path exact --dtype bf16 --head-dim 128 --q-len 2 --batch 1 --q-heads 32 --kv-heads 8 --kv-len 32768" \
  --case "dec1 propagate: $E --batch 1 --q-heads 32 --kv-heads 8 --kv-len 32768 --nonfinite propagate" \
  --case "B1 S131072 Hkv8: $E --batch 1 --q-heads 32 --kv-heads 8 --kv-len 131072" \
  > $OUT/ab.txt 2>&1
cat $OUT/ab.txt
cd /tmp && tar czf $R/logs.tar.gz o; cd - > /dev/null
timeout 120 ncu --clock-control none --kernel-name regex:'detattn_dec' --metrics gpu__time_duration.sum $B bench $DEC1 --iters 2 --warmup 1 > $OUT/ncu-dec1.txt 2>&1
grep -E "detattn_dec|gpu__time" $OUT/ncu-dec1.txt | paste - - | awk '{print $1, $(NF-1), $NF}' | sort | uniq -c | head
bash scripts/gpu-session.sh tests decsan > $OUT/session.txt 2>&1
tail -25 $OUT/session.txt
cd /tmp && tar czf $R/logs.tar.gz o; cd - > /dev/null
timeout 200 python3 scripts/gpu_compare.py $B $OUT/compare.json --paths exact --only decode,dec1 > $OUT/compare.txt 2>&1
tail -15 $OUT/compare.txt
cd /tmp && tar czf $R/logs.tar.gz o
