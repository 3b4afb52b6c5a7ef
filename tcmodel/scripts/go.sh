#!/bin/bash
# The one GPU command of the research note docs/tensorcore-cpu-model.md (run on the device machine from the repository root with the
# carry folder .carry-h14, built here by tcmodel/scripts/pack.sh). Stages, each under a time limit
# and all under one deadline (DEADLINE seconds from the start; what does not fit is skipped):
#   info   nvidia-smi, detattn info
#   mma    tcharness mma --instr mma, then --instr wgmma (two processes: a fault in one cannot
#          take the other's results): ~1e8 cases per format and instruction vs the CPU model
#   exp2   tcharness exp2: software exp2 GPU == CPU over all 2^32 inputs; vs ex2.approx
#   tc     tcharness tc: baseline and variant TensorCore kernels: accuracy, run-to-run bits, and
#          the CPU emulation of the all-software variant v2, bit for bit
#   bench  detattn bench on W2, W2c, W3c: baseline vs the variants v1, v3, v2 (one binary, the
#          variants through DETATTN_TEST_CUBIN_DIR), interleaved, twice; then run --json digests
# Files in $OUT (at most 8): run.log (everything), summary.txt, bench.jsonl, mismatch_*.bin (only
# if the model disagrees somewhere). The summary is printed last.
#   bash .carry-h14/go.sh [stage ...]      (default: all stages)
set -u
C=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/h14-out}
DEADLINE=${DEADLINE:-450}
mkdir -p "$OUT"
W=/tmp/h14
rm -rf "$W" && mkdir -p "$W" && tar -xJf "$C/bundle.tar.xz" -C "$W" || { echo "unpack failed"; exit 2; }
STAGES=${*:-info mma exp2 tc bench}
exec > >(tee -a "$OUT/run.log") 2>&1
T=$W/tcharness
D=$W/detattn
SUM=$OUT/summary.txt
: > "$SUM"
stamp() { echo "=== $1 $(date -u +%FT%TZ) (t=${SECONDS}s)"; }
has() { [[ " $STAGES " == *" $1 "* ]]; }
# Seconds left for a step capped at $1 (0 when the deadline is past).
left() { local l=$((DEADLINE - SECONDS)); [ $l -lt 0 ] && l=0; [ $l -gt "$1" ] && l=$1; echo $l; }
echo "commit $(cat "$C/COMMIT" 2>/dev/null)" | tee -a "$SUM"

if has info; then
  stamp info
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw,pstate --format=csv | tee -a "$SUM"
  "$D" info 2>&1 | sed -n '1,12p'
  echo "host cores: $(nproc)"
fi

if has mma; then
  for instr in mma wgmma; do
    stamp "mma --instr $instr"
    timeout "$(left 150)" "$T" mma --instr $instr --seed "${SEED:-14}" --cubin "$W/probe.sm_90a.cubin" --out "$OUT" > "/tmp/h14-$instr.txt" 2>&1
    echo "mma --instr $instr rc=$?" | tee -a "$SUM"
    grep -v '^      tile' "/tmp/h14-$instr.txt" | sed -n '1,60p'
    grep '^      tile' "/tmp/h14-$instr.txt" | head -24
    sed -n '/== mma summary ==/,$p' "/tmp/h14-$instr.txt" >> "$SUM"
  done
fi

if has exp2; then
  stamp exp2
  timeout "$(left 90)" "$T" exp2 --cubin "$W/probe.sm_90a.cubin" > /tmp/h14-exp2.txt 2>&1
  echo "exp2 rc=$?" >> "$SUM"
  cat /tmp/h14-exp2.txt
  grep -E 'chunk sums|planted|ex2.approx|SHA-256|element-wise' /tmp/h14-exp2.txt >> "$SUM"
fi

if has tc; then
  stamp tc
  timeout "$(left 120)" "$T" tc --base "$W/base" --variant "v1=$W/v1" --variant "v3=$W/v3" --variant "v2=$W/v2" > /tmp/h14-tc.txt 2>&1
  echo "tc rc=$?" >> "$SUM"
  cat /tmp/h14-tc.txt
  grep -E '^(tc:|bf16|f16)|v1:|v2:|v3:' /tmp/h14-tc.txt >> "$SUM"
fi

if has bench; then
  stamp bench
  B="$OUT/bench.jsonl"
  : > "$B"
  for rep in $(seq 1 "${REPS:-2}"); do
    for w in W2 W2c W3c; do
      case $w in
        W2)  shape="--batch 4 --q-heads 16 --q-len 4096 --head-dim 128" ;;
        W2c) shape="--batch 4 --q-heads 16 --q-len 4096 --head-dim 128 --causal" ;;
        W3c) shape="--batch 1 --q-heads 16 --q-len 16384 --head-dim 128 --causal" ;;
      esac
      for k in base v1 v3 v2; do
        if [ "$k" = base ]; then env=(env -u DETATTN_TEST_CUBIN_DIR); else env=(env DETATTN_TEST_CUBIN_DIR="$W/$k"); fi
        s=$(left 40)
        if [ "$s" -lt 10 ]; then echo "$rep $w $k: skipped (deadline)"; continue; fi
        j=$(timeout "$s" "${env[@]}" "$D" bench --path tensorcore --dtype bf16 --backend cuda $shape \
              --warmup 5 --iters 30 --rotate 4 --per-sample 10 --json 2>/tmp/h14-bench.err | tr -d '\n')
        [ -n "$j" ] || { echo "bench $rep $w $k failed:"; tail -3 /tmp/h14-bench.err; }
        echo "{\"rep\":$rep,\"w\":\"$w\",\"k\":\"$k\",\"t\":$SECONDS,\"r\":${j:-null}}" >> "$B"
        echo "$rep $w $k t=${SECONDS}s $(echo "$j" | head -c 100)"
      done
    done
  done
  # A run per kernel on the same inputs: digests differ between kernels; nan_rows must be 0.
  for k in base v1 v3 v2; do
    if [ "$k" = base ]; then env=(env -u DETATTN_TEST_CUBIN_DIR); else env=(env DETATTN_TEST_CUBIN_DIR="$W/$k"); fi
    s=$(left 30)
    [ "$s" -lt 5 ] && break
    timeout "$s" "${env[@]}" "$D" run --path tensorcore --dtype bf16 --backend cuda --batch 1 --q-heads 16 --q-len 2048 \
      --head-dim 128 --causal --json 2>/dev/null | tr -d '\n ' | sed "s/^/run $k: /;s/$/\n/" | tee -a "$SUM"
  done
  python3 - "$B" <<'EOF' | tee -a "$SUM"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ok = [r for r in rows if r["r"]]
print("bench (median us per launch, 30 samples x 10 launches; by repetition; ratio to base by repetition):")
for w in ["W2", "W2c", "W3c"]:
    base = {r["rep"]: r["r"]["median_us"] for r in ok if r["w"] == w and r["k"] == "base"}
    for k in ["base", "v1", "v3", "v2"]:
        m = {r["rep"]: r["r"]["median_us"] for r in ok if r["w"] == w and r["k"] == k}
        figs = " / ".join(f"{m[p]:9.1f}" for p in sorted(m))
        rat = " / ".join(f"{m[p] / base[p]:.3f}" for p in sorted(m) if p in base)
        tf = " / ".join(f"{r['r']['tflops']:.0f}" for r in ok if r["w"] == w and r["k"] == k)
        print(f"  {w:4s} {k:5s} {figs}   x{rat}   {tf} TF/s")
print(f"  ({len(ok)} of {len(rows)} bench runs returned figures)")
EOF
fi
stamp done
echo "================ SUMMARY ================"
cat "$SUM"
