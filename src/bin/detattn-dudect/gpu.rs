//! `--backend cuda`: CUDA events around one call's GPU work on device-resident inputs
//! (`CudaBackend::time_launch`), for either path and any element type the path takes.
//!
//! Every input set of every class is uploaded once, converted exactly to the element type
//! (`classes::ClassElement`). Before each measurement the chosen set is copied on the device into
//! the same Q, K, V (and mask) buffers, outside the timed region, so every class runs at the
//! same addresses: only the values differ. The copies leave the class's source buffers and the
//! copied lines in L2, dirty; unless `--keep-l2`, a buffer of four L2 sizes is overwritten after
//! them (untimed), so that their write-back, whose cost depends on the values copied, happens
//! before the timed call and the cache it starts from is the same for every class.
//! With `--page-size`, K and V are uploaded as a paged cache (the pages in one shuffled order,
//! the same block table for every set and class) and the call is
//! `CudaBackend::time_launch_paged`.

use crate::classes::{Class, ClassElement};
use crate::{Setup, Timer};
use detattn::cuda::{
    CudaSlice, CudaStream, DevicePagedKv, DeviceQkv, DeviceRepr, DeviceTensor, DeviceTensorMut,
    ValidAsZeroBits,
};
use detattn::inputs::SplitMix64;
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
    /// With `--page-size`: the pages' shape and block table (K and V above hold pages).
    pages: Option<Pages>,
    /// With `--each-kernel`: the last measurement kernel by kernel (name, ns).
    last: Vec<(String, f64)>,
    /// Unless `--keep-l2`: the buffer overwritten before every call.
    flush: Option<CudaSlice<u8>>,
    /// The copy controls (`--kernel memcpy`, `memcpy-reread`): K and V are copied into the first
    /// pair, that pair into the second, and so on, instead of calling the library. Empty: the
    /// library.
    copy_to: Vec<(CudaSlice<T>, CudaSlice<T>)>,
    /// With the copy controls, for the mask classes: the mask's copies alike (its values are those
    /// classes' secret; the kernels read it as they read K and V).
    mask_to: Vec<CudaSlice<u8>>,
}

/// A paged cache's shape: `num_pages` pages of `[heads, size, head_dim]`, sequence b's page i
/// at `table[b * max_pages + i]`, a seeded shuffle of all pages (public, as every block table).
struct Pages {
    size: usize,
    num_pages: usize,
    max_pages: usize,
    table: Vec<i32>,
}

impl Pages {
    fn new(batch: usize, kv_len: usize, size: usize, seed: u64) -> Pages {
        let max_pages = kv_len.div_ceil(size);
        let num_pages = batch * max_pages;
        let mut table: Vec<i32> = (0..num_pages as i32).collect();
        let mut g = SplitMix64::new(seed ^ 0x9A6E_D0C5);
        for i in (1..table.len()).rev() {
            table.swap(i, (g.next_u64() % (i as u64 + 1)) as usize);
        }
        Pages {
            size,
            num_pages,
            max_pages,
            table,
        }
    }

    /// `[batch, heads, kv_len, d]` rows into the pages (rows past kv_len in a last page: zero).
    fn place<T: Copy + Default>(&self, x: &[T], heads: usize, kv_len: usize, d: usize) -> Vec<T> {
        let mut out = vec![T::default(); self.num_pages * heads * self.size * d];
        let batch = x.len() / (heads * kv_len * d);
        for b in 0..batch {
            for h in 0..heads {
                for j in 0..kv_len {
                    let page = self.table[b * self.max_pages + j / self.size] as usize;
                    let dst = ((page * heads + h) * self.size + j % self.size) * d;
                    let src = ((b * heads + h) * kv_len + j) * d;
                    out[dst..dst + d].copy_from_slice(&x[src..src + d]);
                }
            }
        }
        out
    }
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The GPU timer for the setup's path and element type on GPU `ordinal`.
/// With `copies > 0`, a control: times that many device copies of K and V in a chain (each from
/// the one before) instead of the library.
pub fn timer(setup: &Setup, ordinal: usize, copies: usize) -> Result<Box<dyn Timer + '_>, String> {
    Ok(match setup.cfg.dtype {
        DType::F32 => Box::new(GpuTimer::<f32>::new(setup, ordinal, copies)?),
        DType::F16 => Box::new(GpuTimer::<f16>::new(setup, ordinal, copies)?),
        DType::Bf16 => Box::new(GpuTimer::<bf16>::new(setup, ordinal, copies)?),
    })
}

impl<'a, T: Element + DeviceRepr + ValidAsZeroBits + ClassElement> GpuTimer<'a, T> {
    fn new(setup: &'a Setup, ordinal: usize, copies: usize) -> Result<Self, String> {
        let path = setup.cfg.path;
        if setup.cfg.each_kernel && setup.cfg.page_size.is_some() {
            return Err(
                "--each-kernel times contiguous K and V only (not with --page-size)".into(),
            );
        }
        // Opening the engine on the TensorCore path loads and verifies its cubin now.
        let engine = Engine::new(Backend::Cuda(ordinal), path).map_err(err)?;
        let cb = engine.cuda().ok_or("not a CUDA engine")?;
        let cubin = cb.cubin_sources().join(", ");
        let stream = cb.stream();
        let sh = setup.plain.shape();
        let pages = setup
            .cfg
            .page_size
            .map(|n| Pages::new(sh.batch, sh.kv_len, n, setup.seed));
        let up = |t: &[T]| stream.clone_htod(t).map_err(err);
        let elems = |x: &[f32]| -> Vec<T> { x.iter().map(|&v| T::from_class_value(v)).collect() };
        // K and V, into the pages when there are pages.
        let up_kv = |x: &[f32]| match &pages {
            Some(pg) => up(&pg.place(&elems(x), sh.kv_heads, sh.kv_len, sh.head_dim)),
            None => up(&elems(x)),
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
                    q: up(&elems(&s.q))?,
                    k: up_kv(&s.k)?,
                    v: up_kv(&s.v)?,
                    mask,
                });
            }
            sets.insert(*name, dev);
        }
        let mn: usize = setup.masked.mask_dims().iter().product();
        let zeros = |n: usize| stream.clone_htod(&vec![T::default(); n]).map_err(err);
        let kv_elems = pages.as_ref().map_or(sh.kv_elems(), |pg| {
            pg.num_pages * sh.kv_heads * pg.size * sh.head_dim
        });
        let (q, k, v, out) = (
            zeros(sh.q_elems())?,
            zeros(kv_elems)?,
            zeros(kv_elems)?,
            zeros(sh.q_elems())?,
        );
        let mask = stream.clone_htod(&vec![0u8; mn.max(1)]).map_err(err)?;
        let flush = if setup.cfg.flush_l2 {
            let l2 = stream
                .context()
                .attribute(
                    cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE,
                )
                .map_err(err)?;
            let bytes = 4 * usize::try_from(l2).map_err(err)?.max(1 << 20);
            Some(stream.alloc_zeros::<u8>(bytes).map_err(err)?)
        } else {
            None
        };
        let copy_to = (0..copies)
            .map(|_| Ok((zeros(kv_elems)?, zeros(kv_elems)?)))
            .collect::<Result<Vec<_>, String>>()?;
        let mask_to = (0..copies)
            .map(|_| stream.alloc_zeros::<u8>(mn.max(1)).map_err(err))
            .collect::<Result<Vec<_>, String>>()?;
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
            pages,
            last: Vec::new(),
            flush,
            copy_to,
            mask_to,
        })
    }
}

impl<T: Element + DeviceRepr + ValidAsZeroBits + ClassElement> Timer for GpuTimer<'_, T> {
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
        if let Some(f) = &mut self.flush {
            self.stream.memset_zeros(f).map_err(err)?;
        }
        if !self.copy_to.is_empty() {
            let st = &self.stream;
            let new_event = || {
                st.context()
                    .new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))
                    .map_err(err)
            };
            let (e0, e1) = (new_event()?, new_event()?);
            e0.record(st).map_err(err)?;
            let (k2, v2) = &mut self.copy_to[0];
            st.memcpy_dtod(&self.k, k2).map_err(err)?;
            st.memcpy_dtod(&self.v, v2).map_err(err)?;
            if c.masked() {
                st.memcpy_dtod(&self.mask, &mut self.mask_to[0])
                    .map_err(err)?;
            }
            for i in 1..self.copy_to.len() {
                let (done, next) = self.copy_to.split_at_mut(i);
                let ((k, v), (k2, v2)) = (&done[i - 1], &mut next[0]);
                st.memcpy_dtod(k, k2).map_err(err)?;
                st.memcpy_dtod(v, v2).map_err(err)?;
                if c.masked() {
                    let (done, next) = self.mask_to.split_at_mut(i);
                    st.memcpy_dtod(&done[i - 1], &mut next[0]).map_err(err)?;
                }
            }
            e1.record(st).map_err(err)?;
            e1.synchronize().map_err(err)?;
            return Ok(f64::from(e0.elapsed_ms(&e1).map_err(err)?) * 1e6);
        }
        let cb = self.engine.cuda().ok_or("not a CUDA engine")?;
        let p = self.setup.problem(c);
        let mask = c.masked().then_some(&self.mask);
        let s = p.shape();
        let out = DeviceTensorMut::new(&mut self.out, Layout::bhsd(s.q_heads, s.q_len, s.head_dim));
        let path = self.setup.cfg.path;
        let us = match &self.pages {
            Some(pg) => {
                let pl = Layout::bhsd(s.kv_heads, pg.size, s.head_dim);
                let cache = DevicePagedKv {
                    k: DeviceTensor::new(&self.k, pl),
                    v: DeviceTensor::new(&self.v, pl),
                    num_pages: pg.num_pages,
                    page_size: pg.size,
                    block_table: &pg.table,
                    max_pages: pg.max_pages,
                };
                let q = DeviceTensor::new(&self.q, Layout::bhsd(s.q_heads, s.q_len, s.head_dim));
                cb.time_launch_paged(path, &self.stream, p, q, &cache, mask, out)
            }
            None if self.setup.cfg.each_kernel => {
                let x = DeviceQkv::bhsd(p, &self.q, &self.k, &self.v, mask);
                let each = cb
                    .time_launch_each(path, &self.stream, p, &x, out)
                    .map_err(err)?;
                self.last = each
                    .into_iter()
                    .map(|(k, us)| (k, f64::from(us) * 1000.0))
                    .collect();
                // The whole call: the sum of its launches (events back to back between them).
                return Ok(self.last.iter().map(|k| k.1).sum());
            }
            None => {
                let x = DeviceQkv::bhsd(p, &self.q, &self.k, &self.v, mask);
                cb.time_launch(path, &self.stream, p, &x, out)
            }
        }
        .map_err(err)?;
        Ok(f64::from(us) * 1000.0)
    }

    fn kernels(&self) -> &[(String, f64)] {
        &self.last
    }

    fn describe(&self) -> String {
        let call = match &self.pages {
            Some(pg) => format!("CudaBackend::time_launch_paged, {}-row pages", pg.size),
            None if self.setup.cfg.each_kernel => {
                "CudaBackend::time_launch_each, every kernel timed on its own".into()
            }
            None => "CudaBackend::time_launch".into(),
        };
        let l2 = if self.flush.is_some() {
            "L2 overwritten before each call"
        } else {
            "L2 kept (--keep-l2)"
        };
        if !self.copy_to.is_empty() {
            let what = match self.copy_to.len() {
                1 => "memcpy: a device copy of K and V (and the mask)".to_string(),
                n => {
                    format!("memcpy-reread: {n} device copies of K and V (and the mask) in a chain")
                }
            };
            return format!(
                "{} (CONTROL {what}, no attention; {}, {l2}), timer CUDA events (µs, reported \
                 in ns)",
                self.engine.describe(),
                self.setup.cfg.dtype
            );
        }
        format!(
            "{} (path {}, {}, {call}; {l2}; kernels: {}), timer CUDA events (µs, reported in ns)",
            self.engine.describe(),
            self.setup.cfg.path,
            self.setup.cfg.dtype,
            self.cubin
        )
    }
}

#[cfg(test)]
mod tests {
    use super::Pages;

    #[test]
    fn the_pages_hold_every_row_once_in_the_tables_order() {
        let (batch, heads, kv_len, d, size) = (3, 2, 40, 4, 16);
        let x: Vec<u32> = (1..=(batch * heads * kv_len * d) as u32).collect();
        let pg = Pages::new(batch, kv_len, size, 7);
        let mut ids = pg.table.clone();
        ids.sort_unstable();
        assert_eq!(
            ids,
            (0..pg.num_pages as i32).collect::<Vec<_>>(),
            "a permutation"
        );
        assert_ne!(pg.table, ids, "the pages are shuffled");
        let y = pg.place(&x, heads, kv_len, d);
        // Every value once (x has no zeros), zeros past each sequence's last row.
        let mut got: Vec<u32> = y.iter().copied().filter(|&v| v != 0).collect();
        got.sort_unstable();
        assert_eq!(got, x);
        assert_eq!(
            y.len() - x.len(),
            batch * heads * (pg.max_pages * size - kv_len) * d
        );
        // Key j of sequence b: row j % size of page table[b][j / size] (row 0 of x's head h
        // starts at element ((b·heads + h)·kv_len)·d).
        for (b, h, j) in [(0, 0, 0), (1, 1, 17), (2, 0, 39), (2, 1, 32)] {
            let page = pg.table[b * pg.max_pages + j / size] as usize;
            let at = ((page * heads + h) * size + j % size) * d;
            let first = (((b * heads + h) * kv_len + j) * d + 1) as u32;
            assert_eq!(y[at], first, "sequence {b}, head {h}, key {j}");
        }
    }
}
