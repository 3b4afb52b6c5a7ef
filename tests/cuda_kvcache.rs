//! The KV-cache interfaces on the GPU, both paths, every dtype each takes:
//!
//! - a variable-length batch gives each sequence the bits of that sequence computed alone on the
//!   same GPU path (D2 generalised) — mixed decode and prefill, empty sequences (no rows, no keys),
//!   GQA/MQA, both causal alignments, either non-finite policy with non-finite values planted, a
//!   sequence past the TensorCore key chunk (2048 keys) — through the host entry point and the
//!   device and raw-address entry points on packed `[total, H, D]` buffers; on `Exact` also the
//!   CPU's bits (D6);
//! - a paged cache (shuffled pages, every page size, unused rows NaN) gives the contiguous bits,
//!   varlen or not, through the host entry point and the device entry point of paged caches
//!   (`run_device_paged`, which gathers the used rows on the GPU) and its raw-address form
//!   (`run_device_raw_paged`, the Python package's); a bad block table is the host's typed error
//!   there too;
//! - `Reject` reads what the CPU reads: every packed row of a varlen batch (also the keys of a
//!   sequence with no query rows), only the rows a paged cache's sequences use;
//! - the log-sum-exp: on `Exact` the CPU's bits through every kernel family; on `TensorCore`
//!   (docs/tensorcore-numerics.md §10) within `TC_LSE_TOL` of the CPU's through every kernel and
//!   launch form (prefill, decode, the split decode's merge, `Propagate`'s poisoning), the same
//!   rows −inf and NaN, and asking for it changes no output bit (its D1–D5 bits are held by
//!   tests/cuda_tensorcore.rs); the device entry points (`run_device`, `run_device_paged`,
//!   `run_device_raw`, `run_device_raw_paged`) give the host entry's log-sum-exp bits on every
//!   varlen and paged problem above, and a bad log-sum-exp buffer is their typed error with
//!   nothing written.
//!
//! Without a usable GPU every test prints `SKIPPED` and why.
#![cfg(feature = "cuda")]

mod gpu_common;
mod kvcache_common;
mod layout_common;

use cudarc::driver::{DevicePtr, DevicePtrMut, SyncOnDrop};
use detattn::cuda::{
    CudaSlice, CudaStream, DeviceQkv, DeviceRepr, DeviceTensor, DeviceTensorMut, PagedRead,
    RawDeviceOut, RawDevicePagedKv, RawDeviceQkv, RawDeviceTensor, ValidAsZeroBits,
};
use detattn::inputs::{GenOptions, Paged, SplitMix64, generate, paginate};
use detattn::tensor::gather;
use detattn::{
    CausalAlign, DType, Element, Engine, Error, KvCache, Layout, NonFinitePolicy, PagedCache, Path,
    Problem, TensorName, bf16, f16,
};
use gpu_common::{gpu, loud};
use kvcache_common::{
    alone_inputs, assert_rows_alone, bits, contiguous, run_cache_on, varlen_problem,
};
use layout_common::{Kind, place};
use std::sync::Arc;

/// The dtypes `path` takes.
fn dtypes(path: Path) -> &'static [DType] {
    match path {
        Path::Exact => &[DType::F32, DType::F16, DType::Bf16],
        Path::TensorCore => &[DType::F16, DType::Bf16],
    }
}

/// A random varlen problem `path` takes: 1 to 6 sequences of 0 to 130 query rows and 0 to 700
/// keys (decode rows often), GQA/MQA, causal either alignment or not, either policy.
fn random_varlen(rng: &mut SplitMix64, path: Path) -> Problem {
    let mut r = |n: usize| (rng.next_u64() % n as u64) as usize;
    loop {
        let n = 1 + r(6);
        let q: Vec<usize> = (0..n).map(|_| [0, 1, 1, 1, 2, 7, 40, 130][r(8)]).collect();
        let k: Vec<usize> = (0..n).map(|_| [0, 1, 12, 64, 150, 700][r(6)]).collect();
        if q.iter().sum::<usize>() == 0 || k.iter().sum::<usize>() == 0 {
            continue;
        }
        let d = match path {
            Path::Exact => [3, 64, 80, 128, 256, 300][r(6)],
            Path::TensorCore => [64, 128, 256][r(3)],
        };
        let hkv = 1 + r(2);
        let causal = [
            None,
            Some(CausalAlign::BottomRight),
            Some(CausalAlign::TopLeft),
        ][r(3)];
        let policy = [NonFinitePolicy::Reject, NonFinitePolicy::Propagate][r(2)];
        return varlen_problem((hkv * [1, 2, 4][r(3)], hkv), &q, &k, d, causal, policy);
    }
}

/// `c`'s cache (its table and sizes) with its pages `k` and `v` where a device entry point takes
/// them: device buffers (`DevicePagedKv`) or raw addresses (`RawDevicePagedKv`).
fn with_pages<T, X>(c: &Paged<T>, k: X, v: X) -> PagedCache<'_, X> {
    PagedCache {
        k,
        v,
        num_pages: c.num_pages,
        page_size: c.page_size,
        block_table: &c.block_table,
        max_pages: c.max_pages,
    }
}

/// The device entry points of paged caches.
#[derive(Clone, Copy, PartialEq, Eq)]
enum PagedEntry {
    /// `run_device_paged` (cudarc buffers).
    Device,
    /// `run_device_raw_paged` (raw addresses on the device's stream: the Python package's).
    Raw,
}

/// `p` through a device entry point of paged caches: Q and the output contiguous, the pages as
/// `paginate` lays them out; with `lse`, the log-sum-exp too (else the second vector is empty).
fn device_paged<T: Element + DeviceRepr + ValidAsZeroBits>(
    e: &Engine,
    p: &Problem,
    q: &[T],
    c: &Paged<T>,
    mask: Option<&[bool]>,
    lse: bool,
    entry: PagedEntry,
) -> Result<(Vec<T>, Vec<f32>), Error> {
    let cb = e.cuda().expect("a CUDA engine");
    let st = cb.stream();
    let s = p.shape();
    let ql = Layout::bhsd(s.q_heads, s.q_len, s.head_dim);
    let up = |t: &[T]| st.clone_htod(t).expect("upload");
    let (dq, dk, dv) = (up(q), up(&c.k), up(&c.v));
    let dm = upload_mask(&st, mask);
    let mut dout = up(&vec![T::from_bits_u32(0x5EED); q.len()]);
    let mut dlse = lse.then(|| poisoned_lse(&st, lse_len(p)));
    if entry == PagedEntry::Raw {
        let pages = DeviceQkv {
            q: DeviceTensor::new(&dq, ql),
            k: DeviceTensor::new(&dk, c.layout),
            v: DeviceTensor::new(&dv, c.layout),
            mask: dm.as_ref(),
        };
        let (rx, _gx) = raw_inputs(&pages, &st);
        let (po, _go) = dout.device_ptr_mut(&st);
        let lse = dlse.as_mut().map(|l| (l.len(), l.device_ptr_mut(&st)));
        let cache: RawDevicePagedKv<'_> = with_pages(c, rx.k, rx.v);
        let ro = RawDeviceOut {
            out: RawDeviceTensor {
                ptr: po,
                len: q.len(),
                layout: ql,
            },
            lse: lse.as_ref().map(|(n, (pl, _))| (*pl, *n)),
        };
        // SAFETY: the device's own stream; every buffer is a live allocation of this device,
        // held (with its cudarc stream guard) until the stream has run the work (the downloads
        // below synchronise it); the inputs are not written; the two outputs are buffers of
        // their own.
        unsafe {
            cb.run_device_raw_paged::<T>(e.path(), raw_stream(&st), p, &rx.q, &cache, rx.mask, &ro)?
        };
    } else {
        let cache = with_pages(
            c,
            DeviceTensor::new(&dk, c.layout),
            DeviceTensor::new(&dv, c.layout),
        );
        let mut out = DeviceTensorMut::new(&mut dout, ql);
        if let Some(l) = dlse.as_mut() {
            out = out.with_lse(l);
        }
        cb.run_device_paged(
            e.path(),
            &st,
            p,
            DeviceTensor::new(&dq, ql),
            &cache,
            dm.as_ref(),
            out,
        )?;
    }
    Ok((
        st.clone_dtoh(&dout).expect("download"),
        dlse.map_or(Vec::new(), |l| st.clone_dtoh(&l).expect("download")),
    ))
}

/// A device buffer of `len` log-sum-exp entries (`lse_len`: one per query row of a problem),
/// filled with a pattern no result has (an f32 NaN other than the canonical one), so that an
/// entry left unwritten shows.
fn poisoned_lse(st: &Arc<CudaStream>, len: usize) -> CudaSlice<f32> {
    st.clone_htod(&vec![f32::from_bits(LSE_POISON); len])
        .expect("upload")
}

/// Entries of `p`'s log-sum-exp: one per query row.
fn lse_len(p: &Problem) -> usize {
    let s = p.shape();
    s.batch * s.q_heads * s.q_len
}

/// The mask as the device entry points take it: one byte per entry.
fn upload_mask(st: &Arc<CudaStream>, mask: Option<&[bool]>) -> Option<CudaSlice<u8>> {
    mask.map(|m| {
        st.clone_htod(&m.iter().map(|&b| u8::from(b)).collect::<Vec<u8>>())
            .expect("upload")
    })
}

/// `x` as raw device tensors (what a binding passes `run_device_raw`), and the cudarc guards that
/// order the buffers' use on `st`: keep them until the call is enqueued.
fn raw_inputs<'a, T>(
    x: &'a DeviceQkv<'_, T>,
    st: &'a CudaStream,
) -> (RawDeviceQkv, Vec<SyncOnDrop<'a>>) {
    let mut guards = Vec::new();
    let mut raw = |t: &'a DeviceTensor<'_, T>| {
        let (ptr, g) = t.data.device_ptr(st);
        guards.push(g);
        RawDeviceTensor {
            ptr,
            len: t.data.len(),
            layout: t.layout,
        }
    };
    let (q, k, v) = (raw(&x.q), raw(&x.k), raw(&x.v));
    let mask = x.mask.map(|m| {
        let (ptr, g) = m.device_ptr(st);
        guards.push(g);
        (ptr, m.len())
    });
    (RawDeviceQkv { q, k, v, mask }, guards)
}

/// What `poisoned_lse` fills with.
const LSE_POISON: u32 = 0x7FA5_5A5A;

/// `p` on contiguous `[B, H, S, D]` buffers through `run_device` and through `run_device_raw`
/// (the binding's entry point: raw addresses on the device's stream), each with the log-sum-exp:
/// (output, log-sum-exp) of each.
#[allow(clippy::type_complexity)]
fn device_and_raw<T: Element + DeviceRepr>(
    e: &Engine,
    p: &Problem,
    q: &[T],
    k: &[T],
    v: &[T],
    mask: Option<&[bool]>,
) -> Result<[(Vec<T>, Vec<f32>); 2], Error> {
    let cb = e.cuda().expect("a CUDA engine");
    let st = cb.stream();
    let up = |t: &[T]| st.clone_htod(t).expect("upload");
    let (dq, dk, dv) = (up(q), up(k), up(v));
    let dm = upload_mask(&st, mask);
    let x = DeviceQkv::bhsd(p, &dq, &dk, &dv, dm.as_ref());
    let s = p.shape();
    let ol = Layout::bhsd(s.q_heads, s.q_len, s.head_dim);
    let mut dout = up(&vec![T::from_bits_u32(0x5EED); s.q_elems()]);
    let mut dlse = poisoned_lse(&st, lse_len(p));
    cb.run_device(
        e.path(),
        &st,
        p,
        &x,
        DeviceTensorMut::new(&mut dout, ol).with_lse(&mut dlse),
    )?;
    let dev = (
        st.clone_dtoh(&dout).expect("download"),
        st.clone_dtoh(&dlse).expect("download"),
    );
    let raw = raw_entry(e, p, &x, ol, s.q_elems())?;
    Ok([dev, raw])
}

/// `p` through `run_device_raw` (the binding's entry point: raw addresses, here on the device's
/// stream) on the device inputs `x`, the output `out_len` elements in `ol`, with the log-sum-exp:
/// (output, log-sum-exp).
fn raw_entry<T: Element + DeviceRepr>(
    e: &Engine,
    p: &Problem,
    x: &DeviceQkv<'_, T>,
    ol: Layout,
    out_len: usize,
) -> Result<(Vec<T>, Vec<f32>), Error> {
    let cb = e.cuda().expect("a CUDA engine");
    let st = cb.stream();
    let mut rout = st
        .clone_htod(&vec![T::from_bits_u32(0x5EED); out_len])
        .expect("upload");
    let mut rlse = poisoned_lse(&st, lse_len(p));
    {
        let (rx, _gx) = raw_inputs(x, &st);
        let (po, _go) = rout.device_ptr_mut(&st);
        let nl = rlse.len();
        let (pl, _gl) = rlse.device_ptr_mut(&st);
        let ro = RawDeviceOut {
            out: RawDeviceTensor {
                ptr: po,
                len: out_len,
                layout: ol,
            },
            lse: Some((pl, nl)),
        };
        // SAFETY: the device's own stream; every buffer is a live allocation of this device,
        // held (with its cudarc stream guard) until the stream has run the work (the downloads
        // below synchronise it); the inputs are not written; the two outputs are buffers of
        // their own.
        unsafe { cb.run_device_raw::<T>(e.path(), raw_stream(&st), p, &rx, &ro)? };
    }
    Ok((
        st.clone_dtoh(&rout).expect("download"),
        st.clone_dtoh(&rlse).expect("download"),
    ))
}

/// The raw `CUstream` handle of `st`.
fn raw_stream(st: &CudaStream) -> u64 {
    st.cu_stream() as u64
}

/// One varlen problem on GPU engine `e`: host entry against each sequence alone on `e`, the
/// device entry on packed `[total, H, D]` buffers against the host entry, a paged cache against
/// the contiguous run, and on `Exact` the CPU. Under `Propagate` a non-finite value is planted in
/// q, k or v first (1 in 2). Returns the rows compared.
fn one<T: Element + DeviceRepr + ValidAsZeroBits>(e: &Engine, p: &Problem, seed: u64) -> usize {
    let mut x = generate::<T>(p, GenOptions::seed(seed));
    let mut rng = SplitMix64::new(seed ^ 0xBAD);
    if p.nonfinite() == NonFinitePolicy::Propagate && seed.is_multiple_of(2) {
        let bad =
            [T::from_f32_rne(f32::NAN), T::from_f32_rne(f32::INFINITY)][(seed / 2 % 2) as usize];
        let t = match rng.next_u64() % 3 {
            0 => &mut x.q,
            1 => &mut x.k,
            _ => &mut x.v,
        };
        let at = (rng.next_u64() % t.len() as u64) as usize;
        t[at] = bad;
    }
    let what = format!("{} {:?}", e.path(), T::DTYPE);
    let (out, _) = run_cache_on(e, p, &x.q, contiguous(p, &x.k, &x.v), None, false)
        .unwrap_or_else(|err| panic!("{what} {p:?}: {err}"));
    // With the log-sum-exp: the same output bits; its own bits are what every other entry point
    // below must give.
    let (out_l, lse) = run_cache_on(e, p, &x.q, contiguous(p, &x.k, &x.v), None, true)
        .unwrap_or_else(|err| panic!("{what} lse {p:?}: {err}"));
    assert_eq!(
        bits(&out_l),
        bits(&out),
        "{what}: asking for the lse moved the output {p:?}"
    );
    assert_rows_alone(
        p,
        &out,
        &[],
        |b| {
            let (sub, q, k, v) = alone_inputs(p, b, &x.q, &x.k, &x.v);
            run_cache_on(e, &sub, &q, contiguous(&sub, &k, &v), None, false)
                .unwrap_or_else(|err| panic!("{what} alone {b}: {err}"))
        },
        &format!("{what} host vs alone"),
    );
    if e.path() == Path::Exact {
        let (cpu, _) = run_cache_on(
            &Engine::cpu(),
            p,
            &x.q,
            contiguous(p, &x.k, &x.v),
            None,
            false,
        )
        .unwrap();
        assert_eq!(bits(&out), bits(&cpu), "{what}: GPU Exact != CPU {p:?}");
        let (_, cpu_lse) = run_cache_on(
            &Engine::cpu(),
            p,
            &x.q,
            contiguous(p, &x.k, &x.v),
            None,
            true,
        )
        .unwrap();
        assert_eq!(bits(&lse), bits(&cpu_lse), "{what}: GPU lse != CPU {p:?}");
    }
    // The device entry point on packed [total, H, D] buffers (FlashAttention's varlen layout).
    let s = p.shape();
    let qd = [1, s.q_heads, s.q_len, s.head_dim];
    let ([q, k, v], [lq, lk, lv]) = place(p, Kind::Bshd, &x.q, &x.k, &x.v, T::default());
    let cb = e.cuda().expect("a CUDA engine");
    let st = cb.stream();
    let up = |t: &[T]| st.clone_htod(t).expect("upload");
    let (dq, dk, dv) = (up(&q), up(&k), up(&v));
    let dev = DeviceQkv {
        q: DeviceTensor::new(&dq, lq),
        k: DeviceTensor::new(&dk, lk),
        v: DeviceTensor::new(&dv, lv),
        mask: None,
    };
    let mut dout = up(&vec![T::from_bits_u32(0x5EED); q.len()]);
    let mut dlse = poisoned_lse(&st, lse_len(p));
    cb.run_device(
        e.path(),
        &st,
        p,
        &dev,
        DeviceTensorMut::new(&mut dout, lq).with_lse(&mut dlse),
    )
    .unwrap_or_else(|err| panic!("{what} device {p:?}: {err}"));
    let got = st.clone_dtoh(&dout).expect("download");
    assert_eq!(
        bits(&gather(&got, qd, lq)),
        bits(&out),
        "{what}: device entry != host entry {p:?}"
    );
    assert_eq!(
        bits(&st.clone_dtoh(&dlse).expect("download")),
        bits(&lse),
        "{what}: device entry's lse != host entry's {p:?}"
    );
    // The raw-address entry point (the Python package's) on the same packed buffers.
    let (raw, raw_lse) =
        raw_entry(e, p, &dev, lq, q.len()).unwrap_or_else(|err| panic!("{what} raw {p:?}: {err}"));
    assert_eq!(
        bits(&gather(&raw, qd, lq)),
        bits(&out),
        "{what}: raw device entry != host entry {p:?}"
    );
    assert_eq!(
        bits(&raw_lse),
        bits(&lse),
        "{what}: raw device entry's lse != host entry's {p:?}"
    );
    // Paged (half the time): the contiguous bits.
    if seed % 2 == 1 {
        let page = 16 << (seed / 2 % 5);
        let c = paginate(p, &x.k, &x.v, page, seed).unwrap();
        let (paged, _) = run_cache_on(e, p, &x.q, KvCache::Paged(c.cache()), None, false)
            .unwrap_or_else(|err| panic!("{what} paged {page}: {err}"));
        assert_eq!(
            bits(&paged),
            bits(&out),
            "{what}: paged {page} != contiguous {p:?}"
        );
        for (entry, name) in [
            (PagedEntry::Device, "device"),
            (PagedEntry::Raw, "raw device"),
        ] {
            let (dev, dev_lse) = device_paged(e, p, &x.q, &c, None, true, entry)
                .unwrap_or_else(|err| panic!("{what} {name} paged {page}: {err}"));
            assert_eq!(bits(&dev), bits(&out), "{what}: {name} paged {page} {p:?}");
            assert_eq!(
                bits(&dev_lse),
                bits(&lse),
                "{what}: {name} paged {page} lse {p:?}"
            );
        }
    }
    s.q_heads * s.q_len
}

fn varlen_test(path: Path, test: &str) {
    let Some(e) = gpu(test, path) else {
        return;
    };
    let mut rng = SplitMix64::new(0x5E0 + path.code() as u64);
    let (mut rows, mut n) = (0, 0);
    for i in 0..48u64 {
        let p = random_varlen(&mut rng, path);
        let ts = dtypes(path);
        rows += match ts[i as usize % ts.len()] {
            DType::F32 => one::<f32>(&e, &p, i),
            DType::F16 => one::<f16>(&e, &p, i),
            DType::Bf16 => one::<bf16>(&e, &p, i),
        };
        n += 1;
    }
    // Structured: a sequence past one TensorCore key chunk (2048) beside decode rows and an empty
    // sequence, both alignments; one with every sequence a decode row.
    for (j, align) in [CausalAlign::BottomRight, CausalAlign::TopLeft]
        .into_iter()
        .enumerate()
    {
        let policy = NonFinitePolicy::Reject;
        let p = varlen_problem(
            (8, 2),
            &[1, 5, 0, 1],
            &[3000, 5, 9, 2100],
            128,
            Some(align),
            policy,
        );
        rows += one::<bf16>(&e, &p, 100 + j as u64);
        let p = varlen_problem(
            (4, 1),
            &[1; 7],
            &[1, 2, 3, 500, 0, 2049, 64],
            64,
            None,
            policy,
        );
        rows += one::<f16>(&e, &p, 103 + j as u64);
        n += 2;
    }
    loud(&format!(
        "{test}: {n} varlen problems on {}, {rows} rows each equal to its sequence alone (host \
         and device entry; paged = contiguous for half{})",
        e.describe(),
        if path == Path::Exact { "; = CPU" } else { "" }
    ));
}

#[test]
fn varlen_exact_each_sequence_alone_and_the_cpu() {
    varlen_test(Path::Exact, "varlen_exact_each_sequence_alone_and_the_cpu");
}

#[test]
fn varlen_tensorcore_each_sequence_alone() {
    varlen_test(Path::TensorCore, "varlen_tensorcore_each_sequence_alone");
}

/// Paged caches of rectangular problems (kv_lens, masks, decode) on both paths: the contiguous
/// bits (and on `Exact` the CPU's), through the host entry and the device entry of paged caches
/// (on `TensorCore` decode problems the kernels read the pages through the block table, the
/// others gather: `the_bench_times_varlen_batches_and_paged_caches` holds which route runs); every
/// fifth problem under `Propagate` with a NaN in a used key row.
#[test]
fn paged_cache_gives_the_contiguous_bits_on_the_gpu() {
    for path in Path::ALL {
        let Some(e) = gpu("paged_cache_gives_the_contiguous_bits_on_the_gpu", path) else {
            continue;
        };
        let mut rng = SplitMix64::new(0x9A6E + path.code() as u64);
        let mut n = 0;
        // Past the TensorCore key chunk (2048 keys): a split decode and its merge (16-row pages, a
        // row's keys over many pages), the decode that folds every chunk in one block (B·Hkv =
        // 256), D 256 with pages of its 32-key tile.
        let fixed = [
            (
                detattn::Shape::new(2, 8, 2, 1, 4500, 128),
                Some(vec![4500, 3001]),
                16,
                DType::Bf16,
            ),
            (
                detattn::Shape::new(128, 2, 2, 1, 2100, 64),
                None,
                64,
                DType::F16,
            ),
            (
                detattn::Shape::new(3, 4, 1, 1, 2500, 256),
                Some(vec![2500, 0, 33]),
                32,
                DType::F16,
            ),
        ];
        for (i, (shape, lens, page, dt)) in fixed.into_iter().enumerate() {
            let mut pb = Problem::builder(shape);
            if let Some(l) = lens {
                pb = pb.kv_lens(l);
            }
            let p = pb.build().unwrap();
            match dt {
                DType::F16 => paged_one::<f16>(&e, &p, 1000 + i as u64, page),
                _ => paged_one::<bf16>(&e, &p, 1000 + i as u64, page),
            }
            n += 1;
        }
        for i in 0..40u64 {
            let mut r = |m: usize| (rng.next_u64() % m as u64) as usize;
            let d = match path {
                Path::Exact => [3, 64, 80, 128][r(4)],
                Path::TensorCore => [64, 128, 256][r(3)],
            };
            let (b, hkv, g) = (1 + r(3), 1 + r(2), [1, 4][r(2)]);
            let (sq, skv) = ([1, 1, 5, 40][r(4)], 1 + r(600));
            let shape = detattn::Shape::new(b, hkv * g, hkv, sq, skv, d);
            let p = if i % 5 == 4 {
                Problem::builder(shape)
                    .nonfinite(NonFinitePolicy::Propagate)
                    .build()
                    .unwrap()
            } else {
                layout_common::random_options(&mut rng, shape)
            };
            let ts = dtypes(path);
            let page = 16 << (i % 5);
            match ts[i as usize % ts.len()] {
                DType::F32 => paged_one::<f32>(&e, &p, i, page),
                DType::F16 => paged_one::<f16>(&e, &p, i, page),
                DType::Bf16 => paged_one::<bf16>(&e, &p, i, page),
            }
            n += 1;
        }
        loud(&format!(
            "paged cache on {}: {n} problems, paged = contiguous bit for bit",
            e.describe()
        ));
    }
}

fn paged_one<T: Element + DeviceRepr + ValidAsZeroBits>(
    e: &Engine,
    p: &Problem,
    seed: u64,
    page: usize,
) {
    let mut x = generate::<T>(p, GenOptions::seed(seed));
    if p.nonfinite() == NonFinitePolicy::Propagate {
        // Batch element 0, kv head 0, key 0: used (no key lengths), its rows NaN.
        x.k[3] = T::from_f32_rne(f32::NAN);
    }
    let mask = x.mask.as_deref();
    let want = run_cache_on(e, p, &x.q, contiguous(p, &x.k, &x.v), mask, true)
        .unwrap_or_else(|err| panic!("{p:?}: {err}"));
    let plain = run_cache_on(e, p, &x.q, contiguous(p, &x.k, &x.v), mask, false)
        .unwrap_or_else(|err| panic!("{p:?}: {err}"));
    assert_eq!(
        bits(&plain.0),
        bits(&want.0),
        "asking for the lse moved the output {p:?}"
    );
    let c = paginate(p, &x.k, &x.v, page, seed ^ 0xFACE).unwrap();
    let got = run_cache_on(e, p, &x.q, KvCache::Paged(c.cache()), mask, true)
        .unwrap_or_else(|err| panic!("paged {page} {p:?}: {err}"));
    assert_eq!(bits(&got.0), bits(&want.0), "paged {page} {p:?}");
    assert_eq!(bits(&got.1), bits(&want.1), "paged {page} lse {p:?}");
    // The device entry points, each with the log-sum-exp: the host's bits.
    let dev = device_paged(e, p, &x.q, &c, mask, true, PagedEntry::Device)
        .unwrap_or_else(|err| panic!("device paged {page} {p:?}: {err}"));
    let raw_pages = device_paged(e, p, &x.q, &c, mask, true, PagedEntry::Raw)
        .unwrap_or_else(|err| panic!("raw device paged {page} {p:?}: {err}"));
    let [contig, raw] = device_and_raw(e, p, &x.q, &x.k, &x.v, mask)
        .unwrap_or_else(|err| panic!("device {p:?}: {err}"));
    for (entry, (o, l)) in [
        ("device paged", dev),
        ("raw device paged", raw_pages),
        ("device", contig),
        ("raw device", raw),
    ] {
        assert_eq!(bits(&o), bits(&want.0), "{entry} {page} {p:?}");
        assert_eq!(bits(&l), bits(&want.1), "{entry} lse {page} {p:?}");
    }
    if e.path() == Path::Exact {
        let cpu = run_cache_on(
            &Engine::cpu(),
            p,
            &x.q,
            KvCache::Paged(c.cache()),
            mask,
            false,
        )
        .unwrap();
        assert_eq!(bits(&got.0), bits(&cpu.0), "GPU != CPU, paged {page} {p:?}");
    }
}

/// `Reject` on the GPU reads exactly what the CPU reads: a NaN in the keys of a sequence with no
/// query rows is an error (it is an input); a NaN in a page row a sequence uses is one; the NaN
/// that fills the unused page rows is none (checked by every paged run above, under `Reject`).
#[test]
fn reject_reads_what_the_cpu_reads() {
    for path in Path::ALL {
        let Some(e) = gpu("reject_reads_what_the_cpu_reads", path) else {
            continue;
        };
        let p = varlen_problem(
            (2, 1),
            &[3, 0, 1],
            &[4, 6, 9],
            64,
            None,
            NonFinitePolicy::Reject,
        );
        let mut x = generate::<f16>(&p, GenOptions::seed(7));
        // Sequence 1 (no rows) owns packed keys 4..10: key 5, element 3.
        x.k[5 * 64 + 3] = f16::NAN;
        for engine in [&e, &Engine::cpu()] {
            let r = run_cache_on(engine, &p, &x.q, contiguous(&p, &x.k, &x.v), None, false);
            assert_eq!(
                r.unwrap_err(),
                Error::NonFinite {
                    tensor: TensorName::K
                },
                "{}",
                engine.describe()
            );
        }
        // A used row of a paged cache.
        let p = Problem::builder(detattn::Shape::new(2, 2, 1, 1, 50, 64))
            .kv_lens(vec![50, 20])
            .build()
            .unwrap();
        let x = generate::<f16>(&p, GenOptions::seed(8));
        let mut c = paginate(&p, &x.k, &x.v, 16, 3).unwrap();
        // Sequence 1, key 19: page 1 of its row, row 3 of that page.
        let page = c.block_table[c.max_pages + 1] as usize;
        let at = c.layout.row(page, 0, 3);
        c.v[at] = f16::INFINITY;
        for engine in [&e, &Engine::cpu()] {
            let r = run_cache_on(engine, &p, &x.q, KvCache::Paged(c.cache()), None, false);
            assert_eq!(
                r.unwrap_err(),
                Error::NonFinite {
                    tensor: TensorName::V
                },
                "{}",
                engine.describe()
            );
        }
        assert_eq!(
            device_paged(&e, &p, &x.q, &c, None, false, PagedEntry::Device).unwrap_err(),
            Error::NonFinite {
                tensor: TensorName::V
            },
            "device entry"
        );
        // A used block-table entry outside the cache: the host's typed error, before any work.
        let mut bad = paginate(&p, &x.k, &x.v, 16, 3).unwrap();
        bad.block_table[1] = bad.num_pages as i32;
        let want =
            run_cache_on(&e, &p, &x.q, KvCache::Paged(bad.cache()), None, false).unwrap_err();
        assert!(matches!(want, Error::BlockTableEntry { .. }), "{want:?}");
        assert_eq!(
            device_paged(&e, &p, &x.q, &bad, None, false, PagedEntry::Device).unwrap_err(),
            want
        );
        assert_eq!(
            device_paged(&e, &p, &x.q, &bad, None, false, PagedEntry::Raw).unwrap_err(),
            want
        );
        // A NaN in a used page row through the raw-address entry point too.
        assert_eq!(
            device_paged(&e, &p, &x.q, &c, None, false, PagedEntry::Raw).unwrap_err(),
            Error::NonFinite {
                tensor: TensorName::V
            },
            "raw device entry"
        );
    }
}

/// A bad log-sum-exp argument through a device entry point is a typed error before any work, and
/// a rejected input writes neither output: a buffer of the wrong length (`run_device`,
/// `run_device_paged`, `run_device_raw`: [`Error::TensorLength`] of `lse`), a raw address that is
/// not 4-byte aligned ([`Error::Misaligned`]) or whose allocation ends before its last entry
/// ([`Error::TensorExtent`]; checked against the driver's allocation range) or that is host
/// memory ([`Error::WrongDevice`]), a NaN under `Reject` ([`Error::NonFinite`]); in every case the output
/// and the log-sum-exp keep their poison.
#[test]
fn device_log_sum_exp_errors_write_nothing() {
    for path in Path::ALL {
        let Some(e) = gpu("device_log_sum_exp_errors_write_nothing", path) else {
            continue;
        };
        let cb = e.cuda().expect("a CUDA engine");
        let st = cb.stream();
        let p = Problem::builder(detattn::Shape::new(2, 4, 2, 3, 100, 64))
            .kv_lens(vec![100, 40])
            .build()
            .unwrap();
        let s = p.shape();
        let n = lse_len(&p);
        let mut x = generate::<f16>(&p, GenOptions::seed(21));
        let up = |t: &[f16]| st.clone_htod(t).expect("upload");
        let (dq, dk, dv) = (up(&x.q), up(&x.k), up(&x.v));
        let ol = Layout::bhsd(s.q_heads, s.q_len, s.head_dim);
        let poison = vec![f16::from_bits_u32(0x5EED); s.q_elems()];
        let mut dout = up(&poison);
        let untouched = |out: &CudaSlice<f16>, lse: &CudaSlice<f32>, what: &str| {
            assert_eq!(
                bits(&st.clone_dtoh(out).expect("download")),
                bits(&poison),
                "{path} {what}: the output was written"
            );
            let l = st.clone_dtoh(lse).expect("download");
            assert!(
                l.iter().all(|v| v.to_bits() == LSE_POISON),
                "{path} {what}: the lse was written"
            );
        };
        let is_lse_length = |r: Result<(), Error>, want: usize, got: usize| {
            let err = r.unwrap_err();
            assert!(
                matches!(
                    &err,
                    Error::TensorLength { tensor: TensorName::Lse, expected, got: g, .. }
                        if *expected == want && *g == got
                ),
                "{path}: {err:?}"
            );
        };
        // Lengths through run_device and run_device_paged.
        let x_dev = DeviceQkv::bhsd(&p, &dq, &dk, &dv, None);
        for len in [n - 1, n + 1] {
            let mut dlse = poisoned_lse(&st, len);
            let r = cb.run_device(
                path,
                &st,
                &p,
                &x_dev,
                DeviceTensorMut::new(&mut dout, ol).with_lse(&mut dlse),
            );
            is_lse_length(r, n, len);
            untouched(&dout, &dlse, "run_device, wrong lse length");
        }
        let c = paginate(&p, &x.k, &x.v, 32, 5).unwrap();
        let (pk, pv) = (up(&c.k), up(&c.v));
        let cache = with_pages(
            &c,
            DeviceTensor::new(&pk, c.layout),
            DeviceTensor::new(&pv, c.layout),
        );
        let mut dlse = poisoned_lse(&st, n + 3);
        let r = cb.run_device_paged(
            path,
            &st,
            &p,
            DeviceTensor::new(&dq, ol),
            &cache,
            None,
            DeviceTensorMut::new(&mut dout, ol).with_lse(&mut dlse),
        );
        is_lse_length(r, n, n + 3);
        untouched(&dout, &dlse, "run_device_paged, wrong lse length");
        // The raw entry point: length, alignment, the allocation's end.
        let mut big = poisoned_lse(&st, n + 1);
        {
            let (rx, _gx) = raw_inputs(&x_dev, &st);
            let (po, _go) = dout.device_ptr_mut(&st);
            let (pl, _gl) = big.device_ptr_mut(&st);
            let run = |lse: (u64, usize)| {
                let ro = RawDeviceOut {
                    out: RawDeviceTensor {
                        ptr: po,
                        len: s.q_elems(),
                        layout: ol,
                    },
                    lse: Some(lse),
                };
                // SAFETY: the device's own stream; every address is of a live allocation of this
                // device held until the downloads below synchronise the stream; the inputs are
                // not written; the outputs are buffers of their own (and the calls fail before
                // any work).
                unsafe { cb.run_device_raw::<f16>(path, raw_stream(&st), &p, &rx, &ro) }
            };
            is_lse_length(run((pl, n + 1)), n, n + 1);
            let err = run((pl + 2, n)).unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::Misaligned {
                        tensor: TensorName::Lse,
                        ..
                    }
                ),
                "{path}: {err:?}"
            );
            // The last entries past the end of the allocation the address lies in (the driver's
            // range, which for a pooled allocation may be more than this buffer).
            let (mut base, mut size) = (0u64, 0usize);
            // SAFETY: two out-pointers to locals; the driver reads `pl` only as an address.
            let r =
                unsafe { cudarc::driver::sys::cuMemGetAddressRange_v2(&mut base, &mut size, pl) };
            assert_eq!(r, cudarc::driver::sys::CUresult::CUDA_SUCCESS);
            let end = base + size as u64;
            let err = run((end - 4 * (n as u64 - 1), n)).unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::TensorExtent {
                        tensor: TensorName::Lse,
                        ..
                    }
                ),
                "{path}: {err:?}"
            );
            // An address the driver does not know as device memory (host memory): not this
            // device's ([`Error::WrongDevice`]), as for any address outside an allocation.
            let host = vec![0f32; n];
            let err = run((host.as_ptr() as u64, n)).unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::WrongDevice {
                        tensor: TensorName::Lse,
                        ..
                    }
                ),
                "{path}: {err:?}"
            );
        }
        untouched(&dout, &big, "run_device_raw, bad lse");
        // Reject: a NaN in q, neither output written.
        x.q[7] = f16::NAN;
        let dq_bad = up(&x.q);
        let mut dlse = poisoned_lse(&st, n);
        let err = cb
            .run_device(
                path,
                &st,
                &p,
                &DeviceQkv::bhsd(&p, &dq_bad, &dk, &dv, None),
                DeviceTensorMut::new(&mut dout, ol).with_lse(&mut dlse),
            )
            .unwrap_err();
        assert_eq!(
            err,
            Error::NonFinite {
                tensor: TensorName::Q
            },
            "{path}"
        );
        untouched(&dout, &dlse, "Reject with a NaN in q");
        loud(&format!(
            "device lse errors on {}: wrong lengths (3 entry points), misaligned, overrunning and \
             host raw addresses, Reject: typed errors, nothing written",
            e.describe()
        ));
    }
}

/// The log-sum-exp on the GPU `Exact` path: the CPU's bits (numerics.md §10) through every kernel
/// family — decode (`G·Sq ≤ 16`), the fast kernels (D ≤ 256), the generic one (D > 256) — with
/// rows that see no key (−inf), poisoned rows under `Propagate` (NaN), masks, key lengths, both
/// causal alignments, and varlen batches (`[Hq, total]`).
#[test]
fn log_sum_exp_on_the_gpu() {
    let Some(e) = gpu("log_sum_exp_on_the_gpu", Path::Exact) else {
        return;
    };
    let cpu = Engine::cpu();
    let mut rng = SplitMix64::new(0x15E);
    let (mut rows, mut neg_inf, mut nan) = (0usize, 0usize, 0usize);
    // Fixed problems first, one per kernel family (G = 2: decode at Sq = 1, the fast kernel at
    // D = 64 and the generic one at D = 300 with G·Sq = 18 > 16): batch element 0 sees no key
    // (−inf rows), a NaN in one of batch element 1's keys poisons the rows that see it (NaN rows).
    let fixed: Vec<Problem> = [(1, 64), (9, 64), (9, 300), (1, 300)]
        .into_iter()
        .map(|(sq, d)| {
            Problem::builder(detattn::Shape::new(2, 4, 2, sq, 50, d))
                .kv_lens(vec![0, 50])
                .nonfinite(NonFinitePolicy::Propagate)
                .build()
                .unwrap()
        })
        .collect();
    for i in 0..64u64 {
        let p = if let Some(p) = fixed.get(i as usize) {
            p.clone()
        } else if i % 4 == 3 {
            random_varlen(&mut rng, Path::Exact)
        } else {
            let mut r = |n: usize| (rng.next_u64() % n as u64) as usize;
            let d = [3, 64, 80, 128, 256, 300][r(6)];
            let (b, hkv, g) = (1 + r(2), 1 + r(2), [1, 2, 4][r(3)]);
            let sq = [1, 1, 2, 5, 40][r(5)];
            let skv = 1 + r(300);
            layout_common::random_options(
                &mut rng,
                detattn::Shape::new(b, hkv * g, hkv, sq, skv, d),
            )
        };
        let mut x = generate::<f32>(&p, GenOptions::seed(i));
        if p.nonfinite() == NonFinitePolicy::Propagate {
            // Batch element 1's key 7 for the fixed problems (element 3 of it), else anywhere.
            let at = match fixed.get(i as usize) {
                Some(f) => {
                    let s = f.shape();
                    ((s.kv_heads + 1) * s.kv_len + 7) * s.head_dim + 3
                }
                None => (rng.next_u64() % x.k.len() as u64) as usize,
            };
            x.k[at] = f32::NAN;
        }
        let mask = x.mask.as_deref();
        let want = run_cache_on(&cpu, &p, &x.q, contiguous(&p, &x.k, &x.v), mask, true).unwrap();
        let got = run_cache_on(&e, &p, &x.q, contiguous(&p, &x.k, &x.v), mask, true)
            .unwrap_or_else(|err| panic!("{p:?}: {err}"));
        assert_eq!(bits(&got.0), bits(&want.0), "output {p:?}");
        assert_eq!(bits(&got.1), bits(&want.1), "lse {p:?}");
        rows += got.1.len();
        neg_inf += got.1.iter().filter(|v| **v == f32::NEG_INFINITY).count();
        nan += got.1.iter().filter(|v| v.is_nan()).count();
    }
    assert!(
        neg_inf > 0 && nan > 0,
        "-inf rows {neg_inf}, NaN rows {nan}: extend the cases"
    );
    loud(&format!(
        "log_sum_exp_on_the_gpu: 64 problems on {}, {rows} rows, the CPU's bits ({neg_inf} −inf, \
         {nan} NaN)",
        e.describe()
    ));
}

/// How far the `TensorCore` path's log-sum-exp may be from the `Exact` path's, relative to
/// `max(1, |lse|)`, under numerics.md §9's first conditions (docs/tensorcore-numerics.md §10 says
/// where the difference comes from: `ex2`/`lg2.approx` and the HMMA's scores, some 1e-6).
const TC_LSE_TOL: f64 = 1e-4;

/// Rows compared, the largest relative difference, −inf rows and NaN rows of one problem.
#[derive(Default)]
struct LseStats {
    rows: usize,
    worst: f64,
    neg_inf: usize,
    nan: usize,
}

/// `p` on the TensorCore engine `e` against the CPU `Exact` engine (NaN planted at `nan_at` of K):
/// the output with the log-sum-exp equals the output without it, bit for bit; every row's
/// log-sum-exp is −inf where the CPU's is, the canonical NaN where the CPU's is NaN, and else
/// within `TC_LSE_TOL`.
fn tc_lse_one<T: Element>(
    e: &Engine,
    cpu: &Engine,
    p: &Problem,
    seed: u64,
    nan_at: Option<usize>,
    st: &mut LseStats,
) {
    let mut x = generate::<T>(p, GenOptions::seed(seed));
    if let Some(at) = nan_at {
        x.k[at] = T::from_f32_rne(f32::NAN);
    }
    let mask = x.mask.as_deref();
    let kv = || contiguous(p, &x.k, &x.v);
    let (out, lse) = run_cache_on(e, p, &x.q, kv(), mask, true)
        .unwrap_or_else(|err| panic!("tensorcore {p:?}: {err}"));
    let (plain, _) = run_cache_on(e, p, &x.q, kv(), mask, false).unwrap();
    assert_eq!(
        bits(&out),
        bits(&plain),
        "asking for the log-sum-exp changed the output {p:?}"
    );
    let (_, want) = run_cache_on(cpu, p, &x.q, kv(), mask, true).unwrap();
    for (row, (&g, &w)) in lse.iter().zip(&want).enumerate() {
        if w.is_nan() {
            assert_eq!(
                g.to_bits(),
                0x7FC0_0000,
                "row {row}: NaN expected, got {g} {p:?}"
            );
            st.nan += 1;
        } else if w == f32::NEG_INFINITY {
            assert_eq!(
                g,
                f32::NEG_INFINITY,
                "row {row}: −inf expected, got {g} {p:?}"
            );
            st.neg_inf += 1;
        } else {
            let rel = (f64::from(g) - f64::from(w)).abs() / f64::from(w).abs().max(1.0);
            assert!(
                rel <= TC_LSE_TOL,
                "row {row}: log-sum-exp {g} against Exact's {w} (relative {rel:.2e}) {p:?}"
            );
            st.worst = st.worst.max(rel);
        }
        st.rows += 1;
    }
}

/// The log-sum-exp on the `TensorCore` path (docs/tensorcore-numerics.md §10) against the `Exact`
/// path's (`tc_lse_one`), on fixed problems through every launch form — decode and prefill, with a
/// key split (4500 keys: the split decode's merge, and the prefill's chunk launches), under
/// `Propagate` with a NaN key (poisoned rows) and a batch element without keys (−inf rows) — and
/// on random problems (GQA/MQA, masks, key lengths, both causal alignments, varlen batches).
#[test]
fn log_sum_exp_on_the_tensorcore_path() {
    let Some(e) = gpu("log_sum_exp_on_the_tensorcore_path", Path::TensorCore) else {
        return;
    };
    let cpu = Engine::cpu();
    let mut st = LseStats::default();
    let mut problems = 0;
    // Fixed: batch element 0 has no key, a NaN in batch element 1's key 7 poisons its rows.
    for d in [64, 128, 256] {
        for (sq, skv) in [(1, 50), (9, 50), (1, 4500), (40, 4500)] {
            let p = Problem::builder(detattn::Shape::new(2, 4, 2, sq, skv, d))
                .kv_lens(vec![0, skv])
                .causal(sq > 1)
                .nonfinite(NonFinitePolicy::Propagate)
                .build()
                .unwrap();
            let at = ((2 + 1) * skv + 7) * d + 3;
            tc_lse_one::<f16>(&e, &cpu, &p, d as u64, Some(at), &mut st);
            tc_lse_one::<bf16>(&e, &cpu, &p, d as u64 + 1, Some(at), &mut st);
            problems += 2;
        }
    }
    let mut rng = SplitMix64::new(0x7C15E);
    for i in 0..96u64 {
        let p = if i % 4 == 3 {
            random_varlen(&mut rng, Path::TensorCore)
        } else {
            let mut r = |n: usize| (rng.next_u64() % n as u64) as usize;
            let d = [64, 128, 256][r(3)];
            let (b, hkv, g) = (1 + r(3), 1 + r(2), [1, 2, 4, 8][r(4)]);
            let sq = [1, 1, 2, 5, 40, 130][r(6)];
            let skv = if r(6) == 0 {
                2049 + r(3000)
            } else {
                1 + r(700)
            };
            layout_common::random_options(
                &mut rng,
                detattn::Shape::new(b, hkv * g, hkv, sq, skv, d),
            )
        };
        let nan_at = (p.nonfinite() == NonFinitePolicy::Propagate).then(|| {
            let s = p.shape();
            (rng.next_u64() % (s.batch * s.kv_heads * s.kv_len * s.head_dim) as u64) as usize
        });
        if i % 2 == 0 {
            tc_lse_one::<f16>(&e, &cpu, &p, 100 + i, nan_at, &mut st);
        } else {
            tc_lse_one::<bf16>(&e, &cpu, &p, 100 + i, nan_at, &mut st);
        }
        problems += 1;
    }
    assert!(
        st.neg_inf > 0 && st.nan > 0,
        "-inf rows {}, NaN rows {}: extend the cases",
        st.neg_inf,
        st.nan
    );
    loud(&format!(
        "log_sum_exp_on_the_tensorcore_path: {problems} problems on {}, {} rows: largest \
         difference from Exact {:.2e} of max(1, |lse|) (bound {TC_LSE_TOL:.0e}), {} −inf and {} \
         NaN rows as Exact's; the output bits unchanged by asking for it",
        e.describe(),
        st.rows,
        st.worst,
        st.neg_inf,
        st.nan
    ));
}

/// The benchmark protocol takes varlen batches and paged caches (the gather timed with each
/// call) on both paths, and refuses a bad page size with the typed error.
#[test]
fn the_bench_times_varlen_batches_and_paged_caches() {
    for path in Path::ALL {
        let Some(e) = gpu("the_bench_times_varlen_batches_and_paged_caches", path) else {
            continue;
        };
        let c = e.cuda().expect("cuda");
        let varlen = varlen_problem(
            (4, 2),
            &[1, 40, 0, 1],
            &[300, 40, 7, 2100],
            64,
            Some(CausalAlign::BottomRight),
            NonFinitePolicy::Reject,
        );
        let decode = Problem::builder(detattn::Shape::new(3, 8, 2, 1, 900, 128))
            .kv_lens(vec![900, 17, 512])
            .build()
            .unwrap();
        // How the paged cache is read: the TensorCore decode kernels through the block table (the
        // sm_80-sm_90 cubins; sm_100/sm_120 have no paged kernels), everything else gathered.
        let blackwell = c.arch().starts_with("sm_1");
        let native = (path == Path::TensorCore && !blackwell).then_some(PagedRead::BlockTable);
        let cases = [
            (&varlen, None, None),
            (&varlen, Some(32), Some(PagedRead::Gathered)),
            (&decode, Some(16), native.or(Some(PagedRead::Gathered))),
            (&decode, Some(64), native.or(Some(PagedRead::Gathered))),
        ];
        for (p, page_size, read) in cases {
            let mut opts = gpu_common::bench_opts(3, 1, 3, 2, 2);
            opts.page_size = page_size;
            let r = c
                .bench(path, p, DType::F16, &opts)
                .unwrap_or_else(|err| panic!("{path} {page_size:?}: {err}"));
            assert!(
                r.median_us > 0.0 && r.median_us.is_finite() && r.iters == 3 && r.rotate == 2,
                "{path} {page_size:?}: {r:?}"
            );
            assert_eq!(
                r.paged, read,
                "{path} {page_size:?}: how the cache was read"
            );
        }
        let mut opts = gpu_common::bench_opts(3, 1, 3, 2, 1);
        opts.page_size = Some(48);
        let err = c.bench(path, &decode, DType::F16, &opts).unwrap_err();
        assert!(matches!(err, Error::PageSize { .. }), "{err:?}");
    }
}
