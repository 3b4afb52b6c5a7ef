//! `--backend cuda`: CUDA events around one call's GPU work on device-resident inputs
//! (`CudaBackend::time_launch_path`), for either path and any element type the path takes.
//!
//! Every input set of every class is uploaded once, converted exactly to the element type
//! (`classes::ClassElement`). Before each measurement the chosen set is copied on the device into
//! the same Q, K, V (and mask) buffers, outside the timed region, so every class runs at the
//! same addresses: only the values differ.

use crate::classes::{Class, ClassElement};
use crate::{Setup, Timer};
use detattn::cuda::{CudaSlice, CudaStream, DeviceQkv, DeviceRepr, DeviceTensorMut};
use detattn::{Backend, DType, Element, Engine, Layout, bf16, f16};
use std::collections::BTreeMap;
use std::sync::Arc;

/// One input set on the device.
struct DevSet<T> {
    q: CudaSlice<T>,
    k: CudaSlice<T>,
    v: CudaSlice<T>,
    mask: Option<CudaSlice<u8>>,
}

struct GpuTimer<'a, T> {
    setup: &'a Setup,
    engine: Engine,
    stream: Arc<CudaStream>,
    sets: BTreeMap<&'static str, Vec<DevSet<T>>>,
    /// The fixed buffers every measurement runs on.
    q: CudaSlice<T>,
    k: CudaSlice<T>,
    v: CudaSlice<T>,
    mask: CudaSlice<u8>,
    out: CudaSlice<T>,
    /// Where the timed kernels came from (embedded, or the test override's folder).
    cubin: String,
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The GPU timer for the setup's path and element type on GPU `ordinal`.
pub fn timer(setup: &Setup, ordinal: usize) -> Result<Box<dyn Timer + '_>, String> {
    Ok(match setup.cfg.dtype {
        DType::F32 => Box::new(GpuTimer::<f32>::new(setup, ordinal)?),
        DType::F16 => Box::new(GpuTimer::<f16>::new(setup, ordinal)?),
        DType::Bf16 => Box::new(GpuTimer::<bf16>::new(setup, ordinal)?),
    })
}

impl<'a, T: Element + DeviceRepr + ClassElement> GpuTimer<'a, T> {
    fn new(setup: &'a Setup, ordinal: usize) -> Result<Self, String> {
        let path = setup.cfg.path;
        // Opening the engine on the TensorCore path loads and verifies its cubin now.
        let engine = Engine::new(Backend::Cuda(ordinal), path).map_err(err)?;
        let cb = engine.cuda().ok_or("not a CUDA engine")?;
        let cubin = cb.cubin_sources().join(", ");
        let stream = cb.stream();
        let up = |x: &[f32]| {
            let t: Vec<T> = x.iter().map(|&v| T::from_class_value(v)).collect();
            stream.clone_htod(&t).map_err(err)
        };
        let mut sets = BTreeMap::new();
        for (name, pool) in &setup.pools {
            let mut dev = Vec::new();
            for s in pool {
                let mask = match &s.mask {
                    Some(m) => {
                        let bytes: Vec<u8> = m.iter().map(|&b| u8::from(b)).collect();
                        Some(stream.clone_htod(&bytes).map_err(err)?)
                    }
                    None => None,
                };
                dev.push(DevSet {
                    q: up(&s.q)?,
                    k: up(&s.k)?,
                    v: up(&s.v)?,
                    mask,
                });
            }
            sets.insert(*name, dev);
        }
        let sh = setup.plain.shape();
        let mn: usize = setup.masked.mask_dims().iter().product();
        let zeros = |n: usize| stream.clone_htod(&vec![T::default(); n]).map_err(err);
        let (q, k, v, out) = (
            zeros(sh.q_elems())?,
            zeros(sh.kv_elems())?,
            zeros(sh.kv_elems())?,
            zeros(sh.q_elems())?,
        );
        let mask = stream.clone_htod(&vec![0u8; mn.max(1)]).map_err(err)?;
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
            cubin,
        })
    }
}

impl<T: Element + DeviceRepr + ClassElement> Timer for GpuTimer<'_, T> {
    fn measure(&mut self, c: Class, set: usize) -> Result<f64, String> {
        let s = &self.sets[c.name()][set];
        // Into the same device buffers every time (untimed; the stream orders the copies before
        // the launch's first event).
        self.stream.memcpy_dtod(&s.q, &mut self.q).map_err(err)?;
        self.stream.memcpy_dtod(&s.k, &mut self.k).map_err(err)?;
        self.stream.memcpy_dtod(&s.v, &mut self.v).map_err(err)?;
        if let Some(m) = &s.mask {
            self.stream.memcpy_dtod(m, &mut self.mask).map_err(err)?;
        }
        let cb = self.engine.cuda().ok_or("not a CUDA engine")?;
        let p = self.setup.problem(c);
        let mask = c.masked().then_some(&self.mask);
        let s = p.shape();
        let x = DeviceQkv::bhsd(p, &self.q, &self.k, &self.v, mask);
        let out = DeviceTensorMut::new(&mut self.out, Layout::bhsd(s.q_heads, s.q_len, s.head_dim));
        let us = cb
            .time_launch(self.setup.cfg.path, &self.stream, p, &x, out)
            .map_err(err)?;
        Ok(f64::from(us) * 1000.0)
    }

    fn describe(&self) -> String {
        format!(
            "{} (path {}, {}, CudaBackend::time_launch; kernels: {}), timer CUDA events (µs, reported in ns)",
            self.engine.describe(),
            self.setup.cfg.path,
            self.setup.cfg.dtype,
            self.cubin
        )
    }
}
