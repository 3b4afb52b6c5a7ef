#!/usr/bin/env python3
# Run from the repo root with numpy installed (scripts/requirements-pyref.txt):
#   python3 scripts/gen_numerics_kat.py
# Known answers for §5 div, §6 exp, the fma and §3 default scale, from the independent Python
# reference (scripts/numerics_ref.py), for tests/numerics_kat.rs.
import sys, numpy as np
sys.path.insert(0, "scripts")
import numerics_ref as R
rng = np.random.default_rng(20261122)
n = 4000
# div: l in [2^-26, 1/4] (and exactly 1), a anywhere up to ±FLT_MAX incl. subnormals
lb = rng.integers(0x32800000, 0x3E800000, n, dtype=np.uint64).astype(np.uint32)
lb[:10] = 0x3F800000
ab = rng.integers(0, 0xFF800000, n, dtype=np.uint64).astype(np.uint32)
ab = np.where((ab >> 23) & 0xFF == 0xFF, ab & 0x807FFFFF, ab).astype(np.uint32)
d = R.div32(R.from_bits(ab), R.from_bits(lb))
with open("tests/data/div_kat.txt", "w") as f:
    for a, l, r in zip(ab, lb, R.bits(d)):
        f.write(f"{a:08x} {l:08x} {int(r):08x}\n")
# exp on [-80, 0]
zb = R.bits((-rng.random(n) * 80).astype(np.float32))
zb[:3] = [0, 0x80000000, 0xC2A00000]
e = R.exp32(R.from_bits(zb))
with open("tests/data/exp_kat.txt", "w") as f:
    for z, r in zip(zb, R.bits(e)):
        f.write(f"{int(z):08x} {int(r):08x}\n")
# fma on arbitrary finite operands
def rb():
    x = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    return np.where((x >> 23) & 0xFF == 0xFF, x & 0x807FFFFF, x).astype(np.uint32)
a, b, c = rb(), rb(), rb()
fm = R.fma32(R.from_bits(a), R.from_bits(b), R.from_bits(c))
with open("tests/data/fma_kat.txt", "w") as f:
    for x, y, z, r in zip(a, b, c, R.bits(fm)):
        f.write(f"{int(x):08x} {int(y):08x} {int(z):08x} {int(r):08x}\n")
with open("tests/data/scale_kat.txt", "w") as f:
    for D in list(range(1, 300)) + [1000, 4096, 8191, 8192]:
        f.write(f"{D} {int(np.float32(R.default_scale(D)).view(np.uint32)):08x}\n")
# §10 log-sum-exp from a row's final state (m, l): l in [W, 1/4] (and exactly W, 1/4, 1, and 0
# for a row with no valid key), m any finite f32 incl. ±FLT_MAX. Appended last, so the files
# above keep their bytes (the same draws come first).
lb = rng.integers(0x32800000, 0x3E800001, n, dtype=np.uint64).astype(np.uint32)
lb[:4] = [0x32800000, 0x3E800000, 0x3F800000, 0]
mb = rb()
mb[:6] = [0, 0x7F7FFFFF, 0xFF7FFFFF, 0x3F800000, 0xC1200000, 0x00000001]
mb[6:200] = R.bits((rng.random(194) * 40 - 20).astype(np.float32))
ls = R.lse32(R.from_bits(mb), R.from_bits(lb))
with open("tests/data/lse_kat.txt", "w") as f:
    for x, y, r in zip(mb, lb, R.bits(ls)):
        f.write(f"{int(x):08x} {int(y):08x} {int(r):08x}\n")
print("ok")
