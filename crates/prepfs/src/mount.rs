//! Mounting: preparing the mountpoint (clearing a dead mount a killed prepfs left behind),
//! scanning the source with progress, starting the FUSE session and the mount's background
//! threads (owned by [`Workers`], stopped and joined at unmount), and unmounting cleanly on
//! SIGINT, SIGTERM or SIGHUP (the signal waiter and its drain: `crate::stop`).

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prepfs_core::progress::Progress;

use prepfs_source::catalog::Catalog;
use prepfs_core::config::Config;
use prepfs_core::fs::Filesystem;
use prepfs_core::drain::{Activity, DrainConfig};
use crate::fuse::{FuseAdapter, Gate, OpenPool};
use crate::detach::{lazy_unmount, try_unmount};
use crate::stop::SignalWaiter;
use prepfs_base::tasks::{self, Workers};

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
    /// A supervised mount's server ended, or could not mount (its own words).
    #[error("{0}")]
    Server(String),
    #[error("stopped by a signal before the mount was ready")]
    Stopped,
    #[error("--metrics-addr {addr}: {source}")]
    Metrics { addr: String, source: io::Error },
    #[error(transparent)]
    LoaderSocket(#[from] prepfs_core::loader::LoaderSocketError),
    /// The source is the mountpoint or below it (through symlinks too): the mount would hide
    /// its own source, and its FUSE threads would wait on their own mount for good.
    #[error("source {dataset} is inside mountpoint {mountpoint}: the mount would serve itself and hang; pick a source outside the mountpoint")]
    SourceInMountpoint { dataset: String, mountpoint: String },
    /// The mountpoint is below the source: once mounted, that directory of the source would be
    /// the mount itself, which a FUSE thread reading the source would wait on.
    #[error("mountpoint {mountpoint} is inside source {dataset}: the source would hold its own mount; pick a mountpoint outside the source")]
    MountpointInSource { dataset: String, mountpoint: String },
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
pub(crate) fn mountpoint_state(path: &Path) -> io::Result<MountpointState> {
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

/// What a mount does with its mountpoint and how it tells it is serving: the command line's
/// lifecycle options.
#[derive(Default)]
pub struct Lifecycle {
    /// Create a missing mountpoint (and its missing parents) rather than refuse it.
    pub create_mountpoint: bool,
    /// Keep a mountpoint prepfs created at unmount (the older `prepfs mount CONFIG` form, which
    /// always created it and left it); otherwise it is removed again if still empty.
    pub keep_created_mountpoint: bool,
    /// Mount over a directory that has entries (hidden while mounted) rather than refuse it.
    pub allow_non_empty: bool,
    /// Mount `-o ro`: the kernel refuses every change itself, `rmdir jobs/NAME` too (a job still
    /// starts at the first lookup of its name).
    pub read_only: bool,
    /// `HOST:PORT` to answer `GET /metrics` on (Prometheus's text format), while mounted.
    pub metrics_addr: Option<String>,
    /// Called once the mount serves (the FUSE session reads requests); by default prepfs says
    /// `prepfs: serving ...` on stderr.
    pub on_ready: Option<OnReady>,
    /// How a signal's unmount waits for the readers (`--drain`, `--drain-max`).
    pub drain: DrainConfig,
}

/// What [`Lifecycle::on_ready`] calls.
pub type OnReady = Box<dyn FnOnce(&Ready<'_>)>;

/// A mount that serves, as told to [`Lifecycle::on_ready`].
pub struct Ready<'a> {
    pub samples: usize,
    pub source: &'a Path,
    pub mountpoint: &'a Path,
}

/// Directories prepfs created for a mountpoint, deepest first: removed again on drop (at
/// unmount, or when the mount fails to start), each only if it is still empty.
#[derive(Debug, Default)]
pub struct CreatedMountpoint {
    pub(crate) dirs: Vec<std::path::PathBuf>,
}

impl CreatedMountpoint {
    /// Makes the directory and whichever of its parents are missing; remembers what it made.
    fn create(path: &Path) -> io::Result<CreatedMountpoint> {
        let mut missing = Vec::new();
        let mut at = Some(path);
        while let Some(p) = at {
            if p.as_os_str().is_empty() || std::fs::symlink_metadata(p).is_ok() {
                break;
            }
            missing.push(p.to_path_buf());
            at = p.parent();
        }
        std::fs::create_dir_all(path)?;
        Ok(CreatedMountpoint { dirs: missing })
    }

    /// Leaves what was created in place (the older form's behaviour).
    fn keep(mut self) {
        self.dirs.clear();
    }
}

impl Drop for CreatedMountpoint {
    fn drop(&mut self) {
        for dir in &self.dirs {
            // Only an empty directory goes (remove_dir refuses others, and a mounted one).
            if let Err(e) = std::fs::remove_dir(dir) {
                tracing::info!(path = %prepfs_base::escape::escaped(&dir), error = %e, "left the directory prepfs created for the mountpoint");
                return;
            }
        }
    }
}

/// Makes the mountpoint ready: refuses a missing one unless `create` (then creates it and what
/// it returns removes it again), refuses one with entries unless `allow_non_empty`, clears a
/// dead FUSE mount (whatever its age), refuses a live one.
pub(crate) fn prepare_mountpoint(path: &Path, create: bool, allow_non_empty: bool) -> Result<Option<CreatedMountpoint>, MountError> {
    let fail = |why: String| MountError::Mountpoint { path: prepfs_base::escape::escaped(&path).to_string(), why };
    let mut created = None;
    // The state first: a dead mount answers stat with ENOTCONN, which is not "missing".
    let state = match mountpoint_state(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound && create => {
            created = Some(CreatedMountpoint::create(path).map_err(|e| fail(format!("cannot create: {e}")))?);
            mountpoint_state(path)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(fail("does not exist (create it, or pass --create-mountpoint)".into()));
        }
        other => other,
    };
    match state.map_err(|e| fail(e.to_string()))? {
        MountpointState::Ready => {}
        MountpointState::Busy(what) => return Err(fail(format!("already mounted: {what}; unmount it first"))),
        MountpointState::Dead => {
            tracing::warn!(mountpoint = %prepfs_base::escape::escaped(&path), "found a dead mount (its daemon was killed); clearing it");
            lazy_unmount(path).map_err(|e| fail(format!("cannot clear the dead mount: {e}")))?;
            match mountpoint_state(path).map_err(|e| fail(e.to_string()))? {
                MountpointState::Ready => {}
                other => return Err(fail(format!("still not usable after clearing: {other:?}"))),
            }
        }
    }
    if !allow_non_empty {
        let mut entries = std::fs::read_dir(path).map_err(|e| fail(format!("cannot list: {e}")))?;
        if let Some(entry) = entries.next() {
            let first = entry.map(|e| prepfs_base::escape::escaped(&e.file_name()).to_string()).unwrap_or_default();
            return Err(fail(format!(
                "is not empty (it holds `{first}`, which the mount would hide); pick an empty directory, or pass --allow-non-empty (-o nonempty)"
            )));
        }
    }
    Ok(created)
}

/// Refuses a mount over itself: a source that is the mountpoint or lies below it, or a
/// mountpoint below the source, both compared canonical (symlinks followed). A source that does
/// not resolve is left to the scan to report.
pub(crate) fn check_no_overlap(source: &Path, mountpoint: &Path) -> Result<(), MountError> {
    let Ok(dataset) = source.canonicalize() else { return Ok(()) };
    let mountpoint = mountpoint.canonicalize().map_err(|e| MountError::Mountpoint { path: prepfs_base::escape::escaped(&mountpoint).to_string(), why: e.to_string() })?;
    let (shown_source, shown_mountpoint) = (prepfs_base::escape::escaped(&dataset).to_string(), prepfs_base::escape::escaped(&mountpoint).to_string());
    if dataset.starts_with(&mountpoint) {
        return Err(MountError::SourceInMountpoint { dataset: shown_source, mountpoint: shown_mountpoint });
    }
    if mountpoint.starts_with(&dataset) {
        return Err(MountError::MountpointInSource { dataset: shown_source, mountpoint: shown_mountpoint });
    }
    Ok(())
}

/// Whether this process may mount FUSE at `mountpoint`, asked before the (long) catalog scan:
/// `/dev/fuse` opens, and a user other than root has the setuid `fusermount3` to mount with,
/// write access to the mountpoint, and (for `allow_other`) `user_allow_other` in
/// `/etc/fuse.conf`.
pub(crate) fn check_fuse_access(mountpoint: &Path, allow_other: bool) -> Result<(), MountError> {
    let root = nix::unistd::geteuid().is_root();
    let fail = |why: String| MountError::Fuse(io::Error::new(io::ErrorKind::PermissionDenied, why));
    // fusermount3 opens the device as the user too, so a user who cannot open it cannot mount.
    if let Err(e) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/fuse") {
        let why = match e.raw_os_error() {
            Some(libc::ENOENT) | Some(libc::ENODEV) | Some(libc::ENXIO) => {
                "no FUSE device (load the module: `modprobe fuse`; in a container, pass --device /dev/fuse)".to_string()
            }
            Some(libc::EACCES) | Some(libc::EPERM) if !root => {
                use std::os::unix::fs::MetadataExt;
                let mode = std::fs::metadata("/dev/fuse").map(|m| format!("{:o}", m.mode() & 0o777)).unwrap_or_default();
                format!("this user may not use FUSE (/dev/fuse is mode {mode}; it is usually 666): ask an administrator, or mount as root")
            }
            Some(libc::EACCES) | Some(libc::EPERM) => "this process may not use FUSE (in a container: --device /dev/fuse and CAP_SYS_ADMIN)".to_string(),
            _ => "cannot use FUSE".to_string(),
        };
        return Err(fail(format!("cannot open /dev/fuse: {e}: {why}")));
    }
    if root {
        return Ok(());
    }
    // A user other than root mounts through fusermount3 (fuser's choice; FUSERMOUNT_PATH names
    // another), which must be setuid root.
    let helper = std::env::var_os("FUSERMOUNT_PATH")
        .map(std::path::PathBuf::from)
        .or_else(|| find_in_path("fusermount3"))
        .or_else(|| find_in_path("fusermount"));
    let Some(helper) = helper else {
        return Err(fail("fusermount3 not found: a user other than root mounts through it (install fuse3), or mount as root".into()));
    };
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(&helper).map_err(|e| fail(format!("{}: {e}", prepfs_base::escape::escaped(&helper))))?;
    if meta.uid() != 0 || meta.mode() & libc::S_ISUID == 0 {
        return Err(fail(format!(
            "{} is not setuid root, so a user other than root cannot mount with it (`chmod u+s` it as root, or mount as root)",
            prepfs_base::escape::escaped(&helper)
        )));
    }
    if allow_other && !fuse_conf_allows_other() {
        return Err(fail("allow_other for a user other than root needs `user_allow_other` in /etc/fuse.conf (or mount as root)".into()));
    }
    if mountpoint.exists() && nix::unistd::access(mountpoint, nix::unistd::AccessFlags::W_OK).is_err() {
        return Err(fail(format!(
            "{}: this user may not write to the mountpoint, and fusermount3 mounts only on one they may (or mount as root)",
            prepfs_base::escape::escaped(mountpoint)
        )));
    }
    Ok(())
}

fn find_in_path(name: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin".into());
    std::env::split_paths(&path).map(|d| d.join(name)).chain([Path::new("/bin").join(name), Path::new("/sbin").join(name)]).find(|p| p.is_file())
}

fn fuse_conf_allows_other() -> bool {
    std::fs::read_to_string("/etc/fuse.conf")
        .map(|t| t.lines().any(|l| l.split('#').next().unwrap_or("").trim() == "user_allow_other"))
        .unwrap_or(false)
}

/// Scans the source, its progress shown (`prepfs_core::progress`); gives up when `stop` is set.
pub(crate) fn scan_with_progress(source: &Path, stop: &AtomicBool) -> Result<Catalog, MountError> {
    let progress = Progress::start("scanning the source", "files", None);
    let catalog = Catalog::scan_until(
        source,
        |n| {
            if n % 1024 < 64 {
                progress.set(n as u64);
            }
        },
        stop,
    )
    .map_err(|e| match e.kind() {
        io::ErrorKind::Interrupted => MountError::Stopped,
        _ => MountError::Scan { path: prepfs_base::escape::escaped(&source).to_string(), source: e },
    });
    progress.finish();
    catalog
}

/// Indexes the shards `shards` names (in a directory, or in the object store `config` names),
/// the indexes kept in `config.shard_index_dir()` reused, its progress shown; gives up when
/// `stop` is set.
pub(crate) fn index_shards_with_progress(config: &Config, shards: &prepfs_core::config::ShardsConfig, stop: &AtomicBool) -> Result<(Catalog, prepfs_source::shards::Shards), MountError> {
    let index_dir = config.shard_index_dir();
    let index_dir = index_dir.as_deref();
    let progress = Progress::start("indexing the shards", "samples", None);
    let indexed = match &config.object_store {
        // Shards in an object store: its listing (kept as any store's), then their headers.
        Some(store) => prepfs_source::shards::Shards::index_in_store(shards, store, index_dir, config.listing_dir().as_deref(), |n| progress.set(n as u64), stop),
        None => prepfs_source::shards::Shards::index(shards, index_dir, |n| progress.set(n as u64), stop),
    };
    progress.finish();
    let mut indexed = indexed.map_err(|e| match e.kind() {
        io::ErrorKind::Interrupted => MountError::Stopped,
        _ => MountError::Scan { path: prepfs_base::escape::escaped(&shards.pattern).to_string(), source: e },
    })?;
    let report = indexed.report();
    tracing::info!(
        shards = report.shards,
        samples = report.samples,
        reused = report.reused,
        indexed = report.indexed,
        bad_labels = report.bad_labels,
        cut_shards = report.cut_shards,
        duplicates = report.duplicates,
        unnamed = report.unnamed,
        index_bytes = report.index_file_bytes,
        memory_bytes_per_sample = format!("{:.0}", report.memory_bytes_per_sample),
        index_dir = %index_dir.map_or("none".into(), |d| prepfs_base::escape::escaped(&d).to_string()),
        "shards ready"
    );
    let catalog = indexed.take_catalog().ok_or_else(|| MountError::Scan { path: prepfs_base::escape::escaped(&shards.pattern).to_string(), source: io::Error::other("no catalog") })?;
    Ok((catalog, indexed))
}

/// Lists the object store `store` names (or reuses the listing kept in `listing_dir`), its
/// progress shown; gives up when `stop` is set.
pub(crate) fn list_objects_with_progress(
    store: &prepfs_core::config::ObjectStoreConfig,
    listing_dir: Option<&Path>,
    stop: &AtomicBool,
) -> Result<(Catalog, prepfs_source::s3::ObjectStore), MountError> {
    let progress = Progress::start("listing the object store", "keys", None);
    let listed = prepfs_source::s3::ObjectStore::list(store, listing_dir, |n| progress.set(n as u64), stop);
    progress.finish();
    let mut listed = listed.map_err(|e| match e.kind() {
        io::ErrorKind::Interrupted => MountError::Stopped,
        _ => MountError::Scan { path: store.url.clone(), source: e },
    })?;
    let report = listed.report();
    tracing::info!(
        url = %store.url,
        keys = report.keys,
        files = report.files,
        skipped = report.skipped,
        samples = report.samples,
        bytes = report.bytes,
        reused = report.reused,
        listing_age_s = format!("{:.0}", report.age_s),
        listing_bytes = report.kept_bytes,
        listing_dir = %listing_dir.map_or("none".into(), |d| prepfs_base::escape::escaped(&d).to_string()),
        retry_timeout = store.retry_timeout_s,
        "object store ready"
    );
    let catalog = listed.take_catalog().ok_or_else(|| MountError::Scan { path: store.url.clone(), source: io::Error::other("no catalog") })?;
    Ok((catalog, listed))
}

/// Checks the samples at mount as `bad_samples.validate` says (`headers`, `scan`), on the
/// filesystem's pool of batch fills (`prepfs-fill-<i>`), its progress shown; nothing for
/// `first-touch`.
fn validate_with_progress(fs: &Filesystem, stop: &AtomicBool) -> Result<(), MountError> {
    let mode = fs.config().bad_samples.validate;
    if mode == prepfs_core::config::Validate::FirstTouch {
        return Ok(());
    }
    let what = if mode == prepfs_core::config::Validate::Scan { "validating (full decode)" } else { "validating (headers)" };
    let total = fs.catalog().sample_count() as u64;
    let progress = Progress::start(what, "samples", Some(total));
    let started = std::time::Instant::now();
    let bad = fs.validate_samples(|| progress.add(1), stop);
    progress.finish();
    let seconds = format!("{:.1}", started.elapsed().as_secs_f64());
    tracing::info!(samples = total, bad, seconds, "{what}: done; the bad samples are listed in .prepfs/stats.json");
    Ok(())
}

/// Mounts `config` and serves until the mount goes away or a signal asks to stop. Every
/// thread it starts is stopped and joined before it returns, and the disk tier's queued writes
/// are written.
pub fn run(config: Config, lifecycle: Lifecycle) -> Result<(), MountError> {
    // Block the stop signals before any thread starts, so that only the waiter sees them; the
    // waiter runs from the start, so a signal during a long scan stops it.
    let signals = crate::stop::signal_set();
    signals.thread_block().map_err(|e| MountError::Fuse(e.into()))?;
    let waiter = SignalWaiter::start(signals, config.mountpoint.clone(), lifecycle.drain).map_err(MountError::Fuse)?;
    let served = serve(config, lifecycle, &waiter);
    waiter.finish();
    if let (Err(e), Some(control)) = (&served, crate::takeover::control()) {
        // A supervised server says why, for the supervisor to say it as the mount's failure.
        let _ = control.send(&crate::takeover::ToSupervisor::Failed { error: e.to_string() }, &[]);
    }
    served
}

fn serve(config: Config, mut lifecycle: Lifecycle, waiter: &SignalWaiter) -> Result<(), MountError> {
    for warning in config.memory_warnings() {
        tracing::warn!("{warning}");
    }
    // Started by a supervisor (`crate::supervisor`): a server after the first takes the live
    // mount over instead of mounting; nothing may look at the mountpoint then (a stat of it
    // would wait on this very process).
    let supervised = crate::takeover::given().map_err(MountError::Fuse)?;
    let taking = supervised.as_ref().and_then(|g| g.taken.clone());
    if let Some(given) = &supervised {
        if given.format > crate::takeover::FORMAT {
            tracing::error!(format = given.format, reads = crate::takeover::FORMAT, "the handed-over state is of a newer format than this binary reads: refusing the handover");
            std::process::exit(crate::takeover::EXIT_UNKNOWN_FORMAT);
        }
    }
    let created = match &taking {
        Some(_) => None,
        None => {
            // Everything that can refuse the mount is asked before the scan, which may take minutes.
            check_fuse_access(&config.mountpoint, config.access.allow_other)?;
            let created = prepare_mountpoint(&config.mountpoint, lifecycle.create_mountpoint, lifecycle.allow_non_empty)?;
            // Before anything mounts (a created mountpoint is removed again as `created` drops).
            if config.object_store.is_none() {
                check_no_overlap(&config.source, &config.mountpoint)?;
            }
            created
        }
    };
    // Held while serving: the other mounts' `memory: auto` counts this one's cache.
    let _registered = register_memory(&config);
    if let Some(created) = created.as_ref().filter(|_| lifecycle.create_mountpoint) {
        tracing::info!(mountpoint = %prepfs_base::escape::escaped(&config.mountpoint), dirs = created.dirs.len(), "created the mountpoint");
    }
    // Dropped when serve returns: removes what it created (after the unmount), if still empty.
    // A supervised server hands it to the supervisor, which outlives it.
    let mut created_dirs = Vec::new();
    let _created = match created {
        Some(c) if lifecycle.keep_created_mountpoint => {
            c.keep();
            None
        }
        Some(mut c) if supervised.is_some() => {
            created_dirs = std::mem::take(&mut c.dirs);
            None
        }
        other => other,
    };
    let canonical_mountpoint = match &supervised {
        Some(given) if taking.is_some() => given.canonical_mountpoint.clone(),
        _ => config.mountpoint.canonicalize().unwrap_or_else(|_| config.mountpoint.clone()),
    };
    let metrics_listener = match (&taking, &lifecycle.metrics_addr) {
        (Some(taken), _) => taken.metrics.map(|fd| crate::takeover::own(fd).map(std::net::TcpListener::from)).transpose().map_err(MountError::Fuse)?,
        (None, Some(addr)) => Some(std::net::TcpListener::bind(addr.as_str()).map_err(|source| MountError::Metrics { addr: addr.clone(), source })?),
        (None, None) => None,
    };
    let loader_server = match &taking {
        Some(taken) => match (taken.loader, &taken.mounted.loader_path) {
            (Some(fd), Some(path)) => {
                let listener = crate::takeover::own(fd).map(std::os::unix::net::UnixListener::from).map_err(MountError::Fuse)?;
                Some(prepfs_core::loader::LoaderServer::from_listener(listener, path.clone()))
            }
            _ => None,
        },
        None => bind_loader_socket(&config)?,
    };
    // Outputs are held in memory files while passthrough is on: one descriptor each.
    match prepfs_pixels::served::raise_fd_limit() {
        Ok(limit) => tracing::debug!(limit, "open file limit"),
        Err(e) => tracing::warn!("cannot raise the open file limit ({e}): fewer outputs are kept ready to pass through"),
    }
    // Shards are indexed (or their kept indexes reused), an object store listed, in place of
    // the directory scan.
    let (catalog, shards, store) = match (&config.shards, &config.object_store) {
        (Some(shards), _) => {
            let (catalog, shards) = index_shards_with_progress(&config, shards, &waiter.stopping)?;
            (catalog, Some(shards), None)
        }
        (None, Some(store)) => {
            let (catalog, store) = list_objects_with_progress(store, config.listing_dir().as_deref(), &waiter.stopping)?;
            (catalog, None, Some(store))
        }
        (None, None) => (scan_with_progress(&config.source, &waiter.stopping)?, None, None),
    };
    tracing::info!(
        samples = catalog.sample_count(),
        files = catalog.file_count(),
        bytes_per_sample = format!("{:.0}", catalog.bytes_per_sample()),
        "catalog ready"
    );
    // Listing millions of entries frees far more than the catalog keeps.
    prepfs_base::alloc::release_freed();
    let pool = OpenPool::new(config.threads).map_err(|e| MountError::Pool(e.to_string()))?;
    let mountpoint = config.mountpoint.clone();
    let fuse_config = fuser_config(&config, lifecycle.read_only, supervised.is_some());
    let fs = match (&shards, &store) {
        (Some(shards), _) => Filesystem::over_shards(config, catalog, shards),
        (None, Some(store)) => Filesystem::over_object_store(config, catalog, store),
        (None, None) => Filesystem::new(config, catalog),
    };
    let fs = Arc::new(fs.map_err(MountError::Fuse)?);
    fs.set_server_life(prepfs_core::stats::ServerLife {
        pid: std::process::id(),
        restarts: supervised.as_ref().map_or(0, |g| g.restarts),
        last_restart_cause: supervised.as_ref().and_then(|g| g.last_cause.clone()),
        supervised: supervised.is_some(),
    });
    if let Some(given) = &supervised {
        // Every job's place in its epoch, kept in the supervisor's memory file: put back after a
        // restart (same slots, codes, epochs, samples served), recorded from here on. A ledger
        // that cannot be used leaves the jobs starting anew; the mount serves all the same.
        match crate::takeover::own(given.ledger).map(std::fs::File::from).map_err(prepfs_sampling::LedgerError::Io).and_then(|f| fs.attach_ledger(f)) {
            Ok(report) => tracing::info!("{report}"),
            Err(e) => tracing::warn!("the jobs' epoch ledger is not used ({e}): a restart begins every job's epoch anew"),
        }
        fs.number_handles_from((given.restarts << 40) + 1);
        fs.attach_recent_opens(crate::takeover::own(given.opens).map(std::fs::File::from).map_err(MountError::Fuse)?);
        let pending = fs.attach_pending_names(crate::takeover::own(given.pending).map(std::fs::File::from).map_err(MountError::Fuse)?);
        if pending > 0 {
            tracing::info!(names = pending, "pending job names put back");
        }
    }
    if let Err(e) = validate_with_progress(&fs, &waiter.stopping) {
        fs.shutdown();
        return Err(e);
    }
    let activity = Arc::new(Activity::default());
    let gate = Arc::new(Gate::default());
    // A supervised server's lowest backing id is kept for the next one; a server taking over
    // closes those its predecessor left (`fuse/backings.rs`). The descriptor is duplicated: the
    // adapter writes through its own.
    let backings_file = supervised
        .as_ref()
        .map(|g| crate::takeover::own(g.backings).map(std::fs::File::from))
        .transpose()
        .map_err(MountError::Fuse)?;
    let lowest_backing = backings_file.as_ref().map(std::fs::File::try_clone).transpose().map_err(MountError::Fuse)?;
    let adapter = FuseAdapter::new(Arc::clone(&fs), pool, Arc::clone(&activity), Arc::clone(&gate), lowest_backing);
    let handshake = adapter.handshake();
    fs.plan_cache();
    if waiter.stopping.load(Ordering::SeqCst) {
        fs.shutdown();
        return Err(MountError::Stopped);
    }
    let control = crate::takeover::control();
    let (session, connection) = match &taking {
        Some(taken) => {
            // The connection's own descriptor, already initialised: no FUSE_INIT; what the
            // first server's decided is restored.
            let fuse = crate::takeover::own(taken.fuse).map_err(MountError::Fuse)?;
            crate::fuse::restore_passthrough(&fs, &taken.mounted.passthrough);
            let _ = handshake.set(crate::fuse::Handshake {
                proto: taken.mounted.proto,
                passthrough: taken.mounted.passthrough.clone(),
                has_resend: taken.mounted.has_resend,
            });
            if let (Ok(()), Some(file)) = (&taken.mounted.passthrough, &backings_file) {
                match crate::fuse::close_left_behind(&fuse, crate::fuse::LowestLive::read(file)) {
                    Ok(closed) => tracing::info!(closed, "closed the backing ids the server before this one left registered"),
                    Err(e) => tracing::warn!(error = %e, "cannot close the backing ids the server before this one left: their files stay held until the mount ends"),
                }
            }
            let (major, minor) = taken.mounted.proto;
            let acl = fuse_config.acl;
            (fuser::Session::from_initialized_fd(adapter, fuse, acl, fuse_config, fuser::Version(major, minor)), taken.mounted.connection)
        }
        None => {
            let session = fuser::Session::new(adapter, &mountpoint, &fuse_config).map_err(MountError::Fuse)?;
            let connection = fuse_connection(&canonical_mountpoint);
            if let Some(control) = control {
                hand_mount_to_supervisor(control, &session, &handshake, connection, loader_server.as_ref(), metrics_listener.as_ref(), created_dirs).map_err(MountError::Fuse)?;
            }
            (session, connection)
        }
    };
    let notifier = session.notifier();
    let mut workers = Workers::default();
    // `/readyz`: ready once the session reads requests, until a drain or a handover begins.
    let serving = Arc::new(AtomicBool::new(false));
    let readiness = {
        let (serving, stopping, gate) = (Arc::clone(&serving), Arc::clone(&waiter.stopping), Arc::clone(&gate));
        move || match (serving.load(Ordering::Relaxed), stopping.load(Ordering::Relaxed), gate.is_closed()) {
            (_, true, _) => Err("draining to unmount".to_string()),
            (_, _, true) => Err("handing the mount over to a new server".to_string()),
            (false, _, _) => Err("starting".to_string()),
            (true, false, false) => Ok(()),
        }
    };
    let started = start_workers(&fs, &mut workers, notifier.clone(), loader_server).and_then(|()| match metrics_listener {
        Some(listener) => start_metrics_endpoint(&fs, &mut workers, listener, readiness),
        None => Ok(()),
    });
    waiter.mounted(connection, activity, canonical_mountpoint.clone());
    // The session's own thread reads requests from here on (its drop no longer unmounts: see
    // `end_session`).
    let session = match started.and_then(|()| session.spawn()) {
        Ok(session) => session,
        Err(e) => {
            if taking.is_none() {
                let _ = try_unmount(&mountpoint).or_else(|_| lazy_unmount(&mountpoint));
            }
            stop_and_join(workers, &fs);
            return Err(MountError::Fuse(e));
        }
    };
    serving.store(true, Ordering::Relaxed);
    if taking.is_some() {
        // What the server before this one had read and never answered, sent again.
        match notifier.resend() {
            Ok(()) => tracing::info!("took the mount over; the kernel sends again what the last server left unanswered"),
            Err(e) => tracing::warn!(error = %e, "took the mount over, but the kernel cannot send again what the last server left unanswered (FUSE_NOTIFY_RESEND needs Linux 6.9): those callers wait until the mount ends"),
        }
    }
    if let Some(control) = control {
        let ready = crate::takeover::ToSupervisor::Ready {
            samples: fs.catalog().sample_count(),
            source: prepfs_base::escape::escaped(&fs.config().source).to_string(),
            mountpoint: prepfs_base::escape::escaped(&mountpoint).to_string(),
            pid: std::process::id(),
        };
        if let Err(e) = control.send(&ready, &[]) {
            tracing::warn!(error = %e, "cannot tell the supervisor the mount serves");
        }
        let handover = start_handover_listener(control.try_clone().map_err(MountError::Fuse)?, Arc::clone(&gate), Arc::clone(&fs)).map_err(MountError::Fuse)?;
        let ran = end_session(session, &canonical_mountpoint, connection);
        stop_and_join(workers, &fs);
        // The mount is over: the handover waiter is woken (its socket shut) and joined.
        control.shutdown();
        let _ = handover.join();
        tracing::info!(mountpoint = %prepfs_base::escape::escaped(&mountpoint), "unmounted");
        return ran.map_err(MountError::Fuse);
    }
    let ready = Ready { samples: fs.catalog().sample_count(), source: &fs.config().source, mountpoint: &mountpoint };
    match lifecycle.on_ready.take() {
        Some(tell) => tell(&ready),
        None => prepfs_base::log::say(&format!(
            "prepfs: serving {} samples of {} at {} (Ctrl-C to unmount)",
            ready.samples,
            prepfs_base::escape::escaped(&ready.source),
            prepfs_base::escape::escaped(&ready.mountpoint)
        )),
    }
    let ran = end_session(session, &canonical_mountpoint, connection);
    stop_and_join(workers, &fs);
    tracing::info!(mountpoint = %prepfs_base::escape::escaped(&mountpoint), "unmounted");
    ran.map_err(MountError::Fuse)
}

/// Registers the mount's cache memory machine-wide (src/machine_memory.rs) and logs how
/// `memory: auto` was decided; a registry that cannot be written is said in the log.
fn register_memory(config: &Config) -> Option<prepfs_core::machine_memory::Registration> {
    if let Some(auto) = config.cache.auto {
        tracing::info!(
            memory = auto.memory,
            machine_budget = auto.machine_budget,
            other_mounts = auto.others,
            others_hold = auto.others_hold,
            "cache memory auto: half of what the other prepfs mounts leave of the machine budget \
             (half of available memory plus what they hold)"
        );
    }
    match prepfs_core::machine_memory::register(&config.mountpoint, config.cache.memory) {
        Ok(registration) => Some(registration),
        Err(e) => {
            tracing::warn!("cannot register the cache memory machine-wide ({e}): other mounts' `memory: auto` will not count this one");
            None
        }
    }
}

/// Waits until the FUSE session ends (the mount went away: `umount`, `fusermount3 -u`, the
/// signal waiter; or reading requests failed) and returns how it ended.
///
/// fuser 0.18 unmounts again when its session's mount guard drops, and its check whether the
/// mount is still there reads the device's `POLLERR` (the connection has ended) as "mounted":
/// after every clean unmount it calls umount(2) on the path once more and logs `Failed to
/// umount filesystem: Invalid argument` as root, or, as another user, runs `fusermount3 -u -z`
/// on whatever is mounted at the path by then. So the guard is dropped (fuser unmounts, and
/// any failure it logs is real) only while this very mount, by its FUSE connection number, is
/// still in the mount table; once it is gone, the guard is leaked: it holds only the path and
/// a /dev/fuse descriptor whose connection has ended, and the process exits moments later.
fn end_session(mut session: fuser::BackgroundSession, canonical: &Path, connection: Option<u64>) -> io::Result<()> {
    while !session.guard.is_finished() {
        std::thread::sleep(Duration::from_millis(10));
    }
    let still_mounted = match (mount_at(canonical), connection) {
        (None, _) => false,
        (Some(entry), Some(n)) => entry.minor == n && entry.fstype.starts_with("fuse"),
        // The connection was not known: let fuser decide.
        (Some(_), None) => true,
    };
    if still_mounted {
        return session.join();
    }
    // The finished thread's handle is swapped out for one of a thread that has nothing to do,
    // so that the session (and its mount guard) can be forgotten without being dropped.
    let guard = std::mem::replace(&mut session.guard, std::thread::spawn(|| Ok(())));
    std::mem::forget(session);
    guard.join().map_err(|_| io::Error::other("the FUSE session thread panicked"))?
}

/// Stops every worker (throttled source reads give up at once), joins them, then ends the
/// source's I/O and writes out the disk tier's queue.
fn stop_and_join(workers: Workers, fs: &Filesystem) {
    workers.stop();
    fs.interrupt();
    workers.join();
    fs.shutdown();
}

/// The `--metrics-addr` endpoint: a worker answering `GET /metrics`, `/healthz` and `/readyz`
/// (`ready` says) until unmount.
fn start_metrics_endpoint(
    fs: &Arc<Filesystem>,
    workers: &mut Workers,
    listener: std::net::TcpListener,
    ready: impl Fn() -> Result<(), String> + Send + 'static,
) -> io::Result<()> {
    let url = format!("http://{}/metrics", listener.local_addr()?);
    tracing::info!(url = %url, "metrics endpoint");
    let fs = Arc::clone(fs);
    let answers = prepfs_core::metrics::http::Checked(move || fs.metrics_text(), ready);
    workers.spawn("prepfs-metrics".into(), tasks::REQUEST, move |stop| prepfs_core::metrics::http::serve(listener, stop, answers))
}

/// Sleeps `d` unless `stop` is set meanwhile; returns whether to go on.
fn sleep_unless_stopped(stop: &AtomicBool, d: Duration) -> bool {
    let until = std::time::Instant::now() + d;
    while !stop.load(Ordering::Relaxed) {
        let Some(left) = until.checked_duration_since(std::time::Instant::now()) else { return true };
        std::thread::sleep(left.min(Duration::from_millis(50)));
    }
    false
}

fn start_workers(
    fs: &Arc<Filesystem>,
    workers: &mut Workers,
    notifier: fuser::Notifier,
    loader_server: Option<prepfs_core::loader::LoaderServer>,
) -> io::Result<()> {
    // The background refill: one worker per decode core, below the priority of requests, keeps
    // the free augmented room (each recipe's share of it too) filled with fresh augmentations, so augmented hits keep coming
    // across epochs and idle CPU (a reader between requests, a GPU step) prepares what will be
    // read next. It waits for a first reader (`Filesystem::refill_may_start`) unless `cache.refill: warm`.
    if fs.config().cache.refill != prepfs_core::config::RefillWhen::Off && fs.cache().enabled() {
        let lanes = fs.config().decode_parallelism();
        for lane in 0..lanes {
            let fs = Arc::clone(fs);
            workers.spawn(format!("prepfs-refill-{lane}"), tasks::BACKGROUND, move |stop| {
                let mut cursor = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let worked = fs.refill_lane(&mut cursor, (lane, lanes));
                    if !worked && !sleep_unless_stopped(stop, Duration::from_millis(50)) {
                        break;
                    }
                }
            })?;
        }
    }
    // Once a second: retire idle jobs, drop shared outputs no job needs this epoch, and re-plan
    // the cache split from the rates measured while serving.
    let housekeeping = Arc::clone(fs);
    workers.spawn("prepfs-housekeeping".into(), tasks::REQUEST, move |stop| {
        while sleep_unless_stopped(stop, Duration::from_secs(1)) {
            housekeeping.retire_idle_jobs();
            housekeeping.drop_outputs_no_job_needs();
            housekeeping.replan();
        }
    })?;
    // The closer: memory files of outputs served and released, closed (their pages freed) off
    // the request path, below the priority of requests (`served::OutputFiles::run_closer`).
    let files = Arc::clone(fs.output_files());
    workers.spawn("prepfs-closer".into(), tasks::BACKGROUND, move |stop| files.run_closer(stop))?;
    // Prefetch workers: prepare the samples queued ahead of jobs, below the priority of requests.
    for i in 0..fs.config().threads {
        let fs = Arc::clone(fs);
        workers.spawn(format!("prepfs-prefetch-{i}"), tasks::BACKGROUND, move |stop| {
            while !stop.load(Ordering::Relaxed) {
                fs.run_prefetch(Duration::from_millis(200), stop);
            }
        })?;
    }
    // The loader socket (`prepfs.Loader`), bound before the scan.
    if let Some(server) = loader_server {
        let _ = fs.stats().loader.socket.set(server.path().display().to_string());
        tracing::info!(socket = %prepfs_base::escape::escaped(server.path()), "loader socket");
        let fs = Arc::clone(fs);
        workers.spawn("prepfs-loader".into(), tasks::REQUEST, move |stop| server.serve(&fs, stop))?;
    }
    // Preprocessing on other machines' CPUs (`prepfs worker`): results kept as they come, new
    // items asked as the placement says (`Filesystem::remote_work_round`).
    if fs.has_remote_work() {
        let fs = Arc::clone(fs);
        workers.spawn("prepfs-remote-work".into(), tasks::REQUEST, move |stop| {
            while !stop.load(Ordering::Relaxed) {
                if !fs.remote_work_round(Duration::from_millis(50)) && !sleep_unless_stopped(stop, Duration::from_millis(20)) {
                    break;
                }
            }
        })?;
    }
    // Tells the kernel to drop what it cached of files whose source changed.
    let stale = Arc::clone(fs);
    workers.spawn("prepfs-notifier".into(), tasks::REQUEST, move |stop| {
        while !stop.load(Ordering::Relaxed) {
            for ino in stale.stale.drain(Duration::from_millis(200)) {
                // ENOENT: the kernel holds nothing of it. Nothing to do either way.
                let _ = notifier.inval_inode(fuser::INodeNo(ino), 0, 0);
            }
        }
    })?;
    Ok(())
}

/// The loader socket (`prepfs.Loader`), bound before the scan: one the config names that cannot
/// be bound (something else is there, another process listens) refuses the mount; the default
/// path only warns, and the mount serves files without the socket.
fn bind_loader_socket(config: &Config) -> Result<Option<prepfs_core::loader::LoaderServer>, MountError> {
    if !config.loader.enabled {
        return Ok(None);
    }
    let bound = match &config.loader.socket {
        Some(path) => return Ok(Some(prepfs_core::loader::LoaderServer::bind(path, config.access.allow_other)?)),
        None => prepfs_core::loader::default_path(&config.mountpoint, config.access.allow_other).and_then(|path| prepfs_core::loader::LoaderServer::bind(&path, config.access.allow_other)),
    };
    match bound {
        Ok(server) => Ok(Some(server)),
        Err(e) => {
            tracing::warn!("{e}; serving without the loader socket");
            Ok(None)
        }
    }
}

/// The FUSE connection number of the mount at `path` (its device's minor number), whose
/// `/sys/fs/fuse/connections/<n>/abort` ends it. Read from the mount table for the mountpoint
/// made canonical before mounting: a `stat` of it now would wait on this very daemon, whose
/// session does not run yet.
fn fuse_connection(canonical: &Path) -> Option<u64> {
    mount_at(canonical).map(|m| m.minor)
}

/// The first supervised server hands the supervisor what must outlive it: the connection's own
/// `/dev/fuse` descriptor (a duplicate, not a clone: requests stay on it when this process
/// dies), the listeners, and what FUSE_INIT decided.
fn hand_mount_to_supervisor(
    control: &crate::takeover::Control,
    session: &fuser::Session<FuseAdapter>,
    handshake: &std::sync::OnceLock<crate::fuse::Handshake>,
    connection: Option<u64>,
    loader: Option<&prepfs_core::loader::LoaderServer>,
    metrics: Option<&std::net::TcpListener>,
    created_dirs: Vec<std::path::PathBuf>,
) -> io::Result<()> {
    use std::os::fd::{AsFd, AsRawFd};
    let decided = handshake.get().cloned().ok_or_else(|| io::Error::other("the FUSE handshake did not run"))?;
    let mut fds = vec![session.as_fd().as_raw_fd()];
    fds.extend(loader.map(|l| l.listener_fd()));
    fds.extend(metrics.map(AsRawFd::as_raw_fd));
    let mounted = crate::takeover::Mounted {
        proto: decided.proto,
        passthrough: decided.passthrough,
        has_resend: decided.has_resend,
        connection,
        loader: loader.is_some(),
        metrics: metrics.is_some(),
        loader_path: loader.map(|l| l.path().to_path_buf()),
        created_dirs,
    };
    control.send(&crate::takeover::ToSupervisor::Mounted(mounted), &fds)
}

/// Waits for the supervisor's handover request (`prepfs upgrade`): then closes the gate, waits
/// for the requests let through to be answered, and exits with `EXIT_HANDED_OVER`, leaving the
/// connection, the listeners and the socket files to the next server (no destructor runs).
fn start_handover_listener(control: crate::takeover::Control, gate: Arc<Gate>, fs: Arc<Filesystem>) -> io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new().name("prepfs-handover".into()).spawn(move || {
        // One request is defined: hand over. The socket's end (the supervisor gone) ends the
        // thread; the server then stops as its signal says.
        if let Ok(Some((crate::takeover::ToServer::HandOver, _))) = control.receive::<crate::takeover::ToServer>() {
            tracing::info!("handing the mount over: no new request taken; finishing those taken");
            gate.close_and_wait();
            fs.flush_for_handover();
            tracing::info!("handed over");
            std::process::exit(crate::takeover::EXIT_HANDED_OVER);
        }
    })
}

fn fuser_config(config: &Config, read_only: bool, supervised: bool) -> fuser::Config {
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
    if read_only {
        // Asked for (`--read-only`, `-o ro`): the kernel refuses every change itself, rmdir under
        // jobs/ too (a job is still made by the first lookup of its name; mkdir's lookup too).
        fc.mount_options.push(fuser::MountOption::RO);
    }
    if config.access.allow_other {
        // Other users (training jobs run as other accounts) may use the mount: the operator's
        // choice, never the default.
        fc.acl = fuser::SessionACL::All;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 && !supervised {
        // As root, mounted through fusermount3 too (fuser does for this option), as every other
        // user's mount is: the mount table shows type `fuse.prepfs` (fuser's own mount(2) as
        // root says `fuse`), and a daemon that dies without unmounting (SIGKILL, a crash) leaves
        // no dead mount behind: fusermount3 unmounts when the daemon's connection closes. fuser
        // asks for more than the owner's access with it: root's (`allow_root`), the owner here.
        fc.mount_options.push(fuser::MountOption::AutoUnmount);
        if fc.acl == fuser::SessionACL::Owner {
            fc.acl = fuser::SessionACL::RootAndOwner;
        }
    }
    fc.n_threads = Some(config.fuse_threads);
    // Supervised, every thread reads the connection's own descriptor (the supervisor holds a
    // duplicate): a clone's requests would fail with its server, never to be sent again.
    fc.clone_fd = !supervised;
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
    fn prepare_creates_a_missing_mountpoint_only_when_asked_and_removes_it_after() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mnt = dir.path().join("a/b");
        assert!(prepare_mountpoint(&mnt, false, false).is_err());
        assert!(!mnt.exists());
        let created = prepare_mountpoint(&mnt, true, false).expect("prepare");
        assert!(mnt.is_dir());
        drop(created);
        assert!(!dir.path().join("a").exists(), "both levels it made are removed");
        assert!(prepare_mountpoint(Path::new("/proc"), true, true).is_err());
    }

    #[test]
    fn prepare_refuses_a_mountpoint_with_entries_unless_allowed() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("keep.txt"), "x").expect("write");
        let err = prepare_mountpoint(dir.path(), false, false).expect_err("non-empty");
        assert!(err.to_string().contains("not empty"), "{err}");
        assert!(prepare_mountpoint(dir.path(), false, true).expect("allowed").is_none());
        assert!(dir.path().join("keep.txt").exists());
    }

    #[test]
    fn mount_paths_are_unescaped() {
        assert_eq!(unescape_mount_path("/mnt/a\\040b"), "/mnt/a b");
    }
}
