//! The epoch ledger through the core: a server started again over the same ledger file (as the
//! supervisor starts one after a crash, on the same FUSE connection) finds each job under the
//! same inodes and serves it the rest of its epoch.

use std::ffi::OsStr;
use std::path::Path;

use super::tests::{core, read_file};
use super::*;
use crate::config::Overrides;

const YAML: &str = "cache: { memory: 64MiB, refill: false }\n";

/// Another filesystem over the dataset `core` made in `dir`, with the same config: the server
/// started again.
fn started_again(dir: &Path) -> Filesystem {
    let overrides = Overrides { source: Some(dir.join("src")), mountpoint: Some(dir.join("mnt")), seed: Some(3) };
    let config = Config::parse(&format!("threads: 1\n{YAML}"), &overrides).expect("config");
    let catalog = Catalog::scan(&config.source, |_| {}).expect("scan");
    Filesystem::new(config, catalog).expect("filesystem")
}

/// The inode of `path` from the root, looked up part by part as the kernel does.
fn ino(fs: &Filesystem, path: &str) -> u64 {
    path.split('/').fold(ROOT_INO, |ino, part| fs.lookup(ino, OsStr::new(part), Caller::ROOT).expect(part).ino)
}

#[test]
fn a_server_started_again_over_the_same_ledger_serves_each_job_the_rest_of_its_epoch_under_the_same_inodes() {
    let (dir, fs) = core(6, YAML);
    let ledger = tempfile::tempfile().expect("ledger file");
    assert!(fs.attach_ledger(ledger.try_clone().expect("dup")).expect("attached").fresh);
    fs.mkdir(ino(&fs, "jobs"), OsStr::new("a"), Caller::ROOT).expect("mkdir a");
    for name in ["s000.ppm", "s001.ppm", "s002.ppm"] {
        read_file(&fs, ino(&fs, &format!("jobs/a/augmented/c0/{name}")));
    }
    let (job_dir, file) = (ino(&fs, "jobs/a"), ino(&fs, "jobs/a/augmented/c0/s004.ppm"));
    let a = fs.jobs().by_name("a").expect("a");
    let (code, served) = (a.code(), (0..6).filter(|&s| a.has_seen(s)).collect::<Vec<_>>());
    assert_eq!(served.len(), 3);
    drop((a, fs));

    let fs = started_again(dir.path());
    let report = fs.attach_ledger(ledger).expect("attached");
    assert_eq!((report.fresh, report.jobs, report.samples, report.seed_mismatch), (false, 1, 3, None), "{report}");
    assert_eq!(ino(&fs, "jobs/a"), job_dir, "the job's directory keeps its inode");
    assert_eq!(ino(&fs, "jobs/a/augmented/c0/s004.ppm"), file);
    let a = fs.jobs().by_name("a").expect("a");
    assert_eq!((a.code(), a.epoch()), (code, 1));
    assert_eq!((0..6).filter(|&s| a.has_seen(s)).collect::<Vec<_>>(), served);
    // Three opens more, whatever they ask for, are served the three samples left: the epoch
    // ends with the third.
    for name in ["s000.ppm", "s001.ppm", "s002.ppm"] {
        read_file(&fs, ino(&fs, &format!("jobs/a/augmented/c0/{name}")));
    }
    assert_eq!((a.epoch(), a.served_this_epoch()), (2, 0));
}
