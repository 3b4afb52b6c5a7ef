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
    FLT_MAX, TILE, W, clamp_z, exp, finalize, fma, fma_wide, l_safe, lse as lse_of, mask_of, mul,
    prepare_row, score_finish,
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
    /// Every variant compiled for this target, narrowest first.
    #[cfg(any(test, feature = "test-override"))]
    const ALL: &'static [Isa] = &[
        Isa::Portable,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2Fma,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512,
    ];

    /// The widest variant this CPU can run: the one [`run_item`] uses. Each variant needs the
    /// features of the narrower ones, so the CPU runs exactly the variants up to this one.
    /// Feature detection is cached by std: a few loads, no allocation (it runs once per item).
    pub(crate) fn best() -> Isa {
        let detected = Isa::detected();
        // Test builds only: a narrower variant, so that the timing harness can measure the ones
        // a CPU without AVX-512 runs (docs/audit.md). A default build reads no variable here.
        #[cfg(feature = "test-override")]
        if let Some(cap) = test_override::cap() {
            return detected.min(cap);
        }
        detected
    }

    /// The widest variant this CPU's features allow.
    fn detected() -> Isa {
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
        Isa::ALL.iter().copied().filter(|&i| i <= best).collect()
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

/// The `test-override` build's cap on the instruction set, from [`TEST_CPU_ISA_ENV`].
#[cfg(feature = "test-override")]
mod test_override {
    use super::Isa;
    use std::sync::OnceLock;

    /// The variable: `portable`, `avx2+fma` or `avx512` (a name of [`Isa::name`]).
    const TEST_CPU_ISA_ENV: &str = "DETATTN_TEST_CPU_ISA";

    pub(super) fn cap() -> Option<Isa> {
        static CAP: OnceLock<Option<Isa>> = OnceLock::new();
        *CAP.get_or_init(|| {
            let v = std::env::var(TEST_CPU_ISA_ENV).ok()?;
            let found = Isa::ALL.iter().copied().find(|i| i.name() == v);
            if found.is_none() {
                eprintln!("warning: {TEST_CPU_ISA_ENV}={v:?} names no CPU variant; ignored");
            }
            found
        })
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
// columns in registers (binary64: 8 zmm a row), so every K and V element loaded feeds R rows.
// Two rows leave room for the loads and the rounding's temporaries in 32 zmm registers; four
// spill and were no faster beyond the noise (W1 f32, Intel Xeon: one row 308 ms, two 270, four
// 264).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
fn run_item_avx512<T: Element>(item: &Item<'_>, q: &[T], out: &mut [T], lse: &mut [f32]) {
    run_item_body::<T, 2, _>(avx512::Blocks::detected(), item, q, out, lse);
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
        // The weight's product is subnormal for z below about −69: through binary64 (§8).
        for j in 0..TILE {
            let e = mul(exp(clamp_z(sr[j] - mnew)), W);
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
    let mut l: [f32; N] = std::array::from_fn(|r| mul(st[r].l, alpha[r]));
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
                *x = mul(*x, alpha[r]);
            }
            for (j, vrow) in vt.chunks_exact(d).enumerate() {
                let w = pj[r][j];
                for (x, y) in a.iter_mut().zip(&vrow[c0..]) {
                    *x = fma(w, *y, *x);
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
        // A local accumulator and a loop with no panic path, so the chains stay in registers;
        // binary64 between the steps (`fma_wide`).
        let mut a = [[0.0f64; TILE]; N];
        let (krows, _) = kt.as_chunks::<TILE>();
        for (krow, qv) in krows.iter().zip(q) {
            for r in 0..N {
                let qr = f64::from(qv[r]);
                for j in 0..TILE {
                    a[r][j] = fma_wide(qr, f64::from(krow[j]), a[r][j]);
                }
            }
        }
        for (sr, ar) in s.iter_mut().zip(&a) {
            for (x, y) in sr.iter_mut().zip(ar) {
                *x = *y as f32;
            }
        }
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
            let mut reg = [0.0f64; CH];
            for k in 0..CH {
                reg[k] = f64::from(mul(a[k], alpha[r]));
            }
            for (vrow, wj) in vt.chunks_exact(d).zip(w) {
                // Always `Some` (the chunk is whole); the let-else keeps an index panic path,
                // which blocks vectorisation, out of the loop.
                let Some(vr) = vrow.get(c0..).and_then(|x| x.as_chunks::<CH>().0.first()) else {
                    continue;
                };
                let wr = f64::from(wj[r]);
                for k in 0..CH {
                    reg[k] = fma_wide(wr, f64::from(vr[k]), reg[k]);
                }
            }
            for (x, y) in a.iter_mut().zip(&reg) {
                *x = *y as f32;
            }
        }
    }
}

/// `R` rows at a time in 512-bit registers, each binary32 fma of the two chains done as
/// [`crate::numerics::fma_wide`] specifies, with AVX-512's per-instruction rounding modes in
/// place of the error recovery: of the binary64 fma rounded down and rounded up, the one towards
/// zero with its last bit set when the two differ (the sum was inexact) is the sum rounded to odd
/// — the value `fma_wide` builds from TwoSum, in five instructions instead of about fifteen. The
/// chains stay in binary64 between steps, rounded to binary32 by a conversion there and back.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{CH, Micro, TILE};
    use crate::numerics::mul;
    use std::arch::x86_64::{
        __m512d, __m512i, _MM_FROUND_NO_EXC, _MM_FROUND_TO_NEG_INF, _MM_FROUND_TO_POS_INF,
        _mm512_cmpneq_epu64_mask, _mm512_cvtpd_ps, _mm512_cvtps_pd, _mm512_fmadd_round_pd,
        _mm512_mask_or_epi64, _mm512_min_epu64, _mm512_set1_epi64, _mm512_set1_pd,
        _mm512_setzero_pd,
    };

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

    impl<const R: usize> Micro<R> for Blocks {
        #[inline(always)]
        fn scores(self, kt: &[f32], q: &[[f32; R]], s: &mut [[f32; TILE]; R]) {
            // SAFETY: a `Blocks` exists only where avx512f was detected (`Blocks::detected` is a
            // target-feature function, called from `run_item_avx512` after `Isa::best` detected it).
            unsafe { scores(kt, q, s) }
        }

        #[inline(always)]
        fn accumulate(
            self,
            vt: &[f32],
            d: usize,
            c0: usize,
            w: &[[f32; R]],
            alpha: &[f32; R],
            acc: &mut [f32],
        ) {
            // SAFETY: as in `scores`.
            unsafe { accumulate(vt, d, c0, w, alpha, acc) }
        }
    }

    /// Eight binary32 `fma(a, b, c)` (operands held in binary64), rounded to binary32, held in
    /// binary64: `crate::numerics::fma_wide` lane by lane.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn fma8(a: __m512d, b: __m512d, c: __m512d) -> __m512d {
        const RD: i32 = _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC;
        const RU: i32 = _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC;
        let dn: __m512i = bytemuck::cast(_mm512_fmadd_round_pd::<RD>(a, b, c));
        let up: __m512i = bytemuck::cast(_mm512_fmadd_round_pd::<RU>(a, b, c));
        // Rounded down and up differ by one step (as integers) when the sum was inexact; the
        // smaller encoding is the one towards zero, and setting its last bit picks the odd one
        // of the two. An exact zero sum comes out as -0 and +0: the +0 with its last bit set,
        // the least binary64, which the conversion rounds to +0, the fma's zero.
        let inexact = _mm512_cmpneq_epu64_mask(dn, up);
        let toward_zero = _mm512_min_epu64(dn, up);
        let odd = _mm512_mask_or_epi64(toward_zero, inexact, toward_zero, _mm512_set1_epi64(1));
        _mm512_cvtps_pd(_mm512_cvtpd_ps(bytemuck::cast(odd)))
    }

    /// 64 binary32 values as eight binary64 vectors.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn widen(x: &[f32; 64]) -> [__m512d; 8] {
        let (h, _) = x.as_chunks::<8>();
        std::array::from_fn(|c| _mm512_cvtps_pd(bytemuck::cast(h[c])))
    }

    /// Eight binary64 vectors back to 64 binary32 values (exact: each holds a binary32 value).
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn narrow(x: &[__m512d; 8], out: &mut [f32; 64]) {
        let (h, _) = out.as_chunks_mut::<8>();
        for c in 0..8 {
            h[c] = bytemuck::cast(_mm512_cvtpd_ps(x[c]));
        }
    }

    /// One step of `R` rows' chains over 64 columns: `a[r][c] = fma(x[r], y[c], a[r][c])` (a
    /// query element and a K row for the scores, a weight and a V row for the accumulators).
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn step<const R: usize>(x: &[f32; R], y: &[f32; 64], a: &mut [[__m512d; 8]; R]) {
        let y = widen(y);
        for r in 0..R {
            let b = _mm512_set1_pd(f64::from(x[r]));
            for c in 0..8 {
                a[r][c] = fma8(b, y[c], a[r][c]);
            }
        }
    }

    #[target_feature(enable = "avx512f")]
    fn scores<const R: usize>(kt: &[f32], q: &[[f32; R]], s: &mut [[f32; TILE]; R]) {
        let mut a = [[_mm512_setzero_pd(); TILE / 8]; R];
        let (krows, _) = kt.as_chunks::<TILE>();
        for (krow, qv) in krows.iter().zip(q) {
            step(qv, krow, &mut a);
        }
        for r in 0..R {
            narrow(&a[r], &mut s[r]);
        }
    }

    #[target_feature(enable = "avx512f")]
    fn accumulate<const R: usize>(
        vt: &[f32],
        d: usize,
        c0: usize,
        w: &[[f32; R]],
        alpha: &[f32; R],
        acc: &mut [f32],
    ) {
        let mut reg = [[_mm512_setzero_pd(); CH / 8]; R];
        for r in 0..R {
            let Some(a) = acc[r * d + c0..].as_chunks_mut::<CH>().0.first_mut() else {
                return;
            };
            // The rescale is a product (§4): `mul`, then widened.
            for x in a.iter_mut() {
                *x = mul(*x, alpha[r]);
            }
            reg[r] = widen(a);
        }
        for (vrow, wj) in vt.chunks_exact(d).zip(w) {
            let Some(vr) = vrow.get(c0..).and_then(|x| x.as_chunks::<CH>().0.first()) else {
                return;
            };
            step(wj, vr, &mut reg);
        }
        for r in 0..R {
            let Some(a) = acc[r * d + c0..].as_chunks_mut::<CH>().0.first_mut() else {
                return;
            };
            narrow(&reg[r], a);
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn fma8_is_the_binary32_fma_in_every_lane() {
            if !std::is_x86_feature_detected!("avx512f") {
                eprintln!(
                    "SKIPPED: this CPU has no AVX-512F; the variant it tests cannot run here"
                );
                return;
            }
            let cases = crate::numerics::tests::fma_cases(400_000);
            for chunk in cases.chunks_exact(8) {
                let lanes = |f: fn(&(f32, f32, f32)) -> f32| -> [f64; 8] {
                    std::array::from_fn(|i| f64::from(f(&chunk[i])))
                };
                let (a, b, c) = (lanes(|x| x.0), lanes(|x| x.1), lanes(|x| x.2));
                // SAFETY: avx512f was detected above.
                let got: [f64; 8] = unsafe {
                    bytemuck::cast(fma8(
                        bytemuck::cast(a),
                        bytemuck::cast(b),
                        bytemuck::cast(c),
                    ))
                };
                for (i, &(a, b, c)) in chunk.iter().enumerate() {
                    let want = a.mul_add(b, c);
                    assert_eq!(
                        (got[i] as f32).to_bits(),
                        want.to_bits(),
                        "fma({a:e}, {b:e}, {c:e})"
                    );
                    assert_eq!(f64::from(got[i] as f32).to_bits(), got[i].to_bits());
                }
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
