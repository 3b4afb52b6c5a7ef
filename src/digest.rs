//! Output digests (docs/design.md §8): SHA-256 over a canonical encoding, printed as lowercase hex.
//!
//! Encoding, all integers little-endian:
//!
//! | bytes | field |
//! | --- | --- |
//! | 8 | ASCII `detattn\0` |
//! | 4 | format version, u32 = 1 |
//! | 1 | path: 0 `exact`, 1 `tensorcore` |
//! | 1 | dtype: 0 f32, 1 f16, 2 bf16 |
//! | 2 | zero |
//! | 4·8 | output shape `[B, Hq, Sq, D]`, four u64 |
//! | rest | the output elements' raw encodings, little-endian, in row-major order |
//!
//! The log-sum-exp output of a call (docs/numerics.md §10) is digested the same way, as an f32
//! tensor of shape `[B, Hq, Sq, 1]` ([`lse_digest`]).
//!
//! In Python, for a NumPy output `o` (f32 or f16; for bf16 pass the uint16 bit patterns):
//!
//! ```text
//! import hashlib, struct
//! h = hashlib.sha256(b"detattn\0" + struct.pack("<IBBH4Q", 1, path, dtype, 0, *o.shape))
//! h.update(o.astype(o.dtype.newbyteorder("<")).tobytes()); print(h.hexdigest())
//! ```

use crate::dtype::Element;
use crate::error::{Error, Result, TensorName};
use crate::path::Path;
use crate::problem::Problem;
use crate::tensor::Tensor;
use sha2::{Digest as _, Sha256};
use std::fmt;

/// Format version of the encoding above.
pub const DIGEST_VERSION: u32 = 1;

/// A SHA-256 digest of an output; `Display` gives lowercase hex.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Digest(pub [u8; 32]);

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({self})")
    }
}

/// The canonical header bytes (everything before the elements).
pub fn header<T: Element>(path: Path, shape: [usize; 4]) -> Vec<u8> {
    let mut h = Vec::with_capacity(48);
    h.extend_from_slice(b"detattn\0");
    h.extend_from_slice(&DIGEST_VERSION.to_le_bytes());
    h.push(path.code());
    h.push(T::DTYPE.code());
    h.extend_from_slice(&[0, 0]);
    for d in shape {
        h.extend_from_slice(&(d as u64).to_le_bytes());
    }
    h
}

/// Digest of a contiguous output of shape `[B, Hq, Sq, D]` computed on `path`.
/// [`Error::TensorLength`] (naming `out`) when `out` does not hold exactly that many elements.
pub fn digest<T: Element>(path: Path, shape: [usize; 4], out: &[T]) -> Result<Digest> {
    let n = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    if n != Some(out.len()) {
        return Err(Error::TensorLength {
            tensor: TensorName::Out,
            expected: n.unwrap_or(usize::MAX),
            got: out.len(),
            shape: format!("{shape:?}"),
        });
    }
    let mut hasher = Sha256::new();
    hasher.update(header::<T>(path, shape));
    hash_rows(&mut hasher, out.chunks(4096));
    Ok(Digest(hasher.finalize().into()))
}

/// Digest of the log-sum-exp output of `problem` (`[B, Hq, Sq]` f32, digested as the f32 tensor
/// `[B, Hq, Sq, 1]`). [`Error::TensorLength`] when `lse` does not hold one value per query row.
pub fn lse_digest(path: Path, problem: &Problem, lse: &[f32]) -> Result<Digest> {
    let s = problem.shape();
    digest(path, [s.batch, s.q_heads, s.q_len, 1], lse)
}

/// Digest of the output of `problem` in any layout: the logical `[B, Hq, Sq, D]` elements in
/// row-major order, so the same bits give the same digest whatever the layout. Errors as the
/// entry points' own checks of an output ([`Error::TensorExtent`], [`Error::SizeOverflow`]).
pub fn digest_of<T: Element>(path: Path, problem: &Problem, out: &Tensor<'_, T>) -> Result<Digest> {
    let (qd, _) = crate::tensor::dims(problem);
    crate::tensor::check_output_extent(qd, out.into())?;
    let [b, h, s, d] = qd;
    let mut hasher = Sha256::new();
    hasher.update(header::<T>(path, qd));
    let rows = (0..b * h * s).map(|r| {
        let start = out.layout.row(r / (h * s), (r / s) % h, r % s);
        &out.data[start..start + d]
    });
    hash_rows(&mut hasher, rows);
    Ok(Digest(hasher.finalize().into()))
}

fn hash_rows<'a, T: Element>(hasher: &mut Sha256, rows: impl Iterator<Item = &'a [T]>) {
    let mut buf = Vec::with_capacity(4096 * 4);
    for row in rows {
        buf.clear();
        for x in row {
            x.write_le(&mut buf);
        }
        hasher.update(&buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_answer_from_an_independent_encoder() {
        // The bytes were assembled by hand from the table above and hashed with Python's
        // hashlib (`python3 -c` in the commit that added this test): struct.pack("<IBBH4Q", 1,
        // 0, 0, 0, 1, 1, 1, 2) after b"detattn\0", then the f32s 1.0 and -2.0.
        let d = digest::<f32>(Path::Exact, [1, 1, 1, 2], &[1.0, -2.0]).unwrap();
        assert_eq!(
            d.to_string(),
            include_str!("../tests/data/digest_kat.txt").trim()
        );
    }

    #[test]
    fn every_field_changes_the_digest() {
        let d = |p, s, x: &[f32]| digest::<f32>(p, s, x).unwrap();
        let base = d(Path::Exact, [1, 1, 1, 2], &[1.0, -2.0]);
        assert_ne!(base, d(Path::TensorCore, [1, 1, 1, 2], &[1.0, -2.0]));
        assert_ne!(base, d(Path::Exact, [1, 1, 2, 1], &[1.0, -2.0]));
        assert_ne!(base, d(Path::Exact, [1, 1, 1, 2], &[1.0, 2.0]));
        let h = [half::f16::from_f32(1.0), half::f16::from_f32(-2.0)];
        assert_ne!(base, digest(Path::Exact, [1, 1, 1, 2], &h).unwrap());
    }

    #[test]
    fn a_shape_that_does_not_match_the_output_is_an_error() {
        for shape in [[1, 1, 1, 3], [1, 1, 1, 1], [usize::MAX, 2, 1, 1]] {
            let e = digest::<f32>(Path::Exact, shape, &[1.0, -2.0]).unwrap_err();
            assert!(
                matches!(
                    e,
                    Error::TensorLength {
                        tensor: TensorName::Out,
                        got: 2,
                        ..
                    }
                ),
                "{e}"
            );
        }
    }

    #[test]
    fn the_digest_of_a_strided_output_is_that_of_its_logical_elements() {
        use crate::problem::Shape;
        use crate::tensor::{Layout, gather, scatter};
        let p = Problem::builder(Shape::new(2, 3, 3, 4, 4, 5))
            .build()
            .unwrap();
        let dims = [2, 3, 4, 5];
        let logical: Vec<f32> = (0..120).map(|i| i as f32 * 0.5 - 7.0).collect();
        let want = digest(Path::Exact, dims, &logical).unwrap();
        for l in [Layout::bhsd(3, 4, 5), Layout::bshd(3, 4, 5).with_offset(3)] {
            let buf = scatter(&logical, dims, l, 130, f32::NAN);
            assert_eq!(gather(&buf, dims, l), logical);
            assert_eq!(
                digest_of(Path::Exact, &p, &Tensor::new(&buf, l)).unwrap(),
                want
            );
        }
    }
}
