//! `tcharness exp2`: the software exp2 on the GPU against the same function on the CPU, over all
//! 2^32 inputs (a superset of what the TensorCore kernel can pass it: every f32 ≤ 1, and −inf);
//! `tcharness exp2-bound`: its error against the exact 2^x (CPU only);
//! `tcharness exp2-digest`: the CPU's SHA-256 over all 2^32 outputs (to compare across machines).

use crate::gpu::{Gpu, R, arg};
use rayon::prelude::*;
use sha2::{Digest, Sha256};
use tcmodel::exp2;

const CHUNKS: usize = 256; // chunk k = inputs [k·2^24, (k+1)·2^24)

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn canon(y: f32) -> u32 {
    if y.is_nan() { 0x7fff_ffff } else { y.to_bits() }
}

/// Which CPU function to hash: the shipped polynomial, the degree-3 one, or a planted fault (the
/// last bit of the degree-5 polynomial's top coefficient flipped) that the check must catch.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fun {
    Deg5,
    Deg3,
    Planted,
}

#[target_feature(enable = "fma")]
unsafe fn eval_fma(f: Fun, x: f32) -> f32 {
    eval(f, x)
}

#[inline(always)]
fn eval(f: Fun, x: f32) -> f32 {
    match f {
        Fun::Deg5 => exp2::exp2(x),
        Fun::Deg3 => exp2::exp2_with(x, &exp2::C3),
        Fun::Planted => {
            let mut c = exp2::C;
            c[5] = f32::from_bits(c[5].to_bits() ^ 1);
            exp2::exp2_with(x, &c)
        }
    }
}

fn have_fma() -> bool {
    std::is_x86_feature_detected!("fma")
}

fn cpu_eval(f: Fun, x: f32) -> f32 {
    if have_fma() {
        // SAFETY: the CPU supports FMA (checked); the function is otherwise safe. mul_add is
        // correctly rounded with or without the instruction, so the bits are the same either way.
        unsafe { eval_fma(f, x) }
    } else {
        eval(f, x)
    }
}

/// The 256 chunk sums as the GPU kernel `exp2_hash` computes them.
fn cpu_hashes(f: Fun) -> Vec<u64> {
    let per_block: Vec<(usize, u64)> = (0u32..65536)
        .into_par_iter()
        .map(|b| {
            let base = b << 16;
            let mut h = 0u64;
            for k in 0..65536u32 {
                let x = base + k;
                let y = cpu_eval(f, f32::from_bits(x));
                h = h.wrapping_add(splitmix64(((x as u64) << 32) | canon(y) as u64));
            }
            ((base >> 24) as usize, h)
        })
        .collect();
    let mut out = vec![0u64; CHUNKS];
    for (c, h) in per_block {
        out[c] = out[c].wrapping_add(h);
    }
    out
}

/// SHA-256 over the concatenated chunk digests, each chunk's digest over its 2^24 outputs as
/// little-endian bytes in input order (NaN outputs canonical). Also returns the chunk digests.
pub fn cpu_digest() -> (String, Vec<[u8; 32]>) {
    let chunks: Vec<[u8; 32]> = (0..CHUNKS as u32)
        .into_par_iter()
        .map(|c| {
            let mut h = Sha256::new();
            let mut buf = Vec::with_capacity(4 * 4096);
            for k in 0..(1u32 << 24) {
                let x = (c << 24) | k;
                buf.extend_from_slice(&canon(cpu_eval(Fun::Deg5, f32::from_bits(x))).to_le_bytes());
                if buf.len() == 4 * 4096 {
                    h.update(&buf);
                    buf.clear();
                }
            }
            h.update(&buf);
            h.finalize().into()
        })
        .collect();
    let mut all = Sha256::new();
    for d in &chunks {
        all.update(d);
    }
    (hex(&all.finalize()), chunks)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub fn digest_main() -> R<bool> {
    let t0 = std::time::Instant::now();
    let (d, _) = cpu_digest();
    println!(
        "exp2 (degree 5) CPU SHA-256 over all 2^32 outputs (per-chunk digests, then their digest): {d}  ({:.1} s)",
        t0.elapsed().as_secs_f64()
    );
    Ok(true)
}

/// Exhaustive error bound on the CPU: every f32 x in [−126, 1] (normal results), in ulps of the
/// exact 2^x; and the rcp over [2^-27, 2^25].
pub fn bound_main() -> R<bool> {
    let lo_neg = 0x8000_0000u32; // −0
    let hi_neg = (-126.0f32).to_bits();
    let hi_pos = 1.0f32.to_bits();
    let ulp_err = |x: f32, y: f32| -> f64 {
        let e = (x as f64).exp2();
        let ulp = 2f64.powi(e.log2().floor() as i32 - 23);
        (y as f64 - e).abs() / ulp
    };
    for (name, f) in [
        ("degree 5 (shipped)", Fun::Deg5),
        ("degree 3 (variant)", Fun::Deg3),
    ] {
        let t0 = std::time::Instant::now();
        let ranges: Vec<(u32, u32)> = {
            let mut v = Vec::new();
            let mut s = lo_neg;
            while s <= hi_neg {
                v.push((s, (s.saturating_add(1 << 20)).min(hi_neg + 1)));
                s = s.saturating_add(1 << 20);
            }
            let mut s = 0u32;
            while s <= hi_pos {
                v.push((s, (s + (1 << 20)).min(hi_pos + 1)));
                s += 1 << 20;
            }
            v
        };
        let (worst, wx, n) = ranges
            .par_iter()
            .map(|&(a, b)| {
                let (mut w, mut wx, mut n) = (0f64, 0u32, 0u64);
                for bits in a..b {
                    let x = f32::from_bits(bits);
                    let e = ulp_err(x, cpu_eval(f, x));
                    n += 1;
                    if e > w {
                        w = e;
                        wx = bits;
                    }
                }
                (w, wx, n)
            })
            .reduce(
                || (0.0, 0, 0),
                |p, q| {
                    if q.0 > p.0 {
                        (q.0, q.1, p.2 + q.2)
                    } else {
                        (p.0, p.1, p.2 + q.2)
                    }
                },
            );
        println!(
            "exp2 {name}: {n} inputs in [-126, 1], max error {worst:.4} ulp at x = {} ({:#010x}); {:.1} s",
            f32::from_bits(wx),
            wx,
            t0.elapsed().as_secs_f64()
        );
    }
    // rcp: relative error over every f32 in [2^-27, 2^25].
    let (a, b) = (2f32.powi(-27).to_bits(), 2f32.powi(25).to_bits());
    let worst = (a..b)
        .into_par_iter()
        .map(|bits| {
            let x = f32::from_bits(bits);
            let e = 1.0 / x as f64;
            let ulp = 2f64.powi(e.log2().floor() as i32 - 23);
            (exp2::rcp(x) as f64 - e).abs() / ulp
        })
        .reduce(|| 0.0, f64::max);
    println!("rcp: every f32 in [2^-27, 2^25): max error {worst:.4} ulp");
    Ok(true)
}

pub fn main(gpu: &Gpu, cubin: &[u8]) -> R<bool> {
    let m = gpu.load(cubin)?;
    let mut ok = true;
    // 1. Chunk sums over all 2^32 inputs, both polynomials, against the CPU's.
    for (deg, f) in [(5i32, Fun::Deg5), (3, Fun::Deg3)] {
        let t0 = std::time::Instant::now();
        let h = gpu.alloc(CHUNKS * 8)?;
        gpu.fill(&h, 0)?;
        let func = m.func("exp2_hash", 0)?;
        let (mut d, mut p) = (deg, h.ptr);
        gpu.launch(func, (65536, 1, 1), 256, 0, &mut [arg(&mut d), arg(&mut p)])?;
        let mut g = vec![0u64; CHUNKS];
        gpu.download(&h, &mut g)?;
        let tg = t0.elapsed().as_secs_f64();
        let c = cpu_hashes(f);
        let bad: Vec<usize> = (0..CHUNKS).filter(|&k| g[k] != c[k]).collect();
        ok &= bad.is_empty();
        println!(
            "exp2 degree {deg}: all 2^32 inputs, {CHUNKS} chunks of 2^24: GPU chunk sums == CPU chunk sums in {} of {CHUNKS} chunks{} (GPU {tg:.2} s, CPU {:.2} s)",
            CHUNKS - bad.len(),
            if bad.is_empty() {
                String::new()
            } else {
                format!("; DIFFER in chunks {bad:x?}")
            },
            t0.elapsed().as_secs_f64() - tg
        );
        if deg == 5 {
            // The check can fail: a CPU function with one coefficient bit flipped.
            let pl = cpu_hashes(Fun::Planted);
            let differ = (0..CHUNKS).filter(|&k| g[k] != pl[k]).count();
            // One ulp of the top coefficient moves p(r) by at most 2^-23 · C5 · r^5 ≈ 1e-11: only
            // some outputs change, so some chunks (first run: 25 of 256) must differ, not all.
            println!(
                "exp2 planted fault (last bit of C5 flipped on the CPU side): {differ} of {CHUNKS} chunks differ (must be > 0)"
            );
            ok &= differ > 0;
        }
    }
    // 2. Element-wise on a few chunks (the hash is not vacuous; NaN behaviour shown).
    let f = m.func("exp2_sw", 0)?;
    let n = 1u32 << 24;
    let buf = gpu.alloc(n as usize * 4)?;
    for chunk in [0x00u32, 0x3f, 0x80, 0xbf, 0xc2, 0xc3, 0x7f, 0xff] {
        let (mut s, mut nn, mut p) = (chunk << 24, n, buf.ptr);
        gpu.launch(
            f,
            (4096, 1, 1),
            256,
            0,
            &mut [arg(&mut s), arg(&mut nn), arg(&mut p)],
        )?;
        let mut g = vec![0u32; n as usize];
        gpu.download(&buf, &mut g)?;
        let (mut same, mut nan_both, mut differ) = (0u64, 0u64, 0u64);
        let mut first = None;
        for k in 0..n {
            let x = f32::from_bits((chunk << 24) | k);
            let y = cpu_eval(Fun::Deg5, x);
            let gy = g[k as usize];
            if y.to_bits() == gy {
                same += 1;
            } else if y.is_nan() && f32::from_bits(gy).is_nan() {
                nan_both += 1;
            } else {
                differ += 1;
                first.get_or_insert((x, y.to_bits(), gy));
            }
        }
        ok &= differ == 0;
        println!(
            "exp2 chunk {chunk:#04x}xxxxxx element-wise: {same} identical bits, {nan_both} NaN on both (payloads differ), {differ} different{}",
            first.map_or(String::new(), |(x, c, g)| format!(
                " (first: x={x:e} cpu={c:#010x} gpu={g:#010x})"
            ))
        );
    }
    // 2b. The CPU's SHA-256 over all outputs, on this machine's CPU: compare with the same
    //     digest computed on another machine (tcharness exp2-digest).
    let t0 = std::time::Instant::now();
    let (dg, _) = cpu_digest();
    println!(
        "exp2 (degree 5) CPU SHA-256 over all 2^32 outputs on this host: {dg} ({:.1} s)",
        t0.elapsed().as_secs_f64()
    );
    // 3. Against the hardware approximation ex2.approx.ftz.f32 over the kernel's domain [-126, 1].
    let st = gpu.alloc(4 * 8)?;
    gpu.fill(&st, 0)?;
    let f = m.func("exp2_vs_mufu", 0)?;
    for k in 0..16u32 {
        let (mut s, mut nn, mut p) = (k << 28, 1u32 << 28, st.ptr);
        gpu.launch(
            f,
            (132 * 16, 1, 1),
            256,
            0,
            &mut [arg(&mut s), arg(&mut nn), arg(&mut p)],
        )?;
    }
    let mut v = [0u64; 4];
    gpu.download(&st, &mut v)?;
    let worst = (v[2] >> 32) as u32;
    let wx = 0xffff_ffffu32 - (v[2] & 0xffff_ffff) as u32;
    println!(
        "exp2 (software) vs ex2.approx.ftz.f32 on [-126, 1]: {} of {} inputs give the same bits ({:.2}%), largest difference {worst} ulp (x = {:e})",
        v[0],
        v[1],
        100.0 * v[0] as f64 / v[1].max(1) as f64,
        f32::from_bits(wx)
    );
    Ok(ok)
}
