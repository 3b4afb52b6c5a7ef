//! On the GPU, the layout never changes a bit, on either path, through the host and the device
//! entry points: inputs in `[B, S, H, D]`, a padded `[B, S, H, D]` and one fused QKV buffer, the
//! output in each of those; every output bit equals the contiguous `[B, H, S, D]` host run's (on
//! the `Exact` path that is also the CPU's: D6), nothing outside the output's rows is written.
//! Also: causal top-left on the GPU (Exact: the CPU's bits), and the `TensorCore` path's
//! alignment errors.
//!
//! Without a usable GPU every test prints `SKIPPED` and why.
#![cfg(feature = "cuda")]

mod gpu_common;
mod layout_common;

use detattn::cuda::{CudaBackend, DeviceQkv, DeviceRepr, DeviceTensor, DeviceTensorMut};
use detattn::inputs::{GenOptions, SplitMix64, generate};
use detattn::tensor::gather;
use detattn::{
    DType, Element, Engine, Error, Layout, Path, Problem, Qkv, Shape, Tensor, TensorMut,
    TensorName, bf16, f16,
};
use gpu_common::{gpu, loud};
use layout_common::{KINDS, Kind, layout, place, random_options, untouched_outside_rows};

const FILL: u32 = 0x5EED;

fn bits<T: Element>(v: &[T]) -> Vec<u32> {
    v.iter().map(|e| e.to_bits_u32()).collect()
}

/// A random problem the path takes: `Exact` any D (fast kernels and the generic one); the
/// `TensorCore` path f16/bf16 and D 64/128/256. Both alignments of causal; decode shapes.
fn random_problem(rng: &mut SplitMix64, path: Path) -> Problem {
    let mut r = |n: usize| (rng.next_u64() % n as u64) as usize;
    let d = match path {
        Path::Exact => [8, 64, 80, 128, 200, 256, 300][r(7)],
        Path::TensorCore => [64, 128, 256][r(3)],
    };
    let b = 1 + r(2);
    let hkv = 1 + r(2);
    let g = [1, 2, 4][r(3)];
    let sq = if r(3) == 0 { 1 + r(2) } else { 1 + r(70) };
    let skv = if r(2) == 0 { sq } else { 1 + r(150) };
    random_options(rng, Shape::new(b, hkv * g, hkv, sq, skv, d))
}

/// Every (input layout, output layout) through the host entry point, then the device entry point,
/// against `want` (the contiguous run). Returns the pairs checked.
fn check<T: Element + DeviceRepr>(e: &Engine, p: &Problem, seed: u64, want: &[T]) -> usize {
    let x = generate::<T>(p, GenOptions::seed(seed));
    let s = p.shape();
    let qd = [s.batch, s.q_heads, s.q_len, s.head_dim];
    let fill = T::from_bits_u32(FILL);
    let cb: &CudaBackend = e.cuda().expect("a CUDA engine");
    let st = cb.stream();
    let mut n = 0;
    for kind in KINDS {
        if kind == Kind::Fused && s.q_len != s.kv_len {
            continue;
        }
        let ([q, k, v], [lq, lk, lv]) = place(p, kind, &x.q, &x.k, &x.v, fill);
        let host = Qkv {
            q: Tensor::new(&q, lq),
            k: Tensor::new(&k, lk),
            v: Tensor::new(&v, lv),
            mask: x.mask.as_deref(),
        };
        let dq = st.clone_htod(&q).expect("upload");
        // One device buffer for a fused QKV (the three views share it).
        let (dk, dv) = if kind == Kind::Fused {
            (None, None)
        } else {
            (
                Some(st.clone_htod(&k).expect("upload")),
                Some(st.clone_htod(&v).expect("upload")),
            )
        };
        let dm = x.mask.as_ref().map(|m| {
            st.clone_htod(&m.iter().map(|&b| u8::from(b)).collect::<Vec<u8>>())
                .expect("upload")
        });
        let dev = DeviceQkv {
            q: DeviceTensor::new(&dq, lq),
            k: DeviceTensor::new(dk.as_ref().unwrap_or(&dq), lk),
            v: DeviceTensor::new(dv.as_ref().unwrap_or(&dq), lv),
            mask: dm.as_ref(),
        };
        for out_kind in [Kind::Bhsd, Kind::Bshd, Kind::Padded] {
            let (lo, len) = layout(out_kind, qd);
            let what = format!("{} {kind:?} -> {out_kind:?} {p:?}", e.path());
            // Host entry point.
            let mut out = vec![fill; len];
            e.run_tensors(p, &host, TensorMut::new(&mut out, lo))
                .unwrap_or_else(|err| panic!("host {what}: {err}"));
            assert_eq!(
                bits(&gather(&out, qd, lo)),
                bits(want),
                "host {what}: the bits moved"
            );
            assert!(
                untouched_outside_rows(&bits(&out), qd, lo, FILL),
                "host {what}: wrote outside the rows"
            );
            // Device entry point.
            let mut dout = st.clone_htod(&vec![fill; len]).expect("upload");
            cb.run_device(e.path(), &st, p, &dev, DeviceTensorMut::new(&mut dout, lo))
                .unwrap_or_else(|err| panic!("device {what}: {err}"));
            let got = st.clone_dtoh(&dout).expect("download");
            assert_eq!(
                bits(&gather(&got, qd, lo)),
                bits(want),
                "device {what}: the bits moved"
            );
            assert!(
                untouched_outside_rows(&bits(&got), qd, lo, FILL),
                "device {what}: wrote outside the rows"
            );
            n += 2;
        }
    }
    n
}

fn path_test(path: Path, test: &str) {
    let Some(e) = gpu(test, path) else {
        return;
    };
    let cpu = Engine::cpu();
    let mut rng = SplitMix64::new(0xC0DA + path.code() as u64);
    let (mut n, mut problems) = (0, 0);
    for i in 0..120u64 {
        let p = random_problem(&mut rng, path);
        let dtype = match (path, i % 3) {
            (Path::Exact, 0) => DType::F32,
            (_, 1) => DType::Bf16,
            _ => DType::F16,
        };
        n += match dtype {
            DType::F32 => one::<f32>(&e, &cpu, &p, i),
            DType::F16 => one::<f16>(&e, &cpu, &p, i),
            DType::Bf16 => one::<bf16>(&e, &cpu, &p, i),
        };
        problems += 1;
    }
    assert!(n >= 120 * 12, "only {n} pairs checked");
    loud(&format!(
        "{test}: {problems} problems on the {path} path, {n} (layout, entry point) runs: the contiguous bits"
    ));
}

fn one<T: Element + DeviceRepr>(e: &Engine, cpu: &Engine, p: &Problem, seed: u64) -> usize {
    let x = generate::<T>(p, GenOptions::seed(seed));
    let want = e
        .run(p, &x.q, &x.k, &x.v, x.mask.as_deref())
        .expect("contiguous run");
    if e.path() == Path::Exact {
        // D6 on every layout: the contiguous GPU run is the CPU's (top-left included).
        let c = cpu
            .run(p, &x.q, &x.k, &x.v, x.mask.as_deref())
            .expect("cpu");
        assert_eq!(bits(&want), bits(&c), "exact GPU != CPU on {p:?}");
    }
    check(e, p, seed, &want)
}

#[test]
fn exact_every_layout_same_bits_host_and_device() {
    path_test(Path::Exact, "exact_every_layout_same_bits_host_and_device");
}

#[test]
fn tensorcore_every_layout_same_bits_host_and_device() {
    path_test(
        Path::TensorCore,
        "tensorcore_every_layout_same_bits_host_and_device",
    );
}

#[test]
fn tensorcore_misaligned_layouts_are_typed_errors() {
    let Some(e) = gpu(
        "tensorcore_misaligned_layouts_are_typed_errors",
        Path::TensorCore,
    ) else {
        return;
    };
    let p = Problem::builder(Shape::new(1, 2, 2, 16, 16, 64))
        .build()
        .unwrap();
    let x = generate::<f16>(&p, GenOptions::seed(3));
    let l = Layout::bhsd(2, 16, 64);
    let mut q = vec![f16::ZERO; 3];
    q.extend_from_slice(&x.q);
    let mut out = vec![f16::ZERO; x.q.len() + 3];
    let host = Qkv {
        q: Tensor::new(&q, l.with_offset(3)),
        k: Tensor::new(&x.k, l),
        v: Tensor::new(&x.v, l),
        mask: None,
    };
    match e.run_tensors(&p, &host, TensorMut::new(&mut out, l)) {
        Err(Error::Misaligned {
            path: Path::TensorCore,
            tensor: TensorName::Q,
            ..
        }) => {}
        other => panic!("offset 3: expected Misaligned(q), got {other:?}"),
    }
    // A row stride that is not a multiple of 8 elements (68).
    let odd = Layout {
        offset: 0,
        batch_stride: 2 * 16 * 68,
        head_stride: 16 * 68,
        seq_stride: 68,
    };
    let k2 = detattn::tensor::scatter(&x.k, [1, 2, 16, 64], odd, 2 * 16 * 68, f16::ZERO);
    let host = Qkv {
        q: Tensor::new(&x.q, l),
        k: Tensor::new(&k2, odd),
        v: Tensor::new(&x.v, l),
        mask: None,
    };
    match e.run_tensors(&p, &host, TensorMut::new(&mut out[..x.q.len()], l)) {
        Err(Error::Misaligned {
            tensor: TensorName::K,
            ..
        }) => {}
        other => panic!("row stride 68: expected Misaligned(k), got {other:?}"),
    }
    // The Exact path takes the same layouts (scalar loads need no alignment) and gives the CPU's bits.
    let ex = gpu(
        "tensorcore_misaligned_layouts_are_typed_errors",
        Path::Exact,
    )
    .expect("the same GPU");
    let mut o1 = vec![f16::ZERO; x.q.len()];
    ex.run_tensors(&p, &host, TensorMut::new(&mut o1, l))
        .expect("exact takes any stride");
    let want = Engine::cpu().run(&p, &x.q, &x.k, &x.v, None).unwrap();
    assert_eq!(bits(&o1), bits(&want));
}
