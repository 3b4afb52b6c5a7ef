#!/bin/bash
# Session 9, call 6: the launches' parameters in one buffer (ParamBytes) against one allocation each:
# the same digests, selftest, the two builds alternating (ab_bench), host_us of each.
set -u
L=$OUT/logs; mkdir -p $L
S=$L/summary.txt
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/gpu.txt; date -u >> $L/gpu.txt
P=/tmp/detattn-pb; U=/tmp/detattn-unpacked
xz -dc .carry/hostexp/detattn-parambytes.xz > $P; xz -dc .carry/hostexp/detattn-unpacked.xz > $U; chmod +x $P $U
timeout 100 $P selftest > $L/selftest-packed.log 2>&1; echo "selftest parambytes rc=$? $(tail -1 $L/selftest-packed.log)" >> $S
dig() { "$@" 2>/dev/null | grep '^digest' | awk '{print $2}'; }
n=0; bad=0
while read -r args; do
  a=$(dig $P run --backend cuda $args); b=$(dig $U run --backend cuda $args); n=$((n+1))
  if [ -z "$a" ] || [ "$a" != "$b" ]; then bad=$((bad+1)); echo "DIFF/empty: $args :: $a $b" >> $S; fi
done <<'CASES'
--path tensorcore --dtype bf16 --q-heads 16 --kv-heads 16 --q-len 4096 --kv-len 4096 --head-dim 128
--path tensorcore --dtype f16 --q-heads 8 --kv-heads 2 --q-len 3000 --kv-len 5000 --head-dim 64 --causal
--path tensorcore --dtype bf16 --q-heads 4 --kv-heads 2 --q-len 200 --kv-len 900 --head-dim 256 --causal
--path tensorcore --dtype bf16 --batch 1 --q-heads 32 --kv-heads 8 --q-len 1 --kv-len 32768 --head-dim 128
--path tensorcore --dtype bf16 --batch 3 --q-heads 8 --kv-heads 2 --q-len 1 --kv-len 5000 --head-dim 128 --page-size 64
--path tensorcore --dtype f16 --q-heads 4 --kv-heads 2 --head-dim 64 --seqlens-q 7,1,300 --seqlens-k 900,40,300 --causal
--path exact --dtype bf16 --batch 1 --q-heads 32 --kv-heads 8 --q-len 1 --kv-len 8192 --head-dim 128
--path exact --dtype f32 --q-heads 4 --kv-heads 4 --q-len 300 --kv-len 300 --head-dim 80 --causal
CASES
echo "digests parambytes = unpacked: $((n-bad))/$n" >> $S
G="--backend cuda --path tensorcore --dtype bf16 --head-dim 128 --q-len 1"
python3 scripts/ab_bench.py --old $U --new $P --json $L/ab.json \
  --case "floor tc ps1: --backend cuda --path tensorcore --dtype f16 --q-heads 1 --kv-heads 1 --q-len 1 --kv-len 16 --head-dim 64" \
  --case "floor tc ps10: --backend cuda --path tensorcore --dtype f16 --q-heads 1 --kv-heads 1 --q-len 1 --kv-len 16 --head-dim 64 --per-sample 10" \
  --case "floor exact ps1: --backend cuda --path exact --dtype f16 --q-heads 1 --kv-heads 1 --q-len 1 --kv-len 16 --head-dim 64" \
  --case "dec1 tc ps1: $G --batch 1 --q-heads 32 --kv-heads 8 --kv-len 32768" \
  --case "B1 S131072 H1 ps1: $G --batch 1 --q-heads 4 --kv-heads 1 --kv-len 131072" \
  --case "B8 S32768 H1 ps1: $G --batch 8 --q-heads 4 --kv-heads 1 --kv-len 32768" \
  --case "W1 tc ps1: --backend cuda --path tensorcore --dtype f16 --q-heads 16 --kv-heads 16 --q-len 1024 --kv-len 1024 --head-dim 64" \
  --case "dec1 exact ps1: --backend cuda --path exact --dtype bf16 --head-dim 128 --q-len 1 --batch 1 --q-heads 32 --kv-heads 8 --kv-len 32768" \
  > $L/ab.txt 2>&1
cat $L/ab.txt >> $S
hu() { "$@" --iters 30 --warmup 5 --json 2>/dev/null | python3 -c 'import json,sys; j=json.load(sys.stdin); print(round(j["median_us"],1), round(j["host_us"],2))'; }
for bin in $U $P; do
  echo "host_us $(basename $bin):" >> $S
  for ps in 1 10; do
    echo "  floor tc ps$ps: $(hu $bin bench --backend cuda --path tensorcore --dtype f16 --q-heads 1 --kv-heads 1 --q-len 1 --kv-len 16 --head-dim 64 --per-sample $ps)" >> $S
    echo "  floor exact ps$ps: $(hu $bin bench --backend cuda --path exact --dtype f16 --q-heads 1 --kv-heads 1 --q-len 1 --kv-len 16 --head-dim 64 --per-sample $ps)" >> $S
    echo "  dec1 tc ps$ps: $(hu $bin bench $G --batch 1 --q-heads 32 --kv-heads 8 --kv-len 32768 --per-sample $ps)" >> $S
    echo "  B1 S131072 H1 tc ps$ps: $(hu $bin bench $G --batch 1 --q-heads 4 --kv-heads 1 --kv-len 131072 --per-sample $ps)" >> $S
  done
done
date -u >> $S
cd $OUT && tar czf logs.tar.gz logs
