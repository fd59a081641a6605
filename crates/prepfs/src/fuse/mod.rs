//! The FUSE adapter: a thin layer from `fuser` callbacks onto [`Filesystem`].
//!
//! Each callback resolves to one core call and one reply. Every errno of a failure is the
//! failure's own ([`ToErrno`], decided beside each error type), the read-only mount's refusals
//! included ([`Error::ReadOnly`]); the adapter picks none. Its only errnos of its own are plain
//! protocol answers, not failures: `ENOSYS` to FLUSH (so the kernel stops sending it), `ENOTTY`
//! to ioctl (no file is a terminal), `ENODATA` to getxattr (no file has extended attributes).
//!
//! Kernel passthrough (Linux 6.9+): an open whose handle the core backs with a file (the
//! source's, or a memory file of the served bytes) is answered with that file's backing id
//! (`backings.rs`), and its reads never reach the daemon. Where the kernel does not offer it or
//! refuses a backing file, the mount says so once and serves reads itself.
//!
//! Each request runs in a `tracing` span of its operation at debug level, reads and releases at
//! trace (`--log-level prepfs=debug` shows each failure with its operation, inode and errno;
//! disabled, a span costs a level check), and each failure is counted by operation and errno (`prepfs_fuse_errors_total{op,errno}`,
//! `stats.json`'s `fuse_errors`; [`failed`]). The protocol answers above are not failures and
//! are not counted.
//!
//! Opens that decode or augment run on the decode threads (`pool.rs`) with the reply moved there,
//! so a slow decode never holds a FUSE thread: the other requests (lookups, reads of open files,
//! listings) keep flowing. Opens the cache answers as it is are replied in place (a thread hop
//! less per cache hit).

mod backings;
mod gate;
mod pool;

use std::ffi::OsStr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo, InitFlags, KernelConfig, LockOwner,
    OpenAccMode, OpenFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, WriteFlags,
};

use backings::Backings;
pub(crate) use backings::{close_left_behind, LowestLive};
pub(crate) use gate::Gate;
pub(crate) use pool::OpenPool;

use prepfs_core::drain::Activity;
use prepfs_core::error::{Error, ToErrno};
use prepfs_core::stats::{bump, FuseOp};
use prepfs_core::fs::{Attr, CachePolicy, Caller, Filesystem, Kind, Opened};

/// How long the kernel may keep names and attributes. A source file that changes is found at
/// its next open (or lookup) and the kernel is told to drop what it cached of it (see
/// `mount.rs`'s notifier); a change of owner or mode shows within this time.
const TTL: Duration = Duration::from_secs(60);
/// For nodes that may go away soon (a job's directory, retired when idle or by rmdir).
const VOLATILE_TTL: Duration = Duration::from_secs(1);

/// `fuser::Filesystem` over the core.
pub(crate) struct FuseAdapter {
    fs: Arc<Filesystem>,
    pool: OpenPool,
    backings: Arc<Backings>,
    /// The readers' requests, for a drain (`prepfs_core::drain`).
    activity: Arc<Activity>,
    /// Closed at a handover: requests with an effect are then left for the next server.
    gate: Arc<Gate>,
    /// What FUSE_INIT decided: this server's own, or (a server that took the connection over)
    /// the first server's, as the supervisor handed it on.
    handshake: Arc<std::sync::OnceLock<Handshake>>,
}

/// What FUSE_INIT decided: what a server taking the connection over must know of it.
#[derive(Debug, Clone)]
pub(crate) struct Handshake {
    /// The kernel's ABI version (major, minor).
    pub(crate) proto: (u32, u32),
    /// Passthrough enabled, or why not.
    pub(crate) passthrough: Result<(), String>,
    /// The kernel offered FUSE_HAS_RESEND.
    pub(crate) has_resend: bool,
}

/// Who sent a request.
fn caller(req: &Request) -> Caller {
    Caller { uid: req.uid(), gid: req.gid() }
}

impl FuseAdapter {
    /// An adapter running opens' pixel work on `pool` (its threads joined when the adapter is
    /// dropped, at unmount).
    /// `lowest_backing`: where a supervised server records the lowest backing id it may hold,
    /// for the next one (`backings.rs`).
    pub(crate) fn new(fs: Arc<Filesystem>, pool: OpenPool, activity: Arc<Activity>, gate: Arc<Gate>, lowest_backing: Option<std::fs::File>) -> Self {
        let backings = Arc::new(Backings::new(Arc::clone(&fs), lowest_backing.map(backings::LowestLive::new)));
        FuseAdapter { fs, pool, backings, activity, gate, handshake: Arc::default() }
    }

    /// Where FUSE_INIT's outcome will be, once the handshake ran.
    pub(crate) fn handshake(&self) -> Arc<std::sync::OnceLock<Handshake>> {
        Arc::clone(&self.handshake)
    }

    /// A reader's request on `ino`: what a drain waits out. The control files' (`prepfs stats`,
    /// `prepfs unmount`, a monitor) are none.
    fn note_reader_request(&self, req: &Request, ino: u64) {
        if !prepfs_core::fs::is_control(ino) {
            self.activity.touch(req.pid());
        }
    }

    fn attr(&self, a: &Attr) -> FileAttr {
        let (kind, nlink) = match a.kind {
            Kind::Dir => (FileType::Directory, 2),
            Kind::File => (FileType::RegularFile, 1),
        };
        FileAttr {
            ino: INodeNo(a.ino),
            size: a.size,
            blocks: a.size.div_ceil(512),
            atime: a.mtime,
            mtime: a.mtime,
            ctime: a.mtime,
            crtime: SystemTime::UNIX_EPOCH,
            kind,
            perm: a.perm,
            nlink,
            uid: a.uid,
            gid: a.gid,
            rdev: 0,
            blksize: 128 * 1024,
            flags: 0,
        }
    }
}

fn ttl(a: &Attr) -> Duration {
    if a.volatile {
        VOLATILE_TTL
    } else {
        TTL
    }
}

/// The errno of a core failure: its [`ToErrno`] mapping.
fn errno(e: &Error) -> Errno {
    Errno::from_i32(e.to_errno())
}

/// The errno `op`'s request fails with for `e`, counted by operation and errno
/// (`prepfs_fuse_errors_total`) and logged in the request's span at debug level.
fn failed(fs: &Filesystem, op: FuseOp, e: &Error) -> Errno {
    let errno = errno(e);
    fs.stats().fuse_errors.count(op, i32::from(errno));
    tracing::debug!(errno = i32::from(errno), error = %e, "failed");
    errno
}

/// The refusal of every change but mkdir and rmdir under `jobs/`, counted as a failed change.
fn read_only(fs: &Filesystem, op: &'static str) -> Errno {
    let _span = tracing::debug_span!("fuse", op).entered();
    failed(fs, FuseOp::Change, &Error::ReadOnly)
}

/// Answers an open: with its backing id where the core offers a backing file (the kernel then
/// reads it without us), else plainly with the cache policy's flags.
fn reply_opened(fs: &Filesystem, backings: &Backings, opened: Opened, reply: ReplyOpen) {
    let fh = opened.fh;
    if let Some(backing) = opened.backing {
        match backings.hold(fh, backing, &reply) {
            Ok(held) => {
                bump(&fs.stats().passthrough.opens, 1);
                // Passthrough takes no cache flags (with KEEP_CACHE the kernel fails the open).
                return reply.opened_passthrough(FileHandle(fh), FopenFlags::empty(), &held.id);
            }
            Err(e) => fs.disable_passthrough(format!("the kernel refused a backing file ({e})")),
        }
    }
    reply.opened(FileHandle(fh), fopen_flags(opened.cache))
}

/// Sets the mount's passthrough as a handshake decided it: at this server's FUSE_INIT, or at
/// the first server's for one that took the connection over.
pub(crate) fn restore_passthrough(fs: &Filesystem, decided: &Result<(), String>) {
    match decided {
        Ok(()) => fs.enable_passthrough(),
        Err(why) => fs.disable_passthrough(why.clone()),
    }
}

fn fopen_flags(cache: CachePolicy) -> FopenFlags {
    match cache {
        CachePolicy::KeepCache => FopenFlags::FOPEN_KEEP_CACHE,
        CachePolicy::DirectIo => FopenFlags::FOPEN_DIRECT_IO,
        // Neither: the kernel drops the file's cached pages at this open.
        CachePolicy::Refresh => FopenFlags::empty(),
    }
}

impl fuser::Filesystem for FuseAdapter {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let passthrough = if self.fs.passthrough_wanted() {
            match config.add_capabilities(InitFlags::FUSE_PASSTHROUGH) {
                // The kernel refuses a backing file whose filesystem is stacked as deep as this
                // mount says it may be: 2 (the most) takes sources on overlayfs too.
                Ok(()) if config.set_max_stack_depth(2).is_ok() => Ok(()),
                _ => Err("the kernel does not offer it (Linux 6.9 or later has it)".to_string()),
            }
        } else {
            Ok(()) // enable_passthrough logs why it stays off
        };
        restore_passthrough(&self.fs, &passthrough);
        let abi = config.kernel_abi();
        let _ = self.handshake.set(Handshake {
            proto: (abi.0, abi.1),
            passthrough,
            has_resend: config.capabilities().contains(InitFlags::FUSE_HAS_RESEND),
        });
        // Concurrent lookups in one directory; more requests in flight at once. Each is a
        // request the kernel may refuse (an older kernel): the mount works without.
        // Listings are plain READDIR: names and types, no attributes. READDIRPLUS (even _AUTO,
        // which sends it for a directory's first page, most of a class directory on Linux 6.x)
        // costs a `stat` of the source and a kernel inode per entry that a scan (`find`,
        // `os.walk`, ImageFolder: types from the listing) never uses: at 10M entries the
        // kernel's caches thrash and a `find` took 25x the source's. A reader that opens a
        // file looks it up (one LOOKUP per name per 60 s, which the epoch pays anyway).
        let _ = config.add_capabilities(InitFlags::FUSE_PARALLEL_DIROPS);
        let _ = config.set_max_background(64);
        let _ = config.set_congestion_threshold(48);
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let Some(_pass) = self.gate.enter() else { return std::mem::forget(reply) };
        bump(&self.fs.stats().requests.lookup, 1);
        let _span = tracing::debug_span!("fuse", op = "lookup", parent = parent.0).entered();
        if !(parent.0 == fuser::INodeNo::ROOT.0 && name == ".prepfs") {
            self.note_reader_request(req, parent.0);
        }
        match self.fs.lookup(parent.0, name, caller(req)) {
            Ok(a) => reply.entry(&ttl(&a), &self.attr(&a), Generation(0)),
            Err(e) => reply.error(failed(&self.fs, FuseOp::Lookup, &e)),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        bump(&self.fs.stats().requests.getattr, 1);
        let _span = tracing::debug_span!("fuse", op = "getattr", ino = ino.0).entered();
        match self.fs.getattr(ino.0) {
            Ok(a) => reply.attr(&ttl(&a), &self.attr(&a)),
            Err(e) => reply.error(failed(&self.fs, FuseOp::Getattr, &e)),
        }
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let Some(pass) = self.gate.enter() else { return std::mem::forget(reply) };
        bump(&self.fs.stats().requests.open, 1);
        // Entered wherever the open runs (here or on a decode thread).
        let span = tracing::debug_span!("fuse", op = "open", ino = ino.0);
        self.note_reader_request(req, ino.0);
        let write = !matches!(flags.acc_mode(), OpenAccMode::O_RDONLY)
            || flags.0 & (libc::O_TRUNC | libc::O_APPEND) != 0;
        let fs = Arc::clone(&self.fs);
        let backings = Arc::clone(&self.backings);
        let caller = caller(req);
        // The kernel's number of this request, without the mark of one sent again: an open
        // sent again after a server died is the same request (`prepfs_core`'s recent opens).
        let unique = req.unique().0;
        let marked = self.handshake.get().is_some_and(|h| h.has_resend);
        let request = prepfs_core::fs::OpenRequest { unique: unique & !fuser::UNIQUE_RESEND, maybe_resent: unique & fuser::UNIQUE_RESEND != 0 || !marked };
        let open = move || {
            let _pass = pass;
            let _span = span.entered();
            match fs.open_request(ino.0, write, caller, Some(request)) {
                Ok(o) => reply_opened(&fs, &backings, o, reply),
                Err(e) => reply.error(failed(&fs, FuseOp::Open, &e)),
            }
        };
        // A cache hit is answered here; anything that decodes goes to the pool.
        if self.fs.open_is_cheap(ino.0) {
            open();
        } else {
            self.pool.spawn(open);
        }
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let Some(_pass) = self.gate.enter() else { return std::mem::forget(reply) };
        bump(&self.fs.stats().requests.read, 1);
        let _span = tracing::trace_span!("fuse", op = "read", ino = ino.0, offset, size).entered();
        self.note_reader_request(req, ino.0);
        // A handle of a server before this one (it died or handed over): remade where its
        // content is the same at every open.
        if let Err(e) = self.fs.remake_earlier_handle(ino.0, fh.0, caller(req)) {
            return reply.error(failed(&self.fs, FuseOp::Read, &e));
        }
        self.fs.read(fh.0, offset, size, |data| match data {
            Ok(bytes) => reply.data(bytes),
            Err(e) => reply.error(failed(&self.fs, FuseOp::Read, &e)),
        });
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let Some(_pass) = self.gate.enter() else { return std::mem::forget(reply) };
        bump(&self.fs.stats().requests.release, 1);
        let _span = tracing::trace_span!("fuse", op = "release", ino = ino.0).entered();
        self.backings.release(fh.0);
        self.fs.release(ino.0, fh.0);
        reply.ok();
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        bump(&self.fs.stats().requests.flush, 1);
        // Nothing is ever dirty. ENOSYS (not "ok") makes the kernel stop sending FLUSH at every
        // close for the rest of the mount: one round trip less per file read.
        reply.error(Errno::ENOSYS);
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let Some(_pass) = self.gate.enter() else { return std::mem::forget(reply) };
        bump(&self.fs.stats().requests.opendir, 1);
        let _span = tracing::debug_span!("fuse", op = "opendir", ino = ino.0).entered();
        self.note_reader_request(req, ino.0);
        match self.fs.opendir(ino.0, caller(req)) {
            // A listing fixed for the mount's life is kept by the kernel (in the directory's
            // page cache, across opens): listed again, it asks nothing.
            Ok(fh) if self.fs.listing_is_fixed(fh) => {
                reply.opened(FileHandle(fh), FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE)
            }
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(failed(&self.fs, FuseOp::Opendir, &e)),
        }
    }

    fn readdir(&self, req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let Some(_pass) = self.gate.enter() else { return std::mem::forget(reply) };
        if let Err(e) = self.fs.remake_earlier_handle(ino.0, fh.0, caller(req)) {
            return reply.error(failed(&self.fs, FuseOp::Readdir, &e));
        }
        bump(&self.fs.stats().requests.readdir, 1);
        let _span = tracing::debug_span!("fuse", op = "readdir", ino = ino.0, offset).entered();
        let result = self.fs.readdir(fh.0, offset, |entry, next| {
            let kind = match entry.kind {
                Kind::Dir => FileType::Directory,
                Kind::File => FileType::RegularFile,
            };
            reply.add(INodeNo(entry.ino), next, kind, entry.name)
        });
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(failed(&self.fs, FuseOp::Readdir, &e)),
        }
    }

    /// Not asked for at init (listings are plain READDIR: see `init`), so the kernel does not
    /// send it; kept complete, and counted (`fuse_requests.readdirplus`, held at 0 by the
    /// listing test).
    fn readdirplus(&self, req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectoryPlus) {
        let Some(_pass) = self.gate.enter() else { return std::mem::forget(reply) };
        if let Err(e) = self.fs.remake_earlier_handle(ino.0, fh.0, caller(req)) {
            return reply.error(failed(&self.fs, FuseOp::Readdirplus, &e));
        }
        bump(&self.fs.stats().requests.readdirplus, 1);
        let _span = tracing::debug_span!("fuse", op = "readdirplus", ino = ino.0, offset).entered();
        let result = self.fs.readdir(fh.0, offset, |entry, next| {
            // An entry whose attributes cannot be had (a file gone since the listing) is listed
            // with none to keep (valid for no time: the kernel asks again at its first use).
            let (attr, ttl) = match self.fs.getattr(entry.ino) {
                Ok(a) => (a, ttl(&a)),
                Err(_) => (Attr::unknown(entry.ino, entry.kind), Duration::ZERO),
            };
            reply.add(INodeNo(entry.ino), next, entry.name, &ttl, &self.attr(&attr), Generation(0))
        });
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(failed(&self.fs, FuseOp::Readdirplus, &e)),
        }
    }

    fn releasedir(&self, _req: &Request, ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        let Some(_pass) = self.gate.enter() else { return std::mem::forget(reply) };
        bump(&self.fs.stats().requests.releasedir, 1);
        let _span = tracing::trace_span!("fuse", op = "releasedir", ino = ino.0).entered();
        self.fs.releasedir(fh.0);
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        bump(&self.fs.stats().requests.other, 1);
        let _span = tracing::debug_span!("fuse", op = "statfs").entered();
        match self.fs.statfs() {
            Ok(s) => reply.statfs(s.blocks, s.blocks_free, s.blocks_available, s.files, s.files_free, s.block_size, s.name_max, s.fragment_size),
            Err(e) => reply.error(failed(&self.fs, FuseOp::Statfs, &e)),
        }
    }

    fn access(&self, _req: &Request, ino: INodeNo, mask: fuser::AccessFlags, reply: ReplyEmpty) {
        bump(&self.fs.stats().requests.other, 1);
        let _span = tracing::debug_span!("fuse", op = "access", ino = ino.0).entered();
        if mask.bits() & libc::W_OK != 0 && !self.fs.accepts_changes(ino.0) {
            reply.error(failed(&self.fs, FuseOp::Access, &Error::ReadOnly));
        } else {
            reply.ok();
        }
    }

    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        bump(&self.fs.stats().requests.ioctl, 1);
        // Python's open() asks whether the file is a terminal (TCGETS): it is not. (Unlike FLUSH,
        // no answer stops the kernel asking: it sends FUSE_IOCTL for every ioctl.)
        reply.error(Errno::from_i32(libc::ENOTTY));
    }

    fn fsync(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        reply.ok(); // nothing is ever dirty
    }

    fn fsyncdir(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        reply.ok();
    }

    fn getxattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, _size: u32, reply: fuser::ReplyXattr) {
        bump(&self.fs.stats().requests.xattr, 1);
        reply.error(Errno::from_i32(libc::ENODATA));
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, size: u32, reply: fuser::ReplyXattr) {
        bump(&self.fs.stats().requests.xattr, 1);
        if size == 0 {
            reply.size(0);
        } else {
            reply.data(&[]);
        }
    }

    // `jobs/`: mkdir makes a job, rmdir retires one.

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, _mode: u32, _umask: u32, reply: ReplyEntry) {
        let Some(_pass) = self.gate.enter() else { return std::mem::forget(reply) };
        let _span = tracing::debug_span!("fuse", op = "mkdir", parent = parent.0).entered();
        match self.fs.mkdir(parent.0, name, caller(req)) {
            Ok(a) => reply.entry(&ttl(&a), &self.attr(&a), Generation(0)),
            Err(e) => reply.error(failed(&self.fs, FuseOp::Mkdir, &e)),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let Some(_pass) = self.gate.enter() else { return std::mem::forget(reply) };
        let _span = tracing::debug_span!("fuse", op = "rmdir", parent = parent.0).entered();
        match self.fs.rmdir(parent.0, name) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(failed(&self.fs, FuseOp::Rmdir, &e)),
        }
    }

    // Everything else that would change the mount: read-only (the mount is not `-o ro`, so that
    // mkdir and rmdir under `jobs/` reach us; every other change is refused here).

    fn setattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        _size: Option<u64>,
        _atime: Option<fuser::TimeOrNow>,
        _mtime: Option<fuser::TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        reply.error(read_only(&self.fs, "setattr"));
    }

    fn mknod(&self, _req: &Request, _p: INodeNo, _n: &OsStr, _m: u32, _u: u32, _r: u32, reply: ReplyEntry) {
        reply.error(read_only(&self.fs, "mknod"));
    }

    fn unlink(&self, _req: &Request, _p: INodeNo, _n: &OsStr, reply: ReplyEmpty) {
        reply.error(read_only(&self.fs, "unlink"));
    }

    fn symlink(&self, _req: &Request, _p: INodeNo, _n: &OsStr, _t: &Path, reply: ReplyEntry) {
        reply.error(read_only(&self.fs, "symlink"));
    }

    fn rename(
        &self,
        _req: &Request,
        _p: INodeNo,
        _n: &OsStr,
        _np: INodeNo,
        _nn: &OsStr,
        _f: fuser::RenameFlags,
        reply: ReplyEmpty,
    ) {
        reply.error(read_only(&self.fs, "rename"));
    }

    fn link(&self, _req: &Request, _i: INodeNo, _np: INodeNo, _nn: &OsStr, reply: ReplyEntry) {
        reply.error(read_only(&self.fs, "link"));
    }

    fn setxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        reply.error(read_only(&self.fs, "setxattr"));
    }

    fn removexattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(read_only(&self.fs, "removexattr"));
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        _length: u64,
        _mode: i32,
        reply: ReplyEmpty,
    ) {
        reply.error(read_only(&self.fs, "fallocate"));
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        _data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        reply.error(read_only(&self.fs, "write"));
    }

    fn create(&self, _req: &Request, _p: INodeNo, _n: &OsStr, _m: u32, _u: u32, _f: i32, reply: ReplyCreate) {
        reply.error(read_only(&self.fs, "create"));
    }
}
