#!/bin/bash
# Session 11, call 5 (2026-11-29): tc_scan_* dividing again only where a step crosses a head.
# selftest, every GPU test binary, the planted scan (a block's last unit skipped) through the
# override, compute-sanitizer's four tools on Reject calls from Python; Nsight Compute of TensorCore
# reject calls with 91883d5's wheel (old) and this one's, at locked and at free clocks; py_call_cost
# old / new once each.
set -u
R=${OUT:?}; export OUT=/tmp/o; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
bash scripts/gpu-session.sh info selftest tests > $OUT/session.txt 2>&1
tar xJf .carry/plants.tar.xz -C .carry
DETATTN_TEST_CUBIN_DIR=$PWD/.carry/plant-scan timeout 300 .carry/tests-override/cuda_tensorcore reject_scan_finds_a_nonfinite_anywhere > $OUT/plant-scan.txt 2>&1; echo "rc=$?" >> $OUT/plant-scan.txt
python3 -m pip install -q --no-deps --target /tmp/pynew .carry/wheel-new/*.whl > $OUT/pip.log 2>&1
python3 -m pip install -q --no-deps --target /tmp/pyold .carry/wheel-old/*.whl >> $OUT/pip.log 2>&1
for tool in memcheck initcheck racecheck synccheck; do
  echo "=== $tool" >> $OUT/sanitize.txt
  PYTHONPATH=/tmp/pynew timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 python3 .carry/scan_calls.py >> $OUT/sanitize.txt 2>&1
  echo "rc=$?" >> $OUT/sanitize.txt
done
cat > /tmp/one.py <<'PY'
import torch, detattn
g = torch.Generator(device="cuda").manual_seed(1)
def t(*s): return torch.randn(*s, device="cuda", dtype=torch.bfloat16, generator=g)
for B, S in ((1, 32768), (32, 8192)):
    q, k, v = t(B, 1, 32, 128), t(B, S, 8, 128), t(B, S, 8, 128)
    for _ in range(2):
        detattn.attention_with_kvcache(q, k, v, cache_seqlens=S, path="tensorcore", nonfinite="reject")
torch.cuda.synchronize()
PY
for cc in base none; do for w in old new; do
  PYTHONPATH=/tmp/py$w timeout 200 ncu --clock-control $cc --kernel-name regex:'tc_(scan|any)' --metrics gpu__time_duration.sum python3 /tmp/one.py > $OUT/ncu-$cc-$w.txt 2>&1
done; done
for w in old new; do
  PYTHONPATH=/tmp/py$w python3 scripts/py_call_cost.py --burst 100 --json $OUT/pycost-$w.json > $OUT/pycost-$w.txt 2>&1
done
cd /tmp && tar czf $R/logs.tar.gz o
cat $OUT/gpu.txt; tail -7 $OUT/session.txt; grep -E 'panicked|test result|rc=' $OUT/plant-scan.txt; grep -A1 panicked $OUT/plant-scan.txt | tail -1 | cut -c1-250
grep -E '^===|rc=|ERROR SUMMARY|RACECHECK SUMMARY|finite calls' $OUT/sanitize.txt
for f in $OUT/ncu-*.txt; do echo "== $f"; grep -E '^  [a-z_0-9]+.*\(|gpu__time' $f | paste - - | awk '{print $1, $2, $(NF-1), $(NF)}' | head -12; done
for f in $OUT/pycost-*.txt; do echo "== $f"; grep -E 'reject|sdpa cudnn' $f; done
