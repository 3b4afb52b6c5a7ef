//! `tcharness tc`: the shipped TensorCore prefill kernels and their software-exponent variants
//! (tcmodel/scripts/build_variants.py) on a few problems: accuracy against an f64 reference, run-
//! to-run bits, and — for the all-software variant `v2` — the CPU emulation of the kernel's
//! operation sequence (docs/tensorcore.md "The operation sequence", with the MMA model of
//! tcmodel::mma and the software functions of tcmodel::exp2), compared bit for bit.

use crate::gpu::{self, Gpu, R, arg};
use rayon::prelude::*;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use tcmodel::cases::Rng;
use tcmodel::exp2 as sw;
use tcmodel::mma::{self, H100, InType};
use tcmodel::reference::value;

#[derive(Clone, Copy, Debug)]
struct Prob {
    t: InType,
    d: usize,
    h: usize,
    sq: usize,
    skv: usize,
    causal: bool,
    amp: i32, // inputs uniform in [-2, 2) · 2^amp
    seed: u64,
}

fn problems() -> Vec<Prob> {
    vec![
        Prob {
            t: InType::Bf16,
            d: 128,
            h: 1,
            sq: 1024,
            skv: 1024,
            causal: true,
            amp: 0,
            seed: 1,
        },
        Prob {
            t: InType::Bf16,
            d: 128,
            h: 2,
            sq: 300,
            skv: 700,
            causal: false,
            amp: 0,
            seed: 2,
        },
        Prob {
            t: InType::F16,
            d: 64,
            h: 2,
            sq: 333,
            skv: 333,
            causal: true,
            amp: 0,
            seed: 3,
        },
        Prob {
            t: InType::F16,
            d: 128,
            h: 1,
            sq: 512,
            skv: 512,
            causal: false,
            amp: 0,
            seed: 4,
        },
        // Large magnitudes: step 0 (bf16 row scaling) and the scale cap at work.
        Prob {
            t: InType::Bf16,
            d: 128,
            h: 1,
            sq: 256,
            skv: 256,
            causal: true,
            amp: 40,
            seed: 5,
        },
        Prob {
            t: InType::Bf16,
            d: 256,
            h: 1,
            sq: 200,
            skv: 200,
            causal: true,
            amp: 0,
            seed: 6,
        },
    ]
}

/// Round a finite f64 to a format with `p` significand bits, min normal exponent `emin` and max
/// exponent `emax`, to nearest even, subnormals included; ±inf past the range.
fn rne(x: f64, p: i32, emin: i32, emax: i32) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let a = x.abs();
    let e = ((a.to_bits() >> 52) as i32 - 1023).max(emin);
    let q = 2f64.powi(e - (p - 1));
    let r = (a / q).round_ties_even() * q;
    let r = if r >= 2f64.powi(emax + 1) {
        f64::INFINITY
    } else {
        r
    };
    r.copysign(x)
}

/// Encode an f64 that is exactly representable in `t` (or ±inf).
fn enc(t: InType, v: f64) -> u16 {
    match t {
        InType::Bf16 => ((v as f32).to_bits() >> 16) as u16,
        InType::F16 => {
            let s = if v.is_sign_negative() { 0x8000u16 } else { 0 };
            let a = v.abs();
            if a.is_infinite() {
                return s | 0x7c00;
            }
            if a < 2f64.powi(-14) {
                return s | (a / 2f64.powi(-24)) as u16;
            }
            let e = (a.to_bits() >> 52) as i32 - 1023;
            let m = ((a / 2f64.powi(e) - 1.0) * 1024.0) as u16;
            s | (((e + 15) as u16) << 10) | m
        }
    }
}

/// f32 -> T to nearest even (the kernel's __floats2{half,bfloat16}2_rn).
fn to_t(t: InType, x: f32) -> u16 {
    match t {
        InType::Bf16 => enc(t, rne(x as f64, 8, -126, 127)),
        InType::F16 => enc(t, rne(x as f64, 11, -14, 15)),
    }
}

fn gen_inputs(p: &Prob) -> (Vec<u16>, Vec<u16>, Vec<u16>) {
    let mut r = Rng::new(p.seed);
    let mut one = |n: usize| -> Vec<u16> {
        (0..n)
            .map(|_| {
                let u = (r.next_u64() >> 11) as f64 / (1u64 << 53) as f64; // [0, 1)
                to_t(p.t, ((4.0 * u - 2.0) * 2f64.powi(p.amp)) as f32)
            })
            .collect()
    };
    let q = one(p.h * p.sq * p.d);
    let k = one(p.h * p.skv * p.d);
    let v = one(p.h * p.skv * p.d);
    (q, k, v)
}

fn scale(p: &Prob) -> f32 {
    1.0 / (p.d as f32).sqrt()
}

/// Exact attention in f64 from the 16-bit inputs: out[h][i][d].
fn reference(p: &Prob, q: &[u16], k: &[u16], v: &[u16]) -> Vec<f64> {
    let (d, sq, skv) = (p.d, p.sq, p.skv);
    let sc = scale(p) as f64;
    (0..p.h * sq)
        .into_par_iter()
        .flat_map_iter(|row| {
            let (h, i) = (row / sq, row % sq);
            let qr: Vec<f64> = (0..d).map(|x| value(p.t, q[row * d + x])).collect();
            let lim = if p.causal {
                (i + skv + 1).saturating_sub(sq).min(skv)
            } else {
                skv
            };
            let s: Vec<f64> = (0..lim)
                .map(|j| {
                    (0..d)
                        .map(|x| qr[x] * value(p.t, k[(h * skv + j) * d + x]))
                        .sum::<f64>()
                        * sc
                })
                .collect();
            let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
            let l: f64 = w.iter().sum();
            (0..d)
                .map(|x| {
                    if lim == 0 {
                        0.0
                    } else {
                        (0..lim)
                            .map(|j| w[j] * value(p.t, v[(h * skv + j) * d + x]))
                            .sum::<f64>()
                            / l
                    }
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

struct Cfg {
    bm: usize,
    threads: u32,
    smem: u32,
    bn: usize,
}

fn run_kernel(
    g: &Gpu,
    m: &gpu::Module,
    p: &Prob,
    q: &[u16],
    k: &[u16],
    v: &[u16],
) -> R<(Vec<u16>, Cfg)> {
    let c = m.constant_i32::<4>(&format!("tc_cfg_d{}", p.d))?;
    let cfg = Cfg {
        bm: c[0] as usize,
        threads: c[1] as u32,
        smem: c[2] as u32,
        bn: c[3] as usize,
    };
    let name = format!(
        "tc_fwd_{}_d{}{}",
        p.t.name(),
        p.d,
        if p.causal { "_causal" } else { "" }
    );
    let f = m.func(&name, cfg.smem)?;
    let (dq, dk, dv) = (g.upload(q)?, g.upload(k)?, g.upload(v)?);
    let o = g.alloc(q.len() * 2)?;
    g.fill(&o, 0xff)?; // poison: every element must be written
    let (mut pq, mut pk, mut pv, mut po) = (dq.ptr, dk.ptr, dv.ptr, o.ptr);
    let mut kvl: u64 = 0;
    let (mut b, mut hq, mut hkv, mut sq, mut skv) =
        (1i32, p.h as i32, p.h as i32, p.sq as i32, p.skv as i32);
    let mut sc = scale(p);
    let mut mask: u64 = 0;
    let (mut msb, mut msh, mut msq) = (0i64, 0i64, 0i64);
    let mut args = [
        arg(&mut pq),
        arg(&mut pk),
        arg(&mut pv),
        arg(&mut po),
        arg(&mut kvl),
        arg(&mut b),
        arg(&mut hq),
        arg(&mut hkv),
        arg(&mut sq),
        arg(&mut skv),
        arg(&mut sc),
        arg(&mut mask),
        arg(&mut msb),
        arg(&mut msh),
        arg(&mut msq),
    ];
    let grid = (p.sq.div_ceil(cfg.bm) as u32, p.h as u32, 1);
    g.launch(f, grid, cfg.threads, cfg.smem, &mut args)?;
    let mut out = vec![0u16; q.len()];
    g.download(&o, &mut out)?;
    Ok((out, cfg))
}

// ------------------------------------------------------------- CPU emulation of variant v2

/// Step 0 (bf16): the row scaled by 2^-sh in two exact-unless-subnormal bf16 steps, and sl2r.
// `max(..).min(..)` mirrors the kernel's fminf(fmaxf(..)) step for step.
#[allow(clippy::manual_clamp)]
fn scale_row(t: InType, row: &[u16], sl2: f32) -> (Vec<u16>, f32) {
    if t == InType::F16 {
        return (row.to_vec(), sl2);
    }
    let mag = row.iter().map(|&x| x & 0x7fff).max().unwrap_or(0) as i32;
    let e = (mag >> 7).max(1);
    let sh = e - 117;
    let a = sh >> 1; // arithmetic shift: floor
    let b = sh - a;
    let step = |x: u16, k: i32| -> u16 {
        // fma.rn.bf16x2(x, 2^-k, -0): the exact product rounded once to bf16.
        let v = value(t, x) * 2f64.powi(-k);
        let r = rne(v, 8, -126, 127);
        // A product that rounds to zero keeps its sign (x · 2^-k + (−0)).
        if r == 0.0 { x & 0x8000 } else { enc(t, r) }
    };
    let out = row.iter().map(|&x| step(step(x, a), b)).collect();
    let pow2 = |k: i32| f32::from_bits(((k + 127) as u32) << 23);
    let f = (sl2 * pow2(a)) * pow2(b);
    let sl2r = f.max(f32::MIN_POSITIVE).min(f32::MAX);
    (out, sl2r)
}

/// One output row of the v2 kernel: query row `i` of head `h`.
#[allow(clippy::too_many_arguments)]
fn emulate_row(
    p: &Prob,
    cfg: &Cfg,
    q: &[u16],
    k: &[u16],
    v: &[u16],
    h: usize,
    i: usize,
) -> Vec<u16> {
    let (t, d, sq, skv, bn) = (p.t, p.d, p.sq, p.skv, cfg.bn);
    let bias: f32 = if t == InType::Bf16 { -26.0 } else { 0.0 };
    let maxt: f32 = if t == InType::Bf16 {
        f32::from_bits(0x7f7f_0000)
    } else {
        65504.0
    };
    // The kernel's literal 1.4426950408889634f (0x3FB8AA3B).
    let sl2 = (scale(p) * f32::from_bits(0x3fb8_aa3b)).min(f32::MAX);
    let (qr, sl2r) = scale_row(t, &q[(h * sq + i) * d..][..d], sl2);
    let l_len = skv; // no kv_lens
    let q0 = (i / cfg.bm) * cfg.bm;
    // Keys [0, kv_end) can be visible to some row of this row's query tile (the kernel's tile
    // count, decided by the tile's last row: extra tiles are fully masked for earlier rows).
    let kv_end = if p.causal {
        (l_len as i64).min((q0 + cfg.bm).min(sq) as i64 - 1 + l_len as i64 - sq as i64 + 1)
    } else {
        l_len as i64
    };
    let ntiles = if kv_end > 0 {
        (kv_end as usize).div_ceil(bn)
    } else {
        0
    };
    let krow = |j: usize| -> &[u16] { &k[(h * skv + j) * d..][..d] };
    let zero_row = vec![0u16; d];
    let mut m = f32::NEG_INFINITY;
    let mut lq = [0f32; 4];
    let mut o = vec![0f32; d];
    for jt in 0..ntiles {
        let kbase = jt * bn;
        // S: for each key, the chain of MMAs over d in steps of 16 from +0. Keys past L are the
        // zero-filled rows of the tile.
        let mut s: Vec<f32> = (0..bn)
            .map(|c| {
                let col = kbase + c;
                let kr = if col < l_len {
                    krow(col)
                } else {
                    &zero_row[..]
                };
                let mut acc = 0u32;
                for kk in 0..d / 16 {
                    acc = mma::mma_elem(
                        t,
                        &qr[16 * kk..16 * kk + 16],
                        &kr[16 * kk..16 * kk + 16],
                        acc,
                        &H100,
                    );
                }
                f32::from_bits(acc)
            })
            .collect();
        let need_mask = kbase + bn > l_len
            || (p.causal && (kbase + bn - 1) as i64 > q0 as i64 + l_len as i64 - sq as i64);
        if need_mask {
            for (c, x) in s.iter_mut().enumerate() {
                let col = kbase + c;
                let masked = col >= l_len || (p.causal && col + sq > i + l_len);
                if masked {
                    *x = f32::NEG_INFINITY;
                }
            }
        }
        let m_old = m;
        let mx = s.iter().fold(m_old, |a, &b| a.max(b));
        m = mx;
        let mu = if mx == f32::NEG_INFINITY { 0.0 } else { mx };
        let sl2e = sl2r.min(sw::cap_pow2(mu));
        let nms = bias - mu * sl2e;
        let corr = sw::exp2((m_old - mu) * sl2e);
        let mut pv = vec![0f32; bn];
        for (c, &x) in s.iter().enumerate() {
            let mut pp = sw::exp2(x.mul_add(sl2e, nms));
            if need_mask && x == f32::NEG_INFINITY {
                pp = 0.0;
            }
            pv[c] = pp;
        }
        // Thread q of the quad holds columns nb·8 + 2q + e, summed in that order.
        for (qq, lqq) in lq.iter_mut().enumerate() {
            let mut rs = 0f32;
            for nb in 0..bn / 8 {
                for e in 0..2 {
                    rs += pv[nb * 8 + 2 * qq + e];
                }
            }
            *lqq = lqq.mul_add(corr, rs);
        }
        for x in o.iter_mut() {
            *x *= corr;
        }
        let pt: Vec<u16> = pv.iter().map(|&x| to_t(t, x)).collect();
        for (x, oc) in o.iter_mut().enumerate() {
            let mut acc = oc.to_bits();
            for kk in 0..bn / 16 {
                let mut vc = [0u16; 16];
                for (r, vv) in vc.iter_mut().enumerate() {
                    let key = kbase + 16 * kk + r;
                    *vv = if key < l_len {
                        v[(h * skv + key) * d + x]
                    } else {
                        0
                    };
                }
                acc = mma::mma_elem(t, &pt[16 * kk..16 * kk + 16], &vc, acc, &H100);
            }
            *oc = f32::from_bits(acc);
        }
    }
    let l = (lq[0] + lq[1]) + (lq[2] + lq[3]);
    let seen = l != 0.0;
    let inv = if seen { sw::rcp(l) } else { 0.0 };
    o.iter()
        .map(|&x| {
            if !seen {
                return 0u16;
            }
            let y = x * inv;
            // min.NaN / max.NaN clamp (f32::clamp also keeps a NaN a NaN).
            let y = y.clamp(-maxt, maxt);
            to_t(t, y)
        })
        .collect()
}

fn load_dir(g: &Gpu, dir: &Path) -> R<(gpu::Module, String)> {
    let file = dir.join("tensorcore.sm_90.cubin");
    let bytes = std::fs::read(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    let sums = std::fs::read_to_string(dir.join("SHA256SUMS"))
        .map_err(|e| format!("{}/SHA256SUMS: {e}", dir.display()))?;
    let hash: String = Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if !sums
        .lines()
        .any(|l| l.starts_with(&hash) && l.ends_with("tensorcore.sm_90.cubin"))
    {
        return Err(format!(
            "{}: SHA-256 {hash} is not in its SHA256SUMS",
            file.display()
        ));
    }
    Ok((g.load(&bytes)?, hash))
}

fn rel_l2(out: &[u16], t: InType, r: &[f64]) -> (f64, usize) {
    let (mut num, mut den, mut bad) = (0f64, 0f64, 0usize);
    for (&o, &x) in out.iter().zip(r) {
        let y = value(t, o);
        if !y.is_finite() {
            bad += 1;
            continue;
        }
        num += (y - x) * (y - x);
        den += x * x;
    }
    ((num / den.max(1e-300)).sqrt(), bad)
}

pub fn main(
    gpu: Option<&Gpu>,
    base: &Path,
    variants: &[(String, PathBuf)],
    cpu_only: bool,
) -> R<bool> {
    let mut ok = true;
    if cpu_only || gpu.is_none() {
        // Exercise the emulation here (no GPU): every problem's first rows, and timing.
        for p in problems() {
            let (q, k, v) = gen_inputs(&p);
            let cfg = Cfg {
                bm: if p.d == 256 { 64 } else { 128 },
                threads: 128,
                smem: 0,
                bn: if p.d == 256 { 32 } else { 64 },
            };
            let t0 = std::time::Instant::now();
            let rows = 16.min(p.sq);
            let emu: Vec<u16> = (p.sq - rows..p.sq)
                .into_par_iter()
                .flat_map_iter(|i| emulate_row(&p, &cfg, &q, &k, &v, 0, i))
                .collect();
            let r = reference(&Prob { h: 1, ..p }, &q, &k, &v);
            let rr = &r[(p.sq - rows) * p.d..p.sq * p.d];
            let (e, bad) = rel_l2(&emu, p.t, rr);
            println!(
                "{:?}: emulated the last {rows} rows in {:.2} s: rel L2 vs f64 {e:.2e}, non-finite {bad}",
                p,
                t0.elapsed().as_secs_f64()
            );
            ok &= bad == 0 && e < 1e-2;
        }
        return Ok(ok);
    }
    let g = gpu.unwrap();
    let (mbase, hbase) = load_dir(g, base)?;
    let mut mods = Vec::new();
    for (n, dir) in variants {
        let (m, h) = load_dir(g, dir)?;
        mods.push((n.clone(), m, h));
    }
    println!(
        "tc: baseline {} ({}); variants {}",
        base.display(),
        &hbase[..16],
        mods.iter()
            .map(|(n, _, h)| format!("{n} ({})", &h[..16]))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for p in problems() {
        let (q, k, v) = gen_inputs(&p);
        let r = reference(&p, &q, &k, &v);
        let (ob, cfg) = run_kernel(g, &mbase, &p, &q, &k, &v)?;
        let (eb, bb) = rel_l2(&ob, p.t, &r);
        let (ob2, _) = run_kernel(g, &mbase, &p, &q, &k, &v)?;
        println!(
            "{} d{} h{} sq{} skv{}{} amp{}: baseline rel L2 {eb:.3e}, non-finite {bb}, run-to-run {}",
            p.t.name(),
            p.d,
            p.h,
            p.sq,
            p.skv,
            if p.causal { " causal" } else { "" },
            p.amp,
            if ob == ob2 { "identical" } else { "DIFFERENT" }
        );
        ok &= bb == 0 && ob == ob2;
        for (n, m, _) in &mods {
            let (ov, _) = run_kernel(g, m, &p, &q, &k, &v)?;
            let (ev, bv) = rel_l2(&ov, p.t, &r);
            let (ov2, _) = run_kernel(g, m, &p, &q, &k, &v)?;
            let same = ov.iter().zip(&ob).filter(|(a, b)| a == b).count();
            let maxd = ov
                .iter()
                .zip(&ob)
                .map(|(&a, &b)| (value(p.t, a) - value(p.t, b)).abs())
                .fold(0.0, f64::max);
            let mut line = format!(
                "    {n}: rel L2 {ev:.3e}, non-finite {bv}, run-to-run {}, {:.1}% of outputs bit-equal to baseline, max |diff| {maxd:.2e}",
                if ov == ov2 { "identical" } else { "DIFFERENT" },
                100.0 * same as f64 / ob.len() as f64
            );
            ok &= bv == 0 && ov == ov2 && ev < if p.t == InType::Bf16 { 1e-2 } else { 2e-3 };
            if n == "v2" {
                // The CPU emulation, every row, bit for bit.
                let t0 = std::time::Instant::now();
                let emu: Vec<u16> = (0..p.h * p.sq)
                    .into_par_iter()
                    .flat_map_iter(|row| emulate_row(&p, &cfg, &q, &k, &v, row / p.sq, row % p.sq))
                    .collect();
                let differ: Vec<usize> = (0..emu.len()).filter(|&x| emu[x] != ov[x]).collect();
                line += &format!(
                    "; CPU emulation of v2: {} of {} outputs bit-identical ({:.1} s){}",
                    emu.len() - differ.len(),
                    emu.len(),
                    t0.elapsed().as_secs_f64(),
                    differ.first().map_or(String::new(), |&x| format!(
                        " FIRST DIFFERENCE at head {} row {} col {}: gpu {:04x} cpu {:04x}",
                        x / p.d / p.sq,
                        x / p.d % p.sq,
                        x % p.d,
                        ov[x],
                        emu[x]
                    ))
                );
                ok &= differ.is_empty();
            }
            println!("{line}");
        }
    }
    Ok(ok)
}
