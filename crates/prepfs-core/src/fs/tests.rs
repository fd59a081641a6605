//! The core's unit tests: a filesystem over a generated dataset, called without FUSE.

use super::*;
use std::os::unix::fs::MetadataExt;
use super::inodes::ROOT_INO;
use std::ffi::OsStr;
use std::sync::atomic::Ordering;
use std::time::Duration;
use crate::config::Overrides;
use prepfs_base::errno::ToErrno;
use crate::producer::RefillScope;
use prepfs_source::{Fault, FaultySource};
use std::collections::HashSet;

/// [`core`] reading its source through a fault-injecting [`FaultySource`].
fn faulty_core(n: usize, yaml: &str) -> (tempfile::TempDir, Filesystem, Arc<FaultySource>) {
    let (dir, fs) = core(n, yaml);
    let faulty = Arc::new(FaultySource::new(LocalSource::new(&dir.path().join("src")).expect("root")));
    let overrides = Overrides { source: Some(dir.path().join("src")), mountpoint: Some(dir.path().join("mnt")), seed: Some(3) };
    let config = Config::parse(&format!("threads: 1\n{yaml}"), &overrides).expect("config");
    let catalog = Catalog::scan(&config.source, |_| {}).expect("scan");
    drop(fs);
    let io: Arc<dyn SourceIo> = faulty.clone();
    (dir, Filesystem::with_source(config, catalog, io).expect("filesystem"), faulty)
}

#[test]
fn an_output_a_job_has_used_ranks_as_no_augmented_hit_for_it_but_does_for_the_others() {
    let (_dir, fs) = core(2, "cache: { memory: 64MiB, split: 0-0-100, refill: false }\n");
    let jobs = fs.lookup(ROOT_INO, OsStr::new("jobs"), Caller::ROOT).expect("jobs").ino;
    fs.mkdir(jobs, OsStr::new("b"), Caller::ROOT).expect("mkdir b"); // both jobs active: a miss's output is kept for the other
    read_file(&fs, job_file_ino(&fs, "a", "s000.ppm"));
    let (a, b) = (fs.jobs().by_name("a").expect("a"), fs.jobs().by_name("b").expect("b"));
    let served = (0..2).find(|&f| a.has_seen(f)).expect("a was served a sample");
    assert_eq!(fs.cache.rank_for_job(served, Form::Augmented, b.bit()), 3, "b can take it");
    assert!(fs.cache.rank_for_job(served, Form::Augmented, a.bit()) < 3, "a used it already");
    // Kept for b while b needs the sample; dropped once b was served it another way.
    assert_eq!(fs.drop_outputs_no_job_needs(), 0);
    b.mark_served(served, false);
    assert_eq!(fs.drop_outputs_no_job_needs(), 1);
    assert_eq!(fs.cache().augmented.entries(), 0);
}

/// The inode of `jobs/<job>/augmented/c0/<name>` (a lookup, as the kernel's; the job is made
/// at its first open).
fn job_file_ino(fs: &Filesystem, job: &str, name: &str) -> u64 {
    let mut ino = ROOT_INO;
    for part in ["jobs", job, "augmented", "c0", name] {
        ino = fs.lookup(ino, OsStr::new(part), Caller::ROOT).expect(part).ino;
    }
    ino
}

/// Whether an open of `name` in job `job`'s `augmented/` would run in place (on a FUSE thread).
fn job_open_is_cheap(fs: &Filesystem, job: &str, name: &str) -> bool {
    fs.open_is_cheap(job_file_ino(fs, job, name))
}

/// Job `a` is served one of two samples (a miss, its output kept for job `b`); returns its name.
fn serve_one_to_a_keeping_it_for_b(fs: &Filesystem) -> String {
    let jobs = fs.lookup(ROOT_INO, OsStr::new("jobs"), Caller::ROOT).expect("jobs").ino;
    for job in ["a", "b"] {
        fs.mkdir(jobs, OsStr::new(job), Caller::ROOT).expect("mkdir");
    }
    read_file(fs, job_file_ino(fs, "a", "s000.ppm"));
    let served = (0..2).find(|&f| fs.jobs().by_name("a").expect("a").has_seen(f)).expect("a was served a sample");
    format!("s{served:03}.ppm")
}

#[test]
fn an_open_in_a_job_runs_in_place_only_for_an_unseen_cached_sample_and_never_waiting_on_a_shared_store() {
    let yaml = "cache: { memory: 64MiB, split: 0-0-100, refill: false }\n";
    let (_dir, fs) = core(2, yaml);
    let served = serve_one_to_a_keeping_it_for_b(&fs);
    assert!(job_open_is_cheap(&fs, "b", &served), "b's open of an output kept for it decodes nothing");
    assert!(!job_open_is_cheap(&fs, "a", &served), "a has seen it: its open chooses another, maybe a miss");
    let other = if served == "s000.ppm" { "s001.ppm" } else { "s000.ppm" };
    assert!(!job_open_is_cheap(&fs, "b", other), "not cached: a decode");
    // The same with the jobs shared through a remote tier: each open asks the store first.
    let redis_dir = tempfile::tempdir().expect("tempdir");
    let server = prepfs_test_servers::RedisServer::start(redis_dir.path());
    let secret = redis_dir.path().join("secret");
    std::fs::write(&secret, [7u8; 32]).expect("secret");
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod");
    let remote = format!("remote: {{ url: \"{}\", size: 64MiB, secret_file: {} }}", server.url(), secret.display());
    let (_dir, fs) = core(2, &format!("cache: {{ memory: 64MiB, split: 0-0-100, refill: false, {remote} }}\n"));
    let served = serve_one_to_a_keeping_it_for_b(&fs);
    assert!(fs.jobs().by_name("b").expect("b").is_shared());
    assert!(!job_open_is_cheap(&fs, "b", &served), "a shared job's open waits on the store: the pool runs it");
}

#[test]
fn a_hung_source_fails_its_open_within_the_timeout_and_the_rest_still_serve() {
    let (dir, fs, faulty) = faulty_core(3, "source: { path: /x, timeout: 1s }\ncache: { memory: 64MiB, refill: false }\n");
    faulty.inject(&dir.path().join("src/c0/s001.jpg"), Fault::Hang);
    let started = std::time::Instant::now();
    let err = fs.open(ino_of(&fs, "augmented", "s001.ppm"), false, Caller::ROOT).expect_err("hung");
    assert_eq!(err.to_errno(), libc::EIO, "{err}");
    assert!(started.elapsed() < Duration::from_secs(5), "waited {:?}", started.elapsed());
    for name in ["s000.ppm", "s002.ppm"] {
        assert!(!read_file(&fs, ino_of(&fs, "augmented", name)).is_empty());
    }
    faulty.release_hangs();
    fs.shutdown();
}

#[test]
fn a_source_stat_that_hangs_holds_only_the_open_that_asked_and_the_rest_still_serve() {
    let (dir, fs, faulty) = faulty_core(3, "source: { path: /x, timeout: 1s }\ncache: { memory: 64MiB, refill: false }\n");
    let fs = Arc::new(fs);
    let ino = ino_of(&fs, "augmented", "s001.ppm");
    faulty.inject(&dir.path().join("src/c0/s001.jpg"), Fault::HangStat);
    // An open's stat runs in place (`Source::metadata`): the hung one holds its own thread.
    let hung = {
        let fs = Arc::clone(&fs);
        std::thread::spawn(move || fs.open(ino, false, Caller::ROOT).map(|o| fs.release(ino, o.fh)).is_ok())
    };
    for name in ["s000.ppm", "s002.ppm"] {
        assert!(!read_file(&fs, ino_of(&fs, "augmented", name)).is_empty(), "{name} is served meanwhile");
    }
    assert!(!hung.is_finished(), "the hung stat still holds its open");
    faulty.release_hangs();
    assert!(hung.join().expect("joined"), "once the share answers, the open completes");
    fs.shutdown();
}

#[test]
fn a_listing_takes_names_and_inodes_from_the_catalog_and_asks_the_source_nothing_per_entry() {
    // The mount lists with plain READDIR (names, types, inode numbers): a listing must not stat
    // each file, or a scan of 10M entries stats 10M source files. With every file's stat
    // failing, the listings are whole; a lookup (which does stat) still sees the failure.
    let (dir, fs, faulty) = faulty_core(3, "cache: { memory: 64MiB, refill: false }\n");
    let expected: Vec<(String, u64)> = (0..3).map(|i| (format!("s{i:03}.ppm"), ino_of(&fs, "augmented", &format!("s{i:03}.ppm")))).collect();
    for i in 0..3 {
        faulty.inject(&dir.path().join(format!("src/c0/s{i:03}.jpg")), Fault::Error(std::io::ErrorKind::PermissionDenied));
    }
    for (view, ext) in [("encoded", "jpg"), ("augmented", "ppm")] {
        let root = fs.lookup(ROOT_INO, OsStr::new(view), Caller::ROOT).expect("view").ino;
        let class = fs.lookup(root, OsStr::new("c0"), Caller::ROOT).expect("class").ino;
        let mut listed = Vec::new();
        for _ in 0..2 {
            let fh = fs.opendir(class, Caller::ROOT).expect("opendir");
            let mut files = Vec::new();
            fs.readdir(fh, 0, |e, _| {
                if e.kind == Kind::File {
                    files.push((e.name.to_string_lossy().into_owned(), e.ino));
                }
                false
            })
            .expect("readdir");
            fs.releasedir(fh);
            listed.push(files);
        }
        let names: Vec<String> = listed[0].iter().map(|(n, _)| n.clone()).collect();
        assert_eq!(names, (0..3).map(|i| format!("s{i:03}.{ext}")).collect::<Vec<_>>(), "{view}: every file listed once");
        assert_eq!(listed[0], listed[1], "{view}: a second listing gives the same names and inodes");
        if view == "augmented" {
            assert_eq!(listed[0], expected, "the listing's inodes are the lookups' before the failures");
        }
        let err = fs.lookup(class, OsStr::new(&names[0]), Caller::ROOT).expect_err("the stat fails");
        assert_eq!(err.to_errno(), libc::EACCES, "{view}: a lookup stats the source file");
    }
    fs.shutdown();
}

#[test]
fn a_source_error_reaches_the_reader_as_its_errno_and_is_not_remembered() {
    let (dir, fs, faulty) = faulty_core(2, "cache: { memory: 64MiB, refill: false }\n");
    let path = dir.path().join("src/c0/s000.jpg");
    let ino = ino_of(&fs, "decoded", "s000.ppm");
    faulty.inject(&path, Fault::Error(std::io::ErrorKind::PermissionDenied));
    assert_eq!(fs.open(ino, false, Caller::ROOT).expect_err("denied").to_errno(), libc::EACCES);
    faulty.clear();
    assert!(!read_file(&fs, ino).is_empty(), "a transient failure is not a bad sample");
}

#[test]
fn a_changed_source_file_drops_its_cached_forms_and_its_inodes_are_made_stale() {
    let (dir, fs) = core(2, "cache: { memory: 64MiB, split: 40-40-20, refill: false }\n");
    let ino = ino_of(&fs, "decoded", "s000.ppm");
    let first = read_file(&fs, ino);
    assert!(fs.cache().status.held(0) != 0, "cached");
    assert!(fs.stale.drain(Duration::ZERO).is_empty());
    // Replace it (by rename) with a bigger image.
    let path = dir.path().join("src/c0/s000.jpg");
    let tmp = dir.path().join("src/c0/.new");
    std::fs::write(&tmp, prepfs_pixels::synthetic::photo_jpeg(640, 480, turbojpeg::Subsamp::Sub2x2)).expect("write");
    std::fs::rename(&tmp, &path).expect("rename");
    let attr = fs.getattr(ino).expect("getattr");
    assert_eq!(attr.size, 3 * 640 * 480 + "P6\n640 480\n255\n".len() as u64, "the new size, not the one probed before");
    let stale = fs.stale.drain(Duration::ZERO);
    assert!(stale.contains(&ino) && stale.contains(&ino_of(&fs, "encoded", "s000.jpg")), "{stale:?}");
    let opened = fs.open(ino, false, Caller::ROOT).expect("open");
    let second = fs.read(opened.fh, 0, u32::MAX, |r| r.expect("read").to_vec());
    fs.release(ino, opened.fh);
    assert_eq!(opened.cache, CachePolicy::Refresh, "the kernel's cached pages of it are dropped");
    assert_ne!(first, second);
    assert_eq!(second.len() as u64, attr.size);
    assert_eq!(fs.stats().source_changes.load(Ordering::Relaxed), 1);
    // Unchanged since: the page cache may be kept again.
    assert_eq!(fs.open(ino, false, Caller::ROOT).expect("open").cache, CachePolicy::KeepCache);
}

/// A dataset of `n` photo-like JPEGs in one class, and a core over it with `cache_yaml`.
pub(super) fn core(n: usize, cache_yaml: &str) -> (tempfile::TempDir, Filesystem) {
    let dir = tempfile::tempdir().expect("tempdir");
    let class = dir.path().join("src/c0");
    std::fs::create_dir_all(&class).expect("mkdir");
    for i in 0..n {
        let jpeg = prepfs_pixels::synthetic::photo_jpeg(320 + 8 * i, 240, turbojpeg::Subsamp::Sub2x2);
        std::fs::write(class.join(format!("s{i:03}.jpg")), jpeg).expect("write");
    }
    let overrides = Overrides {
        source: Some(dir.path().join("src")),
        mountpoint: Some(dir.path().join("mnt")),
        seed: Some(3),
    };
    let config = Config::parse(&format!("threads: 1\n{cache_yaml}"), &overrides).expect("config");
    let catalog = Catalog::scan(&config.source, |_| {}).expect("scan");
    (dir, Filesystem::new(config, catalog).expect("filesystem"))
}

pub(super) fn ino_of(fs: &Filesystem, view: &str, name: &str) -> u64 {
    let root = fs.lookup(ROOT_INO, OsStr::new(view), Caller::ROOT).expect("view").ino;
    let class = fs.lookup(root, OsStr::new("c0"), Caller::ROOT).expect("class").ino;
    fs.lookup(class, OsStr::new(name), Caller::ROOT).expect("file").ino
}

/// Opens, reads whole and releases one file through the core, as the kernel would.
pub(super) fn read_file(fs: &Filesystem, ino: u64) -> Vec<u8> {
    let opened = fs.open(ino, false, Caller::ROOT).expect("open");
    let data = fs.read(opened.fh, 0, u32::MAX, |r| r.expect("read").to_vec());
    fs.release(ino, opened.fh);
    data
}

fn epoch(fs: &Filesystem, n: usize) -> Vec<Vec<u8>> {
    (0..n).map(|i| read_file(fs, ino_of(fs, "augmented", &format!("s{i:03}.ppm")))).collect()
}

pub(super) fn source_bytes(fs: &Filesystem) -> u64 {
    fs.stats().source_bytes_read.load(Ordering::Relaxed)
}

#[test]
fn a_second_epoch_over_a_set_that_fits_reads_nothing_from_the_source() {
    for split in ["0-100-0", "100-0-0", "0-50-50"] {
        let (_dir, fs) = core(6, &format!("cache: {{ memory: 256MiB, split: {split}, refill: false }}\n"));
        epoch(&fs, 6);
        let after_first = source_bytes(&fs);
        assert!(after_first > 0);
        epoch(&fs, 6);
        assert_eq!(source_bytes(&fs), after_first, "split {split}: epoch 2 read the source");
    }
}

#[test]
fn without_a_cache_every_open_reads_the_source() {
    let (_dir, fs) = core(3, "cache: { memory: 0 }\n");
    epoch(&fs, 3);
    let first = source_bytes(&fs);
    epoch(&fs, 3);
    assert_eq!(source_bytes(&fs), 2 * first);
}

#[test]
fn the_refill_waits_for_a_first_reader_unless_the_mount_is_warmed() {
    let (_dir, fs) = core(3, "cache: { memory: 256MiB, split: 0-50-50 }\n");
    let mut cursor = 0;
    // An idle mount: nothing to refill for, however often its workers look.
    for _ in 0..3 {
        assert!(!fs.refill_lane(&mut cursor, (0, 1)), "the refill ran before any reader");
    }
    assert_eq!(fs.stats().refills.load(Ordering::Relaxed), 0);
    assert_eq!(source_bytes(&fs), 0, "nothing was read from the source");
    // A listing is no read; an open of a sample is.
    let ino = ino_of(&fs, "augmented", "s000.ppm");
    assert!(!fs.refill_lane(&mut cursor, (0, 1)));
    read_file(&fs, ino);
    let mut worked = false;
    while fs.refill_lane(&mut cursor, (0, 1)) {
        worked = true;
    }
    assert!(worked && fs.stats().refills.load(Ordering::Relaxed) > 0, "the refill started once a reader came");
    // `warm`: from the mount on; `false`: never.
    let (_dir, warm) = core(3, "cache: { memory: 256MiB, split: 0-50-50, refill: warm }\n");
    assert!(warm.refill_lane(&mut cursor, (0, 1)), "a warmed mount refills before any reader");
    let (_dir, off) = core(3, "cache: { memory: 256MiB, split: 0-50-50, refill: false }\n");
    read_file(&off, ino_of(&off, "augmented", "s000.ppm"));
    assert!(!off.refill_lane(&mut cursor, (0, 1)));
}

#[test]
fn augmented_outputs_are_used_once_then_refilled_with_fresh_crops() {
    let (_dir, fs) = core(5, "cache: { memory: 256MiB, split: 0-50-50, refill: false }\n");
    let mut seen = HashSet::new();
    for out in epoch(&fs, 5) {
        assert!(seen.insert(out), "a crop was served twice");
    }
    // Epoch 1 kept one spare augmentation per sample; epoch 2 uses each once.
    assert_eq!(fs.cache().augmented.entries(), 5);
    for out in epoch(&fs, 5) {
        assert!(seen.insert(out), "a crop was served twice");
    }
    assert_eq!(fs.cache().augmented.entries(), 0, "used outputs are dropped");
    // The refill makes fresh ones from the decoded cache, without the source.
    let before = source_bytes(&fs);
    let mut cursor = 0;
    while fs.refill_once(&mut cursor) {}
    assert_eq!(fs.cache().augmented.entries(), 5);
    assert_eq!(source_bytes(&fs), before);
    for out in epoch(&fs, 5) {
        assert!(seen.insert(out), "a refilled crop repeated an earlier one");
    }
    assert_eq!(fs.stats().refills.load(Ordering::Relaxed), 5);
}

#[test]
fn a_refill_in_a_room_larger_than_the_set_leaves_readers_the_cores_until_half_the_sets_outputs_are_taken() {
    // 128 MiB of augmented room for 8 outputs of 150 KB: the stock is measured against the set.
    let (_dir, fs) = core(8, "cache: { memory: 256MiB, split: 0-50-50 }\n");
    let mut cursor = 0;
    while fs.refill_once(&mut cursor) {}
    assert_eq!(fs.cache().augmented.entries(), 8);
    // The refill's clock is passed in: every look at `t0` but the one after the readers pause.
    let t0 = Duration::from_secs(1);
    fs.refill_scope_at(t0); // sees the stock full
    let take = |names: std::ops::Range<usize>| {
        for i in names {
            read_file(&fs, ino_of(&fs, "augmented", &format!("s{i:03}.ppm")));
        }
    };
    take(0..2);
    assert_eq!(fs.refill_scope_at(t0), None, "6 of 8 left while readers take: the refill waits");
    take(2..5);
    assert_eq!(fs.refill_scope_at(t0), Some(RefillScope::ThisPass), "3 of 8 left: below half, it works alongside the readers");
    // But the 3 samples still to come in this pass have their outputs: the next pass's would
    // only take the readers' cores.
    assert!(!fs.refill_lane_once(&mut cursor, (0, 1), RefillScope::ThisPass));
    assert_eq!(fs.cache().augmented.entries(), 3);
    // Readers pause (30 ms without a hit): it makes the next pass's outputs.
    let paused = t0 + Duration::from_millis(30);
    assert_eq!(fs.refill_scope_at(paused), Some(RefillScope::Any), "readers paused: it tops the stock up");
    while fs.refill_lane_once(&mut cursor, (0, 1), RefillScope::Any) {}
    assert_eq!(fs.cache().augmented.entries(), 8);
    fs.refill_scope_at(paused);
    take(5..6);
    assert_eq!(fs.refill_scope_at(paused), None);
}

#[test]
fn below_half_the_stock_the_refill_makes_outputs_of_the_samples_readers_have_yet_to_read_in_their_pass() {
    let (_dir, fs) = core(8, "cache: { memory: 256MiB, split: 0-50-50 }\n");
    let mut cursor = 0;
    while fs.refill_once(&mut cursor) {}
    let t0 = Duration::from_secs(1); // the refill's clock, passed in: the readers never pause
    fs.refill_scope_at(t0); // sees the stock full
    let take = |names: std::ops::Range<usize>| {
        for i in names {
            read_file(&fs, ino_of(&fs, "augmented", &format!("s{i:03}.ppm")));
        }
    };
    // A pass ends (8 of 8 read): in the next, all 8 are to come, and 0 have an output.
    take(0..8);
    assert_eq!(fs.cache().augmented.entries(), 0);
    take(0..1);
    assert_eq!(fs.refill_scope_at(t0), Some(RefillScope::ThisPass));
    while fs.refill_lane_once(&mut cursor, (0, 1), RefillScope::ThisPass) {}
    // The 7 still to come have one; the one already read in this pass waits for a pause.
    let held = |f: u32| fs.cache().status.held(f) & prepfs_cache::HELD_AUGMENTED != 0;
    assert_eq!(fs.cache().augmented.entries(), 7);
    assert!(!held(0) && (1..8).all(held));
}

/// A core whose plan gives decoded no share (a reader's miss takes the fast path and keeps
/// bytes), with room in decoded all the same: the memory augmented cannot use flows there.
fn core_where_misses_keep_bytes(n: usize) -> (tempfile::TempDir, Filesystem) {
    let (dir, fs) = core(n, "cache: { memory: 64MiB, split: 0-0-100, refill: false }\n");
    let split = prepfs_planner::Split::new(0, 0, 100).expect("split");
    fs.cache().set_split_budgets(split, [8 << 20, 24 << 20, 32 << 20]);
    (dir, fs)
}

/// A count of `stats.json`'s `work` section.
pub(super) fn work_count(fs: &Filesystem, key: &str) -> u64 {
    let doc: serde_json::Value = serde_json::from_str(&fs.stats_json()).expect("stats.json parses");
    doc["work"][key].as_u64().expect(key)
}

#[test]
fn the_refill_keeps_as_pixels_the_samples_readers_left_as_bytes_while_decoded_has_room() {
    // The plan gives decoded no share, so a reader's miss takes the fast path and keeps bytes;
    // the memory augmented cannot use flowed to decoded, the background's to fill.
    let (_dir, fs) = core_where_misses_keep_bytes(4);
    let mut seen = HashSet::new();
    for out in epoch(&fs, 4) {
        assert!(seen.insert(out), "a crop was served twice");
    }
    let cache = fs.cache();
    assert_eq!((cache.encoded.entries(), cache.decoded.entries(), cache.augmented.entries()), (4, 0, 0), "readers' misses kept bytes");
    let work = |key: &str| work_count(&fs, key);
    let decodes = work("full_decodes");
    // The refill decodes each in full once, keeps the pixels in place of the bytes, and makes
    // its output from them; no byte is read from the source again.
    let before = source_bytes(&fs);
    let mut cursor = 0;
    while fs.refill_once(&mut cursor) {}
    assert_eq!((cache.encoded.entries(), cache.decoded.entries(), cache.augmented.entries()), (0, 4, 4));
    assert_eq!(work("full_decodes"), decodes + 4);
    assert_eq!(source_bytes(&fs), before);
    // From then on an output is a resample of the pixels: no decode, no source read.
    for out in epoch(&fs, 4) {
        assert!(seen.insert(out), "a refilled crop repeated an earlier one");
    }
    let augments = work("pixel_augments");
    while fs.refill_once(&mut cursor) {}
    assert_eq!(cache.augmented.entries(), 4);
    assert_eq!((work("full_decodes"), work("pixel_augments")), (decodes + 4, augments + 4));
    assert_eq!(source_bytes(&fs), before);
}

#[test]
fn the_sets_decoded_size_counts_each_sample_once_at_its_first_augmentation_whatever_decoded_has_room_for() {
    let (_dir, fs) = core_where_misses_keep_bytes(4);
    // Room in decoded for the smallest sample's pixels alone (320x240; the others are wider).
    let split = prepfs_planner::Split::new(0, 0, 100).expect("split");
    let smallest = 320 * 240 * 3;
    fs.cache().set_split_budgets(split, [8 << 20, smallest + prepfs_cache::ENTRY_OVERHEAD + 64, 32 << 20]);
    let work = |key: &str| work_count(&fs, key);
    let set: u64 = (0..4).map(|i| (320 + 8 * i) * 240 * 3).sum();
    for _ in 0..3 {
        epoch(&fs, 4);
        assert_eq!((work("sized_samples"), work("sized_pixel_bytes")), (4, set));
    }
    // The full decodes were of what decoded took: not the set's mean.
    assert!(work("full_decodes") >= 1);
    assert_eq!(fs.cache().decoded.entries(), 1);
}

#[test]
fn a_reader_that_meets_a_sample_held_as_bytes_again_keeps_its_pixels_so_it_is_decoded_in_full_once() {
    // As above, readers' first misses keep bytes; here no refill comes by before the next epoch.
    let (_dir, fs) = core_where_misses_keep_bytes(4);
    let mut seen = HashSet::new();
    let mut epoch_once = |fs: &Filesystem| {
        for out in epoch(fs, 4) {
            assert!(seen.insert(out), "a crop was served twice");
        }
    };
    epoch_once(&fs);
    let cache = fs.cache();
    assert_eq!((cache.encoded.entries(), cache.decoded.entries()), (4, 0), "first misses kept bytes");
    let work = |key: &str| work_count(&fs, key);
    let (regions, before) = (work("decode_augments"), source_bytes(&fs));
    // The second epoch's misses decode in full, keep the pixels in place of the bytes and
    // resample them: no region decode again, no source read.
    epoch_once(&fs);
    assert_eq!((cache.encoded.entries(), cache.decoded.entries()), (0, 4));
    assert_eq!((work("full_decodes"), work("decode_augments"), work("pixel_augments")), (4, regions, 4));
    // From then on every output is a resample.
    epoch_once(&fs);
    assert_eq!((work("full_decodes"), work("decode_augments"), work("pixel_augments")), (4, regions, 8));
    assert_eq!(source_bytes(&fs), before);
}

#[test]
fn the_refill_works_ahead_of_top_level_readers_from_the_source_and_stops() {
    // Augmented only: the refill must read the source itself.
    let (_dir, fs) = core(6, "cache: { memory: 64MiB, split: 0-0-100, refill: false }\n");
    // Readers have read three samples in this pass: the refill prepares the other three.
    for i in 0..3 {
        read_file(&fs, ino_of(&fs, "augmented", &format!("s{i:03}.ppm")));
    }
    let held = |f: u32| fs.cache().status.held(f) & prepfs_cache::HELD_AUGMENTED != 0;
    let mut cursor = 0;
    for _ in 0..3 {
        assert!(fs.refill_once(&mut cursor));
    }
    assert_eq!(fs.cache().augmented.entries(), 3);
    assert_eq!(fs.stats().refills.load(Ordering::Relaxed), 3, "refills count what was admitted");
    assert!((3..6).all(held), "the samples still to come in the pass are made first");
    // Then, with room left, those already read, for the next pass; then it stops.
    let mut rounds = 0;
    while fs.refill_once(&mut cursor) {
        rounds += 1;
        assert!(rounds < 100, "the refill does not stop");
    }
    assert_eq!(fs.cache().augmented.entries(), 6);
    assert!((0..6).all(held));
    // Reading the rest of the pass hits them, and so does the next pass's start.
    let before = source_bytes(&fs);
    for i in (3..6).chain(0..3) {
        read_file(&fs, ino_of(&fs, "augmented", &format!("s{i:03}.ppm")));
    }
    assert_eq!(source_bytes(&fs), before, "the prepared samples were hits");
    assert_eq!(fs.cache().augmented.entries(), 0);
    while fs.refill_once(&mut cursor) {}
    assert_eq!(fs.cache().augmented.entries(), 6, "every sample prepared again");
}

#[test]
fn misses_fill_augmented_then_decoded_then_encoded() {
    // Room for one augmented output (150 KB) and one decoded sample (about 230-300 KB).
    let memory = 1_000_000u64;
    let (_dir, fs) = core(4, &format!("cache: {{ memory: {memory}, split: 50-32-18, refill: false }}\n"));
    epoch(&fs, 4);
    let cache = fs.cache();
    assert_eq!(cache.augmented.entries(), 1, "augmented fills first");
    assert!(cache.decoded.entries() >= 1, "then decoded");
    assert!(cache.encoded.entries() >= 1, "then encoded");
    assert!(cache.used() <= memory);
}

#[test]
fn memory_stays_within_the_budget_far_past_it() {
    let memory = 600_000u64;
    for policy in ["keep", "lru"] {
        let (_dir, fs) = core(12, &format!("cache: {{ memory: {memory}, split: 30-40-30, policy: {policy} }}\n"));
        for _ in 0..3 {
            epoch(&fs, 12);
            let mut cursor = 0;
            while fs.refill_once(&mut cursor) {}
            let c = fs.cache();
            assert!(c.encoded.used() <= c.encoded.budget());
            assert!(c.decoded.used() <= c.decoded.budget());
            assert!(c.augmented.used() <= c.augmented.budget());
            assert!(c.used() <= memory, "{policy}: {} > {memory}", c.used());
        }
    }
}

#[test]
fn concurrent_opens_of_one_missing_sample_read_it_once() {
    let (_dir, fs) = core(1, "cache: { memory: 256MiB, split: 0-100-0, refill: false }\n");
    let fs = Arc::new(fs);
    let ino = ino_of(&fs, "decoded", "s000.ppm");
    let barrier = Arc::new(std::sync::Barrier::new(8));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let (fs, barrier) = (Arc::clone(&fs), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                read_file(&fs, ino)
            })
        })
        .collect();
    let outputs: Vec<_> = threads.into_iter().map(|t| t.join().expect("thread")).collect();
    assert!(outputs.windows(2).all(|w| w[0] == w[1]));
    let size = std::fs::metadata(fs.catalog().file_path(0)).expect("stat").len();
    assert_eq!(source_bytes(&fs), size, "the source was read more than once");
    assert_eq!(fs.stats().decodes(), 1, "decoded more than once");
}

#[test]
fn the_plan_is_redone_from_rates_measured_while_serving() {
    let (_dir, fs) = core(6, "cache: { memory: 256MiB, split: auto, refill: false }\n");
    fs.plan_cache();
    let planned: serde_json::Value = serde_json::from_str(&fs.stats_json()).expect("json");
    assert_eq!(planned["plan"]["from"], "mount-time calibration", "{}", planned["plan"]);
    assert!(!fs.replan(), "nothing new measured yet");
    let mut epochs = 0;
    while !fs.replan() {
        epoch(&fs, 6);
        epochs += 1;
        assert!(epochs < 40, "no re-plan after {epochs} epochs");
    }
    let replanned: serde_json::Value = serde_json::from_str(&fs.stats_json()).expect("json");
    let plan = &replanned["plan"];
    assert_eq!(plan["from"], "rates measured while serving", "{plan}");
    assert!(plan["inputs"]["t_a"].as_f64().unwrap_or(0.0) > 0.0, "{plan}");
    assert!(plan["samples_timed"].as_u64().unwrap_or(0) >= 64, "{plan}");
    let split: Vec<u64> = plan["split"].as_array().expect("split").iter().filter_map(|v| v.as_u64()).collect();
    assert_eq!(split.iter().sum::<u64>(), 100);
    assert_eq!(replanned["cache"]["split"], plan["split"], "the plan's split is the one in force");
}

#[test]
fn source_reads_keep_to_the_read_limit() {
    // The path is overridden (as --source does); the limit stays.
    let (_dir, fs) = core(6, "source: { path: /overridden, read_limit: 1MB/s }\n");
    let started = std::time::Instant::now();
    epoch(&fs, 6);
    let read = source_bytes(&fs);
    let took = started.elapsed().as_secs_f64();
    // The 20 ms burst allowance, and the first header probe's 16 KiB, may run ahead.
    let floor = read as f64 / 1e6 - 0.04;
    assert!(took >= floor, "{read} bytes at 1 MB/s took {took:.3} s (< {floor:.3} s)");
    let stats: serde_json::Value = serde_json::from_str(&fs.stats_json()).expect("json");
    assert_eq!(stats["cache"]["read_limit_bytes_per_s"], 1_000_000);
}

#[test]
fn stats_show_each_form() {
    let (_dir, fs) = core(2, "cache: { memory: 64MiB, split: 10-40-50 }\n");
    epoch(&fs, 2);
    let stats: serde_json::Value = serde_json::from_str(&fs.stats_json()).expect("json");
    for form in ["encoded", "decoded", "augmented"] {
        for key in ["bytes_used", "budget", "entries", "hits", "misses"] {
            assert!(stats["cache"][form][key].is_u64(), "{form}.{key}: {stats}");
        }
    }
    assert_eq!(stats["cache"]["split"], serde_json::json!([10, 40, 50]));
}

#[test]
fn with_passthrough_on_outputs_move_into_an_output_file_and_read_back_the_same() {
    let (_dir, plain) = core(2, "cache: { memory: 64MiB, refill: false }\n");
    let (_dir2, fs) = core(2, "cache: { memory: 64MiB, refill: false }\n");
    fs.enable_passthrough();
    for (view, name) in [("decoded", "s000.ppm"), ("encoded", "s001.jpg")] {
        let ino = ino_of(&fs, view, name);
        let opened = fs.open(ino, false, Caller::ROOT).expect("open");
        let backing = opened.backing.as_ref().expect("a backing file is offered");
        let file = backing.file().expect("file");
        let mut from_file = vec![0; file.metadata().expect("stat").len() as usize];
        std::os::unix::fs::FileExt::read_exact_at(file, &mut from_file, 0).expect("read");
        // The daemon's own read (what a refused backing file falls back to) agrees.
        let via_read = fs.read(opened.fh, 0, u32::MAX, |r| r.expect("read").to_vec());
        let reference = read_file(&plain, ino_of(&plain, view, name));
        assert!(via_read == reference, "{view}: the daemon's read of the memory file differs");
        if view == "decoded" {
            assert!(from_file == reference, "the memory file holds the output");
        }
        fs.release(ino, opened.fh);
    }
}

#[test]
fn an_open_after_the_last_release_gets_content_of_its_own_though_the_old_handle_is_still_referenced() {
    let (_dir, fs) = core(2, "seed: 5\ncache: { memory: 64MiB, split: 0-0-100, refill: false }\n");
    fs.enable_passthrough();
    let ino = ino_of(&fs, "augmented", "s000.ppm");
    let backing_ino = |o: &crate::fs::Opened| o.backing.as_ref().and_then(|b| b.file()).expect("backing file").metadata().expect("stat").ino();
    let first = fs.open(ino, false, Caller::ROOT).expect("first open");
    // A second open while the first is open shares its content (one backing file per inode).
    let second = fs.open(ino, false, Caller::ROOT).expect("second open");
    assert_eq!(backing_ino(&first), backing_ino(&second));
    let old = backing_ino(&first);
    fs.release(ino, second.fh);
    fs.release(ino, first.fh);
    // Both released, but the old content is still referenced a moment (the adapter's reply
    // being sent, its backing id): a new open must not share it.
    let still_held = (first.backing, second.backing);
    let third = fs.open(ino, false, Caller::ROOT).expect("third open");
    assert_ne!(backing_ino(&third), old, "an open after the last release shared the released content");
    fs.release(ino, third.fh);
    drop(still_held);
}

#[test]
fn with_passthrough_on_the_refill_makes_outputs_into_memory_files_that_opens_hand_over_as_they_are() {
    let (_dir, plain) = core(3, "seed: 4\ncache: { memory: 64MiB, split: 0-0-100, refill: false }\n");
    let (_dir2, fs) = core(3, "seed: 4\ncache: { memory: 64MiB, split: 0-0-100, refill: false }\n");
    fs.enable_passthrough();
    let mut cursor = 0;
    while fs.refill_once(&mut cursor) {}
    let mut cursor = 0;
    while plain.refill_once(&mut cursor) {}
    assert_eq!(fs.cache().augmented.entries(), 3);
    for i in 0..3 {
        let name = format!("s{i:03}.ppm");
        let ino = ino_of(&fs, "augmented", &name);
        let Some(Node::File(_, file)) = Node::from_ino(ino) else { panic!("{name}: not a file") };
        let cached = fs.cache().augmented.peek(file, |e| e.bytes.clone()).expect("cached");
        let prepfs_pixels::served::ServedBytes::File(sealed) = cached else { panic!("{name}: the cached output is not in an output file") };
        let opened = fs.open(ino, false, Caller::ROOT).expect("open");
        let file = opened.backing.as_ref().and_then(|b| b.file()).expect("a backing file");
        // The very file the cache held, not a copy made at open.
        assert_eq!(file.metadata().expect("stat").ino(), sealed.file().metadata().expect("stat").ino(), "{name}");
        let mut from_file = vec![0; sealed.len() as usize];
        std::os::unix::fs::FileExt::read_exact_at(file, &mut from_file, 0).expect("read");
        // Same seed, same draw: the bytes a mount without passthrough serves.
        assert!(from_file == read_file(&plain, ino_of(&plain, "augmented", &name)), "{name}: the memory file differs");
        let fh = opened.fh;
        drop(opened);
        fs.release(ino, fh);
    }
    assert_eq!(fs.cache().augmented.entries(), 0, "each output was used once");
}

#[test]
fn with_passthrough_on_overlapping_opens_of_one_file_share_one_backing_until_the_last_release() {
    let (_dir, fs) = core(2, "cache: { memory: 64MiB, refill: false }\n");
    fs.enable_passthrough();
    let ino = ino_of(&fs, "augmented", "s000.ppm");
    let first = fs.open(ino, false, Caller::ROOT).expect("open");
    let second = fs.open(ino, false, Caller::ROOT).expect("open");
    let key = |o: &Opened| o.backing.as_ref().expect("backing").key();
    assert_eq!(key(&first), key(&second), "one backing file per inode while it is open");
    let first_fh = first.fh;
    drop(first);
    fs.release(ino, first_fh);
    let third = fs.open(ino, false, Caller::ROOT).expect("open");
    assert_eq!(key(&third), key(&second), "still open: still shared");
    // (The adapter drops its hold on the backing before the core's release, as here.)
    let (second_fh, third_fh) = (second.fh, third.fh);
    drop((second, third));
    fs.release(ino, second_fh);
    fs.release(ino, third_fh);
    assert_eq!(fs.handles.share_count(), 0, "the last release forgets the share");
    // Off: no backing file is offered, and augmented/ opens are not shared.
    fs.disable_passthrough("test".into());
    let a = fs.open(ino, false, Caller::ROOT).expect("open");
    assert!(a.backing.is_none());
}

#[test]
fn a_sample_over_max_pixels_lists_with_size_zero_in_decoded_and_is_refused() {
    // 320x240 = 76,800 pixels, over the 50,000 allowed: its header alone must not advertise
    // the 230 KB it would decode to (a 1.2 GB claim would make `du` lie).
    let (_dir, fs) = core(1, "max_pixels: 50000\ncache: { memory: 64MiB, refill: false }\n");
    let ino = ino_of(&fs, "decoded", "s000.ppm");
    assert_eq!(fs.getattr(ino).expect("getattr").size, 0);
    assert_eq!(fs.open(ino, false, Caller::ROOT).expect_err("refused").to_errno(), libc::EIO);
}

/// The names of a directory's listing, as `ls` would show them (no `.` and `..`).
fn listing(fs: &Filesystem, ino: u64, caller: Caller) -> Result<Vec<String>, crate::error::Error> {
    let fh = fs.opendir(ino, caller)?;
    let mut names = Vec::new();
    fs.readdir(fh, 0, |e, _| {
        names.push(e.name.to_string_lossy().into_owned());
        false
    })?;
    fs.releasedir(fh);
    Ok(names.into_iter().filter(|n| n != "." && n != "..").collect())
}

#[test]
fn a_lookup_under_jobs_makes_no_job_and_the_first_open_inside_does() {
    let (_dir, fs) = core(3, "cache: { memory: 64MiB, refill: false }\njobs: { max: 1 }\n");
    let jobs = fs.lookup(ROOT_INO, OsStr::new("jobs"), Caller::ROOT).expect("jobs").ino;
    // `ls jobs/typo`: a lookup and a listing of an empty directory, nothing made.
    let typo = fs.lookup(jobs, OsStr::new("typo"), Caller::ROOT).expect("a pending name answers");
    assert_eq!(typo.kind, Kind::Dir);
    assert_eq!(listing(&fs, typo.ino, Caller::ROOT).expect("list"), Vec::<String>::new());
    // A path into it resolves, still making nothing.
    let view = fs.lookup(typo.ino, OsStr::new("augmented"), Caller::ROOT).expect("view").ino;
    let class = fs.lookup(view, OsStr::new("c0"), Caller::ROOT).expect("class").ino;
    let file = fs.lookup(class, OsStr::new("s000.ppm"), Caller::ROOT).expect("file").ino;
    fs.getattr(file).expect("getattr");
    assert!(fs.jobs().active().is_empty(), "a lookup made a job");
    assert_eq!(listing(&fs, jobs, Caller::ROOT).expect("list jobs"), Vec::<String>::new());
    assert_eq!(fs.lookup(jobs, OsStr::new(".x"), Caller::ROOT).expect_err("bad name").to_errno(), libc::EINVAL);
    // The first open inside makes it (the only slot: jobs.max is 1).
    assert!(!read_file(&fs, file).is_empty());
    assert_eq!(fs.jobs().by_name("typo").expect("made").owner(), 0);
    assert_eq!(listing(&fs, jobs, Caller::ROOT).expect("list jobs"), ["typo"]);
    assert_eq!(listing(&fs, typo.ino, Caller::ROOT).expect("list"), ["encoded", "decoded", "augmented"]);
    // Another name: found, but its first use is refused (jobs.max) with the job error's errno.
    let other = fs.lookup(jobs, OsStr::new("other"), Caller::ROOT).expect("pending").ino;
    let other_view = fs.lookup(other, OsStr::new("augmented"), Caller::ROOT).expect("view").ino;
    assert_eq!(fs.opendir(other_view, Caller::ROOT).expect_err("jobs.max").to_errno(), libc::EUSERS);
    // Another user reaching root's job through a pending name it looked up earlier is refused.
    let nobody = Caller { uid: 65534, gid: 65534 };
    assert_eq!(fs.opendir(view, nobody).expect_err("root's job").to_errno(), libc::EACCES);
}

/// The inode of `jobs/<job>/<view>/c0/<name>`.
pub(super) fn job_view_file_ino(fs: &Filesystem, job: &str, view: &str, name: &str) -> u64 {
    let mut ino = ROOT_INO;
    for part in ["jobs", job, view, "c0", name] {
        ino = fs.lookup(ino, OsStr::new(part), Caller::ROOT).expect(part).ino;
    }
    ino
}

#[test]
fn the_forms_every_view_shares_are_needed_until_each_view_a_job_reads_was_served_the_sample() {
    let (_dir, fs) = core(2, "cache: { memory: 64MiB, refill: false }\nrecipes: { val: { augment: [ {center_crop: {size: 8}} ] } }\n");
    read_file(&fs, job_file_ino(&fs, "a", "s000.ppm"));
    let a = fs.jobs().by_name("a").expect("a");
    let (own, val) = (View::of(Form::Augmented, a.code()), View::recipe(1, a.code()));
    let seen = (0..2).find(|&f| a.has_seen(f)).expect("a was served a sample");
    assert!(!fs.needed_elsewhere(&a, own, seen), "a reads no recipe yet, and no other job is there");
    // Job a reads val: its state there has seen one sample, the other it still needs.
    let bytes = read_file(&fs, job_view_file_ino(&fs, "a", "val", "s000.ppm"));
    assert_eq!(bytes.len(), "P6\n8 8\n255\n".len() + 8 * 8 * 3);
    let state = a.recipe_state(1).expect("a's state in val");
    assert_eq!(state.served_this_epoch(), 1);
    let unseen_in_val = (0..2).find(|&f| !state.has_seen(f)).expect("one sample left in val");
    assert!(fs.needed_elsewhere(&a, own, unseen_in_val), "val still needs it");
    let seen_in_both = (0..2).find(|&f| state.has_seen(f) && a.has_seen(f));
    if let Some(f) = seen_in_both {
        assert!(!fs.needed_elsewhere(&a, val, f) && !fs.needed_elsewhere(&a, own, f));
    }
    assert_eq!(a.served_this_epoch(), 1, "val's read is not the job's own epoch's");
}

#[test]
fn a_listing_paged_one_entry_at_a_time_gives_what_one_read_gives_and_only_top_level_ones_are_kept_by_the_kernel() {
    let (dir, fs) = core(6, "cache: { memory: 64MiB, refill: false }\n");
    std::fs::write(dir.path().join("src/c0/notes.txt"), b"x").expect("write"); // after the scan: not listed
    let jobs = fs.lookup(ROOT_INO, OsStr::new("jobs"), Caller::ROOT).expect("jobs").ino;
    fs.mkdir(jobs, OsStr::new("j"), Caller::ROOT).expect("mkdir");
    let job = fs.lookup(jobs, OsStr::new("j"), Caller::ROOT).expect("job").ino;
    for (parent, view, ext, fixed) in [(ROOT_INO, "encoded", "jpg", true), (ROOT_INO, "augmented", "ppm", true), (job, "augmented", "ppm", false)] {
        let root = fs.lookup(parent, OsStr::new(view), Caller::ROOT).expect("view").ino;
        let class = fs.lookup(root, OsStr::new("c0"), Caller::ROOT).expect("class").ino;
        let fh = fs.opendir(class, Caller::ROOT).expect("opendir");
        assert_eq!(fs.listing_is_fixed(fh), fixed, "{view}: kept by the kernel only at the top level");
        let mut whole = Vec::new();
        fs.readdir(fh, 0, |e, next| {
            whole.push((e.name.to_owned(), e.ino, e.kind, next));
            false
        })
        .expect("readdir");
        // A reply that holds one entry: each READDIR resumes at the offset the last one gave.
        let mut paged = Vec::new();
        let mut offset = 0;
        loop {
            let mut got = None;
            fs.readdir(fh, offset, |e, next| {
                if got.is_some() {
                    return true; // full
                }
                got = Some((e.name.to_owned(), e.ino, e.kind, next));
                false
            })
            .expect("readdir");
            let Some(entry) = got else { break };
            offset = entry.3;
            paged.push(entry);
        }
        fs.releasedir(fh);
        assert_eq!(paged, whole, "{view}: paged as read at once");
        let files: Vec<_> = whole.iter().filter(|e| e.2 == Kind::File).collect();
        assert_eq!(files.len(), 6, "{view}: every sample once");
        for (name, ino, _, _) in files {
            assert!(name.to_string_lossy().ends_with(ext), "{view}: {name:?}");
            assert_eq!(fs.lookup(class, name, Caller::ROOT).expect("lookup").ino, *ino, "{view}: {name:?}'s inode is the lookup's");
        }
    }
    assert!(!fs.listing_is_fixed(u64::MAX), "no such handle");
}

#[test]
fn an_output_larger_than_the_bound_on_pixel_work_is_refused_with_enomem_and_the_sample_stays_good() {
    // max_open_bytes at its least, 1 MiB: a 1024x1024 output (3 MiB as PPM) cannot be made
    // within it, however many other outputs are in flight (none here).
    let (_dir, fs) = core(1, "max_open_bytes: 1MiB\naugment: [ {random_resized_crop: {size: 1024}} ]\ncache: { memory: 0, refill: false }\n");
    let ino = ino_of(&fs, "augmented", "s000.ppm");
    for _ in 0..2 {
        let err = fs.open(ino, false, Caller::ROOT).expect_err("refused");
        assert_eq!(err.to_errno(), libc::ENOMEM, "{err}");
        assert!(err.to_string().contains("3.0 MiB") && err.to_string().contains("1.0 MiB"), "both figures: {err}");
    }
    // Not the sample's fault: it is not marked bad, and its decoded file (225 KiB) serves.
    assert_eq!(fs.stats().decode_errors.load(Ordering::Relaxed), 0);
    assert!(!read_file(&fs, ino_of(&fs, "decoded", "s000.ppm")).is_empty());
    assert_eq!(fs.producer.pixels_in_flight().0, 0, "every reservation given back");
}
