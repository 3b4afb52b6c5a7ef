//! Seeded inputs: part of the contract (docs/design.md §8), so anyone can regenerate the golden
//! problems' inputs. No transcendental functions: every value is an integer times a power of two,
//! exact in its dtype, so the inputs are the same bits on every machine.
//!
//! - Generator: SplitMix64 (`state += 0x9E3779B97F4A7C15`, then the usual two xor-shift-multiply
//!   rounds with `0xBF58476D1CE4E5B9` and `0x94D049BB133111EB`, shifts 30, 27, 31).
//! - Draw order: every element of Q, then K, then V (row-major), then the mask (row-major).
//! - A value from a draw `r`, for a dtype with `p` significand bits (f32 24, f16 11, bf16 8):
//!   `((r >> (64 − p)) · 2^−(p−2) − 2) · 2^amp`: uniform on [−2, 2) on a grid the dtype holds
//!   exactly, scaled by the power of two `2^amp`.
//! - A mask entry is `true` (attend) iff `r >> 62 != 0` (probability 3/4); with
//!   `blank_rows_every = n`, rows whose query index `i` has `i % n == n − 1` are all `false`
//!   (their draws are still taken, so other rows do not move).
//!
//! Python, for one value: `((r >> (64 - p)) * 2.0**-(p - 2) - 2) * 2.0**amp`.
//!
//! [`paginate`] places generated K and V into a paged cache in a seeded shuffled page order (the
//! CLI's `--page-size`, the golden paged problems): the bits are those of the contiguous inputs,
//! so nothing about it needs re-implementing to check a digest.

use crate::dtype::Element;
use crate::error::Result;
use crate::problem::Problem;
use crate::tensor::{Layout, PagedKv, Tensor, check_page_size};

/// SplitMix64 (Steele, Lea, Flood 2014).
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// How to generate a problem's inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GenOptions {
    /// The PRNG seed.
    pub seed: u64,
    /// Values are scaled by `2^amp` (0: uniform on [−2, 2)).
    pub amp: i32,
    /// If set to `n`, mask rows with `i % n == n − 1` are entirely `false`.
    pub blank_rows_every: Option<usize>,
}

impl GenOptions {
    /// Values on [−2, 2), no blank mask rows.
    pub fn seed(seed: u64) -> Self {
        GenOptions {
            seed,
            amp: 0,
            blank_rows_every: None,
        }
    }
}

/// Q, K, V and (if the problem declares one) the mask.
#[derive(Clone, Debug, PartialEq)]
pub struct Inputs<T> {
    /// `[B, Hq, Sq, D]`.
    pub q: Vec<T>,
    /// `[B, Hkv, Skv, D]`.
    pub k: Vec<T>,
    /// `[B, Hkv, Skv, D]`.
    pub v: Vec<T>,
    /// `[Bm, Hm, Sq, Skv]`.
    pub mask: Option<Vec<bool>>,
}

/// One value from one draw, exact in `T`.
pub fn value<T: Element>(r: u64, amp: i32) -> T {
    let p = T::DTYPE.precision_bits();
    let grid = (r >> (64 - p)) as f64 * 2f64.powi(-(p as i32 - 2)) - 2.0;
    T::from_f32_rne((grid * 2f64.powi(amp)) as f32)
}

/// Generate the inputs of `problem` from `opts`.
pub fn generate<T: Element>(problem: &Problem, opts: GenOptions) -> Inputs<T> {
    let s = problem.shape();
    let mut rng = SplitMix64::new(opts.seed);
    let mut draw =
        |n: usize| -> Vec<T> { (0..n).map(|_| value(rng.next_u64(), opts.amp)).collect() };
    let q = draw(s.q_elems());
    let k = draw(s.kv_elems());
    let v = draw(s.kv_elems());
    let mask = problem.mask().map(|_| {
        let [bm, hm, sq, skv] = problem.mask_dims();
        let mut m = Vec::with_capacity(bm * hm * sq * skv);
        for _ in 0..bm * hm {
            for i in 0..sq {
                let blank = opts
                    .blank_rows_every
                    .is_some_and(|n| n > 0 && i % n == n - 1);
                for _ in 0..skv {
                    let attend = rng.next_u64() >> 62 != 0;
                    m.push(attend && !blank);
                }
            }
        }
        m
    });
    Inputs { q, k, v, mask }
}

/// K and V in a paged cache, with its block table ([`paginate`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Paged<T> {
    /// Key pages, `[num_pages, page_size, Hkv, D]` contiguous ([`Paged::layout`]).
    pub k: Vec<T>,
    /// Value pages, the same layout.
    pub v: Vec<T>,
    /// `Layout::bshd(Hkv, page_size, D)`: the batch dimension is the page.
    pub layout: Layout,
    /// Pages in the cache.
    pub num_pages: usize,
    /// Key rows per page.
    pub page_size: usize,
    /// `[sequences, max_pages]`, −1 where a sequence uses no page.
    pub block_table: Vec<i32>,
    /// Columns of the table: the most pages a sequence uses (at least 1).
    pub max_pages: usize,
}

impl<T> Paged<T> {
    /// The cache as a call takes it.
    pub fn cache(&self) -> PagedKv<'_, T> {
        PagedKv {
            k: Tensor::new(&self.k, self.layout),
            v: Tensor::new(&self.v, self.layout),
            num_pages: self.num_pages,
            page_size: self.page_size,
            block_table: &self.block_table,
            max_pages: self.max_pages,
        }
    }
}

/// Place `k` and `v` (contiguous `[B, Hkv, Skv, D]` of `p`: the generator's output) into pages
/// of `page_size` rows: sequence by sequence ([`Problem::sequence`]), `ceil(L / page_size)` pages
/// each, plus one page no sequence uses; the pages in the order of a Fisher–Yates shuffle driven
/// by SplitMix64(`seed`) (for `i` from `n − 1` down to 1, swap `i` with `next_u64() % (i + 1)`):
/// logical page `n` is physical page `perm[n]`. Rows past a sequence's length, and the spare
/// page, hold the canonical NaN: a call must never read them. [`crate::Error::PageSize`] for a
/// page size the cache does not take.
pub fn paginate<T: Element>(
    p: &Problem,
    k: &[T],
    v: &[T],
    page_size: usize,
    seed: u64,
) -> Result<Paged<T>> {
    check_page_size(page_size)?;
    let s = p.shape();
    let (hkv, d) = (s.kv_heads, s.head_dim);
    let seqs: Vec<_> = (0..p.sequences()).map(|b| p.sequence(b)).collect();
    let pages: Vec<usize> = seqs.iter().map(|q| q.key_len.div_ceil(page_size)).collect();
    let num_pages = pages.iter().sum::<usize>() + 1;
    let max_pages = pages.iter().copied().max().unwrap_or(0).max(1);
    let mut perm: Vec<usize> = (0..num_pages).collect();
    let mut rng = SplitMix64::new(seed);
    for i in (1..num_pages).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        perm.swap(i, j);
    }
    let layout = Layout::bshd(hkv, page_size, d);
    let n = num_pages * page_size * hkv * d;
    let (mut kp, mut vp) = (vec![T::canonical_nan(); n], vec![T::canonical_nan(); n]);
    let mut block_table = vec![-1i32; seqs.len() * max_pages];
    let logical = Layout::bhsd(hkv, s.kv_len, d);
    let mut next = 0;
    for (b, q) in seqs.iter().enumerate() {
        for page in 0..pages[b] {
            let phys = perm[next];
            next += 1;
            block_table[b * max_pages + page] = phys as i32;
            for h in 0..hkv {
                for slot in 0..page_size.min(q.key_len - page * page_size) {
                    let src = logical.row(q.batch, h, q.k_start + page * page_size + slot);
                    let dst = layout.row(phys, h, slot);
                    kp[dst..dst + d].copy_from_slice(&k[src..src + d]);
                    vp[dst..dst + d].copy_from_slice(&v[src..src + d]);
                }
            }
        }
    }
    Ok(Paged {
        k: kp,
        v: vp,
        layout,
        num_pages,
        page_size,
        block_table,
        max_pages,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_matches_the_published_reference_sequence() {
        // First outputs for seed 1234567 from the reference C implementation (splitmix64.c by
        // Vigna), recomputed independently with Python integers for this test's commit.
        let mut g = SplitMix64::new(1234567);
        let want: Vec<u64> = include_str!("../tests/data/splitmix64_kat.txt")
            .lines()
            .map(|l| l.parse().unwrap())
            .collect();
        for w in want {
            assert_eq!(g.next_u64(), w);
        }
    }

    #[test]
    fn values_are_exact_in_their_dtype_and_in_range() {
        let mut g = SplitMix64::new(7);
        for _ in 0..10_000 {
            let r = g.next_u64();
            let a = value::<f32>(r, 0);
            assert!((-2.0..2.0).contains(&a));
            let h = value::<half::f16>(r, 0).to_f32();
            let b = value::<half::bf16>(r, 0).to_f32();
            // Exact: the grid value before rounding equals the stored one.
            let p = |bits: i32| (r >> (64 - bits)) as f64 * 2f64.powi(-(bits - 2)) - 2.0;
            assert_eq!(f64::from(h), p(11));
            assert_eq!(f64::from(b), p(8));
        }
    }
}
