//! The shards end to end: indexed, kept, served as a tree through the `SourceIo` seam.

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::atomic::AtomicBool;

use super::index::tests::write_tar;
use super::*;
use crate::catalog::Entry;

fn config(dir: &Path, name: &str) -> ShardsConfig {
    ShardsConfig { pattern: format!("{}/{name}", dir.display()), index_dir: None }
}

fn index(config: &ShardsConfig, index_dir: Option<&Path>) -> Shards {
    Shards::index(config, index_dir, |_| {}, &AtomicBool::new(false)).expect("index")
}

/// Two shards: numbered classes 3 and 12, a named class, an unlabeled sample, a key with
/// directories, and a key the second shard repeats.
fn two_shards(dir: &Path) {
    write_tar(&dir.join("train-000.tar"), &[
        ("a.jpg", b"A-bytes"), ("a.cls", b"3"),
        ("sub/dir/b.jpg", b"B-bytes"), ("sub/dir/b.cls", b"12"),
        ("c.png", b"C-bytes"), ("c.json", br#"{"label": "cat"}"#),
    ]);
    write_tar(&dir.join("train-001.tar"), &[
        ("d.jpg", b"D-bytes"),
        ("a.jpg", b"A-again"), ("a.cls", b"3"),
        ("e.jpeg", b"E-bytes"), ("e.cls", b"3"),
    ]);
}

fn read_all(io: &dyn SourceIo, path: &Path) -> Vec<u8> {
    let file = io.open(path).expect("open");
    let mut buf = vec![0u8; file.meta().len() as usize + 10];
    let n = file.read_at(&mut buf, 0).expect("read");
    buf.truncate(n);
    buf
}

#[test]
fn shards_are_served_as_class_directories_of_their_samples_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    two_shards(dir.path());
    let mut shards = index(&config(dir.path(), "train-{000..001}.tar"), None);
    let catalog = shards.take_catalog().expect("catalog");
    let report = shards.report().clone();
    assert_eq!((report.shards, report.samples, report.duplicates, report.indexed, report.reused), (2, 5, 1, 2, 0), "{report:?}");
    let classes: Vec<_> = catalog.subdirs(0).map(|d| catalog.dir_name(d).to_owned()).collect();
    assert_eq!(classes, ["03", "12", "_unlabeled", "cat"], "numbers padded to sort in number order");
    let io = shards.io();
    let root = catalog.root().to_path_buf();
    for (path, want) in [
        ("03/a.jpg", &b"A-bytes"[..]),
        ("03/e.jpeg", b"E-bytes"),
        ("12/sub%2Fdir%2Fb.jpg", b"B-bytes"),
        ("cat/c.png", b"C-bytes"),
        ("_unlabeled/d.jpg", b"D-bytes"),
    ] {
        assert_eq!(read_all(&*io, &root.join(path)), want, "{path}");
        assert_eq!(io.metadata(&root.join(path)).expect("stat").len(), want.len() as u64, "{path}");
        // The catalog has it where the source serves it.
        let (class, name) = path.split_once('/').expect("two parts");
        let Some(Entry::Dir(d)) = catalog.lookup(0, OsStr::new(class)) else { panic!("{class}") };
        let Some(Entry::File(f)) = catalog.lookup(d, OsStr::new(name)) else { panic!("{name}") };
        assert_eq!(catalog.file_path(f), root.join(path));
        assert!(catalog.is_image(f));
    }
    // Directories are the shards' directory's; nothing else is there.
    assert!(io.metadata(&root.join("03")).expect("class").is_dir);
    assert!(io.metadata(&root).expect("root").is_dir);
    for missing in ["03/zz.jpg", "nope", "03/a.jpg/x", "../train-000.tar"] {
        assert_eq!(io.metadata(&root.join(missing)).expect_err(missing).kind(), std::io::ErrorKind::NotFound, "{missing}");
    }
    assert!(io.open(&root.join("03")).is_err(), "a class directory is not read");
}

#[test]
fn a_sample_shows_its_shards_owner_and_mode_and_one_the_shard_denies_stays_denied() {
    let dir = tempfile::tempdir().expect("tempdir");
    two_shards(dir.path());
    std::fs::set_permissions(dir.path().join("train-001.tar"), std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let mut shards = index(&config(dir.path(), "train-*.tar"), None);
    let root = shards.take_catalog().expect("catalog").root().to_path_buf();
    let io = shards.io();
    let shard_meta = std::fs::metadata(dir.path().join("train-001.tar")).expect("stat");
    let meta = io.metadata(&root.join("_unlabeled/d.jpg")).expect("stat");
    use std::os::unix::fs::MetadataExt;
    assert_eq!((meta.mode, meta.uid, meta.gid), (0o600, shard_meta.uid(), shard_meta.gid()));
    assert_eq!(io.metadata(&root.join("cat/c.png")).expect("stat").mode, std::fs::metadata(dir.path().join("train-000.tar")).expect("stat").mode() & 0o7777);
}

#[test]
fn a_kept_index_is_reused_while_its_shard_is_unchanged_and_a_changed_shard_is_indexed_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let kept = tempfile::tempdir().expect("index dir");
    two_shards(dir.path());
    let cfg = config(dir.path(), "train-*.tar");
    let first = index(&cfg, Some(kept.path()));
    assert_eq!((first.report().indexed, first.report().reused), (2, 0));
    assert!(first.report().index_file_bytes > 0);
    let mut second = index(&cfg, Some(kept.path()));
    assert_eq!((second.report().indexed, second.report().reused, second.report().samples), (0, 2, 5));
    // The kept index serves the same bytes (it is not read from the headers again).
    let root = second.take_catalog().expect("catalog").root().to_path_buf();
    assert_eq!(read_all(&*second.io(), &root.join("03/a.jpg")), b"A-bytes");
    // A shard rewritten: its index is made again, the other's kept one used.
    std::thread::sleep(std::time::Duration::from_millis(20));
    write_tar(&dir.path().join("train-001.tar"), &[("f.jpg", b"F-bytes"), ("f.cls", b"5")]);
    let mut third = index(&cfg, Some(kept.path()));
    assert_eq!((third.report().indexed, third.report().reused), (1, 1));
    let catalog = third.take_catalog().expect("catalog");
    assert!(catalog.lookup(0, OsStr::new("_unlabeled")).is_none(), "d.jpg left with its old shard");
    assert_eq!(read_all(&*third.io(), &root.join("05/f.jpg")), b"F-bytes");
    // The source was never written: only the two shards are in its directory.
    let names: Vec<_> = std::fs::read_dir(dir.path()).expect("ls").map(|e| e.expect("entry").file_name()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

#[test]
fn a_shard_changed_while_served_serves_nothing_rather_than_bytes_at_old_offsets() {
    let dir = tempfile::tempdir().expect("tempdir");
    two_shards(dir.path());
    let mut shards = index(&config(dir.path(), "train-000.tar"), None);
    let root = shards.take_catalog().expect("catalog").root().to_path_buf();
    let io = shards.io();
    assert_eq!(read_all(&*io, &root.join("03/a.jpg")), b"A-bytes");
    std::thread::sleep(std::time::Duration::from_millis(20));
    write_tar(&dir.path().join("train-000.tar"), &[("x.jpg", b"other"), ("a.jpg", b"A-bytes-changed"), ("a.cls", b"3")]);
    let err = io.metadata(&root.join("03/a.jpg")).expect_err("changed");
    assert!(err.to_string().contains("remount"), "{err}");
    assert!(io.open(&root.join("03/a.jpg")).is_err());
}

#[test]
fn a_pattern_that_matches_nothing_or_an_unreadable_shard_is_refused_by_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let err = Shards::index(&config(dir.path(), "train-*.tar"), None, |_| {}, &AtomicBool::new(false)).err().expect("nothing");
    assert!(err.to_string().contains("matches no file"), "{err}");
    let err = Shards::index(&config(dir.path(), "train-{0..1}.tar"), None, |_| {}, &AtomicBool::new(false)).err().expect("missing");
    assert!(err.to_string().contains("train-0.tar"), "{err}");
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
}

#[test]
fn a_shard_edited_in_place_with_its_mtime_set_back_is_indexed_again_and_not_served_from_its_old_index() {
    let dir = tempfile::tempdir().expect("tempdir");
    let kept = tempfile::tempdir().expect("index dir");
    two_shards(dir.path());
    let cfg = config(dir.path(), "train-000.tar");
    let mut first = index(&cfg, Some(kept.path()));
    let root = first.take_catalog().expect("catalog").root().to_path_buf();
    let io = first.io();
    assert_eq!(read_all(&*io, &root.join("03/a.jpg")), b"A-bytes");
    // Edit a.jpg's bytes and a.cls's label in place (same size, same inode), then set the
    // mtime back to what it was: only the ctime tells.
    let path = dir.path().join("train-000.tar");
    let before = std::fs::metadata(&path).expect("stat");
    std::thread::sleep(std::time::Duration::from_millis(20));
    let mut bytes = std::fs::read(&path).expect("read");
    let at = bytes.windows(7).position(|w| w == b"A-bytes").expect("a.jpg's bytes");
    bytes[at..at + 7].copy_from_slice(b"EVILxxx");
    let label = bytes.windows(6).position(|w| w == b"a.cls\0").expect("a.cls's header") + 512;
    assert_eq!(bytes[label], b'3');
    bytes[label] = b'4';
    {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new().write(true).open(&path).expect("open");
        file.write_all(&bytes).expect("write in place");
        file.set_times(std::fs::FileTimes::new().set_modified(before.modified().expect("mtime"))).expect("set the mtime back");
    }
    let after = std::fs::metadata(&path).expect("stat");
    assert_eq!((after.len(), after.modified().expect("mtime"), std::os::unix::fs::MetadataExt::ino(&after)), (before.len(), before.modified().expect("mtime"), std::os::unix::fs::MetadataExt::ino(&before)));
    // The mount serving the old index serves nothing of the edited shard.
    assert!(io.open(&root.join("03/a.jpg")).is_err(), "the old offsets of an edited shard were served");
    // The next mount indexes it again: the new label, the new bytes.
    let mut second = index(&cfg, Some(kept.path()));
    assert_eq!((second.report().indexed, second.report().reused), (1, 0), "the kept index of an edited shard was reused");
    let catalog = second.take_catalog().expect("catalog");
    assert!(catalog.lookup(0, OsStr::new("03")).is_none(), "a.jpg served with its old label");
    assert_eq!(read_all(&*second.io(), &root.join("04/a.jpg")), b"EVILxxx");
}

#[test]
fn a_compressed_or_hostile_shard_is_not_served_and_said_by_name_and_the_others_are_served() {
    let dir = tempfile::tempdir().expect("tempdir");
    two_shards(dir.path());
    // A gzip shard, named with a newline to be printed escaped.
    std::fs::write(dir.path().join("train-002\n.tar"), b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03junk").expect("gz");
    let mut shards = index(&config(dir.path(), "train-*.tar"), None);
    let report = shards.report().clone();
    assert_eq!((report.shards, report.samples, report.cut_shards), (3, 5, 1), "{report:?}");
    let root = shards.take_catalog().expect("catalog").root().to_path_buf();
    assert_eq!(read_all(&*shards.io(), &root.join("03/a.jpg")), b"A-bytes");
    // Every shard compressed: the mount is refused, saying why and naming them, escaped.
    let gz = tempfile::tempdir().expect("tempdir");
    for name in ["a.tar.gz", "b\n.tar.gz"] {
        std::fs::write(gz.path().join(name), b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03junk").expect("gz");
    }
    let err = Shards::index(&config(gz.path(), "*.tar.gz"), None, |_| {}, &AtomicBool::new(false)).err().expect("refused");
    let text = err.to_string();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
    assert!(text.contains("no shard could be indexed") && text.contains("compressed (gzip): compressed shards are not supported"), "{text}");
    assert!(text.contains("a.tar.gz") && text.contains("b\\n.tar.gz") && !text.contains('\n'), "{text}");
    // Shards that hold no sample at all: refused too.
    let empty = tempfile::tempdir().expect("tempdir");
    write_tar(&empty.path().join("s.tar"), &[("notes.txt", b"no sample")]);
    let err = Shards::index(&config(empty.path(), "s.tar"), None, |_| {}, &AtomicBool::new(false)).err().expect("refused");
    assert!(err.to_string().contains("hold no samples"), "{err}");
}

/// A source (the real local one, an object store's), counting the reads of the files it opens
/// (each read of an object is one GET).
struct CountingSource {
    inner: Arc<dyn SourceIo>,
    reads: Arc<std::sync::atomic::AtomicUsize>,
}

struct CountingFile {
    inner: Box<dyn crate::SourceFile>,
    reads: Arc<std::sync::atomic::AtomicUsize>,
}

impl SourceIo for CountingSource {
    fn space(&self) -> std::io::Result<crate::Space> {
        self.inner.space()
    }
    fn metadata(&self, path: &Path) -> std::io::Result<crate::FileMeta> {
        self.inner.metadata(path)
    }
    fn open(&self, path: &Path) -> std::io::Result<Box<dyn crate::SourceFile>> {
        Ok(Box::new(CountingFile { inner: self.inner.open(path)?, reads: Arc::clone(&self.reads) }))
    }
}

impl crate::SourceFile for CountingFile {
    fn meta(&self) -> &crate::FileMeta {
        self.inner.meta()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.read_at(buf, offset)
    }
}

#[test]
fn a_sample_is_one_ranged_read_of_its_shard_through_the_bounded_source() {
    let dir = tempfile::tempdir().expect("tempdir");
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    write_tar(&dir.path().join("s.tar"), &[("small.jpg", b"tiny"), ("small.cls", b"1"), ("big.jpg", &big), ("big.cls", b"1")]);
    let reads = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let inner = Arc::new(CountingSource { inner: Arc::new(LocalSource::new(dir.path()).expect("source")), reads: Arc::clone(&reads) });
    let mut shards = Shards::index_over(inner, dir.path(), vec!["s.tar".into()], 0, None, |_| {}, &AtomicBool::new(false)).expect("index");
    let catalog = shards.take_catalog().expect("catalog");
    let headers = reads.swap(0, std::sync::atomic::Ordering::SeqCst);
    // The walk: the headers and the two label members, not the 300 KB of data.
    assert!(headers <= 8, "{headers} reads to index 4 members");
    let source = crate::Source::new(shards.io(), 2, std::time::Duration::from_secs(5), 1 << 20, None).expect("source");
    for (name, want) in [("1/big.jpg", &big[..]), ("1/small.jpg", b"tiny")] {
        let path = catalog.root().join(name);
        let meta = source.metadata(&path).expect("stat");
        let (bytes, _, _) = source.read_sized(&path, meta.len()).expect("read");
        assert!(&*bytes == want, "{name}");
        assert_eq!(reads.swap(0, std::sync::atomic::Ordering::SeqCst), 1, "{name}: one pread");
    }
    source.shutdown(std::time::Duration::from_secs(1));
}

/// A moto server with bucket `wds`, and the store config of `s3://wds/train` (the server must
/// outlive it).
fn store_with_bucket() -> (crate::s3::tests::Moto, ObjectStoreConfig) {
    use crate::s3::tests::{config, Moto};
    let moto = Moto::start();
    moto.make_bucket("wds");
    let store = config(&moto, "s3://wds/train");
    (moto, store)
}

#[test]
fn shards_in_an_object_store_are_indexed_by_ranged_reads_of_their_headers_and_serve_each_sample_by_content() {
    use crate::s3::tests::{client, put};
    let (_moto, store) = store_with_bucket();
    let uploader = client(&store);
    let dir = tempfile::tempdir().expect("tempdir");
    two_shards(dir.path());
    for name in ["train-000.tar", "train-001.tar"] {
        put(&uploader, &format!("train/{name}"), &std::fs::read(dir.path().join(name)).expect("shard"));
    }
    // Beside the shards: not named by the pattern, or not directly below the prefix.
    put(&uploader, "train/val-000.tar", b"not a shard of the pattern");
    put(&uploader, "train/deeper/train-002.tar", b"below the prefix's directory");
    let kept = tempfile::tempdir().expect("tempdir");
    let index_in_store = |pattern: &str| {
        let config = ShardsConfig { pattern: pattern.to_string(), index_dir: None };
        let listed = ObjectStore::list_through(client(&store), &store, None, |_| {}, &AtomicBool::new(false)).expect("listed");
        Shards::index_listed(&config, listed, Some(kept.path()), |_| {}, &AtomicBool::new(false))
    };
    let mut shards = index_in_store("s3://wds/train/train-*.tar").expect("indexed");
    let report = shards.report().clone();
    assert_eq!((report.shards, report.samples, report.indexed, report.reused), (2, 5, 2, 0), "{report:?}");
    let catalog = shards.take_catalog().expect("catalog");
    let classes: Vec<_> = catalog.subdirs(0).map(|d| catalog.dir_name(d).to_owned()).collect();
    assert_eq!(classes, ["03", "12", "_unlabeled", "cat"]);
    let io = shards.io();
    let root = catalog.root().to_path_buf();
    for (path, want) in [("03/a.jpg", &b"A-bytes"[..]), ("03/e.jpeg", b"E-bytes"), ("12/sub%2Fdir%2Fb.jpg", b"B-bytes"), ("cat/c.png", b"C-bytes"), ("_unlabeled/d.jpg", b"D-bytes")] {
        assert_eq!(read_all(&*io, &root.join(path)), want, "{path}");
    }
    // The indexes are kept as for local shards: the next mount reads no header.
    let again = index_in_store("s3://wds/train/train-{000..001}.tar").expect("again");
    assert_eq!((again.report().reused, again.report().indexed), (2, 0));
    // A brace naming a shard the store does not hold is refused, naming it.
    let err = index_in_store("s3://wds/train/train-{000..002}.tar").err().expect("no train-002");
    assert!(err.to_string().contains("train-002.tar"), "{err}");
}

/// `shards` shards of `samples` samples each (a `.jpg` of 700-1,700 bytes and a `.cls`), in the
/// store under `train/` (`put` uploads one), and their names.
fn upload_many(put: impl Fn(&str, &[u8]), shards: usize, samples: usize) -> Vec<String> {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut names = Vec::new();
    for n in 0..shards {
        let name = format!("train-{n:03}.tar");
        let images: Vec<Vec<u8>> = (0..samples).map(|i| vec![(i % 251) as u8; 700 + (i * 37 + n) % 1000]).collect();
        let keys: Vec<(String, String)> = (0..samples).map(|i| (format!("s{n}-{i:04}.jpg"), format!("s{n}-{i:04}.cls"))).collect();
        let mut members: Vec<(&str, &[u8])> = Vec::new();
        for i in 0..samples {
            members.push((keys[i].0.as_str(), images[i].as_slice()));
            members.push((keys[i].1.as_str(), b"1".as_slice()));
        }
        write_tar(&dir.path().join(&name), &members);
        put(&format!("train/{name}"), &std::fs::read(dir.path().join(&name)).expect("shard"));
        names.push(name);
    }
    names
}

/// Indexes `names` in the store `store` through a counting source, in windows of `window`:
/// the report, and the GETs taken.
fn index_counted(store: &ObjectStoreConfig, names: &[String], window: usize) -> (ShardReport, usize) {
    use crate::s3::tests::client;
    let listed = ObjectStore::list_through(client(store), store, None, |_| {}, &AtomicBool::new(false)).expect("listed");
    let reads = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let inner = Arc::new(CountingSource { inner: listed.io(), reads: Arc::clone(&reads) });
    let shards = Shards::index_over(inner, listed.root(), names.to_vec(), window, None, |_| {}, &AtomicBool::new(false)).expect("indexed");
    (shards.report().clone(), reads.load(std::sync::atomic::Ordering::SeqCst))
}

#[test]
fn shards_in_an_object_store_are_indexed_in_a_few_large_gets_rather_than_one_per_header() {
    use crate::s3::tests::{client, put};
    let (_moto, store) = store_with_bucket();
    let uploader = client(&store);
    let names = upload_many(|key, bytes| put(&uploader, key, bytes), 2, 40);
    let (direct, direct_gets) = index_counted(&store, &names, 0);
    let (windowed, gets) = index_counted(&store, &names, STORE_WINDOW);
    assert_eq!(direct.samples, 80);
    assert_eq!((windowed.samples, windowed.bad_labels, windowed.cut_shards), (80, 0, 0), "{windowed:?}");
    assert!(direct_gets >= 2 * 80, "a GET per header and label: {direct_gets}");
    assert_eq!(gets, 2, "one GET of each shard (smaller than the window)");
    // What the mount does: the same samples, served by content.
    let listed = ObjectStore::list_through(client(&store), &store, None, |_| {}, &AtomicBool::new(false)).expect("listed");
    let config = ShardsConfig { pattern: "s3://wds/train/train-*.tar".into(), index_dir: None };
    let mut shards = Shards::index_listed(&config, listed, None, |_| {}, &AtomicBool::new(false)).expect("indexed");
    let root = shards.take_catalog().expect("catalog").root().to_path_buf();
    assert_eq!(read_all(&*shards.io(), &root.join("1/s1-0007.jpg")), vec![7u8; 700 + (7 * 37 + 1) % 1000]);
}

/// The scan's cost in GETs and seconds, a GET per header (as before the windows) against the
/// windows, for 4 shards of 500 members in moto's server on loopback:
/// `cargo test -p prepfs-core --lib -- --ignored --nocapture scan_of_shards_in_a_store_measured`.
#[test]
#[ignore = "a measurement: run it by name"]
fn scan_of_shards_in_a_store_measured() {
    use crate::s3::tests::{client, put};
    let (_moto, store) = store_with_bucket();
    let uploader = client(&store);
    let names = upload_many(|key, bytes| put(&uploader, key, bytes), 4, 250);
    for (how, window) in [("a GET per header", 0), ("8 MiB windows", STORE_WINDOW), ("a GET per header", 0), ("8 MiB windows", STORE_WINDOW)] {
        let (report, gets) = index_counted(&store, &names, window);
        eprintln!("{how}: {} shards, {} samples, {gets} GETs, {:.2} s", report.shards, report.samples, report.seconds);
    }
}
