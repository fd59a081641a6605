//! Mounted tests of supervision (issue 53, docs/restarts.md): the `prepfs mount` process holds
//! the FUSE connection, its server is killed (SIGKILL) or upgraded under live readers, and the
//! readers notice nothing: every read completes, every job's epoch goes on where it was, each
//! sample served once per epoch (identified by its content). A server that cannot start again
//! gives the mount up cleanly, and a mount is taken over only by its user with a binary that
//! reads its state.
//!
//! Every wait here waits for an event (a read done, a new server's pid in stats.json), never
//! for a time.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{id_of_pixels, kill_server, make_id_dataset, parse_ppm, server_pid, write_config, Mounted};
use rand::seq::SliceRandom;
use rand::SeedableRng;

const LIMIT: Duration = Duration::from_secs(300);
const CLASSES: usize = 3;
const PER_CLASS: usize = 16;
const SAMPLES: usize = CLASSES * PER_CLASS;

/// The class directory's number of a path `.../c<k>/file`.
fn class_of_path(path: &Path) -> usize {
    let dir = path.parent().and_then(Path::file_name).and_then(|n| n.to_str()).expect("class dir");
    dir.trim_start_matches('c').parse().expect("class number")
}

/// A job reading `epochs` epochs of `view` (ImageFolder's files, shuffled per epoch) with two
/// reader threads; `identify` tells each file's sample from its bytes. Counts each read in
/// `done`. Returns, per epoch, (class directory, sample) of every read.
fn read_epochs(view: PathBuf, epochs: usize, seed: u64, done: Arc<AtomicUsize>, identify: fn(&[u8]) -> usize) -> Vec<Vec<(usize, usize)>> {
    let mut files: Vec<PathBuf> = Vec::new();
    for c in 0..CLASSES {
        let mut class: Vec<PathBuf> = std::fs::read_dir(view.join(format!("c{c}"))).expect("list").map(|e| e.expect("entry").path()).collect();
        class.sort();
        files.extend(class);
    }
    assert_eq!(files.len(), SAMPLES);
    (0..epochs)
        .map(|e| {
            let mut order = files.clone();
            order.shuffle(&mut rand_pcg::Pcg64Mcg::seed_from_u64(seed * 100 + e as u64));
            let readers: Vec<_> = order
                .chunks(SAMPLES / 2)
                .map(<[_]>::to_vec)
                .map(|part| {
                    let done = Arc::clone(&done);
                    std::thread::spawn(move || {
                        part.iter()
                            .map(|path| {
                                let bytes = std::fs::read(path).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
                                done.fetch_add(1, Ordering::SeqCst);
                                (class_of_path(path), identify(&bytes))
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            readers.into_iter().flat_map(|r| r.join().expect("reader")).collect()
        })
        .collect()
}

/// A sample from an augmented PPM's colour.
fn id_of_ppm(bytes: &[u8]) -> usize {
    let (_, _, pixels) = parse_ppm(bytes);
    let (id, distance) = id_of_pixels(pixels);
    assert!(distance < 12.0, "no sample's colour ({distance})");
    id
}

/// Asserts each epoch served every sample exactly once, under its own class.
fn assert_each_sample_once(job: &str, epochs: &[Vec<(usize, usize)>], class_of: &[usize]) {
    for (e, epoch) in epochs.iter().enumerate() {
        let mut count: BTreeMap<usize, usize> = BTreeMap::new();
        for &(class, id) in epoch {
            assert_eq!(class_of[id], class, "{job} epoch {e}: sample {id} served under class {class}");
            *count.entry(id).or_default() += 1;
        }
        let twice: Vec<_> = count.iter().filter(|(_, &n)| n > 1).map(|(id, _)| *id).collect();
        let missing: Vec<_> = (0..SAMPLES).filter(|id| !count.contains_key(id)).collect();
        assert!(twice.is_empty() && missing.is_empty(), "{job} epoch {e}: served twice {twice:?}, never {missing:?}");
    }
}

#[test]
fn three_server_kills_and_an_upgrade_mid_epoch_lose_no_read_and_serve_each_sample_once_per_epoch() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (source, class_of) = make_id_dataset(tmp.path(), CLASSES, PER_CLASS);
    // The encoded view's bytes are the source's: a file's sample is the source file it equals.
    let by_bytes: Arc<BTreeMap<Vec<u8>, usize>> = Arc::new(
        (0..SAMPLES)
            .map(|id| {
                let path = source.join(format!("c{}", class_of[id])).join(format!("s{id:02}.jpg"));
                (std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())), id)
            })
            .collect(),
    );
    let config = write_config(tmp.path(), "seed: 5\nthreads: 2\ncache: { split: 0-0-100 }\n");
    let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);
    let done = Arc::new(AtomicUsize::new(0));
    let augmented = {
        let (view, done) = (mnt.path("jobs/train/augmented"), Arc::clone(&done));
        std::thread::spawn(move || read_epochs(view, 2, 1, done, id_of_ppm))
    };
    let encoded = {
        let (view, done) = (mnt.path("jobs/check/encoded"), Arc::clone(&done));
        static BY_BYTES: std::sync::OnceLock<Arc<BTreeMap<Vec<u8>, usize>>> = std::sync::OnceLock::new();
        let _ = BY_BYTES.set(Arc::clone(&by_bytes));
        std::thread::spawn(move || {
            read_epochs(view, 2, 2, done, |bytes| *BY_BYTES.get().expect("set").get(bytes).expect("every byte of a source file"))
        })
    };
    // Both jobs read 4 * SAMPLES files in all: kill at a quarter, half and 3/4, upgrade at 3/8.
    let mut stalls = Vec::new();
    for (at, what) in [(SAMPLES, "kill"), (3 * SAMPLES / 2, "upgrade"), (2 * SAMPLES, "kill"), (3 * SAMPLES, "kill")] {
        while done.load(Ordering::SeqCst) < at {
            // A reader that failed ends the wait: its error is the test's failure below.
            if augmented.is_finished() || encoded.is_finished() {
                break;
            }
            std::thread::yield_now();
        }
        if what == "kill" {
            stalls.push(kill_server(&mnt));
        } else {
            let old = server_pid(&mnt);
            let out = Command::new(common::prepfs_bin()).arg("upgrade").arg(mnt.path("")).output().expect("prepfs upgrade");
            assert!(out.status.success(), "upgrade: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            assert_ne!(server_pid(&mnt), old, "a new server serves after the upgrade");
        }
    }
    let augmented = augmented.join().expect("the augmented job finished with no error");
    let encoded = encoded.join().expect("the encoded job finished with no error");
    assert_each_sample_once("train (augmented)", &augmented, &class_of);
    assert_each_sample_once("check (encoded)", &encoded, &class_of);
    eprintln!("stalls after SIGKILL: {stalls:?}");
    let stats = mnt.stats();
    assert_eq!(stats["server"]["restarts"], 4, "three kills and an upgrade: {}", stats["server"]);
    assert!(mnt.log().contains("killed by signal 9"), "the log says why the server ended");
}

#[test]
fn a_server_that_cannot_start_again_gives_the_mount_up_and_callers_get_an_error_at_once() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (source, _) = make_id_dataset(tmp.path(), 1, 4);
    let config = write_config(tmp.path(), "seed: 5\n");
    let mut mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);
    let mountpoint = mnt.path("");
    // Every later start fails: its config no longer parses.
    std::fs::write(&config, "cache: [unclosed\n").expect("break the config");
    let server = server_pid(&mnt);
    // SAFETY: kill(2) on the test mount's own server.
    unsafe { libc::kill(server as i32, libc::SIGKILL) };
    // A reader waiting on the mount meanwhile gets an error, not a hang.
    let reader = {
        let file = mnt.path("encoded/c0/s00.jpg");
        std::thread::spawn(move || std::fs::read(file))
    };
    let status = mnt.wait_exit(Duration::from_secs(120)).expect("the supervisor gives up and exits");
    assert!(!status.success(), "a mount given up is a failure: {status}");
    let read = reader.join().expect("reader");
    match read {
        Err(e) => assert!(
            matches!(e.raw_os_error(), Some(libc::ENOTCONN) | Some(libc::ECONNABORTED) | Some(libc::EIO) | Some(libc::ENOENT)),
            "the caller gets a plain error: {e}"
        ),
        // The read was answered before the server died (it raced the kill).
        Ok(bytes) => assert!(!bytes.is_empty()),
    }
    assert!(!common::is_mounted(&mountpoint), "the mount is gone cleanly");
    let log = mnt.log();
    assert!(log.contains("giving the mount up"), "the log says why: {log}");
    assert!(log.contains(&format!("{} server ends", prepfs::supervisor::MAX_CRASHES)), "{log}");
}

#[test]
fn an_upgrade_to_a_binary_that_cannot_read_the_state_is_refused_and_the_old_server_serves_on() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (source, _) = make_id_dataset(tmp.path(), 1, 4);
    let config = write_config(tmp.path(), "seed: 5\n");
    let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);
    let server = server_pid(&mnt);
    // An older binary: it reads no handover format at all.
    let old = tmp.path().join("old-prepfs");
    std::fs::write(&old, "#!/bin/sh\n[ \"$1\" = __takeover-formats ] && { echo 0; exit 0; }\nexit 1\n").expect("script");
    std::fs::set_permissions(&old, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let out = Command::new(common::prepfs_bin()).arg("upgrade").arg(mnt.path("")).arg("--bin").arg(&old).output().expect("prepfs upgrade");
    assert!(!out.status.success(), "refused");
    assert!(String::from_utf8_lossy(&out.stderr).contains("refused"), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(server_pid(&mnt), server, "the old server serves on");
    assert!(std::fs::read(mnt.path("encoded/c0/s00.jpg")).is_ok());
    // Another user may not take the mount over, whatever the binary.
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(common::prepfs_bin())
        .arg("upgrade")
        .arg(mnt.path(""))
        .arg("--bin")
        .arg(common::prepfs_bin())
        .output()
        .expect("setpriv");
    assert!(!out.status.success(), "another user's upgrade is refused: {}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(server_pid(&mnt), server, "the old server serves on");
}

#[test]
fn a_file_opened_before_a_server_kill_is_read_after_it_without_passthrough() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (source, _) = make_id_dataset(tmp.path(), 1, 4);
    let config = write_config(tmp.path(), "seed: 5\npassthrough: false\n");
    let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);
    let want: Vec<Vec<u8>> = (0..4).map(|id| std::fs::read(source.join(format!("c0/s{id:02}.jpg"))).expect("source")).collect();
    // Opened (not yet read) by the server that is killed; read through the next one.
    let mut files: Vec<std::fs::File> = (0..4).map(|id| std::fs::File::open(mnt.path(&format!("encoded/c0/s{id:02}.jpg"))).expect("open")).collect();
    kill_server(&mnt);
    for (id, file) in files.iter_mut().enumerate() {
        let mut got = Vec::new();
        std::io::Read::read_to_end(file, &mut got).unwrap_or_else(|e| panic!("s{id:02}: the read after the kill failed: {e}"));
        assert_eq!(got, want[id], "s{id:02}: every byte of the source");
    }
    drop(files);
    mnt.wait_released();
}
