//! Device addresses of the buffers a launch touches, with cudarc's stream-ordering guards held
//! until the launch is enqueued (both paths' launch sequences use it; each adds its own helpers
//! for its scratch buffers).

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut, SyncOnDrop};

/// Holds the guards of every buffer a launch touches until it is enqueued.
#[derive(Default)]
pub(crate) struct Guards<'a>(Vec<SyncOnDrop<'a>>);

impl<'a> Guards<'a> {
    /// The address of a buffer the launch reads.
    pub(crate) fn r<T>(&mut self, s: &'a CudaSlice<T>, st: &'a CudaStream) -> u64 {
        let (p, g) = s.device_ptr(st);
        self.0.push(g);
        p
    }

    /// The address of a buffer the launch writes.
    pub(crate) fn w<T>(&mut self, s: &'a mut CudaSlice<T>, st: &'a CudaStream) -> u64 {
        let (p, g) = s.device_ptr_mut(st);
        self.0.push(g);
        p
    }
}
