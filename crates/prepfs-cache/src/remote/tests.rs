//! The remote tier's tests, on real `redis-server`s (one server, a cluster, one stopped).

use super::redis_server::{RedisCluster, RedisServer};
use super::*;
use super::health::utc;
use super::value::{decode_value, encode_value};

const WAIT: Duration = Duration::from_secs(10);

/// The secret the tests' mounts share.
pub fn test_key() -> ValueKey {
    ValueKey::from_secret(b"the tests' shared secret, 32 b.")
}

pub fn test_access() -> Access {
    Access::with_key(test_key())
}

fn version(len: u64) -> Identity {
    Identity { dev: 1, ino: 2, len, mtime_ns: 1_700_000_000_123_456_789, ctime_ns: 3 }
}

fn bytes(n: usize, seed: u8) -> Arc<[u8]> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect::<Vec<_>>().into()
}

fn pixels(w: u32, h: u32) -> Arc<Rgb> {
    Arc::new(Rgb { width: w, height: h, pixels: (0..w * h * 3).map(|i| (i % 251) as u8).collect() })
}

/// A tier for a dataset of `n` samples with status bytes, so it keeps the shared indexes.
fn indexed(url: &str, fingerprint: u64, recipe: u64, n: usize) -> RemoteTier {
    RemoteTier::open(url, &test_access(), 1 << 30, fingerprint, recipe, Some(Arc::new(SampleStatus::new(n)))).expect("open")
}

/// Waits until `tier` knows `n` outputs wait for a claimer (its writer reads the index once a
/// second).
fn wait_waiting(tier: &RemoteTier, n: u64) {
    let started = Instant::now();
    while tier.stats()["outputs_waiting"] != n {
        assert!(started.elapsed() < WAIT, "outputs waiting: {}", tier.stats());
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn exists(server: &RedisServer, key: &[u8]) -> bool {
    server.command_bytes(&[b"EXISTS", key]).is_some_and(|r| r.starts_with(b":1"))
}

#[test]
fn keys_name_the_dataset_the_version_and_the_form() {
    let v = version(100);
    let k = key_of(7, 0, Path::new("c0/a.jpg"), &v, RemoteKind::Decoded);
    assert_eq!(k, b"prepfs:1:{0000000000000007:100:1700000000123456789:c0/a.jpg}:d".to_vec());
    assert_ne!(k, key_of(8, 0, Path::new("c0/a.jpg"), &v, RemoteKind::Decoded), "another dataset");
    assert_ne!(k, key_of(7, 0, Path::new("c0/a.jpg"), &Identity { len: 101, ..v }, RemoteKind::Decoded), "size counts");
    assert_ne!(k, key_of(7, 0, Path::new("c0/a.jpg"), &Identity { mtime_ns: 1, ..v }, RemoteKind::Decoded), "mtime counts");
    assert_eq!(k, key_of(7, 0, Path::new("c0/a.jpg"), &Identity { ino: 9, ctime_ns: 9, dev: 9, ..v }, RemoteKind::Decoded), "inode and ctime differ across machines");
    assert_ne!(k, key_of(7, 0, Path::new("c0/a.jpg"), &v, RemoteKind::Encoded), "form counts");
    assert_eq!(k, key_of(7, 5, Path::new("c0/a.jpg"), &v, RemoteKind::Decoded), "pixels are the same for every recipe");
    let a = |recipe| key_of(7, recipe, Path::new("c0/a.jpg"), &v, RemoteKind::Augmented);
    assert_ne!(a(1), a(2), "an output names the recipe that made it");
    assert_eq!(utc(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)), "2023-11-14T22:13:20Z");
    assert_eq!(redacted("redis://user:secret@h:6379/0"), "redis://user:***@h:6379/0");
    assert_eq!(redacted("redis://h:6379"), "redis://h:6379");
}

#[test]
fn a_value_round_trips_and_every_kind_of_damage_is_refused() {
    let key = b"k".to_vec();
    let v = encode_value(&test_key(), RemoteKind::Decoded, &key, &pixels(4, 3).pixels, (4, 3));
    let ((w, h), payload) = decode_value(&test_key(), RemoteKind::Decoded, &key, v.clone()).expect("intact");
    assert_eq!(((w, h), payload), ((4, 3), pixels(4, 3).pixels.clone()));
    assert!(matches!(decode_value(&test_key(), RemoteKind::Decoded, b"other", v.clone()), Err(Damage::Key)));
    assert!(matches!(decode_value(&test_key(), RemoteKind::Encoded, &key, v.clone()), Err(Damage::Kind { found: 2, expected: 1 })));
    assert!(matches!(decode_value(&test_key(), RemoteKind::Decoded, &key, v[..HEADER_LEN - 1].to_vec()), Err(Damage::Short)));
    assert!(matches!(decode_value(&test_key(), RemoteKind::Decoded, &key, v[..v.len() - 1].to_vec()), Err(Damage::Length { .. })));
    let mut flipped = v.clone();
    flipped[HEADER_LEN + 5] ^= 0x10;
    assert!(matches!(decode_value(&test_key(), RemoteKind::Decoded, &key, flipped), Err(Damage::Checksum)));
    let mut magic = v.clone();
    magic[0] = b'X';
    assert!(matches!(decode_value(&test_key(), RemoteKind::Decoded, &key, magic), Err(Damage::Magic)));
    // Forged: the pixels changed and the CRC and key hash recomputed, as anyone can.
    let forged = forge(&v, |p| p.iter_mut().for_each(|b| *b = !*b));
    assert!(matches!(decode_value(&test_key(), RemoteKind::Decoded, &key, forged), Err(Damage::Forged)));
    let other = ValueKey::from_secret(b"another deployment's secret....");
    assert!(matches!(decode_value(&other, RemoteKind::Decoded, &key, v), Err(Damage::Forged)), "another secret's value");
}

/// `value` with `change` applied to its payload and its CRC-32 recomputed exactly as the
/// codec does (the key hash is unchanged: the key is the same): what a writer to Redis
/// without the secret can do.
fn forge(value: &[u8], change: impl Fn(&mut [u8])) -> Vec<u8> {
    let mut v = value.to_vec();
    change(&mut v[HEADER_LEN..]);
    let mut crc = crc32fast::Hasher::new();
    crc.update(&v[0..32]);
    crc.update(&v[HEADER_LEN..]);
    let crc = crc.finalize().to_le_bytes();
    v[32..36].copy_from_slice(&crc);
    v
}

#[test]
fn a_forged_value_with_recomputed_checksums_is_dropped_deleted_counted_and_written_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(dir.path());
    let writer = RemoteTier::open(&server.url(), &test_access(), 1 << 30, 1, 0, None).expect("open");
    let a = Path::new("c0/a.jpg");
    assert!(writer.put_decoded(0, a, &version(1), pixels(16, 8)));
    assert!(writer.flush(WAIT));
    let key = writer.key(a, &version(1), RemoteKind::Decoded);
    let stored = server.command_bytes(&[b"GET", &key]).expect("GET");
    // A bulk reply: `$LEN\r\n` then the value.
    let start = stored.iter().position(|&b| b == b'\n').expect("reply") + 1;
    let value = &stored[start..start + HEADER_LEN + 16 * 8 * 3];
    let forged = forge(value, |p| p.iter_mut().for_each(|b| *b = !*b));
    assert!(server.command_bytes(&[b"SET", &key, &forged]).is_some_and(|r| r.starts_with(b"+OK")));
    let reader = RemoteTier::open(&server.url(), &test_access(), 1 << 30, 1, 0, None).expect("open");
    assert!(reader.get(0, a, &version(1)).is_none(), "the forged pixels were served");
    assert!(!exists(&server, &key), "the forged value was left squatting its key");
    let stats = reader.stats();
    assert_eq!((stats["forged"].as_u64(), stats["damaged_dropped"].as_u64()), (Some(1), Some(0)), "{stats}");
    // The key is free again: the true pixels are written and served.
    assert!(reader.put_decoded(0, a, &version(1), pixels(16, 8)));
    assert!(reader.flush(WAIT));
    assert!(matches!(writer.get(0, a, &version(1)), Some(LowerHit::Pixels(p)) if p.pixels == pixels(16, 8).pixels));
}

#[test]
fn mounts_with_different_secrets_do_not_share_each_drops_the_others_values() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(dir.path());
    let ours = RemoteTier::open(&server.url(), &test_access(), 1 << 30, 1, 0, None).expect("open");
    let theirs = Access::with_key(ValueKey::from_secret(b"another deployment's secret...."));
    let stranger = RemoteTier::open(&server.url(), &theirs, 1 << 30, 1, 0, None).expect("open");
    let (a, b) = (Path::new("a.jpg"), Path::new("b.jpg"));
    assert!(ours.put_encoded(0, a, &version(1), bytes(1_000, 1)));
    assert!(stranger.put_encoded(0, b, &version(2), bytes(1_000, 2)));
    assert!(ours.flush(WAIT) && stranger.flush(WAIT));
    assert!(stranger.get(0, a, &version(1)).is_none(), "another secret's mount served ours");
    assert!(ours.get(0, b, &version(2)).is_none(), "we served another secret's value");
    assert_eq!((ours.stats()["forged"].as_u64(), stranger.stats()["forged"].as_u64()), (Some(1), Some(1)));
}

#[test]
fn what_is_put_is_got_back_from_a_real_redis_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(dir.path());
    let tier = RemoteTier::open(&server.url(), &test_access(), 1 << 30, 42, 0, None).expect("open");
    let (a, b) = (Path::new("c0/a.jpg"), Path::new("c1/b.jpg"));
    assert!(tier.get(0, a, &version(10_000)).is_none());
    assert!(tier.put_encoded(0, a, &version(10_000), bytes(10_000, 1)));
    assert!(tier.put_decoded(0, b, &version(500), pixels(33, 17)));
    assert!(tier.flush(WAIT));
    match tier.get(0, a, &version(10_000)) {
        Some(LowerHit::Bytes(got)) => assert_eq!(&got[..], &bytes(10_000, 1)[..]),
        _ => panic!("encoded value missing"),
    }
    match tier.get(0, b, &version(500)) {
        Some(LowerHit::Pixels(p)) => assert_eq!((p.width, p.height, &p.pixels), (33, 17, &pixels(33, 17).pixels)),
        _ => panic!("decoded value missing"),
    }
    assert!(tier.get(0, a, &version(10_001)).is_none(), "another version of the file misses");
    // Another mount of the same dataset shares; another dataset does not see them.
    let same = RemoteTier::open(&server.url(), &test_access(), 1 << 30, 42, 0, None).expect("open");
    assert!(same.get(0, a, &version(10_000)).is_some());
    let other = RemoteTier::open(&server.url(), &test_access(), 1 << 30, 43, 0, None).expect("open");
    assert!(other.get(0, a, &version(10_000)).is_none());
    let stats = tier.stats();
    assert_eq!((stats["hits"].as_u64(), stats["misses"].as_u64(), stats["writes"].as_u64()), (Some(2), Some(2), Some(2)));
    assert_eq!(stats["bytes_written"], (10_000 + 33 * 17 * 3 + 2 * HEADER_LEN) as u64);
    assert_eq!(stats["state"], "up");
}

/// Waits until `tier` counts `mounts` mounts and its gauge gives the planner a network.
fn wait_network(tier: &RemoteTier, mounts: u64) -> Network {
    let started = Instant::now();
    loop {
        if let Some(network) = tier.gauge().network().filter(|_| tier.stats()["network"]["mounts"] == mounts) {
            return network;
        }
        assert!(started.elapsed() < WAIT, "network: {}", tier.stats()["network"]);
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn mounts_sharing_a_server_count_each_other_and_their_machine_measure_the_link_and_leave() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(dir.path());
    let first = RemoteTier::open(&server.url(), &test_access(), 1 << 30, 42, 0, None).expect("open");
    let second = RemoteTier::open(&server.url(), &test_access(), 1 << 30, 42, 0, None).expect("open");
    let other_dataset = RemoteTier::open(&server.url(), &test_access(), 1 << 30, 43, 0, None).expect("open");
    let network = wait_network(&first, 2);
    assert_eq!(network.nodes, 1, "two mounts of one machine are one node");
    // Loopback moves far more than a megabyte a second; its other traffic cannot be negative.
    assert!(network.b_nic > 1e6 && network.c_nw >= 0.0, "{network:?}");
    wait_network(&other_dataset, 1);
    let stats = first.stats()["network"].clone();
    assert_eq!(stats["interface"], "lo", "{stats}");
    assert!(stats["bytes_received"].as_u64().is_some_and(|b| b >= 64 << 10), "the probe's reads are counted: {stats}");
    second.close();
    wait_network(&first, 1);
    // No probe value is left on the server.
    let keys = server.command(&["KEYS", "prepfs:1:*:probe:*"]).expect("KEYS");
    assert!(!String::from_utf8_lossy(&keys).contains("probe"), "{}", String::from_utf8_lossy(&keys));
    // Nothing written yet: the planner is not told what the tier holds of a sample.
    assert!(first.gauge().entries().is_none());
    assert!(first.put_decoded(0, Path::new("c0/a.jpg"), &version(500), pixels(10, 10)));
    assert!(first.put_encoded(1, Path::new("c0/b.jpg"), &version(500), bytes(500, 1)));
    assert!(first.flush(WAIT));
    let (mean, decoded) = first.gauge().entries().expect("two writes");
    assert_eq!((mean, decoded), ((300.0 + 500.0) / 2.0 + HEADER_LEN as f64, 0.5));
}

#[test]
fn over_a_three_node_cluster_values_spread_across_nodes_round_trip_and_claims_stay_use_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = RedisCluster::start(dir.path());
    let n = 60u64;
    let tier = indexed(&cluster.url(), 42, 0, n as usize);
    let rel = |i: u64| format!("c{}/{i}.jpg", i % 3);
    for i in 0..n {
        assert!(tier.put_encoded(i as FileId, Path::new(&rel(i)), &version(i), bytes(2_000, i as u8)));
        assert!(tier.put_augmented(i as FileId, Path::new(&rel(i)), &version(i), bytes(300, i as u8)));
    }
    assert!(tier.flush(WAIT));
    let stats = tier.stats();
    assert_eq!(stats["writes"], 2 * n, "{stats}");
    assert_eq!(stats["state"], "up", "{stats}");
    let per_node = cluster.keys_per_node();
    assert_eq!(per_node.iter().sum::<u64>(), 2 * n + 2, "the values and the two indexes");
    assert!(per_node.iter().all(|&k| k > 0), "the keys did not spread over the nodes: {per_node:?}");
    // Another mount of the same dataset reads them all back, each from the node of its slot.
    let other = indexed(&cluster.url(), 42, 0, n as usize);
    wait_waiting(&other, n);
    for i in 0..n {
        match other.get(0, Path::new(&rel(i)), &version(i)) {
            Some(LowerHit::Bytes(got)) => assert_eq!(&got[..], &bytes(2_000, i as u8)[..], "{}", rel(i)),
            _ => panic!("{}: missing on the cluster", rel(i)),
        }
    }
    // Claims: each output exactly once, whichever mount asks first.
    let mut claimed = 0;
    for i in 0..n {
        let (path, v) = (rel(i), version(i));
        let first = if i % 2 == 0 { &tier } else { &other };
        let second = if i % 2 == 0 { &other } else { &tier };
        let id = i as FileId;
        assert!(first.claim_augmented(id, Path::new(&path), &v).is_some_and(|b| b[..] == bytes(300, i as u8)[..]));
        assert!(second.claim_augmented(id, Path::new(&path), &v).is_none(), "{path} claimed twice");
        claimed += 1;
    }
    assert_eq!(claimed, n);
    assert_eq!(cluster.keys_per_node().iter().sum::<u64>(), n + 2, "claimed outputs are gone");
    wait_waiting(&tier, 0);
}

#[test]
fn a_cluster_whose_nodes_are_all_down_is_an_outage_noticed_within_the_timeouts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cluster = RedisCluster::start(dir.path());
    let tier = RemoteTier::open(&cluster.url(), &test_access(), 1 << 30, 9, 0, None).expect("open");
    assert!(tier.put_encoded(0, Path::new("a.jpg"), &version(1), bytes(100, 1)));
    assert!(tier.flush(WAIT));
    for node in &mut cluster.nodes {
        node.kill();
    }
    let started = Instant::now();
    assert!(tier.get(0, Path::new("a.jpg"), &version(1)).is_none());
    // A guard against a hang (the tier's timeouts are a second or two; a refused node answers at
    // once), not a timing window: the outage itself is the assertion below.
    assert!(started.elapsed() < Duration::from_secs(30), "a lookup against a dead cluster hung for {:?}", started.elapsed());
    assert!(!tier.is_up(), "{}", tier.stats());
    assert_eq!(tier.stats()["outages"], 1);
}

#[test]
fn what_one_mount_wrote_is_marked_held_in_the_other_mounts_status_within_a_second() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(dir.path());
    let (mine, theirs) = (Arc::new(SampleStatus::new(40)), Arc::new(SampleStatus::new(40)));
    let writer = RemoteTier::open(&server.url(), &test_access(), 1 << 30, 7, 0, Some(Arc::clone(&mine))).expect("open");
    let _reader = RemoteTier::open(&server.url(), &test_access(), 1 << 30, 7, 0, Some(Arc::clone(&theirs))).expect("open");
    for id in [3u32, 17, 38] {
        assert!(writer.put_encoded(id, Path::new(&format!("c/{id}.jpg")), &version(u64::from(id)), bytes(500, 1)));
    }
    // An augmented output is use-once, not a held sample: it is indexed as waiting.
    assert!(writer.put_augmented(5, Path::new("c/5.jpg"), &version(5), bytes(500, 1)));
    assert!(writer.flush(WAIT));
    let held = |s: &SampleStatus| (0..40).filter(|&i| s.held(i) & crate::HELD_REMOTE != 0).collect::<Vec<_>>();
    assert_eq!(held(&mine), vec![3, 17, 38], "the writer's own status");
    let started = Instant::now();
    while held(&theirs) != vec![3, 17, 38] {
        // A hang guard: the index is read at most once a HELD_READ_EVERY.
        assert!(started.elapsed() < Duration::from_secs(30), "the other mount never learned: {:?}", held(&theirs));
        std::thread::sleep(Duration::from_millis(50));
    }
    // Another dataset's mount learns nothing of them: once it has learned a sample of its own
    // dataset written after them (so it has read the shared index since), it holds that one only.
    let stranger = Arc::new(SampleStatus::new(40));
    let _other = RemoteTier::open(&server.url(), &test_access(), 1 << 30, 8, 0, Some(Arc::clone(&stranger))).expect("open");
    let its_own = RemoteTier::open(&server.url(), &test_access(), 1 << 30, 8, 0, Some(Arc::new(SampleStatus::new(40)))).expect("open");
    assert!(its_own.put_encoded(21, Path::new("c/21.jpg"), &version(21), bytes(500, 1)));
    assert!(its_own.flush(WAIT));
    let started = Instant::now();
    while held(&stranger).is_empty() {
        assert!(started.elapsed() < Duration::from_secs(30), "the stranger never read its own dataset's index");
        std::thread::sleep(HELD_READ_EVERY / 4);
    }
    assert_eq!(held(&stranger), vec![21], "the other dataset's samples are not the stranger's");
}

#[test]
fn a_damaged_value_is_deleted_and_never_served() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(dir.path());
    let tier = RemoteTier::open(&server.url(), &test_access(), 1 << 30, 1, 0, None).expect("open");
    let (a, b) = (Path::new("a.jpg"), Path::new("b.jpg"));
    assert!(tier.put_encoded(0, a, &version(1), bytes(5_000, 1)));
    assert!(tier.put_encoded(0, b, &version(2), bytes(5_000, 2)));
    assert!(tier.flush(WAIT));
    // Garbage over a's value; b's intact value copied under a third key.
    let ka = tier.key(a, &version(1), RemoteKind::Encoded);
    let garbage = vec![0x5a_u8; 5_040];
    assert!(server.command_bytes(&[b"SET", &ka, &garbage]).is_some_and(|r| r.starts_with(b"+OK")));
    let kb = tier.key(b, &version(2), RemoteKind::Encoded);
    let kc = tier.key(Path::new("c.jpg"), &version(2), RemoteKind::Encoded);
    assert!(server.command_bytes(&[b"COPY", &kb, &kc]).is_some_and(|r| r.starts_with(b":1")));
    assert!(tier.get(0, a, &version(1)).is_none(), "garbage was served");
    assert!(!exists(&server, &ka), "the damaged value was not deleted");
    assert!(tier.get(0, Path::new("c.jpg"), &version(2)).is_none(), "a value under another key was served");
    assert!(!exists(&server, &kc));
    assert!(matches!(tier.get(0, b, &version(2)), Some(LowerHit::Bytes(got)) if got[..] == bytes(5_000, 2)[..]));
    assert_eq!(tier.stats()["damaged_dropped"], 2);
}

#[test]
fn two_concurrent_claimers_of_one_augmented_output_never_both_get_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(dir.path());
    let url = server.url();
    let rounds = 40u64;
    let writer = indexed(&url, 5, 1, rounds as usize);
    for i in 0..rounds {
        let rel = format!("c/{i}.jpg");
        assert!(writer.put_augmented(i as FileId, Path::new(&rel), &version(i), bytes(1_000, i as u8)));
    }
    assert!(writer.flush(WAIT));
    // A mount of another recipe (other augmentations) sees none of them waiting.
    let stranger = indexed(&url, 5, 2, rounds as usize);
    // Two mounts (two tiers, their own connections) claim every output at once.
    let claimers: Vec<Arc<RemoteTier>> = (0..2).map(|_| Arc::new(indexed(&url, 5, 1, rounds as usize))).collect();
    for claimer in &claimers {
        wait_waiting(claimer, rounds);
    }
    assert_eq!(stranger.stats()["outputs_waiting"], 0);
    assert!(stranger.claim_augmented(0, Path::new("c/0.jpg"), &version(0)).is_none());
    let barrier = Arc::new(std::sync::Barrier::new(2));
    let threads: Vec<_> = claimers
        .iter()
        .map(|tier| {
            let (tier, barrier) = (Arc::clone(tier), Arc::clone(&barrier));
            std::thread::spawn(move || {
                (0..rounds)
                    .map(|i| {
                        barrier.wait();
                        let rel = format!("c/{i}.jpg");
                        tier.claim_augmented(i as FileId, Path::new(&rel), &version(i)).map(|got| {
                            assert_eq!(&got[..], &bytes(1_000, i as u8)[..]);
                        })
                    })
                    .map(|got| got.is_some())
                    .collect::<Vec<bool>>()
            })
        })
        .collect();
    let won: Vec<Vec<bool>> = threads.into_iter().map(|t| t.join().expect("claimer")).collect();
    for (i, (a, b)) in won[0].iter().zip(&won[1]).enumerate() {
        assert!(a ^ b, "output {i}: claimed by {} readers", u8::from(*a) + u8::from(*b));
    }
    assert_eq!(server.data_keys().len(), 1, "every claimed output is gone (the index stays)");
    assert_eq!(server.command(&["BITCOUNT", "prepfs:1:{0000000000000005}:waiting:0000000000000001"]).expect("bitcount"), b":0\r\n".to_vec());
    // A later output for the same sample is a fresh one, offered again.
    assert!(writer.put_augmented(0, Path::new("c/0.jpg"), &version(0), bytes(1_000, 99)));
    assert!(writer.flush(WAIT));
    wait_waiting(&claimers[0], 1);
    assert!(claimers[0].claim_augmented(0, Path::new("c/0.jpg"), &version(0)).is_some_and(|b| b[..] == bytes(1_000, 99)[..]));
}

#[test]
fn writes_stop_at_the_size() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(dir.path());
    // Room for about 3 values of 100 KB. (The server's own used_memory, ~1 MB empty, is
    // within a size of 10 MB; here the running count is what stops the writes.)
    let tier = RemoteTier::open(&server.url(), &test_access(), 10 << 20, 9, 0, None).expect("open");
    for i in 0..300u64 {
        let rel = format!("{i}.jpg");
        tier.put_encoded(0, Path::new(&rel), &version(i), bytes(100_000, i as u8));
        assert!(tier.flush(WAIT));
    }
    let stats = tier.stats();
    let written = stats["bytes_written"].as_u64().expect("bytes_written");
    assert!(written <= 10 << 20, "{stats}");
    assert!(written > 5 << 20, "{stats}");
    assert!(stats["over_size"].as_u64() > Some(0), "{stats}");
}

#[test]
fn a_killed_server_is_an_outage_logged_once_and_a_restarted_one_is_used_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = RedisServer::start(dir.path());
    let tier = RemoteTier::open(&server.url(), &test_access(), 1 << 30, 3, 0, None).expect("open");
    let a = Path::new("a.jpg");
    assert!(tier.put_encoded(0, a, &version(1), bytes(1_000, 1)));
    assert!(tier.flush(WAIT));
    assert!(tier.get(0, a, &version(1)).is_some());
    server.kill();
    let started = Instant::now();
    assert!(tier.get(0, a, &version(1)).is_none());
    // A hang guard (a refused connection answers at once; the tier's timeout is 200 ms), not a
    // timing window: the outage noticed is the assertion below.
    assert!(started.elapsed() < Duration::from_secs(30), "a lookup against a dead server hung for {:?}", started.elapsed());
    assert!(!tier.is_up());
    let stats = tier.stats();
    assert!(stats["state"].as_str().is_some_and(|s| s.starts_with("down since ")), "{stats}");
    // While down, calls cost nothing: no connection is tried but the one probe a RETRY_EVERY
    // (counted, not timed: the skips and the errors say what was tried).
    let (skipped, errors) = (tier.stats()["skipped_while_down"].as_u64().expect("skipped"), tier.stats()["errors"].as_u64().expect("errors"));
    let started = Instant::now();
    for _ in 0..1000 {
        assert!(tier.get(0, a, &version(1)).is_none());
    }
    let probes = (started.elapsed().as_millis() / RETRY_EVERY.as_millis() + 1) as u64;
    let stats = tier.stats();
    assert!(stats["skipped_while_down"].as_u64().expect("skipped") - skipped >= 1000 - probes, "{stats}");
    assert!(stats["errors"].as_u64().expect("errors") - errors <= probes, "{stats}");
    assert!(!tier.put_encoded(0, a, &version(1), bytes(1_000, 1)), "no write is queued while down");
    assert_eq!(tier.stats()["outages"], 1);
    server.restart();
    let started = Instant::now();
    while !tier.is_up() {
        // A hang guard: the tier probes once a RETRY_EVERY; the reconnect is the event.
        assert!(started.elapsed() < Duration::from_secs(30), "no reconnect");
        tier.get(0, a, &version(1));
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(tier.put_encoded(0, a, &version(1), bytes(1_000, 1)));
    assert!(tier.flush(WAIT));
    assert!(tier.get(0, a, &version(1)).is_some(), "hits resume");
    assert_eq!(tier.stats()["outages"], 1);
    assert_eq!(tier.stats()["state"], "up");
}
