//! The GPU path of `prepfs.Loader` (`device="cuda[:N]"`, cargo feature `gpu`).
//!
//! Each batch is copied once from its ring slot into one of two pinned staging buffers (the
//! slot is free again at once), uploaded from there on the loader's own stream while the
//! trainer still works on the batch before it, and, for `float32-normalized`, normalised on the
//! device by the one kernel in `kernels/normalize.cu`. It all runs in the trainer's process on
//! the device's primary context, the one PyTorch and JAX use, so memory handed over through
//! DLPack is valid for them; a consumer's stream is made to wait on the upload (DLPack's
//! `stream` argument) rather than the host.
//!
//! libcuda is loaded at run time (cudarc's dynamic loading), so the module builds and imports on
//! every machine. cudarc panics where it cannot find libcuda: the library is looked for first,
//! and every driver call runs inside `catch_unwind`, so a machine without a driver gets a Python
//! error naming what is missing, never a crash.

use std::ffi::{c_void, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use cudarc::driver::{result, sys, DriverError};

use crate::dlpack::DeviceMemory;

/// The kernel, compiled to PTX by `make ptx`; the driver compiles it for the GPU it finds.
const PTX: &str = concat!(include_str!("kernels/normalize.ptx"), "\0");
const KERNEL: &str = "nhwc_u8_to_nchw_f32";
/// DLPack's `kDLCUDA`.
const CUDA: i32 = 2;

/// What went wrong on the GPU path, in words for the Python error.
#[derive(Debug)]
pub struct GpuError(pub String);

fn describe(e: DriverError) -> String {
    let name = e.error_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|_| format!("{:?}", e.0));
    match e.error_string() {
        Ok(text) => format!("{name}: {}", text.to_string_lossy()),
        Err(_) => name,
    }
}

/// Runs driver calls, turning an error, or a panic of the bindings, into a [`GpuError`] saying
/// what was being done.
fn guarded<T>(what: &str, calls: impl FnOnce() -> Result<T, DriverError>) -> Result<T, GpuError> {
    match catch_unwind(AssertUnwindSafe(calls)) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(GpuError(format!("{what}: {}", describe(e)))),
        Err(panic) => {
            let text = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "the CUDA bindings panicked".to_owned());
            Err(GpuError(format!("{what}: {text}")))
        }
    }
}

/// `"cuda"` or `"cuda:N"`: the device's ordinal.
pub fn ordinal(device: &str) -> Option<i32> {
    match device.strip_prefix("cuda")? {
        "" => Some(0),
        rest => rest.strip_prefix(':')?.parse().ok().filter(|n: &i32| *n >= 0),
    }
}

/// The device's primary context, retained while anything made in it lives.
struct Context {
    device: sys::CUdevice,
    ctx: sys::CUcontext,
    ordinal: i32,
}

// SAFETY: CUDA contexts may be made current on any thread.
unsafe impl Send for Context {}
unsafe impl Sync for Context {}

impl Context {
    fn enter(&self) -> Result<(), DriverError> {
        // SAFETY: a context retained by `open` and released only in Drop.
        unsafe { result::ctx::set_current(self.ctx) }
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        let _ = guarded("releasing the CUDA context", || unsafe { result::primary_ctx::release(self.device) });
    }
}

/// A pinned host buffer a batch passes through, and the event recorded once the upload out of
/// it has been made (so it is not overwritten before).
struct Staging {
    host: *mut u8,
    len: usize,
    /// The batch's uint8 pixels on the device, read by the normalising kernel.
    device_u8: sys::CUdeviceptr,
    uploaded: sys::CUevent,
}

/// Device memory handed to a framework through DLPack: freed when the last view is gone.
pub struct DeviceBuffer {
    ptr: sys::CUdeviceptr,
    ready: sys::CUevent,
    ctx: Arc<Context>,
}

// SAFETY: device pointers and events are plain handles usable from any thread in the context.
unsafe impl Send for DeviceBuffer {}
unsafe impl Sync for DeviceBuffer {}

impl DeviceMemory for DeviceBuffer {
    fn ptr(&self) -> *mut c_void {
        self.ptr as *mut c_void
    }

    fn device(&self) -> (i32, i32) {
        (CUDA, self.ctx.ordinal)
    }

    fn ready_for(&self, stream: Option<isize>) -> Result<(), String> {
        // DLPack: -1 asks for no synchronisation; none means the legacy default stream (1);
        // 1 and 2 are CUDA's own handles for the legacy and per-thread default streams.
        let stream = stream.unwrap_or(1);
        if stream == -1 {
            return Ok(());
        }
        guarded("making the consumer's stream wait for the upload", || {
            self.ctx.enter()?;
            // SAFETY: the event lives as long as self; the stream is the consumer's own.
            unsafe { result::stream::wait_event(stream as sys::CUstream, self.ready, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT) }
        })
        .map_err(|e| e.0)
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // The consumer is done with the tensor on the host, but its kernels may still read it:
        // the context is synchronised before the memory goes back.
        let _ = guarded("freeing a batch's device memory", || {
            self.ctx.enter()?;
            result::ctx::synchronize()?;
            // SAFETY: allocated by `upload`, freed once here.
            unsafe {
                result::memory_free(self.ptr)?;
                result::event::destroy(self.ready)
            }
        });
    }
}

/// A batch on the device.
pub struct Uploaded {
    pub images: Arc<DeviceBuffer>,
    pub labels: Arc<DeviceBuffer>,
}

/// How the pixels arrive: as they are (uint8) or normalised to float32 NCHW.
pub enum Form {
    Uint8,
    Normalized { scale: [f32; 3], shift: [f32; 3] },
}

/// The loader's device, stream, kernel and two staging buffers.
pub struct Gpu {
    ctx: Arc<Context>,
    stream: sys::CUstream,
    module: sys::CUmodule,
    kernel: sys::CUfunction,
    staging: Vec<Staging>,
    turn: usize,
}

// SAFETY: used behind the loader's mutex, one thread at a time.
unsafe impl Send for Gpu {}

/// Whether `device` (`"cuda"`, `"cuda:N"`) can be used: the driver's library is there, starts,
/// and has that device. Returns its ordinal.
pub fn probe(device: &str) -> Result<i32, GpuError> {
    let ordinal = ordinal(device).ok_or_else(|| GpuError(format!("device {device:?}: \"cpu\", \"cuda\" or \"cuda:N\"")))?;
    // SAFETY: only tries to load the library.
    if !unsafe { sys::is_culib_present() } {
        return Err(GpuError(format!(
            "device {device:?}: the NVIDIA driver's library (libcuda.so.1) was not found on this machine: install the driver, put it on LD_LIBRARY_PATH, or use device=\"cpu\""
        )));
    }
    guarded("initialising the CUDA driver", result::init)?;
    let count = guarded("counting CUDA devices", result::device::get_count)?;
    if ordinal >= count {
        return Err(GpuError(format!("device {device:?}: this machine has {count} CUDA device(s)")));
    }
    Ok(ordinal)
}

/// Opens `device` for batches of up to `pixel_bytes` pixels and `label_count` labels.
pub fn open(device: &str, pixel_bytes: usize, label_count: usize) -> Result<Gpu, GpuError> {
    let ordinal = probe(device)?;
    let ctx = guarded("opening the device's primary context", || {
        let device = result::device::get(ordinal)?;
        // SAFETY: a device just found; released in Context's Drop.
        let ctx = unsafe { result::primary_ctx::retain(device)? };
        Ok(Context { device, ctx, ordinal })
    })?;
    let ctx = Arc::new(ctx);
    let mut gpu = Gpu { ctx, stream: std::ptr::null_mut(), module: std::ptr::null_mut(), kernel: std::ptr::null_mut(), staging: Vec::new(), turn: 0 };
    // From here on, Gpu's Drop frees whatever was made when a step fails.
    guarded("setting up the loader's stream and kernel", || {
        gpu.ctx.enter()?;
        gpu.stream = result::stream::create(result::stream::StreamKind::NonBlocking)?;
        // SAFETY: PTX text ending in a NUL.
        gpu.module = unsafe { result::module::load_data(PTX.as_ptr().cast())? };
        let name = CString::new(KERNEL).expect("no NUL in the kernel's name");
        // SAFETY: the module just loaded.
        gpu.kernel = unsafe { result::module::get_function(gpu.module, name)? };
        Ok(())
    })?;
    let len = pixel_bytes.next_multiple_of(8) + label_count * 8;
    for _ in 0..2 {
        let staging = guarded("allocating pinned staging memory", || {
            // SAFETY: sizes are non-zero; each is freed in Gpu's Drop.
            unsafe {
                let host = result::malloc_host(len, 0)?.cast::<u8>();
                let staging = Staging { host, len, device_u8: 0, uploaded: std::ptr::null_mut() };
                Ok(staging)
            }
        })?;
        gpu.staging.push(staging);
        let last = gpu.staging.len() - 1;
        guarded("allocating device staging memory", || {
            let staging = &mut gpu.staging[last];
            staging.uploaded = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)?;
            // SAFETY: freed in Gpu's Drop.
            staging.device_u8 = unsafe { result::malloc_sync(pixel_bytes.max(1))? };
            Ok(())
        })?;
    }
    Ok(gpu)
}

impl Gpu {
    /// Starts uploading one batch: `pixels` (NHWC uint8, `n` images of `plane` pixels) and its
    /// labels. Returns at once; the buffers' `ready` events mark when the work is done.
    pub fn upload(&mut self, pixels: &[u8], labels: &[i64], plane: usize, form: &Form) -> Result<Uploaded, GpuError> {
        let n = labels.len();
        let turn = self.turn;
        self.turn = (self.turn + 1) % self.staging.len();
        let label_at = pixels.len().next_multiple_of(8);
        let staging = &self.staging[turn];
        if label_at + n * 8 > staging.len {
            return Err(GpuError(format!("a batch of {} bytes is larger than the staging buffer ({} bytes)", pixels.len(), staging.len)));
        }
        let ctx = Arc::clone(&self.ctx);
        let (stream, kernel) = (self.stream, self.kernel);
        guarded("uploading a batch", || {
            ctx.enter()?;
            // SAFETY: the event and buffers were made in `open`; waiting on the event means the
            // last upload out of this buffer is done before it is overwritten; the copies below
            // stay inside the buffer (checked above).
            unsafe {
                result::event::synchronize(staging.uploaded)?;
                std::ptr::copy_nonoverlapping(pixels.as_ptr(), staging.host, pixels.len());
                std::ptr::copy_nonoverlapping(labels.as_ptr().cast::<u8>(), staging.host.add(label_at), n * 8);
                let host_pixels = std::slice::from_raw_parts(staging.host, pixels.len());
                let host_labels = std::slice::from_raw_parts(staging.host.add(label_at), n * 8);
                let labels_dev = result::malloc_sync((n * 8).max(1))?;
                result::memcpy_htod_async(labels_dev, host_labels, stream)?;
                let images_dev = match form {
                    Form::Uint8 => {
                        let images = result::malloc_sync(pixels.len().max(1))?;
                        result::memcpy_htod_async(images, host_pixels, stream)?;
                        images
                    }
                    Form::Normalized { scale, shift } => {
                        result::memcpy_htod_async(staging.device_u8, host_pixels, stream)?;
                        let out = result::malloc_sync((pixels.len() * 4).max(4))?;
                        let mut input = staging.device_u8;
                        let mut output = out;
                        let mut plane32 = plane as u32;
                        let mut images32 = n as u32;
                        let [mut s0, mut s1, mut s2] = *scale;
                        let [mut b0, mut b1, mut b2] = *shift;
                        let mut params: [*mut c_void; 10] = [
                            (&mut input as *mut u64).cast(),
                            (&mut output as *mut u64).cast(),
                            (&mut plane32 as *mut u32).cast(),
                            (&mut images32 as *mut u32).cast(),
                            (&mut s0 as *mut f32).cast(),
                            (&mut s1 as *mut f32).cast(),
                            (&mut s2 as *mut f32).cast(),
                            (&mut b0 as *mut f32).cast(),
                            (&mut b1 as *mut f32).cast(),
                            (&mut b2 as *mut f32).cast(),
                        ];
                        let pixels_total = (plane * n) as u64;
                        let blocks = pixels_total.div_ceil(256).clamp(1, 65_535) as u32;
                        result::launch_kernel(kernel, (blocks, 1, 1), (256, 1, 1), 0, stream, &mut params)?;
                        out
                    }
                };
                result::event::record(staging.uploaded, stream)?;
                let ready = |ptr| -> Result<Arc<DeviceBuffer>, DriverError> {
                    let event = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)?;
                    result::event::record(event, stream)?;
                    Ok(Arc::new(DeviceBuffer { ptr, ready: event, ctx: Arc::clone(&ctx) }))
                };
                Ok(Uploaded { images: ready(images_dev)?, labels: ready(labels_dev)? })
            }
        })
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        let _ = guarded("closing the loader's GPU state", || {
            self.ctx.enter()?;
            // SAFETY: everything freed here was made in `open` and is freed once; null ones
            // were never made.
            unsafe {
                if !self.stream.is_null() {
                    result::stream::synchronize(self.stream)?;
                }
                for staging in self.staging.drain(..) {
                    result::free_host(staging.host.cast())?;
                    if staging.device_u8 != 0 {
                        result::memory_free(staging.device_u8)?;
                    }
                    if !staging.uploaded.is_null() {
                        result::event::destroy(staging.uploaded)?;
                    }
                }
                if !self.module.is_null() {
                    result::module::unload(self.module)?;
                }
                if !self.stream.is_null() {
                    result::stream::destroy(self.stream)?;
                }
            }
            Ok(())
        });
    }
}
