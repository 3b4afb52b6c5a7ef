//! What the KV-cache tests share (tests/kvcache.rs on the CPU, tests/cuda_kvcache.rs on the GPU):
//! running `Engine::run_cache`, contiguous K and V, variable-length problems, and a sequence of a
//! variable-length batch as the problem of that sequence alone — written from the definition
//! (`Varlen`'s docs), not from the library's own `sequence_problem`.
#![allow(dead_code)]

use detattn::{
    CausalAlign, Element, Engine, Error, KvCache, Layout, NonFinitePolicy, Problem, QkvCache,
    Shape, Tensor, TensorMut,
};

pub fn bits<T: Element>(v: &[T]) -> Vec<u32> {
    v.iter().map(|e| e.to_bits_u32()).collect()
}

/// Run `p` on `e` with K and V as given, contiguous `[B, H, S, D]` Q and output: (output, and
/// the log-sum-exp when `lse`).
pub fn run_cache_on<T: Element>(
    e: &Engine,
    p: &Problem,
    q: &[T],
    kv: KvCache<'_, T>,
    mask: Option<&[bool]>,
    lse: bool,
) -> Result<(Vec<T>, Vec<f32>), Error> {
    let s = p.shape();
    let ql = Layout::bhsd(s.q_heads, s.q_len, s.head_dim);
    let mut out = vec![T::default(); s.q_elems()];
    let mut l = vec![
        0.0f32;
        if lse {
            s.batch * s.q_heads * s.q_len
        } else {
            0
        }
    ];
    let x = QkvCache {
        q: Tensor::new(q, ql),
        kv,
        mask,
    };
    e.run_cache(
        p,
        &x,
        TensorMut::new(&mut out, ql),
        lse.then_some(&mut l[..]),
    )?;
    Ok((out, l))
}

pub fn contiguous<'a, T>(p: &Problem, k: &'a [T], v: &'a [T]) -> KvCache<'a, T> {
    let s = p.shape();
    let l = Layout::bhsd(s.kv_heads, s.kv_len, s.head_dim);
    KvCache::Tensors {
        k: Tensor::new(k, l),
        v: Tensor::new(v, l),
    }
}

/// A varlen problem of these sequences (lengths), GQA, causal with `align` or not.
pub fn varlen_problem(
    heads: (usize, usize),
    q: &[usize],
    k: &[usize],
    d: usize,
    causal: Option<CausalAlign>,
    policy: NonFinitePolicy,
) -> Problem {
    let cu = detattn::golden::cumulative;
    let (tq, tk) = (q.iter().sum(), k.iter().sum());
    Problem::builder(Shape::new(1, heads.0, heads.1, tq, tk, d))
        .causal(causal.is_some())
        .causal_align(causal.unwrap_or_default())
        .nonfinite(policy)
        .varlen(cu(q), cu(k))
        .build()
        .unwrap()
}

/// Sequence `b` of the varlen problem `p` alone: batch 1, its own lengths, the same options (a
/// key length of 0 as a key length of 1 with `kv_lens = [0]`), and its rows of the packed
/// `[1, H, total, D]` inputs `q`, `k`, `v` as contiguous tensors of that problem.
pub fn alone_inputs<T: Element>(
    p: &Problem,
    b: usize,
    q: &[T],
    k: &[T],
    v: &[T],
) -> (Problem, Vec<T>, Vec<T>, Vec<T>) {
    let s = p.shape();
    let seq = p.sequence(b);
    let d = s.head_dim;
    let mut pb = Problem::builder(Shape::new(
        1,
        s.q_heads,
        s.kv_heads,
        seq.q_len,
        seq.key_len.max(1),
        d,
    ))
    .causal(p.causal())
    .causal_align(p.causal_align())
    .scale(p.scale())
    .nonfinite(p.nonfinite());
    if seq.key_len == 0 {
        pb = pb.kv_lens(vec![0]);
    }
    let sub = pb.build().unwrap();
    let take = |t: &[T], heads: usize, total: usize, start: usize, n: usize, keep: usize| {
        let mut out = Vec::new();
        for h in 0..heads {
            let r = (h * total + start) * d;
            out.extend_from_slice(&t[r..r + n * d]);
            out.extend(std::iter::repeat_n(T::default(), (keep - n) * d));
        }
        out
    };
    let kl = seq.key_len.max(1);
    (
        sub,
        take(q, s.q_heads, s.q_len, seq.q_start, seq.q_len, seq.q_len),
        take(k, s.kv_heads, s.kv_len, seq.k_start, seq.key_len, kl),
        take(v, s.kv_heads, s.kv_len, seq.k_start, seq.key_len, kl),
    )
}

/// Every row of every sequence of `p` in `out` (packed `[1, Hq, total, D]`) against `alone(b)`
/// (that sequence's output alone, `[1, Hq, q_len, D]`), bit for bit; the log-sum-exp too when
/// both are given. Panics naming the first row that differs.
pub fn assert_rows_alone<T: Element>(
    p: &Problem,
    out: &[T],
    lse: &[f32],
    mut alone: impl FnMut(usize) -> (Vec<T>, Vec<f32>),
    what: &str,
) {
    let s = p.shape();
    let d = s.head_dim;
    for b in 0..p.sequences() {
        let seq = p.sequence(b);
        if seq.q_len == 0 {
            continue; // no rows: nothing to compare (its neighbours are)
        }
        let (want, want_lse) = alone(b);
        for h in 0..s.q_heads {
            for i in 0..seq.q_len {
                let r = h * s.q_len + seq.q_start + i;
                let w = h * seq.q_len + i;
                assert_eq!(
                    bits(&out[r * d..(r + 1) * d]),
                    bits(&want[w * d..(w + 1) * d]),
                    "{what}: sequence {b} head {h} row {i} of {p:?}"
                );
                if !lse.is_empty() && !want_lse.is_empty() {
                    assert_eq!(
                        lse[r].to_bits(),
                        want_lse[w].to_bits(),
                        "{what}: lse {b} {h} {i}"
                    );
                }
            }
        }
    }
}
