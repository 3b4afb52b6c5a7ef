#!/bin/bash
# Session 10, call 7 (2026-11-29): scratch written first is not zeroed (GpuPath::written_first: the
# TensorCore Propagate copies, the Exact prepared K/V). selftest, every GPU test binary (with the new
# stale_scratch tests), their planted faults through the override, compute-sanitizer initcheck and
# memcheck on fresh memory (the CLI), and py_call_cost with this build's wheel (twice; e-0330 has
# 2c9adde's figures from 15 minutes before: the tree's 64 MiB limit leaves no room for both wheels).
set -u
R=${OUT:?}; export OUT=/tmp/o; mkdir -p $OUT
bash scripts/gpu-session.sh info selftest tests > $OUT/session.txt 2>&1
T=.carry/tests-override
for pl in tc:cuda_tensorcore ex:cuda_exact; do
  d=${pl%%:*}; b=${pl##*:}
  echo "=== planted $d: DETATTN_TEST_CUBIN_DIR=.carry/plant-$d $T/$b stale_scratch (must FAIL)" >> $OUT/planted.txt
  DETATTN_TEST_CUBIN_DIR=$PWD/.carry/plant-$d timeout 120 $T/$b stale_scratch --nocapture >> $OUT/planted.txt 2>&1
  echo "rc=$?" >> $OUT/planted.txt
done
B=.carry/bin/detattn
for args in "--path tensorcore --nonfinite propagate --dtype bf16 --batch 2 --q-heads 8 --kv-heads 2 --q-len 1 --kv-len 5000 --head-dim 128 --kv-lens 5000,2300" \
            "--path tensorcore --nonfinite propagate --dtype f16 --batch 1 --q-heads 4 --kv-heads 2 --q-len 70 --kv-len 2200 --head-dim 64 --causal" \
            "--path exact --nonfinite propagate --dtype bf16 --batch 2 --q-heads 4 --kv-heads 2 --q-len 40 --kv-len 300 --head-dim 64 --causal --kv-lens 300,157" \
            "--path exact --nonfinite reject --dtype bf16 --batch 2 --q-heads 4 --kv-heads 2 --q-len 40 --kv-len 300 --head-dim 64 --kv-lens 300,157"; do
  for tool in initcheck memcheck; do
    echo "=== $tool run --backend cuda $args" >> $OUT/sanitize.txt
    compute-sanitizer --tool $tool --error-exitcode 9 $B run --backend cuda $args >> $OUT/sanitize.txt 2>&1
    echo "rc=$?" >> $OUT/sanitize.txt
  done
done
python3 -m pip install -q --no-deps --target /tmp/pynew python/dist/*.whl > $OUT/pip.log 2>&1
for r in 1 2; do
  for w in new; do
    PYTHONPATH=/tmp/py$w python3 scripts/py_call_cost.py --burst 100 --json $OUT/pycost-$w-$r.json > $OUT/pycost-$w-$r.txt 2>&1
  done
done
cd /tmp && tar czf $R/logs.tar.gz o
tail -8 $OUT/session.txt; grep -E '^===|rc=|test result|panicked|differs' $OUT/planted.txt | head -20
grep -E '^===|rc=|ERROR SUMMARY' $OUT/sanitize.txt
for f in $OUT/pycost-*.txt; do echo "== $f"; grep -E 'detattn|sdpa cudnn' $f | grep -v exact; done
