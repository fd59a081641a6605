//! Mounting: preparing the mountpoint (clearing a dead mount a killed prepfs left behind),
//! scanning the source with progress, starting the FUSE session and the mount's background
//! threads (owned by [`Workers`], stopped and joined at unmount), and unmounting cleanly on
//! SIGINT, SIGTERM or SIGHUP (a busy mount keeps serving until released; a second signal
//! forces it).

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use nix::sys::signal::{SigSet, Signal};

use crate::source::catalog::Catalog;
use crate::config::Config;
use crate::fs::Filesystem;
use crate::fuse::FuseAdapter;
use crate::sync::{LockExt, Mutex};

/// Why a mount could not start.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error("mountpoint {path}: {why}")]
    Mountpoint { path: String, why: String },
    #[error("cannot scan source {path}: {source}")]
    Scan { path: String, source: io::Error },
    #[error("cannot start the decode pool: {0}")]
    Pool(String),
    #[error("FUSE: {0}")]
    Fuse(io::Error),
    #[error("stopped by a signal before the mount was ready")]
    Stopped,
}

/// The state of a mountpoint before mounting.
#[derive(Debug, PartialEq, Eq)]
pub enum MountpointState {
    /// A plain directory: ready.
    Ready,
    /// A FUSE mount whose daemon is gone (`ENOTCONN`): clear it.
    Dead,
    /// A live mount of something: refuse.
    Busy(String),
}

/// What is at `path` now.
pub fn mountpoint_state(path: &Path) -> io::Result<MountpointState> {
    // statfs always reaches the daemon (stat may be answered from cached attributes), so it
    // tells a dead FUSE mount by ENOTCONN.
    if let Err(nix::errno::Errno::ENOTCONN) = nix::sys::statfs::statfs(path) {
        return Ok(MountpointState::Dead);
    }
    match std::fs::metadata(path) {
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => Ok(MountpointState::Dead),
        Err(e) => Err(e),
        Ok(meta) if !meta.is_dir() => Err(io::Error::new(io::ErrorKind::NotADirectory, "not a directory")),
        Ok(_) => {
            let busy = mount_at(&path.canonicalize()?).map(|m| format!("{} ({})", m.fstype, m.source));
            Ok(busy.map_or(MountpointState::Ready, MountpointState::Busy))
        }
    }
}

/// What the mount table says of the newest mount at a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    /// The filesystem type (`fuse.prepfs`, `tmpfs`, ...).
    pub fstype: String,
    /// The mount's source, as the table gives it.
    pub source: String,
    /// The device's minor number (for FUSE: the connection number).
    pub minor: u64,
}

/// The newest mount at `canonical` (a canonical path), from `/proc/self/mountinfo`: fields
/// `id parent major:minor root mountpoint options [optional...] - fstype source superoptions`.
///
/// The one reader of the mount table: the busy check before mounting, the FUSE connection to
/// abort, and the mounted tests' `is_mounted` (tests/common) all ask it.
pub fn mount_at(canonical: &Path) -> Option<MountEntry> {
    let table = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    table.lines().rev().find_map(|line| {
        let (head, tail) = line.split_once(" - ")?;
        let mut fields = head.split_whitespace();
        let dev = fields.nth(2)?;
        let target = fields.nth(1)?;
        if Path::new(&unescape_mount_path(target)) != canonical {
            return None;
        }
        let mut tail = tail.split_whitespace();
        Some(MountEntry {
            fstype: tail.next()?.to_string(),
            source: unescape_mount_path(tail.next()?),
            minor: dev.split(':').nth(1)?.parse().ok()?,
        })
    })
}

/// The mount tables escape space, tab, newline and backslash as octal.
fn unescape_mount_path(s: &str) -> String {
    s.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")
}

/// Makes the mountpoint ready: creates it if missing, clears a dead FUSE mount (whatever its
/// age), refuses a live one.
pub fn prepare_mountpoint(path: &Path) -> Result<(), MountError> {
    let fail = |why: String| MountError::Mountpoint { path: path.display().to_string(), why };
    // The state first: a dead mount answers stat with ENOTCONN, which is not "missing".
    let state = match mountpoint_state(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            std::fs::create_dir_all(path).map_err(|e| fail(format!("cannot create: {e}")))?;
            mountpoint_state(path)
        }
        other => other,
    };
    match state.map_err(|e| fail(e.to_string()))? {
        MountpointState::Ready => Ok(()),
        MountpointState::Busy(what) => Err(fail(format!("already mounted: {what}; unmount it first"))),
        MountpointState::Dead => {
            tracing::warn!(mountpoint = %path.display(), "found a dead mount (its daemon was killed); clearing it");
            lazy_unmount(path).map_err(|e| fail(format!("cannot clear the dead mount: {e}")))?;
            match mountpoint_state(path).map_err(|e| fail(e.to_string()))? {
                MountpointState::Ready => Ok(()),
                other => Err(fail(format!("still not usable after clearing: {other:?}"))),
            }
        }
    }
}

/// Unmounts `path` if nothing uses it: `Err` with `ResourceBusy` while files are open or a
/// process sits inside. Directly as root, else through `fusermount3 -u`.
pub fn try_unmount(path: &Path) -> io::Result<()> {
    match nix::mount::umount2(path, nix::mount::MntFlags::empty()) {
        Ok(()) => Ok(()),
        Err(nix::errno::Errno::EBUSY) => Err(io::Error::from(io::ErrorKind::ResourceBusy)),
        Err(nix::errno::Errno::EINVAL) => Ok(()), // not mounted (any more)
        Err(_) => {
            let out = std::process::Command::new("fusermount3").arg("-u").arg(path).output()?;
            if out.status.success() {
                Ok(())
            } else if String::from_utf8_lossy(&out.stderr).contains("busy") {
                Err(io::Error::from(io::ErrorKind::ResourceBusy))
            } else {
                Err(io::Error::other(String::from_utf8_lossy(&out.stderr).trim().to_string()))
            }
        }
    }
}

/// Detaches whatever is mounted at `path`: directly as root, else through `fusermount3`.
pub fn lazy_unmount(path: &Path) -> io::Result<()> {
    match nix::mount::umount2(path, nix::mount::MntFlags::MNT_DETACH) {
        Ok(()) => Ok(()),
        Err(_) => {
            let status = std::process::Command::new("fusermount3").arg("-u").arg("-z").arg(path).status()?;
            if status.success() {
                Ok(())
            } else {
                Err(io::Error::other(format!("fusermount3 -u -z exited with {status}")))
            }
        }
    }
}

/// Scans the source with a progress line on the terminal; gives up when `stop` is set.
pub fn scan_with_progress(source: &Path, stop: &AtomicBool) -> Result<Catalog, MountError> {
    let bar = ProgressBar::new_spinner();
    bar.set_style(ProgressStyle::with_template("{spinner} scanning {msg} files ({elapsed})").unwrap_or_else(|_| ProgressStyle::default_spinner()));
    bar.enable_steady_tick(Duration::from_millis(120));
    let catalog = Catalog::scan_until(
        source,
        |n| {
            if n % 1024 < 64 {
                bar.set_message(n.to_string());
            }
        },
        stop,
    )
    .map_err(|e| match e.kind() {
        io::ErrorKind::Interrupted => MountError::Stopped,
        _ => MountError::Scan { path: source.display().to_string(), source: e },
    });
    bar.finish_and_clear();
    catalog
}

/// Mounts `config` and serves until the mount goes away or a signal asks to stop. Every
/// thread it starts is stopped and joined before it returns, and the disk tier's queued writes
/// are written.
pub fn run(config: Config) -> Result<(), MountError> {
    // Block the stop signals before any thread starts, so that only the waiter sees them; the
    // waiter runs from the start, so a signal during a long scan stops it.
    let mut signals = SigSet::empty();
    for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        signals.add(s);
    }
    signals.thread_block().map_err(|e| MountError::Fuse(e.into()))?;
    let waiter = SignalWaiter::start(signals, config.mountpoint.clone()).map_err(MountError::Fuse)?;
    let served = serve(config, &waiter);
    waiter.finish();
    served
}

fn serve(config: Config, waiter: &SignalWaiter) -> Result<(), MountError> {
    prepare_mountpoint(&config.mountpoint)?;
    let canonical_mountpoint = config.mountpoint.canonicalize().unwrap_or_else(|_| config.mountpoint.clone());
    let catalog = scan_with_progress(&config.source, &waiter.stopping)?;
    tracing::info!(
        samples = catalog.sample_count(),
        files = catalog.file_count(),
        bytes_per_sample = format!("{:.0}", catalog.bytes_per_sample()),
        "catalog ready"
    );
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(config.threads)
        .thread_name(|i| format!("prepfs-decode-{i}"))
        .build()
        .map_err(|e| MountError::Pool(e.to_string()))?;
    let mountpoint = config.mountpoint.clone();
    let fuse_config = fuser_config(&config);
    let fs = Arc::new(Filesystem::new(config, catalog).map_err(MountError::Fuse)?);
    let adapter = FuseAdapter::new(Arc::clone(&fs), Arc::new(pool));
    fs.plan_cache();
    if waiter.stopping.load(Ordering::SeqCst) {
        fs.shutdown();
        return Err(MountError::Stopped);
    }
    let session = fuser::Session::new(adapter, &mountpoint, &fuse_config).map_err(MountError::Fuse)?;
    let notifier = session.notifier();
    let mut workers = Workers::default();
    let started = start_workers(&fs, &mut workers, notifier);
    waiter.mounted(fuse_connection(&canonical_mountpoint));
    if let Err(e) = started {
        let _ = try_unmount(&mountpoint).or_else(|_| lazy_unmount(&mountpoint));
        workers.stop_and_join(&fs);
        return Err(MountError::Fuse(e));
    }
    crate::log::say(&format!(
        "prepfs: serving {} samples of {} at {} (Ctrl-C to unmount)",
        fs.catalog().sample_count(),
        fs.config().source.display(),
        mountpoint.display()
    ));
    let ran = session.run();
    workers.stop_and_join(&fs);
    tracing::info!(mountpoint = %mountpoint.display(), "unmounted");
    ran.map_err(MountError::Fuse)
}

/// The background threads of a mount, stopped and joined at unmount.
#[derive(Default)]
struct Workers {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Workers {
    fn spawn(&mut self, name: String, work: impl FnOnce(&AtomicBool) + Send + 'static) -> io::Result<()> {
        let stop = Arc::clone(&self.stop);
        self.threads.push(std::thread::Builder::new().name(name).spawn(move || work(&stop))?);
        Ok(())
    }

    /// Stops every worker (throttled source reads give up at once), joins them, then ends the
    /// source's I/O and writes out the disk tier's queue.
    fn stop_and_join(self, fs: &Filesystem) {
        self.stop.store(true, Ordering::SeqCst);
        fs.interrupt();
        for t in self.threads {
            let _ = t.join();
        }
        fs.shutdown();
    }
}

/// Sleeps `d` unless `stop` is set meanwhile; returns whether to go on.
fn nap(stop: &AtomicBool, d: Duration) -> bool {
    let until = std::time::Instant::now() + d;
    while !stop.load(Ordering::Relaxed) {
        let Some(left) = until.checked_duration_since(std::time::Instant::now()) else { return true };
        std::thread::sleep(left.min(Duration::from_millis(50)));
    }
    false
}

fn start_workers(fs: &Arc<Filesystem>, workers: &mut Workers, notifier: fuser::Notifier) -> io::Result<()> {
    // The background refill: one worker per decode core, below the priority of requests, keeps
    // the free augmented room filled with fresh augmentations, so augmented hits keep coming
    // across epochs and idle CPU (a reader between requests, a GPU step) prepares what will be
    // read next.
    if fs.config().cache.refill && fs.cache().enabled() {
        let lanes = fs.config().decode_parallelism();
        for lane in 0..lanes {
            let fs = Arc::clone(fs);
            workers.spawn(format!("prepfs-refill-{lane}"), move |stop| {
                lower_priority(10);
                let mut cursor = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    if !fs.refill_lane_once(&mut cursor, (lane, lanes)) && !nap(stop, Duration::from_millis(50)) {
                        break;
                    }
                }
            })?;
        }
    }
    // Once a second: retire idle jobs, drop shared outputs no job needs this epoch, and re-plan
    // the cache split from the rates measured while serving.
    let housekeeping = Arc::clone(fs);
    workers.spawn("prepfs-housekeeping".into(), move |stop| {
        while nap(stop, Duration::from_secs(1)) {
            housekeeping.retire_idle_jobs();
            housekeeping.drop_outputs_no_job_needs();
            housekeeping.replan();
        }
    })?;
    // Prefetch workers: prepare the samples queued ahead of jobs, below the priority of requests.
    for i in 0..fs.config().threads {
        let fs = Arc::clone(fs);
        workers.spawn(format!("prepfs-prefetch-{i}"), move |stop| {
            lower_priority(10);
            while !stop.load(Ordering::Relaxed) {
                fs.run_prefetch(Duration::from_millis(200), stop);
            }
        })?;
    }
    // Tells the kernel to drop what it cached of files whose source changed.
    let stale = Arc::clone(fs);
    workers.spawn("prepfs-notifier".into(), move |stop| {
        while !stop.load(Ordering::Relaxed) {
            for ino in stale.stale.drain(Duration::from_millis(200)) {
                // ENOENT: the kernel holds nothing of it. Nothing to do either way.
                let _ = notifier.inval_inode(fuser::INodeNo(ino), 0, 0);
            }
        }
    })?;
    Ok(())
}

/// Sets the calling thread's nice value (Linux threads have their own).
fn lower_priority(nice: i32) {
    // SAFETY: setpriority on this thread's own id.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, nice);
    }
}

/// The FUSE connection number of the mount at `path` (its device's minor number), whose
/// `/sys/fs/fuse/connections/<n>/abort` ends it. Read from the mount table for the mountpoint
/// made canonical before mounting: a `stat` of it now would wait on this very daemon, whose
/// session does not run yet.
fn fuse_connection(canonical: &Path) -> Option<u64> {
    mount_at(canonical).map(|m| m.minor)
}

/// The thread that waits for SIGINT, SIGTERM and SIGHUP. Before the mount is up, a signal stops
/// the scan. Once it is up, the first signal unmounts; if the mount is busy (files open, a
/// shell inside), it says so and keeps serving, retrying until the users let go; a second
/// signal forces the unmount (detached, the connection aborted) and the process exits.
struct SignalWaiter {
    stopping: Arc<AtomicBool>,
    state: Arc<Mutex<WaiterState>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[derive(Default)]
struct WaiterState {
    /// Set once the FUSE session is up: `Some(connection)`.
    mounted: Option<Option<u64>>,
    finished: bool,
}

impl SignalWaiter {
    fn start(signals: SigSet, mountpoint: std::path::PathBuf) -> io::Result<SignalWaiter> {
        let stopping = Arc::new(AtomicBool::new(false));
        let state = Arc::new(Mutex::new(WaiterState::default()));
        let (stop, st) = (Arc::clone(&stopping), Arc::clone(&state));
        let thread = std::thread::Builder::new()
            .name("prepfs-signals".into())
            .spawn(move || wait_for_signals(signals, &mountpoint, &stop, &st))?;
        Ok(SignalWaiter { stopping, state, thread: Some(thread) })
    }

    fn mounted(&self, connection: Option<u64>) {
        self.state.lock_or_recover().mounted = Some(connection);
    }

    fn finish(mut self) {
        self.state.lock_or_recover().finished = true;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Waits `d` for one of `signals`.
fn wait_signal(signals: &SigSet, d: Duration) -> Option<i32> {
    let timeout = libc::timespec { tv_sec: d.as_secs() as libc::time_t, tv_nsec: d.subsec_nanos() as libc::c_long };
    // SAFETY: sigtimedwait with a valid set, no siginfo wanted, and a valid timeout.
    let sig = unsafe { libc::sigtimedwait(signals.as_ref(), std::ptr::null_mut(), &timeout) };
    (sig > 0).then_some(sig)
}

fn wait_for_signals(signals: SigSet, mountpoint: &Path, stopping: &AtomicBool, state: &Mutex<WaiterState>) {
    let mut received = 0;
    let mut busy_said = false;
    loop {
        let (mounted, finished) = {
            let st = state.lock_or_recover();
            (st.mounted, st.finished)
        };
        if finished {
            return;
        }
        let signal = wait_signal(&signals, Duration::from_millis(200));
        if let Some(sig) = signal {
            received += 1;
            stopping.store(true, Ordering::SeqCst);
            match (mounted, received) {
                (None, 1) => tracing::info!(signal = sig, "stopping before the mount is ready"),
                (None, _) => {
                    tracing::warn!(signal = sig, "second signal: exiting now");
                    std::process::exit(1);
                }
                (Some(_), 1) => tracing::info!(signal = sig, "unmounting"),
                (Some(connection), _) => {
                    tracing::warn!(signal = sig, "second signal: forcing the unmount; open files get errors");
                    force_unmount(mountpoint, connection);
                    return;
                }
            }
        }
        if mounted.is_none() || received == 0 {
            continue;
        }
        match try_unmount(mountpoint) {
            Ok(()) => return,
            Err(e) if e.kind() == io::ErrorKind::ResourceBusy => {
                if !busy_said {
                    busy_said = true;
                    tracing::warn!(
                        mountpoint = %mountpoint.display(),
                        "the mount is busy (files open, or a process inside it): serving until they are released; signal again to force"
                    );
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "unmount failed; detaching");
                let _ = lazy_unmount(mountpoint);
                return;
            }
        }
    }
}

/// Detaches the mount and aborts its FUSE connection, so the session ends and every user of
/// the mount gets an error at once; exits the process if the session does not end soon.
fn force_unmount(mountpoint: &Path, connection: Option<u64>) {
    let _ = lazy_unmount(mountpoint);
    if let Some(n) = connection {
        let _ = std::fs::write(format!("/sys/fs/fuse/connections/{n}/abort"), "1");
    }
    std::thread::spawn(|| {
        std::thread::sleep(Duration::from_secs(5));
        tracing::warn!("the session did not end after the forced unmount; exiting");
        std::process::exit(1);
    });
}

fn fuser_config(config: &Config) -> fuser::Config {
    let mut fc = fuser::Config::default();
    fc.mount_options = vec![
        fuser::MountOption::FSName(format!("prepfs:{}", config.source.display())),
        fuser::MountOption::Subtype("prepfs".into()),
        // Not `RO`: the kernel would refuse mkdir/rmdir under jobs/ before asking us. Every other
        // change is refused by the daemon with EROFS.
        fuser::MountOption::NoAtime,
        fuser::MountOption::NoDev,
        fuser::MountOption::NoSuid,
        // The kernel checks every access against the owners and modes the mount shows (the
        // source's): nothing the source denies a user reaches them through the mount.
        fuser::MountOption::DefaultPermissions,
    ];
    if config.access.allow_other {
        // Other users (training jobs run as other accounts) may use the mount: the operator's
        // choice, never the default.
        fc.acl = fuser::SessionACL::All;
    }
    fc.n_threads = Some(config.fuse_threads);
    fc.clone_fd = true;
    fc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_directory_is_ready_and_a_mounted_one_is_busy() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(mountpoint_state(dir.path()).expect("state"), MountpointState::Ready);
        assert!(matches!(mountpoint_state(Path::new("/proc")).expect("state"), MountpointState::Busy(_)));
        assert!(mountpoint_state(&dir.path().join("missing")).is_err());
    }

    #[test]
    fn prepare_creates_a_missing_mountpoint() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mnt = dir.path().join("a/b");
        prepare_mountpoint(&mnt).expect("prepare");
        assert!(mnt.is_dir());
        assert!(prepare_mountpoint(Path::new("/proc")).is_err());
    }

    #[test]
    fn mount_paths_are_unescaped() {
        assert_eq!(unescape_mount_path("/mnt/a\\040b"), "/mnt/a b");
    }
}
