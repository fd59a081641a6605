//! Mounted tests of an S3-compatible object store as the source: the real `prepfs` binary over a
//! real S3 server on loopback (moto's, `python3 -m moto.server`, which `make test` installs),
//! holding id-coded JPEGs as `data/<class>/<file>`, read through the kernel: every object byte
//! for byte in `encoded/`, the classes listed, decodable samples of the right ids in
//! `augmented/`; and the store failing: 503 SlowDown answers and an outage shorter than the
//! retry window cost the reader nothing, one longer fails the read with EIO and a log line; an
//! object replaced after the listing is served as its new version once a read finds it; a
//! second mount serves the listing the first kept, until it is too old. And WebDataset shards
//! in the store, mounted by their pattern (`s3://train/shards/train-*.tar`): every sample served
//! byte for byte and identified by its pixels, a shard cut short serving the members before the
//! cut, the shards' indexes kept for the next mount.
//!
//! moto keeps its objects in memory, so stopping it would lose them: the outages are made by a
//! small loopback TCP forwarder of this file's own between prepfs and moto, stopped (its
//! listener closed and its connections cut: the port refuses) and started again on the same
//! port, and told to answer requests with `503 SlowDown` itself. Each test has its own server,
//! temporary directory, a mount guard that unmounts on every way out, and a time limit.

use crate::common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{add_tar_member, id_of_pixels, make_id_dataset, parse_ppm, write_config, Mounted};
use prepfs_test_servers::{free_port, Moto};

const LIMIT: Duration = Duration::from_secs(120);

/// The tests' dataset in bucket `train` under `data/`: `c0..c2`, 4 id-coded JPEGs each, and a
/// file that is no image. Returns each object's key below `data/` and bytes.
fn upload(moto: &Moto, dir: &Path) -> Vec<(String, Vec<u8>)> {
    let (images, class_of) = make_id_dataset(dir, 3, 4);
    moto.make_bucket("train");
    let mut objects = Vec::new();
    for (id, class) in class_of.iter().enumerate() {
        let rel = format!("c{class}/s{id:02}.jpg");
        objects.push((rel.clone(), std::fs::read(images.join(&rel)).expect("jpeg")));
    }
    objects.push(("c0/notes.txt".to_string(), b"not an image".to_vec()));
    for (rel, bytes) in &objects {
        moto.request("PUT", &format!("/train/data/{rel}"), bytes);
    }
    // Beside the prefix: not served.
    moto.request("PUT", "/train/other/c9/x.jpg", b"elsewhere");
    objects
}

/// A server started with the tests' dataset uploaded ([`upload`]).
fn uploaded(dir: &Path) -> (Moto, Vec<(String, Vec<u8>)>) {
    let moto = Moto::start();
    let objects = upload(&moto, dir);
    (moto, objects)
}

/// A mount's run directory, its config naming the store at `endpoint`.
fn config(dir: &Path, endpoint: &str, extra: &str) -> (PathBuf, PathBuf) {
    let run = dir.join("run");
    std::fs::create_dir_all(&run).expect("mkdir");
    let yaml = format!(
        "seed: 5\nthreads: 2\ncache: {{ memory: 64MiB }}\nsource: {{ url: s3://train/data, endpoint: \"{endpoint}\", region: us-east-1{extra} }}\n"
    );
    let config = write_config(&run, &yaml);
    (run, config)
}

/// `prepfs mount SOURCE MNT --config FILE` with moto's keys in the environment, as a user runs it.
pub(crate) fn mount(run: &Path, config: &Path, source: &str) -> Mounted {
    let mnt = run.join("mnt");
    std::fs::create_dir_all(&mnt).expect("mkdir");
    let mut cmd = Command::new(common::prepfs_bin());
    cmd.arg("mount").arg(source).arg(&mnt).arg("--config").arg(config).arg("--drain").arg("0.2");
    cmd.env("PREPFS_RUN_DIR", run.join("prepfs-run"));
    cmd.env("AWS_ACCESS_KEY_ID", "testing").env("AWS_SECRET_ACCESS_KEY", "testing").env_remove("AWS_ENDPOINT_URL").env_remove("AWS_PROFILE");
    Mounted::start_command(cmd, &mnt, &run.join("prepfs.log"), LIMIT)
}

/// Replaces the object `key` of bucket `train` with `bytes`, by a signed PUT (boto3's, which
/// moto[server] brings): once signed requests have been made, moto refuses unsigned ones.
fn replace(moto: &Moto, dir: &Path, key: &str, bytes: &[u8]) {
    let file = dir.join("replacement");
    std::fs::write(&file, bytes).expect("write");
    let script = format!(
        "import boto3, sys; boto3.client('s3', endpoint_url='http://127.0.0.1:{}', region_name='us-east-1', aws_access_key_id='testing', aws_secret_access_key='testing').put_object(Bucket='train', Key=sys.argv[1], Body=open(sys.argv[2], 'rb').read())",
        moto.port
    );
    let status = Command::new("python3").arg("-c").arg(script).arg(key).arg(&file).status().expect("python3");
    assert!(status.success(), "boto3's put_object of {key}");
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).map(|e| e.expect("entry").file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

#[test]
fn an_object_store_source_serves_every_object_byte_for_byte() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (moto, objects) = uploaded(dir.path());
    let endpoint = moto.endpoint();
    let (run, config) = config(dir.path(), &endpoint, "");
    // The URL on the command line, as `prepfs mount s3://BUCKET/PREFIX MNT`.
    let mnt = mount(&run, &config, "s3://train/data");

    // The classes from the keys' prefixes, each object under its name, as a directory would be.
    assert_eq!(names(&mnt.path("encoded")), ["c0", "c1", "c2"]);
    assert_eq!(names(&mnt.path("encoded/c0")), ["notes.txt", "s00.jpg", "s01.jpg", "s02.jpg", "s03.jpg"]);
    assert_eq!(names(&mnt.path("augmented/c1")), ["s04.ppm", "s05.ppm", "s06.ppm", "s07.ppm"]);
    let mut listed = 0;
    for class in names(&mnt.path("encoded")) {
        listed += names(&mnt.path(&format!("encoded/{class}"))).len();
    }
    assert_eq!(listed, objects.len(), "every object once, nothing from beside the prefix");

    for (rel, bytes) in &objects {
        let path = mnt.path(&format!("encoded/{rel}"));
        let served = std::fs::read(&path).unwrap_or_else(|e| panic!("encoded/{rel}: {e}"));
        assert!(&served == bytes, "encoded/{rel} is the object's bytes ({} served, {} stored)", served.len(), bytes.len());
        let meta = std::fs::metadata(&path).expect("stat");
        assert_eq!(meta.len(), bytes.len() as u64, "encoded/{rel}'s size is the listing's");
        // A readable file of the mounting user's, as the local source shows one.
        use std::os::unix::fs::MetadataExt;
        assert_eq!((meta.uid(), meta.gid(), meta.mode() & 0o7777), (nix::unistd::geteuid().as_raw(), nix::unistd::getegid().as_raw(), 0o444), "encoded/{rel}");
    }
    {
        use std::os::unix::fs::MetadataExt;
        assert_eq!(std::fs::metadata(mnt.path("encoded/c1")).expect("stat").mode() & 0o7777, 0o555);
    }
    for (id, (rel, _)) in objects.iter().enumerate().filter(|(_, (rel, _))| rel.ends_with(".jpg")) {
        let stem = rel.trim_end_matches(".jpg");
        for view in ["decoded", "augmented"] {
            let out = std::fs::read(mnt.path(&format!("{view}/{stem}.ppm"))).unwrap_or_else(|e| panic!("{view}/{stem}.ppm: {e}"));
            let (w, h, rgb) = parse_ppm(&out);
            assert!(w > 0 && h > 0);
            assert_eq!(id_of_pixels(rgb).0, id, "{view}/{stem}.ppm holds sample {id}'s pixels");
        }
    }
    // The file that is no image: in `encoded/` only.
    assert!(!mnt.path("augmented/c0/notes.ppm").exists());
    let log = mnt.log();
    assert!(log.contains("object store ready") && log.contains("keys=13"), "{log}");
    assert_eq!(mnt.stop().code(), Some(0));
}

/// How long the client tried a failed request, as its error reports it (object_store's
/// `Error performing GET <uri> in 4.01s`): the client's own clock, not the test's.
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

/// A loopback TCP forwarder between prepfs and moto that can be stopped (the port refuses),
/// started again on the same port, and told to answer requests with `503 SlowDown`.
struct Forwarder {
    port: u16,
    upstream: u16,
    state: Arc<ForwarderState>,
    accept: Option<std::thread::JoinHandle<()>>,
}

#[derive(Default)]
struct ForwarderState {
    stop: AtomicBool,
    /// Requests still to answer with 503 SlowDown, and those so answered.
    fail_next: AtomicUsize,
    failed: AtomicUsize,
    /// Connections forwarded (each its two sides), to cut when stopped.
    open: Mutex<Vec<TcpStream>>,
}

impl Forwarder {
    fn start(upstream: u16) -> Forwarder {
        let mut f = Forwarder { port: free_port(), upstream, state: Arc::new(ForwarderState::default()), accept: None };
        f.resume();
        f
    }

    /// Listens again on its port.
    fn resume(&mut self) {
        self.state.stop.store(false, Ordering::SeqCst);
        let listener = TcpListener::bind(("127.0.0.1", self.port)).expect("the forwarder's port again");
        listener.set_nonblocking(true).expect("nonblocking");
        let (state, upstream) = (Arc::clone(&self.state), self.upstream);
        self.accept = Some(std::thread::spawn(move || {
            while !state.stop.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((client, _)) => serve(client, upstream, &state),
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        }));
    }

    /// Closes its port (connections are refused) and cuts every connection it forwards.
    fn halt(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        if let Some(accept) = self.accept.take() {
            accept.join().expect("accept thread");
        }
        for stream in self.state.open.lock().expect("open").drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.halt();
    }
}

/// Forwards one connection both ways (a thread each way), or answers its first request with
/// `503 SlowDown` and closes it while `fail_next` asks for that.
fn serve(client: TcpStream, upstream: u16, state: &Arc<ForwarderState>) {
    let _ = client.set_nonblocking(false);
    if state.fail_next.load(Ordering::SeqCst) > 0 {
        state.fail_next.fetch_sub(1, Ordering::SeqCst);
        state.failed.fetch_add(1, Ordering::SeqCst);
        let mut client = client;
        let mut head = [0u8; 4096];
        let _ = client.set_read_timeout(Some(Duration::from_secs(2)));
        let _ = client.read(&mut head);
        let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>";
        let _ = write!(client, "HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
        let _ = client.shutdown(Shutdown::Both);
        return;
    }
    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else { return };
    let mut open = state.open.lock().expect("open");
    for stream in [&client, &server] {
        if let Ok(clone) = stream.try_clone() {
            open.push(clone);
        }
    }
    drop(open);
    for (mut from, mut to) in [(client.try_clone(), server.try_clone()), (server.try_clone(), client.try_clone())].into_iter().filter_map(|(a, b)| Some((a.ok()?, b.ok()?))) {
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut from, &mut to);
            let _ = to.shutdown(Shutdown::Write);
        });
    }
}

#[test]
fn a_store_that_slows_down_or_goes_away_within_the_retry_window_costs_the_reader_nothing_and_past_it_fails_with_eio() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (moto, objects) = uploaded(dir.path());
    let mut forwarder = Forwarder::start(moto.port);
    let endpoint = format!("http://127.0.0.1:{}", forwarder.port);
    // Each request retried for 4 s, within the source's timeout of 10 s.
    let (run, config) = config(dir.path(), &endpoint, ", timeout: 10, retry_timeout: 4");
    let mnt = mount(&run, &config, "s3://train/data");
    let bytes_of = |rel: &str| objects.iter().find(|(r, _)| r == rel).map(|(_, b)| b.clone()).expect("uploaded");
    let read = |rel: &str| std::fs::read(mnt.path(&format!("encoded/{rel}")));

    // 503 SlowDown three times: retried, and the reader gets the bytes.
    forwarder.state.fail_next.store(3, Ordering::SeqCst);
    assert!(read("c1/s04.jpg").expect("read through the 503s") == bytes_of("c1/s04.jpg"));
    assert_eq!(forwarder.state.failed.load(Ordering::SeqCst), 3, "each 503 was a request retried");

    // Down for 1.5 s while a read waits: it is retried until the store is back.
    forwarder.halt();
    let path = mnt.path("encoded/c1/s05.jpg");
    // The reader notes whether the store was back when its read returned: `resume` marks it
    // back before it listens again, so bytes that came through it came after that.
    let state = Arc::clone(&forwarder.state);
    let reader = std::thread::spawn(move || {
        let got = std::fs::read(path);
        (got, !state.stop.load(Ordering::SeqCst))
    });
    // The outage's length (the scenario, well within the 4 s window), not an assertion.
    std::thread::sleep(Duration::from_millis(1500));
    forwarder.resume();
    let (got, back) = reader.join().expect("reader");
    let got = got.expect("no error reaches the reader");
    assert!(got == bytes_of("c1/s05.jpg"), "the object's bytes after the outage");
    assert!(back, "the read returned while the store was down: it did not wait for the store");

    // Down past the window: EIO, a log line naming the object, and back once the store is.
    forwarder.halt();
    let err = read("c2/s08.jpg").expect_err("the store is down");
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    // Ended by the retries giving up, not by the source's timeout of 10 s (its line would say
    // so); that they gave up only after the window is the client's own report, below.
    assert!(!mnt.log().contains("did not answer within"), "the read's failure was the retries', not the source's timeout: {}", mnt.log());
    // The log says which read failed and how long it was retried. The refill reads ahead while
    // the store is down too, and such lines are written at most once a second, so the line
    // written may name another object of the prefix than the one this reader asked for.
    let log = mnt.log();
    let failed: Vec<&str> = log.lines().filter(|l| l.contains("object store read failed")).collect();
    assert!(
        failed.iter().any(|l| l.contains("s3://train/data/c") && l.contains(".jpg") && l.contains("retried for up to 4.0 s")),
        "a line naming a failed object and the retry window: {failed:?}"
    );
    // Each failed read was tried for the whole window, as the client measured it (its error
    // says how long: `Error performing GET <uri> in 4.01s`), whatever the machine's load.
    for line in &failed {
        let tried = tried_for(line).unwrap_or_else(|| panic!("the line says how long the read was tried: {line}"));
        assert!(tried >= Duration::from_secs(4), "failed before the 4 s window passed (tried for {tried:?}): {line}");
    }
    forwarder.resume();
    assert!(read("c2/s08.jpg").expect("served again") == bytes_of("c2/s08.jpg"));

    // An object replaced since the listing: the store is asked only on a read, so the cache may
    // still serve what it made of the old version (the refill works ahead); a read through
    // `encoded/` asks, and finds the change: that read fails (never the old bytes under the new
    // size, or a mix), the next open serves the new bytes, and what was made of the old version
    // is dropped (sample 3's pixels under s02's name).
    replace(&moto, dir.path(), "data/c0/s02.jpg", &bytes_of("c0/s03.jpg"));
    let err = read("c0/s02.jpg").expect_err("the handle opened as listed");
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    assert!(read("c0/s02.jpg").expect("encoded") == bytes_of("c0/s03.jpg"), "the new version's bytes");
    let out = std::fs::read(mnt.path("augmented/c0/s02.ppm")).expect("augmented of the new version");
    let (_, _, rgb) = parse_ppm(&out);
    assert_eq!(id_of_pixels(rgb).0, 3, "made of the object as it is now");
    assert!(mnt.log().contains("object changed since it was listed"), "{}", mnt.log());
    assert_eq!(mnt.stop().code(), Some(0));
}

#[test]
fn a_second_mount_serves_the_kept_listing_without_listing_the_store_until_it_is_too_old() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (moto, objects) = uploaded(dir.path());
    let endpoint = moto.endpoint();
    let kept = dir.path().join("listing");
    let (run, config) = self::config(dir.path(), &endpoint, &format!(", index_dir: \"{}\"", kept.display()));
    let mnt = mount(&run, &config, "s3://train/data");
    assert_eq!(names(&mnt.path("encoded/c1")), ["s04.jpg", "s05.jpg", "s06.jpg", "s07.jpg"]);
    assert!(mnt.log().contains("reused=false"), "{}", mnt.log());
    assert_eq!(mnt.stop().code(), Some(0));
    assert_eq!(std::fs::read_dir(&kept).expect("kept").filter(|e| e.as_ref().expect("entry").file_name().to_string_lossy().ends_with(".listing")).count(), 1, "one listing file");

    // A key added since: a mount from the kept listing does not see it (it listed nothing), and
    // serves the listed objects' bytes from the store.
    replace(&moto, dir.path(), "data/c1/late.jpg", &objects[0].1);
    let mnt = mount(&run, &config, "s3://train/data");
    assert!(mnt.log().contains("reused=true"), "{}", mnt.log());
    assert_eq!(names(&mnt.path("encoded/c1")), ["s04.jpg", "s05.jpg", "s06.jpg", "s07.jpg"]);
    let (rel, bytes) = &objects[5];
    assert!(&std::fs::read(mnt.path(&format!("encoded/{rel}"))).expect("read") == bytes);
    assert_eq!(mnt.stop().code(), Some(0));

    // Kept no longer than 0 s: the store is listed again, and the key appears.
    let (run, config) = self::config(dir.path(), &endpoint, &format!(", index_dir: \"{}\", listing_max_age: 0", kept.display()));
    let mnt = mount(&run, &config, "s3://train/data");
    assert!(mnt.log().contains("reused=false"), "{}", mnt.log());
    assert_eq!(names(&mnt.path("encoded/c1")), ["late.jpg", "s04.jpg", "s05.jpg", "s06.jpg", "s07.jpg"]);
    assert_eq!(mnt.stop().code(), Some(0));
}

/// A sample packed in a shard: its served path below `encoded/` and its id.
struct InShard {
    rel: String,
    id: usize,
    jpeg: Vec<u8>,
}

/// WebDataset shards of 18 id-coded JPEGs in 3 classes, in bucket `train` under `shards/`:
/// `train-000.tar` (ids 0-8, labels in `.cls`), `train-001.tar` (ids 9-17, labels in `.json`),
/// `train-002.tar` (cut inside its second sample's data: only `t00`, id 0 again, is served),
/// and beside them `val-000.tar`, which `train-*.tar` does not name. Returns the samples served.
fn upload_shards(moto: &Moto, dir: &Path) -> Vec<InShard> {
    let (images, class_of) = make_id_dataset(dir, 3, 6);
    let jpeg = |id: usize| std::fs::read(images.join(format!("c{}/s{id:02}.jpg", class_of[id]))).expect("jpeg");
    let shards = dir.join("shards");
    std::fs::create_dir_all(&shards).expect("mkdir");
    let mut served = Vec::new();
    for (n, ids) in [(0, 0..9), (1, 9..18)] {
        let path = shards.join(format!("train-00{n}.tar"));
        let mut tar = tar::Builder::new(std::fs::File::create(&path).expect("create"));
        for id in ids {
            let key = format!("s{id:02}");
            let class = class_of[id];
            if n == 0 {
                add_tar_member(&mut tar, &format!("{key}.jpg"), &jpeg(id));
                add_tar_member(&mut tar, &format!("{key}.cls"), format!("{class}\n").as_bytes());
            } else {
                add_tar_member(&mut tar, &format!("{key}.json"), format!("{{\"class\": {class}}}").as_bytes());
                add_tar_member(&mut tar, &format!("{key}.jpg"), &jpeg(id));
            }
            served.push(InShard { rel: format!("{class}/{key}.jpg"), id, jpeg: jpeg(id) });
        }
        tar.into_inner().expect("finish");
    }
    let cut = shards.join("train-002.tar");
    let mut tar = tar::Builder::new(std::fs::File::create(&cut).expect("create"));
    for (key, id) in [("t00", 0), ("t01", 1)] {
        add_tar_member(&mut tar, &format!("{key}.jpg"), &jpeg(id));
        add_tar_member(&mut tar, &format!("{key}.cls"), format!("{}", class_of[id]).as_bytes());
    }
    tar.into_inner().expect("finish");
    served.push(InShard { rel: format!("{}/t00.jpg", class_of[0]), id: 0, jpeg: jpeg(0) });
    let whole = std::fs::read(&cut).expect("read");
    let t01_data = whole.len() - 1024 - 1024 - jpeg(1).len().div_ceil(512) * 512;
    std::fs::write(&cut, &whole[..t01_data + 100]).expect("cut inside t01.jpg");
    std::fs::copy(shards.join("train-000.tar"), shards.join("val-000.tar")).expect("val");
    moto.make_bucket("train");
    for name in ["train-000.tar", "train-001.tar", "train-002.tar", "val-000.tar"] {
        moto.request("PUT", &format!("/train/shards/{name}"), &std::fs::read(shards.join(name)).expect("shard"));
    }
    served
}

fn files_below(dir: &Path) -> usize {
    names(dir).iter().map(|class| names(&dir.join(class)).len()).sum()
}

#[test]
fn webdataset_shards_in_an_object_store_are_mounted_by_their_pattern_and_every_sample_is_served_byte_for_byte() {
    let dir = tempfile::tempdir().expect("tempdir");
    let moto = Moto::start();
    let samples = upload_shards(&moto, dir.path());
    let run = dir.path().join("run");
    std::fs::create_dir_all(&run).expect("mkdir");
    let pattern = "s3://train/shards/train-*.tar";
    let yaml = format!(
        "seed: 5\nthreads: 2\ncache: {{ memory: 64MiB }}\nsource: {{ shards: \"{pattern}\", endpoint: \"{}\", region: us-east-1, index_dir: \"{}\" }}\n",
        moto.endpoint(),
        dir.path().join("index").display()
    );
    let config = write_config(&run, &yaml);
    // The pattern on the command line, as `prepfs mount 's3://BUCKET/PREFIX/train-*.tar' MNT`.
    let mnt = mount(&run, &config, pattern);

    // The classes from the labels; every sample once, val-000.tar's not at all.
    assert_eq!(names(&mnt.path("encoded")), ["0", "1", "2"]);
    assert_eq!(files_below(&mnt.path("encoded")), samples.len(), "t01, cut by the end of its shard, is not served");
    assert!(!mnt.path("encoded/0/t01.jpg").exists());
    for s in &samples {
        let encoded = std::fs::read(mnt.path(&format!("encoded/{}", s.rel))).unwrap_or_else(|e| panic!("encoded/{}: {e}", s.rel));
        assert!(encoded == s.jpeg, "encoded/{} is its member's bytes ({} served, {} packed)", s.rel, encoded.len(), s.jpeg.len());
        let stem = s.rel.trim_end_matches(".jpg");
        for view in ["decoded", "augmented"] {
            let out = std::fs::read(mnt.path(&format!("{view}/{stem}.ppm"))).unwrap_or_else(|e| panic!("{view}/{stem}.ppm: {e}"));
            let (w, h, rgb) = parse_ppm(&out);
            assert!(w > 0 && h > 0);
            assert_eq!(id_of_pixels(rgb).0, s.id, "{view}/{stem}.ppm holds sample {}'s pixels", s.id);
        }
    }
    let log = mnt.log();
    assert!(log.contains("shards ready") && log.contains("shards=3") && log.contains("indexed=3") && log.contains("cut_shards=1"), "{log}");
    assert!(log.contains("shard has bad members"), "the cut shard is said: {log}");
    assert_eq!(mnt.stop().code(), Some(0));

    // The next mount: the kept listing and the kept indexes, no header read again.
    let mnt = mount(&run, &config, pattern);
    let log = mnt.log();
    assert!(log.contains("reused=3") && log.contains("indexed=0"), "{log}");
    let s = &samples[12];
    assert!(std::fs::read(mnt.path(&format!("encoded/{}", s.rel))).expect("read") == s.jpeg);
    assert_eq!(mnt.stop().code(), Some(0));
}
