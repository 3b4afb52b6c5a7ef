//! `detattn-dudect`: a dudect-style constant-time test of the `Exact` path (DESIGN.md §5).
//!
//! For each input class (zeros, subnormals, huge, non-finite, one-hot peaked scores, all masked,
//! all attending)
//! it times one call on a small fixed problem many times, **interleaved** with calls on a random
//! baseline — the class of each measurement is drawn at random, as dudect does, so drifts of the
//! machine (frequency, other load) fall on both classes alike — and compares the two samples with
//! Welch's t-test: on all measurements, and — as dudect does — on the measurements below each of
//! a few percentiles of the two classes pooled (cropping the long upper tail of interrupts and
//! preemptions, which on a loaded machine drowns the raw test). The verdict, like dudect's, takes
//! the largest |t| of these tests: below 4.5 passes (dudect's threshold). Both the raw t and the
//! largest cropped t are reported, and an A/A control (the baseline against itself) shows what
//! noise alone gives.
//!
//! Timers: on the CPU, `std::time::Instant` (nanoseconds) around one `Engine::run_into` on a
//! single-threaded engine; with `--backend cuda`, CUDA events around one launch
//! (`CudaBackend::time_launch`, device-resident inputs). Inputs are copied into the same buffers
//! before every measurement (outside the timed region), so every class runs at the same addresses
//! with the same cache state.
//!
//! Every class runs under `NonFinitePolicy::Propagate`, so that non-finite input is computed on
//! (under the default `Reject`, it is refused before any work: that it existed is public by
//! design, see docs/threat-model.md).
//!
//! Kernels (`--kernel`): `library` (the default) times the library. The others time the
//! harness's own copy of the CPU tile loop (`tile_copy.rs`), never part of the library:
//! `copy` (operation for operation, so it reproduces the library's timing), `copy-hardened`
//! (with the fixes for the leaks this harness found in the library) and `leaky` (or `--leaky`:
//! the hardened copy plus two planted data-dependent shortcuts, to show the harness detects a
//! leak). All three give the library's bits, checked before measuring.

mod classes;
mod tile_copy;
mod welch;

use clap::{Parser, ValueEnum};
use classes::{Class, InputSet};
use detattn::inputs::SplitMix64;
use detattn::{Engine, MaskLayout, NonFinitePolicy, Problem, Shape};
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Instant;
use welch::{Moments, cropped_t, welch_t};

/// dudect's threshold: |t| above it is evidence of a timing difference.
const T_PASS: f64 = 4.5;
/// What the planted leak must reach (issue 4).
const T_LEAK: f64 = 10.0;
/// Percentiles at which the cropped tests cut the pooled samples.
const CROPS: [f64; 5] = [0.5, 0.75, 0.9, 0.95, 0.99];

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Kernel {
    /// The library (`Engine::run_into`, or the CUDA kernel with `--backend cuda`).
    Library,
    /// The harness's copy of the CPU tile loop, operation for operation (reproduces the
    /// library's timing).
    Copy,
    /// The hardened copy plus planted data-dependent shortcuts (must be detected).
    Leaky,
    /// The copy hardened against the leaks found in the library (same bits; a candidate fix,
    /// see `tile_copy::Variant::Hardened`).
    CopyHardened,
}

/// Welch's t-test between input classes, interleaved measurements (dudect).
#[derive(Parser, Debug)]
#[command(name = "detattn-dudect", version)]
struct Args {
    /// Measurements per class.
    #[arg(long, default_value_t = 10_000)]
    n: usize,
    /// `cpu`, or `cuda` / `cuda:N` (needs the `cuda` feature and a GPU).
    #[arg(long, default_value = "cpu")]
    backend: String,
    /// What to time.
    #[arg(long, value_enum, default_value_t = Kernel::Library)]
    kernel: Kernel,
    /// Same as `--kernel leaky`.
    #[arg(long)]
    leaky: bool,
    /// Classes to test, comma separated (default: all). Baselines are always measured.
    #[arg(long, value_delimiter = ',')]
    classes: Option<Vec<Class>>,
    /// CPU threads of the engine.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Seed of the inputs and of the measurement order.
    #[arg(long, default_value_t = 0x5EED)]
    seed: u64,
    /// Untimed calls first (caches, frequency, page faults).
    #[arg(long, default_value_t = 500)]
    warmup: usize,
    /// Input sets per class, one drawn at random for each measurement.
    #[arg(long, default_value_t = 16)]
    pool: usize,
    /// Batch.
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// Query heads (= KV heads).
    #[arg(long, default_value_t = 2)]
    heads: usize,
    /// Query length.
    #[arg(long, default_value_t = 64)]
    q_len: usize,
    /// Key length (128: two tiles, so the rescale between tiles is exercised).
    #[arg(long, default_value_t = 128)]
    kv_len: usize,
    /// Head dimension.
    #[arg(long, default_value_t = 64)]
    head_dim: usize,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
    /// Succeed iff some class reaches max |t| > 10 (for the planted leak); default: succeed iff
    /// every class has max |t| < 4.5 (max over the raw and the cropped tests).
    #[arg(long)]
    expect_leak: bool,
}

/// The two problems: the value classes run on `plain`, the mask classes on `masked` (same
/// shapes plus a full `[B, Hq, Sq, Skv]` mask).
struct Setup {
    plain: Problem,
    masked: Problem,
    pools: BTreeMap<&'static str, Vec<InputSet>>,
}

impl Setup {
    fn new(a: &Args, classes: &[Class]) -> Result<Setup, String> {
        let shape = Shape::new(a.batch, a.heads, a.heads, a.q_len, a.kv_len, a.head_dim);
        let build = |mask: bool| {
            let b = Problem::builder(shape).nonfinite(NonFinitePolicy::Propagate);
            let b = if mask { b.mask(MaskLayout::FULL) } else { b };
            b.build().map_err(|e| e.to_string())
        };
        let (plain, masked) = (build(false)?, build(true)?);
        let maskn = masked.mask_dims().iter().product();
        let mut g = SplitMix64::new(a.seed);
        let mut pools = BTreeMap::new();
        for &c in classes {
            let sets = (0..a.pool.max(1))
                .map(|_| {
                    classes::generate(
                        c,
                        &mut g,
                        shape.q_elems(),
                        shape.kv_elems(),
                        maskn,
                        (a.batch * a.heads, a.kv_len, a.head_dim),
                    )
                })
                .collect();
            pools.insert(c.name(), sets);
        }
        Ok(Setup {
            plain,
            masked,
            pools,
        })
    }

    fn problem(&self, c: Class) -> &Problem {
        if c.masked() {
            &self.masked
        } else {
            &self.plain
        }
    }
}

/// Something that can time one call on one input set.
trait Timer {
    /// Nanoseconds of one call on set `set` of class `c`.
    fn measure(&mut self, c: Class, set: usize) -> Result<f64, String>;
    /// What is timed, for the report.
    fn describe(&self) -> String;
}

struct CpuTimer<'a> {
    setup: &'a Setup,
    engine: Engine,
    kernel: Kernel,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    mask: Vec<bool>,
    out: Vec<f32>,
}

impl<'a> CpuTimer<'a> {
    fn new(setup: &'a Setup, threads: usize, kernel: Kernel) -> Result<Self, String> {
        let s = setup.plain.shape();
        Ok(CpuTimer {
            setup,
            engine: Engine::cpu_with_threads(threads).map_err(|e| e.to_string())?,
            kernel,
            q: vec![0.0; s.q_elems()],
            k: vec![0.0; s.kv_elems()],
            v: vec![0.0; s.kv_elems()],
            mask: vec![false; setup.masked.mask_dims().iter().product()],
            out: vec![0.0; s.q_elems()],
        })
    }

    /// Copy a set into the fixed buffers (untimed).
    fn load(&mut self, c: Class, set: usize) {
        let s = &self.setup.pools[c.name()][set];
        self.q.copy_from_slice(&s.q);
        self.k.copy_from_slice(&s.k);
        self.v.copy_from_slice(&s.v);
        if let Some(m) = &s.mask {
            self.mask.copy_from_slice(m);
        }
    }

    /// One call on the loaded buffers.
    fn call(&mut self, c: Class, kernel: Kernel) -> Result<(), String> {
        let p = self.setup.problem(c);
        let mask = c.masked().then_some(&self.mask[..]);
        match kernel {
            Kernel::Library => self
                .engine
                .run_into(p, &self.q, &self.k, &self.v, mask, &mut self.out)
                .map_err(|e| e.to_string()),
            Kernel::Copy | Kernel::Leaky | Kernel::CopyHardened => {
                let variant = match kernel {
                    Kernel::Leaky => tile_copy::Variant::Leaky,
                    Kernel::CopyHardened => tile_copy::Variant::Hardened,
                    _ => tile_copy::Variant::Faithful,
                };
                tile_copy::run(p, &self.q, &self.k, &self.v, mask, &mut self.out, variant);
                Ok(())
            }
        }
    }

    /// The copy must give the library's bits on every class (else it would not be a copy, and
    /// a difference in time could come from elsewhere than the planted shortcuts).
    fn check_copy_is_faithful(&mut self, classes: &[Class]) -> Result<(), String> {
        for &c in classes {
            self.load(c, 0);
            self.call(c, Kernel::Library)?;
            let want: Vec<u32> = self.out.iter().map(|x| x.to_bits()).collect();
            for kernel in [Kernel::Copy, Kernel::Leaky, Kernel::CopyHardened] {
                self.out.iter_mut().for_each(|x| *x = 0.0);
                self.call(c, kernel)?;
                if self
                    .out
                    .iter()
                    .map(|x| x.to_bits())
                    .ne(want.iter().copied())
                {
                    return Err(format!(
                        "the harness's {kernel:?} tile loop differs from the library on class {}",
                        c.name()
                    ));
                }
            }
        }
        Ok(())
    }
}

impl Timer for CpuTimer<'_> {
    fn measure(&mut self, c: Class, set: usize) -> Result<f64, String> {
        self.load(c, set);
        let t0 = Instant::now();
        let r = self.call(c, self.kernel);
        let dt = t0.elapsed();
        std::hint::black_box(&self.out);
        r.map(|()| dt.as_nanos() as f64)
    }

    fn describe(&self) -> String {
        format!(
            "{} (kernel: {}), timer std::time::Instant (ns)",
            self.engine.describe(),
            match self.kernel {
                Kernel::Library => "library Engine::run_into",
                Kernel::Copy => "harness copy of the tile loop, no shortcut",
                Kernel::Leaky => "harness copy of the tile loop WITH PLANTED LEAKS",
                Kernel::CopyHardened =>
                    "harness copy of the tile loop, hardened (fma products, hidden masks)",
            }
        )
    }
}

#[cfg(feature = "cuda")]
mod gpu {
    //! `--backend cuda`: CUDA events around one launch (`CudaBackend::time_launch`).

    use super::{Class, Setup, Timer};
    use detattn::cuda::{CudaSlice, CudaStream};
    use detattn::{Backend, Engine, Path};
    use std::collections::BTreeMap;
    use std::sync::Arc;

    type DevSet = (
        CudaSlice<f32>,
        CudaSlice<f32>,
        CudaSlice<f32>,
        Option<CudaSlice<u8>>,
    );

    pub struct GpuTimer<'a> {
        setup: &'a Setup,
        engine: Engine,
        stream: Arc<CudaStream>,
        sets: BTreeMap<&'static str, Vec<DevSet>>,
        q: CudaSlice<f32>,
        k: CudaSlice<f32>,
        v: CudaSlice<f32>,
        mask: CudaSlice<u8>,
        out: CudaSlice<f32>,
    }

    fn err(e: impl std::fmt::Display) -> String {
        e.to_string()
    }

    impl<'a> GpuTimer<'a> {
        pub fn new(setup: &'a Setup, ordinal: usize) -> Result<Self, String> {
            let engine = Engine::new(Backend::Cuda(ordinal), Path::Exact).map_err(err)?;
            let cb = engine.cuda().ok_or("not a CUDA engine")?;
            let stream = cb.stream();
            let mut sets = BTreeMap::new();
            for (name, pool) in &setup.pools {
                let mut dev = Vec::new();
                for s in pool {
                    let m = match &s.mask {
                        Some(m) => {
                            let bytes: Vec<u8> = m.iter().map(|&b| u8::from(b)).collect();
                            Some(stream.clone_htod(&bytes).map_err(err)?)
                        }
                        None => None,
                    };
                    dev.push((
                        stream.clone_htod(&s.q).map_err(err)?,
                        stream.clone_htod(&s.k).map_err(err)?,
                        stream.clone_htod(&s.v).map_err(err)?,
                        m,
                    ));
                }
                sets.insert(*name, dev);
            }
            let sh = setup.plain.shape();
            let mn: usize = setup.masked.mask_dims().iter().product();
            let q = stream.alloc_zeros::<f32>(sh.q_elems()).map_err(err)?;
            let k = stream.alloc_zeros::<f32>(sh.kv_elems()).map_err(err)?;
            let v = stream.alloc_zeros::<f32>(sh.kv_elems()).map_err(err)?;
            let mask = stream.alloc_zeros::<u8>(mn).map_err(err)?;
            let out = stream.alloc_zeros::<f32>(sh.q_elems()).map_err(err)?;
            Ok(GpuTimer {
                setup,
                engine,
                stream,
                sets,
                q,
                k,
                v,
                mask,
                out,
            })
        }
    }

    impl Timer for GpuTimer<'_> {
        fn measure(&mut self, c: Class, set: usize) -> Result<f64, String> {
            let (q, k, v, m) = &self.sets[c.name()][set];
            // Into the same device buffers every time (untimed; the stream orders it before
            // the launch's first event).
            self.stream.memcpy_dtod(q, &mut self.q).map_err(err)?;
            self.stream.memcpy_dtod(k, &mut self.k).map_err(err)?;
            self.stream.memcpy_dtod(v, &mut self.v).map_err(err)?;
            if let Some(m) = m {
                self.stream.memcpy_dtod(m, &mut self.mask).map_err(err)?;
            }
            let cb = self.engine.cuda().ok_or("not a CUDA engine")?;
            let p = self.setup.problem(c);
            let mask = c.masked().then_some(&self.mask);
            let us = cb
                .time_launch(
                    &self.stream,
                    p,
                    &self.q,
                    &self.k,
                    &self.v,
                    mask,
                    &mut self.out,
                )
                .map_err(err)?;
            Ok(f64::from(us) * 1000.0)
        }

        fn describe(&self) -> String {
            format!(
                "{} (kernel: library, CudaBackend::time_launch), timer CUDA events (µs, reported in ns)",
                self.engine.describe()
            )
        }
    }
}

/// One class's result.
struct Row {
    /// max(|t|, every cropped |t|): the statistic of the verdict, as dudect reports it.
    t_max: f64,
    class: Class,
    base: Class,
    n: usize,
    mean: f64,
    base_mean: f64,
    t: f64,
    crops: Vec<(f64, f64)>,
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

fn main() -> ExitCode {
    let mut a = Args::parse();
    if a.leaky {
        a.kernel = Kernel::Leaky;
    }
    match run(&a) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("detattn-dudect: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(a: &Args) -> Result<ExitCode, String> {
    if a.n < 2 {
        return Err("--n must be at least 2".into());
    }
    let mut tested: Vec<Class> = a
        .classes
        .clone()
        .unwrap_or_else(|| Class::ALL.to_vec())
        .into_iter()
        .filter(|c| c.baseline().is_some())
        .collect();
    tested.dedup();
    let mut all: Vec<Class> = Vec::new();
    for c in &tested {
        for x in [c.baseline().expect("tested classes have one"), *c] {
            if !all.contains(&x) {
                all.push(x);
            }
        }
    }
    let setup = Setup::new(a, &all)?;

    let mut timer: Box<dyn Timer + '_> = match a.backend.as_str() {
        "cpu" => {
            let mut t = CpuTimer::new(&setup, a.threads, a.kernel)?;
            if a.kernel != Kernel::Library {
                t.check_copy_is_faithful(&all)?;
            }
            Box::new(t)
        }
        b if b == "cuda" || b.starts_with("cuda:") => gpu_timer(&setup, b, a.kernel)?,
        b => {
            return Err(format!(
                "unknown backend {b:?}: expected cpu, cuda or cuda:N"
            ));
        }
    };

    // The measurement order: n of each class, shuffled (Fisher–Yates), then a random set each.
    let mut g = SplitMix64::new(a.seed ^ 0x0D0D_ECAF);
    let mut order: Vec<Class> = all.iter().flat_map(|&c| vec![c; a.n]).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, (g.next_u64() % (i as u64 + 1)) as usize);
    }
    let pool = a.pool.max(1) as u64;
    for i in 0..a.warmup {
        timer.measure(all[i % all.len()], 0)?;
    }
    let started = Instant::now();
    let mut samples: BTreeMap<&'static str, Vec<f64>> = BTreeMap::new();
    for &c in &order {
        let set = (g.next_u64() % pool) as usize;
        let ns = timer.measure(c, set)?;
        samples.entry(c.name()).or_default().push(ns);
    }
    let elapsed = started.elapsed().as_secs_f64();

    let mut rows: Vec<Row> = Vec::new();
    // A/A control: the baseline against itself (even vs odd measurements): must pass.
    let aa_class = if samples.contains_key(Class::Random.name()) {
        Class::Random
    } else {
        Class::RandomMask
    };
    let base = &samples[aa_class.name()];
    let (even, odd): (Vec<f64>, Vec<f64>) = (
        base.iter().step_by(2).copied().collect(),
        base.iter().skip(1).step_by(2).copied().collect(),
    );
    let aa = (
        Moments::of(&even),
        Moments::of(&odd),
        cropped_t(&even, &odd, &CROPS),
    );
    for &c in &tested {
        let b = c.baseline().expect("tested classes have one");
        let (xs, ys) = (&samples[c.name()], &samples[b.name()]);
        let (mx, my) = (Moments::of(xs), Moments::of(ys));
        rows.push(Row {
            class: c,
            base: b,
            n: xs.len(),
            mean: mx.mean,
            base_mean: my.mean,
            t: welch_t(&mx, &my),
            crops: cropped_t(xs, ys, &CROPS),
            t_max: 0.0,
        });
        let r = rows.last_mut().expect("just pushed");
        r.t_max = r.crops.iter().fold(r.t.abs(), |m, (_, t)| m.max(t.abs()));
    }

    let max_crop = |crops: &[(f64, f64)]| {
        crops
            .iter()
            .copied()
            .max_by(|x, y| x.1.abs().total_cmp(&y.1.abs()))
            .unwrap_or((0.0, 0.0))
    };
    let all_pass = rows.iter().all(|r| r.t_max < T_PASS);
    let leak_found = rows.iter().any(|r| r.t_max > T_LEAK);
    let ok = if a.expect_leak { leak_found } else { all_pass };
    let s = setup.plain.shape();
    let problem = format!(
        "B={} Hq={} Hkv={} Sq={} Skv={} D={} f32, NonFinitePolicy::Propagate, mask classes with a [B,Hq,Sq,Skv] mask",
        s.batch, s.q_heads, s.kv_heads, s.q_len, s.kv_len, s.head_dim
    );
    let unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());

    if a.json {
        let j = serde_json::json!({
            "tool": "detattn-dudect",
            "unix_time": unix,
            "cpu_model": cpu_model(),
            "backend": timer.describe(),
            "problem": problem,
            "n_per_class": a.n,
            "seed": a.seed,
            "seconds": elapsed,
            "threshold": T_PASS,
            "expect_leak": a.expect_leak,
            "aa_control": {
                "class": aa_class.name(),
                "t": welch_t(&aa.0, &aa.1),
                "cropped_max": max_crop(&aa.2).1,
            },
            "classes": rows.iter().map(|r| serde_json::json!({
                "class": r.class.name(),
                "baseline": r.base.name(),
                "n": r.n,
                "mean_ns": r.mean,
                "baseline_mean_ns": r.base_mean,
                "t": r.t,
                "cropped": r.crops.iter().map(|(p, t)| serde_json::json!({"percentile": p, "t": t})).collect::<Vec<_>>(),
                "t_max": r.t_max,
                "pass": r.t_max < T_PASS,
            })).collect::<Vec<_>>(),
            "ok": ok,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&j).map_err(|e| e.to_string())?
        );
    } else {
        println!("detattn-dudect  {}", timer.describe());
        println!("  cpu: {}   unix time {unix}", cpu_model());
        println!("  problem: {problem}");
        println!(
            "  {} measurements per class, interleaved in random order (seed {:#x}), {:.1} s",
            a.n, a.seed, elapsed
        );
        println!(
            "  {:<16} {:<12} {:>7} {:>12} {:>12} {:>8} {:>18}  verdict (max |t| < {T_PASS})",
            "class", "vs", "n", "mean ns", "base ns", "t", "cropped max |t|"
        );
        let (p, t) = max_crop(&aa.2);
        println!(
            "  {:<16} {:<12} {:>7} {:>12.0} {:>12.0} {:>8.2} {:>11.2} @p{:<4}  control",
            format!("{}(A/A)", aa_class.name()),
            aa_class.name(),
            aa.0.n,
            aa.0.mean,
            aa.1.mean,
            welch_t(&aa.0, &aa.1),
            t.abs(),
            (p * 100.0).round(),
        );
        for r in &rows {
            let (p, t) = max_crop(&r.crops);
            println!(
                "  {:<16} {:<12} {:>7} {:>12.0} {:>12.0} {:>8.2} {:>11.2} @p{:<4}  {}",
                r.class.name(),
                r.base.name(),
                r.n,
                r.mean,
                r.base_mean,
                r.t,
                t.abs(),
                (p * 100.0).round(),
                if r.t_max < T_PASS { "PASS" } else { "FAIL" }
            );
        }
        println!(
            "  result: {}",
            match (a.expect_leak, ok) {
                (false, true) => "every class max |t| < 4.5: no timing difference detected",
                (false, false) => "TIMING DIFFERENCE DETECTED (some class max |t| >= 4.5)",
                (true, true) => "planted leak detected (some class max |t| > 10), as expected",
                (true, false) => "planted leak NOT detected: the harness lacks power",
            }
        );
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

#[cfg(feature = "cuda")]
fn gpu_timer<'a>(setup: &'a Setup, b: &str, kernel: Kernel) -> Result<Box<dyn Timer + 'a>, String> {
    if kernel != Kernel::Library {
        return Err(
            "--kernel copy/leaky/copy-hardened are CPU tile loops; use --backend cpu".into(),
        );
    }
    let ordinal = match b.strip_prefix("cuda:") {
        Some(n) => n.parse().map_err(|_| format!("bad GPU ordinal in {b:?}"))?,
        None => 0,
    };
    Ok(Box::new(gpu::GpuTimer::new(setup, ordinal)?))
}

#[cfg(not(feature = "cuda"))]
fn gpu_timer<'a>(_: &'a Setup, _: &str, _: Kernel) -> Result<Box<dyn Timer + 'a>, String> {
    Err("this build has no `cuda` feature".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> Args {
        let mut v = vec![
            "detattn-dudect",
            "--q-len",
            "5",
            "--kv-len",
            "130",
            "--head-dim",
            "8",
        ];
        v.extend_from_slice(extra);
        Args::parse_from(v)
    }

    #[test]
    fn the_copy_and_the_leaky_copy_give_the_library_bits_on_every_class() {
        // Two and a bit tiles, odd sizes: the copy must be a copy, or the leaky variant's timing
        // would not isolate the planted shortcuts.
        let a = args(&["--pool", "2"]);
        let setup = Setup::new(&a, &Class::ALL).unwrap();
        let mut t = CpuTimer::new(&setup, 1, Kernel::Library).unwrap();
        t.check_copy_is_faithful(&Class::ALL).unwrap();
    }

    #[test]
    fn classes_hold_what_they_say() {
        let a = args(&["--pool", "1"]);
        let setup = Setup::new(&a, &Class::ALL).unwrap();
        let set = |c: Class| &setup.pools[c.name()][0];
        let all = |c: Class, f: &dyn Fn(f32) -> bool| {
            let s = set(c);
            s.q.iter().chain(&s.k).chain(&s.v).all(|&x| f(x))
        };
        assert!(all(Class::Zeros, &|x| x == 0.0));
        assert!(all(Class::Subnormals, &|x| x.is_subnormal()));
        assert!(all(Class::Huge, &|x| x.is_finite() && x.abs() >= f32::MAX / 2.0));
        assert!(all(Class::Random, &|x| (-2.0..2.0).contains(&x)));
        let nf = set(Class::NonFinite);
        assert!(nf.q.iter().any(|x| x.is_nan()) && nf.k.iter().any(|x| x.is_infinite()));
        assert!(
            set(Class::AllMasked)
                .mask
                .as_ref()
                .unwrap()
                .iter()
                .all(|&m| !m)
        );
        let rm = set(Class::RandomMask).mask.as_ref().unwrap();
        assert!(rm.iter().any(|&m| m) && rm.iter().any(|&m| !m));
        // One-hot: in each KV head exactly one key row has elements of magnitude 100.
        let oh = set(Class::OneHot);
        let peaked =
            oh.k.chunks(8)
                .filter(|r| r.iter().all(|x| x.abs() == 100.0))
                .count();
        assert_eq!(peaked, 2);
    }

    #[test]
    fn the_one_hot_class_really_is_one_hot() {
        // Its output rows equal the peaked key's V row: all other weights vanish.
        let a = args(&["--pool", "1"]);
        let setup = Setup::new(&a, &[Class::OneHot]).unwrap();
        let s = &setup.pools["onehot"][0];
        let out = Engine::cpu()
            .run(&setup.plain, &s.q, &s.k, &s.v, None)
            .unwrap();
        let (d, skv) = (8, 130);
        for h in 0..2 {
            let j = (0..skv)
                .find(|&j| s.k[(h * skv + j) * d].abs() == 100.0)
                .unwrap();
            let vrow = &s.v[(h * skv + j) * d..(h * skv + j + 1) * d];
            let orow = &out[h * 5 * d..h * 5 * d + d];
            for (o, v) in orow.iter().zip(vrow) {
                assert!((o - v).abs() <= 1e-6 * v.abs().max(1.0), "{o} vs {v}");
            }
        }
    }
}
