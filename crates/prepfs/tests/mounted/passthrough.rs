//! Mounted tests of kernel FUSE passthrough: the reads of an open file go to its backing file
//! (the source's in `encoded/`, a sealed memory file of the output elsewhere) and never reach
//! the daemon; the bytes are the ones the daemon serves itself; no backing id or memory file
//! outlives the handles using it; overlapping opens of one file (one backing file per inode
//! in the kernel) all succeed. Where the kernel does not offer passthrough, the tests that
//! need it say so and stop.

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use common::{make_dataset, write_config, Mounted};

const LIMIT: Duration = Duration::from_secs(180);

/// Every regular file under `root`, sorted.
fn files_under(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).expect("read_dir") {
            let entry = entry.expect("entry");
            if entry.file_type().expect("type").is_dir() {
                stack.push(entry.path());
            } else {
                out.push(entry.path());
            }
        }
    }
    out.sort();
    out
}

fn counter(stats: &serde_json::Value, path: &[&str]) -> u64 {
    path.iter().fold(stats, |v, k| &v[*k]).as_u64().unwrap_or_else(|| panic!("stats has no {path:?}: {stats}"))
}

/// Bytes of samples the daemon served by its own reads (`.prepfs/` files are not counted).
fn daemon_served_bytes(stats: &serde_json::Value) -> u64 {
    ["encoded", "decoded", "augmented"].iter().map(|v| counter(stats, &["views", v, "bytes_read_by_daemon"])).sum()
}

/// Whether the mount runs with passthrough; if not, says why the test stops.
fn passthrough_on(mnt: &Mounted) -> bool {
    let stats = mnt.stats();
    let on = stats["passthrough"]["on"].as_bool() == Some(true);
    if !on {
        // Where the kernel must have it (Linux 6.9 on, as root), PREPFS_REQUIRE_PASSTHROUGH makes
        // the skip a failure, as make test sets it on a kernel that has it.
        assert!(
            std::env::var_os("PREPFS_REQUIRE_PASSTHROUGH").is_none(),
            "PREPFS_REQUIRE_PASSTHROUGH is set but the kernel gave no passthrough ({})",
            stats["passthrough"]["off_because"]
        );
        eprintln!("SKIPPED: the kernel gave no passthrough here ({})", stats["passthrough"]["off_because"]);
    }
    on
}

/// Output files the daemon holds open: `/proc/PID/fd` links to `/#INODE (deleted)` (an unnamed
/// file at the root of its tmpfs, which is mounted nowhere) or, where it has none, to
/// `/memfd:prepfs`.
fn output_files_held(pid: i32) -> usize {
    let is_output = |link: &str| {
        link.contains("memfd:prepfs")
            || link.strip_prefix("/#").and_then(|rest| rest.strip_suffix(" (deleted)")).is_some_and(|ino| ino.bytes().all(|b| b.is_ascii_digit()))
    };
    fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.filter_map(Result::ok).filter(|e| fs::read_link(e.path()).is_ok_and(|t| is_output(&t.to_string_lossy()))).count())
        .unwrap_or(0)
}

#[test]
fn reads_go_straight_to_the_backing_files_and_serve_the_bytes_the_daemon_would() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = make_dataset(tmp.path(), 2, 6, false);

    // The reference: the same mount with every read served by the daemon.
    let plain_dir = tmp.path().join("plain");
    fs::create_dir(&plain_dir).expect("dir");
    let plain_config = write_config(&plain_dir, "seed: 7\nthreads: 2\npassthrough: false\n");
    let plain = Mounted::start(&plain_dir, &plain_config, &source, LIMIT);
    let stats = plain.stats();
    assert_eq!(stats["passthrough"]["on"], false, "{stats}");
    assert!(stats["passthrough"]["off_because"].as_str().is_some_and(|w| w.contains("passthrough: false")), "{stats}");
    let decoded_plain: Vec<Vec<u8>> = files_under(&plain.path("decoded")).iter().map(|p| fs::read(p).expect("read")).collect();
    let stats = plain.stats();
    assert!(daemon_served_bytes(&stats) > 0, "without passthrough the daemon serves reads: {stats}");
    drop(plain);

    let config = write_config(tmp.path(), "seed: 7\nthreads: 2\n");
    let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);
    if !passthrough_on(&mnt) {
        return;
    }

    // encoded/: the source's bytes, every file (non-images included).
    let sources = files_under(&source);
    for path in &sources {
        let rel = path.strip_prefix(&source).expect("rel");
        assert!(fs::read(mnt.path("encoded").join(rel)).expect("read") == fs::read(path).expect("source"), "encoded/{}", rel.display());
    }
    // decoded/: the same pixels as the daemon serves them.
    let decoded: Vec<Vec<u8>> = files_under(&mnt.path("decoded")).iter().map(|p| fs::read(p).expect("read")).collect();
    assert_eq!(decoded.len(), decoded_plain.len());
    assert!(decoded == decoded_plain, "decoded/ through passthrough differs from the daemon's own reads");
    // augmented/: whole outputs of the advertised size.
    for path in files_under(&mnt.path("augmented")) {
        let len = fs::metadata(&path).expect("stat").len();
        assert_eq!(fs::read(&path).expect("read").len() as u64, len, "{}", path.display());
    }

    let stats = mnt.stats();
    assert_eq!(daemon_served_bytes(&stats), 0, "a read of a sample reached the daemon: {stats}");
    // What the kernel read for the daemon still counts as served: each file's size at its open.
    let source_bytes: u64 = sources.iter().map(|p| fs::metadata(p).expect("stat").len()).sum();
    assert_eq!(counter(&stats, &["views", "encoded", "bytes_passthrough"]), source_bytes, "{stats}");
    assert_eq!(counter(&stats, &["views", "encoded", "bytes_served"]), source_bytes, "{stats}");
    let decoded_bytes: u64 = decoded.iter().map(|d| d.len() as u64).sum();
    assert_eq!(counter(&stats, &["views", "decoded", "bytes_served"]), decoded_bytes, "{stats}");
    let files_opened = sources.len() as u64 + 2 * 12;
    assert!(counter(&stats, &["passthrough", "opens"]) >= files_opened, "{stats}");
    assert!(stats["fuse_requests_per_open"].as_f64().is_some_and(|r| r > 0.0), "{stats}");
}

#[test]
fn thousands_of_opens_leave_no_backing_id_or_memory_file_behind() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = make_dataset(tmp.path(), 2, 10, false);
    let config = write_config(tmp.path(), "seed: 3\nthreads: 2\n");
    let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);
    if !passthrough_on(&mnt) {
        return;
    }
    let mut paths = files_under(&mnt.path("encoded"));
    paths.extend(files_under(&mnt.path("decoded")));
    paths.extend(files_under(&mnt.path("augmented")));
    paths.extend(files_under(&mnt.path("jobs/leak/augmented")));
    let paths = Arc::new(paths);
    // Four readers, each 500 opens, holding up to three files open at once, so that opens of
    // one file overlap (they share its backing id) and follow each other (a new one each).
    let readers: Vec<_> = (0..4)
        .map(|r| {
            let paths = Arc::clone(&paths);
            std::thread::spawn(move || {
                let mut held = std::collections::VecDeque::new();
                for i in 0..500usize {
                    let path = &paths[(i * 7 + r * 13) % paths.len()];
                    let mut f = fs::File::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
                    let mut buf = Vec::new();
                    std::io::Read::read_to_end(&mut f, &mut buf).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
                    assert!(!buf.is_empty(), "{}", path.display());
                    held.push_back(f);
                    if held.len() > 3 {
                        held.pop_front();
                    }
                }
            })
        })
        .collect();
    for r in readers {
        r.join().expect("reader");
    }
    // Releases reach the daemon a moment after close returns.
    let mut stats = mnt.stats();
    for _ in 0..100 {
        if counter(&stats, &["passthrough", "backing_ids_open"]) == 0 && counter(&stats, &["open_handles"]) <= 1 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
        stats = mnt.stats();
    }
    assert!(counter(&stats, &["passthrough", "backing_ids_opened"]) >= 100, "{stats}");
    assert_eq!(counter(&stats, &["passthrough", "backing_ids_open"]), 0, "backing ids left open: {stats}");
    // Output files left are the cache's outputs made ready to pass through, nothing of the opens.
    // The job's refill goes on making outputs in the background, and one it is making holds its
    // file a moment before the cache takes it: a leak stays, that moment passes.
    let mut held = output_files_held(mnt.pid());
    let mut cached = mnt.stats();
    for _ in 0..100 {
        if held as u64 <= counter(&cached, &["cache", "augmented", "entries"]) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
        held = output_files_held(mnt.pid());
        cached = mnt.stats();
    }
    assert!(
        held as u64 <= counter(&cached, &["cache", "augmented", "entries"]),
        "the daemon holds {held} output files, more than its cached outputs: {cached}"
    );
    // And the count sees them: cached outputs are files the daemon holds.
    assert!(
        held > 0 || counter(&cached, &["cache", "augmented", "entries"]) == 0,
        "no output file found among the daemon's descriptors, with outputs cached: {cached}"
    );
    assert_eq!(daemon_served_bytes(&stats), 0, "a read of a sample reached the daemon: {stats}");
}

#[test]
fn overlapping_opens_of_one_file_all_succeed_and_read_one_content() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = make_dataset(tmp.path(), 1, 4, false);
    let config = write_config(tmp.path(), "seed: 5\nthreads: 2\n");
    let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);
    if !passthrough_on(&mnt) {
        return;
    }
    for view in ["augmented", "decoded", "encoded", "jobs/overlap/augmented"] {
        let path = files_under(&mnt.path(view)).into_iter().next().expect("a file");
        // Eight opens held at once: the kernel takes one backing file per inode, so each must
        // be answered with the first's.
        let opened: Vec<fs::File> = (0..8).map(|_| fs::File::open(&path).expect("overlapping open")).collect();
        let contents: Vec<Vec<u8>> = opened
            .into_iter()
            .map(|mut f| {
                let mut buf = Vec::new();
                std::io::Read::read_to_end(&mut f, &mut buf).expect("read");
                buf
            })
            .collect();
        assert!(contents.iter().all(|c| !c.is_empty() && *c == contents[0]), "{view}: overlapping opens differ");
    }
    // Opens that follow each other in augmented/ still draw anew.
    let path = files_under(&mnt.path("augmented")).into_iter().next().expect("a file");
    let draws: std::collections::HashSet<Vec<u8>> = (0..6)
        .map(|_| {
            let bytes = fs::read(&path).expect("read");
            mnt.wait_released();
            bytes
        })
        .collect();
    assert!(draws.len() > 1, "augmented/ served one draw to every open");
}

#[test]
fn npy_outputs_open_with_numpy_mmap_mode_r_in_every_pixel_view() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = make_dataset(tmp.path(), 2, 3, false);
    let config = write_config(tmp.path(), "seed: 9\nthreads: 2\noutput: { format: npy }\n");
    let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);
    if !passthrough_on(&mnt) {
        return;
    }
    // The kernel maps a passthrough file's backing file (a direct-I/O FUSE file it would refuse
    // with ENODEV).
    let dirs = [mnt.path("augmented"), mnt.path("decoded"), mnt.path("jobs/mapped/augmented")];
    let out = common::python("npy_mmap.py", &dirs);
    assert!(out.contains("\"mapped\": 18"), "{out}");
}
