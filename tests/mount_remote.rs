//! Mounted end-to-end tests of the remote cache tier on a real `redis-server` and on a real
//! three-node Redis Cluster (never a mock): two mounts of one dataset share what either read, one
//! job read through two mounts is served each sample once per epoch across both, and a killed
//! server (or every node) is an outage the mount serves through, then uses again once it is back.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::redis_server::{RedisCluster, RedisServer, SharedRedis};
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

/// A mount under `dir` (its own mountpoint and config) sharing the server at `url`. Memory far
/// too small for the set and no refill: every open past the first few loads from a tier below.
fn mount(dir: &Path, source: &Path, url: &str) -> Mounted {
    fs::create_dir_all(dir).expect("mkdir");
    let config = write_config(
        dir,
        &format!("seed: 4\ncache:\n  memory: 1MiB\n  split: 0-50-50\n  refill: false\n  remote: {{ url: \"{url}\", size: 1GiB }}\n"),
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
    let yaml = |url: &str| format!("seed: 4\ncache:\n  memory: 64MiB\n  remote: {{ url: \"{url}\", size: 1GiB }}\n");
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
    // The first mount's refill makes an output for every sample; no one reads them.
    let dir = tmp.path().join("a");
    fs::create_dir_all(&dir).expect("mkdir");
    let yaml = format!("seed: 4\ncache:\n  memory: 64MiB\n  split: 0-0-100\n  remote: {{ url: \"{}\", size: 1GiB }}\n", server.url());
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
