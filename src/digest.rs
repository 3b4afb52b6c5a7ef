//! Output digests (DESIGN.md §7): SHA-256 over a canonical encoding, printed as lowercase hex.
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
//! In Python, for a NumPy output `o` (f32 or f16; for bf16 pass the uint16 bit patterns):
//!
//! ```text
//! import hashlib, struct
//! h = hashlib.sha256(b"detattn\0" + struct.pack("<IBBH4Q", 1, path, dtype, 0, *o.shape))
//! h.update(o.astype(o.dtype.newbyteorder("<")).tobytes()); print(h.hexdigest())
//! ```

use crate::dtype::Element;
use crate::engine::Path;
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

/// Digest of an output of shape `[B, Hq, Sq, D]` computed on `path`.
pub fn digest<T: Element>(path: Path, shape: [usize; 4], out: &[T]) -> Digest {
    let mut hasher = Sha256::new();
    hasher.update(header::<T>(path, shape));
    let mut buf = Vec::with_capacity(4096 * 4);
    for chunk in out.chunks(4096) {
        buf.clear();
        for x in chunk {
            x.write_le(&mut buf);
        }
        hasher.update(&buf);
    }
    Digest(hasher.finalize().into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_answer_from_an_independent_encoder() {
        // The bytes were assembled by hand from the table above and hashed with Python's
        // hashlib (`python3 -c` in the commit that added this test): struct.pack("<IBBH4Q", 1,
        // 0, 0, 0, 1, 1, 1, 2) after b"detattn\0", then the f32s 1.0 and -2.0.
        let d = digest::<f32>(Path::Exact, [1, 1, 1, 2], &[1.0, -2.0]);
        assert_eq!(
            d.to_string(),
            include_str!("../tests/data/digest_kat.txt").trim()
        );
    }

    #[test]
    fn every_field_changes_the_digest() {
        let base = digest::<f32>(Path::Exact, [1, 1, 1, 2], &[1.0, -2.0]);
        assert_ne!(
            base,
            digest::<f32>(Path::TensorCore, [1, 1, 1, 2], &[1.0, -2.0])
        );
        assert_ne!(base, digest::<f32>(Path::Exact, [1, 1, 2, 1], &[1.0, -2.0]));
        assert_ne!(base, digest::<f32>(Path::Exact, [1, 1, 1, 2], &[1.0, 2.0]));
        let h = [half::f16::from_f32(1.0), half::f16::from_f32(-2.0)];
        assert_ne!(base, digest(Path::Exact, [1, 1, 1, 2], &h));
    }
}
