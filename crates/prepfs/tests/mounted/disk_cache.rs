//! Mounted end-to-end test of the cache's disk tier: samples spill to the disk directory, a
//! remount finds them (a warm restart reads nothing from the source), and a damaged cache file is
//! dropped and refetched, never served; so does a server killed with SIGKILL under its
//! supervisor (issue 53), a torn entry and a leftover temporary file beside them.

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{augmented_files, make_dataset, source_bytes, write_config, Mounted};

const LIMIT: Duration = Duration::from_secs(120);

fn epoch(files: &[PathBuf]) {
    for f in files {
        assert_eq!(fs::read(f).expect("read").len(), 15 + 224 * 224 * 3, "{}", f.display());
    }
}

fn cache_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).expect("list") {
        let p = entry.expect("entry").path();
        if p.is_dir() {
            out.extend(cache_files(&p));
        } else if p.extension().is_some_and(|e| e == "bin") {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// A config whose memory is far too small for the set and whose disk tier (at `disk`) holds all
/// of it; no background refill, so each sample is loaded exactly once per epoch.
fn disk_config(dir: &Path, disk: &Path) -> PathBuf {
    write_config(
        dir,
        &format!("seed: 2\ncache:\n  memory: 1MiB\n  split: 0-50-50\n  refill: false\n  disk: {{ path: {}, size: 1GiB }}\n", disk.display()),
    )
}

/// Waits until the disk tier's queued writes are written and it holds `entries` entries; its
/// stats then.
fn wait_disk_writes(mnt: &Mounted, entries: u64) -> serde_json::Value {
    let started = Instant::now();
    loop {
        let stats = mnt.stats();
        let d = &stats["cache"]["disk"];
        let held = d["entries"]["encoded"].as_u64().unwrap_or(0) + d["entries"]["decoded"].as_u64().unwrap_or(0);
        if d["pending_writes"] == 0 && held == entries {
            return stats;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "disk writes did not finish: {stats}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The source's sample files' sizes (not the generator's README).
fn sample_sizes(source: &Path) -> Vec<u64> {
    fs::read_dir(source)
        .expect("list")
        .flat_map(|c| fs::read_dir(c.expect("class").path()).expect("list"))
        .map(|f| f.expect("file"))
        .filter(|f| f.file_name().to_string_lossy() != "README.txt")
        .map(|f| f.metadata().expect("stat").len())
        .collect()
}

#[test]
fn a_remount_reads_the_disk_tier_and_refetches_only_a_damaged_entry() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = make_dataset(tmp.path(), 2, 6, false);
    let disk = tmp.path().join("nvme/prepfs-cache");
    let config = disk_config(tmp.path(), &disk);
    let sizes = sample_sizes(&source);
    assert_eq!(sizes.len(), 12);

    let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);
    let files = augmented_files(&mnt);
    assert_eq!(files.len(), 12);
    epoch(&files);
    assert_eq!(source_bytes(&mnt), sizes.iter().sum::<u64>(), "epoch 1 reads each sample once");
    // Writes are queued off the request path: wait for the writer to finish them.
    let stats = wait_disk_writes(&mnt, 12);
    let d = &stats["cache"]["disk"];
    assert_eq!(d["admitting"], true, "{stats}");
    assert_eq!(d["write_errors"], 0, "{stats}");
    assert!(d["bytes_used"].as_u64().unwrap_or(u64::MAX) <= d["size"].as_u64().unwrap_or(0), "{stats}");
    assert!(stats["cache"]["decoded"]["bytes_used"].as_u64().unwrap_or(u64::MAX) <= 1 << 20);
    assert!(mnt.stop().success());

    // Damage one entry: a flipped byte in the middle of its payload.
    let entries = cache_files(&disk);
    assert_eq!(entries.len(), 12, "one cache file per sample: {entries:?}");
    let victim = &entries[entries.len() / 2];
    let mut data = fs::read(victim).expect("read entry");
    let middle = data.len() / 2;
    data[middle] ^= 0x5a;
    fs::write(victim, data).expect("write entry");

    let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);
    let files = augmented_files(&mnt);
    epoch(&files);
    let read = source_bytes(&mnt);
    let stats = mnt.stats();
    assert!(sizes.contains(&read), "epoch 2 after a remount read {read} source bytes, not one sample's: {stats}");
    let d = &stats["cache"]["disk"];
    assert!(d["corrupt_dropped"].as_u64().unwrap_or(0) >= 1, "{stats}");
    assert!(d["hits"].as_u64().unwrap_or(0) >= 11, "{stats}");
    assert!(mnt.log().contains("disk cache entry dropped"), "{}", mnt.log());
    // The damaged entry was refetched and spills again.
    let started = Instant::now();
    while mnt.stats()["cache"]["disk"]["pending_writes"] != 0 {
        assert!(started.elapsed() < Duration::from_secs(30), "disk writes did not finish");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(cache_files(&disk).len(), 12);
}

/// A small tmpfs standing in for a disk that fills up; unmounted on every way out.
struct SmallDisk(PathBuf);

impl SmallDisk {
    fn mount(path: PathBuf, size: &str) -> SmallDisk {
        fs::create_dir_all(&path).expect("mkdir");
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700"), "prepfs-test-disk"])
            .arg(&path)
            .status()
            .expect("mount(8)");
        assert!(status.success(), "mounting a tmpfs needs root (make test runs as root)");
        SmallDisk(path)
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn a_full_disk_stops_the_disk_tier_and_nothing_else() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = make_dataset(tmp.path(), 2, 6, false);
    // A 1 MiB disk under a 1 GiB budget: the writes run out of space (ENOSPC) long before the
    // budget, after a decoded entry or two (about 560 KB each).
    let disk = SmallDisk::mount(tmp.path().join("small-disk"), "1m");
    let config = write_config(
        tmp.path(),
        &format!(
            "seed: 3\ncache:\n  memory: 1MiB\n  split: 0-50-50\n  refill: false\n  disk: {{ path: {}, size: 1GiB }}\n",
            disk.0.display()
        ),
    );
    let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);
    let files = augmented_files(&mnt);
    for _ in 0..2 {
        epoch(&files);
    }
    let started = Instant::now();
    let stats = loop {
        let stats = mnt.stats();
        if stats["cache"]["disk"]["pending_writes"] == 0 {
            break stats;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "disk writes did not finish: {stats}");
        std::thread::sleep(Duration::from_millis(20));
    };
    let d = &stats["cache"]["disk"];
    assert!(d["write_errors"].as_u64().unwrap_or(0) >= 1, "{stats}");
    assert_eq!(d["admitting"], false, "{stats}");
    assert_eq!(stats["decode_errors"], 0, "{stats}");
    assert!(mnt.log().contains("No space left"), "the log names the cause: {}", mnt.log());
    // What was written before the disk filled still reads back after a remount.
    assert!(mnt.stop().success());
    let written = cache_files(&disk.0).len();
    assert!(written >= 1, "nothing was written before the disk filled");
    let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);
    epoch(&augmented_files(&mnt));
    assert!(mnt.stats()["cache"]["disk"]["hits"].as_u64().unwrap_or(0) >= 1);
}

#[test]
fn the_disk_tiers_entries_survive_a_server_kill_and_a_torn_one_is_dropped_never_served() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = make_dataset(tmp.path(), 2, 6, false);
    let disk = tmp.path().join("nvme/prepfs-cache");
    let config = disk_config(tmp.path(), &disk);
    let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);
    let files = augmented_files(&mnt);
    epoch(&files);
    wait_disk_writes(&mnt, 12);
    // A torn write: an entry cut short, as a crash mid-write to its name would leave it (prepfs
    // writes to a temporary name and renames; a leftover temporary is there too).
    let entries = cache_files(&disk);
    assert_eq!(entries.len(), 12);
    let torn = &entries[3];
    let len = fs::metadata(torn).expect("stat").len();
    fs::OpenOptions::new().write(true).open(torn).expect("open").set_len(len / 2).expect("truncate");
    let leftover = torn.with_file_name(".0000000000000009.7.tmp");
    fs::write(&leftover, b"half").expect("leftover");
    // The server dies with no shutdown (SIGKILL); its supervisor starts the next on the mount.
    common::kill_server(&mnt);
    epoch(&files);
    let stats = mnt.stats();
    let d = &stats["cache"]["disk"];
    assert!(d["hits"].as_u64().unwrap_or(0) >= 11, "the entries written before the kill are read: {stats}");
    let sizes = sample_sizes(&source);
    let read = source_bytes(&mnt);
    assert!(sizes.contains(&read), "after the kill only the torn entry's sample is read from the source again ({read} bytes): {stats}");
    assert!(!leftover.exists(), "the leftover temporary file is removed");
    assert!(cache_files(&disk).iter().all(|f| f != torn || fs::metadata(f).is_ok_and(|m| m.len() == len)), "the torn entry is never kept as it was");
}
