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
    FLT_MAX, TILE, W, clamp_z, exp, finalize, l_safe, lse as lse_of, mask_of, prepare_row,
    score_finish,
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

/// The instruction sets the tile loop is compiled for, narrowest first. The arithmetic is the same
/// on each (IEEE fma, add, multiply in the same order); only the vector width, and so the speed,
/// differs. A unit test holds every variant this CPU can run to the same bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Isa {
    Portable,
    #[cfg(target_arch = "x86_64")]
    Avx2Fma,
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

impl Isa {
    /// The widest variant this CPU can run: the one [`run_item`] uses. Each variant needs the
    /// features of the narrower ones, so the CPU runs exactly the variants up to this one.
    /// Feature detection is cached by std: a few loads, no allocation (it runs once per item).
    pub(crate) fn best() -> Isa {
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            return if std::is_x86_feature_detected!("avx512f") {
                Isa::Avx512
            } else {
                Isa::Avx2Fma
            };
        }
        Isa::Portable
    }

    /// Every variant this CPU can run, widest last (the tests run each).
    #[cfg(test)]
    pub(crate) fn available() -> Vec<Isa> {
        let best = Isa::best();
        let all = [
            Isa::Portable,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2Fma,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512,
        ];
        all.into_iter().filter(|&i| i <= best).collect()
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

/// Run one item with the widest instruction set this CPU has: its rows into `out`, their
/// log-sum-exp (§10) into `lse`.
pub(crate) fn run_item<T: Element>(item: &Item<'_>, q: &[T], out: &mut [T], lse: &mut [f32]) {
    run_item_with(Isa::best(), item, q, out, lse);
}

/// Stage the K and V rows of one (batch, KV head) (`PreparedKv::new`), compiled for the widest
/// instruction set this CPU has (the same bits on each).
pub(crate) fn prepare_kv<'a, T: Element>(
    k: impl Fn(usize) -> &'a [T],
    v: impl Fn(usize) -> &'a [T],
    kv_len: usize,
    d: usize,
) -> PreparedKv {
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    fn with_fma<'a, T: Element>(
        k: impl Fn(usize) -> &'a [T],
        v: impl Fn(usize) -> &'a [T],
        kv_len: usize,
        d: usize,
    ) -> PreparedKv {
        PreparedKv::new(k, v, kv_len, d)
    }
    match Isa::best() {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2Fma | Isa::Avx512 => {
            // SAFETY: `Isa::best` returns either variant only after detecting avx2 and fma.
            unsafe { with_fma(k, v, kv_len, d) }
        }
        Isa::Portable => PreparedKv::new(k, v, kv_len, d),
    }
}

/// Run one item with `isa`, which must be at most [`Isa::best`] (a variant this CPU can run).
pub(crate) fn run_item_with<T: Element>(
    isa: Isa,
    item: &Item<'_>,
    q: &[T],
    out: &mut [T],
    lse: &mut [f32],
) {
    match isa {
        Isa::Portable => run_item_body::<T, 1, _>(Generic, item, q, out, lse),
        // SAFETY: `isa` is at most `Isa::best`, which returns this variant or a wider one only
        // after detecting avx2 and fma.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2Fma => unsafe { run_item_avx2_fma(item, q, out, lse) },
        // SAFETY: `isa` is at most `Isa::best`, which returns this variant only after detecting
        // avx512f, avx2 and fma.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { run_item_avx512(item, q, out, lse) },
    }
}

// Rows per group (`R`) by register file: a group keeps R·64 score chains and R·64 accumulator
// columns in registers, so every K and V element loaded feeds R rows. 32 zmm registers hold four
// rows' 64 chains (16 registers) with room for the loads; 16 ymm registers hold one row's (8).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
fn run_item_avx512<T: Element>(item: &Item<'_>, q: &[T], out: &mut [T], lse: &mut [f32]) {
    run_item_body::<T, 4, _>(avx512::Blocks::detected(), item, q, out, lse);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn run_item_avx2_fma<T: Element>(item: &Item<'_>, q: &[T], out: &mut [T], lse: &mut [f32]) {
    run_item_body::<T, 1, _>(Generic, item, q, out, lse);
}

/// Accumulator columns kept in registers across a tile's keys: 64 floats, eight 256-bit or
/// four 512-bit registers per row, so `acc` is loaded and stored once per tile rather than once
/// per key.
const CH: usize = 64;

/// Per-row softmax state (§4).
struct RowState {
    m: f32,
    l: f32,
    bad: u32,
    shift: i32,
    limit: usize,
}

/// What every row group of one tile reads.
struct TileCtx<'a> {
    problem: &'a Problem,
    b: usize,
    h: usize,
    i0: usize,
    mask: Option<&'a [bool]>,
    /// First key of the tile.
    j0: usize,
    /// `[D][TILE]`: the tile's K, transposed (`PreparedKv::kt`).
    kt: &'a [f32],
    /// The tile's K row shifts and bad-row flags.
    sk: &'a [i32],
    badkv: &'a [u32],
    /// The V rows from `j0` on, `D` floats each.
    v: &'a [f32],
}

/// The rows of an item are computed in groups of `R` (the instruction set's register blocking,
/// see `run_item_avx512`), the rest one by one. Grouping changes no bit: every score is its own
/// chain (§3) and every accumulator column its own (§4), whichever rows run beside it. A row of
/// a group for which the tile lies wholly past its key limit is computed with every key invalid,
/// which leaves its state as skipping the tile would (§4, last point).
#[inline(always)]
fn run_item_body<T: Element, const R: usize, M: Micro<R>>(
    m: M,
    item: &Item<'_>,
    q: &[T],
    out: &mut [T],
    lse: &mut [f32],
) {
    let p = item.problem;
    let d = p.shape().head_dim;
    let kv = item.kv;
    let rows = item.rows;
    let groups = rows / R;

    // §2: the query rows of this item, sanitised and scaled; the grouped rows also interleaved
    // as `[group][D][R]`, so that one d step of a group reads R consecutive floats.
    let mut qp = vec![0.0f32; rows * d];
    let mut acc = vec![0.0f32; rows * d];
    // A loop, not a closure: a closure would not inherit this function's target features (its
    // fma products would become calls).
    let mut st: Vec<RowState> = Vec::with_capacity(rows);
    for r in 0..rows {
        let row = &mut qp[r * d..(r + 1) * d];
        for (x, y) in row.iter_mut().zip(&q[r * d..(r + 1) * d]) {
            *x = y.to_f32();
        }
        let (shift, bad) = prepare_row(row, true);
        st.push(RowState {
            m: -FLT_MAX,
            l: 0.0,
            bad: u32::from(bad),
            shift,
            limit: p.key_limit(item.b, item.i0 + r),
        });
    }
    let mut qg = vec![[0.0f32; R]; groups * d];
    for (g, qgg) in qg.chunks_exact_mut(d.max(1)).enumerate() {
        for (dd, x) in qgg.iter_mut().enumerate() {
            for (r, y) in x.iter_mut().enumerate() {
                *y = qp[(g * R + r) * d + dd];
            }
        }
    }

    let max_limit = st.iter().map(|s| s.limit).max().unwrap_or(0);
    for t in 0..max_limit.div_ceil(TILE) {
        let j0 = t * TILE;
        let cx = TileCtx {
            problem: p,
            b: item.b,
            h: item.h,
            i0: item.i0,
            mask: item.mask,
            j0,
            kt: &kv.kt[t * d * TILE..(t + 1) * d * TILE],
            sk: &kv.sk[j0..j0 + TILE],
            badkv: &kv.bad[j0..j0 + TILE],
            v: &kv.v[j0 * d..],
        };
        // A tile wholly past a row's key limit is invalid by position (public): skipping it
        // gives the same bits (§4).
        for g in 0..groups {
            let rs = g * R..(g + 1) * R;
            if st[rs.clone()].iter().any(|s| j0 < s.limit) {
                tile_rows::<R, M>(
                    m,
                    &cx,
                    rs.start,
                    &qg[g * d..(g + 1) * d],
                    &mut st[rs.clone()],
                    &mut acc[rs.start * d..rs.end * d],
                );
            }
        }
        for r in groups * R..rows {
            if j0 < st[r].limit {
                let (qr, _) = qp[r * d..(r + 1) * d].as_chunks::<1>();
                tile_rows::<1, _>(
                    Generic,
                    &cx,
                    r,
                    qr,
                    &mut st[r..r + 1],
                    &mut acc[r * d..(r + 1) * d],
                );
            }
        }
    }

    // §5, §7 and §10.
    let maxt = T::DTYPE.max_finite();
    let propagate = p.nonfinite() == NonFinitePolicy::Propagate;
    for (r, row) in st.iter().enumerate() {
        let ls = l_safe(row.l);
        // Hidden from the optimiser like the validity masks: seeing a loop-invariant condition,
        // LLVM unswitched this loop on it and skipped the division for poisoned rows (measured:
        // a call whose rows were all poisoned ran 0.8% faster, docs/audit.md "Timing").
        let poisoned = std::hint::black_box(mask_of(propagate & (row.bad != 0)));
        let nan = T::canonical_nan();
        for (o, a) in out[r * d..(r + 1) * d]
            .iter_mut()
            .zip(&acc[r * d..(r + 1) * d])
        {
            let v = T::from_f32_rne(finalize(*a, ls, maxt));
            *o = select_elem(poisoned, nan, v);
        }
        lse[r] = f32::from_bits(
            (f32::canonical_nan().to_bits() & poisoned)
                | (lse_of(row.m, row.l).to_bits() & !poisoned),
        );
    }
}

/// One tile for `N` rows of the item starting at row `r0`: §3 scores, §4 update. `q` is the
/// rows' prepared queries as `[D][N]`, `st` and `acc` their states.
#[inline(always)]
fn tile_rows<const N: usize, M: Micro<N>>(
    m: M,
    cx: &TileCtx<'_>,
    r0: usize,
    q: &[[f32; N]],
    st: &mut [RowState],
    acc: &mut [f32],
) {
    let p = cx.problem;
    let d = p.shape().head_dim;
    let skv = p.shape().kv_len;
    let scale = p.scale();
    let j0 = cx.j0;

    // §3: N·64 chains, each sequential in d.
    let mut s = [[0.0f32; TILE]; N];
    m.scores(cx.kt, q, &mut s);

    let mut pj = [[0.0f32; TILE]; N];
    let mut alpha = [0.0f32; N];
    let mut jn = 0;
    for (r, row) in st.iter_mut().enumerate() {
        let i = cx.i0 + r0 + r;
        let mrow = cx.mask.map(|m| {
            let o = p.mask_row_offset(cx.b, cx.h, i);
            &m[o..o + skv]
        });
        // Valid by position (`limit ≤ kv_len ≤ Skv`, so no key past Skv), then by the mask,
        // whose values are only combined, never branched on.
        let mut valid = [0u32; TILE];
        for (j, vj) in valid.iter_mut().enumerate() {
            *vj = mask_of(j0 + j < row.limit);
        }
        if let Some(m) = mrow {
            let (tile_mask, _) = m[j0..].split_at(skv.saturating_sub(j0).min(TILE));
            for (vj, &mj) in valid.iter_mut().zip(tile_mask) {
                *vj &= mask_of(mj);
            }
        }
        // Hide from the optimiser that each entry is 0 or all ones, so that it cannot turn
        // the bit selections below into `select`s and those into branches on the mask.
        let valid = std::hint::black_box(valid);
        // §3 finish and §4 update.
        let sr = &mut s[r];
        for ((sj, &vj), &skj) in sr.iter_mut().zip(&valid).zip(cx.sk) {
            let x = score_finish(*sj, scale, row.shift, skj);
            *sj = f32::from_bits((x.to_bits() & vj) | ((-FLT_MAX).to_bits() & !vj));
        }
        // max is exact; lanes then combined (a -0/+0 tie is canonicalised by `+ 0.0` below).
        let mut m8 = [-FLT_MAX; 8];
        for c in sr.chunks_exact(8) {
            for k in 0..8 {
                m8[k] = m8[k].max(c[k]);
            }
        }
        let mt = m8.iter().fold(-FLT_MAX, |a, &b| a.max(b));
        let mnew = row.m.max(mt) + 0.0;
        alpha[r] = exp(clamp_z(row.m - mnew));
        // Products that can be subnormal are fma(x, y, +0) here: the bits of §4's `x * y`
        // (numerics.md §8) at a constant latency on every x86 core we measured.
        for j in 0..TILE {
            let e = exp(clamp_z(sr[j] - mnew)).mul_add(W, 0.0);
            pj[r][j] = f32::from_bits(e.to_bits() & valid[j]);
            row.bad |= valid[j] & cx.badkv[j];
        }
        row.m = mnew;
        // Keys past the limit have p = 0 and would leave l and acc as they are (§4): stop at
        // the group's largest limit.
        jn = jn.max(row.limit.saturating_sub(j0).min(TILE));
    }
    // The weights key by key, so the loops below read the group's N weights of a key together.
    let mut pjt = [[0.0f32; N]; TILE];
    for (j, w) in pjt.iter_mut().enumerate() {
        for (r, x) in w.iter_mut().enumerate() {
            *x = pj[r][j];
        }
    }
    // §4's sum of weights: one sequential chain per row, the rows' chains side by side (a +0
    // weight past a row's own limit leaves its l as it is).
    let mut l: [f32; N] = std::array::from_fn(|r| st[r].l.mul_add(alpha[r], 0.0));
    for w in &pjt[..jn] {
        for r in 0..N {
            l[r] += w[r];
        }
    }
    for (row, lr) in st.iter_mut().zip(l) {
        row.l = lr;
    }

    let vt = &cx.v[..jn * d];
    let mut c0 = 0;
    while c0 + CH <= d {
        m.accumulate(vt, d, c0, &pjt[..jn], &alpha, acc);
        c0 += CH;
    }
    if c0 < d {
        for r in 0..N {
            let a = &mut acc[r * d + c0..(r + 1) * d];
            for x in a.iter_mut() {
                *x = x.mul_add(alpha[r], 0.0);
            }
            for (j, vrow) in vt.chunks_exact(d).enumerate() {
                let w = pj[r][j];
                for (x, y) in a.iter_mut().zip(&vrow[c0..]) {
                    *x = w.mul_add(*y, *x);
                }
            }
        }
    }
}

/// The two inner products of a tile for `N` rows, written once portably and once per register
/// blocking that the compiler does not find by itself. Every implementation computes the same
/// IEEE operations in the same order per chain, so the same bits (a unit test holds them equal).
trait Micro<const N: usize>: Copy {
    /// §3: `s[r][j] = fma(q[D-1][r], kt[D-1][j], … fma(q[0][r], kt[0][j], +0))`, with `kt` the
    /// tile's transposed K (`[D][TILE]`) and `q` the rows' queries (`[D][N]`).
    fn scores(self, kt: &[f32], q: &[[f32; N]], s: &mut [[f32; TILE]; N]);
    /// §4 for the accumulator columns `c0 .. c0 + CH` of the `N` rows (`acc` is `[N][D]`):
    /// `a = fma(a, alpha[r], +0)`, then `a = fma(w[j][r], v[j][c], a)` for the keys `j` of `w`
    /// in order (`vt` holds their V rows, `D` floats each).
    fn accumulate(
        self,
        vt: &[f32],
        d: usize,
        c0: usize,
        w: &[[f32; N]],
        alpha: &[f32; N],
        acc: &mut [f32],
    );
}

/// The loops as written, vectorised (or not) by the compiler.
#[derive(Clone, Copy)]
struct Generic;

impl<const N: usize> Micro<N> for Generic {
    #[inline(always)]
    fn scores(self, kt: &[f32], q: &[[f32; N]], s: &mut [[f32; TILE]; N]) {
        // A local accumulator and a loop with no panic path, so the chains stay in registers.
        let mut a = [[0.0f32; TILE]; N];
        let (krows, _) = kt.as_chunks::<TILE>();
        for (krow, qv) in krows.iter().zip(q) {
            for r in 0..N {
                for j in 0..TILE {
                    a[r][j] = qv[r].mul_add(krow[j], a[r][j]);
                }
            }
        }
        *s = a;
    }

    #[inline(always)]
    fn accumulate(
        self,
        vt: &[f32],
        d: usize,
        c0: usize,
        w: &[[f32; N]],
        alpha: &[f32; N],
        acc: &mut [f32],
    ) {
        for r in 0..N {
            let Some(a) = acc[r * d + c0..].as_chunks_mut::<CH>().0.first_mut() else {
                continue;
            };
            let mut reg = [0.0f32; CH];
            for k in 0..CH {
                reg[k] = a[k].mul_add(alpha[r], 0.0);
            }
            for (vrow, wj) in vt.chunks_exact(d).zip(w) {
                // Always `Some` (the chunk is whole); the let-else keeps an index panic path,
                // which blocks vectorisation, out of the loop.
                let Some(vr) = vrow.get(c0..).and_then(|x| x.as_chunks::<CH>().0.first()) else {
                    continue;
                };
                for k in 0..CH {
                    reg[k] = wj[r].mul_add(vr[k], reg[k]);
                }
            }
            *a = reg;
        }
    }
}

/// Four rows at a time in 512-bit registers: 16 score chains' registers (4 rows × 64 keys) or
/// 16 accumulator registers (4 rows × 64 columns), each K or V vector loaded once for 4 rows.
/// LLVM kept the generic loops' accumulators of four rows on the stack (measured: a load and a
/// store around every FMA), so these are written with the intrinsics.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{CH, Micro, TILE};
    use std::arch::x86_64::{__m512, _mm512_fmadd_ps, _mm512_set1_ps, _mm512_setzero_ps};

    /// Proof that AVX-512F was detected: only `run_item_avx512` makes one.
    #[derive(Clone, Copy)]
    pub(super) struct Blocks(());

    impl Blocks {
        /// Only for a caller compiled with and running on `avx512f` (`run_item_avx512`).
        #[target_feature(enable = "avx512f")]
        pub(super) fn detected() -> Blocks {
            Blocks(())
        }
    }

    impl Micro<4> for Blocks {
        #[inline(always)]
        fn scores(self, kt: &[f32], q: &[[f32; 4]], s: &mut [[f32; TILE]; 4]) {
            // SAFETY: a `Blocks` exists only where avx512f was detected (`Blocks::detected` is a
            // target-feature function, called from `run_item_avx512` after `Isa::best` detected it).
            unsafe { scores4(kt, q, s) }
        }

        #[inline(always)]
        fn accumulate(
            self,
            vt: &[f32],
            d: usize,
            c0: usize,
            w: &[[f32; 4]],
            alpha: &[f32; 4],
            acc: &mut [f32],
        ) {
            // SAFETY: as in `scores`.
            unsafe { accumulate4(vt, d, c0, w, alpha, acc) }
        }
    }

    #[target_feature(enable = "avx512f")]
    fn scores4(kt: &[f32], q: &[[f32; 4]], s: &mut [[f32; TILE]; 4]) {
        let mut a = [[_mm512_setzero_ps(); 4]; 4];
        let (krows, _) = kt.as_chunks::<TILE>();
        for (krow, qv) in krows.iter().zip(q) {
            let (kc, _) = krow.as_chunks::<16>();
            let k: [__m512; 4] = std::array::from_fn(|c| bytemuck::cast(kc[c]));
            for r in 0..4 {
                let b = _mm512_set1_ps(qv[r]);
                for c in 0..4 {
                    a[r][c] = _mm512_fmadd_ps(b, k[c], a[r][c]);
                }
            }
        }
        for r in 0..4 {
            let (sc, _) = s[r].as_chunks_mut::<16>();
            for c in 0..4 {
                sc[c] = bytemuck::cast(a[r][c]);
            }
        }
    }

    #[target_feature(enable = "avx512f")]
    fn accumulate4(
        vt: &[f32],
        d: usize,
        c0: usize,
        w: &[[f32; 4]],
        alpha: &[f32; 4],
        acc: &mut [f32],
    ) {
        let zero = _mm512_setzero_ps();
        let mut reg = [[zero; CH / 16]; 4];
        for r in 0..4 {
            let Some(a) = acc[r * d + c0..].as_chunks::<CH>().0.first() else {
                return;
            };
            let (ac, _) = a.as_chunks::<16>();
            let al = _mm512_set1_ps(alpha[r]);
            for c in 0..CH / 16 {
                reg[r][c] = _mm512_fmadd_ps(bytemuck::cast(ac[c]), al, zero);
            }
        }
        for (vrow, wj) in vt.chunks_exact(d).zip(w) {
            let Some(vr) = vrow.get(c0..).and_then(|x| x.as_chunks::<CH>().0.first()) else {
                return;
            };
            let (vc, _) = vr.as_chunks::<16>();
            let v: [__m512; CH / 16] = std::array::from_fn(|c| bytemuck::cast(vc[c]));
            for r in 0..4 {
                let b = _mm512_set1_ps(wj[r]);
                for c in 0..CH / 16 {
                    reg[r][c] = _mm512_fmadd_ps(b, v[c], reg[r][c]);
                }
            }
        }
        for r in 0..4 {
            let Some(a) = acc[r * d + c0..].as_chunks_mut::<CH>().0.first_mut() else {
                return;
            };
            let (ac, _) = a.as_chunks_mut::<16>();
            for c in 0..CH / 16 {
                ac[c] = bytemuck::cast(reg[r][c]);
            }
        }
    }
}

/// Branch-free choice between two output elements by their bits: `a` where `m` is all ones,
/// `b` where it is 0.
#[inline(always)]
fn select_elem<T: Element>(m: u32, a: T, b: T) -> T {
    // Both encodings are plain integers of the same width; choose without a branch.
    let bits = (a.to_bits_u32() & m) | (b.to_bits_u32() & !m);
    T::from_bits_u32(bits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::{GenOptions, generate};
    use crate::problem::{CausalAlign, MaskLayout, Shape};

    /// Every instruction-set variant of the tile loop gives the same bits (the dispatch picks the
    /// widest, so without this the narrower ones would go untested on a wide CPU).
    #[test]
    fn every_isa_variant_gives_the_same_bits() {
        let isas = Isa::available();
        // Row counts that leave remainders after the groups of four, head dims with a partial
        // 64-column chunk and with two chunks, rows of one group that reach different key limits
        // (causal, both alignments, a key length inside a tile), and every mask entry random.
        let cases = [
            (17, 70, 64, false, CausalAlign::BottomRight, None),
            (33, 130, 80, true, CausalAlign::BottomRight, None),
            (5, 9, 3, false, CausalAlign::BottomRight, None),
            (23, 200, 128, true, CausalAlign::TopLeft, Some(150)),
            (64, 64, 200, true, CausalAlign::BottomRight, Some(37)),
            (1, 300, 128, false, CausalAlign::BottomRight, Some(299)),
        ];
        for (seed, (sq, skv, d, causal, align, kv_len)) in cases.into_iter().enumerate() {
            let mut b = Problem::builder(Shape::new(1, 1, 1, sq, skv, d))
                .causal(causal)
                .causal_align(align)
                .mask(MaskLayout::SHARED);
            if let Some(l) = kv_len {
                b = b.kv_lens(vec![l]);
            }
            let p = b.build().expect("valid problem");
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
            let mut want_lse = vec![0.0f32; sq];
            run_item_with(Isa::Portable, &item, &x.q, &mut want, &mut want_lse);
            assert!(
                want.iter().any(|v| *v != 0.0),
                "a trivial output proves nothing"
            );
            for &isa in &isas {
                let mut got = vec![f32::NAN; sq * d];
                let mut got_lse = vec![f32::NAN; sq];
                run_item_with(isa, &item, &x.q, &mut got, &mut got_lse);
                let same = got
                    .iter()
                    .chain(&got_lse)
                    .zip(want.iter().chain(&want_lse))
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{isa:?} differs from the portable loop (seed {seed})");
            }
        }
    }
}
