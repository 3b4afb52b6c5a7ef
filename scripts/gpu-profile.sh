#!/usr/bin/env bash
# Nsight Compute profiles of the kernels behind the headline workloads, on the GPU machine (after
# scripts/carry.sh here; carry .carry). Why a kernel takes its time: issue-slot use, stall reasons
# per SASS instruction, occupancy. And the pure kernel time of PyTorch SDPA on the same shapes, to
# tell how much of an event-timed SDPA call is host overhead. Not a benchmark: ncu serialises
# launches and its own overhead is in the process's wall time (never in gpu__time_duration).
#
#   bash scripts/gpu-profile.sh [exact] [decode] [tc] [sdpa]     (default: exact tc sdpa)
#
# Everything is written to $OUT/profile/ and packed into $OUT/profile.tgz (the device tool brings
# back at most 8 files).
set -uo pipefail
OUT=${OUT:-/tmp/detattn-out}
P=$OUT/profile
mkdir -p "$P"
# scripts/carry.sh packs the binaries; unpack them once per machine.
if [ -f .carry/bundle.tar.xz ] && [ ! -x .carry/bin/detattn ]; then
  tar -C .carry -xJf .carry/bundle.tar.xz || { echo "could not unpack .carry/bundle.tar.xz"; exit 2; }
fi
BIN=.carry/bin/detattn
WHAT=("$@")
[ ${#WHAT[@]} -eq 0 ] && WHAT=(exact tc sdpa)
SECTIONS=(--section SpeedOfLight --section LaunchStats --section Occupancy --section SchedulerStats
          --section WarpStateStats --section InstructionStats --section ComputeWorkloadAnalysis
          --section MemoryWorkloadAnalysis --section SourceCounters)
W1=(--batch 1 --q-heads 16 --q-len 1024 --head-dim 64)
W2=(--batch 4 --q-heads 16 --q-len 4096 --head-dim 128)

# prof NAME KERNEL_REGEX CMD...: one profiled launch of the first kernel matching the regex, the
# details page as text, the SASS source page (per-instruction stall samples) as CSV, and its
# samples grouped by stretch of code (scripts/ncu_segments.py).
prof() {
  local name=$1 regex=$2; shift 2
  echo "=== $name: $*"
  ncu --clock-control none -k "regex:$regex" -c 1 "${SECTIONS[@]}" -f -o "$P/$name" "$@" \
    >"$P/$name.run.log" 2>&1 || { echo "ncu failed: $(tail -3 "$P/$name.run.log")"; return; }
  ncu --import "$P/$name.ncu-rep" --print-details all >"$P/$name.txt" 2>&1
  ncu --import "$P/$name.ncu-rep" --page source --csv --print-source sass >"$P/$name.sass.csv" 2>&1
  # The samples by stretch of machine code (one per warp role's loop body, where roles differ).
  python3 scripts/ncu_segments.py "$P/$name.sass.csv" 25 >"$P/$name.segments.txt" 2>&1
  grep -E "Duration|Registers Per|Achieved Occupancy|Issue Slots Busy|No Eligible|Eligible Warps|Warp Cycles Per Issued|Executed Ipc A" "$P/$name.txt" | head -12
}

for w in "${WHAT[@]}"; do
  case $w in
    exact)
      # Every kernel of one W1 call (three preparations + attention), durations only.
      ncu --clock-control none -k regex:detattn_ --metrics gpu__time_duration.sum \
        "$BIN" bench --backend cuda "${W1[@]}" --dtype f32 --warmup 0 --iters 1 --rotate 1 \
        >"$P/w1_all_kernels.txt" 2>&1
      grep -E "detattn_|gpu__time_duration" "$P/w1_all_kernels.txt" | head -20
      prof exact_w1_f32 "detattn_exact64" "$BIN" bench --backend cuda "${W1[@]}" --dtype f32 --warmup 0 --iters 1 --rotate 1
      prof exact_w2_f32 "detattn_exact128" "$BIN" bench --backend cuda "${W2[@]}" --dtype f32 --warmup 0 --iters 1 --rotate 1 ;;
    decode)
      # The Exact decode kernels on dec1 and decode B32 (bf16): scores and chains, one launch each.
      for shape in "dec1 --batch 1 --kv-len 32768" "b32 --batch 32 --kv-len 8192"; do
        set -- $shape
        name=$1; shift
        for k in scores weights values; do
          prof "exact_${name}_$k" "detattn_dec_${k}_bf16" "$BIN" run --backend cuda --path exact --dtype bf16 \
            --q-heads 32 --kv-heads 8 --q-len 1 --head-dim 128 "$@"
        done
      done ;;
    tc)
      prof tc_w2_bf16 "tc_fwd_bf16_d128" "$BIN" run --backend cuda --path tensorcore "${W2[@]}" --dtype bf16
      prof tc_w1_f16 "tc_fwd_f16_d64" "$BIN" run --backend cuda --path tensorcore "${W1[@]}" --dtype f16 ;;
    sdpa)
      cat >"$P/sdpa_once.py" <<'EOF'
import torch, torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
for (b, h, s, d), dt, be in [((1, 16, 1024, 64), torch.float32, SDPBackend.EFFICIENT_ATTENTION),
                             ((1, 16, 1024, 64), torch.float16, SDPBackend.FLASH_ATTENTION),
                             ((4, 16, 4096, 128), torch.float32, SDPBackend.EFFICIENT_ATTENTION),
                             ((4, 16, 4096, 128), torch.bfloat16, SDPBackend.FLASH_ATTENTION)]:
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=dt) for _ in range(3))
    with sdpa_kernel([be]):
        for _ in range(3):
            F.scaled_dot_product_attention(q, k, v)
    torch.cuda.synchronize()
EOF
      ncu --clock-control none -k regex:"fmha|flash|attention" --metrics gpu__time_duration.sum \
        python3 "$P/sdpa_once.py" >"$P/sdpa_kernels.txt" 2>&1
      grep -E "^  [a-zA-Z_].*\(|gpu__time_duration" "$P/sdpa_kernels.txt" | cut -c1-150 | head -40 ;;
    *) echo "unknown: $w"; exit 2 ;;
  esac
done
tar -C "$OUT" -czf "$OUT/profile.tgz" profile && rm -rf "$P"
ls -la "$OUT"
