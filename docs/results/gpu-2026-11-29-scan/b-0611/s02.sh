#!/bin/bash
# Session 11, call 2 (2026-11-29): timing of Reject's scans (tc_scan_*; the Exact path's reject_part):
# Nsight Compute kernel times of reject calls, old / new wheels; py_call_cost old / new alternating;
# dudect of a TensorCore split decode under reject, new and old binaries.
set -u
R=${OUT:?}; export OUT=/tmp/o; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
bash scripts/gpu-session.sh info > $OUT/session.txt 2>&1
python3 -m pip install -q --no-deps --target /tmp/pynew .carry/wheel-new/*.whl > $OUT/pip.log 2>&1
python3 -m pip install -q --no-deps --target /tmp/pyold .carry/wheel-old/*.whl >> $OUT/pip.log 2>&1
tar xJf .carry/plants.tar.xz -C .carry; tar xJf .carry/bin-old.tar.xz -C .carry
DETATTN_TEST_CUBIN_DIR=$PWD/.carry/plant-reject timeout 300 .carry/tests-override/cuda_exact reject_scan_finds_a_nonfinite_anywhere > $OUT/plant-reject.txt 2>&1; echo "rc=$?" >> $OUT/plant-reject.txt
# kernel times of the reject calls (dec1, decode B32) old / new
cat > /tmp/one.py <<'PY'
import torch, detattn, sys
g = torch.Generator(device="cuda").manual_seed(1)
for B, S in ((1, 32768), (32, 8192)):
    q = torch.randn(B, 1, 32, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(B, S, 8, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(B, S, 8, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    for path in ("tensorcore", "exact"):
        for _ in range(2):
            detattn.attention_with_kvcache(q, k, v, cache_seqlens=S, path=path, nonfinite="reject")
torch.cuda.synchronize()
PY
for w in old new; do
  PYTHONPATH=/tmp/py$w timeout 200 ncu --kernel-name regex:'tc_|detattn_' --metrics gpu__time_duration.sum python3 /tmp/one.py > $OUT/ncu-$w.txt 2>&1
done
for r in 1 2; do for w in old new; do
  PYTHONPATH=/tmp/py$w python3 scripts/py_call_cost.py --burst 100 --json $OUT/pycost-$w-$r.json > $OUT/pycost-$w-$r.txt 2>&1
done; done
for b in bin bin-old; do
  timeout 150 .carry/$b/detattn-dudect --backend cuda --path tensorcore --policy reject --n 10000 --heads 8 --q-len 1 --kv-len 4200 --head-dim 128 > $OUT/dudect-$b.txt 2>&1; echo "rc=$?" >> $OUT/dudect-$b.txt
done
cd /tmp && tar czf $R/logs.tar.gz o
cat $OUT/gpu.txt; grep -E 'panicked|test result|rc=' $OUT/plant-reject.txt; grep -A1 panicked $OUT/plant-reject.txt | tail -1 | cut -c1-300
for w in old new; do echo "== ncu $w"; grep -E '^  [a-z_0-9]+.*\(|gpu__time' $OUT/ncu-$w.txt | paste - - | awk '{print $1, $(NF)}' | head -60; done
for f in $OUT/pycost-*.txt; do echo "== $f"; grep -E 'reject|sdpa cudnn' $f; done
for b in bin bin-old; do echo "== dudect $b"; tail -14 $OUT/dudect-$b.txt; done
