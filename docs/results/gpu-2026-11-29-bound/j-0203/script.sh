#!/bin/bash
# Session 9, call 10: can a detattn call be captured into a CUDA graph (torch.cuda.graph)? One
# attempt per entry, each in its own process (contiguous decode with an int length, paged decode, plain attention, both
# paths), each reporting what it raised; not a test of a promise.
set -u
L=$OUT/logs; mkdir -p $L
S=$L/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/gpu.txt; date -u >> $L/gpu.txt
python3 -m pip install -q --no-deps --target /tmp/pyd python/dist/*.whl > $L/pip.log 2>&1
cat > /tmp/cap.py <<'PY'
import torch, detattn, traceback
dev = "cuda"
B, Hq, Hkv, D, S = 2, 8, 2, 128, 1024
q = torch.randn(B, 1, Hq, D, device=dev, dtype=torch.bfloat16)
kc = torch.randn(B, S, Hkv, D, device=dev, dtype=torch.bfloat16)
vc = torch.randn(B, S, Hkv, D, device=dev, dtype=torch.bfloat16)
kp = kc.reshape(B * S // 64, 64, Hkv, D); vp = vc.reshape(B * S // 64, 64, Hkv, D)
bt = torch.arange(B * S // 64, dtype=torch.int32).reshape(B, S // 64)
qa = torch.randn(B, Hq, 64, D, device=dev, dtype=torch.bfloat16)
ka = torch.randn(B, Hkv, 64, D, device=dev, dtype=torch.bfloat16); va = torch.randn_like(ka)
cases = {}
for path in ("tensorcore", "exact"):
    for pol in ("reject", "propagate"):
        cases[f"kvcache contiguous {path} {pol}"] = lambda path=path, pol=pol: detattn.attention_with_kvcache(q, kc, vc, cache_seqlens=S, path=path, nonfinite=pol)
        cases[f"kvcache paged {path} {pol}"] = lambda path=path, pol=pol: detattn.attention_with_kvcache(q, kp, vp, cache_seqlens=[S] * B, block_table=bt, path=path, nonfinite=pol)
        cases[f"attention {path} {pol}"] = lambda path=path, pol=pol: detattn.attention(qa, ka, va, path=path, nonfinite=pol)
import sys
only = int(sys.argv[1])
for i, (name, f) in enumerate(cases.items()):
    if i != only:
        continue
    try:
        ref = f(); torch.cuda.synchronize()
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            f(); torch.cuda.synchronize()  # warm-up on the side stream
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = f()
        g.replay(); torch.cuda.synchronize()
        print(f"{name}: CAPTURED; replay equal to the eager call: {bool(torch.equal(out, ref))}")
    except Exception as e:
        msg = str(e).strip().splitlines()
        print(f"{name}: {type(e).__name__}: {msg[0][:200] if msg else ''}")
    torch.cuda.synchronize()
PY
for i in $(seq 0 11); do
  (cd /tmp && PYTHONPATH=/tmp/pyd timeout 30 python3 /tmp/cap.py $i) >> $S 2>&1
done
echo "done" >> $S
cd $OUT && tar czf logs.tar.gz logs
