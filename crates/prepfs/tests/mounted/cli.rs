//! Mounted tests of the command line and the mount's lifecycle, as a new user meets them: the
//! `SOURCE MOUNTPOINT` form with no config, the mountpoint checks, the log options, the
//! background mount, the mount(8) helper, a clean unmount that logs no warning, `df` and
//! `--version`; and, mounting nothing, `prepfs plan`'s placement. Each test that mounts does so
//! in its own temporary directory, under a time limit, and unmounts on every way out.

use crate::common;

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{force_unmount, is_mounted, make_id_dataset, parse_ppm, prepfs_bin, watchdog, Mounted};

const LIMIT: Duration = Duration::from_secs(120);

/// `prepfs ARGS...`, stdin closed.
fn prepfs(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Command {
    let mut cmd = Command::new(prepfs_bin());
    for a in args {
        cmd.arg(a);
    }
    cmd.stdin(Stdio::null());
    cmd
}

/// Runs a command that should end by itself, killing it after `limit`; its output.
fn run_limited(mut cmd: Command, limit: Duration) -> Output {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn");
    let pid = child.id() as i32;
    let done = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&done);
    std::thread::spawn(move || {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if flag.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // SAFETY: kill(2) on the child this test started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    });
    let (mut out, mut err) = (Vec::new(), Vec::new());
    child.stdout.take().expect("stdout").read_to_end(&mut out).expect("read stdout");
    child.stderr.take().expect("stderr").read_to_end(&mut err).expect("read stderr");
    let status = child.wait().expect("wait");
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(status.code().is_some(), "killed after {limit:?}: {}", String::from_utf8_lossy(&err));
    Output { status, stdout: out, stderr: err }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A daemon that `--background` left running: on drop, killed (if still there) and its mount
/// detached.
struct Daemon {
    pid: i32,
    mountpoint: PathBuf,
    done: Arc<AtomicBool>,
}

impl Daemon {
    fn running(&self) -> bool {
        // A zombie counts as gone (its parent, the test's `prepfs`, has exited already).
        std::fs::read_to_string(format!("/proc/{}/stat", self.pid))
            .map(|s| !s.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'))
            .unwrap_or(false)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.running() {
            // SAFETY: kill(2) on the daemon this test started.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
        }
        force_unmount(&self.mountpoint);
        self.done.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The pid `prepfs --background` says its daemon has (`... pid N; ...`).
fn daemon_pid(stdout: &str) -> i32 {
    let at = stdout.find("pid ").expect("a pid in the output") + 4;
    stdout[at..].chars().take_while(char::is_ascii_digit).collect::<String>().parse().expect("pid")
}

/// Unmounts as a user would, `fusermount3 -u`, and checks it worked.
fn fusermount_u(mountpoint: &Path) {
    let out = run_limited(
        {
            let mut c = Command::new("fusermount3");
            c.arg("-u").arg(mountpoint);
            c
        },
        Duration::from_secs(30),
    );
    assert!(out.status.success(), "fusermount3 -u: {}", text(&out.stderr));
}

/// Waits up to `limit` for `cond`.
fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let started = Instant::now();
    while started.elapsed() < limit {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    cond()
}

/// A sample of the augmented view, as a PPM's (width, height).
fn read_a_sample(mountpoint: &Path) -> (usize, usize) {
    let bytes = std::fs::read(mountpoint.join("augmented/c0/s00.ppm")).expect("read a sample");
    let (w, h, _) = parse_ppm(&bytes);
    (w, h)
}

/// The lines of a log that speak of unmounting and warn or fail.
fn unmount_complaints(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| {
            let l = l.to_ascii_lowercase();
            (l.contains("umount") || l.contains("unmount")) && (l.contains("fail") || l.contains("error") || l.contains("warn"))
        })
        .map(str::to_string)
        .collect()
}

#[test]
fn a_non_empty_mountpoint_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (source, _) = make_id_dataset(dir.path(), 2, 3);
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).expect("mkdir");
    std::fs::write(mnt.join("notes.txt"), "mine").expect("write");
    let out = run_limited(prepfs(&[&"mount", &source, &mnt]), LIMIT);
    assert!(!out.status.success(), "mounted over a non-empty directory");
    assert!(text(&out.stderr).contains("not empty"), "{}", text(&out.stderr));
    assert!(!is_mounted(&mnt));
    assert_eq!(std::fs::read_to_string(mnt.join("notes.txt")).expect("still there"), "mine");
    assert_eq!(std::fs::read_dir(&mnt).expect("list").count(), 1);
}

#[test]
fn a_missing_mountpoint_is_refused_and_with_create_mountpoint_created_and_removed_at_unmount() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (source, _) = make_id_dataset(dir.path(), 2, 3);
    let mnt = dir.path().join("new/mnt");
    let out = run_limited(prepfs(&[&"mount", &source, &mnt]), LIMIT);
    assert!(!out.status.success(), "mounted at a missing mountpoint");
    assert!(text(&out.stderr).contains("does not exist") && text(&out.stderr).contains("--create-mountpoint"), "{}", text(&out.stderr));
    assert!(!dir.path().join("new").exists(), "nothing created without --create-mountpoint");

    let log = dir.path().join("prepfs.log");
    let mut mounted = Mounted::start_command(prepfs(&[&"mount", &source, &mnt, &"--create-mountpoint"]), &mnt, &log, LIMIT);
    assert_eq!(read_a_sample(&mnt), (224, 224));
    fusermount_u(&mnt);
    let status = mounted.wait_exit(Duration::from_secs(20)).expect("prepfs exits after fusermount3 -u");
    assert!(status.success(), "{status}: {}", mounted.log());
    assert!(!mnt.exists() && !dir.path().join("new").exists(), "the directories prepfs made are removed: {}", mounted.log());
}

#[test]
fn a_bad_log_level_is_refused_before_mounting() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (source, _) = make_id_dataset(dir.path(), 2, 3);
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).expect("mkdir");
    let out = run_limited(prepfs(&[&"mount", &source, &mnt, &"--log-level", &"loud"]), LIMIT);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("--log-level loud") && text(&out.stderr).contains("not a log level"), "{}", text(&out.stderr));
    let mut cmd = prepfs(&[&"mount", &source, &mnt]);
    cmd.env("PREPFS_LOG", "verbose");
    let out = run_limited(cmd, LIMIT);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("PREPFS_LOG=verbose"), "{}", text(&out.stderr));
    assert!(!text(&out.stderr).contains("catalog ready"), "refused before the scan");
    assert!(!is_mounted(&mnt));
}

#[test]
fn the_log_file_receives_the_log_and_is_created_0600() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (source, _) = make_id_dataset(dir.path(), 2, 3);
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).expect("mkdir");
    let log_file = dir.path().join("logs.txt");
    std::fs::write(&log_file, "an earlier line\n").expect("write");
    std::fs::remove_file(&log_file).expect("rm");
    let stderr = dir.path().join("stderr.txt");
    let mnt_guard = Mounted::start_command(
        prepfs(&[&"mount", &source, &mnt, &"--log-file", &log_file, &"--log-level", &"debug"]),
        &mnt,
        &stderr,
        LIMIT,
    );
    let mode = std::fs::metadata(&log_file).expect("log file made").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "private: a log names the source's files");
    read_a_sample(&mnt);
    let status = mnt_guard.stop();
    assert!(status.success());
    let logged = std::fs::read_to_string(&log_file).expect("log");
    assert!(logged.contains("catalog ready") && logged.contains("DEBUG"), "{logged}");
    assert!(logged.contains("unmounted"), "{logged}");
    assert!(!std::fs::read_to_string(&stderr).expect("stderr").contains("catalog ready"), "the log went to the file only");

    // Appended, not truncated, by the next mount.
    let before = logged.len();
    let again = Mounted::start_command(prepfs(&[&"mount", &source, &mnt, &"--log-file", &log_file]), &mnt, &stderr, LIMIT);
    assert!(again.stop().success());
    let logged = std::fs::read_to_string(&log_file).expect("log");
    assert!(logged.len() > before && logged.starts_with(&logged[..before]));
}

#[test]
fn mounting_source_and_mountpoint_with_no_config_serves_samples() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (source, _) = make_id_dataset(dir.path(), 2, 3);
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).expect("mkdir");
    let log = dir.path().join("prepfs.log");
    let mounted = Mounted::start_command(prepfs(&[&"mount", &source, &mnt]), &mnt, &log, LIMIT);
    assert_eq!(read_a_sample(&mnt), (224, 224), "the shipped augmentation (RandomResizedCrop 224)");
    let encoded = std::fs::read(mnt.join("encoded/c1/s03.jpg")).expect("encoded");
    assert_eq!(encoded, std::fs::read(source.join("c1/s03.jpg")).expect("source"));
    let config = std::fs::read_to_string(mnt.join(".prepfs/config.yaml")).expect("config.yaml");
    let memory = config
        .lines()
        .find_map(|l| l.trim().strip_prefix("memory:"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .expect("cache memory in the effective config");
    assert!(memory > 0, "the cache is on by default: {config}");
    assert!(mounted.stop().success());
}

/// Mounts a small id-coded dataset at `dir/mnt` with no config; the mount and the source.
fn mount_small(dir: &Path) -> (Mounted, PathBuf) {
    let (source, _) = make_id_dataset(dir, 2, 2);
    let mnt = dir.join("mnt");
    std::fs::create_dir(&mnt).expect("mkdir");
    (Mounted::start_command(prepfs(&[&"mount", &source, &mnt]), &mnt, &dir.join("prepfs.log"), LIMIT), source)
}

#[test]
fn the_mount_table_shows_type_fuse_prepfs_and_a_killed_daemon_leaves_no_dead_mount() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mounted, _source) = mount_small(dir.path());
    let canonical = mounted.mountpoint.canonicalize().expect("canonical");
    let entry = prepfs::mount::mount_at(&canonical).expect("in the mount table");
    assert_eq!((entry.fstype.as_str(), entry.source.starts_with("prepfs:")), ("fuse.prepfs", true), "{entry:?}");
    let findmnt = run_limited(
        {
            let mut c = Command::new("findmnt");
            c.args(["-n", "-t", "fuse.prepfs", "-o", "TARGET"]);
            c
        },
        Duration::from_secs(10),
    );
    assert!(text(&findmnt.stdout).lines().any(|l| Path::new(l.trim()) == canonical), "findmnt -t fuse.prepfs: {}", text(&findmnt.stdout));
    // A daemon that dies without unmounting (SIGKILL): fusermount3 unmounts after it.
    let mountpoint = mounted.mountpoint.clone();
    // SAFETY: kill(2) on the test's own child.
    unsafe { libc::kill(mounted.pid(), libc::SIGKILL) };
    assert!(wait_for(Duration::from_secs(10), || !is_mounted(&mountpoint)), "a dead mount was left at {}", mountpoint.display());
    drop(mounted);
}

#[test]
fn df_shows_the_size_and_inodes_of_the_sources_file_system() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mounted, source) = mount_small(dir.path());
    let (shown, under) = (nix::sys::statvfs::statvfs(&mounted.mountpoint).expect("statvfs"), nix::sys::statvfs::statvfs(&source).expect("statvfs"));
    let bytes = |s: &nix::sys::statvfs::Statvfs| s.blocks() * s.fragment_size();
    assert!(bytes(&shown) > 0);
    assert_eq!(bytes(&shown), bytes(&under), "the mount's size is the source's");
    assert_eq!(shown.files(), under.files(), "the mount's inodes are the source's");
    let df = run_limited(
        {
            let mut c = Command::new("df");
            c.arg("--output=size").arg(&mounted.mountpoint);
            c
        },
        Duration::from_secs(10),
    );
    let size = text(&df.stdout).lines().nth(1).and_then(|l| l.trim().parse::<u64>().ok());
    assert!(size.is_some_and(|s| s > 0), "df shows a size: {}", text(&df.stdout));
    assert!(mounted.stop().success());
}

#[test]
fn background_returns_with_the_mount_serving_and_fusermount_ends_the_daemon() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (source, _) = make_id_dataset(dir.path(), 2, 3);
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).expect("mkdir");
    let log_file = dir.path().join("prepfs.log");
    // `output()`-style: this returns only once every copy of stdout and stderr is closed, so
    // the daemon must not keep them.
    let out = run_limited(prepfs(&[&"mount", &source, &mnt, &"-b", &"--log-file", &log_file]), LIMIT);
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("serving 6 samples"), "{stdout}");
    let daemon = Daemon { pid: daemon_pid(&stdout), mountpoint: mnt.clone(), done: Arc::new(AtomicBool::new(false)) };
    watchdog(daemon.pid, mnt.clone(), Arc::clone(&daemon.done), LIMIT);
    assert!(daemon.running());
    assert!(is_mounted(&mnt));
    assert_eq!(read_a_sample(&mnt), (224, 224), "serving when the command returned");
    fusermount_u(&mnt);
    assert!(wait_for(Duration::from_secs(20), || !daemon.running()), "the daemon ended after fusermount3 -u");
    assert!(!is_mounted(&mnt));
    let log = std::fs::read_to_string(&log_file).expect("log");
    assert!(log.contains("unmounted"), "{log}");
    assert!(unmount_complaints(&log).is_empty(), "{log}");
}

#[test]
fn a_background_mount_that_fails_reports_why_and_exits_non_zero() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (source, _) = make_id_dataset(dir.path(), 2, 3);
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).expect("mkdir");
    std::fs::write(mnt.join("notes.txt"), "mine").expect("write");
    // Refused in the daemon, after the fork: the parent says why.
    let out = run_limited(prepfs(&[&"mount", &source, &mnt, &"--background"]), LIMIT);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert!(text(&out.stderr).contains("not empty"), "{}", text(&out.stderr));
    assert!(text(&out.stdout).is_empty(), "{}", text(&out.stdout));
    assert!(!is_mounted(&mnt));
}

#[test]
fn a_clean_unmount_logs_no_unmount_warning() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (source, _) = make_id_dataset(dir.path(), 2, 3);
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).expect("mkdir");
    let log = dir.path().join("prepfs.log");
    let mut mounted = Mounted::start_command(prepfs(&[&"mount", &source, &mnt, &"--log-level", &"debug"]), &mnt, &log, LIMIT);
    read_a_sample(&mnt);
    fusermount_u(&mnt);
    let status = mounted.wait_exit(Duration::from_secs(20)).expect("prepfs exits after fusermount3 -u");
    assert!(status.success(), "{status}");
    let log = mounted.log();
    assert!(log.contains("unmounted"), "{log}");
    assert!(unmount_complaints(&log).is_empty(), "{log}");
}

/// The mount(8) helper, scripts/mount.prepfs, with prepfs found on PATH and stdin closed.
fn mount_helper() -> Command {
    let bin_dir = prepfs_bin().parent().expect("bin dir").to_path_buf();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let mut cmd = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/mount.prepfs"));
    cmd.env("PATH", &path).stdin(Stdio::null());
    cmd
}

/// Runs the helper `cmd`, which must mount at `mnt` in the background and serve a sample; the
/// daemon it started, watched (killed and unmounted past the time limit).
fn helper_mounted(cmd: Command, mnt: &Path) -> Daemon {
    let out = run_limited(cmd, LIMIT);
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    let daemon = Daemon { pid: daemon_pid(&text(&out.stdout)), mountpoint: mnt.to_path_buf(), done: Arc::new(AtomicBool::new(false)) };
    watchdog(daemon.pid, mnt.to_path_buf(), Arc::clone(&daemon.done), LIMIT);
    assert_eq!(read_a_sample(mnt), (224, 224));
    daemon
}

#[test]
fn the_mount_helper_mounts_in_the_background_with_fstab_options() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (source, _) = make_id_dataset(dir.path(), 2, 3);
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).expect("mkdir");
    let config = common::write_config(dir.path(), "seed: 7\n");
    let log_file = dir.path().join("prepfs.log");
    // As mount(8) runs /sbin/mount.fuse.prepfs for an fstab line of type fuse.prepfs.
    let mut cmd = mount_helper();
    cmd.arg(&source).arg(&mnt).arg("-n").arg("-o");
    cmd.arg(format!("rw,nofail,_netdev,x-systemd.automount,config={},allow_other,ro,log_file={}", config.display(), log_file.display()));
    let daemon = helper_mounted(cmd, &mnt);
    let effective = std::fs::read_to_string(mnt.join(".prepfs/config.yaml")).expect("config.yaml");
    assert!(effective.contains("seed: 7") && effective.contains("allow_other: true"), "{effective}");
    let options = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let line = options.lines().find(|l| l.contains(&mnt.display().to_string())).expect("in the mount table");
    assert!(line.split_whitespace().nth(5).is_some_and(|o| o.split(',').any(|o| o == "ro")), "mounted ro: {line}");
    assert!(line.contains("allow_other"), "{line}");
    // With -o ro a job is still made by the first use inside it; the kernel refuses rmdir.
    assert!(std::fs::read_dir(mnt.join("jobs/resnet/augmented/c0")).expect("job by its first use").count() > 0);
    std::fs::create_dir_all(mnt.join("jobs/vit")).expect("mkdir -p answers (the job starts at its first use)");
    let rmdir = std::fs::remove_dir(mnt.join("jobs/vit")).expect_err("read-only");
    assert_eq!(rmdir.raw_os_error(), Some(libc::EROFS));
    fusermount_u(&mnt);
    assert!(wait_for(Duration::from_secs(20), || !daemon.running()));

    // The binary takes the same call itself, as mount.fuse3 makes it (`TYPE SOURCE MOUNTPOINT
    // -o OPTIONS`), and a refused option fails the mount with exit status 2.
    let out = run_limited(prepfs(&[&source, &mnt, &"-o", &"rw,bogus"]), LIMIT);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("unknown mount option `bogus`"), "{}", text(&out.stderr));
    let out = run_limited(prepfs(&[&source, &mnt, &"-o", &format!("rw,log_file={}", log_file.display())]), LIMIT);
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    let daemon = Daemon { pid: daemon_pid(&text(&out.stdout)), mountpoint: mnt.clone(), done: Arc::new(AtomicBool::new(false)) };
    watchdog(daemon.pid, mnt.clone(), Arc::clone(&daemon.done), LIMIT);
    read_a_sample(&mnt);
    fusermount_u(&mnt);
    assert!(wait_for(Duration::from_secs(20), || !daemon.running()));
}

/// Runs `args` as user and group 65534 (`nobody`), with no supplementary groups.
fn as_nobody(args: &[&std::ffi::OsStr]) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]).args(args).stdin(Stdio::null());
    cmd
}

#[test]
fn a_user_who_may_not_mount_is_told_before_the_scan() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let (source, _) = make_id_dataset(dir.path(), 2, 3);
    for d in [source.clone(), source.join("c0"), source.join("c1")] {
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    // A mountpoint nobody may not write to: fusermount3 would refuse it.
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).expect("mkdir");
    let bin = prepfs_bin();
    let out = run_limited(
        as_nobody(&[bin.as_os_str(), "mount".as_ref(), source.as_os_str(), mnt.as_os_str(), "--allow-other".as_ref()]),
        LIMIT,
    );
    let err = text(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("FUSE") && !err.contains("catalog ready"), "refused before the scan: {err}");
    assert!(!is_mounted(&mnt));
}

#[test]
fn the_mount_helper_passes_a_source_named_like_an_option_as_a_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (made, _) = make_id_dataset(dir.path(), 2, 3);
    // A source literally named `--config=x`, given relative (as it would be read as an
    // option), and a mountpoint starting with `-`.
    std::fs::rename(&made, dir.path().join("--config=x")).expect("rename");
    let mnt = dir.path().join("-mnt");
    std::fs::create_dir(&mnt).expect("mkdir");
    let log_file = dir.path().join("prepfs.log");
    let mut cmd = mount_helper();
    cmd.current_dir(dir.path()).arg("--config=x").arg("-mnt").arg("-o").arg(format!("log_file={}", log_file.display()));
    let daemon = helper_mounted(cmd, &mnt);
    let effective = std::fs::read_to_string(mnt.join(".prepfs/config.yaml")).expect("config.yaml");
    assert!(effective.contains("--config=x"), "the source is the directory `--config=x`: {effective}");
    fusermount_u(&mnt);
    assert!(wait_for(Duration::from_secs(20), || !daemon.running()));
}

#[test]
fn uids_and_gids_of_2_to_the_31_and_up_are_refused_wherever_they_are_given() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (source, _) = make_id_dataset(dir.path(), 1, 1);
    // A missing mountpoint: nothing can mount even where an id is let through (before the fix
    // these failed there instead, with exit status 1 and no word of the id).
    let mnt = dir.path().join("missing");
    for (flag, value) in [("--uid", "4294967295"), ("--gid", "2147483648"), ("-o", "uid=4294967295"), ("-o", "gid=2147483648")] {
        let out = run_limited(prepfs(&[&"mount", &source, &mnt, &flag, &value]), LIMIT);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {err}");
        assert!(err.contains("2147483647") && err.contains("(uid_t)-1"), "{flag} {value}: {err}");
        assert!(!is_mounted(&mnt));
    }
    for key in ["uid", "gid"] {
        let config = common::write_config(dir.path(), &format!("{key}: 4294967295\n"));
        let out = run_limited(prepfs(&[&"mount", &source, &mnt, &"--config", &config]), LIMIT);
        let err = text(&out.stderr);
        assert!(!out.status.success() && err.contains(key) && err.contains("2147483647"), "{err}");
        assert!(!is_mounted(&mnt));
    }
    // The largest accepted: 2^31 - 1.
    let out = run_limited(prepfs(&[&"check", &common::write_config(dir.path(), "uid: 2147483647\ngid: 2147483647\n"), &"--source", &source, &"--mountpoint", &mnt]), LIMIT);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn version_names_the_package_version_and_the_commit_built() {
    let out = run_limited(prepfs(&[&"--version"]), Duration::from_secs(10));
    let shown = text(&out.stdout);
    let head = Command::new("git").args(["rev-parse", "--short", "HEAD"]).current_dir(env!("CARGO_MANIFEST_DIR")).output();
    let commit = match head {
        Ok(h) if h.status.success() => text(&h.stdout).trim().to_owned(),
        _ => "unknown".to_owned(),
    };
    assert_eq!(shown.trim(), format!("prepfs {} (commit {commit})", env!("CARGO_PKG_VERSION")));
}

#[test]
fn check_accepts_every_shipped_mount_config_as_shipped_with_a_source_for_a_user_other_than_root_and_makes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let configs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../mount-configs");
    let mut checked = 0;
    for entry in std::fs::read_dir(&configs).expect("mount-configs") {
        let path = entry.expect("entry").path();
        // plan-example.yaml holds `prepfs plan`'s parameters, not a mount.
        if path.extension().is_none_or(|e| e != "yaml") || path.ends_with("plan-example.yaml") {
            continue;
        }
        let out = run_limited(as_nobody(&[prepfs_bin().as_os_str(), std::ffi::OsStr::new("check"), path.as_os_str(), std::ffi::OsStr::new("--source"), dir.path().as_os_str()]), Duration::from_secs(10));
        assert!(out.status.success(), "{}: {}", path.display(), text(&out.stderr));
        checked += 1;
    }
    assert!(checked >= 3, "{checked} configs");
    let help = run_limited(prepfs(&[&"check", &"--help"]), Duration::from_secs(10));
    let help = text(&help.stdout);
    assert!(help.contains("--source <DIR>") && help.contains("in place of the config's `source`"), "{help}");
    assert!(help.contains("--mountpoint <DIR>") && help.contains("Nothing is made"), "{help}");
}

#[test]
fn plan_says_how_many_workers_a_demand_needs_and_none_where_the_host_meets_it_alone() {
    // No mount: `prepfs plan` over the example parameters (t_da 360 samples/s on the host).
    let params = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../mount-configs/plan-example.yaml");
    let plan = |extra: &[&dyn AsRef<std::ffi::OsStr>]| {
        let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![&"plan", &"--params", &params];
        args.extend_from_slice(extra);
        let out = run_limited(prepfs(&args), Duration::from_secs(30));
        assert!(out.status.success(), "{}", text(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("JSON")
    };
    let busy = plan(&[&"--demand", &"3000", &"--worker-cores", &"8"]);
    let placement = &busy["placement"];
    assert!(placement["workers_needed"].as_u64().is_some_and(|w| w >= 1), "{busy}");
    assert_eq!(placement["workers"], placement["workers_needed"], "{busy}");
    assert_eq!(placement["bound"], "demand", "{busy}");
    assert_eq!(placement["samples_per_s_per_host"].as_f64(), Some(3000.0), "{busy}");
    assert!(placement["remote_share"].as_f64().is_some_and(|s| s > 0.8 && s < 1.0), "{busy}");
    assert!(placement["epoch_s"].as_f64().is_some_and(|s| (s - 1_281_167.0 / 3000.0).abs() < 1e-6), "{busy}");
    assert_eq!(placement["inputs"]["worker_cores"], 8, "{busy}");
    assert!(busy["split"].is_array() && busy["run"].is_object(), "the plan is still there: {busy}");

    let met = plan(&[&"--demand", &"300", &"--worker-cores", &"8"]);
    assert_eq!(met["placement"]["workers_needed"], 0, "{met}");
    assert_eq!(met["placement"]["remote_share"].as_f64(), Some(0.0), "{met}");

    // Without the placement flags, no placement.
    assert!(plan(&[]).get("placement").is_none());
    let refused = run_limited(prepfs(&[&"plan", &"--params", &params, &"--demand=0"]), Duration::from_secs(30));
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused.stderr));
    assert!(text(&refused.stderr).contains("demand"), "{}", text(&refused.stderr));
}
