#!/bin/bash
# Session 11, call 1 (2026-11-29): Reject's scan as tc_scan_* (one word a block). Checks (also the Exact path's reject_part: its flags ORed in 256 slices): selftest,
# every GPU test binary (new: reject_scan_finds_a_nonfinite_anywhere), the same test on a planted
# scan (skips a block's last unit) through the override; compute-sanitizer on Reject device calls;
# the Python package's GPU checks; timing: ncu kernel times of the reject calls old/new; py_call_cost
# old/new alternating; dudect of a TensorCore decode under reject (new, old).
set -u
R=${OUT:?}; export OUT=/tmp/o; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
bash scripts/gpu-session.sh info selftest tests > $OUT/session.txt 2>&1
tar xJf .carry/plants.tar.xz -C .carry
DETATTN_TEST_CUBIN_DIR=$PWD/.carry/plant-scan timeout 300 .carry/tests-override/cuda_tensorcore reject_scan_finds_a_nonfinite_anywhere > $OUT/plant-scan.txt 2>&1; echo "rc=$?" >> $OUT/plant-scan.txt
timeout 300 .carry/tests-override/cuda_tensorcore reject_scan_finds_a_nonfinite_anywhere > $OUT/plant-control.txt 2>&1; echo "rc=$?" >> $OUT/plant-control.txt
DETATTN_TEST_CUBIN_DIR=$PWD/.carry/plant-reject timeout 300 .carry/tests-override/cuda_exact reject_scan_finds_a_nonfinite_anywhere > $OUT/plant-reject.txt 2>&1; echo "rc=$?" >> $OUT/plant-reject.txt
python3 -m pip install -q --no-deps --target /tmp/pynew .carry/wheel-new/*.whl > $OUT/pip.log 2>&1

for tool in memcheck initcheck racecheck synccheck; do
  echo "=== $tool" >> $OUT/sanitize.txt
  PYTHONPATH=/tmp/pynew timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 python3 .carry/scan_calls.py >> $OUT/sanitize.txt 2>&1
  echo "rc=$?" >> $OUT/sanitize.txt
done
PYTHONPATH=/tmp/pynew python3 scripts/python-gpu.py --cli .carry/bin/detattn --only env,selftest,paged,varlen,lse,stream,nocopy,threads --out $OUT > $OUT/python-gpu.txt 2>&1
cd /tmp && tar czf $R/logs.tar.gz o

cat $OUT/gpu.txt; tail -8 $OUT/session.txt; tail -4 $OUT/plant-scan.txt | cut -c1-300; tail -3 $OUT/plant-control.txt; tail -4 $OUT/plant-reject.txt | cut -c1-300
grep -E '^===|rc=|ERROR SUMMARY|RACECHECK SUMMARY|finite calls' $OUT/sanitize.txt
tail -4 $OUT/python-gpu.txt | cut -c1-150
