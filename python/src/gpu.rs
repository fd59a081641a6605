//! The GPU path of `prepfs.Loader` (`device="cuda[:N]"`, cargo feature `gpu`).
//!
//! Each batch is uploaded straight from its ring slot on the loader's own stream while the
//! trainer still works on the batch before it: the ring's mapping is registered with the driver
//! once per loader (page-locked, `cuMemHostRegister`, unregistered before it is unmapped), so the
//! copy is a DMA out of the slot, and the slot is handed back to the daemon only once that copy is
//! done (an event recorded behind it, see [`SlotCopy`]). Where the driver refuses to register the
//! mapping (a memory-lock limit, a mapping type it does not take), or `PREPFS_LOADER_STAGING=1`
//! asks for it, each batch is instead copied on the host into one of two pinned staging buffers
//! (the slot is free again at once) and uploaded from there; [`Gpu::path`] says which. For
//! `float32-normalized` the uint8 pixels go to a device buffer and are normalised there by the
//! one kernel in `kernels/normalize.cu`. It all runs in the trainer's process on the device's
//! primary context, the one PyTorch and JAX use, so memory handed over through DLPack is valid
//! for them; a consumer's stream is made to wait on the upload (DLPack's `stream` argument)
//! rather than the host.
//!
//! A batch's device memory comes from the loader's own memory pool, allocated on the upload
//! stream (`cuMemAllocFromPoolAsync`), and goes back when the last view of it is gone, without
//! the host waiting: the free is queued on a second stream of the loader's, made to wait first
//! on the upload and on an event recorded on each stream a consumer passed to `__dlpack__`, so
//! it runs after the kernels already queued there (a framework's allocator does the same for its
//! own memory; one reading it on a further stream orders that itself, as with `record_stream`).
//! Only a batch exported with `stream=-1`, which names no stream, has the context synchronised
//! before its free, and a device without memory pools frees synchronously, as `cuMemFree` does.
//! The uploads never wait on training: the pool grows rather than reuse memory whose free is
//! still queued.
//!
//! libcuda is loaded at run time (cudarc's dynamic loading), so the module builds and imports on
//! every machine. cudarc panics where it cannot find libcuda: the library is looked for first,
//! and every driver call runs inside `catch_unwind`, so a machine without a driver gets a Python
//! error naming what is missing, never a crash.

use std::ffi::{c_void, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, PoisonError};

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

/// DLPack's `stream` values for CUDA's legacy and per-thread default streams, and for "no
/// synchronisation".
const LEGACY_STREAM: isize = 1;
const PER_THREAD_STREAM: isize = 2;
const NO_SYNC: isize = -1;
/// How many batches' worth of freed device memory the loader's pool keeps for the next ones
/// rather than giving it back to the driver: one being uploaded, one with the trainer, and the
/// ones freed behind it while the trainer's queued kernels still read them.
const KEPT_BATCHES: usize = 4;

/// The device's primary context and what lives in it as long as the loader or any batch it
/// made: the stream batches are uploaded on, the stream they are freed on, and the memory pool
/// they come from (`None` on a device without stream-ordered memory).
struct Context {
    device: sys::CUdevice,
    ctx: sys::CUcontext,
    ordinal: i32,
    upload: sys::CUstream,
    release: sys::CUstream,
    pool: Option<sys::CUmemoryPool>,
}

// SAFETY: CUDA contexts, streams and pools may be used from any thread.
unsafe impl Send for Context {}
unsafe impl Sync for Context {}

impl Context {
    /// Retains `ordinal`'s primary context and makes its streams and pool; the pool keeps up to
    /// `kept` bytes of freed memory.
    fn open(ordinal: i32, kept: usize) -> Result<Context, GpuError> {
        let mut ctx = guarded("opening the device's primary context", || {
            let device = result::device::get(ordinal)?;
            // SAFETY: a device just found; released in Drop.
            let ctx = unsafe { result::primary_ctx::retain(device)? };
            Ok(Context { device, ctx, ordinal, upload: std::ptr::null_mut(), release: std::ptr::null_mut(), pool: None })
        })?;
        // From here on, Drop frees whatever was made when a step fails.
        guarded("setting up the loader's streams", || {
            ctx.enter()?;
            ctx.upload = result::stream::create(result::stream::StreamKind::NonBlocking)?;
            ctx.release = result::stream::create(result::stream::StreamKind::NonBlocking)?;
            Ok(())
        })?;
        // SAFETY: a device found by `get`.
        let pools = guarded("asking whether the device has memory pools", || unsafe {
            result::device::get_attribute(ctx.device, sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED)
        })?;
        if pools == 1 {
            guarded("making the loader's device memory pool", || {
                // SAFETY: every field of the properties is a number, an enum whose 0 is a value,
                // or a pointer; the pool is destroyed in Drop.
                unsafe {
                    let mut props: sys::CUmemPoolProps = std::mem::zeroed();
                    props.allocType = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
                    props.handleTypes = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE;
                    props.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
                    props.location.id = ordinal;
                    let pool = result::mem_pool::create(&props)?;
                    ctx.pool = Some(pool);
                    let mut threshold = kept as u64;
                    result::mem_pool::set_attribute(pool, sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, (&mut threshold as *mut u64).cast())?;
                    // Frees are queued on the release stream, allocations on the upload stream:
                    // an allocation reuses memory whose free has run, and never waits on one still
                    // queued behind the trainer's kernels (the pool grows instead), so the uploads
                    // do not wait on training.
                    let (mut yes, mut no) = (1i32, 0i32);
                    result::mem_pool::set_attribute(pool, sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, (&mut yes as *mut i32).cast())?;
                    result::mem_pool::set_attribute(pool, sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES, (&mut no as *mut i32).cast())
                }
            })?;
        }
        Ok(ctx)
    }

    fn enter(&self) -> Result<(), DriverError> {
        // SAFETY: a context retained by `open` and released only in Drop.
        unsafe { result::ctx::set_current(self.ctx) }
    }

    /// `bytes` of device memory for a batch, ordered on the upload stream.
    fn alloc(&self, bytes: usize) -> Result<sys::CUdeviceptr, DriverError> {
        // SAFETY: the pool and stream live as long as self; the memory is freed by `free`.
        unsafe {
            match self.pool {
                Some(pool) => result::mem_pool::alloc_async(pool, bytes.max(1), self.upload),
                None => result::malloc_sync(bytes.max(1)),
            }
        }
    }

    /// Gives a batch's memory back once everything that may read it is done: its upload (up to
    /// `event`, which this destroys) and what its consumers queued on their streams until now.
    /// The host does not wait, except for a consumer that named no stream (see `Readers`).
    fn free(&self, ptr: sys::CUdeviceptr, event: sys::CUevent, readers: &Readers) {
        if self.pool.is_none() {
            // Without a pool, freeing is synchronous: the whole context is waited for.
            let _ = guarded("freeing a batch's device memory", || {
                self.enter()?;
                result::ctx::synchronize()?;
                // SAFETY: allocated by `alloc`, freed once here.
                unsafe {
                    result::memory_free(ptr)?;
                    result::event::destroy(event)
                }
            });
            return;
        }
        let ordered = guarded("ordering a batch's free after its readers", || {
            self.enter()?;
            // SAFETY: the event lives until the end of this function; the streams are the
            // loader's own and those the consumers named, which must still exist when the
            // tensor is dropped (see `Readers`).
            unsafe {
                result::stream::wait_event(self.release, event, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT)?;
                if readers.unnamed {
                    return result::ctx::synchronize();
                }
                // A wait takes the event as last recorded, so one event serves every stream.
                for &stream in &readers.streams {
                    result::event::record(event, stream as sys::CUstream)?;
                    result::stream::wait_event(self.release, event, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT)?;
                }
            }
            Ok(())
        });
        if ordered.is_err() {
            // A consumer's stream refused the event (gone, or of another context): nothing
            // short of the whole context is known to cover its work.
            let _ = guarded("waiting for the device before freeing a batch", || {
                self.enter()?;
                result::ctx::synchronize()
            });
        }
        let _ = guarded("freeing a batch's device memory", || {
            self.enter()?;
            // SAFETY: allocated from the pool by `alloc`, freed once here, after its readers.
            unsafe {
                result::free_async(ptr, self.release)?;
                result::event::destroy(event)
            }
        });
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        let _ = guarded("closing the loader's CUDA streams and pool", || {
            self.enter()?;
            // SAFETY: made in `open`, each destroyed once here; null ones were never made.
            unsafe {
                for stream in [self.upload, self.release] {
                    if !stream.is_null() {
                        result::stream::synchronize(stream)?;
                    }
                }
                if let Some(pool) = self.pool.take() {
                    result::mem_pool::destroy(pool)?;
                }
                for stream in [self.upload, self.release] {
                    if !stream.is_null() {
                        result::stream::destroy(stream)?;
                    }
                }
            }
            Ok(())
        });
        let _ = guarded("releasing the CUDA context", || unsafe { result::primary_ctx::release(self.device) });
    }
}

/// A pinned host buffer a batch's labels (and, on the staging path, its pixels) pass through,
/// and the event recorded once the upload out of it has been made (so it is not overwritten
/// before).
struct Staging {
    host: *mut u8,
    len: usize,
    /// For `float32-normalized`, the batch's uint8 pixels on the device, read by the kernel (0
    /// for uint8).
    device_u8: sys::CUdeviceptr,
    uploaded: sys::CUevent,
}

/// Where a consumer may read a batch: the streams passed to `__dlpack__`, and whether one
/// export named none (`stream=-1`).
///
/// DLPack's `-1` says "the producer must not synchronise": the consumer orders its reads itself
/// and names no stream, and the deleter it calls later says only that its host side is done. So
/// for such a batch nothing says where its reads are queued, and the context is synchronised
/// before its memory goes back (the host waits, for these batches only).
///
/// A named stream must outlive the tensors imported on it: an event is recorded on it when the
/// tensor goes. PyTorch's and JAX's streams live as long as the process; a stream its owner
/// destroys first (a collected `cupy.cuda.Stream`) is a handle the driver may refuse (then the
/// context is synchronised instead) or may not.
#[derive(Default)]
struct Readers {
    streams: Vec<isize>,
    unnamed: bool,
}

/// Device memory handed to a framework through DLPack: freed when the last view is gone, in
/// stream order after the upload and the consumers' reads.
pub struct DeviceBuffer {
    ptr: sys::CUdeviceptr,
    /// Recorded on the upload stream once the memory is written.
    ready: sys::CUevent,
    readers: Mutex<Readers>,
    ctx: Arc<Context>,
}

// SAFETY: device pointers and events are plain handles usable from any thread in the context.
unsafe impl Send for DeviceBuffer {}
unsafe impl Sync for DeviceBuffer {}

impl DeviceBuffer {
    /// `bytes` of batch memory and its (not yet recorded) event.
    fn new(ctx: &Arc<Context>, bytes: usize) -> Result<DeviceBuffer, DriverError> {
        let ready = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)?;
        match ctx.alloc(bytes) {
            Ok(ptr) => Ok(DeviceBuffer { ptr, ready, readers: Mutex::new(Readers::default()), ctx: Arc::clone(ctx) }),
            Err(e) => {
                // SAFETY: just made, never recorded.
                let _ = unsafe { result::event::destroy(ready) };
                Err(e)
            }
        }
    }
}

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
        let stream = stream.unwrap_or(LEGACY_STREAM);
        if stream == NO_SYNC {
            self.readers.lock().unwrap_or_else(PoisonError::into_inner).unnamed = true;
            return Ok(());
        }
        guarded("making the consumer's stream wait for the upload", || {
            self.ctx.enter()?;
            // SAFETY: the event lives as long as self; the stream is the consumer's own.
            unsafe { result::stream::wait_event(stream as sys::CUstream, self.ready, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT) }
        })
        .map_err(|e| e.0)?;
        // A per-thread default stream is the calling thread's, and the free may run on another:
        // the legacy default stream waits for every thread's, so the free waits on that.
        let stream = if stream == PER_THREAD_STREAM { LEGACY_STREAM } else { stream };
        let mut readers = self.readers.lock().unwrap_or_else(PoisonError::into_inner);
        if !readers.streams.contains(&stream) {
            readers.streams.push(stream);
        }
        Ok(())
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // The consumer is done with the tensor on the host, but its kernels may still read it:
        // the free is queued behind them.
        let readers = std::mem::take(self.readers.get_mut().unwrap_or_else(PoisonError::into_inner));
        self.ctx.free(self.ptr, self.ready, &readers);
    }
}

/// A batch on the device.
pub struct Uploaded {
    pub images: Arc<DeviceBuffer>,
    pub labels: Arc<DeviceBuffer>,
    /// Uploaded straight from its ring slot: the copy the slot must outlive.
    pub from_slot: Option<SlotCopy>,
}

/// How batches reach the device.
pub enum UploadPath {
    /// Straight from their ring slot, registered with the driver.
    Direct,
    /// Copied on the host into a pinned staging buffer first: the driver refused the ring (why),
    /// or `PREPFS_LOADER_STAGING=1` asked for it.
    Staged(String),
}

/// Set to `1`, batches go through the staging buffers even where the ring can be registered
/// (to compare the two paths, or test the fallback on a machine where registering works).
const FORCE_STAGING: &str = "PREPFS_LOADER_STAGING";

/// The loader's ring, registered with the driver (page-locked) so uploads read its slots
/// directly; unregistered when dropped, which must come before the ring is unmapped.
pub struct Pinned {
    ptr: *mut c_void,
    ctx: Arc<Context>,
}

// SAFETY: a registered range's address; the driver's calls on it may come from any thread.
unsafe impl Send for Pinned {}
unsafe impl Sync for Pinned {}

impl Drop for Pinned {
    fn drop(&mut self) {
        let _ = guarded("unregistering the loader's ring", || {
            self.ctx.enter()?;
            // SAFETY: registered in `open`, unregistered once here, after every copy queued on the
            // loader's stream (the only one reading it).
            unsafe {
                result::stream::synchronize(self.ctx.upload)?;
                sys::cuMemHostUnregister(self.ptr).result()
            }
        });
    }
}

/// The upload out of a ring slot, queued on the loader's stream: the slot must not be handed
/// back to the daemon, which writes the next batch into it, before the copy is done.
pub struct SlotCopy {
    done: sys::CUevent,
    ctx: Arc<Context>,
}

// SAFETY: an event of the loader's context, usable from any thread.
unsafe impl Send for SlotCopy {}

impl SlotCopy {
    /// Whether the copy out of the slot is done (without waiting). A driver error counts as
    /// done: a context in error runs no more copies.
    pub fn finished(&self) -> bool {
        guarded("asking whether a slot's upload is done", || {
            self.ctx.enter()?;
            // SAFETY: the event lives as long as self.
            match unsafe { result::event::query(self.done) } {
                Ok(()) => Ok(true),
                Err(DriverError(sys::CUresult::CUDA_ERROR_NOT_READY)) => Ok(false),
                Err(e) => Err(e),
            }
        })
        .unwrap_or(true)
    }

    /// Waits until the copy out of the slot is done (a driver error, as in `finished`, ends the
    /// wait).
    pub fn wait(&self) {
        let _ = guarded("waiting for a slot's upload", || {
            self.ctx.enter()?;
            // SAFETY: the event lives as long as self.
            unsafe { result::event::synchronize(self.done) }
        });
    }
}

impl Drop for SlotCopy {
    fn drop(&mut self) {
        // An event destroyed before it completes is released by the driver once it does.
        // SAFETY: made in `upload`, destroyed once here.
        let _ = guarded("destroying a slot's upload event", || unsafe { result::event::destroy(self.done) });
    }
}

/// How the pixels arrive: as they are (uint8) or normalised to float32 NCHW.
pub enum Form {
    Uint8,
    Normalized { scale: [f32; 3], shift: [f32; 3] },
}

/// The loader's device, kernel and two staging buffers (for the labels only where uploads read
/// the ring directly).
pub struct Gpu {
    ctx: Arc<Context>,
    module: sys::CUmodule,
    kernel: sys::CUfunction,
    staging: Vec<Staging>,
    turn: usize,
    path: UploadPath,
    /// The registered ring's first address and length, on the direct path.
    ring: Option<(usize, usize)>,
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

/// Opens `device` for batches of up to `pixel_bytes` pixels and `label_count` labels, arriving
/// in `form` in the slots of the ring mapped at `ring` (`ring_len` bytes). Registers the ring
/// with the driver where it can: the [`Pinned`] returned then must be dropped before the ring is
/// unmapped; where it cannot, batches go through staging buffers ([`Gpu::path`] says why).
///
/// # Safety
/// `ring` is the start of a mapping of `ring_len` bytes that stays mapped until the `Pinned`
/// returned is dropped.
pub unsafe fn open(device: &str, ring: *mut u8, ring_len: usize, pixel_bytes: usize, label_count: usize, form: &Form) -> Result<(Gpu, Option<Pinned>), GpuError> {
    let ordinal = probe(device)?;
    let image_bytes = match form {
        Form::Uint8 => pixel_bytes,
        Form::Normalized { .. } => pixel_bytes * 4,
    };
    let ctx = Arc::new(Context::open(ordinal, KEPT_BATCHES * (image_bytes + label_count * 8))?);
    let mut gpu = Gpu {
        ctx,
        module: std::ptr::null_mut(),
        kernel: std::ptr::null_mut(),
        staging: Vec::new(),
        turn: 0,
        path: UploadPath::Direct,
        ring: None,
    };
    // From here on, Gpu's Drop frees whatever was made when a step fails.
    guarded("loading the loader's kernel", || {
        gpu.ctx.enter()?;
        // SAFETY: PTX text ending in a NUL.
        gpu.module = unsafe { result::module::load_data(PTX.as_ptr().cast())? };
        let name = CString::new(KERNEL).expect("no NUL in the kernel's name");
        // SAFETY: the module just loaded.
        gpu.kernel = unsafe { result::module::get_function(gpu.module, name)? };
        Ok(())
    })?;
    let pinned = if std::env::var(FORCE_STAGING).is_ok_and(|v| v == "1") {
        gpu.path = UploadPath::Staged(format!("{FORCE_STAGING}=1 asks for the staging copy"));
        None
    } else {
        let ctx = &gpu.ctx;
        // SAFETY: the caller keeps the range mapped until the registration is dropped.
        let registered = guarded("registering the loader's ring with the driver (cuMemHostRegister)", || {
            ctx.enter()?;
            unsafe { sys::cuMemHostRegister_v2(ring.cast(), ring_len, sys::CU_MEMHOSTREGISTER_PORTABLE).result() }
        });
        match registered {
            Ok(()) => {
                gpu.ring = Some((ring as usize, ring_len));
                Some(Pinned { ptr: ring.cast(), ctx: Arc::clone(ctx) })
            }
            Err(e) => {
                gpu.path = UploadPath::Staged(e.0);
                None
            }
        }
    };
    let host_len = match gpu.path {
        UploadPath::Direct => label_count * 8,
        UploadPath::Staged(_) => pixel_bytes.next_multiple_of(8) + label_count * 8,
    };
    for _ in 0..2 {
        let staging = guarded("allocating pinned staging memory", || {
            // SAFETY: the size is non-zero; each is freed in Gpu's Drop.
            unsafe {
                let host = result::malloc_host(host_len.max(8), 0)?.cast::<u8>();
                Ok(Staging { host, len: host_len.max(8), device_u8: 0, uploaded: std::ptr::null_mut() })
            }
        })?;
        gpu.staging.push(staging);
        let last = gpu.staging.len() - 1;
        guarded("allocating device staging memory", || {
            let staging = &mut gpu.staging[last];
            staging.uploaded = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)?;
            if let Form::Normalized { .. } = form {
                // SAFETY: freed in Gpu's Drop.
                staging.device_u8 = unsafe { result::malloc_sync(pixel_bytes.max(1))? };
            }
            Ok(())
        })?;
    }
    Ok((gpu, pinned))
}

impl Gpu {
    /// How batches reach the device.
    pub fn path(&self) -> &UploadPath {
        &self.path
    }

    /// Starts uploading one batch: `pixels` (NHWC uint8, `n` images of `plane` pixels, in a
    /// slot of the ring) and its labels. Returns at once; the buffers' `ready` events mark when
    /// the work is done, and on the direct path `from_slot` when the slot may be written again.
    pub fn upload(&mut self, pixels: &[u8], labels: &[i64], plane: usize, form: &Form) -> Result<Uploaded, GpuError> {
        let n = labels.len();
        let turn = self.turn;
        self.turn = (self.turn + 1) % self.staging.len();
        let direct = match self.ring {
            Some((start, len)) => {
                let at = pixels.as_ptr() as usize;
                if at < start || at + pixels.len() > start + len {
                    return Err(GpuError("a batch's pixels lie outside the loader's registered ring".to_owned()));
                }
                true
            }
            None => false,
        };
        let label_at = if direct { 0 } else { pixels.len().next_multiple_of(8) };
        let staging = &self.staging[turn];
        if label_at + n * 8 > staging.len {
            return Err(GpuError(format!("a batch of {} bytes is larger than the staging buffer ({} bytes)", pixels.len(), staging.len)));
        }
        let ctx = &self.ctx;
        let (stream, kernel) = (ctx.upload, self.kernel);
        guarded("uploading a batch", || {
            ctx.enter()?;
            // SAFETY: the event and buffers were made in `open`; waiting on the event means the
            // last upload out of this buffer is done before it is overwritten; the copies below
            // stay inside the buffer (checked above).
            unsafe {
                result::event::synchronize(staging.uploaded)?;
                if !direct {
                    std::ptr::copy_nonoverlapping(pixels.as_ptr(), staging.host, pixels.len());
                }
                std::ptr::copy_nonoverlapping(labels.as_ptr().cast::<u8>(), staging.host.add(label_at), n * 8);
            }
            // SAFETY: inside the staging buffer (checked above); on the direct path the pixels
            // are read where they are, in the registered ring.
            let host_pixels = if direct { pixels } else { unsafe { std::slice::from_raw_parts(staging.host, pixels.len()) } };
            let host_labels = unsafe { std::slice::from_raw_parts(staging.host.add(label_at), n * 8) };
            let image_bytes = match form {
                Form::Uint8 => pixels.len(),
                Form::Normalized { .. } => pixels.len() * 4,
            };
            // Dropped on an error below, each is freed after what was queued.
            let images = DeviceBuffer::new(ctx, image_bytes)?;
            let labels_dev = DeviceBuffer::new(ctx, n * 8)?;
            let from_slot = match direct {
                true => Some(SlotCopy { done: result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)?, ctx: Arc::clone(ctx) }),
                false => None,
            };
            // SAFETY: the copies' sizes are their buffers' (allocated above, or the staging
            // buffers made in `open`, or the slot's bytes); the kernel writes `plane * n` pixels
            // of 3 floats into `images`.
            let queued = unsafe {
                (|| {
                    result::memcpy_htod_async(labels_dev.ptr, host_labels, stream)?;
                    match form {
                        Form::Uint8 => result::memcpy_htod_async(images.ptr, host_pixels, stream)?,
                        Form::Normalized { .. } => result::memcpy_htod_async(staging.device_u8, host_pixels, stream)?,
                    }
                    // The slot is read by now: it may go back before the kernel has run.
                    if let Some(copy) = &from_slot {
                        result::event::record(copy.done, stream)?;
                    }
                    let Form::Normalized { scale, shift } = form else {
                        return Ok(());
                    };
                    let mut input = staging.device_u8;
                    let mut output = images.ptr;
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
                    result::launch_kernel(kernel, (blocks, 1, 1), (256, 1, 1), 0, stream, &mut params)
                })()
            };
            // The events mark the end of whatever was queued, on success or not, so that a
            // buffer dropped on an error is not freed under a copy still running.
            // SAFETY: events made above and in `open`, on the loader's stream.
            let marked = unsafe {
                result::event::record(images.ready, stream)
                    .and_then(|()| result::event::record(labels_dev.ready, stream))
                    .and_then(|()| result::event::record(staging.uploaded, stream))
            };
            if let Err(e) = queued.and(marked) {
                // The slot goes back to the daemon when this returns: no copy may still read it.
                // SAFETY: the loader's own stream.
                let _ = unsafe { result::stream::synchronize(stream) };
                return Err(e);
            }
            Ok(Uploaded { images: Arc::new(images), labels: Arc::new(labels_dev), from_slot })
        })
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        let _ = guarded("closing the loader's GPU state", || {
            self.ctx.enter()?;
            // SAFETY: everything freed here was made in `open` and is freed once; null ones
            // were never made. The upload stream is waited for first: its copies read the
            // staging buffers.
            unsafe {
                result::stream::synchronize(self.ctx.upload)?;
                for staging in self.staging.drain(..) {
                    if !staging.host.is_null() {
                        result::free_host(staging.host.cast())?;
                    }
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
            }
            Ok(())
        });
    }
}
