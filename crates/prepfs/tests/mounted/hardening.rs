//! Mounted tests of the hardening: each finding of the attack table, reproduced against the real
//! binary on a real FUSE mount, as an unprivileged user (`setpriv` to `nobody`) where access is
//! the question. Each test runs in its own temporary directory under a time limit, and the mount
//! guard unmounts on every way out.

use crate::common;
use common::{chmod};

use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{as_nobody, nobody_reads, open_tempdir, force_unmount, id_of_pixels, is_mounted, kill_leaving_a_dead_mount, make_id_dataset, parse_ppm, write_config, Mounted};

const LIMIT: Duration = Duration::from_secs(120);

/// The daemon's peak resident memory (VmHWM), bytes.
fn peak_rss(pid: i32) -> u64 {
    common::status_bytes(pid, "VmHWM:")
}

/// The id whose colour coding the PPM's pixels carry.
fn id_of_ppm(bytes: &[u8]) -> usize {
    let (_, _, rgb) = parse_ppm(bytes);
    let (id, distance) = id_of_pixels(rgb);
    assert!(distance < 12.0, "pixels carry no id (distance {distance})");
    id
}

#[test]
fn what_the_source_denies_a_user_no_view_of_the_mount_gives_them() {
    let dir = open_tempdir();
    let (source, _) = make_id_dataset(dir.path(), 2, 3);
    chmod(&source, 0o755);
    for class in ["c0", "c1"] {
        chmod(&source.join(class), 0o755);
    }
    // s00 is private to root; c1 as a whole is closed to others; the rest is world-readable.
    for entry in walk(&source) {
        chmod(&entry, 0o644);
    }
    chmod(&source.join("c0/s00.jpg"), 0o600);
    chmod(&source.join("c1"), 0o700);
    // A symlink out of the source, to a file only root may read.
    let outside = dir.path().join("secret.jpg");
    std::fs::copy(source.join("c0/s01.jpg"), &outside).expect("copy");
    chmod(&outside, 0o600);
    std::os::unix::fs::symlink(&outside, source.join("c0/leak.jpg")).expect("symlink");
    std::os::unix::fs::symlink("/etc/shadow", source.join("c0/shadow.jpg")).expect("symlink");

    // A recipe's view too (`val/`, beside augmented/).
    let yaml = "allow_other: true\ncache: { memory: 64MiB }\nrecipes: { val: { augment: [ {resize: {size: 40}}, {center_crop: {size: 32}} ] } }\n";
    let config = write_config(dir.path(), yaml);
    let mnt = Mounted::start(dir.path(), &config, &source, LIMIT);

    // Root (the mount's owner) reads everything the source holds.
    assert!(std::fs::read(mnt.path("encoded/c0/s00.jpg")).is_ok());
    // The unprivileged user: refused what the source refuses them, in every view.
    let denied_paths = ["encoded/c0/s00.jpg", "decoded/c0/s00.ppm", "augmented/c0/s00.ppm", "encoded/c1/s03.jpg", "augmented/c1/s03.ppm"];
    for denied in denied_paths.into_iter().chain(["val/c0/s00.ppm", "val/c1/s03.ppm"]) {
        let err = nobody_reads(&mnt.path(denied)).expect_err(denied);
        assert!(err.contains("Permission denied"), "{denied}: {err}");
    }
    // ... and given what it allows.
    let open = nobody_reads(&mnt.path("encoded/c0/s01.jpg")).expect("a world-readable sample");
    assert_eq!(open, std::fs::read(source.join("c0/s01.jpg")).expect("source"));
    assert_eq!(id_of_ppm(&nobody_reads(&mnt.path("augmented/c0/s01.ppm")).expect("its pixels")), 1);
    assert_eq!(id_of_ppm(&nobody_reads(&mnt.path("val/c0/s01.ppm")).expect("its pixels through a recipe")), 1);
    // Links leading out of the source are not served to anyone.
    for leak in ["encoded/c0/leak.jpg", "encoded/c0/shadow.jpg", "decoded/c0/leak.ppm"] {
        assert!(!mnt.path(leak).exists(), "{leak} is served");
    }
    assert!(mnt.log().contains("symlinks leading outside the source are not served"), "{}", mnt.log());
    // The owner and mode shown are the source's, write bits cleared.
    let meta = std::fs::metadata(mnt.path("decoded/c0/s00.ppm")).expect("stat");
    assert_eq!(meta.permissions().mode() & 0o7777, 0o400);
    // `.prepfs/` (source and disk paths) is the mount owner's only.
    let err = nobody_reads(&mnt.path(".prepfs/stats.json")).expect_err("stats");
    assert!(err.contains("Permission denied"), "{err}");
    assert!(std::fs::read(mnt.path(".prepfs/stats.json")).is_ok());
}

/// Makes a one-class id dataset readable by every user (directories 755, files 644).
fn readable_by_all(source: &Path) {
    chmod(source, 0o755);
    chmod(&source.join("c0"), 0o755);
    for f in walk(source) {
        chmod(&f, 0o644);
    }
}

fn walk(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(root).expect("list") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[test]
fn a_user_cannot_take_every_job_slot_or_read_another_users_job() {
    let dir = open_tempdir();
    let (source, _) = make_id_dataset(dir.path(), 1, 3);
    readable_by_all(&source);
    let config = write_config(dir.path(), "allow_other: true\njobs: { max: 4, per_user: 2 }\n");
    let mnt = Mounted::start(dir.path(), &config, &source, LIMIT);
    // A job starts at the first use inside its directory (a listing of one of its views).
    let start = |name: &str| as_nobody(&["ls", &mnt.path(&format!("jobs/{name}/encoded")).display().to_string()]);
    assert!(start("x1").status.success() && start("x2").status.success(), "a user may start jobs");
    let refused = start("x3");
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("quota"), "{}", String::from_utf8_lossy(&refused.stderr));
    assert!(start("x1").status.success(), "its own jobs stay usable");
    // Root can always start one, and its job is its own.
    std::fs::read_dir(mnt.path("jobs/train/encoded")).expect("root's job");
    let err = nobody_reads(&mnt.path("jobs/train/encoded/c0/s00.jpg")).expect_err("another user's job");
    assert!(err.contains("Permission denied"), "{err}");
    let rm = as_nobody(&["rmdir", &mnt.path("jobs/train").display().to_string()]);
    assert!(!rm.status.success(), "a user retired root's job");
    assert!(mnt.log().contains("jobs.per_user"), "a refused job is logged: {}", mnt.log());
}

#[test]
fn a_sparse_50_gb_sample_is_refused_unread_and_the_daemon_stays_small() {
    let dir = open_tempdir();
    let (source, _) = make_id_dataset(dir.path(), 1, 4);
    let huge = source.join("c0/huge.jpg");
    std::fs::File::create(&huge).expect("create").set_len(50 << 30).expect("sparse");
    let config = write_config(dir.path(), "cache: { memory: 64MiB, split: 0-50-50 }\n");
    let mnt = Mounted::start(dir.path(), &config, &source, LIMIT);
    for path in ["decoded/c0/huge.ppm", "augmented/c0/huge.ppm"] {
        let err = std::fs::read(mnt.path(path)).expect_err("refused");
        assert_eq!(err.raw_os_error(), Some(libc::EIO), "{path}: {err}");
    }
    for id in 0..4 {
        let out = std::fs::read(mnt.path(&format!("augmented/c0/s{id:02}.ppm"))).expect("the rest serve");
        assert_eq!(id_of_ppm(&out), id);
    }
    // The top-level encoded view streams it (reads of a few pages, never the whole file).
    let mut head = vec![0u8; 4096];
    std::fs::File::open(mnt.path("encoded/c0/huge.jpg")).expect("open").read_exact(&mut head).expect("read");
    let rss = peak_rss(mnt.pid());
    assert!(rss < 400 << 20, "peak RSS {} MB", rss >> 20);
    assert!(mnt.log().contains("max_file_size"), "{}", mnt.log());
    assert!(mnt.stats()["decode_errors"].as_u64().unwrap_or(0) >= 1);
}

#[test]
fn a_fifo_in_place_of_a_sample_fails_at_once_and_nothing_else_hangs() {
    let dir = open_tempdir();
    let (source, _) = make_id_dataset(dir.path(), 1, 4);
    // One FIFO there at the scan, one swapped in (by rename) while the mount runs.
    nix::unistd::mkfifo(&source.join("c0/early.jpg"), nix::sys::stat::Mode::from_bits_truncate(0o644)).expect("mkfifo");
    let config = write_config(dir.path(), "cache: { memory: 64MiB }\n");
    let mnt = Mounted::start(dir.path(), &config, &source, LIMIT);
    std::fs::read(mnt.path("decoded/c0/s01.ppm")).expect("before");
    let fifo = dir.path().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).expect("mkfifo");
    std::fs::rename(&fifo, source.join("c0/s01.jpg")).expect("swap in a FIFO");
    let started = Instant::now();
    // (A job's view would serve another sample of the class instead: opportunistic sampling.)
    for path in ["encoded/c0/s01.jpg", "decoded/c0/s01.ppm", "augmented/c0/s01.ppm"] {
        assert!(std::fs::read(mnt.path(path)).is_err(), "{path} served a FIFO");
    }
    assert!(std::fs::read(mnt.path("augmented/c0/early.ppm")).is_err());
    eprintln!("FIFO reads took {:?}", started.elapsed());
    // Refused without being opened: no read waited out the source's timeout on them.
    assert!(!mnt.log().contains("did not answer within"), "a FIFO was opened and waited on: {}", mnt.log());
    for id in [0, 2, 3] {
        let out = std::fs::read(mnt.path(&format!("augmented/c0/s{id:02}.ppm"))).expect("the others");
        assert_eq!(id_of_ppm(&out), id);
    }
}

#[test]
fn a_replaced_source_file_is_served_in_its_new_version_in_every_view() {
    let dir = open_tempdir();
    let (source, _) = make_id_dataset(dir.path(), 1, 4);
    let config = write_config(dir.path(), "cache: { memory: 256MiB, split: 40-40-20, refill: false }\n");
    let mnt = Mounted::start(dir.path(), &config, &source, LIMIT);
    let old_bytes = std::fs::read(mnt.path("encoded/c0/s00.jpg")).expect("encoded");
    let old_decoded = std::fs::read(mnt.path("decoded/c0/s00.ppm")).expect("decoded");
    assert_eq!(id_of_ppm(&std::fs::read(mnt.path("augmented/c0/s00.ppm")).expect("augmented")), 0);
    // Replace s00 by sample 3's image (another size), by rename, as tools that rewrite do.
    let new_bytes = std::fs::read(source.join("c0/s03.jpg")).expect("s03");
    assert_ne!(new_bytes.len(), old_bytes.len());
    let tmp = source.join("c0/.s00.tmp");
    std::fs::write(&tmp, &new_bytes).expect("write");
    std::fs::rename(&tmp, source.join("c0/s00.jpg")).expect("rename");
    // Every view serves the new version at once, whole (not the 60 s attribute cache's).
    assert_eq!(std::fs::read(mnt.path("encoded/c0/s00.jpg")).expect("encoded"), new_bytes);
    let decoded = std::fs::read(mnt.path("decoded/c0/s00.ppm")).expect("decoded");
    assert_ne!(decoded.len(), old_decoded.len());
    assert_eq!(id_of_ppm(&decoded), 3, "decoded is the new image, whole");
    assert_eq!(id_of_ppm(&std::fs::read(mnt.path("augmented/c0/s00.ppm")).expect("augmented")), 3);
    // A shrunk file reads at its new length.
    std::fs::write(&tmp, &new_bytes[..1000]).expect("write");
    std::fs::rename(&tmp, source.join("c0/s00.jpg")).expect("rename");
    assert_eq!(std::fs::read(mnt.path("encoded/c0/s00.jpg")).expect("encoded").len(), 1000);
    assert!(mnt.stats()["source_changes"].as_u64().unwrap_or(0) >= 2);
}

#[test]
fn the_disk_tier_never_serves_a_replacement_that_kept_size_and_mtime() {
    let dir = open_tempdir();
    let (source, _) = make_id_dataset(dir.path(), 1, 4);
    let disk = dir.path().join("disk");
    let yaml = format!("cache: {{ memory: 0, disk: {{ path: {}, size: 64MiB }} }}\n", disk.display());
    let config = write_config(dir.path(), &yaml);
    let target = source.join("c0/s01.jpg");
    {
        let mnt = Mounted::start(dir.path(), &config, &source, LIMIT);
        assert_eq!(id_of_ppm(&std::fs::read(mnt.path("decoded/c0/s01.ppm")).expect("decoded")), 1);
        mnt.stop();
    }
    // Sample 4's image padded (JPEG ignores bytes after its end) to s01's size, its mtime set
    // back to s01's: only the inode and ctime tell it apart.
    let old = std::fs::metadata(&target).expect("stat");
    let mut replacement = std::fs::read(source.join("c0/s00.jpg")).expect("s00");
    replacement.resize(old.len() as usize, 0);
    if replacement.len() as u64 != old.len() {
        panic!("cannot build a same-size replacement");
    }
    let tmp = source.join("c0/.tmp");
    std::fs::write(&tmp, &replacement).expect("write");
    std::fs::File::options().write(true).open(&tmp).expect("open").set_modified(old.modified().expect("mtime")).expect("mtime");
    std::fs::rename(&tmp, &target).expect("rename");
    let mnt = Mounted::start(dir.path(), &config, &source, LIMIT);
    assert_eq!(id_of_ppm(&std::fs::read(mnt.path("decoded/c0/s01.ppm")).expect("decoded")), 0, "stale pixels from the disk tier");
}

/// A prepfs whose stderr is a pipe the test holds; killed and unmounted on drop.
struct PipedMount {
    child: std::process::Child,
    mountpoint: PathBuf,
}

impl Drop for PipedMount {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        force_unmount(&self.mountpoint);
    }
}

#[test]
fn a_closed_log_pipe_does_not_kill_the_daemon() {
    let dir = open_tempdir();
    let (source, _) = make_id_dataset(dir.path(), 1, 3);
    std::fs::write(source.join("c0/bad.jpg"), b"not a jpeg").expect("write");
    let config = write_config(dir.path(), "");
    let mountpoint = dir.path().join("mnt");
    let child = common::mount_command(&config, &source, &mountpoint)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut guard = PipedMount { child, mountpoint: mountpoint.clone() };
    let stderr = guard.child.stderr.take().expect("stderr");
    let ready = std::thread::spawn(move || {
        let mut reader = BufReader::new(stderr);
        let mut line = String::new();
        while reader.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
            if line.contains("prepfs: serving") {
                return true; // the reader (and the pipe's read end) goes away here
            }
            line.clear();
        }
        false
    });
    assert!(ready.join().expect("reader"), "prepfs did not come up");
    // Log lines now go to a pipe nobody reads: a bad sample logs a warning each time.
    for _ in 0..20 {
        assert!(std::fs::read(mountpoint.join("augmented/c0/bad.ppm")).is_err());
        let _ = std::fs::read(mountpoint.join("augmented/c0/s00.ppm"));
    }
    std::thread::sleep(Duration::from_millis(300));
    assert!(guard.child.try_wait().expect("wait").is_none(), "the daemon died");
    assert!(std::fs::read(mountpoint.join("augmented/c0/s01.ppm")).is_ok(), "the mount still serves");
}

/// Waits (10 s at most) until prepfs says the mount is busy.
fn wait_for_busy(mnt: &Mounted) {
    let started = Instant::now();
    while !mnt.log().contains("busy") {
        assert!(started.elapsed() < Duration::from_secs(10), "no word of the busy mount: {}", mnt.log());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn sigterm_on_a_busy_mount_keeps_serving_until_released_and_a_second_forces_it() {
    let dir = open_tempdir();
    let (source, _) = make_id_dataset(dir.path(), 1, 3);
    let config = write_config(dir.path(), "");
    // Released: the mount goes once the last file is closed.
    let mut mnt = Mounted::start(dir.path(), &config, &source, LIMIT);
    let held = std::fs::File::open(mnt.path("encoded/c0/s00.jpg")).expect("open");
    let pid = mnt.pid();
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    wait_for_busy(&mnt);
    assert!(std::fs::read(mnt.path("augmented/c0/s01.ppm")).is_ok(), "it keeps serving");
    assert!(is_mounted(&mnt.mountpoint));
    drop(held);
    let status = mnt.wait_exit(Duration::from_secs(10)).expect("exits once released");
    assert!(status.success(), "{status}");
    assert!(!is_mounted(&mnt.mountpoint));

    // Forced: a second signal ends it while a file stays open.
    let dir2 = open_tempdir();
    let mut mnt = Mounted::start(dir2.path(), &config, &source, LIMIT);
    let _held = std::fs::File::open(mnt.path("encoded/c0/s00.jpg")).expect("open");
    let pid = mnt.pid();
    unsafe { libc::kill(pid, libc::SIGTERM) };
    wait_for_busy(&mnt);
    unsafe { libc::kill(pid, libc::SIGTERM) };
    mnt.wait_exit(Duration::from_secs(10)).expect("a second signal ends it");
    assert!(!is_mounted(&mnt.mountpoint), "the forced unmount left a mount behind");
}

/// Detaches whatever is mounted at its path when dropped.
struct DetachOnDrop(PathBuf);

impl Drop for DetachOnDrop {
    fn drop(&mut self) {
        force_unmount(&self.0);
    }
}

#[test]
fn a_dead_mount_is_cleared_however_old_it_is() {
    let dir = open_tempdir();
    let (source, _) = make_id_dataset(dir.path(), 1, 2);
    let config = write_config(dir.path(), "");
    let mnt = Mounted::start(dir.path(), &config, &source, LIMIT).forget_mount();
    std::fs::read(mnt.path("encoded/c0/s00.jpg")).expect("read");
    let mountpoint = mnt.mountpoint.clone();
    kill_leaving_a_dead_mount(mnt.pid());
    drop(mnt);
    // Whatever happens below, the dead mount does not outlive the test.
    let _dead = DetachOnDrop(mountpoint.clone());
    // An old dead mount: the kernel no longer holds cached attributes of its root (kept 1 s).
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(std::fs::metadata(&mountpoint).expect_err("dead").raw_os_error(), Some(libc::ENOTCONN));
    let again = Mounted::start(dir.path(), &config, &source, LIMIT);
    assert!(again.log().contains("dead mount"), "{}", again.log());
    assert!(std::fs::read(again.path("encoded/c0/s01.jpg")).is_ok());
}

#[test]
fn removing_the_source_does_not_flood_the_log() {
    let dir = open_tempdir();
    let (source, _) = make_id_dataset(dir.path(), 2, 6);
    let config = write_config(dir.path(), "cache: { memory: 64MiB, split: 0-0-100 }\n");
    let mnt = Mounted::start(dir.path(), &config, &source, LIMIT);
    std::fs::remove_dir_all(&source).expect("rm -rf source");
    let before = mnt.log().lines().count();
    for id in 0..12 {
        let _ = std::fs::read(mnt.path(&format!("augmented/c{}/s{id:02}.ppm", id / 6)));
    }
    std::thread::sleep(Duration::from_secs(3));
    let lines = mnt.log().lines().count() - before;
    assert!(lines <= 12, "{lines} log lines in 3 s: {}", mnt.log());
}

#[test]
fn unmount_does_not_wait_on_throttled_reads() {
    let dir = open_tempdir();
    let (source, _) = make_id_dataset(dir.path(), 2, 24);
    // 5 kB/s: the refill's reads of the 48 samples (about 370 kB) take over a minute (`warm`:
    // it starts at mount, with no reader). Half as many took 36 s, within the 60 s guard this
    // test had: an exit that waited on them would have passed it.
    let config = write_config(dir.path(), "source: { path: /x, read_limit: 5kB/s }\ncache: { memory: 64MiB, split: 0-0-100, refill: warm }\n");
    let mut mnt = Mounted::start(dir.path(), &config, &source, LIMIT);
    // The event, not a sleep: the refill's throttled reads are under way.
    let started = Instant::now();
    let read = loop {
        let read = mnt.stats()["source_bytes_read"].as_u64().unwrap_or(0);
        if read > 0 {
            break read;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "the refill never read: {}", mnt.stats());
        std::thread::sleep(Duration::from_millis(20));
    };
    // What is left of the source at 5 kB/s: an exit that waited on the reads would come no
    // sooner than this; the hang guard below is half of it (and generous on its own).
    let total: u64 = walk_files(&source).iter().map(|p| std::fs::metadata(p).expect("stat").len()).sum();
    let left = Duration::from_secs_f64(total.saturating_sub(read) as f64 / 5_000.0);
    let guard = left / 2;
    assert!(guard >= Duration::from_secs(20), "the dataset is too small to tell ({total} bytes, {read} read)");
    let unmounted = Instant::now();
    let out = Command::new("fusermount3").arg("-u").arg(&mnt.mountpoint).output().expect("fusermount3");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    mnt.wait_exit(guard).unwrap_or_else(|| panic!("prepfs did not exit within {guard:?}, half of the {left:?} its throttled reads need"));
    eprintln!("exit took {:?}, with {left:?} of throttled reads left", unmounted.elapsed());
}

/// The files below `dir`, recursively.
fn walk_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("list") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            out.extend(walk_files(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[test]
fn open_files_past_max_open_bytes_are_refused_and_one_user_gets_half() {
    let dir = open_tempdir();
    let (source, _) = make_id_dataset(dir.path(), 1, 40);
    readable_by_all(&source);
    // 4 MiB: 27 open augmented files (150,543 bytes each), 13 for one user. Distinct files:
    // opens of one file held at once share one handle (and so pin its bytes once).
    let config = write_config(dir.path(), "allow_other: true\nmax_open_bytes: 4MiB\n");
    let mnt = Mounted::start(dir.path(), &config, &source, LIMIT);
    let script = format!(
        "import errno,sys\nfs=[]\nwhile len(fs)<40:\n    try: fs.append(open('{}/s%02d.ppm' % len(fs),'rb'))\n    except OSError as e:\n        print(len(fs), errno.errorcode[e.errno]); sys.exit(0)\nprint(len(fs),'none')\n",
        mnt.path("augmented/c0").display()
    );
    let out = as_nobody(&["/usr/bin/python3", "-c", &script]);
    let said = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(said, "13 ENFILE", "{}", String::from_utf8_lossy(&out.stderr));
    // Released on exit (the kernel sends the releases in the background): the owner can pin
    // the whole budget.
    mnt.wait_released();
    let file = |i: usize| mnt.path(&format!("augmented/c0/s{i:02}.ppm"));
    let handles: Vec<_> = (0..27).map(|i| std::fs::File::open(file(i)).expect("within the budget")).collect();
    let err = std::fs::File::open(file(27)).expect_err("past it");
    assert_eq!(err.raw_os_error(), Some(libc::ENFILE));
    // Another open of a file held open shares its handle: nothing more is pinned.
    let again = std::fs::File::open(file(0)).expect("a second open of an open file pins nothing more");
    drop((handles, again));
    mnt.wait_released();
    assert!(std::fs::read(file(28)).is_ok());
    assert!(mnt.stats()["opens_refused"].as_u64().unwrap_or(0) >= 2);
}

#[test]
fn uid_and_gid_change_the_owner_shown_but_not_what_the_source_allows() {
    let dir = open_tempdir();
    let (source, _) = make_id_dataset(dir.path(), 2, 3);
    for entry in walk(&source) {
        chmod(&entry, 0o644);
    }
    chmod(&source, 0o755);
    chmod(&source.join("c0"), 0o755);
    // Root's: s00 private to root, c1 closed to others.
    chmod(&source.join("c0/s00.jpg"), 0o600);
    chmod(&source.join("c1"), 0o700);
    // A recipe's view too (`val/`, beside augmented/), which the core checks the same way.
    let yaml = "allow_other: true\ncache: { memory: 64MiB }\nrecipes: { val: { augment: [ {resize: {size: 40}}, {center_crop: {size: 32}} ] } }\n";
    let config = write_config(dir.path(), yaml);
    let mnt_dir = dir.path().join("mnt");
    let mut cmd = common::mount_command(&config, &source, &mnt_dir);
    cmd.args(["--uid", "65534", "-o", "gid=65534"]);
    let mnt = Mounted::start_command(cmd, &mnt_dir, &dir.path().join("prepfs.log"), LIMIT);
    // Every node shows the owner asked for (the mode stays the source's, write bits cleared).
    for path in ["", "encoded/c0/s00.jpg", "augmented/c0/s01.ppm", "decoded/c1", "decoded/c1/s03.ppm"] {
        let meta = std::fs::metadata(mnt.path(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!((meta.uid(), meta.gid()), (65534, 65534), "{path}");
    }
    assert_eq!(std::fs::metadata(mnt.path("decoded/c0/s00.ppm")).expect("stat").permissions().mode() & 0o777, 0o400);
    // The shown owner, nobody, is still refused what the source refuses it, in every view...
    let denied_paths = ["encoded/c0/s00.jpg", "decoded/c0/s00.ppm", "augmented/c0/s00.ppm", "encoded/c1/s03.jpg", "augmented/c1/s03.ppm"];
    for denied in denied_paths.into_iter().chain(["val/c0/s00.ppm", "val/c1/s03.ppm"]) {
        let err = nobody_reads(&mnt.path(denied)).expect_err(denied);
        assert!(err.contains("Permission denied"), "{denied}: {err}");
    }
    let out = as_nobody(&["ls", &mnt.path("augmented/c1").display().to_string()]);
    assert!(!out.status.success(), "nobody listed c1: {}", String::from_utf8_lossy(&out.stdout));
    // ... and given what it allows.
    assert_eq!(id_of_ppm(&nobody_reads(&mnt.path("augmented/c0/s01.ppm")).expect("its pixels")), 1);
    assert_eq!(id_of_ppm(&nobody_reads(&mnt.path("val/c0/s01.ppm")).expect("its pixels through a recipe")), 1);
    assert_eq!(nobody_reads(&mnt.path("encoded/c0/s02.jpg")).expect("world-readable"), std::fs::read(source.join("c0/s02.jpg")).expect("source"));
    // Root reads everything.
    assert!(std::fs::read(mnt.path("augmented/c1/s03.ppm")).is_ok());
}

#[test]
fn a_job_never_substitutes_a_sample_its_user_may_not_read() {
    let dir = open_tempdir();
    let (source, _) = make_id_dataset(dir.path(), 1, 4);
    readable_by_all(&source);
    chmod(&source.join("c0/s00.jpg"), 0o600);
    let config = write_config(dir.path(), "allow_other: true\ncache: { memory: 64MiB, refill: false }\njobs: { prefetch_window: 0 }\n");
    let mnt = Mounted::start(dir.path(), &config, &source, LIMIT);
    // Root's read caches s00 (decoded pixels and bytes): the preferred substitute for any
    // uncached sample of its class.
    assert_eq!(id_of_ppm(&std::fs::read(mnt.path("decoded/c0/s00.ppm")).expect("root reads s00")), 0);
    // nobody's job: the kernel checks each requested file; s00 is never served in its place.
    let mut served = Vec::new();
    for _epoch in 0..3 {
        for name in ["s01", "s02", "s03"] {
            let bytes = nobody_reads(&mnt.path(&format!("jobs/mine/augmented/c0/{name}.ppm"))).expect("a readable sample");
            served.push(id_of_ppm(&bytes));
        }
    }
    assert!(!served.contains(&0), "nobody was served root's private sample: {served:?}");
    assert!(nobody_reads(&mnt.path("jobs/mine/augmented/c0/s00.ppm")).expect_err("s00 itself").contains("Permission denied"));
}

/// `prepfs mount SOURCE MNT --allow-non-empty`, expected to be refused within 30 s: its exit
/// status and stderr. If it mounts instead, the guard aborts the FUSE connection (a mount over
/// itself hangs for good otherwise) before the test fails.
fn refused_mount(source: &Path, mnt: &Path) -> (std::process::ExitStatus, String) {
    let mut cmd = Command::new(common::prepfs_bin());
    cmd.arg("mount").arg(source).arg(mnt).arg("--allow-non-empty");
    let mut run = common::Refused::start(cmd, mnt);
    let ended = run.wait(Duration::from_secs(30));
    let mounted = prepfs::mount::mount_at(mnt).is_some();
    drop(run);
    let (status, err) = ended.unwrap_or_else(|| panic!("prepfs mount {} {} was not refused (mounted: {mounted})", source.display(), mnt.display()));
    assert!(!mounted && prepfs::mount::mount_at(mnt).is_none(), "nothing stays mounted");
    (status, err)
}

#[test]
fn a_source_inside_its_mountpoint_is_refused_before_mounting_even_through_a_symlink() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().canonicalize().expect("canonical tempdir");
    let mnt = root.join("mnt");
    std::fs::create_dir(&mnt).expect("mkdir");
    let (source, _) = make_id_dataset(&mnt, 2, 3);
    let link = root.join("link");
    std::os::unix::fs::symlink(&source, &link).expect("symlink");
    for given in [&source, &link, &mnt] {
        let (status, err) = refused_mount(given, &mnt);
        assert_eq!(status.code(), Some(1), "{err}");
        let named = format!("source {} is inside mountpoint {}", given.canonicalize().expect("canonical").display(), mnt.display());
        // The mountpoint as its own source is refused by the config's check, naming it too.
        let itself = format!("{} is inside source {}", mnt.display(), mnt.display());
        assert!(err.contains(&named) || (given == &mnt && err.contains(&itself)), "{err}");
        assert!(!err.contains("catalog ready"), "refused before the scan: {err}");
    }
}

#[test]
fn a_mountpoint_inside_its_source_is_refused_before_mounting() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().canonicalize().expect("canonical tempdir");
    let (source, _) = make_id_dataset(&root, 2, 3);
    let mnt = source.join("mnt");
    std::fs::create_dir(&mnt).expect("mkdir");
    // Named through a symlink, so no comparison of the paths as written can see it.
    let link = root.join("to-mnt");
    std::os::unix::fs::symlink(&mnt, &link).expect("symlink");
    let mut cmd = Command::new(common::prepfs_bin());
    cmd.arg("mount").arg(&source).arg(&link);
    let mut run = common::Refused::start(cmd, &mnt);
    let ended = run.wait(Duration::from_secs(30));
    let mounted = prepfs::mount::mount_at(&mnt).is_some();
    drop(run);
    let (status, err) = ended.unwrap_or_else(|| panic!("not refused (mounted: {mounted})"));
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains(&format!("mountpoint {} is inside source {}", mnt.display(), source.display())), "{err}");
    assert!(!mounted && prepfs::mount::mount_at(&mnt).is_none());
}
