//! The cache memory of all prepfs mounts on one machine: each mount registers its cache budget
//! in a file of a machine-wide directory while it serves, and `cache.memory: auto` takes its
//! share of one machine-wide budget given what the others hold.
//!
//! The directory is `$PREPFS_RUN_DIR`, else `/run/prepfs` as root, else `/tmp/prepfs-mounts`
//! (made sticky and world-writable, like /tmp, so every user's mounts register there). Each
//! mount's entry is `<pid>.json`; [`Registration`] removes it when dropped (at unmount); the
//! entry of a process that is gone is ignored (and removed where allowed).
//!
//! The rule ([`auto_share`]): the machine budget is half of the memory available now plus what
//! the other mounts hold (their budgets count as memory they hold or will); a mount set to
//! `auto` takes half of what the others leave of it. Alone it takes a quarter of available
//! memory, as before; with others, less, and all mounts together never more than the budget.

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// How `cache.memory: auto` was decided, with its figures (stats.json's `memory_auto`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AutoMemory {
    /// The bytes this mount takes.
    pub memory: u64,
    /// The machine-wide budget of all prepfs mounts: half of available plus `others_hold`.
    pub machine_budget: u64,
    /// Other prepfs mounts registered on this machine, alive.
    pub others: usize,
    /// What they registered, together.
    pub others_hold: u64,
}

/// One mount's entry.
#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    pid: u32,
    mountpoint: PathBuf,
    memory: u64,
}

/// The registry directory.
fn dir() -> PathBuf {
    if let Some(d) = std::env::var_os("PREPFS_RUN_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        PathBuf::from("/run/prepfs")
    } else {
        PathBuf::from("/tmp/prepfs-mounts")
    }
}

/// The memory the other live mounts registered: (how many, bytes together).
fn others() -> (usize, u64) {
    let me = std::process::id();
    let Ok(entries) = std::fs::read_dir(dir()) else { return (0, 0) };
    let mut found = (0, 0u64);
    for path in entries.flatten().map(|e| e.path()) {
        let Some(entry) = std::fs::read(&path).ok().and_then(|b| serde_json::from_slice::<Entry>(&b).ok()) else {
            continue;
        };
        if entry.pid == me {
            continue;
        }
        if !alive(entry.pid) {
            // Its process is gone (killed before unmounting): not held any more.
            let _ = std::fs::remove_file(&path);
            continue;
        }
        found.0 += 1;
        found.1 = found.1.saturating_add(entry.memory);
    }
    found
}

fn alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else { return false };
    // SAFETY: kill with signal 0 only checks that the process exists.
    let sent = unsafe { libc::kill(pid, 0) };
    sent == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// `cache.memory: auto` now: see the module's rule.
pub(crate) fn auto_share() -> AutoMemory {
    let (others, others_hold) = others();
    share_of(available(), others, others_hold)
}

/// The memory available now (`MemAvailable`), in bytes; 0 when unknown.
fn available() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let available_kib = meminfo
        .lines()
        .find(|l| l.starts_with("MemAvailable:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    available_kib * 1024
}

fn share_of(available: u64, others: usize, others_hold: u64) -> AutoMemory {
    let machine_budget = available.saturating_add(others_hold) / 2;
    let memory = machine_budget.saturating_sub(others_hold) / 2;
    AutoMemory { memory, machine_budget, others, others_hold }
}

/// A mount's entry in the registry, removed when dropped.
#[derive(Debug)]
pub(crate) struct Registration {
    path: PathBuf,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Registers this process's mount at `mountpoint` holding `memory` bytes of cache.
pub(crate) fn register(mountpoint: &Path, memory: u64) -> io::Result<Registration> {
    let dir = dir();
    if !dir.exists() {
        std::fs::create_dir_all(&dir)?;
        // Every user's mounts register here; the sticky bit keeps each one's entries its own.
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777));
    }
    let path = dir.join(format!("{}.json", std::process::id()));
    let entry = Entry { pid: std::process::id(), mountpoint: mountpoint.to_path_buf(), memory };
    let text = serde_json::to_vec(&entry).map_err(io::Error::other)?;
    // Written whole under a temporary name, then renamed: a reader never sees half an entry.
    let tmp = dir.join(format!(".{}.json.tmp", std::process::id()));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, &path)?;
    Ok(Registration { path })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alone_a_mount_takes_a_quarter_of_available_memory() {
        let share = share_of(16 << 30, 0, 0);
        assert_eq!((share.memory, share.machine_budget), (4 << 30, 8 << 30));
    }

    #[test]
    fn beside_others_a_mount_takes_half_of_what_they_leave_and_all_stay_within_the_budget() {
        // The first took 4 GiB of 16 available; available now counts what it filled.
        let second = share_of(12 << 30, 1, 4 << 30);
        assert_eq!(second.machine_budget, 8 << 30);
        assert_eq!(second.memory, 2 << 30);
        let third = share_of(10 << 30, 2, 6 << 30);
        assert_eq!(third.memory, 1 << 30);
        assert!(third.memory + third.others_hold <= third.machine_budget);
    }
}
