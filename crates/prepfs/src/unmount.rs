//! `prepfs unmount MOUNTPOINT`: asks a mount's daemon to drain and stop, as SIGTERM does (the
//! daemon found by the pid its `.prepfs/stats.json` gives, checked against the mount table and
//! `/proc`), and waits until both the mount and the daemon are gone.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::mount::mount_at;

/// Why `prepfs unmount` could not stop a mount.
#[derive(Debug, thiserror::Error)]
pub enum UnmountError {
    #[error("{}: {source}", prepfs_base::escape::escaped(path))]
    Path { path: PathBuf, source: io::Error },
    #[error("{} is not a mountpoint", prepfs_base::escape::escaped(path))]
    NotMounted { path: PathBuf },
    #[error("{} is a {fstype} mount ({device}), not a prepfs one", prepfs_base::escape::escaped(path))]
    NotPrepfs { path: PathBuf, fstype: String, device: String },
    #[error("{}: the mount's daemon is gone (a dead mount); clear it with `fusermount3 -u -z {}`", prepfs_base::escape::escaped(path), prepfs_base::escape::escaped(path))]
    Dead { path: PathBuf },
    #[error("{}: this user may not stop the mount: {why}; its owner or root may", prepfs_base::escape::escaped(path))]
    NotAllowed { path: PathBuf, why: String },
    #[error("{}: cannot tell the mount's daemon from {}: {why}", prepfs_base::escape::escaped(path), prepfs_base::escape::escaped(file))]
    NoDaemon { path: PathBuf, file: PathBuf, why: String },
    #[error("{}: cannot signal the mount's daemon (pid {pid}): {source}", prepfs_base::escape::escaped(path))]
    Signal { path: PathBuf, pid: i32, source: Errno },
}

/// How often the command looks whether the mount and its daemon are gone.
const POLL: Duration = Duration::from_millis(20);

/// Stops the prepfs mount at `mountpoint`: its daemon drains and unmounts (at once with
/// `now`, as a second signal stops it); returns once the mount and the daemon are gone.
pub fn unmount(mountpoint: &Path, now: bool) -> Result<(), UnmountError> {
    let path = mountpoint.to_path_buf();
    let canonical = match mountpoint.canonicalize() {
        Ok(c) => c,
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => return Err(UnmountError::Dead { path }),
        Err(source) => return Err(UnmountError::Path { path, source }),
    };
    let Some(entry) = mount_at(&canonical) else { return Err(UnmountError::NotMounted { path }) };
    // As root the kernel is asked directly and keeps no subtype (`fuse`); fusermount3's mounts
    // are `fuse.prepfs`. Either way the source is `prepfs:SOURCE`.
    if !(entry.fstype == "fuse.prepfs" || entry.fstype == "fuse" && entry.source.starts_with("prepfs:")) {
        return Err(UnmountError::NotPrepfs { path, fstype: entry.fstype, device: entry.source });
    }
    let pid = daemon_pid(&path, &canonical)?;
    prepfs_base::log::say(&format!(
        "prepfs: stopping the mount at {} (pid {pid}){}",
        prepfs_base::escape::escaped(&canonical),
        if now { " now" } else { "; it serves until its readers stop (at most its --drain-max)" }
    ));
    let signals: &[Signal] = if now {
        // Two signals pending at once are both taken (one SIGTERM twice would be one): the
        // second stops the drain the first starts.
        &[Signal::SIGTERM, Signal::SIGINT]
    } else {
        &[Signal::SIGTERM]
    };
    // A supervised mount's supervisor (the `prepfs mount` process, the server's parent) ends
    // after its server: waited for too.
    let supervisor = supervisor_of(pid);
    for &signal in signals {
        match kill(Pid::from_raw(pid), signal) {
            Ok(()) | Err(Errno::ESRCH) => {}
            Err(Errno::EPERM) => {
                return Err(UnmountError::NotAllowed { path, why: format!("its daemon (pid {pid}) runs as another user") })
            }
            Err(source) => return Err(UnmountError::Signal { path, pid, source }),
        }
    }
    loop {
        let mounted = mount_at(&canonical).is_some_and(|e| e.minor == entry.minor && e.fstype == entry.fstype);
        let running = alive(pid) || supervisor.is_some_and(alive);
        if !mounted && !running {
            prepfs_base::log::say(&format!("prepfs: unmounted {}", prepfs_base::escape::escaped(&canonical)));
            return Ok(());
        }
        if mounted && !running {
            return Err(UnmountError::Dead { path });
        }
        std::thread::sleep(POLL);
    }
}

/// The pid of the daemon serving the mount at `canonical`, from its stats, checked to be a
/// prepfs process here (another PID namespace's number would name some other process).
fn daemon_pid(path: &Path, canonical: &Path) -> Result<i32, UnmountError> {
    let file = canonical.join(".prepfs/stats.json");
    let no_daemon = |why: String| UnmountError::NoDaemon { path: path.to_path_buf(), file: file.clone(), why };
    let text = match std::fs::read_to_string(&file) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            return Err(UnmountError::NotAllowed {
                path: path.to_path_buf(),
                why: format!("{} is its owner's ({e})", prepfs_base::escape::escaped(&file)),
            })
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => return Err(UnmountError::Dead { path: path.to_path_buf() }),
        Err(e) => return Err(no_daemon(e.to_string())),
    };
    let doc: serde_json::Value = serde_json::from_str(&text).map_err(|e| no_daemon(format!("not JSON: {e}")))?;
    let pid = doc
        .get("pid")
        .and_then(serde_json::Value::as_i64)
        .and_then(|p| i32::try_from(p).ok())
        .filter(|&p| p > 0)
        .ok_or_else(|| no_daemon("it names no pid (a prepfs older than `prepfs unmount`: stop it with SIGTERM)".into()))?;
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
    let named_prepfs = comm.trim().starts_with("prepfs")
        || exe.as_ref().and_then(|e| e.file_name()).is_some_and(|n| n.to_string_lossy().contains("prepfs"));
    // Another user's process hides its exe; its comm still shows.
    if !named_prepfs {
        return Err(no_daemon(format!(
            "pid {pid} is {} here, not prepfs (is the daemon in another PID namespace?)",
            if comm.is_empty() { "no process".to_string() } else { format!("`{}`", comm.trim()) }
        )));
    }
    Ok(pid)
}

/// The supervisor of server `pid`: its parent, if that is a prepfs process too.
fn supervisor_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let parent: i32 = stat.rsplit(')').next()?.split_whitespace().nth(1)?.parse().ok()?;
    let comm = std::fs::read_to_string(format!("/proc/{parent}/comm")).ok()?;
    (parent > 1 && comm.trim().starts_with("prepfs")).then_some(parent)
}

/// Whether `pid` runs (a zombie, waiting for its parent to reap it, has ended).
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_that_is_no_mount_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = unmount(dir.path(), false).expect_err("no mount");
        assert!(matches!(err, UnmountError::NotMounted { .. }), "{err}");
        assert!(matches!(unmount(&dir.path().join("missing"), false), Err(UnmountError::Path { .. })));
        let err = unmount(Path::new("/proc"), false).expect_err("proc");
        assert!(err.to_string().contains("not a prepfs"), "{err}");
    }

    #[test]
    fn this_process_is_alive_and_a_pid_past_the_maximum_is_not() {
        assert!(alive(std::process::id() as i32));
        assert!(!alive(i32::MAX));
    }
}
