//! Staging of one (batch, KV head): K rows sanitised, scaled by their power of two and transposed
//! tile by tile so that a tile's 64 score chains vectorise (numerics.md §2, §3); V rows sanitised.

use crate::dtype::Element;
use crate::numerics::{TILE, prepare_row};

/// K and V of one (batch, KV head), ready for the tile loop.
pub(crate) struct PreparedKv {
    /// `[tiles][D][TILE]`: `kt[(t*D + d)*TILE + j] = k'[t*TILE + j][d]`, zero past `kv_len`.
    pub kt: Vec<f32>,
    /// `[tiles*TILE]` row shifts of K (§2.3).
    pub sk: Vec<i32>,
    /// `[tiles*TILE][D]` sanitised V rows, zero past `kv_len`.
    pub v: Vec<f32>,
    /// `[tiles*TILE]` 1 where the K row or the V row held a non-finite value.
    pub bad: Vec<u32>,
}

impl PreparedKv {
    /// From the K and V rows `0..kv_len` (each of `d` elements), wherever they lie. Inlined
    /// into `kernel::prepare_kv`, which compiles it for the CPU's instruction set.
    #[inline(always)]
    pub fn new<'a, T: Element>(
        k: impl Fn(usize) -> &'a [T],
        v: impl Fn(usize) -> &'a [T],
        kv_len: usize,
        d: usize,
    ) -> Self {
        let tiles = kv_len.div_ceil(TILE);
        let padded = tiles * TILE;
        let mut kt = vec![0.0f32; padded * d];
        let mut sk = vec![0i32; padded];
        let mut vv = vec![0.0f32; padded * d];
        let mut bad = vec![0u32; padded];
        let mut row = vec![0.0f32; d];
        for j in 0..kv_len {
            for (x, y) in row.iter_mut().zip(k(j)) {
                *x = y.to_f32();
            }
            let (shift, kbad) = prepare_row(&mut row, true);
            sk[j] = shift;
            let (t, jj) = (j / TILE, j % TILE);
            for (dd, x) in row.iter().enumerate() {
                kt[(t * d + dd) * TILE + jj] = *x;
            }
            let vrow = &mut vv[j * d..(j + 1) * d];
            for (x, y) in vrow.iter_mut().zip(v(j)) {
                *x = y.to_f32();
            }
            let (_, vbad) = prepare_row(vrow, false);
            bad[j] = u32::from(kbad | vbad);
        }
        PreparedKv { kt, sk, v: vv, bad }
    }
}
