#!/bin/bash
# Session 11, call 3 (2026-11-29): the Exact prepare as two launches (Q's grid, K/V's grid; host
# only). selftest and every GPU test binary; Nsight Compute of Exact calls (reject decodes, a GQA
# prefill under both policies) with d6eacff's wheel (old) and this one's (new); py_call_cost old /
# new alternating; dudect of the Exact decodes under Reject (k-0428's two) with both binaries.
set -u
R=${OUT:?}; export OUT=/tmp/o; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
bash scripts/gpu-session.sh info selftest tests > $OUT/session.txt 2>&1
tar xJf .carry/bin-old.tar.xz -C .carry
python3 -m pip install -q --no-deps --target /tmp/pynew .carry/wheel-new/*.whl > $OUT/pip.log 2>&1
python3 -m pip install -q --no-deps --target /tmp/pyold .carry/wheel-old/*.whl >> $OUT/pip.log 2>&1
cat > /tmp/one.py <<'PY'
import torch, detattn
g = torch.Generator(device="cuda").manual_seed(1)
def t(*s): return torch.randn(*s, device="cuda", dtype=torch.bfloat16, generator=g)
for B, S in ((1, 32768), (32, 8192)):
    q, k, v = t(B, 1, 32, 128), t(B, S, 8, 128), t(B, S, 8, 128)
    for _ in range(2):
        detattn.attention_with_kvcache(q, k, v, cache_seqlens=S, path="exact", nonfinite="reject")
q, k, v = t(2, 512, 16, 128), t(2, 2048, 4, 128), t(2, 2048, 4, 128)
for pol in ("reject", "propagate"):
    detattn.attention(q, k, v, path="exact", nonfinite=pol, layout="bshd")
torch.cuda.synchronize()
PY
for w in old new; do
  PYTHONPATH=/tmp/py$w timeout 200 ncu --kernel-name regex:'detattn_' --metrics gpu__time_duration.sum python3 /tmp/one.py > $OUT/ncu-$w.txt 2>&1
done
for r in 1 2; do for w in old new; do
  PYTHONPATH=/tmp/py$w python3 scripts/py_call_cost.py --burst 100 --json $OUT/pycost-$w-$r.json > $OUT/pycost-$w-$r.txt 2>&1
done; done
for b in bin bin-old; do
  for a in "--q-len 1 --kv-len 1024 --heads 8 --head-dim 128 --dtype bf16" "--batch 32 --q-len 1 --kv-len 256 --heads 4 --head-dim 128 --dtype bf16"; do
    echo "=== $b $a" >> $OUT/dudect-$b.txt
    timeout 100 .carry/$b/detattn-dudect --backend cuda --path exact --policy reject --n 10000 $a >> $OUT/dudect-$b.txt 2>&1; echo "rc=$?" >> $OUT/dudect-$b.txt
  done
done
cd /tmp && tar czf $R/logs.tar.gz o
cat $OUT/gpu.txt; tail -7 $OUT/session.txt
for w in old new; do echo "== ncu $w"; grep -E '^  [a-z_0-9]+.*\(|gpu__time' $OUT/ncu-$w.txt | paste - - | awk '{print $1, $2, $(NF-1), $(NF)}' | head -40; done
for f in $OUT/pycost-*.txt; do echo "== $f"; grep -E 'exact|sdpa cudnn' $f; done
for b in bin bin-old; do echo "== dudect $b"; grep -E '^===|zeros|subnormals|huge|onehot|all-|result' $OUT/dudect-$b.txt; done
