//! Mounted end-to-end tests of the remote cache tier on a real `redis-server` and on a real
//! three-node Redis Cluster (never a mock): two mounts of one dataset share what either read, one
//! job read through two mounts is served each sample once per epoch across both, and a killed
//! server (or every node) is an outage the mount serves through, then uses again once it is back.

use crate::common;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use prepfs_test_servers::{RedisCluster, RedisServer, SharedRedis};
use common::{augmented_files, id_of_pixels, make_dataset, make_id_dataset, parse_ppm, source_bytes, write_config, Mounted};
use rand::seq::SliceRandom;
use rand::SeedableRng;

const LIMIT: Duration = Duration::from_secs(120);

/// Every file of the mount's `decoded/` view, one class directory deep, sorted.
fn decoded_files(mnt: &Mounted) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for class in fs::read_dir(mnt.path("decoded")).expect("list") {
        for f in fs::read_dir(class.expect("class").path()).expect("list") {
            files.push(f.expect("file").path());
        }
    }
    files.sort();
    files
}

/// Reads every file; returns each one's bytes by its path under the mountpoint.
fn read_all(mnt: &Mounted, files: &[PathBuf]) -> BTreeMap<PathBuf, Vec<u8>> {
    files
        .iter()
        .map(|f| {
            let bytes = fs::read(f).unwrap_or_else(|e| panic!("{}: {e}\n{}", f.display(), mnt.log()));
            (f.strip_prefix(&mnt.mountpoint).expect("under the mount").to_path_buf(), bytes)
        })
        .collect()
}

/// A private file of `bytes` at `path` (mode 0600): a deployment's secret, or a password.
fn private_file(path: &Path, bytes: &[u8]) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    fs::write(path, bytes).expect("write");
    fs::set_permissions(path, fs::Permissions::from_mode(0o600)).expect("chmod");
    path.to_path_buf()
}

/// The secret every mount of a test's deployment shares: `secret` beside the mounts' dirs.
fn shared_secret(dir: &Path) -> PathBuf {
    let parent = dir.parent().expect("a mount's dir has a parent");
    private_file(&parent.join("secret"), b"the test deployment's secret, 32")
}

/// A mount under `dir` (its own mountpoint and config) sharing the server at `url`. Memory far
/// too small for the set and no refill: every open past the first few loads from a tier below.
fn mount(dir: &Path, source: &Path, url: &str) -> Mounted {
    mount_with(dir, source, url, &format!("secret_file: {}", shared_secret(dir).display()))
}

/// [`mount`] with `remote` (`cache.remote`'s keys besides `url` and `size`).
fn mount_with(dir: &Path, source: &Path, url: &str, remote: &str) -> Mounted {
    fs::create_dir_all(dir).expect("mkdir");
    let config = write_config(
        dir,
        &format!("seed: 4\ncache:\n  memory: 1MiB\n  split: 0-50-50\n  refill: false\n  remote: {{ url: \"{url}\", size: 1GiB, {remote} }}\n"),
    );
    Mounted::start(dir, &config, source, LIMIT)
}

/// The mount's `cache.remote` figures once its queued writes are sent.
fn settled_remote(mnt: &Mounted) -> serde_json::Value {
    let started = Instant::now();
    loop {
        let stats = mnt.stats();
        let remote = stats["cache"]["remote"].clone();
        if remote["pending_writes"] == 0 {
            return remote;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "remote writes did not finish: {stats}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn count(v: &serde_json::Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} missing: {v}"))
}

#[test]
fn a_second_mount_of_the_same_dataset_reads_almost_nothing_from_the_source() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(&tmp.path().join("redis"));
    second_mount_shares(tmp.path(), &server);
}

#[test]
fn a_second_mount_sharing_a_three_node_cluster_reads_almost_nothing_from_the_source() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cluster = RedisCluster::start(&tmp.path().join("redis"));
    second_mount_shares(tmp.path(), &cluster);
    let per_node = cluster.keys_per_node();
    assert!(per_node.iter().all(|&k| k > 0), "the samples did not spread over the nodes: {per_node:?}");
}

/// Two mounts of one dataset under `tmp` sharing `server`: the second reads at most 5% of the
/// source bytes the first read, and serves the same `decoded/` bytes.
fn second_mount_shares(tmp: &Path, server: &impl SharedRedis) {
    let source = make_dataset(tmp, 2, 10, false);

    let first = mount(&tmp.join("a"), &source, &server.url());
    let files = decoded_files(&first);
    assert_eq!(files.len(), 20);
    let served_first = read_all(&first, &files);
    let first_read = source_bytes(&first);
    assert!(first_read > 0);
    let remote = settled_remote(&first);
    assert_eq!(count(&remote, "writes"), 20, "{remote}");
    assert_eq!(count(&remote, "errors"), 0, "{remote}");
    assert_eq!(remote["state"], "up", "{remote}");

    // A second mount (another machine's, standing in), while the first is still mounted.
    let second = mount(&tmp.join("b"), &source, &server.url());
    let served_second = read_all(&second, &decoded_files(&second));
    assert!(served_first == served_second, "the second mount served other bytes for decoded/");
    let second_read = source_bytes(&second);
    assert!(second_read * 20 <= first_read, "the second mount read {second_read} of the first's {first_read} source bytes");
    let stats = second.stats();
    let remote = &stats["cache"]["remote"];
    assert!(count(remote, "hits") >= 19, "{stats}");

    // The two mounts count each other (one machine: one node), and the second's plan has the
    // remote tier's terms, measured: the nodes, the link's rate, what the tier holds.
    let started = Instant::now();
    let plan = loop {
        let stats = second.stats();
        let inputs = &stats["plan"]["inputs"];
        let network = &stats["cache"]["remote"]["network"];
        if network["mounts"] == 2 && inputs["nodes"] == 1 && inputs["s_remote"] == (1u64 << 30) as f64 && inputs["t_remote"].as_f64().is_some_and(|t| t > 0.0) {
            break stats["plan"].clone();
        }
        assert!(started.elapsed() < Duration::from_secs(20), "the plan has no measured remote terms: {}", stats["plan"]);
        std::thread::sleep(Duration::from_millis(100));
    };
    let inputs = &plan["inputs"];
    assert!(inputs["b_nic"].as_f64().is_some_and(|b| b > 1e6), "loopback moves more than 1 MB/s: {plan}");
    assert!(inputs["c_nw"].as_f64().is_some_and(|c| c >= 0.0), "{plan}");
    assert!(inputs["remote_decoded"].as_f64().is_some_and(|d| d > 0.9), "the first mount kept decoded pixels there: {plan}");
    assert_eq!(stats["cache"]["remote"]["network"]["interface"], "lo", "{stats}");
    assert_eq!(remote["fingerprint"], first.stats()["cache"]["remote"]["fingerprint"]);

    // Augmented outputs are made from the shared pixels: still next to nothing from the source.
    for f in augmented_files(&second) {
        assert_eq!(fs::read(&f).expect("read").len(), 15 + 224 * 224 * 3, "{}", f.display());
    }
    let after_augmented = source_bytes(&second);
    assert!(after_augmented * 20 <= first_read, "augmented/ on the second mount read {after_augmented} source bytes");
    assert!(first.stop().success());
    assert!(second.stop().success());
}

#[test]
fn a_killed_redis_is_an_outage_the_mount_serves_through_and_a_restarted_one_is_used_again() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut server = RedisServer::start(&tmp.path().join("redis"));
    outage_served_through(tmp.path(), &mut server);
}

#[test]
fn a_killed_cluster_is_an_outage_the_mount_serves_through_and_a_restarted_one_is_used_again() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut cluster = RedisCluster::start(&tmp.path().join("redis"));
    outage_served_through(tmp.path(), &mut cluster);
}

/// A mount under `tmp` sharing `server`, which is killed halfway through a pass and restarted:
/// no read fails or changes, the outage is logged once, and sharing resumes by itself.
fn outage_served_through(tmp: &Path, server: &mut impl SharedRedis) {
    let source = make_dataset(tmp, 2, 10, false);
    let mnt = mount(&tmp.join("a"), &source, &server.url());
    let files = decoded_files(&mnt);
    let reference = read_all(&mnt, &files);
    settled_remote(&mnt);

    // Killed halfway through a pass: every read still succeeds, from the source.
    let (head, tail) = files.split_at(files.len() / 2);
    let mut served = read_all(&mnt, head);
    server.kill();
    served.extend(read_all(&mnt, tail));
    assert!(served == reference, "the outage changed what was served");
    let stats = mnt.stats();
    let remote = &stats["cache"]["remote"];
    assert!(remote["state"].as_str().is_some_and(|s| s.starts_with("down since ")), "{stats}");
    assert_eq!(count(remote, "outages"), 1, "{stats}");
    assert!(count(&stats, "source_bytes_read") > 0);
    assert_eq!((stats["source_errors"].as_u64(), stats["decode_errors"].as_u64()), (Some(0), Some(0)), "{stats}");
    // Another pass while down: logged once for the whole outage.
    read_all(&mnt, &files);
    // A shared job's opens are decided by the mount alone meanwhile: none fails.
    let job_files: Vec<PathBuf> = files.iter().map(|f| mnt.path("jobs/j").join(f.strip_prefix(&mnt.mountpoint).expect("under"))).collect();
    read_all(&mnt, &job_files);
    let job = &mnt.stats()["jobs"]["active"][0];
    assert_eq!(count(job, "decided_alone"), files.len() as u64, "{job}");
    let log = mnt.log();
    assert_eq!(log.matches("remote cache tier is down").count(), 1, "{log}");

    // Restarted (empty, on the same port): the mount reconnects within a second or so of a read.
    server.restart();
    // Nothing read meanwhile: the writer's probe brings it back.
    let started = Instant::now();
    while mnt.stats()["cache"]["remote"]["state"] != "up" {
        assert!(started.elapsed() < Duration::from_secs(10), "no reconnect: {}", mnt.stats());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(mnt.log().contains("remote cache tier is back"), "{}", mnt.log());
    // One pass fills the remote again; the next is served from it.
    read_all(&mnt, &files);
    let before = settled_remote(&mnt);
    let read_before = source_bytes(&mnt);
    let in_memory = count(&mnt.stats()["cache"]["decoded"], "entries");
    assert!(read_all(&mnt, &files) == reference);
    let after = mnt.stats();
    let hits = count(&after["cache"]["remote"], "hits") - count(&before, "hits");
    assert!(hits + in_memory >= files.len() as u64, "remote hits did not resume ({hits}, {in_memory} in memory): {after}");
    assert_eq!(source_bytes(&mnt), read_before, "{after}");
    // The job's claims go to the server again.
    read_all(&mnt, &job_files);
    let job = &mnt.stats()["jobs"]["active"][0];
    assert_eq!(count(job, "shared_claims"), files.len() as u64, "{job}");
    assert!(mnt.stop().success());
}

#[test]
fn a_job_on_another_mount_prefers_samples_the_shared_tier_holds_over_the_source() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(&tmp.path().join("redis"));
    let source = make_dataset(tmp.path(), 1, 10, false);
    let first = mount(&tmp.path().join("a"), &source, &server.url());
    let files = decoded_files(&first);
    assert_eq!(files.len(), 10);
    // The first mount reads half the class: those five are in the shared tier.
    let held = read_all(&first, &files[..5]);
    settled_remote(&first);

    let second = mount(&tmp.path().join("b"), &source, &server.url());
    let started = Instant::now();
    while count(&second.stats()["cache"]["remote"], "samples_known_held") < 5 {
        assert!(started.elapsed() < Duration::from_secs(10), "the second mount never learned what is held: {}", second.stats());
        std::thread::sleep(Duration::from_millis(50));
    }
    // A job on the second mount asks for the five the first did not read: opportunistic
    // sampling serves the held five instead, from the shared tier, reading no source byte.
    let job_dir = second.path("jobs/t/decoded");
    let class = fs::read_dir(&job_dir).expect("list").next().expect("a class").expect("entry").path();
    let mut served = Vec::new();
    for f in &files[5..] {
        let path = class.join(f.file_name().expect("name"));
        served.push(fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}\n{}", path.display(), second.log())));
    }
    assert_eq!(source_bytes(&second), 0, "the job read the source: {}", second.stats());
    for bytes in &served {
        assert!(held.values().any(|h| h == bytes), "a job served a sample the shared tier did not hold");
    }
    let distinct: std::collections::HashSet<&Vec<u8>> = served.iter().collect();
    assert_eq!(distinct.len(), 5, "a sample was served twice in one epoch");
    let stats = second.stats();
    assert!(count(&stats["cache"]["remote"], "hits") >= 5, "{stats}");
    assert!(first.stop().success());
    assert!(second.stop().success());
}

#[test]
fn one_job_read_through_two_mounts_sharing_a_server_is_served_every_sample_once_per_epoch() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(&tmp.path().join("redis"));
    one_job_across_two_mounts(tmp.path(), &server);
}

#[test]
fn one_job_read_through_two_mounts_sharing_a_three_node_cluster_is_served_every_sample_once_per_epoch() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cluster = RedisCluster::start(&tmp.path().join("redis"));
    one_job_across_two_mounts(tmp.path(), &cluster);
}

/// One job, `train`, read through two mounts sharing `server` by two readers each (a
/// data-parallel job's four ranks, each reading its quarter of a shuffled listing), two epochs
/// with the ranks meeting between them: each epoch serves every sample exactly once across all
/// four, identified by content, and each from the class directory it was asked in.
fn one_job_across_two_mounts(tmp: &Path, server: &impl SharedRedis) {
    const CLASSES: usize = 3;
    const PER_CLASS: usize = 12;
    let (source, class_of) = make_id_dataset(tmp, CLASSES, PER_CLASS);
    let secret = shared_secret(&tmp.join("a"));
    let yaml = |url: &str| format!("seed: 4\ncache:\n  memory: 64MiB\n  remote: {{ url: \"{url}\", size: 1GiB, secret_file: {} }}\n", secret.display());
    let mounts: Vec<Mounted> = ["a", "b"]
        .iter()
        .map(|m| {
            let dir = tmp.join(m);
            fs::create_dir_all(&dir).expect("mkdir");
            Mounted::start(&dir, &write_config(&dir, &yaml(&server.url())), &source, LIMIT)
        })
        .collect();
    // The job's files as each rank lists them: (class, name).
    let view = mounts[0].path("jobs/train/augmented");
    let mut files: Vec<(usize, std::ffi::OsString)> = Vec::new();
    for c in 0..CLASSES {
        let mut names: Vec<_> = fs::read_dir(view.join(format!("c{c}"))).expect("list").map(|e| e.expect("entry").file_name()).collect();
        names.sort();
        files.extend(names.into_iter().map(|n| (c, n)));
    }
    assert_eq!(files.len(), CLASSES * PER_CLASS);
    for epoch in 0..2u64 {
        let mut order = files.clone();
        order.shuffle(&mut rand_pcg::Pcg64Mcg::seed_from_u64(epoch));
        let ranks: Vec<_> = (0..4)
            .map(|rank| {
                let view = mounts[rank / 2].path("jobs/train/augmented");
                let mine: Vec<(usize, std::ffi::OsString)> = order.iter().skip(rank).step_by(4).cloned().collect();
                std::thread::spawn(move || {
                    mine.into_iter()
                        .map(|(class, name)| {
                            let path = view.join(format!("c{class}")).join(name);
                            let bytes = fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                            let (id, distance) = id_of_pixels(parse_ppm(&bytes).2);
                            assert!(distance < 12.0, "{}: no sample's colour ({distance})", path.display());
                            (class, id)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let served: Vec<(usize, usize)> = ranks.into_iter().flat_map(|r| r.join().expect("rank")).collect();
        let mut ids: Vec<usize> = served.iter().map(|&(_, id)| id).collect();
        ids.sort_unstable();
        let logs = || mounts.iter().map(Mounted::log).collect::<Vec<_>>().join("\n");
        assert_eq!(ids, (0..CLASSES * PER_CLASS).collect::<Vec<_>>(), "epoch {epoch}: not every sample exactly once\n{}", logs());
        for (class, id) in served {
            assert_eq!(class_of[id], class, "sample {id} served in class c{class}: its label changed");
        }
    }
    let mut claims = 0;
    for mnt in &mounts {
        let stats = mnt.stats();
        let job = &stats["jobs"]["active"][0];
        assert_eq!((job["name"].as_str(), job["shared"].as_bool()), (Some("train"), Some(true)), "{stats}");
        assert_eq!(job["decided_alone"], 0, "{stats}");
        claims += count(job, "shared_claims");
    }
    assert_eq!(claims, 2 * (CLASSES * PER_CLASS) as u64, "every open claimed once in the store");
    for mnt in mounts {
        assert!(mnt.stop().success());
    }
}

#[test]
fn outputs_one_mount_made_and_never_served_are_taken_by_another_once_it_unmounts() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(&tmp.path().join("redis"));
    let source = make_dataset(tmp.path(), 2, 10, false);
    // The first mount's refill makes an output for every sample (`warm`: from the mount on,
    // with no reader); no one reads them.
    let dir = tmp.path().join("a");
    fs::create_dir_all(&dir).expect("mkdir");
    let secret = shared_secret(&tmp.path().join("a"));
    let yaml = format!("seed: 4\ncache:\n  memory: 64MiB\n  split: 0-0-100\n  refill: warm\n  remote: {{ url: \"{}\", size: 1GiB, secret_file: {} }}\n", server.url(), secret.display());
    let first = Mounted::start(&dir, &write_config(&dir, &yaml), &source, LIMIT);
    let started = Instant::now();
    while count(&first.stats()["cache"]["augmented"], "entries") < 20 {
        assert!(started.elapsed() < Duration::from_secs(60), "the refill did not finish: {}", first.stats());
        std::thread::sleep(Duration::from_millis(50));
    }
    let log_path = first.stderr_path.clone();
    assert!(first.stop().success());
    let log = fs::read_to_string(log_path).unwrap_or_default();
    assert!(log.contains("unused augmented outputs offered") && log.contains("outputs=20"), "{log}");

    // The second mount (no refill, memory for nothing) is served them: use-once, no decode.
    let second = mount(&tmp.path().join("b"), &source, &server.url());
    let started = Instant::now();
    while count(&second.stats()["cache"]["remote"], "outputs_waiting") < 20 {
        assert!(started.elapsed() < Duration::from_secs(10), "{}", second.stats());
        std::thread::sleep(Duration::from_millis(50));
    }
    let files = augmented_files(&second);
    assert_eq!(files.len(), 20);
    for f in &files {
        let bytes = fs::read(f).unwrap_or_else(|e| panic!("{}: {e}\n{}", f.display(), second.log()));
        assert!(bytes.starts_with(b"P6\n224 224\n255\n") && bytes.len() == 15 + 224 * 224 * 3, "{}", f.display());
    }
    let stats = second.stats();
    assert_eq!(count(&stats["cache"]["remote"], "claims"), 20, "{stats}");
    assert_eq!(source_bytes(&second), 0, "{stats}");
    assert_eq!(count(&stats["cache"]["remote"], "outputs_waiting"), 0, "{stats}");
    // Taken once: a second pass makes its own.
    for f in &files {
        fs::read(f).expect("read");
    }
    assert_eq!(count(&second.stats()["cache"]["remote"], "claims"), 20);
    assert!(second.stop().success());
}

/// Bytes of a remote value's header (the codec's layout: `src/cache/remote/value.rs`).
const VALUE_HEADER: usize = 72;

/// The value under `key` (a whole bulk reply, however long); `None` when there is none.
fn get_value(server: &RedisServer, key: &[u8]) -> Option<Vec<u8>> {
    use std::io::{BufRead, BufReader, Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", server.port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let mut req = format!("*2\r\n$3\r\nGET\r\n${}\r\n", key.len()).into_bytes();
    req.extend_from_slice(key);
    req.extend_from_slice(b"\r\n");
    stream.write_all(&req).ok()?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let len: usize = line.trim_end().strip_prefix('$')?.parse().ok()?;
    let mut value = vec![0; len];
    reader.read_exact(&mut value).ok()?;
    Some(value)
}

/// The forgery of issue 31 (F): every pixel of a decoded value inverted, and its CRC-32
/// recomputed exactly as the codec does (over header bytes `0..32` and the payload, stored at
/// `32..36`); the FNV-1a of the key (`8..16`) is already right, the key being the same. All
/// public: what anyone who can write to the server can do.
fn invert_pixels_and_recompute_checksums(value: &[u8]) -> Vec<u8> {
    let mut v = value.to_vec();
    for b in &mut v[VALUE_HEADER..] {
        *b = !*b;
    }
    let mut crc = crc32fast::Hasher::new();
    crc.update(&v[..32]);
    crc.update(&v[VALUE_HEADER..]);
    let crc = crc.finalize().to_le_bytes();
    v[32..36].copy_from_slice(&crc);
    v
}

/// The id an id-coded sample's file is named for (`sNN.ppm`).
fn id_of_name(path: &Path) -> usize {
    let stem = path.file_stem().and_then(|s| s.to_str()).expect("a name");
    stem.trim_start_matches('s').parse().expect("sNN")
}

#[test]
fn a_forged_value_with_recomputed_checksums_is_dropped_and_counted_and_never_served() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(&tmp.path().join("redis"));
    let (source, _) = make_id_dataset(tmp.path(), 2, 6);
    let first = mount(&tmp.path().join("a"), &source, &server.url());
    let files = decoded_files(&first);
    assert_eq!(files.len(), 12);
    let truth = read_all(&first, &files);
    settled_remote(&first);
    assert!(first.stop().success());

    // Someone who can write to the server (no secret) rewrites every decoded value.
    let keys: Vec<String> = server.data_keys().into_iter().filter(|k| k.ends_with("}:d")).collect();
    assert_eq!(keys.len(), 12, "the first mount kept each sample's pixels: {:?}", server.data_keys());
    let mut forged = Vec::new();
    for key in &keys {
        let value = get_value(&server, key.as_bytes()).expect("GET");
        forged.push(invert_pixels_and_recompute_checksums(&value));
        assert!(server.command_bytes(&[b"SET", key.as_bytes(), &forged[forged.len() - 1]]).is_some_and(|r| r.starts_with(b"+OK")));
    }

    // A second mount of the deployment (the same secret) serves the true pixels, never those.
    let second = mount(&tmp.path().join("b"), &source, &server.url());
    let served = read_all(&second, &decoded_files(&second));
    assert_eq!(served.len(), 12);
    for (path, bytes) in &served {
        let (_, _, pixels) = parse_ppm(bytes);
        assert_eq!(id_of_pixels(pixels).0, id_of_name(path), "{}: forged pixels were served", path.display());
        assert!(truth[path] == *bytes, "{}: other bytes than the first mount's", path.display());
    }
    let remote = settled_remote(&second);
    assert_eq!(count(&remote, "forged"), 12, "{remote}");
    assert_eq!(count(&remote, "damaged_dropped"), 0, "{remote}");
    let metrics = fs::read_to_string(second.path(".prepfs/metrics")).expect("metrics");
    assert!(metrics.lines().any(|l| l == "prepfs_remote_forged_total 12"), "{metrics}");
    assert!(second.log().contains("fails its MAC"), "{}", second.log());
    // The forged values are gone (a squatter would keep the true ones out: writes are SET NX).
    for (key, forged) in keys.iter().zip(&forged) {
        assert!(get_value(&server, key.as_bytes()).is_none_or(|now| now != *forged), "{key}: the forged value was left");
    }
    assert!(second.stop().success());
}

#[test]
fn mounts_with_different_secrets_share_nothing_each_dropping_the_others_values() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(&tmp.path().join("redis"));
    let (source, _) = make_id_dataset(tmp.path(), 1, 6);
    let first = mount(&tmp.path().join("a"), &source, &server.url());
    let files = decoded_files(&first);
    read_all(&first, &files);
    settled_remote(&first);
    let other = private_file(&tmp.path().join("other-secret"), b"another deployment's own secret!");
    let second = mount_with(&tmp.path().join("b"), &source, &server.url(), &format!("secret_file: {}", other.display()));
    for (path, bytes) in read_all(&second, &decoded_files(&second)) {
        assert_eq!(id_of_pixels(parse_ppm(&bytes).2).0, id_of_name(&path), "{}", path.display());
    }
    let remote = settled_remote(&second);
    assert_eq!(count(&remote, "hits"), 0, "{remote}");
    assert!(count(&remote, "forged") >= 6, "each of the first mount's values is dropped: {remote}");
    assert!(source_bytes(&second) > 0);
    assert!(first.stop().success());
    assert!(second.stop().success());
}

/// Runs `prepfs mount` with `yaml` under `dir`, expecting it to refuse (within 30 s); returns
/// what it printed.
fn refused_mount(dir: &Path, source: &Path, yaml: &str) -> String {
    fs::create_dir_all(dir.join("mnt")).expect("mkdir");
    let config = write_config(dir, yaml);
    let mut child = common::mount_command(&config, source, &dir.join("mnt"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let started = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if started.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            common::force_unmount(&dir.join("mnt"));
            panic!("prepfs mounted instead of refusing");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    assert!(!out.status.success(), "prepfs mounted instead of refusing");
    String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout)
}

#[test]
fn a_mount_whose_secret_file_others_can_read_or_that_names_none_is_refused_saying_why() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = make_dataset(tmp.path(), 1, 2, false);
    let secret = private_file(&tmp.path().join("secret"), b"the test deployment's secret, 32");
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o644)).expect("chmod");
    let yaml = format!("cache:\n  remote:\n    url: \"redis://127.0.0.1:1\"\n    size: 1GiB\n    secret_file: {}\n", secret.display());
    let said = refused_mount(&tmp.path().join("a"), &source, &yaml);
    assert!(said.contains("cache.remote.secret_file") && said.contains("0644") && said.contains("group or others") && said.contains("chmod 600"), "{said}");
    let said = refused_mount(&tmp.path().join("b"), &source, "cache:\n  remote: { url: \"redis://127.0.0.1:1\", size: 1GiB }\n");
    assert!(said.contains("secret_file") && said.contains("head -c 32 /dev/urandom"), "{said}");
}

/// Whether `text` shows `secret`.
fn shows(text: &str, secret: &str) -> bool {
    text.contains(secret)
}

#[test]
fn a_server_behind_an_acl_user_is_shared_with_its_password_never_shown_and_a_wrong_one_is_a_logged_outage() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let password = "s3cret-acl-pw";
    let server = RedisServer::start_with(&tmp.path().join("redis"), |_| {
        ["--user", "app", "on", &format!(">{password}"), "~*", "&*", "+@all", "--user", "default", "off"].map(String::from).to_vec()
    });
    let source = make_dataset(tmp.path(), 1, 8, false);
    let secret = format!("secret_file: {}", shared_secret(&tmp.path().join("a")).display());
    // The password in the URL ...
    let url = format!("redis://app:{password}@127.0.0.1:{}", server.port);
    let first = mount_with(&tmp.path().join("a"), &source, &url, &secret);
    let files = decoded_files(&first);
    read_all(&first, &files);
    let remote = settled_remote(&first);
    assert_eq!((count(&remote, "writes"), count(&remote, "errors")), (8, 0), "{remote}");
    // ... or in a password file.
    let pw_file = private_file(&tmp.path().join("redis.password"), format!("{password}\n").as_bytes());
    let url_without = format!("redis://app@127.0.0.1:{}", server.port);
    let second = mount_with(&tmp.path().join("b"), &source, &url_without, &format!("{secret}, password_file: {}", pw_file.display()));
    read_all(&second, &decoded_files(&second));
    let remote = settled_remote(&second);
    assert!(count(&remote, "hits") >= 7 && count(&remote, "errors") == 0, "{remote}");
    // A wrong password: an outage, logged, and the mount serves from the source.
    let wrong = format!("redis://app:not-the-pw@127.0.0.1:{}", server.port);
    let third = mount_with(&tmp.path().join("c"), &source, &wrong, &secret);
    let started = Instant::now();
    assert_eq!(read_all(&third, &decoded_files(&third)).len(), 8);
    assert!(started.elapsed() < Duration::from_secs(30), "a wrong password hung the reads: {:?}", started.elapsed());
    let stats = third.stats();
    assert!(stats["cache"]["remote"]["state"].as_str().is_some_and(|s| s.starts_with("down since")), "{stats}");
    assert!(third.log().contains("remote cache tier is down"), "{}", third.log());
    // Nowhere shown: not in stats.json, the effective config, nor the log.
    for (mnt, secret) in [(&first, password), (&third, "not-the-pw")] {
        let config = fs::read_to_string(mnt.path(".prepfs/config.yaml")).expect("config.yaml");
        let stats = fs::read_to_string(mnt.path(".prepfs/stats.json")).expect("stats.json");
        assert!(config.contains("app:***@127.0.0.1"), "{config}");
        for (what, text) in [("config.yaml", &config), ("stats.json", &stats), ("log", &mnt.log())] {
            assert!(!shows(text, secret), "{what} shows the password: {text}");
        }
    }
    assert!(!shows(&second.log(), password) && !shows(&fs::read_to_string(second.path(".prepfs/stats.json")).expect("stats"), password));
    for m in [first, second, third] {
        assert!(m.stop().success());
    }
}

#[test]
fn two_mounts_share_a_server_over_tls_trusting_the_deployments_ca_and_one_trusting_only_the_system_roots_does_not_connect() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let pki = tmp.path().join("pki");
    fs::create_dir_all(&pki).expect("mkdir");
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl").args(args).current_dir(&pki).output().expect("openssl (is it installed?)");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    openssl(&["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=prepfs test CA"]);
    openssl(&["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1"]);
    fs::write(pki.join("ext"), "subjectAltName=IP:127.0.0.1\n").expect("ext");
    openssl(&["x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out", "server.crt", "-days", "2", "-extfile", "ext"]);
    let tls_port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port");
    let p = |f: &str| pki.join(f).display().to_string();
    let _server = RedisServer::start_with(&tmp.path().join("redis"), |_| {
        let args = ["--tls-port", &tls_port.to_string(), "--tls-cert-file", &p("server.crt"), "--tls-key-file", &p("server.key")];
        args.iter().map(|a| a.to_string()).chain(["--tls-ca-cert-file".to_string(), p("ca.crt"), "--tls-auth-clients".into(), "no".into()]).collect()
    });
    let source = make_dataset(tmp.path(), 1, 8, false);
    let url = format!("rediss://127.0.0.1:{tls_port}");
    let remote = format!("secret_file: {}, tls_ca_file: {}", shared_secret(&tmp.path().join("a")).display(), p("ca.crt"));
    let first = mount_with(&tmp.path().join("a"), &source, &url, &remote);
    read_all(&first, &decoded_files(&first));
    let stats = settled_remote(&first);
    assert_eq!((count(&stats, "writes"), count(&stats, "errors")), (8, 0), "{stats}\n{}", first.log());
    let second = mount_with(&tmp.path().join("b"), &source, &url, &remote);
    read_all(&second, &decoded_files(&second));
    let stats = settled_remote(&second);
    assert!(count(&stats, "hits") >= 7, "{stats}");
    // The same server is not trusted through the system's roots: no connection, an outage.
    let untrusting = mount_with(&tmp.path().join("c"), &source, &url, &format!("secret_file: {}", shared_secret(&tmp.path().join("a")).display()));
    read_all(&untrusting, &decoded_files(&untrusting));
    let stats = untrusting.stats();
    assert!(stats["cache"]["remote"]["state"].as_str().is_some_and(|s| s.starts_with("down since")), "{stats}");
    assert_eq!(count(&stats["cache"]["remote"], "hits"), 0);
    for m in [first, second, untrusting] {
        assert!(m.stop().success());
    }
}
