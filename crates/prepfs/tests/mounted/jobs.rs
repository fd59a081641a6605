//! Mounted end-to-end tests of concurrent jobs under `jobs/` (opportunistic sampling): real
//! parallel readers through the kernel, each job reading like `ImageFolder` + a shuffling
//! `DataLoader` with two workers. Samples are identified by their content (id-coded images), so
//! the tests check what was served, not what was asked for.

use crate::common;

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeSet, HashSet};
use std::ffi::CString;
use std::fs;
use std::hash::{Hash, Hasher};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{id_levels, id_of_pixels, make_id_dataset, parse_ppm, python, write_config, Mounted};
use rand::seq::SliceRandom;
use rand::SeedableRng;

const LIMIT: Duration = Duration::from_secs(240);
const CLASSES: usize = 3;
const PER_CLASS: usize = 16;
const SAMPLES: usize = CLASSES * PER_CLASS;
/// One augmented PPM and its cache charge: 25% of the set is 12 of them.
const QUARTER_OF_THE_SET: usize = SAMPLES / 4 * (15 + 224 * 224 * 3 + 96) + 4096;

/// What a job was served in one epoch: (directory's class, sample id, hash of the bytes).
type Served = Vec<(usize, usize, u64)>;

/// The files of a view as `ImageFolder` lists them: sorted classes, sorted files.
fn image_folder(root: &Path) -> Vec<(usize, PathBuf)> {
    let mut out = Vec::new();
    for c in 0..CLASSES {
        let mut files: Vec<PathBuf> =
            fs::read_dir(root.join(format!("c{c}"))).expect("list").map(|e| e.expect("entry").path()).collect();
        files.sort();
        out.extend(files.into_iter().map(|f| (c, f)));
    }
    out
}

fn hash(bytes: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

/// One job's epochs: each epoch opens every file once in a fresh random order, split between two
/// reader threads (a DataLoader's workers). Every sample is identified by its content.
fn run_job(view: PathBuf, epochs: usize, seed: u64) -> Vec<Served> {
    let files = image_folder(&view);
    assert_eq!(files.len(), SAMPLES, "{}", view.display());
    (0..epochs)
        .map(|e| {
            let mut order = files.clone();
            order.shuffle(&mut rand_pcg::Pcg64Mcg::seed_from_u64(seed * 100 + e as u64));
            let halves: Vec<Vec<(usize, PathBuf)>> = order.chunks(SAMPLES / 2).map(<[_]>::to_vec).collect();
            let workers: Vec<_> = halves
                .into_iter()
                .map(|part| {
                    std::thread::spawn(move || {
                        part.iter()
                            .map(|(class, path)| {
                                let bytes = fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                                let (w, h, pixels) = parse_ppm(&bytes);
                                assert_eq!((w, h), (224, 224));
                                let (id, distance) = id_of_pixels(pixels);
                                assert!(distance < 12.0, "{}: no sample's colour ({distance})", path.display());
                                (*class, id, hash(&bytes))
                            })
                            .collect::<Served>()
                    })
                })
                .collect();
            workers.into_iter().flat_map(|w| w.join().expect("reader")).collect()
        })
        .collect()
}

/// Runs `jobs` concurrent jobs for `epochs` each; returns what each was served, per epoch.
fn run_jobs(mnt: &Mounted, jobs: usize, epochs: usize) -> Vec<Vec<Served>> {
    let threads: Vec<_> = (0..jobs)
        .map(|j| {
            let view = mnt.path(&format!("jobs/job{j}/augmented"));
            std::thread::spawn(move || run_job(view, epochs, j as u64))
        })
        .collect();
    threads.into_iter().map(|t| t.join().expect("job")).collect()
}

fn job_stats(mnt: &Mounted) -> Vec<serde_json::Value> {
    mnt.stats()["jobs"]["active"].as_array().cloned().unwrap_or_default()
}

fn sum(jobs: &[serde_json::Value], key: &str) -> u64 {
    jobs.iter()
        .map(|j| match key {
            "hits" => ["augmented", "decoded", "encoded"].iter().map(|f| j["hits"][f].as_u64().unwrap_or(0)).sum(),
            _ => j[key].as_u64().unwrap_or(0),
        })
        .sum()
}

#[test]
fn three_concurrent_jobs_are_each_served_every_sample_once_per_epoch() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (source, class_of) = make_id_dataset(tmp.path(), CLASSES, PER_CLASS);
    let config = write_config(
        tmp.path(),
        &format!("seed: 5\nthreads: 2\ncache: {{ memory: {QUARTER_OF_THE_SET}, split: 0-0-100 }}\njobs: {{ prefetch_window: 4 }}\n"),
    );
    let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);
    let served = run_jobs(&mnt, 3, 2);

    for (j, epochs) in served.iter().enumerate() {
        let mut outputs = HashSet::new();
        for (e, epoch) in epochs.iter().enumerate() {
            let ids: BTreeSet<usize> = epoch.iter().map(|&(_, id, _)| id).collect();
            assert_eq!(epoch.len(), SAMPLES);
            assert_eq!(ids.len(), SAMPLES, "job {j} epoch {e}: a sample was served twice or not at all");
            for &(class, id, h) in epoch {
                assert_eq!(class_of[id], class, "job {j} epoch {e}: sample {id} served under class {class}");
                assert!(outputs.insert(h), "job {j}: an augmented output was served to it twice");
            }
        }
    }
    let stats = job_stats(&mnt);
    assert_eq!(stats.len(), 3, "{stats:?}");
    for job in &stats {
        assert_eq!(job["epoch"], 3, "two epochs done, the third begun: {job}");
        assert_eq!(job["samples_served"], 2 * SAMPLES as u64, "{job}");
        assert_eq!(job["served_this_epoch"], 0, "{job}");
    }
    assert!(sum(&stats, "substitutions") > 0, "no substitution happened: {stats:?}");
    assert!(
        stats.iter().map(|j| j["hits"]["augmented"].as_u64().unwrap_or(0)).sum::<u64>() > 0,
        "no job was served another's augmented output: {stats:?}"
    );
    let all = mnt.stats();
    assert!(all["ods_metadata_bytes"].as_u64().unwrap_or(0) > 0, "{all}");
    assert!(all["cache"]["augmented"]["bytes_used"].as_u64().unwrap_or(u64::MAX) <= QUARTER_OF_THE_SET as u64);

    // The top-level views never substitute: a file is always its own sample.
    for id in [0, 17, 40] {
        let class = class_of[id];
        for view in ["augmented", "decoded"] {
            let bytes = fs::read(mnt.path(&format!("{view}/c{class}/s{id:02}.ppm"))).expect("top-level read");
            let (_, _, pixels) = parse_ppm(&bytes);
            assert_eq!(id_of_pixels(pixels).0, id, "{view}/c{class}/s{id:02}.ppm served another sample");
        }
    }
}

#[test]
fn pil_readers_in_worker_processes_see_every_sample_once_per_epoch() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (source, class_of) = make_id_dataset(tmp.path(), CLASSES, PER_CLASS);
    let config = write_config(
        tmp.path(),
        &format!("seed: 9\nthreads: 2\ncache: {{ memory: {QUARTER_OF_THE_SET}, split: 0-0-100 }}\n"),
    );
    let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);
    // Another job reading at the same time, so that substitutions and shared outputs happen.
    let other = {
        let view = mnt.path("jobs/other/augmented");
        std::thread::spawn(move || run_job(view, 2, 77))
    };
    let view = mnt.path("jobs/pil/augmented");
    let report = python("read_job_pil.py", &[view.as_os_str(), "2".as_ref(), "3".as_ref()]);
    other.join().expect("other job");
    let epochs: Vec<Vec<(usize, f64, f64, String)>> = serde_json::from_str(report.trim()).expect("json");
    let mut outputs = HashSet::new();
    for (e, epoch) in epochs.iter().enumerate() {
        let mut ids = BTreeSet::new();
        for (class, r, g, digest) in epoch {
            let (id, distance) = (0..SAMPLES)
                .map(|id| {
                    let (ir, ig) = id_levels(id);
                    (id, (f64::from(ir) - r).abs().max((f64::from(ig) - g).abs()))
                })
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .expect("ids");
            assert!(distance < 12.0, "epoch {e}: no sample has this colour");
            assert_eq!(class_of[id], *class, "epoch {e}: sample {id} served under class {class}");
            assert!(ids.insert(id), "epoch {e}: sample {id} served twice");
            assert!(outputs.insert(digest.clone()), "an augmented output was served twice");
        }
        assert_eq!(ids.len(), SAMPLES, "epoch {e}");
    }
    let pil = job_stats(&mnt).into_iter().find(|j| j["name"] == "pil").expect("pil job");
    assert_eq!(pil["epoch"], 3, "{pil}");
    assert_eq!(pil["samples_served"], 2 * SAMPLES as u64, "{pil}");
}

#[test]
fn a_second_open_of_a_path_held_open_shares_its_content_and_counts_once() {
    use std::io::Read;
    let tmp = tempfile::tempdir().expect("tempdir");
    let (source, _) = make_id_dataset(tmp.path(), CLASSES, PER_CLASS);
    let config = write_config(tmp.path(), "seed: 10\nthreads: 2\n");
    let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);
    let path = mnt.path("jobs/twice/augmented/c2/s40.ppm");
    // As older PIL did: open, then open the same path again (to try mmap) before reading.
    let mut first = fs::File::open(&path).expect("first open");
    let mut second = fs::File::open(&path).expect("second open");
    let (mut a, mut b) = (Vec::new(), Vec::new());
    second.read_to_end(&mut b).expect("read second");
    first.read_to_end(&mut a).expect("read first");
    assert_eq!(a, b, "two handles of one path in one job saw different content");
    drop((first, second));
    // Their releases reach the daemon a moment after the closes (the kernel sends them in the
    // background): an open before that would still share their handle.
    mnt.wait_released();
    let job = job_stats(&mnt).into_iter().find(|j| j["name"] == "twice").expect("job");
    assert_eq!(job["samples_served"], 1, "{job}");
    // Opened again after both closed: a new sample of the directory (this one was served).
    let again = fs::read(&path).expect("third open");
    let (_, _, pixels) = parse_ppm(&again);
    let after = job_stats(&mnt).into_iter().find(|j| j["name"] == "twice").expect("job");
    assert_ne!(id_of_pixels(pixels).0, id_of_pixels(parse_ppm(&a).2).0, "the third open served the same sample: {after}");
}

#[test]
fn prefetch_prepares_the_next_samples_of_the_listing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (source, _) = make_id_dataset(tmp.path(), CLASSES, PER_CLASS);
    let config = write_config(
        tmp.path(),
        "seed: 11\nthreads: 2\ncache: { memory: 64MiB, split: 0-50-50, refill: false }\njobs: { prefetch_window: 4 }\n",
    );
    let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);
    // A loader that follows the listing, with time between samples (a training step).
    let dir = mnt.path("jobs/follower/augmented/c1");
    let listing: Vec<PathBuf> = fs::read_dir(&dir).expect("list").map(|e| e.expect("entry").path()).collect();
    assert_eq!(listing.len(), PER_CLASS);
    for path in &listing {
        fs::read(path).expect("read");
        std::thread::sleep(Duration::from_millis(40));
    }
    let job = job_stats(&mnt).into_iter().find(|j| j["name"] == "follower").expect("job");
    assert!(job["prefetched"].as_u64().unwrap_or(0) >= 4, "{job}");
    assert!(job["hits"]["augmented"].as_u64().unwrap_or(0) >= 4, "samples prepared ahead were not hits: {job}");
    assert_eq!(job["samples_served"], PER_CLASS as u64, "{job}");
}

/// The jobs' hit rate (hits over opens) for 3 jobs x 2 epochs with a cache of 25% of the set.
fn concurrent_hit_rate(ods: bool) -> f64 {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (source, _) = make_id_dataset(tmp.path(), CLASSES, PER_CLASS);
    let config = write_config(
        tmp.path(),
        &format!(
            "seed: 6\nthreads: 2\ncache: {{ memory: {QUARTER_OF_THE_SET}, split: 0-0-100, refill: false }}\n\
             jobs: {{ ods: {ods}, prefetch_window: 0 }}\n"
        ),
    );
    let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);
    let served = run_jobs(&mnt, 3, 2);
    for epochs in &served {
        for epoch in epochs {
            assert_eq!(epoch.iter().map(|&(_, id, _)| id).collect::<BTreeSet<_>>().len(), SAMPLES);
        }
    }
    let stats = job_stats(&mnt);
    let (hits, misses) = (sum(&stats, "hits"), sum(&stats, "misses"));
    assert_eq!(hits + misses, 3 * 2 * SAMPLES as u64, "{stats:?}");
    if !ods {
        assert_eq!(sum(&stats, "substitutions"), 0, "{stats:?}");
    }
    hits as f64 / (hits + misses) as f64
}

#[test]
fn opportunistic_sampling_raises_the_hit_rate_of_concurrent_jobs() {
    let with = concurrent_hit_rate(true);
    let without = concurrent_hit_rate(false);
    eprintln!("hit rate with ODS {with:.2}, without {without:.2}");
    assert!(with > without, "hit rate with ODS {with:.2} is not above {without:.2} without it");
}

#[test]
fn job_views_of_every_form_substitute_whole_files_within_the_class() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (source, class_of) = make_id_dataset(tmp.path(), CLASSES, PER_CLASS);
    let config = write_config(tmp.path(), "seed: 7\nthreads: 2\ncache: { memory: 64MiB, split: 20-80-0, refill: false }\n");
    let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);
    let mut originals: Vec<(PathBuf, Vec<u8>)> = fs::read_dir(source.join("c0"))
        .expect("list")
        .map(|e| e.expect("entry").path())
        .map(|p| {
            let bytes = fs::read(&p).expect("read source");
            (p, bytes)
        })
        .collect();
    originals.sort();

    // Another job reads the first half of c0 (caching it); this one then asks for c0 from the
    // end: its first opens are of uncached files, and are served the cached ones.
    for (path, _) in &originals[..PER_CLASS / 2] {
        let name = path.file_name().expect("name").to_string_lossy().into_owned();
        fs::read(mnt.path(&format!("jobs/warm/encoded/c0/{name}"))).expect("warm read");
    }
    let mut matched = BTreeSet::new();
    for (path, _) in originals.iter().rev() {
        let name = path.file_name().expect("name").to_string_lossy().into_owned();
        let view_path = mnt.path(&format!("jobs/reader/encoded/c0/{name}"));
        let bytes = fs::read(&view_path).expect("job encoded read");
        let k = originals.iter().position(|(_, b)| *b == bytes).expect("served bytes are a c0 source file, whole");
        assert!(matched.insert(k), "a source file was served twice in one epoch");
    }
    assert_eq!(matched.len(), PER_CLASS);

    // decoded/: sizes vary by sample, so a substitute's PPM may be longer or shorter than the
    // requested file's stat size; a read to the end still gets the whole, valid PPM.
    for id in 16..24 {
        fs::read(mnt.path(&format!("decoded/c1/s{id:02}.ppm"))).expect("warm decoded");
    }
    let mut ids = BTreeSet::new();
    let mut names: Vec<usize> = (16..32).collect();
    names.reverse();
    for id in names {
        let bytes = fs::read(mnt.path(&format!("jobs/reader/decoded/c1/s{id:02}.ppm"))).expect("job decoded read");
        let (_, _, pixels) = parse_ppm(&bytes);
        let (got, distance) = id_of_pixels(pixels);
        assert!(distance < 12.0);
        assert_eq!(class_of[got], 1, "sample {got} served under c1");
        assert!(ids.insert(got), "sample {got} served twice");
    }
    assert_eq!(ids.len(), PER_CLASS);
    let stats = job_stats(&mnt);
    let reader = stats.iter().find(|j| j["name"] == "reader").expect("reader job");
    assert!(reader["substitutions"].as_u64().unwrap_or(0) >= 8, "{reader}");
    assert!(reader["hits"]["encoded"].as_u64().unwrap_or(0) >= 8, "{reader}");
    assert!(reader["hits"]["decoded"].as_u64().unwrap_or(0) >= 8, "{reader}");
}

/// Reads a directory with raw getdents64 calls of `buf` bytes each; returns (name, d_off) pairs.
fn getdents(fd: i32, buf: usize) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    let mut space = vec![0u8; buf];
    loop {
        // SAFETY: getdents64 writes at most `buf` bytes into `space`.
        let n = unsafe { libc::syscall(libc::SYS_getdents64, fd, space.as_mut_ptr(), buf) };
        assert!(n >= 0, "getdents64: {}", std::io::Error::last_os_error());
        if n == 0 {
            return out;
        }
        let mut at = 0usize;
        while at < n as usize {
            let rec = &space[at..];
            let off = i64::from_ne_bytes(rec[8..16].try_into().expect("d_off"));
            let reclen = u16::from_ne_bytes(rec[16..18].try_into().expect("d_reclen")) as usize;
            let name = &rec[19..reclen];
            let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
            out.push((String::from_utf8_lossy(name).into_owned(), off));
            at += reclen;
        }
    }
}

#[test]
fn listings_read_in_pieces_stay_consistent_and_job_names_are_checked() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (source, _) = make_id_dataset(tmp.path(), CLASSES, PER_CLASS);
    let config = write_config(
        tmp.path(),
        "seed: 8\nthreads: 2\ncache: { memory: 16MiB, split: 0-100-0, refill: false }\njobs: { max: 2, idle_timeout: 2s }\n",
    );
    let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);

    // Some samples cached, so the job's listing order puts them first.
    for id in [3, 9, 12] {
        fs::read(mnt.path(&format!("decoded/c0/s{id:02}.ppm"))).expect("warm");
    }
    let dir = CString::new(mnt.path("jobs/lister/augmented/c0").as_os_str().as_bytes()).expect("path");
    // SAFETY: open(2) of a directory, closed below.
    let fd = unsafe { libc::open(dir.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY) };
    assert!(fd >= 0, "open: {}", std::io::Error::last_os_error());
    let pieces = getdents(fd, 120);
    let names: Vec<&str> = pieces.iter().map(|(n, _)| n.as_str()).filter(|n| !n.starts_with('.')).collect();
    assert_eq!(names.len(), PER_CLASS, "{names:?}");
    assert_eq!(names.iter().collect::<HashSet<_>>().len(), PER_CLASS, "an entry came twice: {names:?}");
    let first: HashSet<&str> = names[..3].iter().copied().collect();
    assert_eq!(first, HashSet::from(["s03.ppm", "s09.ppm", "s12.ppm"]), "cached samples first: {names:?}");
    // Seek back to an offset handed out mid-listing: the same entries follow.
    let (_, resume) = pieces[6].clone();
    // SAFETY: lseek on our own directory fd.
    assert_eq!(unsafe { libc::lseek(fd, resume, libc::SEEK_SET) }, resume);
    let again = getdents(fd, 120);
    assert_eq!(again.iter().map(|(n, _)| n).collect::<Vec<_>>(), pieces[7..].iter().map(|(n, _)| n).collect::<Vec<_>>());
    // SAFETY: closing our own fd.
    unsafe { libc::close(fd) };

    // Job names: refused with a clear errno; at most `jobs.max` at once; mkdir and rmdir.
    let errno = |p: &str| fs::metadata(mnt.path(p)).expect_err(p).raw_os_error();
    assert_eq!(errno("jobs/..sneaky"), Some(libc::EINVAL));
    assert_eq!(errno("jobs/has space"), Some(libc::EINVAL));
    assert_eq!(errno(&format!("jobs/{}", "x".repeat(65))), Some(libc::ENAMETOOLONG));
    let names = |p: &str| -> BTreeSet<String> {
        fs::read_dir(mnt.path(p)).expect(p).map(|e| e.expect("e").file_name().to_string_lossy().into_owned()).collect()
    };
    // A lookup, a stat, `ls jobs/typo` make no job: an empty directory, nothing listed in jobs/.
    fs::metadata(mnt.path("jobs/typo")).expect("a name no job has yet answers");
    assert!(names("jobs/typo").is_empty());
    fs::metadata(mnt.path("jobs/typo/augmented/c0")).expect("a path into it resolves");
    assert_eq!(names("jobs"), BTreeSet::from(["lister".to_string()]));
    assert!(!job_stats(&mnt).iter().any(|j| j["name"] == "typo"), "a lookup made a job");
    // The first use inside a job's directory makes it.
    assert!(!names("jobs/second/augmented").is_empty());
    assert_eq!(names("jobs/second"), BTreeSet::from(["augmented".to_string(), "decoded".to_string(), "encoded".to_string()]));
    let use_errno = |p: &str| fs::read_dir(mnt.path(p)).expect_err(p).raw_os_error();
    assert_eq!(use_errno("jobs/third/augmented"), Some(libc::EUSERS), "jobs.max is 2");
    assert!(mnt.log().contains("job refused"), "a refused job is logged: {}", mnt.log());
    assert_eq!(names("jobs"), BTreeSet::from(["lister".to_string(), "second".to_string()]));
    fs::remove_dir(mnt.path("jobs/second")).expect("rmdir retires a job");
    // `mkdir -p` succeeds (the name answers as a directory: mkdir(2) itself gets EEXIST from
    // the kernel); the job is made at its first use.
    fs::create_dir_all(mnt.path("jobs/third")).expect("mkdir -p");
    assert_eq!(fs::create_dir(mnt.path("jobs/third")).expect_err("plain mkdir").kind(), std::io::ErrorKind::AlreadyExists);
    assert!(!names("jobs/third/decoded").is_empty());
    assert!(job_stats(&mnt).iter().any(|j| j["name"] == "third"));
    assert_eq!(fs::remove_dir(mnt.path("jobs/.x")).expect_err("bad name").raw_os_error(), Some(libc::EINVAL));
    assert_eq!(fs::remove_dir(mnt.path("encoded/c0")).expect_err("ro").raw_os_error(), Some(libc::EROFS));
    assert_eq!(use_errno("jobs/fourth/encoded"), Some(libc::EUSERS), "full");

    // Idle jobs retire by themselves (idle_timeout: 2s).
    let started = Instant::now();
    while !job_stats(&mnt).is_empty() {
        assert!(started.elapsed() < Duration::from_secs(20), "idle jobs were not retired: {:?}", job_stats(&mnt));
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(mnt.stats()["jobs"]["retired"].as_u64().unwrap_or(0) >= 3);
}

#[test]
fn prepfs_job_reset_ends_a_jobs_epoch_on_a_read_only_mount_where_rmdir_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = common::make_dataset(tmp.path(), 2, 10, false);
    let config = common::write_config(tmp.path(), "seed: 3\ncache: { memory: 64MiB }\n");
    let mut cmd = common::mount_command(&config, &source, &tmp.path().join("mnt"));
    cmd.arg("--read-only");
    let mnt = common::Mounted::start_command(cmd, &tmp.path().join("mnt"), &tmp.path().join("prepfs.log"), std::time::Duration::from_secs(120));
    // A trainer read 7 samples of its first epoch, then stopped.
    let files: Vec<_> = {
        let mut f: Vec<_> = std::fs::read_dir(mnt.path("jobs/t/augmented")).expect("job view").flat_map(|c| std::fs::read_dir(c.expect("class").path()).expect("class")).map(|f| f.expect("file").path()).collect();
        f.sort();
        f
    };
    for f in &files[..7] {
        std::fs::read(f).expect("read");
    }
    mnt.wait_released();
    let job = |stats: &serde_json::Value| stats["jobs"]["active"].as_array().and_then(|a| a.iter().find(|j| j["name"] == "t")).cloned();
    assert_eq!(job(&mnt.stats()).expect("job t")["served_this_epoch"], 7);
    // The read-only mount refuses rmdir.
    let err = std::fs::remove_dir(mnt.path("jobs/t")).expect_err("rmdir on a read-only mount");
    assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{err}");
    // prepfs job reset: the job's state ends; its next reader begins epoch 1 from nothing served.
    let out = std::process::Command::new(common::prepfs_bin()).args(["job", "reset"]).arg(&mnt.mountpoint).arg("t").output().expect("prepfs job reset");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("job t reset"), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(job(&mnt.stats()).is_none(), "job t still active: {}", mnt.stats()["jobs"]);
    std::fs::read(&files[0]).expect("read");
    mnt.wait_released();
    let t = job(&mnt.stats()).expect("job t again");
    assert_eq!((t["epoch"].as_u64(), t["served_this_epoch"].as_u64()), (Some(1), Some(1)), "{t}");
    // A job that does not exist is said so.
    let out = std::process::Command::new(common::prepfs_bin()).args(["job", "reset"]).arg(&mnt.mountpoint).arg("nope").output().expect("prepfs job reset");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("job `nope`"), "{}", String::from_utf8_lossy(&out.stderr));
}
