//! A reference model of the filesystem core's job views, checked against the real
//! [`Filesystem`] (without FUSE) on random sequences of opens, reads and releases, as
//! mountpoint-s3's reftests check its whole filesystem: what a reader of `jobs/<job>/augmented/`
//! may rely on, whatever the interleaving.
//!
//! The model keeps, per job, the samples served in its current epoch, and per open handle
//! whether it was read and what it read. It checks, after every step:
//! - a handle's first read serves exactly one sample new to its job's epoch, from the class
//!   (directory) of the name opened (the label is kept), or none when every free sample of the
//!   class is pinned to the job's other open handles (the request is then served as it is);
//! - a job's epoch ends at a read only when that read served the last sample of the set, and at
//!   an open only when the class opened has nothing left: every sample served this epoch or
//!   pinned to an unread handle of the job;
//! - every read of a handle returns the bytes of its first, at any offset and length, and a
//!   whole read is as long as the file's size before it was opened;
//! - the samples served this epoch are what the job counts (`served_this_epoch`);
//! - once every handle is released, no sample stays claimed (an unread handle gives its sample
//!   back): a fresh pass over the class serves each unseen sample.

use std::collections::HashSet;
use std::ffi::OsStr;

use proptest::prelude::*;

use super::inodes::ROOT_INO;
use super::*;
use crate::config::Overrides;
use prepfs_source::catalog::FileId;

const CLASSES: usize = 2;
const PER_CLASS: usize = 3;
const JOBS: [&str; 2] = ["a", "b"];

#[derive(Debug, Clone)]
enum Op {
    /// Opens `jobs/<job>/augmented/c<class>/s<index>.ppm`.
    Open { job: usize, class: usize, index: usize },
    /// Reads `len` bytes at `offset` (a share of the size, in 1/8ths) of the `handle`-th open
    /// handle (modulo those open).
    Read { handle: usize, offset_eighths: u64, len: u32 },
    /// Releases the `handle`-th open handle.
    Release { handle: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..JOBS.len(), 0..CLASSES, 0..PER_CLASS).prop_map(|(job, class, index)| Op::Open { job, class, index }),
        3 => (any::<usize>(), 0..8u64, prop_oneof![Just(u32::MAX), 1..70_000u32])
            .prop_map(|(handle, offset_eighths, len)| Op::Read { handle, offset_eighths, len }),
        2 => any::<usize>().prop_map(|handle| Op::Release { handle }),
    ]
}

/// One open handle as the model sees it.
struct Open {
    job: usize,
    class: usize,
    ino: u64,
    fh: u64,
    /// The size the file showed before it was opened.
    size: u64,
    /// The whole content, from the first read on.
    content: Option<Vec<u8>>,
}

/// A job as the model sees it.
#[derive(Default)]
struct JobModel {
    epoch: u64,
    seen: HashSet<FileId>,
}

/// `CLASSES` classes of `PER_CLASS` photo-like JPEGs of varied sizes, and a core over them.
fn core(yaml: &str) -> (tempfile::TempDir, Filesystem) {
    let dir = tempfile::tempdir().expect("tempdir");
    for class in 0..CLASSES {
        let path = dir.path().join(format!("src/c{class}"));
        std::fs::create_dir_all(&path).expect("mkdir");
        for i in 0..PER_CLASS {
            let jpeg = prepfs_pixels::synthetic::photo_jpeg(96 + 16 * i + 8 * class, 80, turbojpeg::Subsamp::Sub2x2);
            std::fs::write(path.join(format!("s{i}.jpg")), jpeg).expect("write");
        }
    }
    let overrides = Overrides { source: Some(dir.path().join("src")), mountpoint: Some(dir.path().join("mnt")), seed: Some(5) };
    let config = Config::parse(&format!("threads: 1\naugment: [ {{ random_resized_crop: {{ size: 32 }} }} ]\n{yaml}"), &overrides)
        .expect("config");
    let catalog = Catalog::scan(&config.source, |_| {}).expect("scan");
    (dir, Filesystem::new(config, catalog).expect("filesystem"))
}

/// The inode of `jobs/<job>/augmented/c<class>/s<index>.ppm`, looked up as the kernel would.
fn job_file(fs: &Filesystem, job: &str, class: usize, index: usize) -> u64 {
    let mut ino = ROOT_INO;
    for part in ["jobs", job, "augmented", &format!("c{class}"), &format!("s{index}.ppm")] {
        ino = fs.lookup(ino, OsStr::new(part), Caller::ROOT).expect(part).ino;
    }
    ino
}

/// The samples of class `class`.
fn class_samples(fs: &Filesystem, class: usize) -> Vec<FileId> {
    let catalog = fs.catalog();
    let dir = (0..catalog.dir_count() as u32).find(|&d| catalog.dir_name(d) == OsStr::new(&format!("c{class}"))).expect("class");
    catalog.images(dir).to_vec()
}

fn read_at(fs: &Filesystem, fh: u64, offset: u64, len: u32) -> Vec<u8> {
    fs.read(fh, offset, len, |r| r.expect("read").to_vec())
}

/// Runs `ops` against the core and the model (see the module documentation).
fn check(ops: &[Op], yaml: &str) {
    let (_dir, fs) = core(yaml);
    let classes: Vec<Vec<FileId>> = (0..CLASSES).map(|c| class_samples(&fs, c)).collect();
    let mut jobs: Vec<JobModel> = JOBS.iter().map(|_| JobModel::default()).collect();
    let mut open: Vec<Open> = Vec::new();
    for op in ops {
        match *op {
            Op::Open { job, class, index } => {
                let ino = job_file(&fs, JOBS[job], class, index);
                let size = fs.getattr(ino).expect("getattr").size;
                let pinned = open.iter().filter(|o| o.job == job && o.class == class && o.content.is_none()).count();
                let opened = fs.open(ino, false, Caller::ROOT).expect("open");
                open.push(Open { job, class, ino, fh: opened.fh, size, content: None });
                let real = fs.jobs().by_name(JOBS[job]).expect("the first open makes the job").epoch();
                let model = &mut jobs[job];
                if model.epoch != 0 && real != model.epoch {
                    // The open began the next epoch: its class had nothing free left.
                    let seen = classes[class].iter().filter(|s| model.seen.contains(s)).count();
                    assert!(seen + pinned >= classes[class].len(), "job {}: an open ended epoch {} with {seen} of class {class} seen and {pinned} pinned", JOBS[job], model.epoch);
                    assert_eq!(real, model.epoch + 1);
                    model.seen.clear();
                }
                model.epoch = real;
            }
            Op::Read { handle, offset_eighths, len } if !open.is_empty() => {
                let h = handle % open.len();
                if open[h].content.is_none() {
                    first_read(&fs, &mut jobs, &classes, &open, h);
                    let content = read_at(&fs, open[h].fh, 0, u32::MAX);
                    assert_eq!(content.len() as u64, open[h].size, "a whole read is as long as the size shown before the open");
                    open[h].content = Some(content);
                }
                let content = open[h].content.as_ref().expect("read");
                let offset = open[h].size * offset_eighths / 8;
                let got = read_at(&fs, open[h].fh, offset, len);
                let end = (offset as usize).saturating_add(len as usize).min(content.len());
                assert_eq!(got, content[offset as usize..end], "a read at {offset}+{len} returns the handle's bytes");
            }
            Op::Release { handle } if !open.is_empty() => {
                let h = open.remove(handle % open.len());
                fs.release(h.ino, h.fh);
            }
            Op::Read { .. } | Op::Release { .. } => {}
        }
        for (j, model) in jobs.iter().enumerate() {
            if let Some(job) = fs.jobs().by_name(JOBS[j]) {
                assert_eq!(job.served_this_epoch(), model.seen.len() as u64, "job {} counts what it was served", JOBS[j]);
            }
        }
    }
    for h in open.drain(..) {
        fs.release(h.ino, h.fh);
    }
    // Nothing stays claimed: a pass over what a job has not seen serves each of it once, and
    // the last begins its next epoch.
    let total: usize = classes.iter().map(Vec::len).sum();
    for (j, model) in jobs.iter().enumerate() {
        let Some(job) = fs.jobs().by_name(JOBS[j]) else { continue };
        let epoch = job.epoch();
        assert_eq!(epoch, model.epoch);
        for served in job.served_this_epoch() as usize..total {
            let class = (0..CLASSES).find(|&c| classes[c].iter().any(|s| !job.has_seen(*s))).expect("a class with an unseen sample");
            let ino = job_file(&fs, JOBS[j], class, 0);
            let opened = fs.open(ino, false, Caller::ROOT).expect("open");
            read_at(&fs, opened.fh, 0, u32::MAX);
            fs.release(ino, opened.fh);
            let done = served + 1 == total;
            let expected = if done { (epoch + 1, 0) } else { (epoch, served as u64 + 1) };
            assert_eq!((job.epoch(), job.served_this_epoch()), expected, "job {}: the pass over what it had left", JOBS[j]);
        }
    }
    fs.shutdown();
}

/// The model's side of a handle's first read: which sample it served, and the epoch rules.
fn first_read(fs: &Filesystem, jobs: &mut [JobModel], classes: &[Vec<FileId>], open: &[Open], h: usize) {
    let (j, class) = (open[h].job, open[h].class);
    let job = fs.jobs().by_name(JOBS[j]).expect("the first open made the job");
    let total: usize = classes.iter().map(Vec::len).sum();
    read_at(fs, open[h].fh, 0, 1);
    let model = &mut jobs[j];
    if job.epoch() != model.epoch {
        // The read served the last sample of the set: the next epoch begins, nothing seen.
        assert_eq!(model.seen.len(), total - 1, "job {}: epoch {} ended at a read with {} seen", JOBS[j], model.epoch, model.seen.len());
        assert_eq!((job.epoch(), job.served_this_epoch()), (model.epoch + 1, 0));
        model.epoch = job.epoch();
        model.seen.clear();
        return;
    }
    let now: HashSet<FileId> = classes.iter().flatten().copied().filter(|s| job.has_seen(*s)).collect();
    let new: Vec<FileId> = now.difference(&model.seen).copied().collect();
    assert!(new.len() <= 1, "job {}: one read served {new:?}", JOBS[j]);
    if let Some(&sample) = new.first() {
        assert!(classes[class].contains(&sample), "job {}: a c{class} name served sample {sample} of another class", JOBS[j]);
    }
    assert!(model.seen.is_subset(&now), "job {}: a sample served this epoch was forgotten", JOBS[j]);
    model.seen = now;
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, max_shrink_iters: 64, ..ProptestConfig::default() })]

    #[test]
    fn job_views_keep_their_promises_under_any_interleaving_of_opens_reads_and_releases(ops in prop::collection::vec(op(), 1..40)) {
        check(&ops, "cache: { memory: 64MiB, refill: false }\n");
    }

    #[test]
    fn job_views_keep_their_promises_without_a_cache(ops in prop::collection::vec(op(), 1..30)) {
        check(&ops, "cache: { memory: 0 }\n");
    }
}
