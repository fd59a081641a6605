//! The socket's listener and its connections: see the module documentation.

use std::io::{self, IoSlice, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::wire::{self, Reply, Request};
use crate::fs::{Caller, Filesystem, Walk};
use crate::stats::bump;
use crate::sync::{LockExt, Mutex};

/// Connections served at once; more are refused with an error frame.
pub(crate) const MAX_CONNECTIONS: usize = 32;
/// The most a loader's ring may take (all its slots).
const MAX_RING_BYTES: u64 = 8 << 30;
/// Slots a loader may ask for.
const MAX_SLOTS: u32 = 16;

/// Why the socket could not be opened.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LoaderSocketError {
    #[error("loader socket {path}: another process listens there")]
    InUse { path: PathBuf },
    #[error("loader socket {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
}

/// The listening socket, until unmount.
pub(crate) struct LoaderServer {
    listener: UnixListener,
    path: PathBuf,
    /// Each live connection's stream, to end it at unmount.
    live: Arc<Mutex<Vec<(u64, UnixStream)>>>,
    threads: Vec<JoinHandle<()>>,
    /// Set at unmount: ends the connections' waits.
    ending: Arc<AtomicBool>,
}

/// The default path: `/run/prepfs/<mount>.sock` where `/run/prepfs` can be made, else
/// `<tmp>/prepfs-<uid>/<mount>.sock`; `<mount>` names the mountpoint.
pub(crate) fn default_path(mountpoint: &Path) -> PathBuf {
    let name = format!("{:016x}.sock", crate::shared::fnv1a64(&[mountpoint.as_os_str().as_encoded_bytes()]));
    let run = Path::new("/run/prepfs");
    if std::fs::create_dir_all(run).is_ok() && nix::unistd::access(run, nix::unistd::AccessFlags::W_OK).is_ok() {
        return run.join(name);
    }
    std::env::temp_dir().join(format!("prepfs-{}", nix::unistd::getuid())).join(name)
}

impl LoaderServer {
    /// Binds the socket at `path` (a stale socket file left by a dead mount is replaced; a live
    /// one is refused). `public`: any user may connect (the mount's `allow_other`); else only
    /// the daemon's user and root.
    pub(crate) fn bind(path: &Path, public: bool) -> Result<LoaderServer, LoaderSocketError> {
        let io_err = |source| LoaderSocketError::Io { path: path.to_path_buf(), source };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io_err)?;
        }
        if path.exists() {
            if UnixStream::connect(path).is_ok() {
                return Err(LoaderSocketError::InUse { path: path.to_path_buf() });
            }
            std::fs::remove_file(path).map_err(io_err)?;
        }
        let listener = UnixListener::bind(path).map_err(io_err)?;
        let mode = if public { 0o666 } else { 0o600 };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io_err)?;
        listener.set_nonblocking(true).map_err(io_err)?;
        Ok(LoaderServer { listener, path: path.to_path_buf(), live: Arc::default(), threads: Vec::new(), ending: Arc::default() })
    }

    /// Where it listens.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Accepts and serves connections until `stop`; then ends every connection, joins their
    /// threads and removes the socket file.
    pub(crate) fn serve(mut self, fs: &Arc<Filesystem>, stop: &AtomicBool) {
        let mut next_id = 0u64;
        while !stop.load(Ordering::Relaxed) {
            self.threads.retain(|t| !t.is_finished());
            match self.listener.accept() {
                Ok((stream, _)) => {
                    next_id += 1;
                    self.start(fs, stream, next_id);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => {
                    crate::warn_limited!("loader-accept", error = %e, "loader socket: accept failed");
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
        self.ending.store(true, Ordering::Relaxed);
        for (_, stream) in self.live.lock_or_recover().iter() {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }

    /// Starts a connection's thread, or refuses it past [`MAX_CONNECTIONS`].
    fn start(&mut self, fs: &Arc<Filesystem>, stream: UnixStream, id: u64) {
        let counters = &fs.stats().loader;
        bump(&counters.connections, 1);
        let _ = stream.set_nonblocking(false);
        if self.threads.len() >= MAX_CONNECTIONS {
            bump(&counters.refused, 1);
            let message = format!("the mount serves {MAX_CONNECTIONS} loaders at once; try again later");
            let _ = wire::write_frame(&mut &stream, &Reply::Error { message });
            return;
        }
        let Ok(handle) = stream.try_clone() else { return };
        self.live.lock_or_recover().push((id, handle));
        // The connection ends at unmount by its stream's shutdown; `ending` ends its waits.
        let (fs, live, stopping) = (Arc::clone(fs), Arc::clone(&self.live), Arc::clone(&self.ending));
        let spawned = std::thread::Builder::new().name("prepfs-loader".into()).spawn(move || {
            bump(&fs.stats().loader.open_connections, 1);
            if let Err(e) = Connection::serve(&fs, stream, &stopping) {
                tracing::debug!(error = %e, "loader connection ended");
            }
            fs.stats().loader.open_connections.fetch_sub(1, Ordering::Relaxed);
            live.lock_or_recover().retain(|(i, _)| *i != id);
        });
        match spawned {
            Ok(t) => self.threads.push(t),
            Err(e) => tracing::warn!(error = %e, "loader socket: cannot start a connection thread"),
        }
    }
}

/// One loader's ring: `slots` slots of `slot_bytes` in one shared memory file.
struct Ring {
    fd: OwnedFd,
    ptr: *mut u8,
    len: usize,
    slot_bytes: usize,
}

impl Ring {
    fn new(slots: usize, slot_bytes: usize) -> io::Result<Ring> {
        let len = slots * slot_bytes;
        let fd = nix::sys::memfd::memfd_create(c"prepfs-loader-ring", nix::sys::memfd::MemFdCreateFlag::MFD_CLOEXEC)?;
        nix::unistd::ftruncate(&fd, len as i64)?;
        // SAFETY: a fresh shared mapping of the whole file, unmapped in Drop.
        let ptr = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd.as_raw_fd(), 0)
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Ring { fd, ptr: ptr.cast(), len, slot_bytes })
    }

    fn slot(&mut self, k: usize) -> &mut [u8] {
        // SAFETY: `k` is checked against the slot count by the caller; the mapping lives as long
        // as `self`, and only this connection's thread writes it (the loader reads only slots it
        // holds, which it does not ask to be filled).
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(k * self.slot_bytes), self.slot_bytes) }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

struct Connection;

impl Connection {
    fn serve(fs: &Arc<Filesystem>, mut stream: UnixStream, stop: &AtomicBool) -> io::Result<()> {
        let creds = nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials)?;
        let caller = Caller { uid: creds.uid(), gid: creds.gid() };
        let refuse = |stream: &mut UnixStream, message: String| {
            bump(&fs.stats().loader.refused, 1);
            wire::write_frame(stream, &Reply::Error { message })
        };
        if !fs.config().access.allow_other && caller.uid != 0 && caller.uid != nix::unistd::getuid().as_raw() {
            return refuse(&mut stream, "the mount is its owner's (mount with allow_other for other users)".into());
        }
        let (job_name, batch, slots) = match wire::read_frame(&mut stream)? {
            Request::Hello { version, job, batch_size, slots } if version == wire::VERSION => (job, batch_size, slots),
            Request::Hello { version, .. } => return refuse(&mut stream, format!("protocol version {version}; this mount speaks {}", wire::VERSION)),
            _ => return refuse(&mut stream, "say hello first".into()),
        };
        let facts = match fs.loader_facts() {
            Ok(facts) => facts,
            Err(e) => return refuse(&mut stream, e.to_string()),
        };
        if !(1..=MAX_SLOTS).contains(&slots) || batch == 0 {
            return refuse(&mut stream, format!("batch_size must be at least 1 and slots 1 to {MAX_SLOTS}"));
        }
        let slot_bytes = u64::from(batch) * facts.size.area() * 3;
        if slot_bytes * u64::from(slots) > MAX_RING_BYTES {
            return refuse(&mut stream, format!("{slots} slots of {batch} samples take more than {MAX_RING_BYTES} bytes; ask for fewer"));
        }
        let job = match fs.loader_job(&job_name, caller) {
            Ok(job) => job,
            Err(e) => return refuse(&mut stream, format!("job `{job_name}`: {e}")),
        };
        let mut ring = Ring::new(slots as usize, slot_bytes as usize)?;
        let welcome = Reply::Welcome {
            samples: facts.samples,
            height: facts.size.height,
            width: facts.size.width,
            classes: facts.classes,
            slots,
            slot_bytes,
            batch_size: batch,
        };
        send_with_fd(&stream, &welcome, &ring.fd)?;
        tracing::info!(job = job.name(), uid = caller.uid, batch, slots, "loader connected");
        let mut walk = Walk::new(crate::shared::fnv1a64(&[&caller.uid.to_le_bytes(), &std::process::id().to_le_bytes(), &(Arc::as_ptr(&job) as usize).to_le_bytes(), &(stream.as_raw_fd() as u64).to_le_bytes()]));
        let mut begun = false;
        loop {
            let request = match wire::read_frame::<Request>(&mut stream) {
                Ok(r) => r,
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
                Err(e) => return Err(e),
            };
            let reply = match request {
                Request::Begin => {
                    begun = true;
                    Reply::Epoch { epoch: fs.loader_begin(&job, &mut walk, stop) }
                }
                Request::Next { slot } if slot < slots => {
                    if !begun {
                        fs.loader_begin(&job, &mut walk, stop);
                        begun = true;
                    }
                    let filled = fs.loader_fill(&job, &mut walk, caller, ring.slot(slot as usize), batch as usize);
                    Reply::Batch { slot, labels: filled.labels, names: filled.names, end: filled.end }
                }
                Request::Next { slot } => Reply::Error { message: format!("slot {slot}: the ring has {slots}") },
                Request::Hello { .. } => Reply::Error { message: "hello once per connection".into() },
            };
            wire::write_frame(&mut stream, &reply)?;
            stream.flush()?;
        }
    }
}

/// Sends `reply` with `fd` attached (`SCM_RIGHTS` on its first bytes).
fn send_with_fd(stream: &UnixStream, reply: &Reply, fd: &OwnedFd) -> io::Result<()> {
    let mut frame = Vec::new();
    wire::write_frame(&mut frame, reply)?;
    let fds = [fd.as_raw_fd()];
    let control = [nix::sys::socket::ControlMessage::ScmRights(&fds)];
    let sent = nix::sys::socket::sendmsg::<()>(
        stream.as_raw_fd(),
        &[IoSlice::new(&frame)],
        &control,
        nix::sys::socket::MsgFlags::empty(),
        None,
    )?;
    (&*stream).write_all(&frame[sent..])
}
