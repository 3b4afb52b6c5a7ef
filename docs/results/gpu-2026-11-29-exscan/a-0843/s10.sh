#!/bin/bash
# Session 12, call 1 (2026-11-29): a decode's Reject scan reads the caller's rows (detattn_scan_*).
# Checks: selftest, every GPU test binary (new: reject_scan_reads_every_layout_and_nothing_else);
# the planted scan (each chunk's last row skipped) through the override on both reject tests;
# compute-sanitizer's four tools on Exact reject device calls; the Python package's GPU checks.
# Timing: Nsight Compute kernel times of Exact reject calls, HEAD 3d146f8's wheel (old) / this one;
# py_call_cost old / new alternating twice; dudect of the Exact decode under Reject (new).
set -u
R=${OUT:?}; export OUT=/tmp/o; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
date -u > $OUT/date.txt
bash scripts/gpu-session.sh info selftest tests > $OUT/session.txt 2>&1
tar xJf .carry/plants.tar.xz -C .carry
for t in reject_scan_finds_a_nonfinite_anywhere reject_scan_reads_every_layout_and_nothing_else; do
  DETATTN_TEST_CUBIN_DIR=$PWD/.carry/plant-exscan timeout 200 .carry/tests-override/cuda_exact $t > $OUT/plant-$t.txt 2>&1; echo "rc=$?" >> $OUT/plant-$t.txt
done
python3 -m pip install -q --no-deps --target /tmp/pynew .carry/wheel-new/*.whl > $OUT/pip.log 2>&1
python3 -m pip install -q --no-deps --target /tmp/pyold .carry/wheel-old/*.whl >> $OUT/pip.log 2>&1
for tool in memcheck initcheck racecheck synccheck; do
  echo "=== $tool" >> $OUT/sanitize.txt
  PYTHONPATH=/tmp/pynew timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 python3 .carry/exscan_calls.py >> $OUT/sanitize.txt 2>&1
  echo "rc=$?" >> $OUT/sanitize.txt
done
cd /tmp && tar czf $R/logs.tar.gz o; cd - > /dev/null
cat > /tmp/one.py <<'PY'
import torch, detattn
g = torch.Generator(device="cuda").manual_seed(1)
for B, S in ((1, 32768), (32, 8192)):
    q = torch.randn(B, 1, 32, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(B, S, 8, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(B, S, 8, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    for _ in range(2):
        detattn.attention_with_kvcache(q, k, v, cache_seqlens=S, path="exact", nonfinite="reject")
torch.cuda.synchronize()
PY
for w in old new; do
  PYTHONPATH=/tmp/py$w timeout 200 ncu --clock-control none --kernel-name regex:'detattn_' --metrics gpu__time_duration.sum python3 /tmp/one.py > $OUT/ncu-$w.txt 2>&1
done
for r in 1 2; do for w in old new; do
  PYTHONPATH=/tmp/py$w timeout 120 python3 scripts/py_call_cost.py --burst 100 --json $OUT/pycost-$w-$r.json > $OUT/pycost-$w-$r.txt 2>&1
done; done
cd /tmp && tar czf $R/logs.tar.gz o; cd - > /dev/null
PYTHONPATH=/tmp/pynew timeout 150 python3 scripts/python-gpu.py --cli .carry/bin/detattn --only env,selftest,paged,varlen,lse,stream,nocopy,threads --out $OUT > $OUT/python-gpu.txt 2>&1
cd /tmp && tar czf $R/logs.tar.gz o; cd - > /dev/null
cat $OUT/gpu.txt $OUT/date.txt; tail -9 $OUT/session.txt
for f in $OUT/plant-*.txt; do echo "== $f"; grep -E 'test result|rc=' $f; grep -A1 panicked $f | tail -1 | cut -c1-200; done
grep -E '^===|rc=|ERROR SUMMARY|RACECHECK SUMMARY|finite calls' $OUT/sanitize.txt
for w in old new; do echo "== ncu $w"; grep -E '^  [a-z_0-9]+.*\(|gpu__time' $OUT/ncu-$w.txt | paste - - | awk '{print $1, $(NF-1), $(NF)}' | head -40; done
for f in $OUT/pycost-*.txt; do echo "== $f"; grep -E 'exact|sdpa cudnn' $f; done
tail -4 $OUT/python-gpu.txt | cut -c1-150
