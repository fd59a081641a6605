//! Mounted tests of listing large trees: the real `prepfs` binary over 200 directories x 1,000
//! files (200k entries), over one directory of 60k files beside nested ones, and over tar
//! shards of 8k samples, listed through the kernel as `find` or an ImageFolder scan lists them
//! (names and types from the listing, no `stat`), each directory far larger than one READDIR
//! reply. Each its own temporary directory, a mount guard that unmounts on every way out, and a
//! time limit.

use crate::common;

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
        let after_first = requests(&mnt, "readdir");
        let second = list(&mnt.path(view));
        assert!(first == second, "{view}/: a second listing gives the same names and inode numbers");
        // A top-level view's listing is the same for the mount's life: the kernel kept it
        // (FOPEN_CACHE_DIR) and listed it again without asking.
        assert_eq!(requests(&mnt, "readdir"), after_first, "{view}/: the second listing came from the kernel's cache");
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
        assert!(after_first - readdirs >= DIRS as u64, "{view}/ was listed through READDIR");
        let (lookups, getattrs) = (requests(&mnt, "lookup") - lookups, requests(&mnt, "getattr") - getattrs);
        assert!(
            lookups + getattrs <= (2 * DIRS + 60) as u64,
            "{view}/: {lookups} lookups and {getattrs} getattrs for two listings of {DIRS} directories of {FILES} files"
        );
    }
    let status = mnt.stop();
    assert!(status.success(), "prepfs exits cleanly: {status}");
}

/// Every entry under `root` as (path relative to it, whether a directory), from the directory
/// entries' types alone (no `stat`), as `find` takes them.
fn walk(root: &Path) -> BTreeMap<std::path::PathBuf, bool> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in fs::read_dir(&dir).expect("read_dir") {
            let entry = entry.expect("entry");
            let kind = entry.file_type().expect("type");
            assert!(kind.is_dir() || kind.is_file(), "{:?} is listed as a directory or a regular file", entry.path());
            let rel = entry.path().strip_prefix(root).expect("under root").to_path_buf();
            if kind.is_dir() {
                dirs.push(entry.path());
            }
            assert!(out.insert(rel, kind.is_dir()).is_none(), "{:?} is listed once", entry.path());
        }
    }
    out
}

#[test]
fn a_directory_of_60k_files_beside_nested_ones_lists_as_the_source_does_with_every_type_right() {
    const FLAT: usize = 60_000;
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("src");
    // One class directory far larger than a reply (a flat set, as OpenImages' train/), files that
    // are not samples beside its images, and a few small nested directories.
    let flat = src.join("flat");
    fs::create_dir_all(&flat).expect("mkdir");
    for f in 0..FLAT {
        fs::File::create(flat.join(format!("{f:08x}.jpg"))).expect("create");
    }
    for name in ["labels.csv", "README", "notes.txt"] {
        fs::write(flat.join(name), b"x").expect("write");
    }
    for (d, n) in [("a", 3), ("a/b", 250), ("a/b/c", 1), ("z", 0)] {
        fs::create_dir_all(src.join(d)).expect("mkdir");
        for f in 0..n {
            fs::File::create(src.join(d).join(format!("s{f}.png"))).expect("create");
        }
    }
    let config = write_config(dir.path(), "seed: 1\nthreads: 2\ncache:\n  memory: 64MiB\n");
    let mnt = Mounted::start(dir.path(), &config, &src, LIMIT);

    let source = walk(&src);
    assert_eq!(source.len(), 5 + FLAT + 3 + 254, "the source as made: 5 directories, 60,003 files in flat/, 254 images below a/");
    // encoded/: the source's tree, name for name and type for type, nothing else.
    let encoded = walk(&mnt.path("encoded"));
    assert_eq!(encoded.len(), source.len(), "encoded/ lists as many entries as the source");
    assert!(encoded == source, "encoded/ lists every name of the source once, with its type");
    // The pixel views: the directories and the samples (images, under their stem and the
    // output's extension), no other file.
    let images: BTreeMap<_, _> = source
        .iter()
        .filter(|(p, is_dir)| **is_dir || p.extension().is_some_and(|e| e == "jpg" || e == "png"))
        .map(|(p, is_dir)| (if *is_dir { p.clone() } else { p.with_extension("ppm") }, *is_dir))
        .collect();
    assert_eq!(images.len(), 5 + FLAT + 254, "the directories and the images");
    let augmented = walk(&mnt.path("augmented"));
    assert!(augmented == images, "augmented/ lists every directory and every sample once as .ppm");
    assert_eq!(requests(&mnt, "readdirplus"), 0, "no READDIRPLUS");
    let status = mnt.stop();
    assert!(status.success(), "prepfs exits cleanly: {status}");
}

/// Appends a member of `bytes` named `name` to a tar shard.
fn add(builder: &mut tar::Builder<fs::File>, name: &str, bytes: &[u8]) {
    let mut header = tar::Header::new_gnu();
    header.set_size(bytes.len() as u64);
    header.set_mode(0o644);
    header.set_entry_type(tar::EntryType::Regular);
    builder.append_data(&mut header, name, bytes).expect("append");
}

#[test]
fn tar_shards_of_8k_samples_list_every_sample_once_under_its_class_with_every_type_right() {
    const SHARDS: usize = 4;
    const PER_SHARD: usize = 2000;
    const CLASSES: usize = 8;
    let dir = tempfile::tempdir().expect("tempdir");
    let shards = dir.path().join("shards");
    fs::create_dir_all(&shards).expect("mkdir");
    // Each sample a JPEG member (its bytes never read by a listing) and its label; class
    // directories of 1,000 samples, each far more than one reply holds.
    let mut want: BTreeMap<std::path::PathBuf, bool> = BTreeMap::new();
    for s in 0..SHARDS {
        let mut tar = tar::Builder::new(fs::File::create(shards.join(format!("train-{s:03}.tar"))).expect("create"));
        for i in 0..PER_SHARD {
            let (key, class) = (format!("k{:06}", s * PER_SHARD + i), (s * PER_SHARD + i) % CLASSES);
            add(&mut tar, &format!("{key}.jpg"), b"\xff\xd8");
            add(&mut tar, &format!("{key}.cls"), format!("{class}\n").as_bytes());
            want.insert(std::path::PathBuf::from(class.to_string()), true);
            want.insert(std::path::PathBuf::from(format!("{class}/{key}.jpg")), false);
        }
        tar.into_inner().expect("finish");
    }
    let pattern = format!("{}/train-{{000..{:03}}}.tar", shards.display(), SHARDS - 1);
    let yaml = format!("seed: 1\nthreads: 2\ncache: {{ memory: 64MiB }}\nsource: {{ shards: \"{pattern}\", index_dir: {} }}\n", dir.path().join("index").display());
    let config = write_config(dir.path(), &yaml);
    let mnt = Mounted::start(dir.path(), &config, Path::new(&pattern), LIMIT);

    let encoded = walk(&mnt.path("encoded"));
    assert_eq!(encoded.len(), CLASSES + SHARDS * PER_SHARD, "encoded/ lists every class and every sample");
    assert!(encoded == want, "encoded/ lists each sample once under its class, with its type");
    let augmented = walk(&mnt.path("augmented"));
    let want_ppm: BTreeMap<_, _> = want.iter().map(|(p, d)| (if *d { p.clone() } else { p.with_extension("ppm") }, *d)).collect();
    assert!(augmented == want_ppm, "augmented/ lists each sample once as .ppm");
    assert_eq!(requests(&mnt, "readdirplus"), 0, "no READDIRPLUS");
    let status = mnt.stop();
    assert!(status.success(), "prepfs exits cleanly: {status}");
}
