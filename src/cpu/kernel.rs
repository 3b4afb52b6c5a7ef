//! The tile loop of numerics.md §3–§5 for a block of query rows of one (batch, head).
//!
//! Structure mirrors `kernels/exact.cu`: prepare the query rows (§2), then per tile: scores (§3),
//! the online-softmax update (§4), and at the end the division (§5) and the rounding (§7).

use super::prepare::PreparedKv;
use crate::dtype::Element;
use crate::numerics::{
    FLT_MAX, TILE, W, clamp_z, exp, finalize, l_safe, mask_of, prepare_row, score_finish, sel,
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

/// Run one item, choosing the widest instruction set this CPU has. The arithmetic is the same
/// either way (IEEE fma in both); only the speed differs.
pub(crate) fn run_item<T: Element>(item: &Item<'_>, q: &[T], out: &mut [T]) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        // SAFETY: the two features this function is compiled for were detected just above.
        unsafe { run_item_avx2_fma(item, q, out) };
        return;
    }
    run_item_body(item, q, out);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn run_item_avx2_fma<T: Element>(item: &Item<'_>, q: &[T], out: &mut [T]) {
    run_item_body(item, q, out);
}

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
            for j in 0..TILE {
                let jj = j0 + j;
                // `jj < skv` is positional; the mask value itself is only combined, never branched on.
                let by_mask = mrow.is_none_or(|m| jj < skv && m[jj]);
                valid[j] = mask_of((jj < row.limit) & by_mask);
            }
            // §3 finish and §4 update.
            let mut mt = -FLT_MAX;
            for j in 0..TILE {
                let x = score_finish(s[j], scale, row.shift, sk[j]);
                s[j] = sel(valid[j] != 0, x, -FLT_MAX);
                mt = mt.max(s[j]);
            }
            let mnew = row.m.max(mt) + 0.0;
            let alpha = exp(clamp_z(row.m - mnew));
            for j in 0..TILE {
                let e = exp(clamp_z(s[j] - mnew)) * W;
                pj[j] = f32::from_bits(e.to_bits() & valid[j]);
                row.bad |= valid[j] & badkv[j];
            }
            row.m = mnew;
            row.l *= alpha;
            let a = &mut acc[r * d..(r + 1) * d];
            for x in a.iter_mut() {
                *x *= alpha;
            }
            // Keys past the limit have p = 0 and would leave acc as it is (§4): stop at the limit.
            let jn = (row.limit - j0).min(TILE);
            for j in 0..jn {
                row.l += pj[j];
                let vr = &kv.v[(j0 + j) * d..(j0 + j + 1) * d];
                let w = pj[j];
                for (x, y) in a.iter_mut().zip(vr) {
                    *x = w.mul_add(*y, *x);
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
    *s = [0.0; TILE];
    for (dd, &qd) in q.iter().enumerate() {
        let krow: &[f32; TILE] = kt[dd * TILE..(dd + 1) * TILE].try_into().expect("tile row");
        for j in 0..TILE {
            s[j] = qd.mul_add(krow[j], s[j]);
        }
    }
}

/// Branch-free choice between two output elements by their bits.
#[inline(always)]
fn select_elem<T: Element>(c: bool, a: T, b: T) -> T {
    // Both encodings are plain integers of the same width; choose without a branch.
    let m = mask_of(c);
    let bits = (a.to_bits_u32() & m) | (b.to_bits_u32() & !m);
    T::from_bits_u32(bits)
}
