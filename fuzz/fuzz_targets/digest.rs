//! Fuzz target `digest`: `detattn::digest` against an independent re-encoding of the format in
//! `src/digest.rs`'s module docs (header bytes assembled here, SHA-256 from `sha2` over them), or
//! a typed error when the shape does not fit the element count; and injectivity of that encoding:
//! every encoding is decoded back to the (path, dtype, shape, elements) it came from, and within
//! one fuzzing process no two different encodings may share a digest.

#![no_main]

use arbitrary::{Result, Unstructured};
use detattn::{DType, Element, Path, bf16, f16};
use libfuzzer_sys::fuzz_target;
use sha2::{Digest as _, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;

/// Digest → encoding, for the collision check; cleared when it grows past this many entries.
const SEEN_CAP: usize = 200_000;

fn seen() -> &'static Mutex<HashMap<[u8; 32], Vec<u8>>> {
    static S: std::sync::OnceLock<Mutex<HashMap<[u8; 32], Vec<u8>>>> = std::sync::OnceLock::new();
    S.get_or_init(|| Mutex::new(HashMap::new()))
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let _ = match u.int_in_range(0u8..=2) {
        Ok(0) => check::<f32>(&mut u),
        Ok(1) => check::<f16>(&mut u),
        Ok(_) => check::<bf16>(&mut u),
        Err(_) => Ok(()),
    };
});

/// The encoding, byte by byte from the table in src/digest.rs.
fn encode(path: u8, dtype: u8, shape: [u64; 4], elems: &[u32], width: usize) -> Vec<u8> {
    let mut e = Vec::new();
    e.extend_from_slice(b"detattn\0");
    e.extend_from_slice(&[1, 0, 0, 0]); // format version 1, u32 LE
    e.push(path);
    e.push(dtype);
    e.extend_from_slice(&[0, 0]);
    for d in shape {
        e.extend_from_slice(&d.to_le_bytes());
    }
    for &x in elems {
        e.extend_from_slice(&x.to_le_bytes()[..width]);
    }
    e
}

/// The inverse of [`encode`]; `None` for anything `encode` cannot produce.
fn decode(e: &[u8]) -> Option<(u8, u8, [u64; 4], Vec<u32>)> {
    if e.len() < 48 || &e[..8] != b"detattn\0" || e[8..12] != [1, 0, 0, 0] || e[14..16] != [0, 0] {
        return None;
    }
    let (path, dtype) = (e[12], e[13]);
    let width = match dtype {
        0 => 4,
        1 | 2 => 2,
        _ => return None,
    };
    let mut shape = [0u64; 4];
    for (i, s) in shape.iter_mut().enumerate() {
        *s = u64::from_le_bytes(e[16 + 8 * i..24 + 8 * i].try_into().ok()?);
    }
    let body = &e[48..];
    if !body.len().is_multiple_of(width) {
        return None;
    }
    let elems = body
        .chunks(width)
        .map(|c| {
            let mut b = [0u8; 4];
            b[..width].copy_from_slice(c);
            u32::from_le_bytes(b)
        })
        .collect();
    Some((path, dtype, shape, elems))
}

fn check<T: Element>(u: &mut Unstructured<'_>) -> Result<()> {
    let path = if u.arbitrary()? {
        Path::TensorCore
    } else {
        Path::Exact
    };
    // A shape and an element count that mostly agree (the digest is then defined) and sometimes
    // do not, or overflow (then it must be a typed error, never a digest).
    let mut shape = [0usize; 4];
    for s in shape.iter_mut() {
        *s = if u.ratio(1, 16)? {
            u.arbitrary()?
        } else {
            u.int_in_range(0..=9)?
        };
    }
    let product = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    let n = match product {
        Some(p) if p <= 4096 && u.ratio(7, 8)? => p,
        _ => u.int_in_range(0..=4096usize)?,
    };
    let mut raw = Vec::with_capacity(n);
    for _ in 0..n {
        if u.is_empty() {
            break;
        }
        raw.push(u.arbitrary::<u32>()?);
    }
    let (width, code, keep) = match T::DTYPE {
        DType::F32 => (4, 0u8, u32::MAX),
        DType::F16 => (2, 1, 0xFFFF),
        DType::Bf16 => (2, 2, 0xFFFF),
    };
    let elems: Vec<T> = raw.iter().map(|&b| T::from_bits_u32(b & keep)).collect();
    let bits: Vec<u32> = elems.iter().map(|x| x.to_bits_u32()).collect();
    assert!(
        bits.iter().zip(&raw).all(|(b, r)| *b == r & keep),
        "the raw encoding must survive"
    );

    let path_code = match path {
        Path::Exact => 0,
        Path::TensorCore => 1,
    };
    let shape64 = shape.map(|s| s as u64);
    let enc = encode(path_code, code, shape64, &bits, width);
    assert_eq!(enc.len(), 48 + width * bits.len(), "header is 48 bytes");
    assert_eq!(
        decode(&enc),
        Some((path_code, code, shape64, bits.clone())),
        "the encoding must decode to what was encoded (injectivity)"
    );

    let want: [u8; 32] = Sha256::digest(&enc).into();
    let got = match detattn::digest(path, shape, &elems) {
        Ok(g) => {
            assert_eq!(
                product,
                Some(elems.len()),
                "a digest of a shape that does not fit"
            );
            g
        }
        Err(e) => {
            assert_ne!(product, Some(elems.len()), "a fitting shape refused: {e}");
            assert!(
                matches!(e, detattn::Error::TensorLength { .. }),
                "wrong error for a shape that does not fit: {e:?}"
            );
            return Ok(());
        }
    };
    assert_eq!(got.0, want, "detattn::digest differs from the re-encoding");
    let hex: String = want.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(got.to_string(), hex, "Display must be lowercase hex");

    let mut seen = seen().lock().expect("not poisoned");
    if seen.len() >= SEEN_CAP {
        seen.clear();
    }
    if let Some(prev) = seen.insert(want, enc.clone()) {
        assert_eq!(prev, enc, "two different encodings share a digest");
    }
    Ok(())
}
