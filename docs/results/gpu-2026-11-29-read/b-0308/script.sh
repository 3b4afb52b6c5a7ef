#!/bin/bash
# Session 10, call 2 (2026-11-29): what bounds tc_dec at 64 blocks, copies or compute? Diagnostic sm_90
# TensorCore cubins through the test-only override (docs/results/gpu-2026-11-29-read/predictions.txt):
# ship (kernels/tensorcore.cu as is), nocomp (WS decode without its score and O work), nocopy (without
# its copies). Bits of nocomp/nocopy are meaningless; only their time is read.
set -u
R=${OUT:?}; O=/tmp/o; mkdir -p $O
[ -x .carry/bin/detattn ] || tar -C .carry -xJf .carry/bundle.tar.xz
B=.carry/bin-override/detattn
nvidia-smi --query-gpu=name,driver_version --format=csv > $O/gpu.txt; date -u >> $O/gpu.txt
COMMON="--backend cuda --path tensorcore --dtype bf16 --q-len 1 --head-dim 128 --warmup 5 --iters 30"
declare -A CASE=(
  [g1_s128k_h1]="--batch 1 --q-heads 4 --kv-heads 1 --kv-len 131072"
  [g2_s8k_h8]="--batch 2 --q-heads 32 --kv-heads 8 --kv-len 8192"
  [dec1]="--batch 1 --q-heads 32 --kv-heads 8 --kv-len 32768" )
for round in 1 2; do
  for c in g1_s128k_h1 g2_s8k_h8 dec1; do
    for v in ship nocomp nocopy; do
      for ps in 10 1; do
        us=$(DETATTN_TEST_CUBIN_DIR=$PWD/.carry/cubin-$v $B bench $COMMON ${CASE[$c]} --per-sample $ps --json 2>>$O/err.txt \
             | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["median_us"], j.get("host_us"))')
        echo "round $round $c $v ps$ps median_us host_us: $us" >> $O/bench.txt
      done
    done
  done
done
for c in g1_s128k_h1 dec1; do
  for v in ship nocomp nocopy; do
    echo "=== $c $v" >> $O/ncu.txt
    DETATTN_TEST_CUBIN_DIR=$PWD/.carry/cubin-$v timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active \
      -k regex:tc_ $B bench $COMMON ${CASE[$c]} --warmup 2 --iters 3 >> $O/ncu.txt 2>&1
  done
done
grep -E '^\s+(tc_|gpu__|dram__|sm__)|^===' $O/ncu.txt > $O/ncu-short.txt
cd /tmp && tar czf $R/logs.tar.gz o
cat $O/bench.txt; cat $O/ncu-short.txt | head -80
