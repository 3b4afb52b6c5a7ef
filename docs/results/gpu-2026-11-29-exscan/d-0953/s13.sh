#!/bin/bash
# Session 12, call 4 (2026-11-29): the scan's grid sized by the chunks (a small decode in one wave),
# blocks without a chunk leaving after one division, nine-step divisions for the set-up.
# Checks: selftest, every GPU test binary, the planted scan on both reject tests, compute-sanitizer.
# Timing: Nsight Compute of Exact reject calls (small, dec1, B32) with 3d146f8's wheel (old) and
# this one's; py_call_cost new once; dudect of the two Exact decodes under Reject, this binary and
# d9f75e5's alternating.
set -u
R=${OUT:?}; export OUT=/tmp/o; rm -rf $OUT; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
date -u > $OUT/date.txt
bash scripts/gpu-session.sh info selftest tests > $OUT/session.txt 2>&1
tar xJf .carry/plants.tar.xz -C .carry; tar xJf .carry/bin-d9.tar.xz -C .carry
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
for B, S in ((1, 1024), (1, 32768), (32, 8192)):
    q = torch.randn(B, 1, 32, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(B, S, 8, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(B, S, 8, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    for _ in range(2):
        detattn.attention_with_kvcache(q, k, v, cache_seqlens=S, path="exact", nonfinite="reject")
torch.cuda.synchronize()
PY
for w in old new; do
  PYTHONPATH=/tmp/py$w timeout 200 ncu --clock-control none --kernel-name regex:'detattn_(scan|prepare|reject)' --metrics gpu__time_duration.sum python3 /tmp/one.py > $OUT/ncu-$w.txt 2>&1
done
PYTHONPATH=/tmp/pynew timeout 120 python3 scripts/py_call_cost.py --burst 100 --json $OUT/pycost-new.json > $OUT/pycost-new.txt 2>&1
cd /tmp && tar czf $R/logs.tar.gz o; cd - > /dev/null
for b in bin bin-d9 bin; do
  for a in "--q-len 1 --kv-len 1024 --heads 8 --head-dim 128 --dtype bf16" "--batch 32 --q-len 1 --kv-len 256 --heads 4 --head-dim 128 --dtype bf16"; do
    echo "=== $b $a" >> $OUT/dudect.txt
    timeout 90 .carry/$b/detattn-dudect --backend cuda --path exact --policy reject --n 10000 $a >> $OUT/dudect.txt 2>&1; echo "rc=$?" >> $OUT/dudect.txt
  done
done
cd /tmp && tar czf $R/logs.tar.gz o; cd - > /dev/null
cat $OUT/gpu.txt $OUT/date.txt; tail -5 $OUT/session.txt
for f in $OUT/plant-*.txt; do echo "== $f"; grep -E 'test result|rc=' $f; done
grep -E '^===|rc=|ERROR SUMMARY|RACECHECK SUMMARY|finite calls' $OUT/sanitize.txt
for w in old new; do echo "== ncu $w"; grep -E '^  [a-z_0-9]+.*\(|gpu__time' $OUT/ncu-$w.txt | paste - - | awk '{print $1, $(NF-1), $(NF)}' | head -40; done
grep -E 'exact|sdpa cudnn' $OUT/pycost-new.txt
grep -E '^===|zeros|result|rc=' $OUT/dudect.txt
