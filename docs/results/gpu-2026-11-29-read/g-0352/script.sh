#!/bin/bash
# Session 10, call 8 (2026-11-29): where a raw call's host time goes (an experiment wheel printing
# each call's phases to stderr; not shipped): 300 calls of a small decode (B1 Hq32 Hkv8 Skv1024 bf16
# D128), TensorCore, both policies; and the Python wrapper's share (the call's wall time minus the
# native phases).
set -u
R=${OUT:?}; O=/tmp/o; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version --format=csv > $O/gpu.txt; date -u >> $O/gpu.txt
python3 -m pip install -q --no-deps --target /tmp/pyx .carry/expwheel/*.whl > $O/pip.log 2>&1
cat > /tmp/phases.py <<'PY'
import sys, time, torch, detattn
pol = sys.argv[1]; path = sys.argv[2]
B, Hq, Hkv, S, D = 1, 32, 8, 1024, 128
g = torch.Generator(device="cuda").manual_seed(3)
q = torch.randn(B, 1, Hq, D, device="cuda", dtype=torch.bfloat16, generator=g)
k = torch.randn(B, S, Hkv, D, device="cuda", dtype=torch.bfloat16, generator=g)
v = torch.randn(B, S, Hkv, D, device="cuda", dtype=torch.bfloat16, generator=g)
f = lambda: detattn.attention_with_kvcache(q, k, v, cache_seqlens=S, path=path, nonfinite=pol)
for _ in range(30): f()
torch.cuda.synchronize()
ts = []
for _ in range(300):
    t0 = time.perf_counter(); f(); ts.append((time.perf_counter() - t0) * 1e6)
torch.cuda.synchronize()
ts.sort(); print(f"WALL median {ts[len(ts)//2]:.1f} us", file=sys.stderr)
PY
for cfg in "propagate tensorcore" "reject tensorcore" "propagate exact"; do
  set -- $cfg
  PYTHONPATH=/tmp/pyx python3 /tmp/phases.py $1 $2 2> $O/phases-$1-$2.txt > /dev/null
  python3 - $O/phases-$1-$2.txt <<'PY' >> $O/summary.txt
import sys, statistics, re
lines = open(sys.argv[1]).read().splitlines()
print("==", sys.argv[1].split("/")[-1])
for tag in ("EXPT", "EXPS"):
    rows = [l.split()[1:] for l in lines if l.startswith(tag)][-300:]
    if not rows: continue
    names = rows[0][0::2]
    for i, n in enumerate(names):
        vals = [float(r[2 * i + 1]) for r in rows]
        print(f"  {n:14s} median {statistics.median(vals):7.2f} us")
print(" ", [l for l in lines if l.startswith("WALL")][-1])
PY
done
cd /tmp && tar czf $R/logs.tar.gz o
cat $O/summary.txt
