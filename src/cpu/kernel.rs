//! The tile loop of numerics.md §3–§5 for a block of query rows of one (batch, head).
//!
//! The CPU's launch edge: the one place outside `cuda::launch` and `cuda::entry` with `unsafe`,
//! the call of the instruction-set variants compiled with `#[target_feature]`, each after the
//! feature was detected at run time.
//!
//! Structure mirrors `kernels/exact.cu`: prepare the query rows (§2), then per tile: scores (§3),
//! the online-softmax update (§4), and at the end the division (§5) and the rounding (§7).
#![allow(unsafe_code)]

use super::prepare::PreparedKv;
use crate::dtype::Element;
use crate::numerics::{
    FLT_MAX, TILE, W, clamp_z, exp, finalize, l_safe, mask_of, prepare_row, score_finish,
};
use crate::problem::{NonFinitePolicy, Problem};

/// One work item: rows `i0 .. i0 + rows` of head `h` in batch element `b`.
pub(crate) struct Item<'a> {
    pub problem: &'a Problem,
    pub b: usize,
    pub h: usize,
    pub i0: usize,
    pub rows: usize,
    pub kv: &'a PreparedKv,
    pub mask: Option<&'a [bool]>,
}

/// The instruction sets the tile loop is compiled for. The arithmetic is the same on each (IEEE
/// fma, add, multiply in the same order); only the vector width, and so the speed, differs. A unit
/// test holds every variant this CPU can run to the same bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Isa {
    Portable,
    #[cfg(target_arch = "x86_64")]
    Avx2Fma,
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

impl Isa {
    /// Every variant this CPU can run, widest last.
    pub(crate) fn available() -> Vec<Isa> {
        #[allow(unused_mut)]
        let mut v = vec![Isa::Portable];
        #[cfg(target_arch = "x86_64")]
        {
            let fma = std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma");
            if fma {
                v.push(Isa::Avx2Fma);
            }
            if fma && std::is_x86_feature_detected!("avx512f") {
                v.push(Isa::Avx512);
            }
        }
        v
    }
}

impl Isa {
    /// The widest variant this CPU can run: the one [`run_item`] uses.
    pub(crate) fn best() -> Isa {
        *Isa::available().last().unwrap_or(&Isa::Portable)
    }

    /// A short name (`portable`, `avx2+fma`, `avx512`).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Isa::Portable => "portable",
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2Fma => "avx2+fma",
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => "avx512",
        }
    }
}

/// Run one item with the widest instruction set this CPU has.
pub(crate) fn run_item<T: Element>(item: &Item<'_>, q: &[T], out: &mut [T]) {
    // Feature detection is cached by std; this is a few loads per item.
    run_item_with(Isa::best(), item, q, out);
}

/// Run one item with `isa`, which must be one of [`Isa::available`].
pub(crate) fn run_item_with<T: Element>(isa: Isa, item: &Item<'_>, q: &[T], out: &mut [T]) {
    match isa {
        Isa::Portable => run_item_body(item, q, out),
        // SAFETY: `isa` comes from `Isa::available`, which detected avx2 and fma.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2Fma => unsafe { run_item_avx2_fma(item, q, out) },
        // SAFETY: `isa` comes from `Isa::available`, which detected avx512f, avx2 and fma.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { run_item_avx512(item, q, out) },
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
fn run_item_avx512<T: Element>(item: &Item<'_>, q: &[T], out: &mut [T]) {
    run_item_body(item, q, out);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn run_item_avx2_fma<T: Element>(item: &Item<'_>, q: &[T], out: &mut [T]) {
    run_item_body(item, q, out);
}

/// Accumulator columns kept in registers across a tile's keys: 64 floats, eight 256-bit or
/// four 512-bit registers, so `acc` is loaded and stored once per tile rather than once per key.
const CH: usize = 64;

/// Per-row softmax state (§4).
struct RowState {
    m: f32,
    l: f32,
    bad: u32,
    shift: i32,
    limit: usize,
}

#[inline(always)]
fn run_item_body<T: Element>(item: &Item<'_>, q: &[T], out: &mut [T]) {
    let p = item.problem;
    let d = p.shape().head_dim;
    let scale = p.scale();
    let kv = item.kv;

    // §2: the query rows of this item, sanitised and scaled.
    let mut qp = vec![0.0f32; item.rows * d];
    let mut acc = vec![0.0f32; item.rows * d];
    let mut st: Vec<RowState> = (0..item.rows)
        .map(|r| {
            let row = &mut qp[r * d..(r + 1) * d];
            for (x, y) in row.iter_mut().zip(&q[r * d..(r + 1) * d]) {
                *x = y.to_f32();
            }
            let (shift, bad) = prepare_row(row, true);
            RowState {
                m: -FLT_MAX,
                l: 0.0,
                bad: u32::from(bad),
                shift,
                limit: p.key_limit(item.b, item.i0 + r),
            }
        })
        .collect();

    let max_limit = st.iter().map(|s| s.limit).max().unwrap_or(0);
    let mut s = [0.0f32; TILE];
    let mut valid = [0u32; TILE];
    let mut pj = [0.0f32; TILE];
    for t in 0..max_limit.div_ceil(TILE) {
        let j0 = t * TILE;
        let kt = &kv.kt[t * d * TILE..(t + 1) * d * TILE];
        let sk = &kv.sk[j0..j0 + TILE];
        let badkv = &kv.bad[j0..j0 + TILE];
        for r in 0..item.rows {
            let row = &mut st[r];
            // A tile wholly past this row's key limit is invalid by position (public): skipping
            // it gives the same bits (§4).
            if j0 >= row.limit {
                continue;
            }
            let i = item.i0 + r;
            tile_scores(&qp[r * d..(r + 1) * d], kt, &mut s);
            let skv = p.shape().kv_len;
            let mrow = item.mask.map(|m| {
                let o = p.mask_row_offset(item.b, item.h, i);
                &m[o..o + skv]
            });
            for (j, vj) in valid.iter_mut().enumerate() {
                let jj = j0 + j;
                // `jj < skv` is positional; the mask value itself is only combined, never branched on.
                let by_mask = mrow.is_none_or(|m| jj < skv && m[jj]);
                *vj = mask_of((jj < row.limit) & by_mask);
            }
            // Hide from the optimiser that each entry is 0 or all ones, so that it cannot turn
            // the bit selections below into `select`s and those into branches on the mask.
            valid = std::hint::black_box(valid);
            // §3 finish and §4 update.
            for ((sj, &vj), &skj) in s.iter_mut().zip(&valid).zip(sk) {
                let x = score_finish(*sj, scale, row.shift, skj);
                *sj = f32::from_bits((x.to_bits() & vj) | ((-FLT_MAX).to_bits() & !vj));
            }
            // max is exact; lanes then combined (a -0/+0 tie is canonicalised by `+ 0.0` below).
            let mut m8 = [-FLT_MAX; 8];
            for c in s.chunks_exact(8) {
                for k in 0..8 {
                    m8[k] = m8[k].max(c[k]);
                }
            }
            let mt = m8.iter().fold(-FLT_MAX, |a, &b| a.max(b));
            let mnew = row.m.max(mt) + 0.0;
            let alpha = exp(clamp_z(row.m - mnew));
            // Products that can be subnormal are fma(x, y, +0) here: the bits of §4's `x * y`
            // (numerics.md §8) at a constant latency on every x86 core we measured.
            for j in 0..TILE {
                let e = exp(clamp_z(s[j] - mnew)).mul_add(W, 0.0);
                pj[j] = f32::from_bits(e.to_bits() & valid[j]);
                row.bad |= valid[j] & badkv[j];
            }
            row.m = mnew;
            // Keys past the limit have p = 0 and would leave acc as it is (§4): stop at the limit.
            let jn = (row.limit - j0).min(TILE);
            let mut l = row.l.mul_add(alpha, 0.0);
            for &w in &pj[..jn] {
                l += w;
            }
            row.l = l;
            let a = &mut acc[r * d..(r + 1) * d];
            let vt = &kv.v[j0 * d..(j0 + jn) * d];
            for (c, ac) in a.chunks_mut(CH).enumerate() {
                if ac.len() == CH {
                    let mut reg = [0.0f32; CH];
                    for (x, y) in reg.iter_mut().zip(ac.iter()) {
                        *x = y.mul_add(alpha, 0.0);
                    }
                    for (&w, vrow) in pj[..jn].iter().zip(vt.chunks_exact(d)) {
                        // Always `Some` (this chunk is whole: c·CH + CH ≤ d); the let-else keeps
                        // an index panic path, which blocks vectorisation, out of the loop.
                        let Some(vr) = vrow
                            .get(c * CH..)
                            .and_then(|x| x.as_chunks::<CH>().0.first())
                        else {
                            continue;
                        };
                        for k in 0..CH {
                            reg[k] = w.mul_add(vr[k], reg[k]);
                        }
                    }
                    ac.copy_from_slice(&reg);
                } else {
                    for x in ac.iter_mut() {
                        *x = x.mul_add(alpha, 0.0);
                    }
                    for j in 0..jn {
                        let w = pj[j];
                        let vr = &vt[j * d + c * CH..j * d + c * CH + ac.len()];
                        for (x, y) in ac.iter_mut().zip(vr) {
                            *x = w.mul_add(*y, *x);
                        }
                    }
                }
            }
        }
    }

    // §5 and §7.
    let maxt = T::DTYPE.max_finite();
    let propagate = p.nonfinite() == NonFinitePolicy::Propagate;
    for (r, row) in st.iter().enumerate() {
        let ls = l_safe(row.l);
        let poisoned = propagate & (row.bad != 0);
        let nan = T::canonical_nan();
        for (o, a) in out[r * d..(r + 1) * d]
            .iter_mut()
            .zip(&acc[r * d..(r + 1) * d])
        {
            let v = T::from_f32_rne(finalize(*a, ls, maxt));
            *o = select_elem(poisoned, nan, v);
        }
    }
}

/// §3: the 64 score chains of one tile, each sequential in d, run side by side.
#[inline(always)]
fn tile_scores(q: &[f32], kt: &[f32], s: &mut [f32; TILE]) {
    // A local accumulator and a loop with no panic path, so the 64 chains stay in registers.
    let mut acc = [0.0f32; TILE];
    let (rows, _) = kt.as_chunks::<TILE>();
    for (&qd, krow) in q.iter().zip(rows) {
        for j in 0..TILE {
            acc[j] = qd.mul_add(krow[j], acc[j]);
        }
    }
    *s = acc;
}

/// Branch-free choice between two output elements by their bits.
#[inline(always)]
fn select_elem<T: Element>(c: bool, a: T, b: T) -> T {
    // Both encodings are plain integers of the same width; choose without a branch.
    let m = mask_of(c);
    let bits = (a.to_bits_u32() & m) | (b.to_bits_u32() & !m);
    T::from_bits_u32(bits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::{GenOptions, generate};
    use crate::problem::{MaskLayout, Shape};

    /// Every instruction-set variant of the tile loop gives the same bits (the dispatch picks the
    /// widest, so without this the narrower ones would go untested on a wide CPU).
    #[test]
    fn every_isa_variant_gives_the_same_bits() {
        let isas = Isa::available();
        for (seed, (sq, skv, d, causal)) in
            [(17, 70, 64, false), (33, 130, 80, true), (5, 9, 3, false)]
                .into_iter()
                .enumerate()
        {
            let p = Problem::builder(Shape::new(1, 1, 1, sq, skv, d))
                .causal(causal)
                .mask(MaskLayout::SHARED)
                .build()
                .expect("valid problem");
            let x = generate::<f32>(&p, GenOptions::seed(seed as u64));
            let kv = PreparedKv::new(|j| &x.k[j * d..][..d], |j| &x.v[j * d..][..d], skv, d);
            let item = Item {
                problem: &p,
                b: 0,
                h: 0,
                i0: 0,
                rows: sq,
                kv: &kv,
                mask: x.mask.as_deref(),
            };
            let mut want = vec![0.0f32; sq * d];
            run_item_with(Isa::Portable, &item, &x.q, &mut want);
            assert!(
                want.iter().any(|v| *v != 0.0),
                "a trivial output proves nothing"
            );
            for &isa in &isas {
                let mut got = vec![f32::NAN; sq * d];
                run_item_with(isa, &item, &x.q, &mut got);
                let same = got
                    .iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{isa:?} differs from the portable loop (seed {seed})");
            }
        }
    }
}
