#!/bin/bash
# Session 10, call 12 (2026-11-29): the Exact decode's scan (Reject) no longer writes prepared K and
# V rows (prepare with kp NULL: flags and shifts only; exact cubins rebuilt). selftest, every GPU
# test binary, dudect of the Exact decode under Reject, py_call_cost once.
set -u
R=${OUT:?}; export OUT=/tmp/o; mkdir -p $OUT
bash scripts/gpu-session.sh info selftest tests > $OUT/session.txt 2>&1
for a in "--q-len 1 --kv-len 1024 --heads 8 --head-dim 128 --dtype bf16 --policy reject --json-out $OUT/dudect-decode-reject.json" \
         "--batch 32 --q-len 1 --kv-len 256 --heads 4 --head-dim 128 --dtype bf16 --policy reject --json-out $OUT/dudect-wide-reject.json"; do
  timeout 150 .carry/bin/detattn-dudect --backend cuda --n 10000 $a >> $OUT/dudect.log 2>&1
  echo "dudect $(echo $a | cut -c1-70) rc=$?" >> $OUT/dudect-summary.txt
  grep -E 'result|max' $OUT/dudect.log | tail -2 >> $OUT/dudect-summary.txt
done
python3 -m pip install -q --no-deps --target /tmp/pynew python/dist/*.whl > $OUT/pip.log 2>&1
PYTHONPATH=/tmp/pynew python3 scripts/py_call_cost.py --burst 100 --json $OUT/pycost.json > $OUT/pycost.txt 2>&1
cd /tmp && tar czf $R/logs.tar.gz o
tail -6 $OUT/session.txt; cat $OUT/dudect-summary.txt; grep -E 'exact|sdpa cudnn' $OUT/pycost.txt
