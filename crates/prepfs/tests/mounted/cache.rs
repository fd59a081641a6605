//! Mounted end-to-end tests of the sample cache: a second epoch over a dataset that fits reads
//! nothing from the source, and the live stats say what the cache holds.

use crate::common;

use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use common::{augmented_files, make_dataset, source_bytes, write_config, Mounted};

const LIMIT: Duration = Duration::from_secs(120);

#[test]
fn a_second_epoch_over_a_set_that_fits_reads_nothing_from_the_source() {
    for split in ["0-100-0", "100-0-0"] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let source = make_dataset(tmp.path(), 3, 10, false);
        let config = write_config(tmp.path(), &format!("seed: 2\ncache: {{ memory: 512MiB, split: {split} }}\n"));
        let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);
        let files = augmented_files(&mnt);
        assert_eq!(files.len(), 30);
        // Two parallel readers per epoch, as a DataLoader with two workers would.
        let epoch = |files: &[PathBuf]| {
            let halves: Vec<Vec<PathBuf>> = files.chunks(files.len() / 2).map(<[PathBuf]>::to_vec).collect();
            let readers: Vec<_> = halves
                .into_iter()
                .map(|h| std::thread::spawn(move || h.iter().map(|p| fs::read(p).map(|b| b.len())).collect::<Vec<_>>()))
                .collect();
            for r in readers {
                for len in r.join().expect("reader") {
                    assert_eq!(len.expect("read"), 15 + 224 * 224 * 3);
                }
            }
        };
        epoch(&files);
        let after_first = source_bytes(&mnt);
        let total: u64 = fs::read_dir(&source)
            .expect("list")
            .flat_map(|c| fs::read_dir(c.expect("class").path()).expect("list"))
            .map(|f| f.expect("file"))
            .filter(|f| f.file_name().to_string_lossy() != "README.txt")
            .map(|f| f.metadata().expect("stat").len())
            .sum();
        assert_eq!(after_first, total, "split {split}: epoch 1 reads each sample once");
        epoch(&files);
        assert_eq!(source_bytes(&mnt), after_first, "split {split}: epoch 2 read the source");
        // The split's form holds the set; memory it cannot use flows to the others, so the
        // pixels may be held too (a miss keeps them while decoded has room).
        let stats = mnt.stats();
        let cache = &stats["cache"];
        let entries = |form: &str| cache[form]["entries"].as_u64().unwrap_or(0);
        assert!(entries("decoded") + entries("encoded") >= 30, "{stats}");
        let hits: u64 = ["encoded", "decoded", "augmented"].iter().map(|f| cache[*f]["hits"].as_u64().unwrap_or(0)).sum();
        assert!(hits >= 30, "{stats}");
        for form in ["encoded", "decoded", "augmented"] {
            let used = cache[form]["bytes_used"].as_u64().unwrap_or(u64::MAX);
            assert!(used <= cache[form]["budget"].as_u64().unwrap_or(0), "{stats}");
        }
    }
}

#[test]
fn with_the_default_config_a_second_epoch_back_to_back_reads_no_source_bytes() {
    // No cache settings at all: `memory: auto`, `split: auto` must cache a set this small whole.
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = make_dataset(tmp.path(), 3, 12, false);
    let config = write_config(tmp.path(), "seed: 5\n");
    let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);
    let files = augmented_files(&mnt);
    let read_all = |files: &[PathBuf]| {
        for f in files {
            assert_eq!(fs::read(f).expect("read").len(), 15 + 224 * 224 * 3);
        }
    };
    read_all(&files);
    let after_first = source_bytes(&mnt);
    assert!(after_first > 0);
    read_all(&files); // at once: no pause for the refill
    let stats = mnt.stats();
    assert_eq!(source_bytes(&mnt), after_first, "epoch 2 read the source: {}", stats["cache"]);
    let plan = &stats["plan"];
    assert_eq!(plan["model"], "prepfs", "{plan}");
    assert!(plan["predicted_samples_per_s"].as_f64().unwrap_or(0.0) > 0.0, "{plan}");
    assert!(stats["cache"]["decoded"]["entries"].as_u64().unwrap_or(0) + stats["cache"]["encoded"]["entries"].as_u64().unwrap_or(0) >= 36, "{}", stats["cache"]);
}

#[test]
fn prepfs_stats_prints_the_live_figures() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = make_dataset(tmp.path(), 1, 3, false);
    let config = write_config(tmp.path(), "cache: { memory: 64MiB, split: auto }\n");
    let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);
    for f in augmented_files(&mnt) {
        fs::read(f).expect("read");
    }
    let out = std::process::Command::new(common::prepfs_bin())
        .arg("stats")
        .arg("--json")
        .arg(&mnt.mountpoint)
        .output()
        .expect("prepfs stats");
    assert!(out.status.success());
    let stats: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(stats["samples"], 3);
    assert!(stats["views"]["augmented"]["opens"].as_u64().unwrap_or(0) >= 3);
    let split = stats["cache"]["split"].as_array().expect("split");
    assert_eq!(split.iter().filter_map(serde_json::Value::as_u64).sum::<u64>(), 100);
    assert!(stats["plan"]["predicted_samples_per_s"].as_f64().unwrap_or(0.0) > 0.0, "{stats}");
}

/// The daemon's resident set, in bytes.
fn rss(pid: i32) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kb * 1024
}

#[test]
fn resident_memory_stays_within_the_budget_plus_the_documented_overhead() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // 120 samples of about 500x375: ~67 MB decoded, ~18 MB augmented, ~4 MB encoded; the cache
    // gets 24 MiB, so every form is filled far past its share, three times over.
    let source = make_dataset(tmp.path(), 3, 40, false);
    let budget: u64 = 24 << 20;
    let config = write_config(tmp.path(), &format!("seed: 4\nthreads: 2\ncache: {{ memory: {budget}, split: 10-70-20, refill: false }}\n"));
    let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);
    let base = rss(mnt.pid());
    let mut decoded = Vec::new();
    for class in fs::read_dir(mnt.path("decoded")).expect("list") {
        for f in fs::read_dir(class.expect("class").path()).expect("list") {
            decoded.push(f.expect("file").path());
        }
    }
    let augmented = augmented_files(&mnt);
    let mut peak = 0;
    for _ in 0..3 {
        for path in decoded.iter().chain(&augmented) {
            fs::read(path).expect("read");
        }
        peak = peak.max(rss(mnt.pid()));
    }
    let stats = mnt.stats();
    let used = stats["cache"]["encoded"]["bytes_used"].as_u64().unwrap_or(0)
        + stats["cache"]["decoded"]["bytes_used"].as_u64().unwrap_or(0)
        + stats["cache"]["augmented"]["bytes_used"].as_u64().unwrap_or(0);
    assert!(used <= budget, "charged {used} > budget {budget}");
    assert!(used > budget / 2, "the cache was not filled: {stats}");
    // The documented overhead above the base and the budget: the outputs pinned by open handles
    // (two readers here) and allocator slack, 8 MiB (docs/cache-and-planner.md, "Memory bound").
    let overhead: u64 = 8 << 20;
    eprintln!("RSS: base {} KiB, peak {} KiB, cache charged {} KiB of {} KiB", base >> 10, peak >> 10, used >> 10, budget >> 10);
    assert!(
        peak <= base + budget + overhead,
        "RSS peaked at {} MiB: base {} MiB + budget {} MiB + {} MiB allowed",
        peak >> 20,
        base >> 20,
        budget >> 20,
        overhead >> 20
    );
}

/// The pixel work counters: (full decodes, region decode-and-augments).
fn decodes(mnt: &Mounted) -> (u64, u64) {
    let work = &mnt.stats()["work"];
    (work["full_decodes"].as_u64().expect("full_decodes"), work["decode_augments"].as_u64().expect("decode_augments"))
}

#[test]
fn over_a_run_of_several_epochs_a_first_touch_keeps_the_pixels_so_the_second_epoch_decodes_nothing() {
    // A cache that holds the set, all of it given to augmented: the decoded room only flowed
    // there. Expecting many epochs (the default), the plan keeps each sample's pixels at its
    // first touch; told the run is one epoch, it decodes only the crop's region, and the
    // second epoch then pays a full decode of each sample.
    for (epochs, keep) in [("", true), ("epochs: 1, ", false)] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let source = make_dataset(tmp.path(), 2, 10, false);
        let config = write_config(tmp.path(), &format!("seed: 2\ncache: {{ memory: 256MiB, split: 0-0-100, {epochs}refill: false }}\n"));
        let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);
        let plan = mnt.stats()["plan"].clone();
        let policy = if keep { "full decode, pixels kept" } else { "region decode" };
        assert_eq!(plan["first_touch"], policy, "{plan}");
        assert_eq!(plan["epochs"]["current"], 1, "{plan}");
        let files = augmented_files(&mnt);
        let (full_0, region_0) = decodes(&mnt);
        for f in &files {
            fs::read(f).expect("read");
        }
        let (full_1, region_1) = decodes(&mnt);
        for f in &files {
            fs::read(f).expect("read");
        }
        let (full_2, region_2) = decodes(&mnt);
        let n = files.len() as u64;
        if keep {
            assert_eq!((full_1 - full_0, region_1 - region_0), (n, 0), "epoch 1 decodes each sample in full once");
            assert_eq!((full_2 - full_1, region_2 - region_1), (0, 0), "epoch 2 decodes nothing");
        } else {
            assert_eq!((full_1 - full_0, region_1 - region_0), (0, n), "epoch 1 decodes each crop's region");
            // Each sample is decoded again, in full where the bytes were kept (one whose bytes
            // did not fit the encoded room decodes its region again).
            assert_eq!(full_2 - full_1 + region_2 - region_1, n, "epoch 2 decodes each sample again");
            assert!(full_2 - full_1 >= n * 3 / 4, "epoch 2 decodes the samples kept as bytes in full: {}", full_2 - full_1);
        }
        let started = std::time::Instant::now();
        while mnt.stats()["plan"]["epochs"]["current"] != 3 {
            assert!(started.elapsed() < Duration::from_secs(10), "the plan does not count the epochs read: {}", mnt.stats()["plan"]);
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(mnt.stop().success());
    }
}
