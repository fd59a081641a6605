//! The cache memory of all prepfs mounts on one machine: each mount registers its cache budget
//! in a file of a machine-wide directory while it serves, and `cache.memory: auto` takes its
//! share of one machine-wide budget given what the others hold.
//!
//! Each user's mounts register in a directory of that user's (a [`PrivateDir`] readable by all,
//! refused if another user could write to it or put a link in its place): `$PREPFS_RUN_DIR`,
//! else `/run/prepfs-mounts` as root, else `$XDG_RUNTIME_DIR/prepfs-mounts`, else
//! `/tmp/prepfs-mounts-<uid>`. A mount counts the entries of its own directory and, for a user
//! other than root, those of root's. Each mount's entry is `<pid>.json`; [`Registration`]
//! removes it when dropped (at unmount); the entry of a process that is gone is ignored (and
//! removed where allowed). Only entries of this user or root count, read without following
//! links, at most 4 KiB, regular files only, at most [`MAX_ENTRIES`] a directory.
//!
//! The rule ([`auto_share`]): the machine budget is half of the memory available now plus what
//! the other mounts hold (their budgets count as memory they hold or will); a mount set to
//! `auto` takes half of what the others leave of it. Alone it takes a quarter of available
//! memory, as before; with others, less, and all mounts together never more than the budget.

use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use prepfs_base::private_dir::PrivateDir;

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

/// The most entries read from one registry directory (more mounts than any machine runs).
const MAX_ENTRIES: usize = 1024;

/// Root's registry directory.
const ROOT_DIR: &str = "/run/prepfs-mounts";

/// This user's registry directory.
fn dir() -> PathBuf {
    if let Some(d) = std::env::var_os("PREPFS_RUN_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    if uid == 0 {
        return PathBuf::from(ROOT_DIR);
    }
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(run) => Path::new(&run).join("prepfs-mounts"),
        None => PathBuf::from(format!("/tmp/prepfs-mounts-{uid}")),
    }
}

/// The directories whose entries count: this user's, and root's for another user.
fn dirs() -> Vec<PathBuf> {
    let mine = dir();
    let root = PathBuf::from(ROOT_DIR);
    if mine != root && std::env::var_os("PREPFS_RUN_DIR").is_none() && root.is_dir() {
        vec![mine, root]
    } else {
        vec![mine]
    }
}

/// The memory the other live mounts registered: (how many, bytes together).
fn others() -> (usize, u64) {
    let me = std::process::id();
    let mut found = (0, 0u64);
    for dir in dirs() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for path in entries.flatten().take(MAX_ENTRIES).map(|e| e.path()) {
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let Some(entry) = read_entry(&path) else { continue };
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
    }
    found
}

/// An entry of this user or root: a regular file, not through a link, at most 4 KiB, that
/// parses; `None` otherwise.
fn read_entry(path: &Path) -> Option<Entry> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    // SAFETY: getuid has no preconditions.
    let me = unsafe { libc::getuid() };
    if !meta.is_file() || meta.len() > 4096 || (meta.uid() != me && meta.uid() != 0) {
        return None;
    }
    let mut bytes = Vec::new();
    file.take(4096).read_to_end(&mut bytes).ok()?;
    serde_json::from_slice(&bytes).ok()
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
pub struct Registration {
    path: PathBuf,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Registers this process's mount at `mountpoint` holding `memory` bytes of cache, in this
/// user's registry directory (made if missing; refused if another user could change it).
pub fn register(mountpoint: &Path, memory: u64) -> io::Result<Registration> {
    let dir = PrivateDir::open_readable(&dir())?;
    let name = format!("{}.json", std::process::id());
    let entry = Entry { pid: std::process::id(), mountpoint: mountpoint.to_path_buf(), memory };
    let text = serde_json::to_vec(&entry).map_err(io::Error::other)?;
    // Written whole under an unpredictable temporary name, then renamed: a reader never sees
    // half an entry, and no planted name is written through.
    dir.write_atomically(&name, &[&text])?;
    Ok(Registration { path: dir.path().join(name) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn planted_links_fifos_and_big_files_are_not_read_as_entries() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let good = tmp.path().join("1.json");
        std::fs::write(&good, br#"{"pid":1,"mountpoint":"/m","memory":5}"#).expect("entry");
        assert_eq!(read_entry(&good).map(|e| e.memory), Some(5));
        let link = tmp.path().join("2.json");
        std::os::unix::fs::symlink(&good, &link).expect("link");
        assert!(read_entry(&link).is_none(), "a link is not followed");
        let fifo = tmp.path().join("3.json");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).expect("fifo");
        assert!(read_entry(&fifo).is_none(), "a FIFO is neither waited on nor read");
        let big = tmp.path().join("4.json");
        std::fs::write(&big, vec![b' '; 5000]).expect("big");
        assert!(read_entry(&big).is_none());
    }

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
