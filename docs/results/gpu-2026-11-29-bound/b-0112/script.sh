#!/bin/bash
# Session 9, call 2: the sm_90 D 128 decode with eight warps, through the test-only override
# (.carry/cubin-ws8 = the shipped cubins with tensorcore.sm_90.cubin rebuilt): bits (selftest,
# cuda_tensorcore), sanitizers, A/B against the shipped cubins, Nsight Compute of tc_dec.
set -u
L=$OUT/logs; mkdir -p $L
S=$L/summary.txt
tar -C .carry -xJf .carry/bundle.tar.xz
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/gpu.txt; date -u >> $L/gpu.txt
W=$PWD/.carry/cubin-ws8
OV=.carry/bin-override/detattn
DETATTN_TEST_CUBIN_DIR=$W timeout 100 $OV selftest > $L/selftest.log 2>&1; echo "selftest(ws8) rc=$? $(tail -1 $L/selftest.log)" >> $S
grep -c "override" $L/selftest.log >> $S
for t in cuda_tensorcore cuda_exact; do
  DETATTN_TEST_CUBIN_DIR=$W timeout 200 .carry/tests-override/$t --test-threads 4 > $L/test-$t.log 2>&1
  echo "test(ws8) $t rc=$? $(grep -E '^test result' $L/test-$t.log | tail -1)" >> $S
done
san() {
  local tool=$1; shift
  DETATTN_TEST_CUBIN_DIR=$W timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 $OV run --backend cuda --path tensorcore "$@" > $L/san.log 2>&1
  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $L/san.log | tail -1) :: $*" >> $S
  cat $L/san.log >> $L/san-all.log
}
for tool in racecheck synccheck memcheck; do
  san $tool --dtype bf16 --batch 1 --q-heads 4 --kv-heads 1 --q-len 1 --kv-len 4200 --head-dim 128
  san $tool --dtype f16 --batch 2 --q-heads 16 --kv-heads 1 --q-len 1 --kv-len 2100 --head-dim 128 --kv-lens 2100,900 --mask full
  san $tool --dtype bf16 --batch 40 --q-heads 8 --kv-heads 4 --q-len 2 --kv-len 700 --head-dim 128 --causal
done
date -u >> $S
G="--backend cuda --path tensorcore --dtype bf16 --head-dim 128 --q-len 1"
python3 scripts/ab_bench.py --old .carry/bin/detattn --new $OV --new-env DETATTN_TEST_CUBIN_DIR=$W --json $L/ab.json \
  --case "B1 S131072 H1 ps1: $G --batch 1 --q-heads 4 --kv-heads 1 --kv-len 131072" \
  --case "B1 S131072 H1 ps10: $G --batch 1 --q-heads 4 --kv-heads 1 --kv-len 131072 --per-sample 10" \
  --case "B2 S8192 H8 ps1: $G --batch 2 --q-heads 32 --kv-heads 8 --kv-len 8192" \
  --case "B2 S8192 H8 ps10: $G --batch 2 --q-heads 32 --kv-heads 8 --kv-len 8192 --per-sample 10" \
  --case "dec1 ps1: $G --batch 1 --q-heads 32 --kv-heads 8 --kv-len 32768" \
  --case "dec1 ps10: $G --batch 1 --q-heads 32 --kv-heads 8 --kv-len 32768 --per-sample 10" \
  --case "B8 S32768 H1 ps1: $G --batch 8 --q-heads 4 --kv-heads 1 --kv-len 32768" \
  --case "B32 S8192 H1 ps1: $G --batch 32 --q-heads 4 --kv-heads 1 --kv-len 8192" \
  --case "B2 S131072 H1 ps1: $G --batch 2 --q-heads 4 --kv-heads 1 --kv-len 131072" \
  --case "B1 S8192 H1 ps1: $G --batch 1 --q-heads 4 --kv-heads 1 --kv-len 8192" \
  --case "16 rows B1 S32768 H2 ps1: $G --batch 1 --q-heads 8 --kv-heads 2 --kv-len 32768 --q-len 4" \
  --case "decode B32 H8 ps1: $G --batch 32 --q-heads 32 --kv-heads 8 --kv-len 8192" \
  --case "f16 B1 S65536 H2 ps1: --backend cuda --path tensorcore --dtype f16 --head-dim 128 --q-len 1 --batch 1 --q-heads 8 --kv-heads 2 --kv-len 65536" \
  > $L/ab.txt 2>&1
cat $L/ab.txt >> $S
date -u >> $S
for who in old new; do
  if [ $who = new ]; then E="DETATTN_TEST_CUBIN_DIR=$W"; B=$OV; else E=""; B=.carry/bin/detattn; fi
  for c in "--batch 1 --q-heads 4 --kv-heads 1 --kv-len 131072" "--batch 8 --q-heads 4 --kv-heads 1 --kv-len 32768"; do
    env $E timeout 100 ncu --clock-control none --metrics gpu__time_duration.sum,smsp__inst_executed.sum,smsp__warps_eligible.avg.per_cycle_active,dram__throughput.avg.pct_of_peak_sustained_elapsed --csv -k regex:tc_dec \
      $B bench $G $c --warmup 0 --iters 2 > $L/ncu-$who.csv 2>&1
    echo "ncu $who $c: $(grep -E 'tc_dec' $L/ncu-$who.csv | awk -F'","' '{print $(NF-2)"="$NF}' | tr -d '"' | tr '\n' ' ')" >> $S
  done
done
date -u >> $S
cd $OUT && tar czf logs.tar.gz logs
