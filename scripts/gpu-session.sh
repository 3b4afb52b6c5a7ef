#!/usr/bin/env bash
# One GPU call: every check and measurement that needs the GPU, in order, logs under $OUT.
# Run `scripts/carry.sh` here first (the GPU machine has no cargo), then on the device:
#   bash scripts/gpu-session.sh [stage ...]      stages: info selftest tests sanitize d7 bench dudect
# With no stage, runs all. Each stage's log is $OUT/<stage>.log; a summary is printed last.
set -uo pipefail
OUT=${OUT:-/tmp/detattn-out}
mkdir -p "$OUT"
BIN=.carry/bin/detattn
STAGES=("$@")
[ ${#STAGES[@]} -eq 0 ] && STAGES=(info selftest tests sanitize d7 bench dudect)
export INSTA_WORKSPACE_ROOT=$PWD   # insta finds tests/snapshots here, not at the build path
declare -A RESULT

stage() {  # stage NAME CMD...: run, log, record the exit status
  local name=$1; shift
  echo "=== $name: $*" | tee -a "$OUT/$name.log"
  local t0=$SECONDS
  "$@" >>"$OUT/$name.log" 2>&1
  local rc=$?
  RESULT[$name]="${RESULT[$name]:-}rc=$rc ($((SECONDS - t0))s) "
  tail -n 25 "$OUT/$name.log"
  return $rc
}

for s in "${STAGES[@]}"; do
  case $s in
    info)
      stage info nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
      stage info "$BIN" info ;;
    selftest)
      stage selftest "$BIN" selftest ;;
    tests)
      for t in .carry/tests/*; do
        stage tests "$t" --test-threads 1
      done ;;
    sanitize)
      # A small and a large problem through each of the four tools; the CLI runs the GPU path.
      small=(--batch 2 --q-heads 4 --kv-heads 2 --q-len 37 --kv-len 70 --head-dim 64 --dtype bf16 --causal --mask full --kv-lens 70,33)
      large=(--batch 1 --q-heads 16 --kv-heads 16 --q-len 1024 --kv-len 1024 --head-dim 128 --dtype f32)
      bigd=(--batch 1 --q-heads 1 --kv-heads 1 --q-len 5 --kv-len 70 --head-dim 1000 --dtype f16)
      for tool in memcheck racecheck initcheck synccheck; do
        for p in small large bigd; do
          declare -n args=$p
          stage sanitize compute-sanitizer --tool "$tool" --error-exitcode 9 "$BIN" run --backend cuda "${args[@]}"
        done
      done ;;
    d7)
      stage d7 python3 scripts/d7_compare.py .carry/cubin-nvcc13 ;;
    bench)
      stage bench python3 scripts/gpu_compare.py "$BIN" "$OUT/compare.json" ;;
    dudect)
      stage dudect .carry/bin/detattn-dudect --backend cuda --n 10000 --json ;;
    *) echo "unknown stage $s"; exit 2 ;;
  esac
done

echo; echo "=== summary ($(date -u +%F), $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1))"
for s in "${!RESULT[@]}"; do echo "$s: ${RESULT[$s]}"; done
