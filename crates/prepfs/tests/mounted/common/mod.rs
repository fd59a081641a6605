//! Shared set-up of the mounted end-to-end tests: a synthetic dataset made by the project's
//! generator, and a mount guard that runs the real `prepfs` binary, waits until it serves, and
//! unmounts on every way out (drop, panic, or a watchdog when the test overruns its time limit);
//! and a WebDataset shard's members packed into a tar (`add_tar_member`).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The `prepfs` binary under test.
pub fn prepfs_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_prepfs"))
}

/// `prepfs mount CONFIG --source SOURCE --mountpoint MOUNTPOINT --drain 0.2`, stdin closed; the
/// caller picks stdout, stderr and how to run it. The short drain: a test's last read is just
/// before its stop, and a stop waits out the drain after it (tests/mounted/drain.rs tests it).
pub fn mount_command(config: &Path, source: &Path, mountpoint: &Path) -> Command {
    let mut cmd = mount_command_without_drain(config, source, mountpoint);
    cmd.arg("--drain").arg("0.2");
    cmd
}

/// [`mount_command`] without `--drain`: the caller gives it, or the default applies.
/// Each test mount registers its cache memory in a registry of its own (beside its config), so
/// test mounts running in parallel do not shrink each other's `memory: auto` (tests/
/// mounted/memory_auto.rs shares one on purpose).
pub fn mount_command_without_drain(config: &Path, source: &Path, mountpoint: &Path) -> Command {
    let mut cmd = Command::new(prepfs_bin());
    cmd.arg("mount").arg(config).arg("--source").arg(source).arg("--mountpoint").arg(mountpoint).stdin(Stdio::null());
    cmd.env("PREPFS_RUN_DIR", config.parent().unwrap_or(Path::new(".")).join("prepfs-run"));
    cmd
}

/// The dataset generator example, built beside the binary (`cargo build --examples`).
pub fn generator_bin() -> PathBuf {
    let bin = prepfs_bin();
    let dir = bin.parent().expect("target dir");
    let path = dir.join("examples").join("make_dataset");
    assert!(path.exists(), "{} is missing: run `cargo build --examples` (make test does)", path.display());
    path
}

/// Makes an ImageFolder dataset with the generator under `dir`.
pub fn make_dataset(dir: &Path, classes: u32, per_class: u32, bad: bool) -> PathBuf {
    let out = dir.join("source");
    let mut cmd = Command::new(generator_bin());
    cmd.arg("--out").arg(&out).arg("--classes").arg(classes.to_string());
    cmd.arg("--per-class").arg(per_class.to_string()).arg("--quiet");
    if bad {
        cmd.arg("--bad");
    }
    let status = cmd.status().expect("run generator");
    assert!(status.success(), "generator failed");
    out
}

/// Writes a config file for a test mount.
pub fn write_config(dir: &Path, yaml: &str) -> PathBuf {
    let path = dir.join("mount.yaml");
    std::fs::write(&path, yaml).expect("write config");
    path
}

/// A running `prepfs mount`; dropping it unmounts and reaps the process.
pub struct Mounted {
    pub mountpoint: PathBuf,
    child: Option<Child>,
    done: Arc<AtomicBool>,
    pub stderr_path: PathBuf,
    /// Leave whatever is mounted alone on drop (a test of dead-mount recovery).
    leave_mount: bool,
}

impl Mounted {
    /// Mounts `source` at `dir/mnt` with `config`, waits until `.prepfs/stats.json` answers,
    /// and arms a watchdog that tears the mount down after `limit`.
    pub fn start(dir: &Path, config: &Path, source: &Path, limit: Duration) -> Mounted {
        let mountpoint = dir.join("mnt");
        Mounted::start_command(mount_command(config, source, &mountpoint), &mountpoint, &dir.join("prepfs.log"), limit)
    }

    /// Runs `cmd` (a `prepfs mount` the caller built, mounting at `mountpoint`) with its stderr
    /// to `stderr_path`, waits until it serves, and arms the same watchdog as [`Mounted::start`].
    pub fn start_command(mut cmd: Command, mountpoint: &Path, stderr_path: &Path, limit: Duration) -> Mounted {
        let log = std::fs::File::create(stderr_path).expect("log file");
        let child = cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(log).spawn().expect("spawn prepfs");
        let done = Arc::new(AtomicBool::new(false));
        let mut mounted = Mounted {
            mountpoint: mountpoint.to_path_buf(),
            child: Some(child),
            done: done.clone(),
            stderr_path: stderr_path.to_path_buf(),
            leave_mount: false,
        };
        watchdog(mounted.pid(), mountpoint.to_path_buf(), done, limit);
        let ready = mountpoint.join(".prepfs/stats.json");
        let started = Instant::now();
        while !(mounted.log().contains("prepfs: serving") && std::fs::read(&ready).is_ok()) {
            if let Some(status) = mounted.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!("prepfs exited before serving ({status}): {}", mounted.log());
            }
            assert!(started.elapsed() < Duration::from_secs(60), "prepfs did not come up: {}", mounted.log());
            std::thread::sleep(Duration::from_millis(20));
        }
        mounted
    }

    /// The prepfs process id.
    pub fn pid(&self) -> i32 {
        self.child.as_ref().map_or(0, |c| c.id() as i32)
    }

    /// Makes drop reap the process but leave the (dead) mount for the next mount to clear.
    pub fn forget_mount(mut self) -> Mounted {
        self.leave_mount = true;
        self
    }

    /// A path inside the mount.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.mountpoint.join(rel)
    }

    /// What prepfs logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// The live stats document.
    pub fn stats(&self) -> serde_json::Value {
        let text = std::fs::read_to_string(self.path(".prepfs/stats.json")).expect("stats.json");
        serde_json::from_str(&text).expect("stats.json is JSON")
    }

    /// Waits until the daemon holds no open handle: a close's release reaches it a moment
    /// after `close` returns (the kernel sends it in the background).
    pub fn wait_released(&self) {
        let started = Instant::now();
        loop {
            let stats = self.stats();
            if stats["open_handles"].as_u64() == Some(0) {
                return;
            }
            // A hang guard, generous for a loaded machine: a handle still open after it is a
            // leak, not a slow release.
            assert!(started.elapsed() < Duration::from_secs(30), "handles still open 30 s after the last close: {}", stats["open_handles"]);
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Whether prepfs has exited by now (one look, no waiting): its exit status, reaped.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        let status = self.child.as_mut()?.try_wait().ok().flatten()?;
        self.child = None;
        Some(status)
    }

    /// Waits up to `limit` for prepfs to exit by itself (after an unmount or a signal the test
    /// sent); its exit status, or `None` if it is still running (it is then killed).
    pub fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let child = self.child.as_mut()?;
        let started = Instant::now();
        while started.elapsed() < limit {
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Stops prepfs with SIGTERM, as a user would, and returns its exit status.
    pub fn stop(mut self) -> std::process::ExitStatus {
        self.shutdown().expect("prepfs exit status")
    }

    fn shutdown(&mut self) -> Option<std::process::ExitStatus> {
        let Some(mut child) = self.child.take() else {
            // Already exited (see `wait_exit`): nothing of it may stay mounted.
            if !self.leave_mount {
                force_unmount(&self.mountpoint);
            }
            return None;
        };
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let started = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if started.elapsed() < Duration::from_secs(10) => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => {
                    let _ = child.kill();
                    break child.wait().ok();
                }
            }
        };
        if !self.leave_mount {
            force_unmount(&self.mountpoint);
        }
        self.done.store(true, Ordering::SeqCst);
        status
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        self.shutdown();
        self.done.store(true, Ordering::SeqCst);
    }
}

/// Kills `pid` and detaches `mountpoint` if `done` is not set within `limit`.
pub fn watchdog(pid: i32, mountpoint: PathBuf, done: Arc<AtomicBool>, limit: Duration) {
    std::thread::spawn(move || {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if done.load(Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("watchdog: test overran {limit:?}; killing prepfs and detaching {}", mountpoint.display());
        // SAFETY: plain kill(2) on a pid the test started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        force_unmount(&mountpoint);
    });
}

/// Every file of the mount's `augmented/` view, one class directory deep, sorted.
pub fn augmented_files(mnt: &Mounted) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for class in std::fs::read_dir(mnt.path("augmented")).expect("list") {
        for f in std::fs::read_dir(class.expect("class").path()).expect("list") {
            files.push(f.expect("file").path());
        }
    }
    files.sort();
    files
}

/// Bytes the mount has read from its source so far.
pub fn source_bytes(mnt: &Mounted) -> u64 {
    mnt.stats()["source_bytes_read"].as_u64().expect("source_bytes_read")
}

/// Whether `path` is a mountpoint now (the crate's own mount-table reader says).
pub fn is_mounted(path: &Path) -> bool {
    let canonical = match path.canonicalize() {
        Ok(c) => c,
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => return true, // a dead mount
        Err(_) => return false,
    };
    prepfs::mount::mount_at(&canonical).is_some()
}

/// The pid serving the mount now (stats.json answers once a server serves: reading it waits
/// for a restarted one).
pub fn server_pid(mnt: &Mounted) -> i64 {
    mnt.stats()["pid"].as_i64().expect("pid")
}

/// Kills a supervised mount's serving process with SIGKILL and waits until another serves;
/// returns the stall: from the kill to the first answer of the new server.
pub fn kill_server(mnt: &Mounted) -> Duration {
    let old = server_pid(mnt);
    assert_ne!(old, i64::from(mnt.pid()), "the server is not the supervisor");
    let killed = Instant::now();
    // SAFETY: kill(2) on the test mount's own server.
    unsafe { libc::kill(old as i32, libc::SIGKILL) };
    while server_pid(mnt) == old {}
    killed.elapsed()
}

/// Kills the daemon `pid` so that its mount stays behind dead (ENOTCONN), as a mount made
/// without fusermount3's auto-unmount would after a crash: its children first (a supervised
/// mount's server, which would drain and unmount when its supervisor dies; fusermount3's
/// helper, which would unmount), then the daemon.
pub fn kill_leaving_a_dead_mount(pid: i32) {
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        let Some((head, tail)) = stat.rsplit_once(')') else { continue };
        let comm = head.rsplit_once('(').map_or("", |(_, c)| c);
        let ppid = tail.split_whitespace().nth(1).and_then(|p| p.parse::<i32>().ok());
        if (comm == "fusermount3" || comm == "prepfs") && ppid == Some(pid) {
            let child: i32 = entry.file_name().to_string_lossy().parse().expect("a pid");
            // SAFETY: kill(2) on the test daemon's own child.
            unsafe { libc::kill(child, libc::SIGKILL) };
        }
    }
    // SAFETY: kill(2) on the test's own child.
    unsafe { libc::kill(pid, libc::SIGKILL) };
}

/// Detaches `path` if anything is still mounted there.
pub fn force_unmount(path: &Path) {
    if is_mounted(path) {
        let _ = Command::new("fusermount3").arg("-u").arg("-z").arg(path).status();
        if is_mounted(path) {
            let _ = Command::new("umount").arg("-l").arg(path).status();
        }
    }
}

/// Runs a Python helper from tests/support with arguments; returns its stdout, failing the
/// test with its stderr when it fails.
pub fn python<S: AsRef<std::ffi::OsStr>>(script: &str, args: &[S]) -> String {
    python_in("python3", script, args)
}

/// [`python`] run by `interpreter` (another environment's python3, e.g. one with torch).
#[allow(dead_code)] // not every test binary that includes common/ runs another interpreter
pub fn python_in<S: AsRef<std::ffi::OsStr>>(interpreter: &str, script: &str, args: &[S]) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support").join(script);
    let mut cmd = Command::new(interpreter);
    cmd.arg(&path);
    for a in args {
        cmd.arg(a);
    }
    let out = cmd.output().unwrap_or_else(|e| panic!("{interpreter} (make test installs python3 with pillow and numpy): {e}"));
    assert!(
        out.status.success(),
        "{script} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Red and green levels that code sample `id` (7 x 7 = 49 ids), kept by any crop, resize or flip.
pub fn id_levels(id: usize) -> (u8, u8) {
    ((20 + 36 * (id % 7)) as u8, (20 + 36 * ((id / 7) % 7)) as u8)
}

/// The sample id whose levels are nearest the mean red and green of `rgb` (and that distance).
pub fn id_of_pixels(rgb: &[u8]) -> (usize, f64) {
    let n = (rgb.len() / 3).max(1) as f64;
    let (mut r, mut g) = (0f64, 0f64);
    for px in rgb.chunks_exact(3) {
        r += f64::from(px[0]);
        g += f64::from(px[1]);
    }
    let (r, g) = (r / n, g / n);
    (0..49)
        .map(|id| {
            let (ir, ig) = id_levels(id);
            (id, (f64::from(ir) - r).abs().max((f64::from(ig) - g).abs()))
        })
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .expect("ids")
}

/// Splits a binary PPM into (width, height, pixels), checking its header against its length.
pub fn parse_ppm(bytes: &[u8]) -> (usize, usize, &[u8]) {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(20)]);
    let mut fields = text.split_ascii_whitespace();
    assert_eq!(fields.next(), Some("P6"), "not a PPM");
    let w: usize = fields.next().and_then(|f| f.parse().ok()).expect("width");
    let h: usize = fields.next().and_then(|f| f.parse().ok()).expect("height");
    assert_eq!(fields.next(), Some("255"));
    let header = format!("P6\n{w} {h}\n255\n").len();
    assert_eq!(bytes.len(), header + w * h * 3, "PPM length does not match its header");
    (w, h, &bytes[header..])
}

/// An ImageFolder tree of id-coded JPEGs: `classes` directories `c0, c1, ...` of `per_class`
/// samples `s<id>.jpg`, sample `id` coded by [`id_levels`] with a blue pattern that makes every
/// crop differ, sizes varying by sample. Returns the source root and each id's class.
pub fn make_id_dataset(dir: &Path, classes: usize, per_class: usize) -> (PathBuf, Vec<usize>) {
    assert!(classes * per_class <= 49, "49 ids at most");
    let root = dir.join("idset");
    let mut class_of = Vec::new();
    for c in 0..classes {
        let class_dir = root.join(format!("c{c}"));
        std::fs::create_dir_all(&class_dir).expect("mkdir");
        for k in 0..per_class {
            let id = c * per_class + k;
            class_of.push(c);
            let (width, height) = (176 + 16 * (id % 5), 144 + 8 * (id % 3));
            let (r, g) = id_levels(id);
            let mut pixels = vec![0u8; width * height * 3];
            for y in 0..height {
                for x in 0..width {
                    let i = (y * width + x) * 3;
                    let b = 128.0 + 90.0 * ((x as f64 / 9.0 + id as f64).sin() * (y as f64 / 11.0).cos());
                    pixels[i] = r;
                    pixels[i + 1] = g;
                    pixels[i + 2] = b as u8;
                }
            }
            let image = turbojpeg::Image { pixels: pixels.as_slice(), width, pitch: width * 3, height, format: turbojpeg::PixelFormat::RGB };
            let mut comp = turbojpeg::Compressor::new().expect("compressor");
            comp.set_quality(95).expect("quality");
            comp.set_subsamp(turbojpeg::Subsamp::None).expect("subsamp");
            let jpeg = comp.compress_to_owned(image).expect("compress");
            std::fs::write(class_dir.join(format!("s{id:02}.jpg")), &jpeg[..]).expect("write");
        }
    }
    (root, class_of)
}

/// Appends the member `name` holding `bytes` to a tar being built (a GNU header, mode 0644), as
/// webdataset's writers pack a WebDataset shard's members.
pub fn add_tar_member(builder: &mut tar::Builder<std::fs::File>, name: &str, bytes: &[u8]) {
    let mut header = tar::Header::new_gnu();
    header.set_size(bytes.len() as u64);
    header.set_mode(0o644);
    header.set_entry_type(tar::EntryType::Regular);
    builder.append_data(&mut header, name, bytes).expect("append");
}

/// Aborts the FUSE connection of the mount at `path` (as given, not canonicalized: a mount that
/// waits on itself would hang the lookup), then detaches it: the one way out of a daemon stuck
/// on its own mount, whose readers sit in D state and which SIGKILL leaves a zombie. Whether a
/// connection was found and aborted.
pub fn abort_fuse_connection(path: &Path) -> bool {
    let Some(entry) = prepfs::mount::mount_at(path).filter(|e| e.fstype.starts_with("fuse")) else { return false };
    let connections = Path::new("/sys/fs/fuse/connections");
    if prepfs::mount::mount_at(connections).is_none() {
        let _ = Command::new("mount").args(["-t", "fusectl", "none"]).arg(connections).status();
    }
    let aborted = std::fs::write(connections.join(entry.minor.to_string()).join("abort"), "1").is_ok();
    let _ = Command::new("fusermount3").arg("-u").arg("-z").arg(path).status();
    if prepfs::mount::mount_at(path).is_some() {
        let _ = Command::new("umount").arg("-l").arg(path).status();
    }
    aborted
}

/// A `prepfs mount` expected to refuse: run under a time limit and, on every way out, its FUSE
/// connection aborted if it ever mounted (so a mount that hangs on itself never hangs the
/// suite), then killed and reaped.
pub struct Refused {
    child: Child,
    mountpoint: PathBuf,
}

impl Refused {
    /// Starts `cmd`, which mounts at `mountpoint` (a path with no symlinks in it).
    pub fn start(mut cmd: Command, mountpoint: &Path) -> Refused {
        let child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn prepfs");
        Refused { child, mountpoint: mountpoint.to_path_buf() }
    }

    /// Waits up to `limit` for it to exit: its status and stderr, or `None` if it is still
    /// running (mounted, most likely; the guard then tears it down).
    pub fn wait(&mut self, limit: Duration) -> Option<(std::process::ExitStatus, String)> {
        let started = Instant::now();
        while started.elapsed() < limit {
            if let Ok(Some(status)) = self.child.try_wait() {
                let mut err = String::new();
                if let Some(mut e) = self.child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut err);
                }
                return Some((status, err));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Refused {
    fn drop(&mut self) {
        abort_fuse_connection(&self.mountpoint);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A temporary directory the unprivileged user may traverse (tempdirs are 0700).
pub fn open_tempdir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o755)).expect("chmod");
    dir
}

/// Runs `args` as user and group 65534 (`nobody`), with no supplementary groups.
pub fn as_nobody(args: &[&str]) -> std::process::Output {
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .args(args)
        .output()
        .expect("setpriv (util-linux)")
}

pub fn nobody_reads(path: &Path) -> Result<Vec<u8>, String> {
    let out = as_nobody(&["cat", &path.display().to_string()]);
    if out.status.success() {
        Ok(out.stdout)
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// `fs.protected_symlinks` set to 0 while any guard lives (the attack tests' setting: the kernel
/// then follows a link another user planted in a sticky directory), restored to what it was when
/// the last guard drops. Shared by every test process running at once (nextest runs each test in
/// a process of its own): a count and the value to restore in a state file, changed under an
/// exclusive `flock` of it.
pub struct SymlinksUnprotected;

const PROTECTED_SYMLINKS: &str = "/proc/sys/fs/protected_symlinks";
const SYMLINK_GUARDS: &str = "/run/prepfs-tests-protected-symlinks";

/// Runs `change` on (guards alive, value to restore) under the state file's lock.
fn with_symlink_guards(change: impl FnOnce(&mut usize, &mut String)) {
    use std::io::{Read, Seek, Write};
    use std::os::fd::AsRawFd;
    let mut file = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(SYMLINK_GUARDS).expect("guard state");
    // SAFETY: flock on an open descriptor; released when the file closes.
    assert_eq!(unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) }, 0, "flock");
    let mut text = String::new();
    file.read_to_string(&mut text).expect("read state");
    let mut fields = text.split_whitespace();
    let mut count: usize = fields.next().and_then(|c| c.parse().ok()).unwrap_or(0);
    let mut restore = fields.next().unwrap_or("").to_string();
    change(&mut count, &mut restore);
    file.set_len(0).expect("truncate");
    file.rewind().expect("rewind");
    write!(file, "{count} {restore}").expect("write state");
}

impl SymlinksUnprotected {
    pub fn new() -> SymlinksUnprotected {
        with_symlink_guards(|count, restore| {
            if *count == 0 {
                *restore = std::fs::read_to_string(PROTECTED_SYMLINKS).unwrap_or_default().trim().to_string();
                std::fs::write(PROTECTED_SYMLINKS, "0").expect("set fs.protected_symlinks=0 (the tests run as root)");
            }
            *count += 1;
        });
        SymlinksUnprotected
    }
}

impl Drop for SymlinksUnprotected {
    fn drop(&mut self) {
        with_symlink_guards(|count, restore| {
            *count = count.saturating_sub(1);
            if *count == 0 && !restore.is_empty() {
                let _ = std::fs::write(PROTECTED_SYMLINKS, restore.as_str());
                restore.clear();
            }
        });
    }
}

/// Sets `path`'s mode.
pub fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(mode)).expect("chmod");
}

/// A line of a process's /proc status (`VmRSS:`, `VmHWM:`), bytes.
pub fn status_bytes(pid: i32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let line = status.lines().find(|l| l.starts_with(key)).unwrap_or_else(|| panic!("{key}"));
    line.split_whitespace().nth(1).and_then(|k| k.parse::<u64>().ok()).expect("kB") * 1024
}
