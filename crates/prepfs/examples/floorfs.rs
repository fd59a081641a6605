//! `floorfs`: the FUSE ceiling every prepfs benchmark is compared against (issue 12).
//!
//! One read-only directory of N files, all BYTES long, served from one buffer in memory: no
//! decoding, no cache, no lookups beyond a number parse. Whatever a reader gets out of it is what
//! FUSE itself allows on this machine, in one of two modes:
//!
//! - plain: every open is answered `FOPEN_DIRECT_IO` (no `FOPEN_KEEP_CACHE`), as prepfs answers
//!   opens in its augmented view (`src/fs/open.rs`: `CachePolicy::DirectIo`, each open is a new
//!   sample), so every read is a FUSE `READ` answered from the buffer and the page cache never
//!   serves a second read;
//! - `--passthrough`: the content is written once into a memory file (`memfd_create`, or a tmpfs
//!   file with `--backing-file`), and each open is answered `FOPEN_PASSTHROUGH` with a backing id
//!   of that file: the kernel reads it directly, with no `READ` request to this daemon.
//!
//! ```text
//! floorfs MOUNTPOINT [--files N] [--size BYTES] [--passthrough] [--threads T]
//!         [--backing inode|open|mount] [--backing-file PATH] [--keep-cache] [--ioctl-enosys]
//!         [--distinct]
//! ```
//!
//! It runs in the foreground until the mount goes away (`umount`, `fusermount3 -u`) or it gets
//! SIGINT/SIGTERM (then it unmounts), and prints its request counts as one JSON line to stderr
//! at exit.

use std::ffi::OsStr;
use std::fs::File;
use std::io::Write;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use clap::{Parser, ValueEnum};
use fuser::{
    BackingId, Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo, InitFlags, IoctlFlags,
    KernelConfig, LockOwner, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyIoctl,
    ReplyOpen, Request,
};

/// Nothing in the mount ever changes: the kernel may keep names and attributes for a day.
const TTL: Duration = Duration::from_secs(86_400);
const ROOT: u64 = 1;
/// File `i` is inode `FIRST_FILE + i`.
const FIRST_FILE: u64 = 2;

#[derive(Parser)]
#[command(about = "A FUSE filesystem of N same-size files served from memory: the ceiling prepfs is measured against")]
struct Args {
    /// Where to mount (an existing empty directory).
    mountpoint: PathBuf,
    /// How many files.
    #[arg(long, default_value_t = 1000)]
    files: u64,
    /// Bytes per file (default: a 224x224 PPM, as prepfs serves it).
    #[arg(long, default_value_t = 150_545)]
    size: u64,
    /// Kernel FUSE passthrough: reads go to a memory file, not to this daemon.
    #[arg(long)]
    passthrough: bool,
    /// FUSE threads (each with its own /dev/fuse descriptor).
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Passthrough: one backing id per inode (shared by the opens of that inode that overlap,
    /// closed at the last one's release), one per open (closed at its release), or one for the
    /// whole mount (made at the first open, held until unmount).
    #[arg(long, value_enum, default_value_t = Backing::Inode)]
    backing: Backing,
    /// Passthrough: back the files with this file (e.g. on /dev/shm) instead of a memfd.
    #[arg(long)]
    backing_file: Option<PathBuf>,
    /// Answer opens with FOPEN_KEEP_CACHE (plain: pages are cached across opens; passthrough:
    /// to see what the kernel says).
    #[arg(long)]
    keep_cache: bool,
    /// Answer ioctl with ENOSYS instead of ENOTTY (prepfs's answer).
    #[arg(long)]
    ioctl_enosys: bool,
    /// Each file its own content (its own buffer; with passthrough its own memory file), as
    /// prepfs's outputs are, instead of every file served from one buffer that stays in the
    /// CPU's caches.
    #[arg(long)]
    distinct: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Backing {
    Open,
    Inode,
    Mount,
}

/// Requests received, printed at exit.
#[derive(Default)]
struct Counters {
    lookup: AtomicU64,
    getattr: AtomicU64,
    open: AtomicU64,
    read: AtomicU64,
    read_bytes: AtomicU64,
    flush: AtomicU64,
    release: AtomicU64,
    ioctl: AtomicU64,
    opendir: AtomicU64,
    readdir: AtomicU64,
    forget: AtomicU64,
    /// `FUSE_DEV_IOC_BACKING_OPEN` calls that succeeded, and backing ids dropped.
    backing_open: AtomicU64,
    backing_close: AtomicU64,
    /// Opens answered with an error, and opens served plainly because passthrough was refused.
    open_errors: AtomicU64,
    plain_fallback: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl Counters {
    fn json(&self) -> String {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        format!(
            concat!(
                "{{\"lookup\":{},\"getattr\":{},\"open\":{},\"read\":{},\"read_bytes\":{},\"flush\":{},",
                "\"release\":{},\"ioctl\":{},\"opendir\":{},\"readdir\":{},\"forget\":{},",
                "\"backing_open\":{},\"backing_close\":{},\"open_errors\":{},\"plain_fallback\":{}}}"
            ),
            l(&self.lookup),
            l(&self.getattr),
            l(&self.open),
            l(&self.read),
            l(&self.read_bytes),
            l(&self.flush),
            l(&self.release),
            l(&self.ioctl),
            l(&self.opendir),
            l(&self.readdir),
            l(&self.forget),
            l(&self.backing_open),
            l(&self.backing_close),
            l(&self.open_errors),
            l(&self.plain_fallback),
        )
    }
}

/// A backing id registered with the kernel; dropping it closes it there
/// (`FUSE_DEV_IOC_BACKING_CLOSE`), and counts that.
struct Backed {
    id: BackingId,
    counters: Arc<Counters>,
}

impl Drop for Backed {
    fn drop(&mut self) {
        bump(&self.counters.backing_close);
    }
}

/// The backing ids of open files, by file handle; a handle holds its id until its release (the
/// open that made it may hold it a moment longer, until its reply is sent).
#[derive(Default)]
struct Backings {
    by_handle: std::collections::HashMap<u64, Arc<Backed>>,
    /// The shared id of an inode (`--backing inode`) or of the mount (`--backing mount`, key 0),
    /// while some handle holds it.
    shared: std::collections::HashMap<u64, std::sync::Weak<Backed>>,
    /// `--backing mount`: the one id, held until unmount (no backing ioctl per open).
    mount: Option<Arc<Backed>>,
    next_fh: u64,
}

struct FloorFs {
    files: u64,
    size: u64,
    /// The content of every file (`--distinct`: of each file in turn, `size` bytes apiece).
    data: Vec<u8>,
    /// Passthrough: the file every open is backed by (`--distinct`: one per file); empty when
    /// serving plainly.
    backing_files: Vec<File>,
    backing: Backing,
    keep_cache: bool,
    ioctl_enosys: bool,
    /// Set when passthrough was asked for but the kernel refused it (said once, then plain).
    passthrough_refused: AtomicBool,
    backings: Mutex<Backings>,
    counters: Arc<Counters>,
    uid: u32,
    gid: u32,
    names_width: usize,
}

impl FloorFs {
    fn attr(&self, ino: u64) -> Option<FileAttr> {
        let (kind, size, perm, nlink) = if ino == ROOT {
            (FileType::Directory, 0, 0o555, 2)
        } else if (FIRST_FILE..FIRST_FILE + self.files).contains(&ino) {
            (FileType::RegularFile, self.size, 0o444, 1)
        } else {
            return None;
        };
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        Some(FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: t,
            mtime: t,
            ctime: t,
            crtime: t,
            kind,
            perm,
            nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: 128 * 1024,
            flags: 0,
        })
    }

    fn name(&self, i: u64) -> String {
        format!("{i:0w$}.ppm", w = self.names_width)
    }

    /// File index of `name`, if it names one of ours.
    fn index(&self, name: &OsStr) -> Option<u64> {
        let stem = name.to_str()?.strip_suffix(".ppm")?;
        if stem.len() != self.names_width || !stem.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        stem.parse().ok().filter(|&i| i < self.files)
    }

    /// Flags of a plain open. `FOPEN_DIRECT_IO` without `FOPEN_KEEP_CACHE`, as prepfs answers
    /// an open in its augmented view: each open there is a new sample, so nothing of an earlier
    /// open may be served from the page cache, and every read is a READ answered from memory.
    fn plain_flags(&self) -> FopenFlags {
        if self.keep_cache {
            FopenFlags::FOPEN_KEEP_CACHE
        } else {
            FopenFlags::FOPEN_DIRECT_IO
        }
    }

    /// The key an open of `ino` shares its backing id under (none: a new id per open).
    fn backing_key(&self, ino: u64) -> Option<u64> {
        match self.backing {
            Backing::Open => None,
            Backing::Inode => Some(ino),
            Backing::Mount => Some(0),
        }
    }

    /// A handle and its backing id for an open of `ino`: the shared one while some handle holds
    /// it, else a new one. The `FUSE_DEV_IOC_BACKING_OPEN` ioctl runs outside the lock.
    fn backing_for(&self, ino: u64, reply: &ReplyOpen, file: &File) -> std::io::Result<(u64, Arc<Backed>)> {
        let key = self.backing_key(ino);
        let shared = |b: &Backings| key.and_then(|k| b.shared.get(&k)).and_then(std::sync::Weak::upgrade);
        {
            let mut b = self.backings.lock().unwrap();
            if let Some(id) = shared(&b) {
                return Ok(b.hold(id));
            }
        }
        let new = Arc::new(Backed { id: reply.open_backing(file)?, counters: Arc::clone(&self.counters) });
        bump(&self.counters.backing_open);
        let mut b = self.backings.lock().unwrap();
        // Another open of the same key may have made one meanwhile: that one is kept (one
        // backing file per inode), and `new` is closed as it drops.
        let id = match shared(&b) {
            Some(id) => id,
            None => {
                if let Some(k) = key {
                    b.shared.insert(k, Arc::downgrade(&new));
                }
                if self.backing == Backing::Mount {
                    b.mount = Some(Arc::clone(&new));
                }
                new
            }
        };
        Ok(b.hold(id))
    }

    /// Drops the handle's hold on its backing id; the id is closed at its last holder (the open
    /// that made it may hold it a moment longer, until its reply is sent).
    fn release_backing(&self, fh: u64, ino: u64) {
        let id = {
            let mut b = self.backings.lock().unwrap();
            let Some(id) = b.by_handle.remove(&fh) else { return };
            if Arc::strong_count(&id) == 1 {
                if let Some(k) = self.backing_key(ino) {
                    b.shared.remove(&k);
                }
            }
            id
        };
        // Closed here, outside the lock, when this was the last hold: no open can find it any
        // more (or, when the open's own hold outlives this one, a later open may share it).
        drop(id);
    }
}

impl Backings {
    /// A new handle holding `id` until its release.
    fn hold(&mut self, id: Arc<Backed>) -> (u64, Arc<Backed>) {
        self.next_fh += 1;
        self.by_handle.insert(self.next_fh, Arc::clone(&id));
        (self.next_fh, id)
    }
}

impl fuser::Filesystem for FloorFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        if self.backing_files.is_empty() {
            return Ok(());
        }
        // Passthrough needs the FUSE_PASSTHROUGH init flag and a stacking depth of at least 1
        // (fuser sends max_stack_depth only with that flag; the kernel refuses a backing file
        // whose filesystem is stacked as deep): 1, as a memfd's or a tmpfs file's is 0.
        if let Err(missing) = config.add_capabilities(InitFlags::FUSE_PASSTHROUGH) {
            eprintln!("floorfs: the kernel does not offer passthrough ({missing:?}): serving plainly");
            self.backing_files.clear();
            return Ok(());
        }
        config.set_max_stack_depth(1).expect("1 is within the kernel's limit");
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        bump(&self.counters.lookup);
        match (parent.0 == ROOT).then(|| self.index(name)).flatten() {
            Some(i) => reply.entry(&TTL, &self.attr(FIRST_FILE + i).unwrap(), Generation(0)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn forget(&self, _req: &Request, _ino: INodeNo, _nlookup: u64) {
        bump(&self.counters.forget);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        bump(&self.counters.getattr);
        match self.attr(ino.0) {
            Some(a) => reply.attr(&TTL, &a),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        bump(&self.counters.open);
        if self.attr(ino.0).is_none_or(|a| a.kind != FileType::RegularFile) {
            bump(&self.counters.open_errors);
            return reply.error(Errno::EISDIR);
        }
        if flags.0 & libc::O_ACCMODE != libc::O_RDONLY {
            bump(&self.counters.open_errors);
            return reply.error(Errno::EROFS);
        }
        let index = (ino.0 - FIRST_FILE) as usize;
        let backing_file = if self.backing_files.len() == 1 { self.backing_files.first() } else { self.backing_files.get(index) };
        if let Some(file) = backing_file.filter(|_| !self.passthrough_refused.load(Ordering::Relaxed)) {
            match self.backing_for(ino.0, &reply, file) {
                Ok((fh, id)) => {
                    // fuser adds FOPEN_PASSTHROUGH. The kernel takes only DIRECT_IO,
                    // PARALLEL_DIRECT_WRITES and NOFLUSH beside it: with KEEP_CACHE its
                    // passthrough open fails (EINVAL, fs/fuse/iomode.c) and the opener gets EIO,
                    // with nothing in dmesg (`--keep-cache` shows it).
                    let extra = if self.keep_cache { FopenFlags::FOPEN_KEEP_CACHE } else { FopenFlags::empty() };
                    return reply.opened_passthrough(FileHandle(fh), extra, &id.id);
                }
                Err(e) => {
                    if !self.passthrough_refused.swap(true, Ordering::Relaxed) {
                        eprintln!(
                            "floorfs: the kernel refused the backing file (FUSE_DEV_IOC_BACKING_OPEN: {e}, errno {}): serving plainly",
                            e.raw_os_error().unwrap_or(0)
                        );
                    }
                }
            }
        }
        if !self.backing_files.is_empty() {
            bump(&self.counters.plain_fallback);
        }
        reply.opened(FileHandle(0), self.plain_flags());
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        bump(&self.counters.read);
        let start = offset.min(self.size) as usize;
        let end = (offset.saturating_add(u64::from(size))).min(self.size) as usize;
        self.counters.read_bytes.fetch_add((end - start) as u64, Ordering::Relaxed);
        // `--distinct`: file i's content is the i-th `size` bytes.
        let base = if self.data.len() as u64 > self.size { (ino.0 - FIRST_FILE) as usize * self.size as usize } else { 0 };
        reply.data(&self.data[base + start..base + end]);
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        bump(&self.counters.flush);
        // Nothing to flush; ENOSYS makes the kernel stop sending FLUSH (as prepfs does).
        reply.error(Errno::ENOSYS);
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
        bump(&self.counters.release);
        if fh.0 != 0 {
            self.release_backing(fh.0, ino.0);
        }
        reply.ok();
    }

    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        bump(&self.counters.ioctl);
        // Python's open() asks whether the file is a terminal (TCGETS): it is not (as prepfs).
        reply.error(if self.ioctl_enosys { Errno::ENOSYS } else { Errno::ENOTTY });
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        bump(&self.counters.opendir);
        if ino.0 == ROOT {
            reply.opened(FileHandle(0), FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE);
        } else {
            reply.error(Errno::ENOTDIR);
        }
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        bump(&self.counters.readdir);
        if ino.0 != ROOT {
            return reply.error(Errno::ENOTDIR);
        }
        // Offsets: 1 is ".", 2 is "..", 3 + i is file i.
        for next in offset + 1..=self.files + 2 {
            let full = match next {
                1 => reply.add(INodeNo(ROOT), next, FileType::Directory, "."),
                2 => reply.add(INodeNo(ROOT), next, FileType::Directory, ".."),
                _ => {
                    let i = next - 3;
                    reply.add(INodeNo(FIRST_FILE + i), next, FileType::RegularFile, self.name(i))
                }
            };
            if full {
                break;
            }
        }
        reply.ok();
    }
}

/// The content of every file: a PPM header where the size allows a square image, then a
/// pattern. Only its length matters.
fn content(size: u64) -> Vec<u8> {
    let mut data: Vec<u8> = (0..size).map(|i| (i * 31 % 251) as u8).collect();
    let side = ((size as f64) / 3.0).sqrt() as u64;
    let header = format!("P6\n{side} {side}\n255\n");
    if side > 0 && header.len() as u64 + side * side * 3 <= size {
        data[..header.len()].copy_from_slice(header.as_bytes());
    }
    data
}

/// The file passthrough opens are backed by: a memfd, or `path` (created, then unlinked).
fn backing_file(data: &[u8], path: Option<&Path>) -> std::io::Result<File> {
    let mut file = match path {
        None => {
            // SAFETY: a valid C string and flags; the fd returned is ours alone.
            let fd = unsafe { libc::memfd_create(c"floorfs".as_ptr(), libc::MFD_CLOEXEC) };
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // SAFETY: fd was just opened and nothing else owns it.
            File::from(unsafe { OwnedFd::from_raw_fd(fd) })
        }
        Some(p) => {
            let f = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(p)?;
            std::fs::remove_file(p)?;
            f
        }
    };
    file.write_all(data)?;
    Ok(file)
}

fn on_mount_table(mountpoint: &Path) -> bool {
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mounts") else { return false };
    let want = mountpoint.to_string_lossy().replace(' ', "\\040");
    mounts.lines().any(|l| l.split(' ').nth(1) == Some(want.as_str()) && l.contains("floorfs"))
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let mountpoint = args.mountpoint.canonicalize().unwrap_or_else(|_| args.mountpoint.clone());
    if args.distinct && (args.backing == Backing::Mount || args.backing_file.is_some()) {
        eprintln!("floorfs: --distinct backs each file with its own memory file: not with --backing mount or --backing-file");
        return std::process::ExitCode::from(2);
    }
    let one = content(args.size);
    let data = if args.distinct {
        // Each file differs from the next in its last bytes, so no two are the same content.
        (0..args.files)
            .flat_map(|i| {
                let mut d = one.clone();
                let (len, tail) = (d.len(), d.len().saturating_sub(8));
                d[tail..].copy_from_slice(&i.to_le_bytes()[..len - tail]);
                d
            })
            .collect()
    } else {
        one
    };
    let backing = if args.passthrough {
        let made: std::io::Result<Vec<File>> = if args.distinct {
            data.chunks(args.size.max(1) as usize).map(|c| backing_file(c, None)).collect()
        } else {
            backing_file(&data, args.backing_file.as_deref()).map(|f| vec![f])
        };
        made.unwrap_or_else(|e| {
            eprintln!("floorfs: cannot make the backing file ({e}): serving plainly");
            Vec::new()
        })
    } else {
        Vec::new()
    };
    let counters = Arc::new(Counters::default());
    let fs = FloorFs {
        files: args.files,
        size: args.size,
        data,
        backing_files: backing,
        backing: args.backing,
        keep_cache: args.keep_cache,
        ioctl_enosys: args.ioctl_enosys,
        passthrough_refused: AtomicBool::new(false),
        backings: Mutex::default(),
        counters: Arc::clone(&counters),
        uid: nix::unistd::getuid().as_raw(),
        gid: nix::unistd::getgid().as_raw(),
        names_width: args.files.saturating_sub(1).to_string().len().max(5),
    };

    // SIGINT and SIGTERM are blocked in every thread (the FUSE threads inherit the mask) and
    // taken by one waiter, which unmounts: the session then ends as after `umount`.
    let signals = {
        use nix::sys::signal::{SigSet, Signal};
        let mut s = SigSet::empty();
        s.add(Signal::SIGINT);
        s.add(Signal::SIGTERM);
        s
    };
    signals.thread_block().expect("block SIGINT and SIGTERM");

    let mut config = fuser::Config::default();
    config.mount_options = vec![
        fuser::MountOption::FSName("floorfs".into()),
        fuser::MountOption::Subtype("floorfs".into()),
        fuser::MountOption::RO,
        fuser::MountOption::NoAtime,
        fuser::MountOption::NoDev,
        fuser::MountOption::NoSuid,
        fuser::MountOption::DefaultPermissions,
    ];
    config.n_threads = Some(args.threads.max(1));
    config.clone_fd = true;
    let session = match fuser::Session::new(fs, &mountpoint, &config).and_then(|s| s.spawn()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("floorfs: cannot mount at {}: {e}", mountpoint.display());
            return std::process::ExitCode::FAILURE;
        }
    };
    eprintln!(
        "floorfs: {} files of {} bytes at {} ({}, {} threads)",
        args.files,
        args.size,
        mountpoint.display(),
        if args.passthrough { "passthrough" } else { "plain" },
        args.threads
    );
    {
        let mountpoint = mountpoint.clone();
        std::thread::spawn(move || {
            if let Ok(sig) = signals.wait() {
                eprintln!("floorfs: {sig}: unmounting");
                if nix::mount::umount2(&mountpoint, nix::mount::MntFlags::empty()).is_err() {
                    let _ = nix::mount::umount2(&mountpoint, nix::mount::MntFlags::MNT_DETACH);
                }
            }
        });
    }
    let mut session = session;
    while !session.guard.is_finished() {
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("{}", counters.json());
    // fuser's session unmounts again when dropped, and takes an ended connection for a live
    // mount (see prepfs's `mount::end_session`): drop it only while the mount is still there.
    let ended = if on_mount_table(&mountpoint) {
        session.join()
    } else {
        let guard = std::mem::replace(&mut session.guard, std::thread::spawn(|| Ok(())));
        std::mem::forget(session);
        guard.join().unwrap_or_else(|_| Err(std::io::Error::other("the FUSE session thread panicked")))
    };
    match ended {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("floorfs: the session ended with {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
