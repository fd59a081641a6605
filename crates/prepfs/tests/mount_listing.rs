//! Mounted test of listing a large tree: the real `prepfs` binary over 200 directories x 1,000
//! files (200k entries), listed through the kernel as `find` or an ImageFolder scan lists it
//! (names and types from the listing, no `stat`). Its own temporary directory, a mount guard
//! that unmounts on every way out, and a time limit.

mod common;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::{DirEntryExt, MetadataExt};
use std::path::Path;
use std::time::Duration;

use common::{write_config, Mounted};

const LIMIT: Duration = Duration::from_secs(300);
const DIRS: usize = 200;
const FILES: usize = 1000;

/// A view's listing: per class directory, each file's name and its inode number (`d_ino`).
type Listing = BTreeMap<OsString, Vec<(OsString, u64)>>;

/// Lists `root` two levels deep from the directory entries alone, as `find -type f` does; every
/// class entry must be a directory and every entry below it a regular file.
fn list(root: &Path) -> Listing {
    let mut out = Listing::new();
    for class in fs::read_dir(root).expect("read_dir view") {
        let class = class.expect("class entry");
        assert!(class.file_type().expect("type").is_dir(), "{:?} is listed as a directory", class.path());
        let mut files = Vec::new();
        for entry in fs::read_dir(class.path()).expect("read_dir class") {
            let entry = entry.expect("entry");
            assert!(entry.file_type().expect("type").is_file(), "{:?} is listed as a file", entry.path());
            files.push((entry.file_name(), entry.ino()));
        }
        files.sort();
        out.insert(class.file_name(), files);
    }
    out
}

fn requests(mnt: &Mounted, kind: &str) -> u64 {
    mnt.stats()["fuse_requests"][kind].as_u64().unwrap_or_else(|| panic!("fuse_requests.{kind} in stats.json"))
}

#[test]
fn a_listing_of_200k_entries_names_every_file_once_with_stable_inodes_and_asks_nothing_per_entry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("src");
    let mut want = Listing::new();
    for d in 0..DIRS {
        let class = src.join(format!("c{d:03}"));
        fs::create_dir_all(&class).expect("mkdir");
        let files = (0..FILES)
            .map(|f| {
                let name = format!("f{:07}.jpg", d * FILES + f);
                fs::File::create(class.join(&name)).expect("create");
                (OsString::from(name), 0)
            })
            .collect();
        want.insert(format!("c{d:03}").into(), files);
    }
    let config = write_config(dir.path(), "seed: 1\nthreads: 2\ncache:\n  memory: 64MiB\n");
    let mnt = Mounted::start(dir.path(), &config, &src, LIMIT);

    for (view, ext) in [("encoded", ".jpg"), ("augmented", ".ppm")] {
        let (lookups, getattrs, readdirs) = (requests(&mnt, "lookup"), requests(&mnt, "getattr"), requests(&mnt, "readdir"));
        let first = list(&mnt.path(view));
        // Every file once, under its name (the pixel views' under its stem and the output's
        // extension), in every class directory, and nothing else.
        let names = |l: &Listing| l.iter().map(|(c, fs)| (c.clone(), fs.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>())).collect::<BTreeMap<_, _>>();
        let expected = want
            .iter()
            .map(|(c, fs)| (c.clone(), fs.iter().map(|(n, _)| n.to_string_lossy().replace(".jpg", ext).into()).collect::<Vec<OsString>>()))
            .collect::<BTreeMap<_, _>>();
        assert!(names(&first) == expected, "{view}/ lists every file once under its name");
        // Inode numbers: one per file, the same in a second listing and at a lookup.
        let inodes: std::collections::HashSet<u64> = first.values().flatten().map(|(_, ino)| *ino).collect();
        assert_eq!(inodes.len(), DIRS * FILES, "{view}/: every file has an inode number of its own");
        let second = list(&mnt.path(view));
        assert!(first == second, "{view}/: a second listing gives the same names and inode numbers");
        for (class, files) in first.iter().step_by(37) {
            for (name, ino) in files.iter().step_by(211) {
                let path = mnt.path(view).join(class).join(name);
                assert_eq!(fs::metadata(&path).expect("stat").ino(), *ino, "{path:?}: stat's inode is the listing's");
            }
        }
        // The listings were plain READDIRs: nothing was asked or made per entry (a READDIRPLUS
        // would stat every source file and have the kernel make an inode for each). What the
        // kernel asks besides is per class directory entered (at most one lookup or getattr per
        // directory and listing), and the stats above.
        assert_eq!(requests(&mnt, "readdirplus"), 0, "no READDIRPLUS");
        assert!(requests(&mnt, "readdir") - readdirs >= 2 * DIRS as u64, "{view}/ was listed through READDIR");
        let (lookups, getattrs) = (requests(&mnt, "lookup") - lookups, requests(&mnt, "getattr") - getattrs);
        assert!(
            lookups + getattrs <= (2 * DIRS + 60) as u64,
            "{view}/: {lookups} lookups and {getattrs} getattrs for two listings of {DIRS} directories of {FILES} files"
        );
    }
    let status = mnt.stop();
    assert!(status.success(), "prepfs exits cleanly: {status}");
}
