#!/bin/bash
# Session 10, call 3 (2026-11-29): the merge launched early for every split decode (experiment binary
# .carry/exp-early/detattn: merge_early always true) against the shipped binary, 1 and 10 calls a sample.
set -u
R=${OUT:?}; O=/tmp/o; mkdir -p $O
[ -x .carry/bin/detattn ] || tar -C .carry -xJf .carry/bundle.tar.xz
nvidia-smi --query-gpu=name,driver_version --format=csv > $O/gpu.txt; date -u >> $O/gpu.txt
C="--backend cuda --path tensorcore --dtype bf16 --q-len 1 --head-dim 128"
for ps in 1 10; do
  python3 scripts/ab_bench.py --old .carry/bin/detattn --new .carry/exp-early/detattn --rounds 2 --iters 30 --warmup 5 \
    --json $O/ab-ps$ps.json \
    --case "dec1 (128 dec, 32 merge) ps$ps: $C --batch 1 --q-heads 32 --kv-heads 8 --kv-len 32768 --per-sample $ps" \
    --case "B1 S32768 H8 Hq8 (128 dec, 8 merge) ps$ps: $C --batch 1 --q-heads 8 --kv-heads 8 --kv-len 32768 --per-sample $ps" \
    --case "B2 S131072 H1 (128 dec, 8 merge) ps$ps: $C --batch 2 --q-heads 4 --kv-heads 1 --kv-len 131072 --per-sample $ps" \
    --case "B8 S32768 H1 (128 dec, 32 merge) ps$ps: $C --batch 8 --q-heads 4 --kv-heads 1 --kv-len 32768 --per-sample $ps" \
    --case "B32 S8192 H1 (128 dec, 128 merge) ps$ps: $C --batch 32 --q-heads 4 --kv-heads 1 --kv-len 8192 --per-sample $ps" \
    --case "B1 S131072 H1 (64 dec, early already) ps$ps: $C --batch 1 --q-heads 4 --kv-heads 1 --kv-len 131072 --per-sample $ps" \
    >> $O/ab.txt 2>&1
done
cd /tmp && tar czf $R/logs.tar.gz o
cat $O/ab.txt
