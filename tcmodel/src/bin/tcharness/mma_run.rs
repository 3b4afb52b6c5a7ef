//! `tcharness mma`: run mma.sync m16n8k16 and wgmma m64n8k16 (A from registers and from shared
//! memory) on every case class, both formats, and compare each output element with the CPU model
//! (and with the alternatives the hardware should rule out). Without a GPU (`--cpu-only`) the same
//! pipeline runs with the model standing in for the hardware, which checks the plumbing here.

use crate::gpu::{self, Gpu, R, arg};
use rayon::prelude::*;
use std::fmt::Write as _;
use std::io::Write as _;
use tcmodel::cases::{self, CLASSES, Class};
use tcmodel::mma::{self, H100, InType, Params, Raw, Rounding};

pub struct Opts {
    pub mma_log2: u32,
    pub wgmma_log2: u32,
    pub seed: u64,
    pub out: Option<std::path::PathBuf>,
    pub dump_cap: usize,
    pub cpu_only: bool,
    pub plant: bool,
    /// Which instructions: [0] mma.sync, [1] wgmma (run as separate processes on the GPU, so a
    /// fault in one cannot take the other's results with it).
    pub instrs: Vec<u32>,
}

/// Candidates evaluated on every case (cheap: they reuse the primary's fused sum, or recompute it
/// only where they can differ).
fn cheap_variants() -> Vec<(String, Params)> {
    let mut v = vec![
        (
            "overflow->FLT_MAX".to_string(),
            Params {
                overflow_inf: false,
                ..H100
            },
        ),
        (
            "exact zero: IEEE sign".to_string(),
            Params {
                zero_plus: false,
                ..H100
            },
        ),
        (
            "underflow keeps its sign (-0)".to_string(),
            Params {
                underflow_signed: true,
                ..H100
            },
        ),
        (
            "floor none".to_string(),
            Params {
                e_floor: i32::MIN,
                ..H100
            },
        ),
    ];
    for f in (-160..=-120).rev() {
        if f != H100.e_floor {
            v.push((format!("floor {f}"), Params { e_floor: f, ..H100 }));
        }
    }
    v
}

/// Candidates evaluated on the first eighth of each class's tiles (full recomputation).
fn subset_variants() -> Vec<(String, Params)> {
    vec![
        (
            "24 fraction bits".into(),
            Params {
                frac_bits: 24,
                ..H100
            },
        ),
        (
            "26 fraction bits".into(),
            Params {
                frac_bits: 26,
                ..H100
            },
        ),
        (
            "27 fraction bits".into(),
            Params {
                frac_bits: 27,
                ..H100
            },
        ),
        (
            "round to nearest".into(),
            Params {
                rounding: Rounding::Rne,
                ..H100
            },
        ),
        (
            "normalised product exponent".into(),
            Params {
                normalized_exp: true,
                ..H100
            },
        ),
        (
            "two blocks of 8 (A100-like)".into(),
            Params { block: 8, ..H100 },
        ),
    ]
}

/// The candidate's result, or `None` when it provably equals the model's (a different floor
/// changes nothing unless the largest term exponent lies below one of the two floors).
fn variant_result(t: InType, a: &[u16], b: &[u16], c: u32, raw0: Raw, p: &Params) -> Option<u32> {
    if p.e_floor != H100.e_floor {
        return match raw0 {
            Raw::Sum { e_max, .. } if e_max != i32::MIN && e_max < H100.e_floor.max(p.e_floor) => {
                Some(mma::finish(mma::fused(t, a, b, c, p), p))
            }
            _ => None,
        };
    }
    Some(mma::finish(raw0, p))
}

/// One mismatch, as written to the dump file (88 bytes, little-endian).
#[derive(Clone)]
struct Rec {
    dtype: u8,
    out: u8, // 0 mma, 1 wgmma A-in-registers, 2 wgmma A-in-shared, 3 mma in the wgmma kernel
    class: u8,
    tile: u32,
    i: u16,
    j: u16,
    a: [u16; 16],
    b: [u16; 16],
    c: u32,
    hw: u32,
    model: u32,
}

impl Rec {
    fn bytes(&self) -> Vec<u8> {
        let mut v = vec![self.dtype, self.out, self.class, 0];
        v.extend(self.tile.to_le_bytes());
        v.extend(self.i.to_le_bytes());
        v.extend(self.j.to_le_bytes());
        for x in self.a.iter().chain(&self.b) {
            v.extend(x.to_le_bytes());
        }
        v.extend(self.c.to_le_bytes());
        v.extend(self.hw.to_le_bytes());
        v.extend(self.model.to_le_bytes());
        v
    }
    fn show(&self) -> String {
        let hx = |v: &[u16]| {
            v.iter()
                .map(|x| format!("{x:04x}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        format!(
            "      tile {} ({},{}): a=[{}] b=[{}] c={:08x} hw={:08x} model={:08x} ({} vs {})",
            self.tile,
            self.i,
            self.j,
            hx(&self.a),
            hx(&self.b),
            self.c,
            self.hw,
            self.model,
            f32::from_bits(self.hw),
            f32::from_bits(self.model)
        )
    }
}

#[derive(Clone)]
struct Stats {
    n: u64,
    mism: Vec<u64>, // per hardware output
    cheap: Vec<u64>,
    subset_n: u64,
    subset: Vec<u64>,
    pos_mism: Vec<u64>,
    kinds: [u64; 6], // NaN, inf, +0, -0, subnormal, normal (of the first hardware output)
    hwhw: [u64; 3],  // wgmma: rs != mma, ss != mma, rs != ss
    recs: Vec<Rec>,
}

impl Stats {
    fn new(outs: usize, npos: usize, ncheap: usize, nsub: usize) -> Stats {
        Stats {
            n: 0,
            mism: vec![0; outs],
            cheap: vec![0; ncheap],
            subset_n: 0,
            subset: vec![0; nsub],
            pos_mism: vec![0; npos],
            kinds: [0; 6],
            hwhw: [0; 3],
            recs: Vec::new(),
        }
    }
    fn merge(mut self, o: Stats, cap: usize) -> Stats {
        self.n += o.n;
        self.subset_n += o.subset_n;
        for (x, y) in self.mism.iter_mut().zip(&o.mism) {
            *x += y;
        }
        for (x, y) in self.cheap.iter_mut().zip(&o.cheap) {
            *x += y;
        }
        for (x, y) in self.subset.iter_mut().zip(&o.subset) {
            *x += y;
        }
        for (x, y) in self.pos_mism.iter_mut().zip(&o.pos_mism) {
            *x += y;
        }
        for k in 0..6 {
            self.kinds[k] += o.kinds[k];
        }
        for k in 0..3 {
            self.hwhw[k] += o.hwhw[k];
        }
        let room = cap.saturating_sub(self.recs.len());
        self.recs.extend(o.recs.into_iter().take(room));
        self
    }
}

fn kind(x: u32) -> usize {
    let e = (x >> 23) & 0xff;
    let m = x & 0x7f_ffff;
    match (e, m) {
        (0xff, 0) => 1,
        (0xff, _) => 0,
        (0, 0) if x >> 31 == 0 => 2,
        (0, 0) => 3,
        (0, _) => 4,
        _ => 5,
    }
}

/// The hardware results of one (format, instruction, class) run: `outs[k][tile·M·8 + i·8 + j]`.
struct Run {
    t: InType,
    instr: u32, // 0 mma.sync, 1 wgmma kernel
    class: Class,
    m: usize,
    tiles: usize,
    a: Vec<u16>,
    bt: Vec<u16>,
    c: Vec<u32>,
    outs: Vec<Vec<u32>>,
}

fn generate(
    t: InType,
    instr: u32,
    class: Class,
    m: usize,
    tiles: usize,
    seed: u64,
) -> (Vec<u16>, Vec<u16>, Vec<u32>) {
    let mut a = vec![0u16; tiles * m * 16];
    let mut bt = vec![0u16; tiles * 128];
    let mut c = vec![0u32; tiles * m * 8];
    a.par_chunks_mut(m * 16)
        .zip(bt.par_chunks_mut(128))
        .zip(c.par_chunks_mut(m * 8))
        .enumerate()
        .for_each(|(ti, ((a, b), c))| {
            cases::tile(
                t,
                class,
                cases::tile_seed(seed, t, instr, class, ti as u64),
                m,
                a,
                b,
                c,
            )
        });
    (a, bt, c)
}

/// The model standing in for the hardware (`--cpu-only`); `--plant` makes that stand-in wrong
/// (26 fraction bits) so that the comparison, the printing and the dump can be seen to fail.
fn model_outputs(t: InType, m: usize, a: &[u16], bt: &[u16], c: &[u32], plant: bool) -> Vec<u32> {
    let p = if plant {
        Params {
            frac_bits: 26,
            ..H100
        }
    } else {
        H100
    };
    let tiles = bt.len() / 128;
    let mut d = vec![0u32; c.len()];
    d.par_chunks_mut(m * 8).enumerate().for_each(|(ti, d)| {
        for i in 0..m {
            for j in 0..8 {
                let ar = &a[(ti * m + i) * 16..][..16];
                let bc = &bt[ti * 128 + j * 16..][..16];
                d[i * 8 + j] = mma::mma_elem(t, ar, bc, c[(ti * m + i) * 8 + j], &p);
            }
        }
    });
    assert_eq!(tiles * m * 8, d.len());
    d
}

fn run_gpu(
    gpu: &Gpu,
    module: &gpu::Module,
    t: InType,
    instr: u32,
    a: &[u16],
    bt: &[u16],
    c: &[u32],
) -> R<Vec<Vec<u32>>> {
    let tiles = bt.len() / 128;
    let (da, db, dc) = (gpu.upload(a)?, gpu.upload(bt)?, gpu.upload(c)?);
    let nout = if instr == 0 { 1 } else { 3 };
    let outs: Vec<gpu::Buf> = (0..nout)
        .map(|_| gpu.alloc(c.len() * 4))
        .collect::<R<_>>()?;
    for o in &outs {
        // Poison: 0xFFFFFFFF is a NaN the tensor cores never write (theirs is 0x7FFFFFFF), so an
        // element the kernel failed to write shows up as a mismatch.
        gpu.fill(o, 0xff)?;
    }
    let (mut pa, mut pb, mut pc) = (da.ptr, db.ptr, dc.ptr);
    let mut pd: Vec<u64> = outs.iter().map(|o| o.ptr).collect();
    let mut nt = tiles as i32;
    let name = match (instr, t) {
        (0, InType::F16) => "mma_f16",
        (0, InType::Bf16) => "mma_bf16",
        (_, InType::F16) => "wgmma_f16",
        (_, InType::Bf16) => "wgmma_bf16",
    };
    let f = module.func(name, 0)?;
    if instr == 0 {
        // 4 warps per block, one tile per warp per iteration.
        let grid = (tiles as u32).div_ceil(4).min(8192);
        let mut args = [
            arg(&mut pa),
            arg(&mut pb),
            arg(&mut pc),
            arg(&mut pd[0]),
            arg(&mut nt),
        ];
        gpu.launch(f, (grid, 1, 1), 128, 0, &mut args)?;
    } else {
        let grid = (tiles as u32).min(132 * 8);
        let (mut d0, mut d1, mut d2) = (pd[0], pd[1], pd[2]);
        let mut args = [
            arg(&mut pa),
            arg(&mut pb),
            arg(&mut pc),
            arg(&mut d0),
            arg(&mut d1),
            arg(&mut d2),
            arg(&mut nt),
        ];
        gpu.launch(f, (grid, 1, 1), 128, 0, &mut args)?;
        pd.clear();
    }
    let mut res = Vec::new();
    for o in &outs {
        let mut v = vec![0u32; c.len()];
        gpu.download(o, &mut v)?;
        res.push(v);
    }
    Ok(res)
}

fn compare(run: &Run, cheap: &[(String, Params)], sub: &[(String, Params)], cap: usize) -> Stats {
    let (t, m) = (run.t, run.m);
    let npos = m / 16 * 128;
    let sub_tiles = (run.tiles / 8).max(1);
    (0..run.tiles)
        .into_par_iter()
        .fold(
            || Stats::new(run.outs.len(), npos, cheap.len(), sub.len()),
            |mut s, ti| {
                for i in 0..m {
                    for j in 0..8 {
                        let ar = &run.a[(ti * m + i) * 16..][..16];
                        let bc = &run.bt[ti * 128 + j * 16..][..16];
                        let idx = (ti * m + i) * 8 + j;
                        let c = run.c[idx];
                        let raw = mma::fused(t, ar, bc, c, &H100);
                        let model = mma::finish(raw, &H100);
                        let hw0 = run.outs[0][idx];
                        s.n += 1;
                        s.kinds[kind(hw0)] += 1;
                        // Position: warp (16-row slab), lane = (row % 8)·4 + col/2, register.
                        let lane = (i % 8) * 4 + j / 2;
                        let reg = ((i % 16) / 8) * 2 + j % 2;
                        let pos = (i / 16) * 128 + lane * 4 + reg;
                        for (k, out) in run.outs.iter().enumerate() {
                            if out[idx] != model {
                                s.mism[k] += 1;
                                s.pos_mism[pos] += 1;
                                if s.recs.len() < cap {
                                    s.recs.push(Rec {
                                        dtype: (t == InType::Bf16) as u8,
                                        out: if run.instr == 0 { 0 } else { 1 + k as u8 },
                                        class: run.class as u8,
                                        tile: ti as u32,
                                        i: i as u16,
                                        j: j as u16,
                                        a: ar.try_into().unwrap(),
                                        b: bc.try_into().unwrap(),
                                        c,
                                        hw: out[idx],
                                        model,
                                    });
                                }
                            }
                        }
                        if run.outs.len() == 3 {
                            let (rs, ss, mm) =
                                (run.outs[0][idx], run.outs[1][idx], run.outs[2][idx]);
                            s.hwhw[0] += (rs != mm) as u64;
                            s.hwhw[1] += (ss != mm) as u64;
                            s.hwhw[2] += (rs != ss) as u64;
                        }
                        for (v, (_, p)) in cheap.iter().enumerate() {
                            s.cheap[v] += (variant_result(t, ar, bc, c, raw, p).unwrap_or(model)
                                != hw0) as u64;
                        }
                        if ti < sub_tiles {
                            s.subset_n += 1;
                            for (v, (_, p)) in sub.iter().enumerate() {
                                s.subset[v] += (mma::mma_elem(t, ar, bc, c, p) != hw0) as u64;
                            }
                        }
                    }
                }
                s
            },
        )
        .reduce(
            || Stats::new(run.outs.len(), npos, cheap.len(), sub.len()),
            |x, y| x.merge(y, cap),
        )
}

pub fn main(gpu: Option<&Gpu>, cubin: Option<&[u8]>, o: &Opts) -> R<bool> {
    let module = match (gpu, cubin) {
        (Some(g), Some(c)) => Some(g.load(c)?),
        _ => None,
    };
    if module.is_none() && !o.cpu_only {
        return Err("no GPU (or no cubin): run with --cpu-only to exercise the pipeline with the model as the hardware".into());
    }
    let cheap = cheap_variants();
    let sub = subset_variants();
    let mut all_ok = true;
    let mut summary = String::new();
    for instr in o.instrs.iter().copied() {
        for t in [InType::F16, InType::Bf16] {
            let mut dump: Vec<u8> = Vec::new();
            let (m, log2) = if instr == 0 {
                (16, o.mma_log2)
            } else {
                (64, o.wgmma_log2)
            };
            let tiles = 1usize << log2;
            let iname = if instr == 0 {
                "mma.sync.m16n8k16"
            } else {
                "wgmma.m64n8k16"
            };
            let mut tot = Stats::new(
                if instr == 0 { 1 } else { 3 },
                m / 16 * 128,
                cheap.len(),
                sub.len(),
            );
            let t0 = std::time::Instant::now();
            for class in CLASSES {
                let (a, bt, c) = generate(t, instr, class, m, tiles, o.seed);
                let outs = match (gpu, &module) {
                    (Some(g), Some(md)) => run_gpu(g, md, t, instr, &a, &bt, &c)?,
                    _ => {
                        let d = model_outputs(t, m, &a, &bt, &c, o.plant);
                        if instr == 0 {
                            vec![d]
                        } else {
                            vec![d.clone(), d.clone(), d]
                        }
                    }
                };
                let run = Run {
                    t,
                    instr,
                    class,
                    m,
                    tiles,
                    a,
                    bt,
                    c,
                    outs,
                };
                let per_class_cap = o.dump_cap / (2 * CLASSES.len());
                let s = compare(&run, &cheap, &sub, per_class_cap);
                let k = s.kinds;
                let mism: u64 = s.mism.iter().sum();
                println!(
                    "{} {iname} {:<16} {:>9} cases  model mismatches {:>8}{}  hw: NaN {} inf {} +0 {} -0 {} subnormal {} normal {}",
                    t.name(),
                    class.name(),
                    s.n,
                    mism,
                    if instr == 1 {
                        format!(" (rs {} ss {} mma {})", s.mism[0], s.mism[1], s.mism[2])
                    } else {
                        String::new()
                    },
                    k[0],
                    k[1],
                    k[2],
                    k[3],
                    k[4],
                    k[5]
                );
                for r in s.recs.iter().take(3) {
                    println!("{}", r.show());
                }
                for r in &s.recs {
                    dump.extend(r.bytes());
                }
                tot = tot.merge(s, 0);
            }
            let mism: u64 = tot.mism.iter().sum();
            all_ok &= mism == 0;
            let covered = tot.pos_mism.len();
            let bad_pos = tot.pos_mism.iter().filter(|&&x| x > 0).count();
            let _ = writeln!(
                summary,
                "{} {iname}: {} cases ({} classes), model mismatches {} [{}]; positions {} (warps x lanes x regs) each {} cases, {} with a mismatch; {:.1} s",
                t.name(),
                tot.n,
                CLASSES.len(),
                mism,
                if instr == 1 {
                    format!(
                        "A-in-registers {}, A-in-shared {}, mma.sync on the same data {}; hw vs hw: rs!=mma {} ss!=mma {} rs!=ss {}",
                        tot.mism[0],
                        tot.mism[1],
                        tot.mism[2],
                        tot.hwhw[0],
                        tot.hwhw[1],
                        tot.hwhw[2]
                    )
                } else {
                    "mma.sync".into()
                },
                covered,
                tot.n / covered as u64,
                bad_pos,
                t0.elapsed().as_secs_f64()
            );
            let mut alt = String::new();
            for ((name, _), x) in cheap.iter().zip(&tot.cheap) {
                if name.starts_with("floor") {
                    continue;
                }
                let _ = write!(alt, "{name}: {x}; ");
            }
            // The floor sweep: report the floors that match best.
            let fl: Vec<(String, u64)> = cheap
                .iter()
                .zip(&tot.cheap)
                .filter(|((n, _), _)| n.starts_with("floor"))
                .map(|((n, _), x)| (n.clone(), *x))
                .collect();
            let best = fl.iter().map(|x| x.1).min().unwrap_or(0);
            let _ = write!(
                alt,
                "floor -133 (model): {}; floor none: {}; floor -126: {}; best other floor(s): {} with {}",
                tot.mism[0],
                fl.iter().find(|x| x.0 == "floor none").map_or(0, |x| x.1),
                fl.iter().find(|x| x.0 == "floor -126").map_or(0, |x| x.1),
                {
                    let b: Vec<&str> = fl
                        .iter()
                        .filter(|x| x.1 == best)
                        .map(|x| x.0.trim_start_matches("floor "))
                        .collect();
                    if b.len() > 6 {
                        format!("{} floors incl. {}", b.len(), b[..3].join(","))
                    } else {
                        b.join(",")
                    }
                },
                best
            );
            let _ = writeln!(
                summary,
                "   alternatives, mismatches over all {} cases: {alt}",
                tot.n
            );
            let mut sb = String::new();
            for ((name, _), x) in sub.iter().zip(&tot.subset) {
                let _ = write!(sb, "{name}: {x}; ");
            }
            let _ = writeln!(
                summary,
                "   alternatives on the first 1/8 of each class ({} cases): {sb}",
                tot.subset_n
            );
            if let Some(dir) = &o.out
                && !dump.is_empty()
            {
                let p = dir.join(format!(
                    "mismatch_{}_{}.bin",
                    t.name(),
                    if instr == 0 { "mma" } else { "wgmma" }
                ));
                std::fs::File::create(&p)
                    .and_then(|mut f| f.write_all(&dump))
                    .map_err(|e| format!("{}: {e}", p.display()))?;
                println!(
                    "wrote {} mismatch records to {}",
                    dump.len() / 88,
                    p.display()
                );
            }
        }
    }
    println!("\n== mma summary ==\n{summary}");
    Ok(all_ok)
}
