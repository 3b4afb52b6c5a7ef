#!/bin/bash
# Session 10, call 10 (2026-11-29): the session's last build. selftest, every GPU test binary, the
# Python package's GPU checks, compute-sanitizer's four tools on 128-block split decodes (their merge
# now launched early), py_call_cost with this wheel, and the issue 11 decode rows with SDPA.
set -u
R=${OUT:?}; export OUT=/tmp/o; mkdir -p $OUT
bash scripts/gpu-session.sh info selftest tests > $OUT/session.txt 2>&1
python3 -m pip install -q --no-deps --target /tmp/pynew python/dist/*.whl > $OUT/pip.log 2>&1
PYTHONPATH=/tmp/pynew python3 scripts/python-gpu.py --cli .carry/bin/detattn --only env,selftest,paged,varlen,lse,stream,nocopy,threads --out $OUT > $OUT/python-gpu.txt 2>&1
B=.carry/bin/detattn
for args in "--path tensorcore --dtype bf16 --batch 1 --q-heads 32 --kv-heads 8 --q-len 1 --kv-len 32768 --head-dim 128 --kv-lens 30001" \
            "--path tensorcore --dtype f16 --batch 32 --q-heads 4 --kv-heads 1 --q-len 1 --kv-len 8192 --head-dim 64 --nonfinite propagate --lse"; do
  for tool in memcheck racecheck synccheck initcheck; do
    echo "=== $tool run --backend cuda $args" >> $OUT/sanitize.txt
    timeout 240 compute-sanitizer --tool $tool --error-exitcode 9 $B run --backend cuda $args >> $OUT/sanitize.txt 2>&1
    echo "rc=$?" >> $OUT/sanitize.txt
  done
done
for r in 1 2; do
  PYTHONPATH=/tmp/pynew python3 scripts/py_call_cost.py --burst 100 --json $OUT/pycost-$r.json > $OUT/pycost-$r.txt 2>&1
done
timeout 200 python3 scripts/gpu_compare.py $B $OUT/compare.json --paths tensorcore,exact \
  --only dec1,decode,g1_s128k_h1,g2_s8k_h8,g1_s32k_h8,g2_s128k_h1,g8_s32k_h1,g32_s8k_h1 > $OUT/compare.log 2>&1
cd /tmp && tar czf $R/logs.tar.gz o
tail -6 $OUT/session.txt; tail -10 $OUT/python-gpu.txt | cut -c1-150
grep -E '^===|rc=|ERROR SUMMARY|RACECHECK SUMMARY' $OUT/sanitize.txt
for f in $OUT/pycost-*.txt; do echo "== $f"; grep -E 'detattn|sdpa cudnn' $f; done
tail -40 $OUT/compare.log
