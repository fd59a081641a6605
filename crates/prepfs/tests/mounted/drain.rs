//! Mounted tests of the drain that stops a mount: a SIGTERM mid-epoch lets a multi-process
//! reader (a data loader's reads, torch-free: tests/support/drain_reader.py) finish its epoch
//! before the mount goes, a second signal stops at once, the drain's maximum ends a mount whose
//! reader never stops, and `prepfs unmount` drains and returns once mount and daemon are gone.
//! Each test mounts in its own temporary directory, under a time limit, and unmounts on every
//! way out.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{is_mounted, make_dataset, mount_command_without_drain, prepfs_bin, write_config, Mounted};

const LIMIT: Duration = Duration::from_secs(120);
/// How long a test waits for a daemon to exit before calling it hung: never the assertion (what
/// ended a drain is read from its log), only a guard.
const HANG_GUARD: Duration = Duration::from_secs(90);

fn open_tempdir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    dir
}

/// Mounts a 4 x 40 dataset at `dir/mnt` with `--drain DRAIN --drain-max MAX`.
fn mount(dir: &Path, drain: f64, max: f64) -> Mounted {
    let source = make_dataset(dir, 4, 40, false);
    let config = write_config(dir, "");
    let mountpoint = dir.join("mnt");
    let mut cmd = mount_command_without_drain(&config, &source, &mountpoint);
    cmd.arg("--drain").arg(drain.to_string()).arg("--drain-max").arg(max.to_string());
    Mounted::start_command(cmd, &mountpoint, &dir.join("prepfs.log"), LIMIT)
}

fn now_s() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_secs_f64()
}

/// The reader, running: killed and reaped on drop if it is still there.
struct Reader {
    child: Option<Child>,
}

impl Reader {
    fn start(mountpoint: &Path, args: &[&str]) -> Reader {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/drain_reader.py");
        let child = Command::new("python3")
            .arg(script)
            .arg(mountpoint)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("python3");
        Reader { child: Some(child) }
    }

    /// Waits up to `limit` for the reader to end; its JSON report.
    fn finish(&mut self, limit: Duration) -> serde_json::Value {
        let mut child = self.child.take().expect("running");
        let started = Instant::now();
        while child.try_wait().expect("wait").is_none() {
            if started.elapsed() > limit {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the reader did not finish within {limit:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = child.wait_with_output().expect("output");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "reader failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("reader's report {stdout:?}: {e}"))
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            // The pool's workers outlive their parent only until their next read fails (the
            // mount is gone by then): nothing of them holds the test.
        }
    }
}

/// Waits up to `limit` for `cond`.
fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let started = Instant::now();
    while started.elapsed() < limit {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

/// Sends `signal` to `pid`, a daemon this test started.
fn signal(pid: i32, signal: i32) {
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(pid, signal) };
}

/// Waits until the reader has read a few files (it writes `mark` then).
fn wait_reading(mark: &Path) {
    assert!(wait_for(HANG_GUARD, || mark.exists()), "the reader did not start reading");
}

/// The files the reader has read whole so far (its `--progress` file; 0 before the first).
fn progress(path: &Path) -> u64 {
    std::fs::read_to_string(path).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0)
}

/// The index of the first line of `log` holding `what`, and the line.
fn line_of<'a>(log: &'a str, what: &str) -> Option<(usize, &'a str)> {
    log.lines().enumerate().find(|(_, l)| l.contains(what))
}

/// Waits until the daemon says it is draining (after the signal the test sent).
fn wait_draining(mnt: &Mounted) {
    assert!(wait_for(HANG_GUARD, || mnt.log().contains("draining:")), "no drain began: {}", mnt.log());
}

#[test]
fn a_sigterm_mid_epoch_lets_the_epoch_finish_before_unmounting() {
    let dir = open_tempdir();
    let drain = 1.0;
    let mut mnt = mount(dir.path(), drain, 60.0);
    let pid = mnt.pid().to_string();
    // Three workers, 20 ms a file (a training step): the epoch of 160 files takes about a second;
    // the reader sends SIGTERM itself after 40 files, mid-epoch.
    let mut reader = Reader::start(&mnt.mountpoint, &["--workers", "3", "--delay", "0.02", "--signal-pid", &pid, "--signal-after", "40"]);
    let report = reader.finish(Duration::from_secs(60));
    assert!(report["failed"].as_array().expect("failed").is_empty(), "reads failed after the signal: {report}");
    assert_eq!(report["files"], 160, "{report}");
    assert_eq!(report["read"], 160, "every file of the epoch is read whole: {report}");
    let signalled = report["signalled_at"].as_f64().expect("the reader signalled");
    let ended = report["ended_at"].as_f64().expect("ended_at");
    assert!(report["read_after_signal"].as_u64().expect("count") >= 100, "the signal came mid-epoch: {report}");
    // A hang guard only (the drain's maximum is 60 s): what ended it is read from the log below.
    let status = mnt.wait_exit(HANG_GUARD).expect("the daemon exits");
    let gone = now_s();
    assert!(status.success(), "{status}: {}", mnt.log());
    assert!(!is_mounted(&mnt.mountpoint));
    eprintln!(
        "epoch of {} files read after SIGTERM came at file 40 ({} after it); daemon gone {:.2} s after SIGTERM, {:.2} s after the epoch ended (drain {drain} s)",
        report["read"], report["read_after_signal"], gone - signalled, gone - ended
    );
    let log = mnt.log();
    assert!(log.contains("draining") && log.contains("python3"), "the drain says whom it waits for: {log}");
    // Ended by the quiet period after the epoch, not by the drain's maximum.
    assert!(log.contains("drained:") && !log.contains("reached its maximum"), "{log}");
}

#[test]
fn a_second_signal_stops_a_draining_mount_at_once() {
    let dir = open_tempdir();
    let mut mnt = mount(dir.path(), 1.0, 60.0);
    let (mark, count) = (dir.path().join("reading"), dir.path().join("count"));
    let mut reader = Reader::start(
        &mnt.mountpoint,
        &["--forever", "--delay", "0.01", "--mark-after", "20", "--mark", mark.to_str().expect("utf-8"), "--progress", count.to_str().expect("utf-8")],
    );
    wait_reading(&mark);
    signal(mnt.pid(), libc::SIGTERM);
    wait_draining(&mnt);
    // The reader keeps it draining: reads are served after the drain began (no sleep: the
    // reads themselves are the event), and the mount is still there.
    let at_drain = progress(&count);
    assert!(wait_for(HANG_GUARD, || progress(&count) > at_drain), "no read served while draining: {}", mnt.log());
    assert!(is_mounted(&mnt.mountpoint), "the reader keeps it draining: {}", mnt.log());
    let second = Instant::now();
    signal(mnt.pid(), libc::SIGINT);
    // A hang guard beyond the drain's 60 s maximum: had the second signal done nothing, the
    // maximum would have ended it, and its line says so.
    mnt.wait_exit(HANG_GUARD).expect("a second signal ends it");
    eprintln!("gone {:.2} s after the second signal", second.elapsed().as_secs_f64());
    assert!(!is_mounted(&mnt.mountpoint));
    let log = mnt.log();
    let (drained, _) = line_of(&log, "draining:").expect("draining");
    let (stopped, _) = line_of(&log, "second signal").unwrap_or_else(|| panic!("no second signal's line: {log}"));
    assert!(drained < stopped && !log.contains("reached its maximum") && !log.contains("drained:"), "{log}");
    // The reader was cut off mid-read (open files get errors), not let finish.
    let report = reader.finish(HANG_GUARD);
    assert!(!report["failed"].as_array().expect("failed").is_empty(), "{report}");
}

#[test]
fn the_drain_maximum_ends_a_mount_whose_reader_never_stops() {
    let dir = open_tempdir();
    let max = 3.0;
    let mut mnt = mount(dir.path(), 1.0, max);
    let (mark, count) = (dir.path().join("reading"), dir.path().join("count"));
    let mut reader = Reader::start(
        &mnt.mountpoint,
        &["--forever", "--delay", "0.01", "--mark-after", "20", "--mark", mark.to_str().expect("utf-8"), "--progress", count.to_str().expect("utf-8")],
    );
    wait_reading(&mark);
    signal(mnt.pid(), libc::SIGTERM);
    wait_draining(&mnt);
    let at_drain = progress(&count);
    // A hang guard only: the order of events below says what ended it.
    mnt.wait_exit(HANG_GUARD).expect("the maximum ends it");
    assert!(!is_mounted(&mnt.mountpoint));
    let report = reader.finish(HANG_GUARD);
    let log = mnt.log();
    eprintln!("{} reads served after the drain began; {report}", report["read"].as_u64().unwrap_or(0).saturating_sub(at_drain));
    // The events in order: the drain began; reads were still served while it ran (it did not
    // end at the signal); it ended because its maximum passed, with the reader still active
    // (named in that line); and the reader, still reading, was cut off by the forced unmount.
    let (drained, _) = line_of(&log, "draining:").expect("draining");
    let (ended, line) = line_of(&log, "reached its maximum").unwrap_or_else(|| panic!("not ended by the maximum: {log}"));
    assert!(drained < ended, "{log}");
    assert!(line.contains(&format!("drain_max_s={max:?}")) && line.contains("python3"), "the maximum's line names the active reader: {line}");
    assert!(!log.contains("drained:") && !log.contains("second signal"), "{log}");
    assert!(report["read"].as_u64().expect("read") > at_drain, "no read served during the drain: {report}");
    assert!(!report["failed"].as_array().expect("failed").is_empty(), "the reader was never cut off: {report}");
}

fn prepfs_unmount(args: &[&dyn AsRef<std::ffi::OsStr>], limit: Duration) -> std::process::Output {
    let mut cmd = Command::new("timeout");
    cmd.arg(limit.as_secs().to_string()).arg(prepfs_bin()).arg("unmount");
    for a in args {
        cmd.arg(a);
    }
    cmd.stdin(Stdio::null()).output().expect("prepfs unmount")
}

#[test]
fn prepfs_unmount_drains_the_mount_and_returns_once_it_and_its_daemon_are_gone() {
    let dir = open_tempdir();
    let mut mnt = mount(dir.path(), 1.0, 60.0);
    // Not a mount, not a prepfs mount, not the caller's.
    let out = prepfs_unmount(&[&dir.path()], Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a mountpoint"), "{}", String::from_utf8_lossy(&out.stderr));
    let out = prepfs_unmount(&[&"/proc"], Duration::from_secs(30));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a prepfs"), "{}", String::from_utf8_lossy(&out.stderr));
    if nix::unistd::geteuid().is_root() {
        let out = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(prepfs_bin())
            .arg("unmount")
            .arg(&mnt.mountpoint)
            .stdin(Stdio::null())
            .output()
            .expect("setpriv");
        assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stderr).contains("may not stop"), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(is_mounted(&mnt.mountpoint), "a refused unmount leaves the mount");
    }
    // Mid-epoch: the epoch finishes, then the command returns with mount and daemon gone.
    let mark = dir.path().join("reading");
    let mut reader = Reader::start(&mnt.mountpoint, &["--delay", "0.02", "--mark-after", "30", "--mark", mark.to_str().expect("utf-8")]);
    wait_reading(&mark);
    let out = prepfs_unmount(&[&mnt.mountpoint], Duration::from_secs(60));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!is_mounted(&mnt.mountpoint), "the mount is gone when it returns");
    // Gone when it returns: reaped at the first look, no wait.
    mnt.exited().expect("the daemon is gone when it returns");
    let report = reader.finish(Duration::from_secs(30));
    assert_eq!(report["read"], 160, "the epoch finished: {report}");
    assert!(report["failed"].as_array().expect("failed").is_empty(), "{report}");
}
