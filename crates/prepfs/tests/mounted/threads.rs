//! A running mount's threads, as `/proc/PID/task` shows them: every one named (prepfs's own
//! `prepfs-*`, fuser's `fuser-*`, the main thread), as many of each pool as the config asks, the
//! work that only prepares what may be read next niced below requests, and all of them stopped
//! and joined at unmount (the daemon exits cleanly). The test has its own temporary directory,
//! a mount guard that unmounts on every way out, and a time limit.

use crate::common;

use std::collections::BTreeMap;
use std::fs;
use std::time::Duration;

use common::{make_dataset, write_config, Mounted};

const LIMIT: Duration = Duration::from_secs(120);

/// Each thread of `pid`: its name (`comm`) and nice value.
fn threads(pid: i32) -> Vec<(String, i64)> {
    let mut found = Vec::new();
    for task in fs::read_dir(format!("/proc/{pid}/task")).expect("/proc/PID/task") {
        let task = task.expect("task").path();
        // A thread that ended between the listing and the read is passed over.
        let (Ok(comm), Ok(stat)) = (fs::read_to_string(task.join("comm")), fs::read_to_string(task.join("stat"))) else { continue };
        // `stat`: pid (comm) state ...; the nice value is the 19th field, the 17th after `)`.
        let after_name = &stat[stat.rfind(')').expect("stat") + 2..];
        let nice = after_name.split_whitespace().nth(16).expect("nice").parse().expect("a number");
        found.push((comm.trim().to_string(), nice));
    }
    found
}

/// The name of a thread without its index (`prepfs-decode-1` → `prepfs-decode`); `comm` keeps
/// 15 bytes, so `prepfs-housekeeping` is `prepfs-housekee`.
fn kind(name: &str) -> &str {
    name.trim_end_matches(|c: char| c.is_ascii_digit()).trim_end_matches('-')
}

#[test]
fn every_thread_of_a_mount_is_named_the_background_ones_are_niced_and_all_end_at_unmount() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = make_dataset(tmp.path(), 2, 6, false);
    let config = write_config(tmp.path(), "seed: 3\nthreads: 2\nfuse_threads: 2\ncache: { memory: 64MiB }\n");
    let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);
    // Opens that decode, so the decode threads and the source's I/O threads have run.
    for file in common::augmented_files(&mnt).iter().take(4) {
        assert!(!fs::read(file).expect("read").is_empty());
    }
    // The server (stats.json's pid); the `prepfs mount` process is its supervisor, whose own
    // threads are named too.
    let server = mnt.stats()["pid"].as_i64().expect("pid") as i32;
    let supervisor = threads(mnt.pid());
    assert!(supervisor.iter().all(|(name, _)| name == "prepfs" || name.starts_with("prepfs-supervis")), "the supervisor's threads: {supervisor:?}");
    let seen = threads(server);
    let mut by_kind: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for (name, nice) in &seen {
        by_kind.entry(kind(name)).or_default().push(*nice);
    }
    for (name, _) in &seen {
        assert!(name.starts_with("prepfs-") || name.starts_with("fuser-") || name == "prepfs", "an unnamed thread: {name} in {seen:?}");
    }
    assert_eq!(by_kind.get("prepfs").map(Vec::len), Some(1), "one thread with the process's name, the main one (rayon's global pool would add more): {seen:?}");
    assert_eq!(by_kind.get("prepfs-decode").map(Vec::len), Some(2), "threads: 2 decode threads: {seen:?}");
    assert_eq!(by_kind.get("prepfs-fill").map(Vec::len), Some(2), "threads: 2 fill threads: {seen:?}");
    assert!(by_kind.get("prepfs-io").is_some_and(|n| !n.is_empty()), "the source's I/O threads: {seen:?}");
    let base = by_kind["prepfs"][0];
    for background in ["prepfs-refill", "prepfs-prefetch", "prepfs-closer"] {
        let nices = by_kind.get(background).unwrap_or_else(|| panic!("no {background} thread: {seen:?}"));
        // 10 nicer than the daemon, at most 19 (the nicest).
        assert!(nices.iter().all(|&n| n == (base + 10).min(19)), "{background} runs below requests (daemon at nice {base}): {nices:?}");
    }
    for request in ["prepfs-decode", "prepfs-io", "prepfs-fill"] {
        assert!(by_kind[request].iter().all(|&n| n == base), "{request} runs at the daemon's priority: {seen:?}");
    }
    let status = mnt.stop();
    assert!(status.success(), "every thread stopped and joined, the daemon exits cleanly: {status}");
}
