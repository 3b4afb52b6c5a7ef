//! A copy of the CPU `Exact` tile loop (src/cpu/kernel.rs and prepare.rs, numerics.md §2–§5),
//! single-threaded, f32, for the harness's own use — never part of the library. Three variants,
//! all giving the library's bits (checked at start-up and in a test):
//!
//! - `Faithful`: the library's operations in the library's order as of 2026-11-23 (binary32 fma
//!   chains). It reproduced the library's timing, leaks included, until the library's chains went
//!   to binary64 (2026-11-27, docs/audit.md cause 4); it still calls the library's `numerics`
//!   steps, which changed with them. Its role now: a clean loop under the planted shortcuts.
//! - `Hardened`: the fixes for the two leaks this harness found in the library (see
//!   [`Variant::Hardened`]); it should pass.
//! - `Leaky`: `Hardened` plus two data-dependent shortcuts that real kernels take and that
//!   docs/design.md §6 forbids. Neither changes an output bit, so only the time can tell; this shows
//!   that the harness detects a leak on top of an otherwise clean loop:
//!   - it skips the rescale of `l` and `acc` when the tile did not raise the running maximum
//!     (`alpha` is then exactly 1);
//!   - it skips a key's `fma` over the head dimension when its weight `p_j` is 0 (a masked key).

use detattn::Problem;
use detattn::numerics::{
    FLT_MAX, TILE, W, clamp_z, exp, expfield, finalize, l_safe, mask_of, pow2, prepare_row, recip,
    row_shift, sanitize, score_finish, sel,
};

/// Which tile loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// The library's loop as of 2026-11-23, operation for operation (module docs).
    Faithful,
    /// `Hardened` with the two planted shortcuts.
    Leaky,
    /// The library's loop hardened against the two leaks this harness found in it (docs/audit.md,
    /// "Timing (dudect)"), with the same bits:
    /// - every multiplication whose result can be subnormal is `fma(x, y, +0)`: the same value
    ///   (an exact zero product is the only case where the two differ, in the sign of the zero,
    ///   and §4/§5 erase that sign), but on the x86 cores measured the FMA unit takes no extra
    ///   time for a subnormal result where the multiplier does;
    /// - the validity masks are hidden from the optimiser (`black_box`) and applied with explicit
    ///   bit operations, so that it cannot turn them back into `select`s and branches.
    Hardened,
}

/// Compute `problem` (f32, no key lengths, not causal, `Propagate`: what the harness uses)
/// into `out`.
pub fn run(
    p: &Problem,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    mask: Option<&[bool]>,
    out: &mut [f32],
    variant: Variant,
) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        // SAFETY: the two features this function is compiled for were detected just above.
        unsafe { run_avx2_fma(p, q, k, v, mask, out, variant) };
        return;
    }
    run_body(p, q, k, v, mask, out, variant);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn run_avx2_fma(
    p: &Problem,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    mask: Option<&[bool]>,
    out: &mut [f32],
    variant: Variant,
) {
    run_body(p, q, k, v, mask, out, variant);
}

// Indexing by `j` mirrors the library's loops (and numerics.md) one for one.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
fn run_body(
    p: &Problem,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    mask: Option<&[bool]>,
    out: &mut [f32],
    variant: Variant,
) {
    let leaky = variant == Variant::Leaky;
    let fma = matches!(variant, Variant::Hardened | Variant::Leaky);
    // A multiplication that may underflow: a plain one, or fma(x, y, +0) (same bits).
    let mul = |x: f32, y: f32| if fma { x.mul_add(y, 0.0) } else { x * y };
    let prep = |row: &mut [f32], scale_row: bool| {
        if fma {
            prepare_row_fma(row, scale_row)
        } else {
            prepare_row(row, scale_row)
        }
    };
    let s = *p.shape();
    let (d, skv) = (s.head_dim, s.kv_len);
    let tiles = skv.div_ceil(TILE);
    let scale = p.scale();
    let mut kt = vec![0.0f32; tiles * TILE * d];
    let mut sk = vec![0i32; tiles * TILE];
    let mut badkv = vec![0u32; tiles * TILE];
    let mut vv = vec![0.0f32; tiles * TILE * d];
    let mut row = vec![0.0f32; d];
    let mut qp = vec![0.0f32; d];
    let mut acc = vec![0.0f32; d];
    for b in 0..s.batch {
        for hk in 0..s.kv_heads {
            // §2: stage K (scaled, transposed per tile) and V (sanitised) of this KV head.
            let base = (b * s.kv_heads + hk) * skv * d;
            for j in 0..skv {
                row.copy_from_slice(&k[base + j * d..base + (j + 1) * d]);
                let (shift, kbad) = prep(&mut row, true);
                sk[j] = shift;
                let (t, jj) = (j / TILE, j % TILE);
                for (dd, x) in row.iter().enumerate() {
                    kt[(t * d + dd) * TILE + jj] = *x;
                }
                let vr = &mut vv[j * d..(j + 1) * d];
                vr.copy_from_slice(&v[base + j * d..base + (j + 1) * d]);
                let (_, vbad) = prep(vr, false);
                badkv[j] = mask_of(kbad | vbad);
            }
            for h in hk * s.group()..(hk + 1) * s.group() {
                for i in 0..s.q_len {
                    let o = ((b * s.q_heads + h) * s.q_len + i) * d;
                    qp.copy_from_slice(&q[o..o + d]);
                    let (qshift, qbad) = prep(&mut qp, true);
                    let mut bad = mask_of(qbad);
                    let mrow = mask.map(|m| {
                        let mo = p.mask_row_offset(b, h, i);
                        &m[mo..mo + skv]
                    });
                    let (mut m, mut l) = (-FLT_MAX, 0.0f32);
                    acc.iter_mut().for_each(|a| *a = 0.0);
                    for t in 0..tiles {
                        let j0 = t * TILE;
                        // §3: 64 score chains side by side.
                        let mut sc = [0.0f32; TILE];
                        for (dd, &qd) in qp.iter().enumerate() {
                            let kr = &kt[(t * d + dd) * TILE..(t * d + dd + 1) * TILE];
                            for j in 0..TILE {
                                sc[j] = qd.mul_add(kr[j], sc[j]);
                            }
                        }
                        let mut valid = [0u32; TILE];
                        for j in 0..TILE {
                            let jj = j0 + j;
                            valid[j] = if fma {
                                // The mask bit as data: a clamped index (in bounds whatever
                                // jj is) and a bit mask, no `&&` for the compiler to branch on.
                                let by_mask =
                                    mrow.map_or(u32::MAX, |mr| mask_of(mr[jj.min(skv - 1)]));
                                mask_of(jj < skv) & by_mask
                            } else {
                                let by_mask = mrow.is_none_or(|mr| jj < skv && mr[jj]);
                                mask_of((jj < skv) & by_mask)
                            };
                        }
                        if fma {
                            // Hide from the optimiser that each entry is 0 or all ones, so that
                            // it cannot turn the bit selections below back into `select`s (and
                            // those into branches).
                            valid = std::hint::black_box(valid);
                        }
                        let mut mt = -FLT_MAX;
                        for j in 0..TILE {
                            let x = if fma {
                                score_finish_fma(sc[j], scale, qshift, sk[j0 + j])
                            } else {
                                score_finish(sc[j], scale, qshift, sk[j0 + j])
                            };
                            sc[j] = if fma {
                                let m = valid[j];
                                f32::from_bits((x.to_bits() & m) | ((-FLT_MAX).to_bits() & !m))
                            } else {
                                sel(valid[j] != 0, x, -FLT_MAX)
                            };
                            mt = mt.max(sc[j]);
                        }
                        // §4.
                        let mnew = m.max(mt) + 0.0;
                        let alpha = exp(clamp_z(m - mnew));
                        let mut pj = [0.0f32; TILE];
                        for j in 0..TILE {
                            let e = mul(exp(clamp_z(sc[j] - mnew)), W);
                            pj[j] = f32::from_bits(e.to_bits() & valid[j]);
                            bad |= valid[j] & badkv[j0 + j];
                        }
                        // LEAK 1 (leaky only): the rescale depends on whether the max moved.
                        if !(leaky && mnew == m) {
                            l = mul(l, alpha);
                            for a in acc.iter_mut() {
                                *a = mul(*a, alpha);
                            }
                        }
                        m = mnew;
                        for j in 0..TILE.min(skv - j0) {
                            l += pj[j];
                            // LEAK 2 (leaky only): masked keys (weight 0) are skipped.
                            if leaky && pj[j] == 0.0 {
                                continue;
                            }
                            let w = pj[j];
                            let vr = &vv[(j0 + j) * d..(j0 + j + 1) * d];
                            for (a, y) in acc.iter_mut().zip(vr) {
                                *a = w.mul_add(*y, *a);
                            }
                        }
                    }
                    // §5, and §7 under the harness's `Propagate` policy.
                    let ls = l_safe(l);
                    for (dst, a) in out[o..o + d].iter_mut().zip(&acc) {
                        let x = if fma {
                            finalize_fma(*a, ls, FLT_MAX)
                        } else {
                            finalize(*a, ls, FLT_MAX)
                        }
                        .to_bits();
                        *dst = f32::from_bits((0x7FC0_0000 & bad) | (x & !bad));
                    }
                }
            }
        }
    }
}

/// `numerics::prepare_row` with the row scaling as fma(x, f, +0).
#[inline(always)]
fn prepare_row_fma(row: &mut [f32], scale_row: bool) -> (i32, bool) {
    let mut bad = false;
    let mut emax = 0u32;
    for x in row.iter_mut() {
        bad |= expfield(*x) == 0xFF;
        *x = sanitize(*x);
        emax = emax.max(expfield(*x));
    }
    if !scale_row {
        return (0, bad);
    }
    let shift = row_shift(emax);
    let f = pow2(shift);
    for x in row.iter_mut() {
        *x = x.mul_add(f, 0.0);
    }
    (shift, bad)
}

/// `numerics::score_finish` with its three products as fma(x, y, +0).
// max/min as in the library (not `clamp`, which differs on NaN and could be lowered otherwise).
#[allow(clippy::manual_clamp)]
#[inline(always)]
fn score_finish_fma(s: f32, scale: f32, sq: i32, sk: i32) -> f32 {
    let u = -(sq + sk);
    let a = u >> 1;
    let b = u - a;
    let x = s
        .mul_add(scale, 0.0)
        .mul_add(pow2(a), 0.0)
        .mul_add(pow2(b), 0.0);
    x.max(-FLT_MAX).min(FLT_MAX)
}

/// `numerics::finalize` with div's first product as fma(a, r, +0).
#[allow(clippy::manual_clamp)]
#[inline(always)]
fn finalize_fma(acc: f32, lsafe: f32, maxt: f32) -> f32 {
    let r = recip(lsafe);
    let q = acc.mul_add(r, 0.0).max(-FLT_MAX).min(FLT_MAX);
    let e = (-q).mul_add(lsafe, acc);
    let o = e.mul_add(r, q) + 0.0;
    o.max(-maxt).min(maxt)
}
