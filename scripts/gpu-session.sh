#!/usr/bin/env bash
# One GPU call: every check and measurement that needs the GPU, in order, logs under $OUT.
# Run `scripts/carry.sh` here first (the GPU machine has no cargo); for the d7 stage also
# `python3 kernels/build.py nvcc13`, for the planted leaks `python3 audit/plant_gpu_leak.py` and
# `python3 audit/plant_tc_leak.py` (and `--oldcap`); then on the device (carry .carry/bundle.tar.xz):
#   bash scripts/gpu-session.sh [stage ...]
#   stages: info selftest tests sanitize decsan tcdecsan tclse tcpaged d7 planted bench quickbench exdec dudect pageddudect tcbench tcdudect kvcache grid probes
# With no stage, runs info selftest tests sanitize d7 bench. Each stage's log is $OUT/<stage>.log;
# a summary (GPU name, date, exit status and seconds per stage) is printed last.
#
# The tests stage records the TensorCore golden digests of this GPU's architecture into
# $OUT/tensorcore.<arch>.txt (tests/cuda_tensorcore.rs, DETATTN_RECORD); compare it with
# golden/tensorcore.<arch>.txt before committing it.
set -uo pipefail
OUT=${OUT:-/tmp/detattn-out}
mkdir -p "$OUT"
# scripts/carry.sh packs the binaries; unpack them once per machine.
if [ -f .carry/bundle.tar.xz ] && [ ! -x .carry/bin/detattn ]; then
  tar -C .carry -xJf .carry/bundle.tar.xz || { echo "could not unpack .carry/bundle.tar.xz"; exit 2; }
fi
BIN=.carry/bin/detattn                  # default build: ignores DETATTN_TEST_CUBIN_DIR
OBIN=.carry/bin-override                # test-only builds that honour it
STAGES=("$@")
[ ${#STAGES[@]} -eq 0 ] && STAGES=(info selftest tests sanitize d7 bench)
declare -A RESULT
ORDER=()

sanitize_cases() {  # sanitize_cases NAME LIMIT_S TOOL: compute-sanitizer's TOOL on each CLI problem of P
  local name=$1 limit=$2 tool=$3 args
  for args in "${P[@]}"; do
    # shellcheck disable=SC2086
    stage "$name" "$limit" compute-sanitizer --tool "$tool" --error-exitcode 9 "$BIN" run --backend cuda $args
  done
}

sanitize_all() {  # sanitize_all NAME LIMIT_S: the four tools on each CLI problem of P, then the summaries
  local name=$1 limit=$2 tool
  for tool in memcheck racecheck initcheck synccheck; do
    sanitize_cases "$name" "$limit" "$tool"
  done
  grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" "$OUT/$name.log" | sort | uniq -c
}

stage() {  # stage NAME LIMIT_S CMD...: run with a time limit, log, record the exit status
  local name=$1 limit=$2; shift 2
  echo "=== $name: $*" | tee -a "$OUT/$name.log"
  local t0=$SECONDS
  timeout "$limit" "$@" >>"$OUT/$name.log" 2>&1
  local rc=$?
  [ -z "${RESULT[$name]:-}" ] && ORDER+=("$name")
  RESULT[$name]="${RESULT[$name]:-}rc=$rc ($((SECONDS - t0))s) "
  tail -n 6 "$OUT/$name.log"
  return $rc
}

for s in "${STAGES[@]}"; do
  case $s in
    info)
      stage info 60 nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
      stage info 60 "$BIN" info ;;
    selftest)
      stage selftest 120 "$BIN" selftest ;;
    tests)
      # The GPU contract tests (they print SKIPPED and why when no GPU is usable).
      for t in .carry/tests/*; do
        DETATTN_RECORD=$OUT stage tests 400 "$t" --test-threads 4 --nocapture
      done ;;
    sanitize)
      # compute-sanitizer's four tools on small ragged problems through the CLI: the Exact kernels
      # (fast 64/128/256, generic; prepare; decode; strided bshd; top-left; Propagate), every TensorCore
      # kernel (prefill and decode x d64/128/256, f16/bf16 alternating), the policy kernels, and
      # the device entry's non-finite scan (a test binary).
      P=(
        "--batch 2 --q-heads 4 --kv-heads 2 --q-len 37 --kv-len 70 --head-dim 64 --dtype bf16 --causal --mask full --kv-lens 70,33 --nonfinite propagate --layout bshd"
        "--batch 1 --q-heads 8 --kv-heads 8 --q-len 300 --kv-len 300 --head-dim 128 --dtype f32 --causal --causal-align top-left"
        "--batch 1 --q-heads 1 --kv-heads 1 --q-len 5 --kv-len 70 --head-dim 1000 --dtype f16"
        "--batch 1 --q-heads 2 --kv-heads 1 --q-len 70 --kv-len 130 --head-dim 200 --dtype f32 --mask shared --layout bshd"
        "--batch 2 --q-heads 8 --kv-heads 2 --q-len 1 --kv-len 700 --head-dim 128 --dtype bf16 --kv-lens 700,260 --mask full --nonfinite propagate"
        "--batch 1 --q-heads 4 --kv-heads 1 --q-len 4 --kv-len 300 --head-dim 300 --dtype f32 --causal --layout bshd"
        "--batch 2 --q-heads 2 --kv-heads 2 --q-len 3 --kv-len 90 --head-dim 64 --dtype f16 --causal --causal-align top-left --kv-lens 2,90"
        "--path tensorcore --dtype f16 --amp 15 --nonfinite propagate --batch 1 --q-heads 4 --kv-heads 2 --q-len 33 --kv-len 70 --head-dim 64 --causal --mask full --kv-lens 61 --layout bshd"
        "--path tensorcore --dtype bf16 --amp 127 --nonfinite propagate --batch 2 --q-heads 4 --kv-heads 2 --q-len 20 --kv-len 50 --head-dim 128 --kv-lens 50,31"
        "--path tensorcore --dtype bf16 --batch 2 --q-heads 4 --kv-heads 2 --q-len 77 --kv-len 77 --head-dim 256 --causal --kv-lens 77,30"
        "--path tensorcore --dtype f16 --batch 2 --q-heads 4 --kv-heads 2 --q-len 45 --kv-len 90 --head-dim 128 --causal --causal-align top-left --layout bshd"
        "--path tensorcore --dtype bf16 --batch 2 --q-heads 4 --kv-heads 2 --q-len 100 --kv-len 60 --head-dim 64 --mask per-batch"
        "--path tensorcore --dtype f16 --batch 2 --q-heads 8 --kv-heads 2 --q-len 1 --kv-len 300 --head-dim 64 --kv-lens 300,129"
        "--path tensorcore --dtype bf16 --batch 2 --q-heads 8 --kv-heads 2 --q-len 2 --kv-len 200 --head-dim 128 --causal --mask full"
        "--path tensorcore --dtype f16 --batch 1 --q-heads 8 --kv-heads 1 --q-len 1 --kv-len 150 --head-dim 256 --layout bshd"
        # the key split (past 2048 keys): split decode + tc_merge, and prefill in chunk launches
        "--path tensorcore --dtype f16 --batch 2 --q-heads 8 --kv-heads 2 --q-len 1 --kv-len 4500 --head-dim 128 --kv-lens 4500,2000 --mask full"
        "--path tensorcore --dtype bf16 --batch 1 --q-heads 4 --kv-heads 2 --q-len 2 --kv-len 2100 --head-dim 256 --causal"
        "--path tensorcore --dtype bf16 --batch 1 --q-heads 2 --kv-heads 1 --q-len 150 --kv-len 4300 --head-dim 64 --causal --nonfinite propagate"
        # the sm_90 wgmma prefill (D 128): two chunk launches, GQA, a mask, a partial last row block
        "--path tensorcore --dtype bf16 --batch 1 --q-heads 2 --kv-heads 1 --q-len 130 --kv-len 2200 --head-dim 128 --causal --mask full"
        "--path tensorcore --dtype f16 --batch 128 --q-heads 4 --kv-heads 2 --q-len 1 --kv-len 2100 --head-dim 64 --mask full"
      )
      for tool in memcheck racecheck initcheck synccheck; do
        sanitize_cases sanitize 300 "$tool"
        stage sanitize 300 compute-sanitizer --tool "$tool" --error-exitcode 9 .carry/tests/cuda_exact \
          device_entry_rejects_nonfinite_and_bad_arguments_without_writing --test-threads 1
      done
      grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" "$OUT/sanitize.log" | sort | uniq -c ;;
    kvcache)
      # Paged caches and variable-length batches on both paths (tests/cuda_kvcache.rs); the CLI's
      # digest with and without --page-size on each path (it must not change); compute-sanitizer
      # on the device entry of paged caches (the gather kernel) and on the varlen sequences.
      stage kvcache 400 .carry/tests/cuda_kvcache --test-threads 2 --nocapture
      for path in exact tensorcore; do
        A="--backend cuda --path $path --dtype f16 --q-heads 8 --kv-heads 2 --head-dim 128 --causal --seed 5 --json"
        for shape in "--seqlens-q 1,30,1 --seqlens-k 150,30,2100" "--batch 2 --q-len 3 --kv-len 700 --kv-lens 700,333"; do
          # shellcheck disable=SC2086
          stage kvcache 60 bash -c "a=\$($BIN run $A $shape | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"digest\"])'); \
            b=\$($BIN run $A $shape --page-size 16 | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"digest\"])'); \
            echo \"$path $shape: contiguous \$a paged16 \$b\"; [ -n \"\$a\" ] && [ \"\$a\" = \"\$b\" ]"
        done
      done
      for tool in memcheck racecheck initcheck; do
        stage kvcache 300 compute-sanitizer --tool "$tool" --error-exitcode 9 .carry/tests/cuda_kvcache \
          reject_reads_what_the_cpu_reads --test-threads 1
      done
      stage kvcache 300 compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN" run --backend cuda \
        --path tensorcore --dtype bf16 --q-heads 4 --kv-heads 2 --head-dim 64 --seqlens-q 1,0,9,1 \
        --seqlens-k 40,5,9,2100 --causal --page-size 32
      grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" "$OUT/kvcache.log" | sort | uniq -c ;;
    d7)
      stage d7 500 python3 scripts/d7_compare.py .carry/cubin-nvcc13 ;;
    planted)
      # The structured-extremes test on TensorCore kernels with the old scale cap (docs/tensorcore.md,
      # item 5; built by `python3 audit/plant_tc_leak.py --oldcap`): it must FAIL, naming the
      # kernel, so the test can see the fault it guards against. rc 0 here means it failed.
      if [ -d .carry/cubin-tc-oldcap ]; then
        stage planted 300 bash -c 'DETATTN_TEST_CUBIN_DIR=.carry/cubin-tc-oldcap \
          .carry/tests-override/cuda_tensorcore structured_extremes_are_finite_on_every_kernel \
          --test-threads 4; rc=$?; echo "exit $rc (the old cap must make this test fail)"; [ $rc -ne 0 ]'
      fi ;;
    bench)
      stage bench 560 python3 scripts/gpu_compare.py "$BIN" "$OUT/compare.json" ;;
    quickbench)
      stage quickbench 300 python3 scripts/gpu_compare.py "$BIN" "$OUT/compare.json" --quick ;;
    decsan)
      # compute-sanitizer's four tools on the Exact decode kernels alone: GQA with key lengths, a
      # mask and Propagate; top-left causal speculative rows; f32; a head dim whose rows are not
      # whole 16-byte units (element copies); bshd layout; MHA with several stages and a tail.
      P=(
        "--dtype bf16 --batch 2 --q-heads 8 --kv-heads 2 --q-len 1 --kv-len 700 --head-dim 128 --kv-lens 700,260 --mask full --nonfinite propagate"
        "--dtype f16 --batch 2 --q-heads 4 --kv-heads 1 --q-len 3 --kv-len 530 --head-dim 64 --causal --causal-align top-left --kv-lens 530,7"
        "--dtype f32 --batch 1 --q-heads 16 --kv-heads 1 --q-len 1 --kv-len 1100 --head-dim 256 --mask shared --nonfinite propagate"
        "--dtype bf16 --batch 1 --q-heads 6 --kv-heads 2 --q-len 2 --kv-len 333 --head-dim 100 --layout bshd --causal"
        "--dtype f16 --batch 3 --q-heads 2 --kv-heads 2 --q-len 1 --kv-len 2000 --head-dim 80 --kv-lens 2000,0,1999"
        # dec_values_wide (batch · kv_heads · ⌈head_dim / 128⌉ ≥ 128): a mask and Propagate; f32
        # at D 256 (two slices); 16 rows a KV head at D 100 (element copies), bshd, causal.
        "--dtype bf16 --batch 64 --q-heads 8 --kv-heads 2 --q-len 1 --kv-len 700 --head-dim 128 --mask full --nonfinite propagate"
        "--dtype f32 --batch 64 --q-heads 16 --kv-heads 1 --q-len 1 --kv-len 300 --head-dim 256 --mask shared"
        "--dtype f16 --batch 128 --q-heads 4 --kv-heads 1 --q-len 4 --kv-len 200 --head-dim 100 --layout bshd --causal"
      )
      sanitize_all decsan 120 ;;
    tcdecsan)
      # compute-sanitizer's four tools on the TensorCore decode kernels (on sm_90 the warp-specialised
      # loop: rounds of two tiles, K and V rings): a split decode of 16 rows a KV head with key
      # lengths, a mask and Propagate; speculative rows under top-left causal at D 64; a decode that
      # folds three chunks in one block (B·Hkv = 256); a tile count of three with a tile crossing the
      # key length, bshd; a single tile.
      P=(
        "--path tensorcore --dtype bf16 --batch 2 --q-heads 16 --kv-heads 1 --q-len 1 --kv-len 4500 --head-dim 128 --kv-lens 4500,2049 --mask full --nonfinite propagate"
        "--path tensorcore --dtype f16 --batch 1 --q-heads 4 --kv-heads 1 --q-len 2 --kv-len 2100 --head-dim 64 --causal --causal-align top-left"
        "--path tensorcore --dtype f16 --batch 128 --q-heads 2 --kv-heads 2 --q-len 1 --kv-len 4300 --head-dim 128"
        "--path tensorcore --dtype bf16 --batch 2 --q-heads 8 --kv-heads 2 --q-len 1 --kv-len 150 --head-dim 64 --kv-lens 150,129 --layout bshd"
        "--path tensorcore --dtype bf16 --batch 1 --q-heads 4 --kv-heads 4 --q-len 1 --kv-len 40 --head-dim 128"
      )
      sanitize_all tcdecsan 120 ;;
    tclse)
      # compute-sanitizer's four tools on the TensorCore kernels writing the log-sum-exp: a split
      # decode and its merge under Propagate (poison), with a batch element without keys; a
      # prefill of two chunk launches with a mask; a decode folding every chunk in one block
      # (B·Hkv = 256); a varlen batch.
      P=(
        "--path tensorcore --dtype bf16 --batch 2 --q-heads 8 --kv-heads 2 --q-len 1 --kv-len 4500 --head-dim 128 --kv-lens 4500,0 --nonfinite propagate --lse"
        "--path tensorcore --dtype f16 --batch 1 --q-heads 4 --kv-heads 2 --q-len 40 --kv-len 2500 --head-dim 256 --causal --mask full --lse"
        "--path tensorcore --dtype f16 --batch 128 --q-heads 2 --kv-heads 2 --q-len 1 --kv-len 2100 --head-dim 64 --lse"
        "--path tensorcore --dtype bf16 --q-heads 4 --kv-heads 1 --head-dim 64 --seqlens-q 1,9,0 --seqlens-k 40,9,5 --causal --lse"
      )
      sanitize_all tclse 200 ;;
    tcpaged)
      # The TensorCore decode kernels reading a paged cache through its block table (tc_decp_*) and
      # the policy kernels scanning and copying pages: the device entry of paged caches against the
      # contiguous bits (tests/cuda_kvcache.rs, both routes, Reject and Propagate) under memcheck and
      # racecheck; the benchmark of 16-row pages (row-by-row lookups) under initcheck and synccheck.
      for tool in memcheck racecheck; do
        stage tcpaged 300 compute-sanitizer --tool "$tool" --error-exitcode 9 .carry/tests/cuda_kvcache \
          paged_cache_gives_the_contiguous_bits_on_the_gpu reject_reads_what_the_cpu_reads --test-threads 1
      done
      for tool in initcheck synccheck; do
        for ps in 16 256; do
          stage tcpaged 120 compute-sanitizer --tool "$tool" --error-exitcode 9 "$BIN" bench --backend cuda \
            --path tensorcore --dtype bf16 --batch 3 --q-heads 8 --kv-heads 2 --q-len 1 --kv-len 3000 \
            --head-dim 128 --kv-lens 3000,17,2100 --page-size "$ps" --warmup 0 --iters 1 --rotate 1
        done
      done
      grep -h "ERROR SUMMARY\|RACECHECK SUMMARY\|test result\|paged cache" "$OUT/tcpaged.log" | sort | uniq -c ;;
    exdec)
      # The Exact decode targets side by side with SDPA (dec1, decode B32, and the batches 2-12
      # between them, where the values kernels change), then each decode kernel's own time under
      # Nsight Compute (one call of each shape, bf16).
      stage exdec 400 python3 scripts/gpu_compare.py "$BIN" "$OUT/exdec.json" --paths exact --only decode,dec1,batches
      for shape in "--batch 1 --kv-len 32768" "--batch 32 --kv-len 8192"; do
        # shellcheck disable=SC2086
        stage exdec 300 ncu --clock-control none --metrics gpu__time_duration.sum -k regex:detattn_dec_ "$BIN" bench --backend cuda \
          --path exact --dtype bf16 --q-heads 32 --kv-heads 8 --q-len 1 --head-dim 128 $shape --warmup 0 --iters 1
      done
      awk '/^  detattn_dec_/{k=$1} /^ +gpu__time_duration.sum/{print k, $NF}' "$OUT/exdec.log" ;;
    grid)
      # Issue 11's whole decode grid (TensorCore, one call a sample; caches up to 4.5 GB: the
      # 17.2 GB one takes the host minutes to generate), with SDPA, the ceiling and same-bytes copies.
      stage grid 480 python3 scripts/gpu_compare.py "$BIN" "$OUT/grid.json" --paths tensorcore --only grid \
        --max-cache-gb 4.5 ;;
    probes)
      # The measurement aids of docs/perf.md ("What bounds a 64-block split decode", "A call's host
      # time"): what one block's copies reach, what the best read of a decode's bytes reaches by the
      # rows' protocol (and a chunk read by a cluster of two), what a bare launch costs the host.
      stage probes 120 nvcc -arch=sm_90a -O3 -o "$OUT/probe_load" scripts/probe_load_rate.cu
      stage probes 120 "$OUT/probe_load"
      stage probes 120 nvcc -arch=sm_90a -O3 -o "$OUT/probe_read" scripts/probe_read_bound.cu
      stage probes 120 "$OUT/probe_read"
      stage probes 120 nvcc -arch=sm_90a -O3 -o "$OUT/probe_launch" scripts/probe_launch_cost.cu -lcuda
      stage probes 60 "$OUT/probe_launch" ;;
    tcbench)
      for n in 1 10; do
        stage tcbench 280 python3 scripts/gpu_compare.py "$BIN" "$OUT/tc-compare-ps$n.json" \
          --paths tensorcore --per-sample "$n"
      done ;;
    tcdudect)
      # The TensorCore path in the dudect harness (every class vs random, Propagate), f16 d64 and
      # bf16 d128, 10 000 measurements per class; then the planted leak, which must be seen.
      stage tcdudect 300 .carry/bin/detattn-dudect --backend cuda --path tensorcore --dtype f16 \
        --head-dim 64 --n 10000 --json-out "$OUT/tcdudect-f16-d64.json"
      stage tcdudect 300 .carry/bin/detattn-dudect --backend cuda --path tensorcore --dtype bf16 \
        --head-dim 128 --n 10000 --json-out "$OUT/tcdudect-bf16-d128.json"
      # Causal: on sm_90 the TMA prefill kernels with the warpgroups' turns at D 128 and without
      # them at D 64 (tc_fwdt_*_causal).
      stage tcdudect 300 .carry/bin/detattn-dudect --backend cuda --path tensorcore --dtype bf16 \
        --head-dim 128 --causal --n 10000 --json-out "$OUT/tcdudect-bf16-d128-causal.json"
      stage tcdudect 300 .carry/bin/detattn-dudect --backend cuda --path tensorcore --dtype f16 \
        --head-dim 64 --causal --n 10000 --json-out "$OUT/tcdudect-f16-d64-causal.json"
      # The key split: a split decode (4200 keys: three chunk blocks and tc_merge) and a prefill of
      # three chunk launches.
      stage tcdudect 300 .carry/bin/detattn-dudect --backend cuda --path tensorcore --dtype bf16 \
        --head-dim 128 --q-len 1 --kv-len 4200 --heads 8 --n 10000 --json-out "$OUT/tcdudect-split-decode.json"
      stage tcdudect 300 .carry/bin/detattn-dudect --backend cuda --path tensorcore --dtype f16 \
        --head-dim 64 --q-len 64 --kv-len 4200 --heads 2 --n 10000 --json-out "$OUT/tcdudect-split-prefill.json"
      # The decode at 128 KV heads (32 batch elements x 4), the Exact dudect stage's wide shape.
      stage tcdudect 300 .carry/bin/detattn-dudect --backend cuda --path tensorcore --dtype bf16 \
        --head-dim 128 --batch 32 --q-len 1 --kv-len 256 --heads 4 --n 10000 --json-out "$OUT/tcdudect-decode-b32.json"
      # (Not here: the decode that folds every chunk in one block needs 256 kv heads, whose 275 MB
      # of inputs the harness regenerates per measurement: it did not finish in 300 s.)
      if [ -d .carry/cubin-tc-leaky ]; then
        DETATTN_TEST_CUBIN_DIR=.carry/cubin-tc-leaky stage tcdudect 300 "$OBIN/detattn-dudect" \
          --backend cuda --path tensorcore --dtype f16 --head-dim 64 --n 10000 --expect-leak \
          --json-out "$OUT/tcdudect-leaky-f16-d64.json"
        # (the f16 D 64 run above is already one of the sm_90 wgmma prefill kernels; bf16 D 128 too)
        DETATTN_TEST_CUBIN_DIR=.carry/cubin-tc-leaky stage tcdudect 300 "$OBIN/detattn-dudect" \
          --backend cuda --path tensorcore --dtype bf16 --head-dim 128 --n 10000 --expect-leak \
          --json-out "$OUT/tcdudect-leaky-bf16-d128.json"
      fi ;;
    pageddudect)
      # The paged cache (K and V in 16-row pages, shuffled): the TensorCore decode that reads the
      # pages through the block table (4200 keys: the split and tc_merge) with one and with 16
      # query rows per KV head, the Exact path (which gathers), and the TensorCore planted leak
      # seen through the paged kernels (16 rows: with one, the skipped MMAs are too small a part
      # of a load-bound call for the harness to see, t = -3 on 2026-11-26). On sm_90 the decode is
      # warp-specialised and the O warps' time is hidden behind the score warps': the planted P·V
      # and rescale skips were not seen there (2026-11-27 05:48 UTC), hence plant_tc_leak.py's
      # shortcut in the softmax (the score warps' work), seen at |t| 72 (06:58 UTC).
      for q in 1 16; do
        stage pageddudect 300 .carry/bin/detattn-dudect --backend cuda --path tensorcore --dtype bf16 \
          --head-dim 128 --q-len $q --kv-len 4200 --heads 8 --page-size 16 --n 10000 \
          --json-out "$OUT/pageddudect-tc-decode-q$q.json"
      done
      stage pageddudect 300 .carry/bin/detattn-dudect --backend cuda --dtype bf16 --head-dim 128 \
        --q-len 1 --kv-len 1024 --heads 8 --page-size 16 --n 10000 --json-out "$OUT/pageddudect-exact-decode.json"
      if [ -d .carry/cubin-tc-leaky ]; then
        DETATTN_TEST_CUBIN_DIR=.carry/cubin-tc-leaky stage pageddudect 300 "$OBIN/detattn-dudect" \
          --backend cuda --path tensorcore --dtype bf16 --head-dim 128 --q-len 16 --kv-len 4200 \
          --heads 8 --page-size 16 --n 10000 --expect-leak
      fi ;;
    dudect)
      stage dudect 300 .carry/bin/detattn-dudect --backend cuda --n 10000
      # The decode kernels (group · q_len = 1): one query row per head against 1024 keys.
      stage dudect 300 .carry/bin/detattn-dudect --backend cuda --n 10000 --q-len 1 --kv-len 1024 \
        --heads 8 --head-dim 128 --dtype bf16 --json-out "$OUT/dudect-decode-bf16-d128.json"
      # The same decode under the default Reject policy (the scan, then the kernels built for inputs
      # it found finite: the policy-templated Exact kernels' other instantiation), finite classes.
      stage dudect 300 .carry/bin/detattn-dudect --backend cuda --n 10000 --q-len 1 --kv-len 1024 \
        --heads 8 --head-dim 128 --dtype bf16 --policy reject --json-out "$OUT/dudect-decode-bf16-d128-reject.json"
      stage dudect 300 .carry/bin/detattn-dudect --backend cuda --n 10000 --batch 32 --q-len 1 --kv-len 256 \
        --heads 4 --head-dim 128 --dtype bf16 --policy reject --json-out "$OUT/dudect-decode-wide-bf16-d128-reject.json"
      # dec_values_wide: 32 batch elements x 4 KV heads (128 blocks of 128 columns), bf16 and f32.
      stage dudect 300 .carry/bin/detattn-dudect --backend cuda --n 10000 --batch 32 --q-len 1 --kv-len 256 \
        --heads 4 --head-dim 128 --dtype bf16 --json-out "$OUT/dudect-decode-wide-bf16-d128.json"
      stage dudect 300 .carry/bin/detattn-dudect --backend cuda --n 10000 --batch 32 --q-len 1 --kv-len 256 \
        --heads 4 --head-dim 128 --json-out "$OUT/dudect-decode-wide-f32-d128.json"
      # The same launch kernel by kernel (events between the launches).
      stage dudect 300 .carry/bin/detattn-dudect --backend cuda --n 10000 --batch 32 --q-len 1 --kv-len 256 \
        --heads 4 --head-dim 128 --dtype bf16 --each-kernel --json-out "$OUT/dudect-decode-wide-each.json"
      # The control: the driver's copy of the same K and V, no attention (the GPU's own dependence
      # on the values moved; docs/audit.md).
      stage dudect 300 .carry/bin/detattn-dudect --backend cuda --n 10000 --batch 32 --q-len 1 --kv-len 256 \
        --heads 4 --head-dim 128 --dtype bf16 --kernel memcpy --json-out "$OUT/dudect-memcpy-control.json"
      if [ -d .carry/cubin-leaky ]; then
        DETATTN_TEST_CUBIN_DIR=.carry/cubin-leaky stage dudect 300 "$OBIN/detattn-dudect" --backend cuda --n 10000 --expect-leak
        # The narrow values kernel's plants through f32: in its 2-byte kernels ptxas turns the planted
        # shortcuts into selections (no branch, so no leak to see; the SASS audit passes them).
        DETATTN_TEST_CUBIN_DIR=.carry/cubin-leaky stage dudect 300 "$OBIN/detattn-dudect" --backend cuda --n 10000 \
          --q-len 1 --kv-len 1024 --heads 8 --head-dim 128 --dtype f32 --expect-leak
        DETATTN_TEST_CUBIN_DIR=.carry/cubin-leaky stage dudect 300 "$OBIN/detattn-dudect" --backend cuda --n 10000 \
          --batch 32 --q-len 1 --kv-len 256 --heads 4 --head-dim 128 --dtype bf16 --expect-leak
      fi ;;
    *) echo "unknown stage $s"; exit 2 ;;
  esac
done

echo; echo "=== summary ($(date -u '+%F %H:%M UTC'), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1))"
for s in "${ORDER[@]}"; do echo "$s: ${RESULT[$s]}"; done
