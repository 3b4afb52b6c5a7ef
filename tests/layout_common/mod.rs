//! Layouts the layout tests place tensors in, shared by tests/layouts.rs (CPU) and
//! tests/cuda_layouts.rs (GPU): contiguous `[B, S, H, D]`, a padded `[B, S, H, D]` (rows farther
//! apart than they need, with sentinels between them), and Q, K, V as three views into one fused
//! `[B, S, Hq + 2·Hkv, D]` buffer, the way a fused QKV projection leaves them.
#![allow(dead_code)]

use detattn::inputs::SplitMix64;
use detattn::tensor::scatter;
use detattn::{CausalAlign, Layout, MaskLayout, Problem, Shape};

/// A random problem of `shape` (B, Hq, Hkv, Sq, Skv, D drawn by the caller): causal or not with
/// either alignment, key lengths a third of the time, a mask of any layout a quarter of the time.
pub fn random_options(rng: &mut SplitMix64, shape: Shape) -> Problem {
    let mut r = |n: usize| (rng.next_u64() % n as u64) as usize;
    let mut pb = Problem::builder(shape)
        .causal(r(2) == 0)
        .causal_align(if r(2) == 0 {
            CausalAlign::TopLeft
        } else {
            CausalAlign::BottomRight
        });
    if r(3) == 0 {
        let (b, skv) = (shape.batch, shape.kv_len);
        pb = pb.kv_lens((0..b).map(|_| r(skv + 1)).collect());
    }
    if r(4) == 0 {
        pb = pb.mask(MaskLayout {
            per_batch: r(2) == 0,
            per_head: r(2) == 0,
        });
    }
    pb.build().expect("a valid random problem")
}

/// Extra elements between rows of a padded layout (a multiple of 8, so that the `TensorCore`
/// path's 16-byte alignment holds too).
pub const PAD: usize = 8;

/// The layouts a test places the tensors in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Bhsd,
    Bshd,
    /// `[B, S, H, D]` with `PAD` extra elements after each position's heads and an offset of
    /// `PAD`.
    Padded,
    /// Q, K, V in one `[B, S, Hq + 2·Hkv, D]` buffer (needs `q_len == kv_len`).
    Fused,
}

pub const KINDS: [Kind; 4] = [Kind::Bhsd, Kind::Bshd, Kind::Padded, Kind::Fused];

/// The layout of a `[B, heads, seq, d]` tensor of `kind` (not `Fused`), and its buffer length.
pub fn layout(kind: Kind, [b, heads, seq, d]: [usize; 4]) -> (Layout, usize) {
    match kind {
        Kind::Bhsd => (Layout::bhsd(heads, seq, d), b * heads * seq * d),
        Kind::Bshd => (Layout::bshd(heads, seq, d), b * heads * seq * d),
        Kind::Padded | Kind::Fused => {
            let row = heads * d + PAD;
            let l = Layout {
                offset: PAD,
                batch_stride: seq * row,
                head_stride: d,
                seq_stride: row,
            };
            (l, PAD + b * seq * row)
        }
    }
}

/// Q, K, V of `p` (logical `[B, H, S, D]` data) placed by `kind`: `(buffers, layouts)`. For
/// `Fused` the three buffers are the same vector (the caller passes the same slice thrice).
pub fn place<T: Copy + Default>(
    p: &Problem,
    kind: Kind,
    q: &[T],
    k: &[T],
    v: &[T],
    fill: T,
) -> ([Vec<T>; 3], [Layout; 3]) {
    let s = p.shape();
    let qd = [s.batch, s.q_heads, s.q_len, s.head_dim];
    let kd = [s.batch, s.kv_heads, s.kv_len, s.head_dim];
    if kind == Kind::Fused {
        assert_eq!(
            s.q_len, s.kv_len,
            "a fused QKV buffer needs q_len == kv_len"
        );
        let (d, n) = (s.head_dim, s.q_heads + 2 * s.kv_heads);
        let row = n * d;
        let base = Layout {
            offset: 0,
            batch_stride: s.q_len * row,
            head_stride: d,
            seq_stride: row,
        };
        let lq = base;
        let lk = base.with_offset(s.q_heads * d);
        let lv = base.with_offset((s.q_heads + s.kv_heads) * d);
        let len = s.batch * s.q_len * row;
        let mut buf = scatter(q, qd, lq, len, fill);
        for (x, l) in [(k, lk), (v, lv)] {
            let part = scatter(x, kd, l, len, fill);
            for [b, h, i] in rows(kd) {
                let r = l.row(b, h, i);
                buf[r..r + d].copy_from_slice(&part[r..r + d]);
            }
        }
        return ([buf.clone(), buf.clone(), buf], [lq, lk, lv]);
    }
    let (lq, nq) = layout(kind, qd);
    let (lk, nk) = layout(kind, kd);
    (
        [
            scatter(q, qd, lq, nq, fill),
            scatter(k, kd, lk, nk, fill),
            scatter(v, kd, lk, nk, fill),
        ],
        [lq, lk, lk],
    )
}

/// Every `[b, h, s]` of a `[B, H, S, D]` shape.
pub fn rows([b, h, s, _]: [usize; 4]) -> impl Iterator<Item = [usize; 3]> {
    (0..b).flat_map(move |bi| (0..h).flat_map(move |hi| (0..s).map(move |si| [bi, hi, si])))
}

/// Whether every element of `buf` outside the rows of `layout` still holds `fill`'s bits.
pub fn untouched_outside_rows(buf: &[u32], dims: [usize; 4], layout: Layout, fill: u32) -> bool {
    let d = dims[3];
    let mut mine = vec![false; buf.len()];
    for [b, h, s] in rows(dims) {
        let r = layout.row(b, h, s);
        mine[r..r + d].iter_mut().for_each(|m| *m = true);
    }
    buf.iter().zip(&mine).all(|(&x, &m)| m || x == fill)
}
