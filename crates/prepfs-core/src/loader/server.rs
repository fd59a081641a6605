//! The socket's listener and its connections: see the module documentation.

use std::io::{self, IoSlice, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::admission::{Admission, Reservation};
use super::wire::{self, Reply, Request};
use crate::fs::{Caller, Filesystem};
use crate::stats::bump;
use prepfs_base::sync::{LockExt, Mutex};

/// The most a loader's ring may take (all its slots), whatever the budget.
const MAX_RING_BYTES: u64 = 8 << 30;
/// Slots a loader may ask for.
const MAX_SLOTS: u32 = 16;
/// How long a new connection may take to send its whole hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an error frame to a refused connection may take to go out.
const REFUSAL_TIMEOUT: Duration = Duration::from_millis(500);

/// Why the socket could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum LoaderSocketError {
    #[error("loader socket {}: another process listens there", prepfs_base::escape::escaped(path))]
    InUse { path: PathBuf },
    #[error("loader socket {}: a file that is not a socket is there; prepfs never replaces it (choose another loader.socket, or remove it)", prepfs_base::escape::escaped(path))]
    NotASocket { path: PathBuf },
    #[error("loader socket {}: a stale socket of user {owner} is there; prepfs replaces only its own user's", prepfs_base::escape::escaped(path))]
    NotOurs { path: PathBuf, owner: u32 },
    #[error("loader socket directory {}: {why}", prepfs_base::escape::escaped(path))]
    UnsafeDir { path: PathBuf, why: String },
    #[error("loader socket {}: {source}", prepfs_base::escape::escaped(path))]
    Io { path: PathBuf, source: io::Error },
}

/// The listening socket, until unmount.
pub struct LoaderServer {
    listener: UnixListener,
    path: PathBuf,
    /// The socket file bound (device, inode): removed at unmount only if it is still this one.
    made: (u64, u64),
    /// Each live connection's stream, to end it at unmount.
    live: Arc<Mutex<Vec<(u64, UnixStream)>>>,
    threads: Vec<JoinHandle<()>>,
    /// Set at unmount: ends the connections' waits.
    ending: Arc<AtomicBool>,
}

/// The default path: `/run/prepfs/<mount>.sock` where `/run/prepfs` can be made, else
/// `<tmp>/prepfs-<uid>/<mount>.sock`; `<mount>` names the mountpoint. The directory must be
/// the daemon's user's and writable by no one else (another user's directory could swap the
/// socket for theirs); one that is not is refused. `public` (the socket is for every user):
/// others may search it.
pub fn default_path(mountpoint: &Path, public: bool) -> Result<PathBuf, LoaderSocketError> {
    let name = format!("{:016x}.sock", prepfs_base::hash::fnv1a64(&[mountpoint.as_os_str().as_encoded_bytes()]));
    let run = Path::new("/run/prepfs");
    let dir = if private_dir(run, public).is_ok() && nix::unistd::access(run, nix::unistd::AccessFlags::W_OK).is_ok() {
        run.to_path_buf()
    } else {
        let dir = std::env::temp_dir().join(format!("prepfs-{}", nix::unistd::getuid()));
        private_dir(&dir, public)?;
        dir
    };
    Ok(dir.join(name))
}

/// Makes `dir` (mode 0755) if missing; refuses one that is not a directory of the daemon's
/// user, writable by no one else. `public`: others may search it (a directory of ours that
/// does not let them is opened up to 0755).
fn private_dir(dir: &Path, public: bool) -> Result<(), LoaderSocketError> {
    let unsafe_dir = |why: String| LoaderSocketError::UnsafeDir { path: dir.to_path_buf(), why };
    match std::fs::DirBuilder::new().mode(0o755).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(source) => return Err(LoaderSocketError::Io { path: dir.to_path_buf(), source }),
    }
    let meta = std::fs::symlink_metadata(dir).map_err(|source| LoaderSocketError::Io { path: dir.to_path_buf(), source })?;
    let uid = nix::unistd::getuid().as_raw();
    if !meta.is_dir() {
        return Err(unsafe_dir("not a directory (a symbolic link is not followed)".into()));
    }
    if meta.uid() != uid {
        return Err(unsafe_dir(format!("owned by user {}, not by this user ({uid})", meta.uid())));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(unsafe_dir(format!("writable by others (mode {:o})", meta.mode() & 0o7777)));
    }
    if public && meta.mode() & 0o001 == 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).map_err(|source| LoaderSocketError::Io { path: dir.to_path_buf(), source })?;
    }
    Ok(())
}

impl LoaderServer {
    /// Binds the socket at `path`. A stale socket of the daemon's user left by a dead mount is
    /// replaced; a live one, another user's, or anything that is not a socket is refused.
    /// `public`: any user may connect (the mount's `allow_other`); else only the daemon's user
    /// and root.
    pub fn bind(path: &Path, public: bool) -> Result<LoaderServer, LoaderSocketError> {
        let io_err = |source| LoaderSocketError::Io { path: path.to_path_buf(), source };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io_err)?;
        }
        match std::fs::symlink_metadata(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(e)),
            Ok(meta) if !meta.file_type().is_socket() => return Err(LoaderSocketError::NotASocket { path: path.to_path_buf() }),
            Ok(meta) => {
                if UnixStream::connect(path).is_ok() {
                    return Err(LoaderSocketError::InUse { path: path.to_path_buf() });
                }
                if meta.uid() != nix::unistd::getuid().as_raw() {
                    return Err(LoaderSocketError::NotOurs { path: path.to_path_buf(), owner: meta.uid() });
                }
                std::fs::remove_file(path).map_err(io_err)?;
            }
        }
        let listener = UnixListener::bind(path).map_err(io_err)?;
        let mode = if public { 0o666 } else { 0o600 };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io_err)?;
        listener.set_nonblocking(true).map_err(io_err)?;
        let meta = std::fs::symlink_metadata(path).map_err(io_err)?;
        Ok(LoaderServer {
            listener,
            path: path.to_path_buf(),
            made: (meta.dev(), meta.ino()),
            live: Arc::default(),
            threads: Vec::new(),
            ending: Arc::default(),
        })
    }

    /// Serves a listener bound by an earlier server of this mount (a supervised restart, issue
    /// 53): the socket file at `path` stays where that server bound it.
    pub fn from_listener(listener: UnixListener, path: PathBuf) -> LoaderServer {
        let _ = listener.set_nonblocking(true);
        let made = std::fs::symlink_metadata(&path).map(|m| (m.dev(), m.ino())).unwrap_or_default();
        LoaderServer { listener, path, made, live: Arc::default(), threads: Vec::new(), ending: Arc::default() }
    }

    /// The listening descriptor, for the supervisor to hold across restarts.
    pub fn listener_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.listener)
    }

    /// Where it listens.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Accepts and serves connections until `stop`; then ends every connection, joins their
    /// threads; dropped, the server removes its socket file.
    pub fn serve(mut self, fs: &Arc<Filesystem>, stop: &AtomicBool) {
        let loader = &fs.config().loader;
        let admission = Admission::new(loader.ring_memory, loader.ring_memory_per_user);
        let mut next_id = 0u64;
        while !stop.load(Ordering::Relaxed) {
            self.threads.retain(|t| !t.is_finished());
            match self.listener.accept() {
                Ok((stream, _)) => {
                    next_id += 1;
                    self.start(fs, &admission, stream, next_id);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => {
                    prepfs_base::warn_limited!("loader-accept", error = %e, "loader socket: accept failed");
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
    }

    /// Starts a connection's thread, or refuses it: another user's on a private mount, or past
    /// the places its user may hold ([`Admission::place`]). The peer's credentials are the
    /// kernel's, taken when it connected.
    fn start(&mut self, fs: &Arc<Filesystem>, admission: &Arc<Admission>, stream: UnixStream, id: u64) {
        let counters = &fs.stats().loader;
        bump(&counters.connections, 1);
        let _ = stream.set_nonblocking(false);
        let refuse = |message: String| {
            bump(&counters.refused, 1);
            let _ = stream.set_write_timeout(Some(REFUSAL_TIMEOUT));
            let _ = wire::write_frame(&mut &stream, &Reply::Error { message });
        };
        let caller = match nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials) {
            Ok(creds) => Caller { uid: creds.uid(), gid: creds.gid() },
            Err(e) => return refuse(format!("cannot read the connection's credentials: {e}")),
        };
        let privileged = fs.is_privileged(caller);
        if !fs.config().access.allow_other && caller.uid != 0 && caller.uid != nix::unistd::getuid().as_raw() {
            return refuse("the mount is its owner's (mount with allow_other for other users)".into());
        }
        let place = match admission.place(caller.uid, privileged) {
            Ok(place) => place,
            Err(e) => return refuse(e.to_string()),
        };
        let Ok(handle) = stream.try_clone() else { return };
        self.live.lock_or_recover().push((id, handle));
        // The connection ends at unmount by its stream's shutdown; `ending` ends its waits.
        let (fs, live, stopping) = (Arc::clone(fs), Arc::clone(&self.live), Arc::clone(&self.ending));
        let spawned = prepfs_base::tasks::spawn("prepfs-loader".into(), prepfs_base::tasks::REQUEST, move || {
            bump(&fs.stats().loader.open_connections, 1);
            if let Err(e) = Connection::serve(&fs, stream, (caller, privileged), place, &stopping) {
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

impl Drop for LoaderServer {
    /// Removes the socket file, if it is still the one bound (never a file put there since).
    fn drop(&mut self) {
        if std::fs::symlink_metadata(&self.path).is_ok_and(|m| (m.dev(), m.ino()) == self.made) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// One loader's ring: `slots` slots of `slot_bytes` in one shared memory file. The file is
/// sealed at its size (the loader, which holds it too, can neither shrink it under the daemon's
/// writes nor grow it), and its pages are freed when the connection ends, whether or not the
/// loader still maps it.
struct Ring {
    fd: OwnedFd,
    ptr: *mut u8,
    len: usize,
    slot_bytes: usize,
}

impl Ring {
    fn new(slots: usize, slot_bytes: usize) -> io::Result<Ring> {
        use nix::fcntl::{fcntl, FcntlArg, SealFlag};
        use nix::sys::memfd::{memfd_create, MemFdCreateFlag};
        let len = slots * slot_bytes;
        let fd = memfd_create(c"prepfs-loader-ring", MemFdCreateFlag::MFD_CLOEXEC | MemFdCreateFlag::MFD_ALLOW_SEALING)?;
        nix::unistd::ftruncate(&fd, len as i64)?;
        fcntl(fd.as_raw_fd(), FcntlArg::F_ADD_SEALS(SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_SEAL))?;
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
        // holds, which it does not ask to be filled). The file's size is sealed, so the mapping
        // stays backed.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(k * self.slot_bytes), self.slot_bytes) }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // The pages go now, not when the loader lets go of its copy of the descriptor: the
        // memory was reserved for this connection only.
        // SAFETY: a hole punched in the file this ring owns, then the mapping made in `new`.
        unsafe {
            libc::fallocate(self.fd.as_raw_fd(), libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, 0, self.len as libc::off_t);
            libc::munmap(self.ptr.cast(), self.len);
        }
    }
}

/// Reads from a stream until a deadline for the whole read, however the bytes trickle in.
struct Deadline<'a> {
    stream: &'a UnixStream,
    until: Instant,
}

impl Read for Deadline<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "no hello in time"));
        }
        self.stream.set_read_timeout(Some(left))?;
        self.stream.read(buf)
    }
}

struct Connection;

impl Connection {
    /// Serves one connection of `caller` (`privileged`: root or the mount's owner), holding
    /// `place`, until it ends or `stop`.
    fn serve(fs: &Arc<Filesystem>, mut stream: UnixStream, (caller, privileged): (Caller, bool), mut place: Reservation, stop: &AtomicBool) -> io::Result<()> {
        let refuse = |stream: &mut UnixStream, message: String| {
            bump(&fs.stats().loader.refused, 1);
            wire::write_frame(stream, &Reply::Error { message })
        };
        // Requests are read within wire::MAX_REQUEST, their buffers growing only as bytes come
        // and dropped once each is handled: an idle connection holds none.
        let hello = wire::read_frame_within(&mut Deadline { stream: &stream, until: Instant::now() + HELLO_TIMEOUT }, wire::MAX_REQUEST);
        stream.set_read_timeout(None)?;
        let (job_name, batch, slots, view) = match hello {
            Ok(Request::Hello { version, job, batch_size, slots, view }) if version == wire::VERSION => (job, batch_size, slots, view),
            Ok(Request::Hello { version, .. }) => return refuse(&mut stream, format!("protocol version {version}; this mount speaks {}", wire::VERSION)),
            // `prepfs job reset`: one request, one answer.
            Ok(Request::ResetJob { version, job }) if version == wire::VERSION => {
                return match fs.reset_job(&job, caller) {
                    Ok(()) => wire::write_frame(&mut stream, &Reply::JobReset { job }),
                    Err(e) => refuse(&mut stream, format!("job `{job}`: {e}")),
                };
            }
            Ok(_) => return refuse(&mut stream, "say hello first".into()),
            Err(e) if matches!(e.kind(), io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock) => {
                return refuse(&mut stream, format!("no hello within {HELLO_TIMEOUT:?}"));
            }
            Err(e) => return Err(e),
        };
        let facts = match fs.loader_facts(view.as_deref()) {
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
        if let Err(e) = place.reserve(slot_bytes * u64::from(slots), privileged) {
            return refuse(&mut stream, e.to_string());
        }
        let mut ring = Ring::new(slots as usize, slot_bytes as usize)?;
        fs.stats().loader.ring_bytes.fetch_add(slot_bytes * u64::from(slots), Ordering::Relaxed);
        let _ring_counted = RingCounted { fs, bytes: slot_bytes * u64::from(slots) };
        let welcome = Reply::Welcome {
            samples: facts.samples,
            height: facts.size.height,
            width: facts.size.width,
            classes: facts.classes,
            slots,
            slot_bytes,
            batch_size: batch,
            dataset: format!("{:016x}", facts.dataset),
        };
        send_with_fd(&stream, &welcome, &ring.fd)?;
        tracing::info!(job = job.name(), uid = caller.uid, batch, slots, "loader connected");
        let nonce = prepfs_base::hash::fnv1a64(&[&caller.uid.to_le_bytes(), &std::process::id().to_le_bytes(), &(Arc::as_ptr(&job) as usize).to_le_bytes(), &(stream.as_raw_fd() as u64).to_le_bytes()]);
        let (job, mut walk) = fs.loader_walk(&job, facts.recipe, nonce);
        let mut begun = false;
        loop {
            // A resume carries a bitset of the dataset's samples: the longer bound.
            let request = match wire::read_frame_within::<Request>(&mut stream, wire::MAX_RESUME) {
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
                    Reply::Batch { slot, labels: filled.labels, names: filled.names, ids: filled.ids, end: filled.end }
                }
                Request::Resume { .. } if begun => Reply::Error {
                    message: "a resume comes before the connection's first epoch (load_state_dict before iterating)".into(),
                },
                Request::Resume { version, job: asked, view: asked_view, dataset, epoch, served } => {
                    let shown = |v: &Option<String>| v.clone().unwrap_or_else(|| "augmented".into());
                    let refused = if version != wire::VERSION {
                        Some(format!("protocol version {version}; this mount speaks {}", wire::VERSION))
                    } else if asked != job_name {
                        Some(format!("a state of job `{asked}`, not of this loader's job `{job_name}`"))
                    } else if shown(&asked_view) != shown(&view) {
                        Some(format!("a state of view `{}`, not of this loader's view `{}`", shown(&asked_view), shown(&view)))
                    } else if dataset != format!("{:016x}", facts.dataset) {
                        Some(format!("a state of another dataset (fingerprint {dataset}; this mount's samples are {:016x})", facts.dataset))
                    } else {
                        None
                    };
                    let resumed = match refused {
                        Some(message) => Err(message),
                        None => wire::served::decode(&served, facts.samples)
                            .and_then(|bits| fs.loader_resume(&job, &mut walk, caller, epoch, &bits).map_err(|e| format!("job `{job_name}`: {e}"))),
                    };
                    match resumed {
                        Ok(epoch) => {
                            begun = true;
                            Reply::Epoch { epoch }
                        }
                        Err(message) => Reply::Error { message: format!("cannot resume: {message}") },
                    }
                }
                Request::Next { slot } => Reply::Error { message: format!("slot {slot}: the ring has {slots}") },
                Request::Hello { .. } => Reply::Error { message: "hello once per connection".into() },
                Request::ResetJob { .. } => Reply::Error { message: "a reset is a connection of its own (prepfs job reset)".into() },
            };
            wire::write_frame(&mut stream, &reply)?;
            stream.flush()?;
        }
    }
}

/// Ring memory shown in `stats.json` while a connection holds it.
struct RingCounted<'a> {
    fs: &'a Filesystem,
    bytes: u64,
}

impl Drop for RingCounted<'_> {
    fn drop(&mut self) {
        self.fs.stats().loader.ring_bytes.fetch_sub(self.bytes, Ordering::Relaxed);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_directory_another_user_owns_or_others_may_write_is_refused() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let fresh = tmp.path().join("fresh");
        private_dir(&fresh, false).expect("made");
        assert_eq!(std::fs::metadata(&fresh).expect("stat").mode() & 0o777, 0o755);
        let open = tmp.path().join("open");
        std::fs::create_dir(&open).expect("mkdir");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        assert!(matches!(private_dir(&open, false), Err(LoaderSocketError::UnsafeDir { .. })));
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&fresh, &link).expect("symlink");
        assert!(matches!(private_dir(&link, false), Err(LoaderSocketError::UnsafeDir { .. })));
        if nix::unistd::getuid().is_root() {
            let theirs = tmp.path().join("theirs");
            std::fs::create_dir(&theirs).expect("mkdir");
            std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).expect("chown");
            let refused = private_dir(&theirs, false).expect_err("another user's directory");
            assert!(refused.to_string().contains("owned by user 65534"), "{refused}");
        }
    }
}
