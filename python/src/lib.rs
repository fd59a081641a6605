//! `prepfs.Loader`: a job's samples in batches, straight from a running prepfs mount's cache
//! over its loader socket, without a FUSE round trip per sample.
//!
//! The daemon writes each batch's pixels into a slot of a ring of shared memory this module
//! maps; the images tensor views that slot (no copy), and the slot is not asked for again until
//! every view of it is gone. The protocol is the daemon's own (the `prepfs-wire` crate). On the GPU
//! path (`gpu.rs`) a batch is uploaded out of its slot, which is held until that copy is done.
//!
//! The loader keeps which samples it has yielded in its epoch (by index, a bitset): its saved
//! state (`state_dict`, `load_state_dict`) and what it tells a restarted daemon after
//! reconnecting (`Resume`), so an epoch goes on where it was left, each sample once.

mod dlpack;
#[cfg(feature = "gpu")]
mod gpu;

#[cfg(feature = "gpu")]
use std::collections::VecDeque;
use std::io::{self, IoSliceMut};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pyo3::exceptions::{PyConnectionError, PyOSError, PyRuntimeError, PyStopIteration, PyTimeoutError, PyValueError};
use pyo3::prelude::*;

use dlpack::{DLDataType, Owner, Tensor};
use prepfs_wire as wire;
use wire::{Reply, Request};

/// The ring of slots the daemon writes into, mapped here.
struct Ring {
    ptr: *mut u8,
    len: usize,
    slot_bytes: usize,
    /// Whether each slot is held by a live batch.
    held: Vec<AtomicBool>,
    _fd: OwnedFd,
    /// The connection, kept open while any batch views the ring (the daemon frees the ring's
    /// pages when the connection ends, which would zero a batch still in use) ...
    keepalive: Mutex<Option<UnixStream>>,
    /// ... and ended by the last batch released once `close()` was called.
    closing: AtomicBool,
    /// On the GPU path, the mapping's registration with the driver (uploads read the slots
    /// directly); given up before the mapping goes, and when the connection ends.
    #[cfg(feature = "gpu")]
    pinned: Mutex<Option<gpu::Pinned>>,
}

impl Ring {
    /// After `close()`, ends the connection once no batch holds a slot.
    fn end_if_idle(&self) {
        if self.closing.load(Ordering::Acquire) && self.held.iter().all(|h| !h.load(Ordering::Acquire)) {
            // No upload reads a slot that is not held: the pages may be unpinned, so that the
            // daemon's freeing them when the connection ends frees them.
            self.unpin();
            if let Some(stream) = self.keepalive.lock().ok().and_then(|mut k| k.take()) {
                let _ = stream.shutdown(std::net::Shutdown::Both);
            }
        }
    }

    /// Whether some slot is free for the next batch.
    #[cfg(feature = "gpu")]
    fn has_free_slot(&self) -> bool {
        self.held.iter().any(|h| !h.load(Ordering::Acquire))
    }

    /// Ends the mapping's registration with the driver, if it has one.
    fn unpin(&self) {
        #[cfg(feature = "gpu")]
        drop(self.pinned.lock().ok().and_then(|mut p| p.take()));
    }
}

// SAFETY: the mapping is shared memory valid until Drop; slots are written by the daemon only
// while not held here.
unsafe impl Send for Ring {}
unsafe impl Sync for Ring {}

impl Drop for Ring {
    fn drop(&mut self) {
        self.unpin();
        // SAFETY: the mapping made in `Loader::connect`.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// A slot held by a batch; freed when the last view of it is dropped.
struct Lease {
    ring: Arc<Ring>,
    slot: usize,
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.ring.held[self.slot].store(false, Ordering::Release);
        self.ring.end_if_idle();
    }
}

/// The connection and where this loader is in its epoch.
struct Conn {
    stream: UnixStream,
    /// No epoch was begun or resumed on this connection yet (the daemon has no walk of it).
    fresh: bool,
    in_epoch: bool,
    ended: bool,
    /// `close()` was called: the connection is shut down, and the daemon has freed the ring's
    /// pages (batches still alive keep their mapping).
    closed: bool,
}

/// What the daemon said of the dataset.
#[derive(PartialEq)]
struct Facts {
    samples: u64,
    height: u32,
    width: u32,
    classes: Vec<String>,
    batch_size: u32,
    /// The samples' fingerprint (their paths in index order): a state is of this dataset.
    dataset: String,
}

/// How to reach the daemon again: what the loader was made with.
struct Dial {
    socket: PathBuf,
    job: String,
    view: String,
    batch_size: u32,
    slots: u32,
    timeout: Option<Duration>,
    /// How long to try connecting again after the connection died (zero: not at all).
    reconnect: Duration,
}

/// The epoch a resume names and the samples (by index) it names served in it.
type Resumed = (u64, Vec<u8>);

/// The version of the state `state_dict()` returns and `load_state_dict()` takes.
const STATE_VERSION: u64 = 1;

/// Where the loader is in its epochs, as its caller saw it: the samples *yielded* (returned by
/// `next()`), not those the daemon served (a batch fetched ahead is not yielded yet).
#[derive(Default)]
struct Progress {
    /// The job's epoch the loader is in (from 1; 0 before its first).
    epoch: u64,
    /// Its share of that epoch was all yielded (the epoch's last batch, or none left).
    ended: bool,
    /// The samples yielded in `epoch`, by index ([`wire::served`]).
    yielded: Vec<u8>,
    count: u64,
    /// Iteration began: `load_state_dict` is refused from then on.
    began: bool,
    /// `load_state_dict` was called: the first `iter()` resumes where the state says.
    loaded: bool,
}

/// A job's samples in batches: `for images, labels in prepfs.Loader("/mnt/prepfs", job="train")`.
///
/// Each iteration is one epoch of the loader (its share of the job's epoch when several
/// loaders, or readers of `jobs/<job>/`, serve the same job): every sample once per epoch across
/// all of them, cached ones first. `images` is NHWC uint8 (a view of shared memory) or, with
/// `dtype="float32-normalized"`, NCHW float32 normalised by `mean` and `std`; `labels` is int64,
/// the class index in ImageFolder's sorted class order. Both speak DLPack. `view` is
/// `"augmented"` or a recipe's name (`recipes:` in the mount's config): the job's epochs in
/// `jobs/<job>/<recipe>/`, the recipe's pipeline drawn per sample. Every `iter()` begins a new
/// epoch, also after one left part way. `timeout`: the seconds the daemon may take to answer
/// (the connect and welcome together, then each request); `None` or `inf`: no limit.
/// `reconnect`: the seconds to try connecting again where the connection died (a restarted
/// daemon), going on with the same epoch; 0: raise at once. `state_dict()` and
/// `load_state_dict()` save and resume where the loader is in its epoch.
#[pyclass(module = "prepfs")]
struct Loader {
    conn: Mutex<Conn>,
    /// The ring of the current connection (a new one after reconnecting; batches still alive
    /// keep theirs).
    ring: Mutex<Arc<Ring>>,
    /// Reconnections so far: the GPU path registers each new ring.
    #[cfg_attr(not(feature = "gpu"), allow(dead_code))]
    generation: std::sync::atomic::AtomicU64,
    facts: Facts,
    dial: Dial,
    progress: Mutex<Progress>,
    normalized: bool,
    drop_last: bool,
    mean: [f32; 3],
    std: [f32; 3],
    last_names: Mutex<Vec<String>>,
    /// What it was made with, for `repr()`.
    shown: Shown,
    /// On the GPU path, how batches reach the device: `"direct"` or `"staged"`.
    upload_path: Mutex<Option<&'static str>>,
    /// `device="cuda..."`: the upload's state.
    #[cfg(feature = "gpu")]
    gpu: Option<Mutex<OnGpu>>,
}

/// The arguments `repr()` shows.
struct Shown {
    mountpoint: PathBuf,
    job: String,
    device: String,
    dtype: String,
}

/// A batch the daemon wrote into a slot this loader holds.
struct Fetched {
    lease: Lease,
    labels: Vec<i64>,
    names: Vec<String>,
    /// The samples' indices, and whether it is the last of the loader's share of the epoch.
    ids: Vec<u64>,
    end: bool,
}

/// The GPU path's state: the device, the batch uploading while the trainer works on the one
/// before it, and the slots of batches already handed out whose uploads may still read them.
#[cfg(feature = "gpu")]
struct OnGpu {
    gpu: gpu::Gpu,
    form: gpu::Form,
    /// The loader's `generation` whose ring `gpu` reads.
    generation: u64,
    pending: Option<OnDevice>,
    releasing: VecDeque<Reading>,
}

/// A batch on the device (or on its way there).
#[cfg(feature = "gpu")]
struct OnDevice {
    batch: gpu::Uploaded,
    count: usize,
    names: Vec<String>,
    ids: Vec<u64>,
    end: bool,
    /// Uploaded straight from its slot: the slot, held until the copy is done.
    reading: Option<Reading>,
}

/// A slot a batch is uploaded from: handed back to the daemon (which writes the next batch into
/// it) only once the copy out of it is done.
#[cfg(feature = "gpu")]
struct Reading {
    copy: gpu::SlotCopy,
    _lease: Lease,
}

#[cfg(feature = "gpu")]
impl Drop for Reading {
    fn drop(&mut self) {
        // Before the lease, dropped after this, frees the slot.
        self.copy.wait();
    }
}

fn io_error(e: io::Error) -> PyErr {
    match e.kind() {
        io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe => {
            PyConnectionError::new_err(format!("the prepfs daemon closed the loader's connection (was the mount unmounted?): {e}"))
        }
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => PyTimeoutError::new_err(format!("the prepfs daemon did not answer in time: {e}")),
        _ => PyOSError::new_err(format!("prepfs loader: {e}")),
    }
}

/// The loader socket of the mount at `mountpoint`, and the file that named it: its
/// `.prepfs/loader.json` (every user's on an `allow_other` mount), else `.prepfs/stats.json` (a
/// mount that has no loader.json, or whose loader.json this user may not read).
fn socket_of(mountpoint: &Path) -> PyResult<(PathBuf, PathBuf)> {
    let loader = mountpoint.join(".prepfs/loader.json");
    let stats = mountpoint.join(".prepfs/stats.json");
    let (file, socket) = match std::fs::read_to_string(&loader) {
        Ok(text) => (loader.clone(), socket_in(&loader, &text, "/socket")?),
        Err(_) => {
            let text = std::fs::read_to_string(&stats)
                .map_err(|e| PyOSError::new_err(format!("{}: {e} (is a prepfs mount there?)", stats.display())))?;
            (stats.clone(), socket_in(&stats, &text, "/loader/socket")?)
        }
    };
    match socket {
        Some(path) => Ok((PathBuf::from(path), file)),
        None => Err(PyOSError::new_err(format!(
            "the mount at {} has no loader socket (loader: {{ enabled: false }}?; read {})",
            mountpoint.display(),
            file.display()
        ))),
    }
}

/// The longest finite `timeout` taken, in seconds (a year): a larger number is no wait anyone
/// means; `None` (or `float("inf")`) waits without a limit.
const MAX_TIMEOUT_S: f64 = 365.0 * 24.0 * 3600.0;

/// The `timeout` argument as a limit: `None` for no limit (`None` or `inf`); a ValueError naming
/// the argument for NaN, a number not above 0, and one past [`MAX_TIMEOUT_S`].
fn timeout_limit(timeout: Option<f64>) -> PyResult<Option<Duration>> {
    let refuse = |why: &str| {
        let shown = match timeout {
            Some(t) if t.is_nan() => "nan".to_owned(),
            Some(t) => format!("{t:?}"),
            None => "None".to_owned(),
        };
        PyValueError::new_err(format!(
            "timeout={shown}: {why}; give the seconds the daemon may take to answer (a number above 0, at most {MAX_TIMEOUT_S:.0}), or None (or float(\"inf\")) to wait without a limit"
        ))
    };
    match timeout {
        None => Ok(None),
        Some(t) if t == f64::INFINITY => Ok(None),
        Some(t) if t.is_nan() => Err(refuse("not a number")),
        Some(t) if t <= 0.0 => Err(refuse("not above 0")),
        Some(t) if t > MAX_TIMEOUT_S => Err(refuse("more than a year")),
        Some(t) => Ok(Some(Duration::from_secs_f64(t))),
    }
}

/// What is left of `deadline` (none: no limit); a timeout error once it has passed.
fn left(deadline: Option<Instant>) -> io::Result<Option<Duration>> {
    match deadline.map(|d| d.saturating_duration_since(Instant::now())) {
        Some(left) if left.is_zero() => Err(io::Error::new(io::ErrorKind::TimedOut, "the loader's timeout passed")),
        left => Ok(left),
    }
}

/// Connects to the loader socket at `path` by `deadline` (none: without a limit). A Unix
/// socket's connect blocks while the listener's backlog is full (a daemon that stopped
/// accepting), and a non-blocking one fails at once with EAGAIN, leaving nothing to poll for:
/// so the connect blocks with the time left as the socket's send timeout (SO_SNDTIMEO), which
/// bounds that wait in the kernel (it then fails with EAGAIN, returned as `TimedOut`).
/// `Interrupted`: a signal came; the caller checks Python's signals and calls again.
fn connect(path: &Path, deadline: Option<Instant>) -> io::Result<UnixStream> {
    use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType, UnixAddr};
    let addr = UnixAddr::new(path)?;
    let stream = UnixStream::from(socket(AddressFamily::Unix, SockType::Stream, SockFlag::SOCK_CLOEXEC, None)?);
    stream.set_write_timeout(left(deadline)?)?;
    match nix::sys::socket::connect(stream.as_raw_fd(), &addr) {
        Ok(()) => Ok(stream),
        Err(nix::errno::Errno::EAGAIN) if deadline.is_some() => {
            Err(io::Error::new(io::ErrorKind::TimedOut, "the daemon did not accept the connection in time"))
        }
        Err(e) => Err(e.into()),
    }
}

/// Why connecting to the loader `socket` (named by `file`) failed, as the OSError subclass its
/// errno makes (FileNotFoundError, ConnectionRefusedError, PermissionError, TimeoutError, ...),
/// with that errno, the socket as its filename, and both paths in its message.
fn connect_error(py: Python<'_>, e: &io::Error, socket: &Path, file: &Path, timeout: Option<Duration>) -> PyErr {
    let (errno, what) = match (e.raw_os_error(), e.kind()) {
        (Some(errno), _) => (errno, nix::errno::Errno::from_raw(errno).desc().to_owned()),
        (None, io::ErrorKind::TimedOut) => {
            let waited = timeout.map_or_else(String::new, |t| format!(" in {} s", t.as_secs_f64()));
            (libc::ETIMEDOUT, format!("the prepfs daemon did not accept the connection{waited} (stopped, or too busy to accept?)"))
        }
        (None, _) => (libc::EIO, e.to_string()),
    };
    let hint = match errno {
        libc::ENOENT => "; is the mount still running? it removes its socket when it ends",
        libc::ECONNREFUSED => "; no daemon listens there: has the mount ended?",
        libc::EACCES | libc::EPERM => "; the mount serves only its owner without allow_other",
        _ => "",
    };
    let message = format!("{what} (the loader socket named by {}{hint})", file.display());
    // OSError(errno, ...) is made as the subclass the errno names (PEP 3151).
    match py.get_type::<PyOSError>().call1((errno, message, socket.display().to_string())) {
        Ok(error) => PyErr::from_value(error),
        Err(e) => e,
    }
}

/// The socket's path at `pointer` in the JSON document `text` read from `file`.
fn socket_in(file: &Path, text: &str, pointer: &str) -> PyResult<Option<String>> {
    let json: serde_json::Value = serde_json::from_str(text).map_err(|e| PyOSError::new_err(format!("{}: {e}", file.display())))?;
    Ok(json.pointer(pointer).and_then(serde_json::Value::as_str).map(str::to_owned))
}

/// Reads the welcome frame and the ring's descriptor that rides with it.
fn read_welcome(stream: &UnixStream) -> io::Result<(Reply, OwnedFd)> {
    let mut buf = vec![0u8; 1 << 16];
    let mut space = nix::cmsg_space!([std::os::fd::RawFd; 1]);
    let (got, fd) = {
        let mut iov = [IoSliceMut::new(&mut buf)];
        let msg = nix::sys::socket::recvmsg::<()>(stream.as_raw_fd(), &mut iov, Some(&mut space), nix::sys::socket::MsgFlags::MSG_CMSG_CLOEXEC)?;
        let mut fd = None;
        for cmsg in msg.cmsgs()? {
            if let nix::sys::socket::ControlMessageOwned::ScmRights(fds) = cmsg {
                // SAFETY: a descriptor just received, owned by no one else.
                fd = fds.first().map(|&f| unsafe { OwnedFd::from_raw_fd(f) });
            }
        }
        (msg.bytes, fd)
    };
    if got == 0 {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the daemon closed the connection"));
    }
    buf.truncate(got);
    let reply: Reply = wire::read_frame_after(&mut &*stream, buf)?;
    match (reply, fd) {
        (r @ Reply::Welcome { .. }, Some(fd)) => Ok((r, fd)),
        (Reply::Error { message }, _) => Err(io::Error::new(io::ErrorKind::PermissionDenied, message)),
        (_, _) => Err(io::Error::new(io::ErrorKind::InvalidData, "no ring came with the welcome")),
    }
}

/// Says hello on a new connection and reads the welcome, with the ring's descriptor, by
/// `deadline` (none: no limit); the stream then answers within the loader's timeout.
fn say_hello(stream: &mut UnixStream, dial: &Dial, deadline: Option<Instant>) -> io::Result<(Reply, OwnedFd)> {
    stream.set_write_timeout(left(deadline)?)?;
    let hello = Request::Hello { version: wire::VERSION, job: dial.job.clone(), batch_size: dial.batch_size, slots: dial.slots, view: Some(dial.view.clone()) };
    wire::write_frame(stream, &hello)?;
    stream.set_read_timeout(left(deadline)?)?;
    let welcome = read_welcome(stream)?;
    stream.set_read_timeout(dial.timeout)?;
    stream.set_write_timeout(dial.timeout)?;
    Ok(welcome)
}

/// The dataset's facts a welcome gives, and its ring (`fd`) mapped; `stream` is kept open while
/// a batch views the ring.
fn map_ring(welcome: Reply, fd: OwnedFd, stream: &UnixStream) -> PyResult<(Facts, Ring)> {
    let Reply::Welcome { samples, height, width, classes, slots, slot_bytes, batch_size, dataset } = welcome else {
        return Err(PyRuntimeError::new_err("prepfs: no welcome"));
    };
    let len = slot_bytes as usize * slots as usize;
    // SAFETY: a shared mapping of the ring the daemon made this size; unmapped in Drop.
    let ptr = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd.as_raw_fd(), 0) };
    if ptr == libc::MAP_FAILED {
        return Err(PyOSError::new_err(format!("cannot map the loader's ring: {}", io::Error::last_os_error())));
    }
    let ring = Ring {
        ptr: ptr.cast(),
        len,
        slot_bytes: slot_bytes as usize,
        held: (0..slots).map(|_| AtomicBool::new(false)).collect(),
        _fd: fd,
        keepalive: Mutex::new(stream.try_clone().ok()),
        closing: AtomicBool::new(false),
        #[cfg(feature = "gpu")]
        pinned: Mutex::new(None),
    };
    Ok((Facts { samples, height, width, classes, batch_size, dataset }, ring))
}

/// The GPU state for batches uploaded out of `ring` (its registration with the driver kept in
/// the ring), and how they go: `"direct"`, or `"staged"` with a `RuntimeWarning` saying why.
#[cfg(feature = "gpu")]
fn open_gpu(py: Python<'_>, device: &str, ring: &Ring, batch_size: u32, form: &gpu::Form) -> PyResult<(gpu::Gpu, &'static str)> {
    // SAFETY: the ring's mapping; `ring` keeps it until it drops the registration.
    let (gpu, pinned) = unsafe { gpu::open(device, ring.ptr, ring.len, ring.slot_bytes, batch_size as usize, form) }
        .map_err(|e| PyRuntimeError::new_err(e.0))?;
    if let Ok(mut kept) = ring.pinned.lock() {
        *kept = pinned;
    }
    let path = match gpu.path() {
        gpu::UploadPath::Direct => "direct",
        gpu::UploadPath::Staged(why) => {
            if std::env::var_os("PREPFS_LOADER_STAGING").is_none() {
                let message = format!("prepfs.Loader: batches go through a staging copy (slower): {why}");
                let message = std::ffi::CString::new(message).map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
                PyErr::warn(py, &py.get_type::<pyo3::exceptions::PyRuntimeWarning>(), &message, 1)?;
            }
            "staged"
        }
    };
    Ok((gpu, path))
}

/// The `reconnect` argument: seconds to try connecting again after the daemon's end (0: not at
/// all), at most [`MAX_TIMEOUT_S`].
fn reconnect_limit(reconnect: f64) -> PyResult<Duration> {
    if reconnect.is_nan() || !(0.0..=MAX_TIMEOUT_S).contains(&reconnect) {
        return Err(PyValueError::new_err(format!(
            "reconnect={reconnect:?}: give the seconds to try reconnecting to a restarted daemon (0 to {MAX_TIMEOUT_S:.0}; 0: never)"
        )));
    }
    Ok(Duration::from_secs_f64(reconnect))
}

/// Whether an error says the connection itself is gone (the daemon ended, or was restarted).
fn connection_lost(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionAborted | io::ErrorKind::NotConnected
    )
}

impl Loader {
    /// The current connection's ring.
    fn ring(&self) -> Arc<Ring> {
        match self.ring.lock() {
            Ok(ring) => Arc::clone(&ring),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// Sends `request` and reads the answer: a transport error is the inner `Err` (the caller
    /// may reconnect); an error the daemon answered is raised.
    fn try_ask(&self, py: Python<'_>, request: &Request) -> PyResult<io::Result<Reply>> {
        let mut conn = self.conn.lock().map_err(|_| PyRuntimeError::new_err("the loader's connection lock is poisoned"))?;
        if conn.closed {
            return Err(closed());
        }
        let stream = &mut conn.stream;
        let reply = py.allow_threads(|| {
            wire::write_frame(stream, request)?;
            wire::read_frame::<Reply>(stream)
        });
        match reply {
            Ok(Reply::Error { message }) => Err(PyRuntimeError::new_err(format!("prepfs: {message}"))),
            other => Ok(other),
        }
    }

    /// After the connection died (`lost`): connects again, says hello again and maps the new
    /// ring, trying for `reconnect` seconds with a short backoff. A restarted daemon keeps its
    /// socket's path (a supervisor even keeps it listening, so a connect waits until the new
    /// daemon accepts); until one is there, the socket may be missing or refuse. Batches still
    /// alive keep the old ring. The new connection is fresh: the caller resumes its epoch.
    fn reconnect(&self, py: Python<'_>, lost: io::Error) -> PyResult<()> {
        let window = self.dial.reconnect;
        if window.is_zero() {
            return Err(io_error(lost));
        }
        let deadline = Instant::now() + window;
        let (mut pause, mut tries, mut last) = (Duration::from_millis(20), 0u32, lost.to_string());
        loop {
            tries += 1;
            let attempt = py.allow_threads(|| -> io::Result<(UnixStream, Reply, OwnedFd)> {
                let mut stream = connect(&self.dial.socket, Some(deadline))?;
                let (welcome, fd) = say_hello(&mut stream, &self.dial, Some(deadline))?;
                Ok((stream, welcome, fd))
            });
            match attempt {
                Ok((stream, welcome, fd)) => return self.adopt(stream, welcome, fd),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => last = e.to_string(),
            }
            py.check_signals()?;
            if Instant::now() + pause >= deadline {
                return Err(PyConnectionError::new_err(format!(
                    "the prepfs daemon closed the loader's connection and no daemon took it again within {} s at {} ({tries} tries; the last: {last}); was the mount unmounted?",
                    window.as_secs_f64(),
                    self.dial.socket.display()
                )));
            }
            py.allow_threads(|| std::thread::sleep(pause));
            pause = (pause * 2).min(Duration::from_millis(500));
        }
    }

    /// Takes a new connection, its welcome and ring in place of the dead one; refused where the
    /// daemon now serves another dataset (or shape), whose epoch cannot be continued.
    fn adopt(&self, stream: UnixStream, welcome: Reply, fd: OwnedFd) -> PyResult<()> {
        let (facts, ring) = map_ring(welcome, fd, &stream)?;
        if facts != self.facts {
            return Err(PyRuntimeError::new_err(format!(
                "prepfs: the restarted mount serves another dataset or shape ({} samples of {}x{}, dataset {}; before: {} of {}x{}, dataset {}): the loader cannot go on",
                facts.samples, facts.width, facts.height, facts.dataset, self.facts.samples, self.facts.width, self.facts.height, self.facts.dataset
            )));
        }
        let old = match self.ring.lock() {
            Ok(mut current) => std::mem::replace(&mut *current, Arc::new(ring)),
            Err(_) => return Err(PyRuntimeError::new_err("the loader's ring lock is poisoned")),
        };
        // The old ring goes once its last batch does (its connection is dead already).
        old.closing.store(true, Ordering::Release);
        old.end_if_idle();
        let mut conn = self.conn.lock().map_err(|_| PyRuntimeError::new_err("the loader's connection lock is poisoned"))?;
        conn.stream = stream;
        conn.fresh = true;
        self.generation.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// What `iter()` asks: a resume where the loader's state was loaded, or where its
    /// connection is new after a reconnection (the epoch after the loader's last, numbered on
    /// from it); else the next epoch (`Begin`). Also returns the served set a resume names.
    fn epoch_request(&self) -> PyResult<(Request, Option<Resumed>)> {
        let fresh = self.conn.lock().map(|c| c.fresh).unwrap_or(false);
        let progress = self.progress.lock().map_err(|_| PyRuntimeError::new_err("the loader's progress lock is poisoned"))?;
        let target = if progress.loaded && progress.epoch > 0 {
            // A state taken at an epoch's end (its last batch yielded, or every sample): the next
            // epoch, whole.
            if progress.ended || progress.count == self.facts.samples {
                Some((progress.epoch + 1, vec![0; progress.yielded.len()]))
            } else {
                Some((progress.epoch, progress.yielded.clone()))
            }
        } else if fresh && progress.epoch > 0 {
            Some((progress.epoch + 1, vec![0; progress.yielded.len()]))
        } else {
            None
        };
        Ok(match target {
            Some((epoch, bits)) => (self.resume_request(epoch, &bits), Some((epoch, bits))),
            None => (Request::Begin, None),
        })
    }

    fn resume_request(&self, epoch: u64, bits: &[u8]) -> Request {
        Request::Resume {
            version: wire::VERSION,
            job: self.dial.job.clone(),
            view: Some(self.dial.view.clone()),
            dataset: self.facts.dataset.clone(),
            epoch,
            served: wire::served::encode(bits),
        }
    }

    /// After reconnecting mid-epoch: resumes the loader's epoch with exactly what it yielded
    /// (batches the old daemon served that were never yielded are served again). Returns
    /// whether the epoch goes on; not where everything was yielded already.
    fn resume_after_reconnect(&self, py: Python<'_>) -> PyResult<bool> {
        loop {
            let (epoch, bits, complete) = {
                let p = self.progress.lock().map_err(|_| PyRuntimeError::new_err("the loader's progress lock is poisoned"))?;
                (p.epoch, p.yielded.clone(), p.count == self.facts.samples)
            };
            if complete {
                // Nothing left of it: the next iter() resumes the next epoch (a fresh connection).
                self.end_epoch(true);
                return Ok(false);
            }
            match self.try_ask(py, &self.resume_request(epoch, &bits))? {
                Ok(Reply::Epoch { epoch: now }) => {
                    if let Ok(mut conn) = self.conn.lock() {
                        conn.fresh = false;
                    }
                    if now != epoch {
                        self.end_epoch(true);
                        return Ok(false);
                    }
                    return Ok(true);
                }
                Ok(_) => return Err(PyRuntimeError::new_err("prepfs: expected an epoch")),
                Err(e) if connection_lost(&e) => self.reconnect(py, e)?,
                Err(e) => return Err(io_error(e)),
            }
        }
    }

    /// The loader's share of its epoch is over (`yielded`: all of it was yielded, so a state
    /// taken now resumes the next epoch).
    fn end_epoch(&self, yielded: bool) {
        if let Ok(mut conn) = self.conn.lock() {
            conn.ended = true;
            conn.in_epoch = false;
        }
        if yielded {
            if let Ok(mut p) = self.progress.lock() {
                p.ended = true;
            }
        }
    }

    /// Notes a batch's samples yielded to the caller (and, for its epoch's last, the epoch
    /// ended for the loader).
    fn note_yielded(&self, ids: &[u64], end: bool) {
        if let Ok(mut p) = self.progress.lock() {
            for &id in ids {
                if wire::served::put(&mut p.yielded, id) {
                    p.count += 1;
                }
            }
            p.ended |= end;
        }
    }

    /// Takes back [`Loader::note_yielded`] of a batch that was not yielded after all.
    #[cfg(feature = "gpu")]
    fn unnote_yielded(&self, ids: &[u64], end: bool) {
        if let Ok(mut p) = self.progress.lock() {
            for &id in ids {
                if let Some(byte) = p.yielded.get_mut((id / 8) as usize) {
                    if *byte >> (id % 8) & 1 == 1 {
                        *byte &= !(1 << (id % 8));
                        p.count -= 1;
                    }
                }
            }
            if end {
                p.ended = false;
            }
        }
    }

    /// A free slot of `ring`, held from now on.
    fn take_slot(ring: &Ring) -> PyResult<usize> {
        for (k, held) in ring.held.iter().enumerate() {
            if held.compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                return Ok(k);
            }
        }
        Err(PyRuntimeError::new_err(format!(
            "all {} slots are held by earlier batches still alive; drop them (or copy what you keep), or ask for more slots",
            ring.held.len()
        )))
    }

    /// The loader's next batch in this epoch, written by the daemon into a slot now held; none
    /// once the epoch has ended (or only a short batch is left and `drop_last` is set). Where the
    /// connection died, reconnects and resumes the epoch with what was yielded, and asks again.
    fn fetch(&self, py: Python<'_>) -> PyResult<Option<Fetched>> {
        loop {
            let (ended, closed_now) = self.conn.lock().map(|c| (c.ended || !c.in_epoch, c.closed)).unwrap_or((true, false));
            if closed_now {
                return Err(closed());
            }
            if ended {
                return Ok(None);
            }
            let ring = self.ring();
            let slot = Self::take_slot(&ring)?;
            let lease = Lease { ring, slot };
            let reply = match self.try_ask(py, &Request::Next { slot: slot as u32 })? {
                Ok(reply) => reply,
                Err(e) if connection_lost(&e) => {
                    drop(lease);
                    self.reconnect(py, e)?;
                    if !self.resume_after_reconnect(py)? {
                        return Ok(None);
                    }
                    continue;
                }
                Err(e) => return Err(io_error(e)),
            };
            let Reply::Batch { labels, names, ids, end, .. } = reply else {
                return Err(PyRuntimeError::new_err("prepfs: expected a batch"));
            };
            if ids.len() != labels.len() {
                return Err(PyRuntimeError::new_err("prepfs: a batch without its samples' indices (a daemon older than this module?)"));
            }
            let count = labels.len();
            if count == 0 || (self.drop_last && count < self.facts.batch_size as usize) {
                // Nothing more to yield in the epoch.
                self.end_epoch(end);
                return Ok(None);
            }
            if end {
                // No further batch is asked; the epoch ends for a state once this one is yielded.
                self.end_epoch(false);
            }
            return Ok(Some(Fetched { lease, labels, names, ids, end }));
        }
    }

    /// The pixels of a fetched batch, in its slot.
    fn pixels<'a>(&self, lease: &'a Lease, count: usize) -> &'a [u8] {
        let bytes = count * self.facts.height as usize * self.facts.width as usize * 3;
        // SAFETY: the slot lies inside the mapping, which the lease keeps alive, and the daemon
        // wrote `count` samples into it; it does not write a held slot.
        unsafe { std::slice::from_raw_parts(lease.ring.ptr.add(lease.slot * lease.ring.slot_bytes), bytes) }
    }

    fn set_names(&self, names: Vec<String>) {
        if let Ok(mut last) = self.last_names.lock() {
            *last = names;
        }
    }

    fn images(&self, lease: Lease, count: usize) -> Tensor {
        let (h, w) = (self.facts.height as usize, self.facts.width as usize);
        // SAFETY: the slot lies inside the mapping, which the lease keeps alive.
        let base = unsafe { lease.ring.ptr.add(lease.slot * lease.ring.slot_bytes) };
        if !self.normalized {
            let shape = vec![count as i64, h as i64, w as i64, 3];
            return Tensor::new(Owner::Slot(Arc::new(lease)), base, shape, DLDataType::U8);
        }
        // NCHW float32, (x / 255 - mean) / std, from the slot; the slot is free again after.
        let pixels = self.pixels(&lease, count);
        let plane = h * w;
        let mut out = vec![0f32; count * 3 * plane];
        let scale: [f32; 3] = std::array::from_fn(|c| 1.0 / (255.0 * self.std[c]));
        let shift: [f32; 3] = std::array::from_fn(|c| self.mean[c] / self.std[c]);
        for (n, sample) in pixels.chunks_exact(plane * 3).enumerate() {
            let dst = &mut out[n * 3 * plane..(n + 1) * 3 * plane];
            for (i, px) in sample.chunks_exact(3).enumerate() {
                for c in 0..3 {
                    dst[c * plane + i] = f32::from(px[c]) * scale[c] - shift[c];
                }
            }
        }
        drop(lease);
        Tensor::new(Owner::F32(out), std::ptr::null_mut(), vec![count as i64, 3, h as i64, w as i64], DLDataType::F32)
    }
}

#[cfg(feature = "gpu")]
impl Loader {
    /// Starts a fetched batch's upload; its slot is free again once this returns (staging
    /// path) or once the copy out of it is done (the `Reading` returned).
    fn upload(&self, on_gpu: &mut OnGpu, fetched: Fetched) -> PyResult<OnDevice> {
        let count = fetched.labels.len();
        let plane = self.facts.height as usize * self.facts.width as usize;
        let pixels = self.pixels(&fetched.lease, count);
        let mut batch = on_gpu.gpu.upload(pixels, &fetched.labels, plane, &on_gpu.form).map_err(|e| PyRuntimeError::new_err(e.0))?;
        let reading = batch.from_slot.take().map(|copy| Reading { copy, _lease: fetched.lease });
        Ok(OnDevice { batch, count, names: fetched.names, ids: fetched.ids, end: fetched.end, reading })
    }

    /// Hands back the slots whose uploads are done and, while no slot is free for the next
    /// batch, waits for the oldest upload still reading one.
    fn make_room(&self, on_gpu: &mut OnGpu) {
        on_gpu.releasing.retain(|r| !r.copy.finished());
        let ring = self.ring();
        while !ring.has_free_slot() {
            match on_gpu.releasing.pop_front() {
                Some(reading) => drop(reading),
                None => break,
            }
        }
    }

    /// The loader's next batch, its upload started; none at the epoch's end. A batch in the
    /// ring of a new connection (the loader reconnected) is uploaded by GPU state opened anew
    /// for that ring (registered with the driver in its turn).
    fn fetch_on_gpu(&self, py: Python<'_>, on_gpu: &mut OnGpu) -> PyResult<Option<OnDevice>> {
        self.make_room(on_gpu);
        let Some(fetched) = self.fetch(py)? else { return Ok(None) };
        let generation = self.generation.load(Ordering::Acquire);
        if on_gpu.generation != generation {
            // The uploads out of the old ring's slots are waited for (and the slots let go).
            on_gpu.releasing.clear();
            let (gpu, path) = open_gpu(py, &self.shown.device, &fetched.lease.ring, self.facts.batch_size, &on_gpu.form)?;
            on_gpu.gpu = gpu;
            on_gpu.generation = generation;
            if let Ok(mut shown) = self.upload_path.lock() {
                *shown = Some(path);
            }
        }
        self.upload(on_gpu, fetched).map(Some)
    }

    /// The next batch on the device; the one after it starts uploading before this returns.
    fn next_on_gpu(&self, py: Python<'_>, on_gpu: &Mutex<OnGpu>) -> PyResult<(Tensor, Tensor)> {
        // Not waited for: a waiting thread would hold the GIL the one inside needs back.
        let mut on_gpu = on_gpu.try_lock().map_err(|_| PyRuntimeError::new_err("a Loader is iterated by one thread at a time"))?;
        let current = match on_gpu.pending.take() {
            Some(batch) => batch,
            None => match self.fetch_on_gpu(py, &mut on_gpu)? {
                Some(batch) => batch,
                None => return Err(PyStopIteration::new_err(())),
            },
        };
        let OnDevice { batch, count, names, ids, end, reading } = current;
        // Its slot goes back once its upload is done, not waited for here.
        on_gpu.releasing.extend(reading);
        // Yielded before the next is fetched: a reconnection there resumes after this batch.
        self.note_yielded(&ids, end);
        on_gpu.pending = match self.fetch_on_gpu(py, &mut on_gpu) {
            Ok(pending) => pending,
            Err(e) => {
                self.unnote_yielded(&ids, end);
                return Err(e);
            }
        };
        self.set_names(names);
        let (n, h, w) = (count as i64, i64::from(self.facts.height), i64::from(self.facts.width));
        let images = match on_gpu.form {
            gpu::Form::Uint8 => Tensor::new(Owner::Device(batch.images), std::ptr::null_mut(), vec![n, h, w, 3], DLDataType::U8),
            gpu::Form::Normalized { .. } => Tensor::new(Owner::Device(batch.images), std::ptr::null_mut(), vec![n, 3, h, w], DLDataType::F32),
        };
        let labels = Tensor::new(Owner::Device(batch.labels), std::ptr::null_mut(), vec![n], DLDataType::I64);
        Ok((images, labels))
    }
}

#[pymethods]
impl Loader {
    #[new]
    #[pyo3(signature = (mountpoint, job, view="augmented", batch_size=256, device="cpu", dtype="uint8", drop_last=false, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225), slots=4, timeout=Some(600.0), reconnect=30.0))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        mountpoint: PathBuf,
        job: &str,
        view: &str,
        batch_size: u32,
        device: &str,
        dtype: &str,
        drop_last: bool,
        mean: (f32, f32, f32),
        std: (f32, f32, f32),
        slots: u32,
        timeout: Option<f64>,
        reconnect: f64,
    ) -> PyResult<Loader> {
        // `augmented`, or a recipe's name: the daemon says which views it has.
        if matches!(view, "encoded" | "decoded" | "") {
            return Err(PyValueError::new_err(format!("view {view:?}: the loader serves \"augmented\" or a recipe's view (every sample the same shape)")));
        }
        let normalized = match dtype {
            "uint8" => false,
            "float32-normalized" => true,
            other => return Err(PyValueError::new_err(format!("dtype {other:?}: \"uint8\" (NHWC) or \"float32-normalized\" (NCHW)"))),
        };
        let on_gpu = match device {
            "cpu" => false,
            d if d == "cuda" || d.strip_prefix("cuda:").is_some_and(|n| n.parse::<u32>().is_ok()) => true,
            other => return Err(PyValueError::new_err(format!("device {other:?}: \"cpu\", \"cuda\" or \"cuda:N\""))),
        };
        #[cfg(not(feature = "gpu"))]
        if on_gpu {
            return Err(gpu_unavailable(device));
        }
        // A device that cannot be used is said before the daemon is asked anything.
        #[cfg(feature = "gpu")]
        if on_gpu {
            gpu::probe(device).map_err(|e| PyRuntimeError::new_err(e.0))?;
        }
        if [std.0, std.1, std.2].iter().any(|s| *s <= 0.0) {
            return Err(PyValueError::new_err("std must be positive"));
        }
        let timeout = timeout_limit(timeout)?;
        let reconnect = reconnect_limit(reconnect)?;
        let (socket, named_by) = socket_of(&mountpoint)?;
        // The whole handshake (connect, hello, welcome) within the timeout; each request after
        // it within the timeout again.
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut stream = loop {
            match py.allow_threads(|| connect(&socket, deadline)) {
                Ok(stream) => break stream,
                // A signal (Ctrl-C): raised here if Python's handler says so, else connect again.
                Err(e) if e.kind() == io::ErrorKind::Interrupted => py.check_signals()?,
                Err(e) => return Err(connect_error(py, &e, &socket, &named_by, timeout)),
            }
        };
        let dial = Dial { socket, job: job.to_owned(), view: view.to_owned(), batch_size, slots, timeout, reconnect };
        let connected = py.allow_threads(|| say_hello(&mut stream, &dial, deadline));
        let (welcome, fd) = connected.map_err(|e| match e.kind() {
            io::ErrorKind::PermissionDenied => PyRuntimeError::new_err(format!("prepfs: {e}")),
            _ => io_error(e),
        })?;
        let (facts, ring) = map_ring(welcome, fd, &stream)?;
        #[cfg(feature = "gpu")]
        let batch_size = facts.batch_size;
        #[allow(unused_mut)]
        let mut upload_path = None;
        let (mean, std) = ([mean.0, mean.1, mean.2], [std.0, std.1, std.2]);
        #[cfg(feature = "gpu")]
        let gpu = match on_gpu {
            false => None,
            true => {
                let form = match normalized {
                    false => gpu::Form::Uint8,
                    true => gpu::Form::Normalized {
                        scale: std::array::from_fn(|c| 1.0 / (255.0 * std[c])),
                        shift: std::array::from_fn(|c| -mean[c] / std[c]),
                    },
                };
                let (gpu, path) = open_gpu(py, device, &ring, batch_size, &form)?;
                upload_path = Some(path);
                Some(Mutex::new(OnGpu { gpu, form, generation: 0, pending: None, releasing: VecDeque::new() }))
            }
        };
        let bits = wire::served::bitset_len(facts.samples);
        Ok(Loader {
            conn: Mutex::new(Conn { stream, fresh: true, in_epoch: false, ended: false, closed: false }),
            ring: Mutex::new(Arc::new(ring)),
            generation: Default::default(),
            facts,
            dial,
            progress: Mutex::new(Progress { yielded: vec![0; bits], ..Progress::default() }),
            normalized,
            drop_last,
            mean,
            std,
            last_names: Mutex::new(Vec::new()),
            shown: Shown { mountpoint, job: job.to_owned(), device: device.to_owned(), dtype: dtype.to_owned() },
            upload_path: Mutex::new(upload_path),
            #[cfg(feature = "gpu")]
            gpu,
        })
    }

    /// Begins the loader's next epoch: a new one, also where the last was left part way (the
    /// daemon ends an epoch no other loader of the job walks; see `fs/loader.rs`).
    fn __iter__(slf: PyRef<'_, Self>, py: Python<'_>) -> PyResult<Py<Loader>> {
        // A batch uploaded ahead belongs to the epoch left behind.
        #[cfg(feature = "gpu")]
        if let Some(Ok(mut on_gpu)) = slf.gpu.as_ref().map(|g| g.try_lock()) {
            on_gpu.pending = None;
        }
        if let Ok(mut p) = slf.progress.lock() {
            p.began = true;
        }
        loop {
            let (request, target) = slf.epoch_request()?;
            let epoch = match slf.try_ask(py, &request)? {
                Ok(Reply::Epoch { epoch }) => epoch,
                Ok(_) => return Err(PyRuntimeError::new_err("prepfs: expected an epoch")),
                // The daemon was restarted: the new connection resumes (epoch_request).
                Err(e) if connection_lost(&e) => {
                    slf.reconnect(py, e)?;
                    continue;
                }
                Err(e) => return Err(io_error(e)),
            };
            if let Ok(mut p) = slf.progress.lock() {
                match target {
                    // Resumed where asked: what was yielded before counts in this epoch.
                    Some((asked, bits)) if asked == epoch => {
                        p.count = wire::served::count(&bits);
                        p.yielded = bits;
                    }
                    _ => {
                        p.yielded.fill(0);
                        p.count = 0;
                    }
                }
                (p.epoch, p.ended, p.loaded) = (epoch, false, false);
            }
            if let Ok(mut conn) = slf.conn.lock() {
                conn.fresh = false;
                conn.in_epoch = true;
                conn.ended = false;
            }
            return Ok(slf.into());
        }
    }

    /// The next batch: `(images, labels)`.
    fn __next__(&self, py: Python<'_>) -> PyResult<(Tensor, Tensor)> {
        #[cfg(feature = "gpu")]
        if let Some(on_gpu) = &self.gpu {
            return self.next_on_gpu(py, on_gpu);
        }
        let Some(Fetched { lease, labels, names, ids, end }) = self.fetch(py)? else {
            return Err(PyStopIteration::new_err(()));
        };
        self.note_yielded(&ids, end);
        self.set_names(names);
        let count = labels.len();
        let images = self.images(lease, count);
        let labels = Tensor::new(Owner::I64(labels), std::ptr::null_mut(), vec![count as i64], DLDataType::I64);
        Ok((images, labels))
    }

    /// Batches in one epoch of the whole job (a loader sharing the job with others gets fewer).
    fn __len__(&self) -> usize {
        let (n, b) = (self.facts.samples as usize, self.facts.batch_size.max(1) as usize);
        if self.drop_last {
            n / b
        } else {
            n.div_ceil(b)
        }
    }

    /// Where the loader is in its epochs, as a plain dict (JSON-able, picklable), for
    /// `load_state_dict` on a new loader of the same job, view and dataset (a training run
    /// restarted from its checkpoint): the job, the view, the dataset's fingerprint and sample
    /// count, the job's epoch the loader is in, whether its share of that epoch was all yielded,
    /// and exactly which samples it yielded in it (`yielded`: a bitset of sample indices, zlib
    /// and base64; batches fetched ahead and not yet returned are not in it). May be called
    /// between any two batches.
    fn state_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        let p = self.progress.lock().map_err(|_| PyRuntimeError::new_err("the loader's progress lock is poisoned"))?;
        let state = pyo3::types::PyDict::new(py);
        state.set_item("version", STATE_VERSION)?;
        state.set_item("job", &self.dial.job)?;
        state.set_item("view", &self.dial.view)?;
        state.set_item("dataset", &self.facts.dataset)?;
        state.set_item("samples", self.facts.samples)?;
        state.set_item("epoch", p.epoch)?;
        state.set_item("epoch_ended", p.ended)?;
        state.set_item("samples_yielded", p.count)?;
        state.set_item("yielded", wire::served::encode(&p.yielded))?;
        Ok(state)
    }

    /// Takes a state from `state_dict()` (of a loader of the same job, view and dataset; else
    /// `ValueError`) before this loader is iterated (after: `RuntimeError`): its first `iter()`
    /// then resumes that epoch, serving only the samples the state does not hold as yielded,
    /// each once; a state taken at an epoch's end (its last batch yielded) resumes with the
    /// next epoch, whole. A state of a loader never iterated changes nothing.
    fn load_state_dict(&self, state: &Bound<'_, PyAny>) -> PyResult<()> {
        if self.closed() {
            return Err(closed());
        }
        let mut p = self.progress.lock().map_err(|_| PyRuntimeError::new_err("the loader's progress lock is poisoned"))?;
        if p.began {
            return Err(PyRuntimeError::new_err(format!(
                "load_state_dict comes before the loader is iterated, and this one has been (it is in epoch {}): make a new prepfs.Loader and call load_state_dict on it first",
                p.epoch
            )));
        }
        let field = |key: &str| -> PyResult<Bound<'_, PyAny>> {
            state.get_item(key).map_err(|_| PyValueError::new_err(format!("not a prepfs.Loader state (from state_dict()): it has no `{key}`")))
        };
        let refuse = |what: String| PyValueError::new_err(format!("a prepfs.Loader state {what}"));
        let version: u64 = field("version")?.extract().map_err(|_| refuse("whose version is not a number".into()))?;
        if version != STATE_VERSION {
            return Err(refuse(format!("of version {version}; this prepfs reads version {STATE_VERSION}")));
        }
        let job: String = field("job")?.extract()?;
        if job != self.dial.job {
            return Err(refuse(format!("of job {job:?}, not of this loader's job {:?}", self.dial.job)));
        }
        let view: String = field("view")?.extract()?;
        if view != self.dial.view {
            return Err(refuse(format!("of view {view:?}, not of this loader's view {:?}", self.dial.view)));
        }
        let (dataset, samples): (String, u64) = (field("dataset")?.extract()?, field("samples")?.extract()?);
        if dataset != self.facts.dataset || samples != self.facts.samples {
            return Err(refuse(format!(
                "of another dataset ({samples} samples, fingerprint {dataset}; this mount's: {} samples, fingerprint {})",
                self.facts.samples, self.facts.dataset
            )));
        }
        let epoch: u64 = field("epoch")?.extract()?;
        let ended: bool = field("epoch_ended")?.extract()?;
        let text: String = field("yielded")?.extract()?;
        let yielded = wire::served::decode(&text, samples).map_err(|e| refuse(format!("whose yielded samples cannot be read: {e}")))?;
        let count = wire::served::count(&yielded);
        if let Ok(Some(said)) = state.get_item("samples_yielded").and_then(|v| v.extract::<Option<u64>>()) {
            if said != count {
                return Err(refuse(format!("that says {said} samples yielded but holds {count}")));
            }
        }
        *p = Progress { epoch, ended, yielded, count, began: false, loaded: epoch > 0 };
        Ok(())
    }

    /// ImageFolder's classes: a label indexes this list.
    #[getter]
    fn classes(&self) -> Vec<String> {
        self.facts.classes.clone()
    }

    /// Samples in the dataset.
    #[getter]
    fn samples(&self) -> u64 {
        self.facts.samples
    }

    /// The last batch's samples, as paths relative to the source.
    #[getter]
    fn names(&self) -> Vec<String> {
        self.last_names.lock().map(|n| n.clone()).unwrap_or_default()
    }

    /// On the GPU path, how batches reach the device: `"direct"` (uploaded straight from the
    /// ring, registered with the driver) or `"staged"` (copied through a pinned staging buffer
    /// first: the driver refused the ring, or `PREPFS_LOADER_STAGING=1`); `None` on the CPU.
    #[getter]
    fn gpu_upload(&self) -> Option<&'static str> {
        self.upload_path.lock().ok().and_then(|p| *p)
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.conn.lock().map(|c| c.closed).unwrap_or(true)
    }

    /// Ends the connection: the daemon gives the loader's place and ring memory back to other
    /// loaders, at once, or when the last batch still alive is dropped (until then it stays
    /// readable). Iterating afterwards raises ValueError. Closing twice does nothing.
    fn close(&self) {
        #[cfg(feature = "gpu")]
        if let Some(Ok(mut on_gpu)) = self.gpu.as_ref().map(|g| g.try_lock()) {
            on_gpu.pending = None;
            on_gpu.releasing.clear();
        }
        if let Ok(mut conn) = self.conn.lock() {
            conn.closed = true;
            conn.in_epoch = false;
            conn.ended = true;
        }
        let ring = self.ring();
        ring.closing.store(true, Ordering::Release);
        ring.end_if_idle();
    }

    /// `with prepfs.Loader(...) as batches:` closes the loader when the block ends.
    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, _exc: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close();
        false
    }

    fn __repr__(&self) -> String {
        let state = if self.closed() { "closed" } else { "open" };
        format!(
            "prepfs.Loader(mountpoint={:?}, job={:?}, batch_size={}, device={:?}, dtype={:?}, samples={}, classes={}, {state})",
            self.shown.mountpoint.display().to_string(),
            self.shown.job,
            self.facts.batch_size,
            self.shown.device,
            self.shown.dtype,
            self.facts.samples,
            self.facts.classes.len(),
        )
    }
}

/// What iterating a closed loader raises (as a closed file does).
fn closed() -> PyErr {
    PyValueError::new_err("the prepfs.Loader is closed")
}

/// `device="cuda..."` in a build without the `gpu` feature.
#[cfg(not(feature = "gpu"))]
fn gpu_unavailable(device: &str) -> PyErr {
    PyRuntimeError::new_err(format!(
        "device {device:?}: this prepfs module was built without GPU support (the `gpu` feature); use device=\"cpu\" and move batches with torch.from_dlpack(images).to(\"cuda\", non_blocking=True)"
    ))
}

#[pymodule]
fn prepfs(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Loader>()?;
    m.add_class::<Tensor>()?;
    // Whether this build has the GPU path (`device="cuda..."`).
    m.add("gpu_support", cfg!(feature = "gpu"))?;
    Ok(())
}
