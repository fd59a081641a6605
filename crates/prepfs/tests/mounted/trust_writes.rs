//! Mounted tests of what the mount writes outside itself (issue 50, findings 1, 2, 4 and 6): the
//! real binary as root, the attacker `nobody`, `fs.protected_symlinks` 0 for the test. Each
//! plants what the finding planted and checks that nothing planted is followed, read or
//! trusted, that root's victim files are unchanged byte for byte, and that what the mount keeps
//! is private. Each runs in its own temporary directory under a time limit; the mount guard
//! unmounts on every way out.

use crate::common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{add_tar_member, as_nobody, make_dataset, make_id_dataset, mount_command, nobody_reads, open_tempdir, write_config, Mounted, Refused, SymlinksUnprotected};

const LIMIT: Duration = Duration::from_secs(120);

/// A root-owned 0600 file with known bytes: what a planted link points at.
fn victim(dir: &Path, name: &str) -> (PathBuf, Vec<u8>) {
    let path = dir.join(name);
    let bytes = b"root's own: 0 0 * * * nothing to see\n".to_vec();
    std::fs::write(&path, &bytes).expect("victim");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    (path, bytes)
}

/// Makes `path` as nobody (the attacker's directory), its parent made sticky and open to all
/// first, as `/tmp` is.
fn nobody_mkdir(path: &Path) {
    let parent = path.parent().expect("parent");
    std::fs::create_dir_all(parent).expect("mkdir");
    std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    let out = as_nobody(&["mkdir", "-p", &path.display().to_string()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

fn nobody_symlink(target: &Path, link: &Path) {
    let out = as_nobody(&["ln", "-s", &target.display().to_string(), &link.display().to_string()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).expect("stat").mode() & 0o7777
}

/// Every file under `dir`, recursively (links not followed).
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("list") {
        let entry = entry.expect("entry");
        if entry.file_type().expect("type").is_dir() {
            out.extend(files_under(&entry.path()));
        } else {
            out.push(entry.path());
        }
    }
    out
}

/// One shard of `n` id-coded JPEGs in class 1 (labels in `.cls`), in a directory of its own.
fn one_shard(dir: &Path, n: usize) -> String {
    let (images, class_of) = make_id_dataset(dir, 1, n);
    let shards = dir.join("shards");
    std::fs::create_dir_all(&shards).expect("mkdir");
    let mut tar = tar::Builder::new(std::fs::File::create(shards.join("train-000.tar")).expect("create"));
    for id in 0..n {
        let jpeg = std::fs::read(images.join(format!("c{}/s{id:02}.jpg", class_of[id]))).expect("jpeg");
        add_tar_member(&mut tar, &format!("s{id:02}.jpg"), &jpeg);
        add_tar_member(&mut tar, &format!("s{id:02}.cls"), b"1\n");
    }
    tar.into_inner().expect("finish");
    format!("{}/train-000.tar", shards.display())
}

#[test]
fn a_shard_index_directory_another_user_made_is_not_written_through_and_the_index_is_rebuilt() {
    let _unprotected = SymlinksUnprotected::new();
    let tmp = open_tempdir();
    let pattern = one_shard(tmp.path(), 4);
    let (victim, before) = victim(tmp.path(), "victim");
    // The attacker's index directory, with a link for every temporary name the old writer used
    // (`<hash>.idx.tmp<PID>`) and for the index itself.
    let index_dir = tmp.path().join("tmp/index");
    nobody_mkdir(&index_dir);
    let hash = format!("{:016x}", prepfs_core_fnv(&pattern));
    for pid in 1..4000u32 {
        nobody_symlink(&victim, &index_dir.join(format!("{hash}.idx.tmp{pid}")));
    }
    nobody_symlink(&victim, &index_dir.join(format!("{hash}.idx")));
    let run = tmp.path().join("run");
    std::fs::create_dir(&run).expect("mkdir");
    let yaml = format!("seed: 1\nthreads: 2\ncache: {{ memory: 32MiB }}\nsource: {{ shards: \"{pattern}\", index_dir: {} }}\n", index_dir.display());
    let config = write_config(&run, &yaml);
    let mnt = Mounted::start(&run, &config, Path::new(&pattern), LIMIT);
    let served = std::fs::read_dir(mnt.path("encoded/1")).expect("ls").count();
    assert_eq!(served, 4, "the shard is served, indexed again");
    let log = mnt.log();
    assert!(mnt.stop().success());
    assert_eq!(std::fs::read(&victim).expect("victim"), before, "the victim is unchanged");
    assert!(log.contains("refusing"), "the refused directory is said: {log}");
    for file in files_under(&index_dir) {
        assert!(std::fs::symlink_metadata(&file).expect("stat").file_type().is_symlink(), "the mount wrote {} into the attacker's directory", file.display());
    }
}

/// The kept index's name for a shard path (persist.rs's `file_for`: FNV-1a 64 of the path).
fn prepfs_core_fnv(text: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

#[test]
fn a_kept_index_is_private_and_one_forged_in_it_is_not_trusted() {
    let tmp = open_tempdir();
    let pattern = one_shard(tmp.path(), 4);
    let index_dir = tmp.path().join("index");
    let run = tmp.path().join("run");
    std::fs::create_dir(&run).expect("mkdir");
    let yaml = format!("seed: 1\nthreads: 2\ncache: {{ memory: 32MiB }}\nsource: {{ shards: \"{pattern}\", index_dir: {} }}\n", index_dir.display());
    let config = write_config(&run, &yaml);
    let mnt = Mounted::start(&run, &config, Path::new(&pattern), LIMIT);
    assert!(mnt.stop().success());
    assert_eq!(mode(&index_dir), 0o700, "the index directory is private");
    let kept: Vec<PathBuf> = files_under(&index_dir);
    assert!(kept.iter().any(|f| f.extension().is_some_and(|e| e == "idx")), "{kept:?}");
    for file in &kept {
        assert_eq!(mode(file), 0o600, "{}", file.display());
        assert!(nobody_reads(file).is_err(), "nobody reads {}", file.display());
    }
    // Every label rewritten to 0 with the CRC recomputed, as the attacker did (here as root,
    // standing for anyone who got at the file): the MAC refuses it and the shard is indexed again.
    let idx = kept.iter().find(|f| f.extension().is_some_and(|e| e == "idx")).expect("idx");
    let mut bytes = std::fs::read(idx).expect("read");
    let body = bytes.len() - 32 - 4;
    for i in 0..body {
        if bytes[i..].starts_with(b"\x01\x01\x00\x00\x00\x00\x00\x00\x00") {
            bytes[i + 1] = 0;
        }
    }
    let crc = crc32(&bytes[..body]);
    bytes[body..body + 4].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(idx, &bytes).expect("forge");
    let mnt = Mounted::start(&run, &config, Path::new(&pattern), LIMIT);
    let classes: Vec<String> = std::fs::read_dir(mnt.path("encoded")).expect("ls").map(|e| e.expect("entry").file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(classes, ["1"], "the forged labels are not served");
    assert!(mnt.stop().success());
}

/// CRC-32 (zlib's), as the kept files' framing seals them.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for b in bytes {
        crc ^= u32::from(*b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xedb8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

#[test]
fn a_disk_tier_with_links_another_user_planted_is_refused_and_writes_nothing_through_them() {
    let _unprotected = SymlinksUnprotected::new();
    let tmp = open_tempdir();
    let source = make_dataset(tmp.path(), 2, 3, false);
    let root_only = tmp.path().join("root-only");
    std::fs::create_dir(&root_only).expect("mkdir");
    std::fs::set_permissions(&root_only, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let disk = tmp.path().join("tmp/prepfs-cache");
    nobody_mkdir(&disk);
    for kind in ["encoded", "decoded", "augmented"] {
        nobody_symlink(&root_only, &disk.join(kind));
    }
    let run = tmp.path().join("run");
    std::fs::create_dir(&run).expect("mkdir");
    let config = write_config(&run, &format!("seed: 1\ncache: {{ memory: 1MiB, disk: {{ path: {}, size: 64MiB }} }}\n", disk.display()));
    let mut refused = Refused::start(mount_command(&config, &source, &run.join("mnt")), &run.join("mnt"));
    let (status, err) = refused.wait(Duration::from_secs(60)).expect("the mount refuses at once");
    assert!(!status.success(), "{err}");
    assert!(err.contains("cache.disk.path") && err.contains("owned by uid 65534"), "the error says what and why: {err}");
    assert_eq!(std::fs::read_dir(&root_only).expect("ls").count(), 0, "nothing written into the root-only directory");
}

#[test]
fn the_disk_tier_of_a_private_source_is_private() {
    let tmp = open_tempdir();
    let source = make_dataset(tmp.path(), 2, 3, false);
    // The source's directory is root's alone, and so are its files.
    std::fs::set_permissions(&source, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let disk = tmp.path().join("nvme/prepfs-cache");
    let run = tmp.path().join("run");
    std::fs::create_dir(&run).expect("mkdir");
    let config = write_config(
        &run,
        &format!("seed: 1\ncache: {{ memory: 1MiB, split: 0-50-50, refill: false, disk: {{ path: {}, size: 256MiB }} }}\n", disk.display()),
    );
    let mnt = Mounted::start(&run, &config, &source, LIMIT);
    for file in common::augmented_files(&mnt) {
        std::fs::read(&file).expect("read");
    }
    let started = std::time::Instant::now();
    while mnt.stats()["cache"]["disk"]["pending_writes"] != 0 {
        assert!(started.elapsed() < Duration::from_secs(30), "disk writes did not finish");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(mnt.stop().success());
    let entries = files_under(&disk);
    assert!(!entries.is_empty(), "the disk tier holds entries");
    assert_eq!(mode(&disk), 0o700);
    for entry in &entries {
        assert_eq!(mode(entry), 0o600, "{}", entry.display());
        let mut dir = entry.parent();
        while let Some(d) = dir.filter(|d| d.starts_with(&disk)) {
            assert_eq!(mode(d), 0o700, "{}", d.display());
            dir = d.parent();
        }
    }
    // Even with the disk tier's directory opened to all by mistake, no entry is readable.
    std::fs::set_permissions(tmp.path().join("nvme"), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    assert!(nobody_reads(&entries[0]).is_err(), "nobody reads the decoded pixels of a private source");
}

#[test]
fn a_log_file_link_another_user_planted_is_refused_and_its_target_is_unchanged() {
    let _unprotected = SymlinksUnprotected::new();
    let tmp = open_tempdir();
    let source = make_dataset(tmp.path(), 1, 2, false);
    let (victim, before) = victim(tmp.path(), "crontab");
    // A sticky, world-writable directory, as /tmp is, where the attacker plants the link.
    let logs = tmp.path().join("logs");
    std::fs::create_dir(&logs).expect("mkdir");
    std::fs::set_permissions(&logs, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    let log = logs.join("prepfs.log");
    nobody_symlink(&victim, &log);
    let run = tmp.path().join("run");
    std::fs::create_dir(&run).expect("mkdir");
    let config = write_config(&run, "seed: 1\n");
    let mut cmd = mount_command(&config, &source, &run.join("mnt"));
    cmd.arg("--log-file").arg(&log);
    let mut refused = Refused::start(cmd, &run.join("mnt"));
    let (status, err) = refused.wait(Duration::from_secs(60)).expect("the mount refuses at once");
    assert!(!status.success(), "{err}");
    assert!(err.contains("--log-file") && err.contains("link"), "the error says why: {err}");
    assert_eq!(std::fs::read(&victim).expect("victim"), before, "the victim is unchanged");
}

#[test]
fn a_memory_registry_another_user_made_is_neither_written_nor_counted() {
    let tmp = open_tempdir();
    let source = make_dataset(tmp.path(), 1, 2, false);
    let run = tmp.path().join("run");
    std::fs::create_dir(&run).expect("mkdir");
    let config = write_config(&run, "seed: 1\ncache: { memory: auto }\n");
    // The attacker's registry: one entry claiming a huge budget, for a live pid (1).
    let registry = tmp.path().join("tmp/prepfs-mounts");
    nobody_mkdir(&registry);
    let out = as_nobody(&["sh", "-c", &format!("echo '{{\"pid\":1,\"mountpoint\":\"/x\",\"memory\":1099511627776}}' > {}/1.json", registry.display())]);
    assert!(out.status.success());
    let mut cmd = mount_command(&config, &source, &run.join("mnt"));
    cmd.env("PREPFS_RUN_DIR", &registry);
    let mnt = Mounted::start_command(cmd, &run.join("mnt"), &run.join("prepfs.log"), LIMIT);
    let log = mnt.log();
    let stats = mnt.stats();
    assert!(mnt.stop().success());
    assert!(log.contains("cannot register") && log.contains("owned by uid 65534"), "the refusal is said: {log}");
    assert_eq!(std::fs::read_dir(&registry).expect("ls").count(), 1, "nothing written into the attacker's registry");
    assert_eq!(stats["memory_auto"]["others"], 0, "the planted entry is not counted: {stats}");
}
