//! Mounted tests of issue 50's findings on what the mount reads from its source: a shard whose
//! tar header declares 300 MB (sparse, 16 KB on disk) costs the daemon nothing and the other
//! shards are served; a compressed shard is said to be one, and a mount of nothing fails; a
//! shard edited in place with its mtime set back is indexed again; an object store prefix
//! holding keys that cannot be path names mounts and serves the rest, the keys counted and
//! said escaped; a password in the store's endpoint is printed nowhere. The real binary runs as
//! root; what the attacker plants is `nobody`'s. Each test runs in its own directory under a
//! time limit, and the mount guard unmounts on every way out.

use crate::common;
use common::{chmod, status_bytes};

use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{add_tar_member as add, make_id_dataset, mount_command, open_tempdir, write_config, Mounted, Refused};
use prepfs_test_servers::Moto;

const LIMIT: Duration = Duration::from_secs(180);

/// `n` id-coded JPEGs of class `0`..`2` (their id the index), and their classes.
fn jpegs(dir: &Path, n: usize) -> (Vec<Vec<u8>>, Vec<usize>) {
    let (images, class_of) = make_id_dataset(dir, 3, n.div_ceil(3));
    let bytes = (0..n).map(|id| std::fs::read(images.join(format!("c{}/s{id:02}.jpg", class_of[id]))).expect("jpeg")).collect();
    (bytes, class_of[..n].to_vec())
}

/// A shard at `path` of the samples `s<id>` for `ids`, labelled by their class in `.cls`.
fn good_shard(path: &Path, jpegs: &[Vec<u8>], class_of: &[usize], ids: std::ops::Range<usize>) {
    let mut builder = tar::Builder::new(std::fs::File::create(path).expect("create"));
    for id in ids {
        add(&mut builder, &format!("s{id:02}.jpg"), &jpegs[id]);
        add(&mut builder, &format!("s{id:02}.cls"), format!("{}", class_of[id]).as_bytes());
    }
    builder.into_inner().expect("finish");
    chmod(path, 0o644);
}

/// A run directory with a config of the shards `pattern` (indexes kept in `index_dir` if given).
fn shards_config(dir: &Path, pattern: &str, index_dir: Option<&Path>) -> (PathBuf, PathBuf) {
    let run = dir.join("run");
    std::fs::create_dir_all(&run).expect("mkdir");
    chmod(&run, 0o755);
    let kept = index_dir.map_or(String::new(), |d| format!(", index_dir: {}", d.display()));
    let config = write_config(&run, &format!("seed: 3\nthreads: 2\ncache: {{ memory: 64MiB }}\nsource: {{ shards: \"{pattern}\"{kept} }}\n"));
    (run, config)
}

/// The value of `key=` in the first log line holding `what`.
fn logged_value(log: &str, what: &str, key: &str) -> Option<String> {
    let line = log.lines().find(|l| l.contains(what))?;
    let at = line.find(&format!("{key}="))? + key.len() + 1;
    Some(line[at..].split_whitespace().next()?.trim_matches('"').to_string())
}

/// The hostile shard's name: a newline and a cron line in it, which the log must print escaped.
const HOSTILE: &str = "train-001\n* * * * * root touch pwned\n.tar";
const HOSTILE_SHOWN: &str = "train-001\\n* * * * * root touch pwned\\n.tar";

#[test]
fn a_tar_header_declaring_300_mb_in_a_sparse_shard_costs_the_daemon_nothing_and_the_other_shards_are_served() {
    let dir = open_tempdir();
    let (jpegs, class_of) = jpegs(dir.path(), 6);
    let shards = dir.path().join("shards");
    std::fs::create_dir_all(&shards).expect("mkdir");
    chmod(&shards, 0o755);
    good_shard(&shards.join("train-000.tar"), &jpegs, &class_of, 0..4);

    // The attacker's shard: a sample, then a GNU long-name header (`L`) declaring 300 MB whose
    // body is a hole (the file made that long by set_len: sparse, a few KB on disk), then a
    // sample after it.
    let hostile = shards.join(HOSTILE);
    let mut builder = tar::Builder::new(std::fs::File::create(&hostile).expect("create"));
    add(&mut builder, "s04.jpg", &jpegs[4]);
    add(&mut builder, "s04.cls", format!("{}", class_of[4]).as_bytes());
    let mut file = builder.into_inner().expect("finish");
    let end = file.seek(SeekFrom::End(0)).expect("end") - 1024; // over the end-of-archive blocks
    let declared: u64 = 300_000_000;
    let mut header = tar::Header::new_gnu();
    header.set_path("././@LongLink").expect("name");
    header.set_size(declared);
    header.set_entry_type(tar::EntryType::GNULongName);
    header.set_cksum();
    file.seek(SeekFrom::Start(end)).expect("seek");
    file.write_all(header.as_bytes()).expect("header");
    let after = end + 512 + declared.div_ceil(512) * 512;
    file.set_len(after).expect("sparse");
    file.seek(SeekFrom::Start(after)).expect("seek");
    let mut builder = tar::Builder::new(file);
    add(&mut builder, "s05.jpg", &jpegs[5]);
    add(&mut builder, "s05.cls", format!("{}", class_of[5]).as_bytes());
    builder.into_inner().expect("finish");
    std::os::unix::fs::chown(&hostile, Some(65534), Some(65534)).expect("chown to nobody");
    let meta = std::fs::metadata(&hostile).expect("stat");
    assert!(meta.len() > declared && meta.blocks() * 512 < 1 << 20, "sparse: {} bytes, {} on disk", meta.len(), meta.blocks() * 512);

    let pattern = format!("{}/train-*.tar", shards.display());
    let (run, config) = shards_config(dir.path(), &pattern, None);
    let started = Instant::now();
    let mnt = Mounted::start(&run, &config, Path::new(&pattern), LIMIT);
    let up = started.elapsed();
    let peak = status_bytes(mnt.pid(), "VmHWM:");
    let log = mnt.log();
    let indexed_s: f64 = logged_value(&log, "indexed the shards", "secs").and_then(|s| s.parse().ok()).unwrap_or(f64::NAN);
    println!("300 MB `L` header shard: mount up in {:.2} s (indexing {indexed_s:.3} s), daemon peak RSS (VmHWM) {:.1} MB", up.as_secs_f64(), peak as f64 / 1e6);

    // The good shard's samples, byte for byte; the hostile shard's sample before the header too.
    for id in 0..5 {
        let path = mnt.path(&format!("encoded/{}/s{id:02}.jpg", class_of[id]));
        assert!(std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())) == jpegs[id], "s{id:02}.jpg");
    }
    assert!(!mnt.path(&format!("encoded/{}/s05.jpg", class_of[5])).exists(), "the member after the header is not served");
    // Said, naming the shard escaped: no line of the attacker's own in the log.
    let line = log.lines().find(|l| l.contains("shard has bad members")).unwrap_or_else(|| panic!("no line names the damaged shard:\n{log}"));
    assert!(line.contains(HOSTILE_SHOWN) && line.contains("300000000 bytes") && line.contains("more than the 65536 bytes"), "{line}");
    assert!(!log.lines().any(|l| l.starts_with("* * * * *")), "{log}");
    // Nothing of the header read: small and quick (it was 1.31 GB and 12 s).
    assert!(peak < 200 << 20, "daemon peak RSS {peak} bytes");
    // By count, not by the clock: the bytes the daemon has read (its /proc io's rchar, every
    // read(2) and pread(2)) are far below the 300 MB header it was told of.
    let rchar = std::fs::read_to_string(format!("/proc/{}/io", mnt.pid()))
        .expect("the daemon's io")
        .lines()
        .find_map(|l| l.strip_prefix("rchar:").and_then(|v| v.trim().parse::<u64>().ok()))
        .expect("rchar");
    assert!(rchar < 64 << 20, "the daemon read {rchar} bytes (indexing took {indexed_s} s):\n{log}");
    assert!(mnt.stop().success());
}

#[test]
fn a_compressed_shard_is_said_to_be_one_and_a_mount_of_no_indexable_shard_fails() {
    let dir = open_tempdir();
    let (jpegs, class_of) = jpegs(dir.path(), 4);
    let shards = dir.path().join("shards");
    std::fs::create_dir_all(&shards).expect("mkdir");
    chmod(&shards, 0o755);
    good_shard(&shards.join("train-000.tar"), &jpegs, &class_of, 0..2);
    good_shard(&shards.join("train-001.tar"), &jpegs, &class_of, 2..4);
    let status = Command::new("gzip").arg("-n").arg(shards.join("train-001.tar")).status().expect("gzip");
    assert!(status.success());

    // Only the compressed shard: the mount fails, non-zero, saying why and naming it.
    let pattern = format!("{}/train-001.tar.gz", shards.display());
    let (run, config) = shards_config(dir.path(), &pattern, None);
    let mnt = run.join("mnt");
    std::fs::create_dir_all(&mnt).expect("mkdir");
    let mut refused = Refused::start(mount_command(&config, Path::new(&pattern), &mnt), &mnt);
    let (status, err) = refused.wait(Duration::from_secs(60)).expect("a mount of a compressed shard only was not refused");
    drop(refused);
    println!("compressed shard only: {status}; {}", err.lines().filter(|l| l.contains("compressed")).collect::<Vec<_>>().join("\n"));
    assert!(!status.success(), "{err}");
    assert!(err.contains("train-001.tar.gz") && err.contains("compressed (gzip): compressed shards are not supported"), "{err}");
    assert!(err.contains("no shard could be indexed"), "{err}");
    assert!(!err.contains("serving 0 samples"), "{err}");

    // Beside a plain shard: the plain one is served, the compressed one said by name.
    let pattern = format!("{}/train-*", shards.display());
    let run = dir.path().join("run2");
    std::fs::create_dir_all(&run).expect("mkdir");
    let config = write_config(&run, &format!("seed: 3\nthreads: 2\ncache: {{ memory: 64MiB }}\nsource: {{ shards: \"{pattern}\" }}\n"));
    let mnt = Mounted::start(&run, &config, Path::new(&pattern), LIMIT);
    for id in 0..2 {
        assert!(std::fs::read(mnt.path(&format!("encoded/{}/s{id:02}.jpg", class_of[id]))).expect("served") == jpegs[id]);
    }
    let log = mnt.log();
    assert!(log.lines().any(|l| l.contains("shard not served") && l.contains("train-001.tar.gz") && l.contains("compressed (gzip)")), "{log}");
    assert!(mnt.stop().success());
}

#[test]
fn a_shard_edited_in_place_with_its_mtime_set_back_is_indexed_again_not_served_from_its_kept_index() {
    let dir = open_tempdir();
    let (jpegs, class_of) = jpegs(dir.path(), 3);
    let shards = dir.path().join("shards");
    std::fs::create_dir_all(&shards).expect("mkdir");
    chmod(&shards, 0o755);
    let shard = shards.join("train-000.tar");
    good_shard(&shard, &jpegs, &class_of, 0..3);
    let index_dir = dir.path().join("index");
    let pattern = format!("{}/train-000.tar", shards.display());
    let (run, config) = shards_config(dir.path(), &pattern, Some(&index_dir));
    let first = Mounted::start(&run, &config, Path::new(&pattern), LIMIT);
    assert!(std::fs::read(first.path(&format!("encoded/{}/s00.jpg", class_of[0]))).expect("s00") == jpegs[0]);
    assert!(first.stop().success());

    // In place: s00's label moved to another class and its first bytes changed (same size, same
    // inode), then the mtime set back to what it was. Only the ctime tells.
    let before = std::fs::metadata(&shard).expect("stat");
    std::thread::sleep(Duration::from_millis(20));
    let mut bytes = std::fs::read(&shard).expect("read");
    let label = bytes.windows(9).position(|w| w == b"s00.cls\0\0").expect("s00.cls's header") + 512;
    let moved = (class_of[0] + 1) % 3;
    bytes[label] = b'0' + moved as u8;
    let data = bytes.windows(9).position(|w| w == b"s00.jpg\0\0").expect("s00.jpg's header") + 512;
    bytes[data + 100..data + 108].copy_from_slice(b"EDITED!!");
    let mut file = std::fs::OpenOptions::new().write(true).open(&shard).expect("open");
    file.write_all(&bytes).expect("write in place");
    file.set_times(std::fs::FileTimes::new().set_modified(before.modified().expect("mtime"))).expect("mtime set back");
    drop(file);
    let after = std::fs::metadata(&shard).expect("stat");
    assert_eq!((after.len(), after.ino(), after.mtime(), after.mtime_nsec()), (before.len(), before.ino(), before.mtime(), before.mtime_nsec()));
    assert_ne!((after.ctime(), after.ctime_nsec()), (before.ctime(), before.ctime_nsec()));

    let second = Mounted::start(&run, &config, Path::new(&pattern), LIMIT);
    let log = second.log();
    let ready = log.lines().rev().find(|l| l.contains("shards ready")).unwrap_or_else(|| panic!("{log}"));
    assert!(ready.contains("reused=0") && ready.contains("indexed=1"), "the kept index of the edited shard was used: {ready}");
    let served = std::fs::read(second.path(&format!("encoded/{moved}/s00.jpg"))).expect("s00 under its new label");
    assert!(served == bytes[data..data + jpegs[0].len()], "the edited bytes are served");
    assert!(!second.path(&format!("encoded/{}/s00.jpg", class_of[0])).exists(), "s00 served under its old label");
    assert!(second.stop().success());
}

/// Puts `keys` into bucket `bucket` by boto3's signed PUTs, each holding `body` (keys an S3
/// client of prepfs's would never make: `..`, `//`, a tab).
fn put_keys(moto: &Moto, bucket: &str, keys: &[&str], body: &[u8]) {
    let file = tempfile::NamedTempFile::new().expect("body");
    std::fs::write(file.path(), body).expect("write");
    let script = format!(
        "import boto3, sys\ns3 = boto3.client('s3', endpoint_url='{}', region_name='us-east-1', aws_access_key_id='testing', aws_secret_access_key='testing')\nbody = open(sys.argv[1], 'rb').read()\nfor k in sys.argv[2:]:\n    s3.put_object(Bucket='{bucket}', Key=k, Body=body)\n",
        moto.endpoint()
    );
    let status = Command::new("python3").arg("-c").arg(script).arg(file.path()).args(keys).status().expect("python3");
    assert!(status.success(), "boto3's put_object of {keys:?}");
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).map(|e| e.expect("entry").file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

/// Keys below `data/` that no file can be named by.
const ODD_KEYS: &[&str] = &["data/c0/../up.jpg", "data/c0//double.jpg", "data/./c0/dot.jpg", "data/c0/t\tab.jpg", "data//lead.jpg"];

#[test]
fn an_object_store_prefix_with_keys_that_cannot_be_names_mounts_serves_the_rest_and_counts_them() {
    let dir = open_tempdir();
    let (jpegs, class_of) = jpegs(dir.path(), 4);
    let moto = Moto::start();
    moto.make_bucket("train");
    for (id, bytes) in jpegs.iter().enumerate() {
        moto.request("PUT", &format!("/train/data/c{}/s{id:02}.jpg", class_of[id]), bytes);
    }
    put_keys(&moto, "train", ODD_KEYS, &jpegs[0]);
    let run = dir.path().join("run");
    std::fs::create_dir_all(&run).expect("mkdir");
    let config = write_config(&run, &format!("seed: 5\nthreads: 2\ncache: {{ memory: 64MiB }}\nsource: {{ url: s3://train/data, endpoint: \"{}\", region: us-east-1, retry_timeout: 10s }}\n", moto.endpoint()));
    let started = Instant::now();
    let mnt = crate::s3::mount(&run, &config, "s3://train/data");
    let up = started.elapsed();
    println!("prefix with {} odd keys mounted in {:.2} s", ODD_KEYS.len(), up.as_secs_f64());
    assert!(up < Duration::from_secs(8), "the listing was retried: {up:?}");

    let mut served = 0;
    for class in names(&mnt.path("encoded")) {
        for name in names(&mnt.path(&format!("encoded/{class}"))) {
            let id: usize = name.trim_start_matches('s').trim_end_matches(".jpg").parse().unwrap_or_else(|_| panic!("{class}/{name} served"));
            assert!(std::fs::read(mnt.path(&format!("encoded/{class}/{name}"))).expect("read") == jpegs[id], "{class}/{name}");
            served += 1;
        }
    }
    assert_eq!(served, jpegs.len(), "every good object, nothing of the odd keys");
    let log = mnt.log();
    let skipped: Vec<&str> = log.lines().filter(|l| l.contains("object store key skipped")).collect();
    assert_eq!(skipped.len(), ODD_KEYS.len(), "each key said once:\n{log}");
    assert!(skipped.iter().any(|l| l.contains("data/c0/t\\tab.jpg")), "the tab escaped:\n{log}");
    assert_eq!(logged_value(&log, "object store ready", "skipped").as_deref(), Some(ODD_KEYS.len().to_string().as_str()), "{log}");
    assert!(mnt.stop().success());
}

#[test]
fn a_password_in_the_object_stores_endpoint_is_printed_nowhere() {
    let dir = open_tempdir();
    let run = dir.path().join("run");
    std::fs::create_dir_all(&run).expect("mkdir");
    let port = prepfs_test_servers::free_port();
    let config = write_config(&run, &format!("source: {{ url: s3://train/data, endpoint: \"http://prepfs:hunter2pass@127.0.0.1:{port}\", retry_timeout: 1s }}\n"));
    let mnt = run.join("mnt");
    std::fs::create_dir_all(&mnt).expect("mkdir");
    // `prepfs check` prints the effective config (what `.prepfs/config.yaml` serves).
    let out = Command::new(common::prepfs_bin()).arg("check").arg(&config).arg("--mountpoint").arg(&mnt).stdin(Stdio::null()).output().expect("prepfs check");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains(&format!("http://prepfs:***@127.0.0.1:{port}")), "{stdout}");
    assert!(!stdout.contains("hunter2pass") && !stderr.contains("hunter2pass"), "{stdout}{stderr}");
    // A mount of it (nothing listens there): its retry lines and its error name no password.
    let mut cmd = Command::new(common::prepfs_bin());
    cmd.arg("mount").arg("--config").arg(&config).arg("--mountpoint").arg(&mnt).env("PREPFS_RUN_DIR", run.join("prepfs-run"));
    cmd.env("AWS_ACCESS_KEY_ID", "testing").env("AWS_SECRET_ACCESS_KEY", "testing").env_remove("AWS_ENDPOINT_URL");
    let mut refused = Refused::start(cmd, &mnt);
    let (status, err) = refused.wait(Duration::from_secs(60)).expect("a mount of a store that does not answer was not refused");
    drop(refused);
    assert!(!status.success(), "{err}");
    assert!(err.contains("prepfs:***@") && !err.contains("hunter2pass"), "{err}");
}
