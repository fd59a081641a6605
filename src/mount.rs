//! Mounting: preparing the mountpoint (clearing a dead mount a killed prepfs left behind),
//! scanning the source with progress, starting the FUSE session, and unmounting cleanly on
//! SIGINT, SIGTERM or SIGHUP.

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use nix::sys::signal::{SigSet, Signal};

use crate::catalog::Catalog;
use crate::config::Config;
use crate::filesystem::Filesystem;
use crate::fuse::FuseAdapter;

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
            let canonical = path.canonicalize()?;
            let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
            let busy = mounts.lines().find_map(|line| {
                let mut fields = line.split_whitespace();
                let (what, target, fstype) = (fields.next()?, fields.next()?, fields.next()?);
                (Path::new(&unescape_mount_path(target)) == canonical).then(|| format!("{fstype} ({what})"))
            });
            Ok(busy.map_or(MountpointState::Ready, MountpointState::Busy))
        }
    }
}

/// `/proc/mounts` escapes space, tab, newline and backslash as octal.
fn unescape_mount_path(s: &str) -> String {
    s.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")
}

/// Makes the mountpoint ready: creates it if missing, clears a dead FUSE mount, refuses a live one.
pub fn prepare_mountpoint(path: &Path) -> Result<(), MountError> {
    let fail = |why: String| MountError::Mountpoint { path: path.display().to_string(), why };
    if !path.exists() && std::fs::symlink_metadata(path).is_err() {
        std::fs::create_dir_all(path).map_err(|e| fail(format!("cannot create: {e}")))?;
    }
    match mountpoint_state(path).map_err(|e| fail(e.to_string()))? {
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

/// Scans the source with a progress line on the terminal.
pub fn scan_with_progress(source: &Path) -> Result<Catalog, MountError> {
    let bar = ProgressBar::new_spinner();
    bar.set_style(ProgressStyle::with_template("{spinner} scanning {msg} files ({elapsed})").unwrap_or_else(|_| ProgressStyle::default_spinner()));
    bar.enable_steady_tick(Duration::from_millis(120));
    let catalog = Catalog::scan(source, |n| {
        if n % 1024 < 64 {
            bar.set_message(n.to_string());
        }
    })
    .map_err(|e| MountError::Scan { path: source.display().to_string(), source: e });
    bar.finish_and_clear();
    catalog
}

/// Mounts `config` and serves until the mount goes away or a signal asks to stop.
pub fn run(config: Config) -> Result<(), MountError> {
    // Block the stop signals before any thread starts, so that only the waiter sees them.
    let mut signals = SigSet::empty();
    for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        signals.add(s);
    }
    signals.thread_block().map_err(|e| MountError::Fuse(e.into()))?;

    prepare_mountpoint(&config.mountpoint)?;
    let catalog = scan_with_progress(&config.source)?;
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
    let fs = Arc::new(Filesystem::new(config, catalog));
    let adapter = FuseAdapter::new(Arc::clone(&fs), Arc::new(pool));
    fs.plan_cache();
    if fs.config().cache.refill && fs.cache().enabled() {
        spawn_refill(Arc::clone(&fs)).map_err(MountError::Fuse)?;
    }
    spawn_housekeeping(Arc::clone(&fs)).map_err(MountError::Fuse)?;
    for i in 0..fs.config().threads {
        spawn_prefetch(Arc::clone(&fs), i).map_err(MountError::Fuse)?;
    }
    let mut session = fuser::Session::new(adapter, &mountpoint, &fuse_config).map_err(MountError::Fuse)?;
    let mut unmounter = session.unmount_callable();
    let waiter_mountpoint = mountpoint.clone();
    std::thread::Builder::new()
        .name("prepfs-signals".into())
        .spawn(move || {
            if let Ok(sig) = signals.wait() {
                tracing::info!(signal = ?sig, "unmounting");
                if let Err(e) = unmounter.unmount() {
                    tracing::warn!(error = %e, "unmount failed; detaching");
                    let _ = lazy_unmount(&waiter_mountpoint);
                }
            }
        })
        .map_err(MountError::Fuse)?;
    eprintln!(
        "prepfs: serving {} samples of {} at {} (Ctrl-C to unmount)",
        fs.catalog().sample_count(),
        fs.config().source.display(),
        mountpoint.display()
    );
    session.run().map_err(MountError::Fuse)?;
    tracing::info!(mountpoint = %mountpoint.display(), "unmounted");
    Ok(())
}

/// The background refill: one worker per decode core, below the priority of requests, keeps the
/// free augmented room filled with fresh augmentations, so augmented hits keep coming across
/// epochs and idle CPU (a reader between requests, a GPU step) prepares what will be read next.
fn spawn_refill(fs: Arc<Filesystem>) -> io::Result<()> {
    let lanes = fs.config().decode_parallelism();
    for lane in 0..lanes {
        let fs = Arc::clone(&fs);
        std::thread::Builder::new().name(format!("prepfs-refill-{lane}")).spawn(move || {
            lower_priority(10);
            let mut cursor = 0usize;
            loop {
                if !fs.refill_lane_once(&mut cursor, (lane, lanes)) {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        })?;
    }
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

/// Once a second: retire idle jobs, and re-plan the cache split from the rates measured while
/// serving.
fn spawn_housekeeping(fs: Arc<Filesystem>) -> io::Result<()> {
    std::thread::Builder::new().name("prepfs-housekeeping".into()).spawn(move || loop {
        std::thread::sleep(Duration::from_secs(1));
        fs.retire_idle_jobs();
        fs.replan();
    })?;
    Ok(())
}

/// A prefetch worker: prepares the samples queued ahead of jobs, below the priority of requests.
fn spawn_prefetch(fs: Arc<Filesystem>, i: usize) -> io::Result<()> {
    std::thread::Builder::new().name(format!("prepfs-prefetch-{i}")).spawn(move || {
        lower_priority(10);
        let never = std::sync::atomic::AtomicBool::new(false);
        loop {
            fs.run_prefetch(Duration::from_secs(1), &never);
        }
    })?;
    Ok(())
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
    ];
    if nix::unistd::geteuid().is_root() {
        // Training jobs often run as other users on the same machine.
        fc.acl = fuser::SessionACL::All;
        fc.mount_options.push(fuser::MountOption::DefaultPermissions);
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
