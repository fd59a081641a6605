//! The object store source against a real S3 server: moto's (`python3 -m moto.server`, which
//! `make test` installs; `prepfs_test_servers::Moto`), started on a loopback port of its own per
//! test and killed at the end.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use super::*;
use crate::Source;

pub use prepfs_test_servers::Moto;

pub fn config(moto: &Moto, url: &str) -> ObjectStoreConfig {
    ObjectStoreConfig::of_url(url, Some(moto.endpoint()), Some("us-east-1".into()), 2.0).expect("url")
}

pub fn client(config: &ObjectStoreConfig) -> Client {
    Client::with_keys(config, Some(("testing", "testing"))).expect("client")
}

pub fn put(client: &Client, key: &str, bytes: &[u8]) {
    let location = object_store::path::Path::from(key);
    let payload = object_store::PutPayload::from(bytes.to_vec());
    client.block_on(object_store::ObjectStore::put(&client.store, &location, payload)).expect("runtime").expect("put");
}

fn delete(client: &Client, key: &str) {
    let location = object_store::path::Path::from(key);
    client.block_on(object_store::ObjectStore::delete(&client.store, &location)).expect("runtime").expect("delete");
}

fn list(config: &ObjectStoreConfig) -> ObjectStore {
    ObjectStore::list_through(client(config), config, None, |_| {}, &AtomicBool::new(false)).expect("list")
}

/// Lists as a mount keeping its listing in `dir` does.
fn list_kept(config: &ObjectStoreConfig, dir: &Path) -> ObjectStore {
    ObjectStore::list_through(client(config), config, Some(dir), |_| {}, &AtomicBool::new(false)).expect("list")
}

/// The served files' names below the root, in the catalog's order.
fn files(store: &mut ObjectStore) -> Vec<String> {
    let catalog = store.take_catalog().expect("catalog");
    let root = store.root().to_path_buf();
    (0..catalog.file_count() as u32).map(|f| catalog.file_path(f).strip_prefix(&root).expect("under root").display().to_string()).collect()
}

/// The keys of the first test: what a directory would hold, and what it could not.
const SERVED: &[&str] = &["c0/a.jpg", "c0/b.txt", "c1/x.png", "c1/deep/y.jpg", "top.jpg", "conflict/z.jpg"];

#[test]
fn the_keys_under_the_prefix_are_served_as_the_tree_a_directory_holding_them_would_be() {
    let moto = Moto::start();
    moto.make_bucket("train");
    let config = config(&moto, "s3://train/data/");
    let uploader = client(&config);
    for (i, rel) in SERVED.iter().enumerate() {
        put(&uploader, &format!("data/{rel}"), &vec![i as u8 + 1; 100 + i]);
    }
    // A directory marker (the client reads `c0/` as `c0`) and a key that keys below it make a
    // directory, keys beside the prefix: none served.
    moto.request("PUT", "/train/data/c0/", b"");
    for key in ["data/conflict", "other/c0/no.jpg", "data2/q.jpg"] {
        put(&uploader, key, b"not served");
    }
    let mut store = list(&config);
    let catalog = store.take_catalog().expect("catalog");
    assert_eq!(store.report().files, SERVED.len());
    assert_eq!(store.report().skipped, 2, "{:?}", store.report());

    // The same tree on disk, scanned: the same catalog, file for file.
    let dir = tempfile::tempdir().expect("tempdir");
    for rel in SERVED {
        let path = dir.path().join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, b"x").expect("write");
    }
    let scanned = Catalog::scan(dir.path(), |_| {}).expect("scan");
    assert_eq!((catalog.file_count(), catalog.sample_count(), catalog.dir_count()), (scanned.file_count(), scanned.sample_count(), scanned.dir_count()));
    for f in 0..scanned.file_count() as u32 {
        let rel = |c: &Catalog, root: &Path| c.file_path(f).strip_prefix(root).expect("under root").to_path_buf();
        assert_eq!(rel(&catalog, store.root()), rel(&scanned, dir.path()), "file {f}");
    }

    // Metadata from the listing: sizes, the mounting user's, readable; directories too.
    let io = store.io();
    let root = store.root().to_path_buf();
    for (i, rel) in SERVED.iter().enumerate() {
        let meta = io.metadata(&root.join(rel)).expect("stat");
        assert_eq!((meta.len(), meta.uid, meta.gid, meta.mode, meta.is_dir), (100 + i as u64, nix::unistd::geteuid().as_raw(), nix::unistd::getegid().as_raw(), 0o644, false), "{rel}");
    }
    assert!(io.metadata(&root.join("c1/deep")).expect("dir").is_dir);
    assert!(io.metadata(&root).expect("root").is_dir);
    assert_eq!(io.metadata(&root.join("conflict/zz.jpg")).expect_err("missing").kind(), std::io::ErrorKind::NotFound);
    assert_eq!(io.open(&root.join("c1")).err().map(|e| e.kind()), Some(std::io::ErrorKind::InvalidInput));

    // Reads through the source, as a sample is read: whole, a head, a range.
    let source = Source::new(io, 2, Duration::from_secs(10), 1 << 20, None).expect("source");
    for (i, rel) in SERVED.iter().enumerate() {
        let (bytes, meta, _) = source.read_sized(&root.join(rel), 100 + i as u64).expect("read");
        assert_eq!((&bytes[..], meta.len()), (&vec![i as u8 + 1; 100 + i][..], 100 + i as u64), "{rel}");
    }
    let (head, _) = source.read_head(&root.join("c0/a.jpg"), 10).expect("head");
    assert_eq!(head, vec![1u8; 10]);
    let file = source.open(&root.join("top.jpg")).expect("open");
    assert_eq!(source.read_at(&file, 95, 50).expect("range"), vec![5u8; 9], "what is left of 104 bytes from 95");
    assert!(source.read_at(&file, 104, 50).expect("at the end").is_empty());
    source.shutdown(Duration::from_secs(2));
}

#[test]
fn an_object_replaced_since_the_listing_is_read_as_its_new_version_and_never_mixed_with_the_old() {
    let moto = Moto::start();
    moto.make_bucket("bkt");
    let config = config(&moto, "s3://bkt");
    let uploader = client(&config);
    put(&uploader, "c/a.jpg", &[1u8; 300]);
    put(&uploader, "c/gone.jpg", &[2u8; 50]);
    let store = list(&config);
    let (io, root) = (store.io(), store.root().to_path_buf());
    let listed = io.metadata(&root.join("c/a.jpg")).expect("stat");

    // Opened as listed, then replaced: the open's read fails (never the new bytes under the
    // old size), and the new version is what a stat and an open see from then on.
    let file = io.open(&root.join("c/a.jpg")).expect("open");
    put(&uploader, "c/a.jpg", &[7u8; 120]);
    let mut buf = vec![0u8; 300];
    let err = file.read_at(&mut buf, 0).expect_err("changed");
    assert_eq!(err.kind(), std::io::ErrorKind::StaleNetworkFileHandle, "{err}");
    assert_eq!(prepfs_base::errno::ToErrno::to_errno(&err), libc::EIO);
    let now = io.metadata(&root.join("c/a.jpg")).expect("stat");
    assert_eq!(now.len(), 120);
    assert_ne!(now.identity, listed.identity, "a new identity: what was made of the old version is dropped");
    let again = io.open(&root.join("c/a.jpg")).expect("open");
    assert_eq!(again.read_at(&mut buf, 0).expect("read"), 120);
    assert_eq!(&buf[..120], &[7u8; 120][..]);

    // A sample's whole read (what the cache fills from) of an object replaced meanwhile: the
    // new version, with its metadata (the reader then drops what was made of the old).
    put(&uploader, "c/a.jpg", &[9u8; 200]);
    let source = Source::new(store.io(), 2, Duration::from_secs(10), 1 << 20, None).expect("source");
    let (bytes, meta, _) = source.read_sized(&root.join("c/a.jpg"), 120).expect("read as its new version");
    assert_eq!((&bytes[..], meta.len()), (&[9u8; 200][..], 200));
    assert_eq!(source.read_head(&root.join("c/a.jpg"), 10).expect("head").0, vec![9u8; 10]);
    source.shutdown(Duration::from_secs(2));

    // Deleted since the listing: ENOENT, and gone from then on.
    delete(&uploader, "c/gone.jpg");
    let file = io.open(&root.join("c/gone.jpg")).expect("listed");
    assert_eq!(file.read_at(&mut buf, 0).expect_err("gone").kind(), std::io::ErrorKind::NotFound);
    assert_eq!(io.metadata(&root.join("c/gone.jpg")).expect_err("gone").kind(), std::io::ErrorKind::NotFound);
}

#[test]
fn a_store_that_does_not_answer_fails_the_listing_after_the_retry_window_naming_the_store() {
    // Nothing listens on this port: every try is refused, and retried for the window.
    let port = prepfs_test_servers::free_port();
    let config = ObjectStoreConfig::of_url("s3://nowhere/p", Some(format!("http://127.0.0.1:{port}")), None, 1.0).expect("url");
    let client = client(&config);
    let retries = Arc::clone(&client.retries);
    let err = ObjectStore::list_through(client, &config, None, |_| {}, &AtomicBool::new(false)).err().expect("refused");
    // Retried, and failed once the window had passed as the client itself measured it (its
    // error says how long the request was tried): counts and the client's report, not the
    // test's clock.
    let retries = retries.load(std::sync::atomic::Ordering::Relaxed);
    assert!(retries >= 1, "never retried: {err}");
    let tried = tried_for(&err.to_string()).unwrap_or_else(|| panic!("the error says how long it was tried: {err}"));
    assert!(tried >= Duration::from_secs(1), "failed before the retry window of 1 s passed: tried for {tried:?}: {err}");
    assert_eq!(err.kind(), std::io::ErrorKind::Other);
    assert!(err.to_string().contains("s3://nowhere/p") && err.to_string().contains("retried"), "{err}");
}

/// A bucket `kept` with `n` keys under `data/c<i % 3>/` and two beside the prefix.
fn kept_bucket(moto: &Moto, n: usize) -> (ObjectStoreConfig, Client) {
    moto.make_bucket("kept");
    let config = config(moto, "s3://kept/data");
    let uploader = client(&config);
    for i in 0..n {
        put(&uploader, &format!("data/c{}/s{i:02}.jpg", i % 3), &vec![i as u8; 10 + i]);
    }
    put(&uploader, "val/c0/v.jpg", b"another prefix");
    put(&uploader, "val/c1/w.jpg", b"another prefix");
    (config, uploader)
}

/// [`kept_bucket`] of `n` keys, listed once with its listing kept in a directory of its own.
struct Kept {
    moto: Moto,
    config: ObjectStoreConfig,
    uploader: Client,
    dir: tempfile::TempDir,
    first: ObjectStore,
}

fn listed_once(n: usize, max_age_s: f64) -> Kept {
    let moto = Moto::start();
    let (mut config, uploader) = kept_bucket(&moto, n);
    config.listing_max_age_s = max_age_s;
    let dir = tempfile::tempdir().expect("tempdir");
    let first = list_kept(&config, dir.path());
    assert!(!first.report().reused && first.report().kept_bytes > 0, "{:?}", first.report());
    Kept { moto, config, uploader, dir, first }
}

#[test]
fn a_second_listing_reuses_the_kept_listing_and_asks_the_store_nothing() {
    let Kept { moto, config, dir, mut first, .. } = listed_once(7, 3600.0);
    let first_files = files(&mut first);
    let first_report = first.report().clone();
    // The store gone (its port refuses): only a kept listing can answer.
    drop(moto);
    let mut second = list_kept(&config, dir.path());
    assert!(second.report().reused, "{:?}", second.report());
    assert!(second.report().age_s >= 0.0 && second.report().age_s < 60.0);
    assert_eq!(files(&mut second), first_files);
    let strip = |r: &ListingReport| (r.keys, r.files, r.skipped, r.samples, r.bytes);
    assert_eq!(strip(second.report()), strip(&first_report));
    // Metadata as listed, with no request.
    let meta = second.io().metadata(&second.root().join("c1/s04.jpg")).expect("stat");
    assert_eq!(meta.len(), 14);
}

#[test]
fn a_kept_listing_older_than_its_max_age_is_listed_again() {
    let Kept { moto: _moto, mut config, uploader, dir, .. } = listed_once(3, 0.3);
    put(&uploader, "data/c0/new.jpg", b"added since");
    std::thread::sleep(Duration::from_millis(400));
    let mut again = list_kept(&config, dir.path());
    assert!(!again.report().reused, "too old: {:?}", again.report());
    assert!(files(&mut again).contains(&"c0/new.jpg".to_string()), "the new key is listed");
    // Just written: young enough for the next listing.
    assert!(list_kept(&config, dir.path()).report().reused);
    // A max age of 0: nothing kept, nothing reused.
    config.listing_max_age_s = 0.0;
    let never = tempfile::tempdir().expect("tempdir");
    assert!(!list_kept(&config, never.path()).report().reused);
    assert!(!list_kept(&config, never.path()).report().reused);
    assert_eq!(std::fs::read_dir(never.path()).expect("dir").count(), 0, "nothing written");
}

#[test]
fn a_damaged_kept_listing_is_ignored_and_the_store_listed_again() {
    let Kept { moto: _moto, config, dir, mut first, .. } = listed_once(5, 3600.0);
    let listed = files(&mut first);
    let file = kept::file_for(dir.path(), &kept::store_of(&config));
    let bytes = std::fs::read(&file).expect("kept");
    for damaged in [bytes[..bytes.len() / 2].to_vec(), { let mut b = bytes.clone(); b[bytes.len() / 3] ^= 0x20; b }, Vec::new()] {
        std::fs::write(&file, &damaged).expect("damage");
        let mut again = list_kept(&config, dir.path());
        assert!(!again.report().reused, "never trusted");
        assert_eq!(files(&mut again), listed);
        assert_eq!(std::fs::read(&file).expect("rewritten").len(), bytes.len(), "written whole again");
    }
}

#[test]
fn a_kept_listing_of_another_prefix_is_never_used() {
    let Kept { moto, config, dir, .. } = listed_once(4, 3600.0);
    let val = self::config(&moto, "s3://kept/val");
    // The other prefix's listing put where this prefix's would be: not taken for it.
    std::fs::copy(kept::file_for(dir.path(), &kept::store_of(&config)), kept::file_for(dir.path(), &kept::store_of(&val))).expect("copy");
    let mut other = list_kept(&val, dir.path());
    assert!(!other.report().reused, "{:?}", other.report());
    assert_eq!(files(&mut other), ["c0/v.jpg", "c1/w.jpg"]);
    // Another endpoint for the same bucket and prefix is another store too.
    let mut elsewhere = config.clone();
    elsewhere.endpoint = Some(format!("http://localhost:{}", moto.port));
    assert_ne!(kept::store_of(&elsewhere), kept::store_of(&config));
}

#[test]
fn an_object_replaced_after_the_listing_was_kept_is_read_as_its_new_version_and_the_listing_made_again() {
    let Kept { moto: _moto, config, uploader, dir, .. } = listed_once(3, 3600.0);
    put(&uploader, "data/c1/s01.jpg", &[42u8; 77]);
    let store = list_kept(&config, dir.path());
    assert!(store.report().reused);
    let path = store.root().join("c1/s01.jpg");
    assert_eq!(store.io().metadata(&path).expect("stat").len(), 11, "the kept listing's size until a read asks");
    let source = Source::new(store.io(), 2, Duration::from_secs(10), 1 << 20, None).expect("source");
    let (bytes, meta, _) = source.read_sized(&path, 11).expect("read");
    assert_eq!((&bytes[..], meta.len()), (&[42u8; 77][..], 77), "the new version, never the kept one's bytes");
    source.shutdown(Duration::from_secs(2));
    // Found out of date: the next listing asks the store.
    assert!(!kept::file_for(dir.path(), &kept::store_of(&config)).exists(), "the kept listing is removed");
    assert!(!list_kept(&config, dir.path()).report().reused);
}

/// Puts `keys` (each holding its own name's bytes) into bucket `bucket` by boto3's signed PUTs
/// (keys an `object_store` client refuses to make: `..`, `//`, a tab).
fn put_odd_keys(moto: &Moto, bucket: &str, keys: &[&str]) {
    let script = format!(
        "import boto3, sys\ns3 = boto3.client('s3', endpoint_url='{}', region_name='us-east-1', aws_access_key_id='testing', aws_secret_access_key='testing')\nfor k in sys.argv[1:]:\n    s3.put_object(Bucket='{bucket}', Key=k, Body=k.encode())\n",
        moto.endpoint()
    );
    let status = std::process::Command::new("python3").arg("-c").arg(script).args(keys).status().expect("python3");
    assert!(status.success(), "boto3's put_object of {keys:?}");
}

/// The keys no file can be named by, below the prefix `data/`.
const UNNAMED: &[&str] = &["data/c0/../up.jpg", "data/c0//double.jpg", "data/./c0/dot.jpg", "data/c0/t\tab.jpg", "data//lead.jpg", "data/c1/.", "data/c1/x\x1b[2J.jpg"];

#[test]
fn keys_that_cannot_be_path_names_are_skipped_counted_and_said_and_the_rest_are_listed() {
    let moto = Moto::start();
    moto.make_bucket("odd");
    let config = config(&moto, "s3://odd/data");
    let uploader = client(&config);
    for rel in ["c0/a.jpg", "c1/b.jpg"] {
        put(&uploader, &format!("data/{rel}"), rel.as_bytes());
    }
    // A name XML escapes in a listing (`object_store`'s own PUT would percent-encode it).
    put_odd_keys(&moto, "odd", &["data/c1/amp&<>.jpg"]);
    put_odd_keys(&moto, "odd", UNNAMED);
    let mut store = list(&config);
    let report = store.report().clone();
    assert_eq!((report.keys, report.files, report.skipped), (3 + UNNAMED.len(), 3, UNNAMED.len()), "{report:?}");
    assert_eq!(files(&mut store), ["c0/a.jpg", "c1/amp&<>.jpg", "c1/b.jpg"]);
    // The rest read as ever, a name with XML's escapes in it too.
    let file = store.io().open(&store.root().join("c1/amp&<>.jpg")).expect("open");
    let mut buf = [0u8; 64];
    let n = file.read_at(&mut buf, 0).expect("read");
    assert_eq!(&buf[..n], b"data/c1/amp&<>.jpg");
    // In pages of one key (the listing's next page asked for after a page emptied of its key).
    let dir = tempfile::tempdir().expect("tempdir");
    let mut kept = list_kept(&config, dir.path());
    assert_eq!(files(&mut kept).len(), 3);
    assert_eq!(kept.report().skipped, UNNAMED.len(), "the count kept with the listing");
}

#[test]
fn a_key_is_a_name_unless_it_has_an_empty_dot_or_dot_dot_part_a_control_character_or_a_leading_slash() {
    use super::client::{key_is_name, without_unnamed_keys};
    for good in ["a", "c0/a.jpg", "c0/", "a b/é.jpg", "x/.hidden", "x/..y", "amp&<>"] {
        assert!(key_is_name(good), "{good:?}");
    }
    for bad in ["", "/", "/a", "a//b", "a/./b", "./a", "a/..", "../a", "a/b//", "t\tab", "n\nl", "e\x1b", "d\x7f", "c1\u{85}"] {
        assert!(!key_is_name(bad), "{bad:?}");
    }
    let page = "<?xml version=\"1.0\"?><ListBucketResult><IsTruncated>true</IsTruncated><Contents><Key>a/ok&amp;&lt;.jpg</Key><Size>1</Size></Contents><Contents><Key>a/&#46;&#46;/x</Key><Size>2</Size></Contents><Contents><Key>a/t&#x9;b</Key></Contents><Contents><Key>a//b</Key></Contents><NextContinuationToken>tok</NextContinuationToken></ListBucketResult>";
    let (cleaned, removed) = without_unnamed_keys(page).expect("some removed");
    assert_eq!(removed, ["a/../x", "a/t\tb", "a//b"]);
    assert_eq!(cleaned, "<?xml version=\"1.0\"?><ListBucketResult><IsTruncated>true</IsTruncated><Contents><Key>a/ok&amp;&lt;.jpg</Key><Size>1</Size></Contents><NextContinuationToken>tok</NextContinuationToken></ListBucketResult>");
    assert_eq!(without_unnamed_keys("<ListBucketResult><Contents><Key>a/b</Key></Contents></ListBucketResult>"), None, "a page of names is used as it came");
}

/// How long the client tried a failed request, as its error reports it (object_store's
/// `Error performing GET <uri> in 3.01s`): the client's own clock, not the test's.
fn tried_for(text: &str) -> Option<Duration> {
    let rest = &text[text.find("Error performing ")?..];
    let after = &rest[rest.find(" in ")? + 4..];
    let token: String = after.chars().take_while(|c| !c.is_whitespace() && *c != ',').collect();
    let (number, unit) = ["ms", "µs", "ns", "s"].iter().find_map(|u| token.strip_suffix(u).map(|n| (n, *u)))?;
    let value: f64 = number.parse().ok()?;
    let secs = match unit {
        "ms" => value / 1e3,
        "µs" => value / 1e6,
        "ns" => value / 1e9,
        _ => value,
    };
    Some(Duration::from_secs_f64(secs))
}

/// What a retry line says is left of its request's window (`retrying for up to 1.4 s more`):
/// the client's own clock at the line.
fn left_in(line: &str) -> Option<f64> {
    let after = &line[line.find("retrying for up to ")? + "retrying for up to ".len()..];
    after.split_whitespace().next()?.parse().ok()
}

/// Log lines written while `work` runs on this thread, at info and above.
fn logged<T>(work: impl FnOnce() -> T) -> (T, String) {
    #[derive(Clone, Default)]
    struct Lines(Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("lines").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let lines = Lines::default();
    let writer = lines.clone();
    let subscriber = tracing_subscriber::fmt().with_ansi(false).with_max_level(tracing::Level::INFO).with_writer(move || writer.clone()).finish();
    let out = tracing::subscriber::with_default(subscriber, work);
    let text = String::from_utf8_lossy(&lines.0.lock().expect("lines")).into_owned();
    (out, text)
}

#[test]
fn an_outage_logs_about_a_retry_line_a_second_and_a_password_in_the_endpoint_is_never_printed() {
    // Nothing listens on this port: every try is refused, and retried for the window.
    let port = prepfs_test_servers::free_port();
    let endpoint = format!("http://prepfs:hunter2pass@127.0.0.1:{port}");
    let config = ObjectStoreConfig::of_url("s3://nowhere/p", Some(endpoint), None, 3.0).expect("url");
    let client = client(&config);
    let retries = Arc::clone(&client.retries);
    let (err, log) = logged(|| ObjectStore::list_through(client, &config, None, |_| {}, &AtomicBool::new(false)).err().expect("refused"));
    let retries = retries.load(std::sync::atomic::Ordering::Relaxed);
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("retrying for up to")).collect();
    eprintln!("{retries} retries, {} lines:\n{log}\nerror: {err}", lines.len());
    // Retried, and failed once the window had passed as the client measured it (its error
    // says how long the request was tried): not the test's clock, which load stretches.
    assert!(retries >= 2, "retried for the window: {retries} retries: {err}");
    let tried = tried_for(&err.to_string()).unwrap_or_else(|| panic!("the error says how long it was tried: {err}"));
    assert!(tried >= Duration::from_secs(3), "failed before the window of 3 s passed: tried for {tried:?}");
    // Rate-limited, by count: a line per retry at most, and fewer lines than retries (the
    // limiter is shared by the process's tests: another's lines only hold back more of ours).
    assert!(!lines.is_empty() && lines.len() < retries, "{} retry lines for {retries} retries:\n{log}", lines.len());
    // About a line a second, by the client's own account: each line says what was left of the
    // request's window, and two lines written are a second apart on that clock (less the
    // line's rounding to a tenth). Load only spaces them further.
    let left: Vec<f64> = lines.iter().map(|l| left_in(l).unwrap_or_else(|| panic!("no time left in {l:?}"))).collect();
    for pair in left.windows(2) {
        assert!(pair[0] - pair[1] >= 0.8, "two retry lines {:.1} s apart on the client's clock:\n{log}", pair[0] - pair[1]);
    }
    // The password: in no line and not in the error.
    let text = err.to_string();
    assert!(!text.contains("hunter2pass") && !log.contains("hunter2pass"), "{text}\n{log}");
    // Nor in the config as printed: prepfs-core's config tests.
}
