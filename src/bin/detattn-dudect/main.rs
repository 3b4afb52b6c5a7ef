//! `detattn-dudect`: a dudect-style constant-time test of the `Exact` and `TensorCore` paths
//! (docs/design.md §6).
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
//! largest cropped t are reported, with two A/A controls that must pass too (else the run is
//! INCONCLUSIVE): the baseline's even against its odd measurements (what noise alone gives) and
//! its first input sets against its last (what the inputs' placement alone gives).
//!
//! Timers: on the CPU, `std::time::Instant` (nanoseconds) around one `Engine::run_into` on a
//! single-threaded engine (`Exact`, f32); with `--backend cuda`, CUDA events around one call's GPU
//! work on device-resident inputs (`CudaBackend::time_launch`, `--path exact|tensorcore`,
//! `--dtype f32|f16|bf16`; the tensorcore path takes f16 and bf16 and defaults to bf16). Inputs
//! are copied into the same buffers before every measurement (outside the timed region), so every
//! class runs at the same addresses. The classes are generated for the element type
//! (`classes.rs`: "huge" near *its* largest value, *its* subnormals). On the GPU, L2 is
//! overwritten after the copies (`gpu.rs`; `--keep-l2` skips it), `--each-kernel` tests every
//! kernel of the call on its own as well, and `--kernel memcpy` and `memcpy-reread` are controls
//! that time the driver's copies of K and V instead of attention (the GPU's own dependence on the
//! values).
//!
//! Every class runs under `NonFinitePolicy::Propagate` by default, so that non-finite input is
//! computed on (under `Reject`, it is refused before any work: that it existed is public by
//! design, see docs/threat-model.md). `--policy reject` times the library's default instead, the
//! scan and then the computation, on the finite classes (every class but `nonfinite`): the Exact
//! kernels templated on the policy exist once per policy, and their `Reject` instantiations are
//! otherwise never timed.
//!
//! Kernels (`--kernel`): `library` (the default) times the library. The others time the
//! harness's own copy of the CPU tile loop (`tile_copy.rs`), never part of the library:
//! `copy` (the library's loop as it was on 2026-11-23, binary32 chains), `copy-hardened` (with
//! the fixes for the first leaks this harness found) and `leaky` (or `--leaky`: the hardened
//! copy plus two planted data-dependent shortcuts, to show the harness detects a leak). All three
//! give the library's bits, checked before measuring; their timing is not the library's since
//! the library's chains went to binary64 (docs/audit.md, cause 4). On a GPU the planted leak
//! is a leaky cubin loaded through the test-only `DETATTN_TEST_CUBIN_DIR` (docs/audit.md).

mod classes;
#[cfg(feature = "cuda")]
mod gpu;
mod tile_copy;
mod welch;

use clap::{Parser, ValueEnum};
use classes::{Class, ClassElement, InputSet};
use detattn::inputs::SplitMix64;
use detattn::{
    Backend, DType, Element, Engine, MaskLayout, NonFinitePolicy, Path, Problem, Shape, bf16, f16,
};
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Instant;
use welch::{Moments, cropped_t, welch_t};

/// dudect's threshold: |t| above it is evidence of a timing difference.
const T_PASS: f64 = 4.5;
/// What the planted leak must reach (audit.md, "Timing").
const T_LEAK: f64 = 10.0;
/// Percentiles at which the cropped tests cut the pooled samples.
const CROPS: [f64; 5] = [0.5, 0.75, 0.9, 0.95, 0.99];

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Kernel {
    /// The library (`Engine::run_into`, or the CUDA kernel with `--backend cuda`).
    Library,
    /// The harness's copy of the CPU tile loop as of 2026-11-23 (binary32 chains: the library's
    /// bits, not its timing since 2026-11-27).
    Copy,
    /// The hardened copy plus planted data-dependent shortcuts (must be detected).
    Leaky,
    /// The copy hardened against the leaks found in the library (same bits; a candidate fix,
    /// see `tile_copy::Variant::Hardened`).
    CopyHardened,
    /// GPU only, a control: no attention at all, a device-to-device copy of the class's K and V
    /// (the driver's copy), and of its mask for the mask classes. What it shows is the GPU's own
    /// dependence on the values moved.
    Memcpy,
    /// GPU only, a control: the copy of `memcpy`, then a copy of that copy, so the second reads
    /// lines the first just wrote (as each attention kernel reads what the one before wrote).
    MemcpyReread,
}

/// The non-finite policy every measured call runs under.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Policy {
    /// Non-finite input computed on (NaN and ±inf as +0, the rows that saw them NaN): every class.
    Propagate,
    /// The library's default: the scan, then the computation; the finite classes only.
    Reject,
}

impl Policy {
    fn library(self) -> NonFinitePolicy {
        match self {
            Policy::Propagate => NonFinitePolicy::Propagate,
            Policy::Reject => NonFinitePolicy::Reject,
        }
    }
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
    /// Arithmetic path: `exact` (CPU or GPU) or `tensorcore` (GPU only).
    #[arg(long, default_value = "exact")]
    path: Path,
    /// Element type of Q, K, V [default: f32 on the exact path, bf16 on the tensorcore path].
    /// The CPU harness times f32 only.
    #[arg(long)]
    dtype: Option<DType>,
    /// What to time.
    #[arg(long, value_enum, default_value_t = Kernel::Library)]
    kernel: Kernel,
    /// Same as `--kernel leaky`.
    #[arg(long)]
    leaky: bool,
    /// Classes to test, comma separated (default: all; under `--policy reject` all but
    /// `nonfinite`). Baselines are always measured.
    #[arg(long, value_delimiter = ',')]
    classes: Option<Vec<Class>>,
    /// The non-finite policy of every measured call.
    #[arg(long, value_enum, default_value_t = Policy::Propagate)]
    policy: Policy,
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
    /// Query heads (= KV heads) [default: 2; tensorcore 8].
    #[arg(long)]
    heads: Option<usize>,
    /// Query length [default: 64; tensorcore 256, two blocks of 128 rows per head].
    #[arg(long)]
    q_len: Option<usize>,
    /// Key length [default: 128, two Exact tiles; tensorcore 256, four tiles of 64 keys (eight
    /// of 32 at head_dim 256)], so that the rescale between tiles is exercised.
    #[arg(long)]
    kv_len: Option<usize>,
    /// Head dimension (the tensorcore path takes 64, 128, 256).
    #[arg(long, default_value_t = 64)]
    head_dim: usize,
    /// Causal (bottom-right): the kernels that mask the diagonal tiles by position, which on sm_90
    /// differ from the non-causal ones in how the warpgroups share the tensor cores.
    #[arg(long)]
    causal: bool,
    /// K and V as a paged cache of N-row pages (16..=256, a power of two) placed in a shuffled
    /// page order, timed through `CudaBackend::time_launch_paged` (`--backend cuda` only): the
    /// kernels that read pages through the block table where the path has them.
    #[arg(long, value_name = "N")]
    page_size: Option<usize>,
    /// Also time each kernel of the call on its own (CUDA events between the launches,
    /// `CudaBackend::time_launch_each`; `--backend cuda`, not with `--page-size`) and test each
    /// kernel's times as well as the whole call's: traces a difference to the kernel it comes
    /// from. The verdict then covers every kernel too.
    #[arg(long)]
    each_kernel: bool,
    /// GPU: do not overwrite L2 between placing the inputs and the call. By default a buffer of
    /// four times the GPU's L2 size is overwritten after the inputs are copied into place
    /// (untimed), so that the copy's dirty lines are written back before the timed call, not
    /// during it: their write-back, which depends on the values copied, is the harness's work,
    /// not the library's (docs/audit.md).
    #[arg(long)]
    keep_l2: bool,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
    /// Also write the JSON document to FILE (the table still goes to stdout): one run gives
    /// the log and the machine-readable result.
    #[arg(long, value_name = "FILE")]
    json_out: Option<std::path::PathBuf>,
    /// Succeed iff some class reaches max |t| > 10 (for the planted leak); default: succeed iff
    /// every class has max |t| < 4.5 (max over the raw and the cropped tests).
    #[arg(long)]
    expect_leak: bool,
}

/// What is timed, with the per-path defaults filled in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Config {
    path: Path,
    dtype: DType,
    batch: usize,
    heads: usize,
    q_len: usize,
    kv_len: usize,
    head_dim: usize,
    causal: bool,
    page_size: Option<usize>,
    each_kernel: bool,
    flush_l2: bool,
    policy: NonFinitePolicy,
}

impl Args {
    fn config(&self) -> Config {
        let tc = self.path == Path::TensorCore;
        let pick = |v: Option<usize>, exact: usize, tensorcore: usize| {
            v.unwrap_or(if tc { tensorcore } else { exact })
        };
        Config {
            path: self.path,
            dtype: self
                .dtype
                .unwrap_or(if tc { DType::Bf16 } else { DType::F32 }),
            batch: self.batch,
            heads: pick(self.heads, 2, 8),
            q_len: pick(self.q_len, 64, 256),
            kv_len: pick(self.kv_len, 128, 256),
            head_dim: self.head_dim,
            causal: self.causal,
            page_size: self.page_size,
            each_kernel: self.each_kernel,
            flush_l2: !self.keep_l2,
            policy: self.policy.library(),
        }
    }
}

/// The two problems: the value classes run on `plain`, the mask classes on `masked` (same
/// shapes plus a full `[B, Hq, Sq, Skv]` mask).
struct Setup {
    cfg: Config,
    /// The run's seed (inputs, measurement order, a paged cache's page order).
    seed: u64,
    plain: Problem,
    masked: Problem,
    pools: BTreeMap<&'static str, Vec<InputSet>>,
}

impl Setup {
    fn new(a: &Args, classes: &[Class]) -> Result<Setup, String> {
        let cfg = a.config();
        let shape = Shape::new(
            cfg.batch,
            cfg.heads,
            cfg.heads,
            cfg.q_len,
            cfg.kv_len,
            cfg.head_dim,
        );
        let build = |mask: bool| {
            let b = Problem::builder(shape)
                .nonfinite(cfg.policy)
                .causal(cfg.causal);
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
                        cfg.dtype,
                        &mut g,
                        shape.q_elems(),
                        shape.kv_elems(),
                        maskn,
                        (cfg.batch * cfg.heads, cfg.kv_len, cfg.head_dim),
                    )
                })
                .collect();
            pools.insert(c.name(), sets);
        }
        Ok(Setup {
            cfg,
            seed: a.seed,
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
    /// With `--each-kernel`: the last measurement kernel by kernel (name, nanoseconds), in
    /// launch order; empty otherwise.
    fn kernels(&self) -> &[(String, f64)] {
        &[]
    }
    /// What is timed, for the report.
    fn describe(&self) -> String;
}

/// The CPU timer, for inputs of element type `T`. The library runs every type; the harness's
/// copies of the tile loop are f32 only.
struct CpuTimer<'a, T> {
    setup: &'a Setup,
    engine: Engine,
    kernel: Kernel,
    q: Vec<T>,
    k: Vec<T>,
    v: Vec<T>,
    mask: Vec<bool>,
    out: Vec<T>,
}

impl<'a, T: Element + ClassElement> CpuTimer<'a, T> {
    fn new(setup: &'a Setup, threads: usize, kernel: Kernel) -> Result<Self, String> {
        let s = setup.plain.shape();
        Ok(CpuTimer {
            setup,
            engine: Engine::cpu_with_threads(threads).map_err(|e| e.to_string())?,
            kernel,
            q: vec![T::default(); s.q_elems()],
            k: vec![T::default(); s.kv_elems()],
            v: vec![T::default(); s.kv_elems()],
            mask: vec![false; setup.masked.mask_dims().iter().product()],
            out: vec![T::default(); s.q_elems()],
        })
    }

    /// Copy a set into the fixed buffers (untimed), in the element type.
    fn load(&mut self, c: Class, set: usize) {
        let s = &self.setup.pools[c.name()][set];
        for (dst, src) in [
            (&mut self.q, &s.q),
            (&mut self.k, &s.k),
            (&mut self.v, &s.v),
        ] {
            for (d, &x) in dst.iter_mut().zip(src) {
                *d = T::from_class_value(x);
            }
        }
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
                if T::DTYPE != DType::F32 {
                    return Err("the harness's copies of the tile loop are f32 only".into());
                }
                // T is f32 here: the casts are the identity.
                let (q, k, v): (&[f32], &[f32], &[f32]) = (
                    bytemuck::cast_slice(&self.q),
                    bytemuck::cast_slice(&self.k),
                    bytemuck::cast_slice(&self.v),
                );
                let out = bytemuck::cast_slice_mut::<T, f32>(&mut self.out);
                tile_copy::run(p, q, k, v, mask, out, variant);
                Ok(())
            }
            Kernel::Memcpy | Kernel::MemcpyReread => {
                Err("--kernel memcpy and memcpy-reread are GPU controls".into())
            }
        }
    }

    /// The copy must give the library's bits on every class (else it would not be a copy, and
    /// a difference in time could come from elsewhere than the planted shortcuts).
    fn check_copy_is_faithful(&mut self, classes: &[Class]) -> Result<(), String> {
        for &c in classes {
            self.load(c, 0);
            self.call(c, Kernel::Library)?;
            let want: Vec<u32> = self.out.iter().map(|x| x.to_bits_u32()).collect();
            for kernel in [Kernel::Copy, Kernel::Leaky, Kernel::CopyHardened] {
                self.out.iter_mut().for_each(|x| *x = T::default());
                self.call(c, kernel)?;
                if self
                    .out
                    .iter()
                    .map(|x| x.to_bits_u32())
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

impl<T: Element + ClassElement> Timer for CpuTimer<'_, T> {
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
                Kernel::Memcpy | Kernel::MemcpyReread =>
                    unreachable!("refused on the CPU before a timer is made"),
            }
        )
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
    median: f64,
    base_median: f64,
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

/// The classes `a` asks to test against their baselines: `--classes` or all, less those without
/// a baseline; under `--policy reject` never `nonfinite` (refused before any work there), and an
/// error when it is asked for.
fn tested_classes(a: &Args) -> Result<Vec<Class>, String> {
    let finite_only = a.policy == Policy::Reject;
    if finite_only
        && a.classes
            .as_ref()
            .is_some_and(|c| c.contains(&Class::NonFinite))
    {
        return Err(
            "--classes nonfinite needs --policy propagate (under reject such input is \
                    refused before any work)"
                .into(),
        );
    }
    let tested: Vec<Class> = a
        .classes
        .clone()
        .unwrap_or_else(|| Class::ALL.to_vec())
        .into_iter()
        .filter(|c| c.baseline().is_some() && !(finite_only && *c == Class::NonFinite))
        .collect();
    Ok(tested)
}

fn run(a: &Args) -> Result<ExitCode, String> {
    if a.n < 2 {
        return Err("--n must be at least 2".into());
    }
    let mut tested = tested_classes(a)?;
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
    let cfg = setup.cfg;

    let mut timer: Box<dyn Timer + '_> = match a.backend.as_str() {
        "cpu" => {
            // The library's own refusal of the path on the CPU (tensor cores are a GPU feature).
            Engine::new(Backend::Cpu, cfg.path).map_err(|e| e.to_string())?;
            if cfg.page_size.is_some() {
                return Err(
                    "--page-size: the paged cache is timed on the GPU only; add \
                            --backend cuda"
                        .into(),
                );
            }
            if cfg.each_kernel {
                return Err(
                    "--each-kernel: the CPU call is one loop, not kernels; add --backend cuda"
                        .into(),
                );
            }
            if matches!(a.kernel, Kernel::Memcpy | Kernel::MemcpyReread) {
                return Err(
                    "--kernel memcpy and memcpy-reread are GPU controls; add --backend cuda".into(),
                );
            }
            if cfg.dtype != DType::F32 && a.kernel != Kernel::Library {
                return Err(format!(
                    "--dtype {}: the harness's copies of the tile loop are f32 only; the \
                     library (--kernel library) takes every type",
                    cfg.dtype
                ));
            }
            match cfg.dtype {
                DType::F32 => {
                    let mut t = CpuTimer::<f32>::new(&setup, a.threads, a.kernel)?;
                    if a.kernel != Kernel::Library {
                        t.check_copy_is_faithful(&all)?;
                    }
                    Box::new(t)
                }
                DType::F16 => Box::new(CpuTimer::<f16>::new(&setup, a.threads, a.kernel)?),
                DType::Bf16 => Box::new(CpuTimer::<bf16>::new(&setup, a.threads, a.kernel)?),
            }
        }
        b if b == "cuda" || b.starts_with("cuda:") => {
            check_path(&setup)?;
            gpu_timer(&setup, b, a.kernel)?
        }
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
    let mut sets: BTreeMap<&'static str, Vec<usize>> = BTreeMap::new();
    let mut split = KernelSamples::default();
    for &c in &order {
        let set = (g.next_u64() % pool) as usize;
        let ns = timer.measure(c, set)?;
        samples.entry(c.name()).or_default().push(ns);
        sets.entry(c.name()).or_default().push(set);
        split.push(c, timer.kernels())?;
    }
    let elapsed = started.elapsed().as_secs_f64();

    // A/A controls, the baseline against itself: even vs odd measurements (the same input sets:
    // what noise alone gives), and the first half of its input sets against the second (same
    // values distribution, other buffers: a difference there comes from where the inputs were,
    // not their values, and no class verdict of the run can be trusted). Both must pass.
    let aa_class = if samples.contains_key(Class::Random.name()) {
        Class::Random
    } else {
        Class::RandomMask
    };
    let base = &samples[aa_class.name()];
    let base_sets = &sets[aa_class.name()];
    let half = (pool as usize).div_ceil(2);
    let mut controls = vec![Control::new(
        format!("{}(A/A)", aa_class.name()),
        base.iter().step_by(2).copied().collect(),
        base.iter().skip(1).step_by(2).copied().collect(),
    )];
    let (lo, hi) = base
        .iter()
        .copied()
        .zip(base_sets.iter().copied())
        .partition::<Vec<_>, _>(|(_, s)| *s < half);
    // Only with at least two sets and two measurements on each side (`--pool 1` has one set).
    if lo.len() >= 2 && hi.len() >= 2 {
        controls.push(Control::new(
            format!("{}(sets)", aa_class.name()),
            lo.iter().map(|x| x.0).collect(),
            hi.iter().map(|x| x.0).collect(),
        ));
    }
    let controls_pass = controls.iter().all(|c| c.t_max() < T_PASS);
    let rows = compare(&tested, |c| samples.get(c.name()).map(Vec::as_slice));
    let kernel_rows = split.compare(&tested)?;

    let max_crop = |crops: &[(f64, f64)]| {
        crops
            .iter()
            .copied()
            .max_by(|x, y| x.1.abs().total_cmp(&y.1.abs()))
            .unwrap_or((0.0, 0.0))
    };
    let every_row = || rows.iter().chain(kernel_rows.iter().flat_map(|k| &k.rows));
    let all_pass = every_row().all(|r| r.t_max < T_PASS);
    let leak_found = every_row().any(|r| r.t_max > T_LEAK);
    // A failing control makes a pass meaningless (the harness cannot tell values from noise or
    // from placement); a planted leak far above it is still detected.
    let ok = if a.expect_leak {
        leak_found
    } else {
        all_pass && controls_pass
    };
    let s = setup.plain.shape();
    let problem = format!(
        "B={} Hq={} Hkv={} Sq={} Skv={} D={} {}{}, path {}, NonFinitePolicy::{:?}, mask classes with a [B,Hq,Sq,Skv] mask{}",
        s.batch,
        s.q_heads,
        s.kv_heads,
        s.q_len,
        s.kv_len,
        s.head_dim,
        cfg.dtype,
        if setup.plain.causal() { ", causal" } else { "" },
        cfg.path,
        cfg.policy,
        cfg.page_size.map_or(String::new(), |n| format!(
            ", K and V in {n}-row pages (shuffled order)"
        ))
    );
    let unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());

    let j = serde_json::json!({
            "tool": "detattn-dudect",
            "unix_time": unix,
            "cpu_model": cpu_model(),
            "backend": timer.describe(),
            "problem": problem,
            "path": cfg.path.name(),
            "dtype": cfg.dtype.name(),
            "causal": setup.plain.causal(),
            "shape": {
                "batch": s.batch, "q_heads": s.q_heads, "kv_heads": s.kv_heads,
                "q_len": s.q_len, "kv_len": s.kv_len, "head_dim": s.head_dim,
            },
            "n_per_class": a.n,
            "seed": a.seed,
            "seconds": elapsed,
            "threshold": T_PASS,
            "expect_leak": a.expect_leak,
            "aa_control": {
                "class": aa_class.name(),
                "t": controls[0].t,
                "cropped_max": max_crop(&controls[0].crops).1,
            },
            "aa_sets_control": controls.get(1).map(|c| serde_json::json!({
                "class": aa_class.name(),
                "sets": format!("0..{half} vs {half}..{pool}"),
                "n": [c.a.n, c.b.n],
                "t": c.t,
                "cropped_max": max_crop(&c.crops).1,
                "pass": c.t_max() < T_PASS,
            })),
            "classes": rows.iter().map(Row::json).collect::<Vec<_>>(),
            "kernels": kernel_rows.iter().map(|k| serde_json::json!({
                "launch": k.launch,
                "kernel": k.kernel,
                "classes": k.rows.iter().map(Row::json).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "ok": ok,
    });
    let text = serde_json::to_string_pretty(&j).map_err(|e| e.to_string())?;
    if let Some(path) = &a.json_out {
        std::fs::write(path, format!("{text}\n"))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    if a.json {
        println!("{text}");
    } else {
        println!("detattn-dudect  {}", timer.describe());
        println!("  cpu: {}   unix time {unix}", cpu_model());
        println!("  problem: {problem}");
        println!(
            "  {} measurements per class, interleaved in random order (seed {:#x}), {:.1} s",
            a.n, a.seed, elapsed
        );
        println!(
            "  {:<16} {:<12} {:>7} {:>11} {:>11} {:>11} {:>11} {:>8} {:>18}  verdict (max |t| < {T_PASS})",
            "class",
            "vs",
            "n",
            "median ns",
            "base med",
            "mean ns",
            "base mean",
            "t",
            "cropped max |t|"
        );
        for c in &controls {
            let (p, t) = max_crop(&c.crops);
            println!(
                "  {:<16} {:<12} {:>7} {:>11.0} {:>11.0} {:>11.0} {:>11.0} {:>8.2} {:>11.2} @p{:<4}  control {}",
                c.label,
                aa_class.name(),
                c.a.n,
                c.median.0,
                c.median.1,
                c.a.mean,
                c.b.mean,
                c.t,
                t.abs(),
                (p * 100.0).round(),
                if c.t_max() < T_PASS { "PASS" } else { "FAIL" }
            );
        }
        let print_row = |r: &Row| {
            let (p, t) = max_crop(&r.crops);
            println!(
                "  {:<16} {:<12} {:>7} {:>11.0} {:>11.0} {:>11.0} {:>11.0} {:>8.2} {:>11.2} @p{:<4}  {}",
                r.class.name(),
                r.base.name(),
                r.n,
                r.median,
                r.base_median,
                r.mean,
                r.base_mean,
                r.t,
                t.abs(),
                (p * 100.0).round(),
                if r.t_max < T_PASS { "PASS" } else { "FAIL" }
            );
        };
        rows.iter().for_each(print_row);
        for k in &kernel_rows {
            println!("  launch {}: {}", k.launch, k.kernel);
            k.rows.iter().for_each(print_row);
        }
        println!(
            "  result: {}",
            match (a.expect_leak, ok) {
                (false, true) => "every class max |t| < 4.5: no timing difference detected",
                (false, false) if !controls_pass =>
                    "INCONCLUSIVE: an A/A control failed (max |t| >= 4.5), so the classes' \
                     differences cannot be told from noise or from where the inputs lie",
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

/// An A/A control: two samples of the baseline that should not differ.
struct Control {
    label: String,
    a: Moments,
    b: Moments,
    median: (f64, f64),
    t: f64,
    crops: Vec<(f64, f64)>,
}

impl Control {
    fn new(label: String, a: Vec<f64>, b: Vec<f64>) -> Control {
        let (ma, mb) = (Moments::of(&a), Moments::of(&b));
        Control {
            label,
            t: welch_t(&ma, &mb),
            crops: cropped_t(&a, &b, &CROPS),
            median: (median(&a), median(&b)),
            a: ma,
            b: mb,
        }
    }

    fn t_max(&self) -> f64 {
        self.crops
            .iter()
            .fold(self.t.abs(), |m, (_, t)| m.max(t.abs()))
    }
}

impl Row {
    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "class": self.class.name(),
            "baseline": self.base.name(),
            "n": self.n,
            "mean_ns": self.mean,
            "baseline_mean_ns": self.base_mean,
            "median_ns": self.median,
            "baseline_median_ns": self.base_median,
            "t": self.t,
            "cropped": self.crops.iter().map(|(p, t)| serde_json::json!({"percentile": p, "t": t})).collect::<Vec<_>>(),
            "t_max": self.t_max,
            "pass": self.t_max < T_PASS,
        })
    }
}

/// Each tested class against its baseline, on the samples `of` gives (classes without samples
/// are left out).
fn compare<'s>(tested: &[Class], of: impl Fn(Class) -> Option<&'s [f64]>) -> Vec<Row> {
    let mut rows = Vec::new();
    for &c in tested {
        let b = c.baseline().expect("tested classes have one");
        let (Some(xs), Some(ys)) = (of(c), of(b)) else {
            continue;
        };
        let (mx, my) = (Moments::of(xs), Moments::of(ys));
        let crops = cropped_t(xs, ys, &CROPS);
        let t = welch_t(&mx, &my);
        rows.push(Row {
            t_max: crops.iter().fold(t.abs(), |m, (_, t)| m.max(t.abs())),
            class: c,
            base: b,
            n: xs.len(),
            mean: mx.mean,
            base_mean: my.mean,
            median: median(xs),
            base_median: median(ys),
            t,
            crops,
        });
    }
    rows
}

/// With `--each-kernel`: per class, the names of the call's kernels in launch order and each
/// kernel's times.
#[derive(Default)]
struct KernelSamples(BTreeMap<&'static str, (Vec<String>, Vec<Vec<f64>>)>);

/// One launch position's comparisons.
struct KernelRows {
    launch: usize,
    kernel: String,
    rows: Vec<Row>,
}

impl KernelSamples {
    fn push(&mut self, c: Class, ks: &[(String, f64)]) -> Result<(), String> {
        if ks.is_empty() {
            return Ok(());
        }
        let (names, times) = self.0.entry(c.name()).or_insert_with(|| {
            (
                ks.iter().map(|k| k.0.clone()).collect(),
                vec![Vec::new(); ks.len()],
            )
        });
        if ks.len() != names.len() || ks.iter().zip(names.iter()).any(|(k, n)| k.0 != *n) {
            return Err(format!(
                "class {}: the call's kernels changed between measurements",
                c.name()
            ));
        }
        for (v, k) in times.iter_mut().zip(ks) {
            v.push(k.1);
        }
        Ok(())
    }

    /// Each launch position's kernel: every tested class against its baseline. A class and its
    /// baseline run the same problem, so the same kernels (else an error: that would be a
    /// difference in itself).
    fn compare(&self, tested: &[Class]) -> Result<Vec<KernelRows>, String> {
        let launches = self.0.values().map(|(n, _)| n.len()).max().unwrap_or(0);
        let mut out = Vec::new();
        for i in 0..launches {
            for &c in tested {
                let b = c.baseline().expect("tested classes have one");
                let name = |x: Class| self.0.get(x.name()).and_then(|(n, _)| n.get(i));
                if name(c) != name(b) {
                    return Err(format!(
                        "launch {i}: class {} ran {:?}, its baseline {} ran {:?}",
                        c.name(),
                        name(c),
                        b.name(),
                        name(b)
                    ));
                }
            }
            // One entry per kernel name at this position (plain and masked problems may run
            // different kernels).
            let mut names: Vec<&String> = self.0.values().filter_map(|(n, _)| n.get(i)).collect();
            names.sort();
            names.dedup();
            for kernel in names {
                let of = |x: Class| {
                    self.0
                        .get(x.name())
                        .filter(|(n, _)| n.get(i) == Some(kernel))
                        .map(|(_, t)| t[i].as_slice())
                };
                let rows = compare(tested, of);
                if !rows.is_empty() {
                    out.push(KernelRows {
                        launch: i,
                        kernel: kernel.clone(),
                        rows,
                    });
                }
            }
        }
        Ok(out)
    }
}

/// Median of a sample (mean of the middle two for an even count; 0 for none).
fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => v[n / 2],
        _ => 0.5 * (v[n / 2 - 1] + v[n / 2]),
    }
}

/// What the path takes (element type, head dim, policy), with the library's typed errors, before
/// a GPU is opened: these do not depend on the machine.
#[cfg(feature = "cuda")]
fn check_path(setup: &Setup) -> Result<(), String> {
    match setup.cfg.path {
        Path::Exact => Ok(()),
        Path::TensorCore => {
            detattn::cuda::check_path(Path::TensorCore, &setup.plain, setup.cfg.dtype)
                .map_err(|e| e.to_string())
        }
    }
}

#[cfg(not(feature = "cuda"))]
fn check_path(_: &Setup) -> Result<(), String> {
    Ok(())
}

#[cfg(feature = "cuda")]
fn gpu_timer<'a>(setup: &'a Setup, b: &str, kernel: Kernel) -> Result<Box<dyn Timer + 'a>, String> {
    let copies = match kernel {
        Kernel::Library => 0,
        Kernel::Memcpy => 1,
        Kernel::MemcpyReread => 2,
        Kernel::Copy | Kernel::Leaky | Kernel::CopyHardened => {
            return Err(
                "--kernel copy/leaky/copy-hardened are CPU tile loops; use --backend cpu (on a GPU \
                 the planted leak is a leaky cubin: DETATTN_TEST_CUBIN_DIR, docs/audit.md)"
                    .into(),
            );
        }
    };
    if copies > 0 && (setup.cfg.each_kernel || setup.cfg.page_size.is_some()) {
        return Err(
            "--kernel memcpy and memcpy-reread copy contiguous K and V: no --each-kernel, no \
             --page-size"
                .into(),
        );
    }
    let ordinal = match b.strip_prefix("cuda:") {
        Some(n) => n.parse().map_err(|_| format!("bad GPU ordinal in {b:?}"))?,
        None => 0,
    };
    gpu::timer(setup, ordinal, copies)
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
    fn each_path_has_its_defaults() {
        let parse = |v: &[&str]| Args::parse_from([&["detattn-dudect"][..], v].concat()).config();
        let exact = parse(&[]);
        assert_eq!(exact.path, Path::Exact);
        assert_eq!(exact.dtype, DType::F32);
        assert_eq!((exact.heads, exact.q_len, exact.kv_len), (2, 64, 128));
        let tc = parse(&["--path", "tensorcore"]);
        assert_eq!(tc.dtype, DType::Bf16);
        assert_eq!(
            (tc.heads, tc.q_len, tc.kv_len, tc.head_dim),
            (8, 256, 256, 64)
        );
        // At least two key tiles (64 keys per tile at head_dim 64 and 128, 32 at 256).
        assert!(tc.kv_len >= 2 * 64);
        let tc = parse(&[
            "--path",
            "tensorcore",
            "--dtype",
            "f16",
            "--head-dim",
            "128",
            "--kv-len",
            "512",
        ]);
        assert_eq!((tc.dtype, tc.head_dim, tc.kv_len), (DType::F16, 128, 512));
        assert!(!tc.causal);
    }

    #[test]
    fn reject_times_the_default_policy_on_the_finite_classes() {
        let a = Args::parse_from(["detattn-dudect", "--heads", "1", "--policy", "reject"]);
        let tested = tested_classes(&a).unwrap();
        assert!(!tested.is_empty() && !tested.contains(&Class::NonFinite));
        let setup = Setup::new(&a, &tested).unwrap();
        assert_eq!(setup.plain.nonfinite(), NonFinitePolicy::Reject);
        assert_eq!(setup.masked.nonfinite(), NonFinitePolicy::Reject);
        let a = Args::parse_from([
            "detattn-dudect",
            "--policy",
            "reject",
            "--classes",
            "zeros,nonfinite",
        ]);
        assert!(
            tested_classes(&a)
                .unwrap_err()
                .contains("needs --policy propagate")
        );
        // The default: every class with a baseline, non-finite included, under Propagate.
        let a = Args::parse_from(["detattn-dudect", "--heads", "1"]);
        assert!(tested_classes(&a).unwrap().contains(&Class::NonFinite));
        let setup = Setup::new(&a, &[Class::Zeros]).unwrap();
        assert_eq!(setup.plain.nonfinite(), NonFinitePolicy::Propagate);
    }

    #[test]
    fn causal_reaches_both_problems() {
        let a = Args::parse_from(["detattn-dudect", "--heads", "1", "--causal"]);
        let setup = Setup::new(&a, &[Class::Zeros]).unwrap();
        assert!(setup.plain.causal() && setup.masked.causal());
        let a = Args::parse_from(["detattn-dudect", "--heads", "1"]);
        let setup = Setup::new(&a, &[Class::Zeros]).unwrap();
        assert!(!setup.plain.causal() && !setup.masked.causal());
    }

    #[test]
    fn what_a_path_or_backend_cannot_do_is_an_error_before_measuring() {
        let small = [
            "--n", "2", "--pool", "1", "--heads", "1", "--q-len", "4", "--kv-len", "8",
        ];
        let fails = |extra: &[&str]| {
            let a = Args::parse_from([&["detattn-dudect"][..], &small, extra].concat());
            match run(&a) {
                Err(e) => e,
                Ok(_) => panic!("{extra:?} should fail"),
            }
        };
        let e = fails(&["--path", "tensorcore"]);
        assert!(
            e.starts_with("the tensorcore path is not available on the cpu backend"),
            "{e}"
        );
        let e = fails(&["--dtype", "bf16", "--kernel", "leaky"]);
        assert!(
            e.starts_with("--dtype bf16: the harness's copies of the tile loop are f32 only"),
            "{e}"
        );
        let e = fails(&["--each-kernel"]);
        assert!(
            e.starts_with("--each-kernel: the CPU call is one loop"),
            "{e}"
        );
        #[cfg(feature = "cuda")]
        {
            // Checked before a GPU is opened, so the same on a machine without one.
            let e = fails(&[
                "--path",
                "tensorcore",
                "--backend",
                "cuda",
                "--dtype",
                "f32",
            ]);
            assert_eq!(e, "the tensorcore path takes f16, bf16 inputs, got f32");
            let e = fails(&[
                "--path",
                "tensorcore",
                "--backend",
                "cuda",
                "--head-dim",
                "96",
            ]);
            assert_eq!(
                e,
                "the tensorcore path takes head_dim in 64, 128, 256, got 96"
            );
            let e = fails(&["--backend", "cuda", "--kernel", "leaky"]);
            assert!(
                e.starts_with("--kernel copy/leaky/copy-hardened are CPU tile loops"),
                "{e}"
            );
        }
    }

    #[test]
    fn each_kernel_is_compared_with_the_same_kernel_of_the_baseline() {
        let mut k = KernelSamples::default();
        // Launch 1's second kernel is slower for zeros by 10 ns; the first is the same.
        for i in 0..200 {
            let jitter = f64::from(i % 7);
            for (c, extra) in [(Class::Random, 0.0), (Class::Zeros, 10.0)] {
                let ks = [
                    ("scores".to_string(), 100.0 + jitter),
                    ("values".to_string(), 50.0 + jitter + extra),
                ];
                k.push(c, &ks).unwrap();
            }
        }
        let rows = k.compare(&[Class::Zeros]).unwrap();
        let got: Vec<(usize, &str, bool)> = rows
            .iter()
            .map(|r| (r.launch, r.kernel.as_str(), r.rows[0].t_max < T_PASS))
            .collect();
        assert_eq!(got, [(0, "scores", true), (1, "values", false)]);
        assert_eq!(rows[1].rows[0].base, Class::Random);
        // A class whose call ran other kernels than its baseline's is an error, as is a call
        // whose kernels change between measurements.
        let mut k2 = KernelSamples::default();
        k2.push(Class::Random, &[("a".into(), 1.0)]).unwrap();
        k2.push(Class::Zeros, &[("b".into(), 1.0)]).unwrap();
        let e = k2.compare(&[Class::Zeros]).err().unwrap();
        assert!(e.starts_with("launch 0: class zeros ran"), "{e}");
        let e = k2.push(Class::Zeros, &[("a".into(), 1.0)]).unwrap_err();
        assert!(e.contains("kernels changed"), "{e}");
    }

    #[test]
    fn median_of_odd_and_even_samples() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }

    #[test]
    fn the_copy_and_the_leaky_copy_give_the_library_bits_on_every_class() {
        // Two and a bit tiles, odd sizes: the copy must be a copy, or the leaky variant's timing
        // would not isolate the planted shortcuts.
        let a = args(&["--pool", "2"]);
        let setup = Setup::new(&a, &Class::ALL).unwrap();
        let mut t = CpuTimer::<f32>::new(&setup, 1, Kernel::Library).unwrap();
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
