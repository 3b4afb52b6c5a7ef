#!/bin/bash
# Session 11, call 4 (2026-11-29): tc_scan_* stepping each thread's rows instead of dividing per
# unit. selftest, every GPU test binary, the planted scan (a block's last unit skipped) through the
# override, compute-sanitizer memcheck/initcheck on Reject calls from Python; Nsight Compute of
# TensorCore reject calls with 91883d5's wheel (old) and this one's; py_call_cost old / new; dudect:
# the TensorCore split decode under Reject (new, old) and the wide Exact decode under Reject with
# d9f75e5's, 91883d5's... (bin-old: d6eacff's, the same Exact kernels as 91883d5) and this binary.
set -u
R=${OUT:?}; export OUT=/tmp/o; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
bash scripts/gpu-session.sh info selftest tests > $OUT/session.txt 2>&1
for f in plants bin-d9; do tar xJf .carry/$f.tar.xz -C .carry; done
DETATTN_TEST_CUBIN_DIR=$PWD/.carry/plant-scan timeout 300 .carry/tests-override/cuda_tensorcore reject_scan_finds_a_nonfinite_anywhere > $OUT/plant-scan.txt 2>&1; echo "rc=$?" >> $OUT/plant-scan.txt
python3 -m pip install -q --no-deps --target /tmp/pynew .carry/wheel-new/*.whl > $OUT/pip.log 2>&1
python3 -m pip install -q --no-deps --target /tmp/pyold .carry/wheel-old/*.whl >> $OUT/pip.log 2>&1
for tool in memcheck initcheck; do
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
for w in old new; do
  PYTHONPATH=/tmp/py$w timeout 200 ncu --kernel-name regex:'tc_' --metrics gpu__time_duration.sum python3 /tmp/one.py > $OUT/ncu-$w.txt 2>&1
done
for r in 1 2; do for w in old new; do
  PYTHONPATH=/tmp/py$w python3 scripts/py_call_cost.py --burst 100 --json $OUT/pycost-$w-$r.json > $OUT/pycost-$w-$r.txt 2>&1
done; done
for r in 1 2; do
  for b in bin; do
    echo "=== $b tc" >> $OUT/dudect.txt
    timeout 100 .carry/$b/detattn-dudect --backend cuda --path tensorcore --policy reject --n 10000 --heads 8 --q-len 1 --kv-len 4200 --head-dim 128 >> $OUT/dudect.txt 2>&1; echo "rc=$?" >> $OUT/dudect.txt
  done
  for b in bin bin-d9; do
    echo "=== $b exact wide" >> $OUT/dudect.txt
    timeout 100 .carry/$b/detattn-dudect --backend cuda --path exact --policy reject --n 10000 --batch 32 --q-len 1 --kv-len 256 --heads 4 --head-dim 128 --dtype bf16 >> $OUT/dudect.txt 2>&1; echo "rc=$?" >> $OUT/dudect.txt
  done
done
cd /tmp && tar czf $R/logs.tar.gz o
cat $OUT/gpu.txt; tail -7 $OUT/session.txt; grep -E 'panicked|test result|rc=' $OUT/plant-scan.txt; grep -A1 panicked $OUT/plant-scan.txt | tail -1 | cut -c1-250
grep -E '^===|rc=|ERROR SUMMARY|finite calls' $OUT/sanitize.txt
for w in old new; do echo "== ncu $w"; grep -E '^  [a-z_0-9]+.*\(|gpu__time' $OUT/ncu-$w.txt | paste - - | awk '{print $1, $2, $(NF-1), $(NF)}' | head -30; done
for f in $OUT/pycost-*.txt; do echo "== $f"; grep -E 'tensorcore reject|exact reject|sdpa cudnn' $f; done
grep -E '^===|zeros|subnormals|result' $OUT/dudect.txt
