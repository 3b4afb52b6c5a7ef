#!/usr/bin/env python3
"""Fit the polynomial of the software exp2 (tcmodel/src/exp2.rs, docs/tensorcore-cpu-model.md §5).

p(r) = 1 + r·q(r) ≈ 2^r on r ∈ [-1/2, 1/2], with q of degree DEG-1 fitted to g(r) = (2^r − 1)/r
by Lawson's iteratively reweighted least squares on a dense grid, weighting the error of p
relative to 2^r (so that the near-minimax property holds for the *relative* error, which is what
an exp2 bound is about). The constant term is exactly 1, so exp2(0) = 1 exactly (the TensorCore
kernel relies on ex2(0) = 1 for its bitwise no-op tiles). The coefficients are then rounded to f32.

Run: python3 tcmodel/scripts/fit_exp2.py [DEG]   (needs mpmath only)
Prints the f32 coefficients (hex and decimal) and the fit's relative error before f32 evaluation;
the bound of the f32 function itself is measured exhaustively by `tcharness exp2-bound`.
"""
import struct
import sys

import mpmath as mp

mp.mp.dps = 40
DEG = int(sys.argv[1]) if len(sys.argv) > 1 else 5
N = 1201
xs = [mp.mpf(-0.5) + mp.mpf(i) / (N - 1) for i in range(N)]


def g(r):
    return (mp.power(2, r) - 1) / r if r != 0 else mp.log(2)


def lstsq(w):
    # Normal equations for q of degree DEG-1 minimising sum w_i (r_i (q(r_i) - g(r_i)) / 2^r_i)^2.
    n = DEG
    A = mp.matrix(n, n)
    y = mp.matrix(n, 1)
    for r, wi in zip(xs, w):
        s = (r / mp.power(2, r)) ** 2 * wi
        pw = [r ** k for k in range(n)]
        gr = g(r)
        for i in range(n):
            y[i] += s * pw[i] * gr
            for j in range(n):
                A[i, j] += s * pw[i] * pw[j]
    return mp.lu_solve(A, y)


def rel_err(c, r):
    p = 1 + r * sum(c[k] * r ** k for k in range(len(c)))
    return p / mp.power(2, r) - 1


w = [mp.mpf(1)] * N
for it in range(60):
    c = lstsq(w)
    e = [abs(rel_err(c, r)) for r in xs]
    emax = max(e)
    # Lawson update: weights grow where the error is large.
    w = [wi * ei for wi, ei in zip(w, e)]
    tot = sum(w)
    w = [wi / tot for wi in w]

coef = [1.0] + [float(x) for x in c]  # p(r) = sum coef[k] r^k


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


c32 = [f32(x) for x in coef]
emax32 = max(abs(rel_err([mp.mpf(x) for x in c32[1:]], r)) for r in xs)
print(f"degree {DEG}: max relative error of the fit {float(emax):.3e} "
      f"(= {float(emax) * 2**24:.3f} ulp at 2^-24), with f32 coefficients {float(emax32):.3e}")
for k, x in enumerate(c32):
    h = struct.unpack("<I", struct.pack("<f", x))[0]
    print(f"  c{k} = {x!r:>24}  0x{h:08x}")
