//! Mounted tests of issue 50's findings on what the mount prints and what it holds in memory:
//! names escaped wherever they are printed (a name with a newline writes no line of its own in
//! the log), loader connections that hold no buffer while idle, and the bound on pixel work in
//! flight (one output larger than `max_open_bytes` warned of and refused; concurrent large ones
//! kept within it). The real binary runs as root; the attacker is `nobody` where access matters.
//! Each test runs in its own directory under a time limit, and the mount guard unmounts on every
//! way out.

use crate::common;
use common::{chmod, status_bytes};

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{make_id_dataset, mount_command, open_tempdir, prepfs_bin, write_config, Mounted};

const LIMIT: Duration = Duration::from_secs(180);

/// Writes `bytes` to `path` as `nobody` (the attacker adds a file to a dataset they may write).
fn nobody_writes(path: &Path, bytes: &[u8]) {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c"])
        .arg("import sys; open(sys.argv[1], 'wb').write(bytes.fromhex(sys.argv[2]))")
        .arg(path)
        .arg(hex)
        .output()
        .expect("setpriv");
    assert!(out.status.success(), "nobody could not write {path:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// The newline name's text, as the attacker wrote it (a name holds no `/`), and as the log must
/// show it.
const CRON: &[u8] = b"a\n* * * * * root touch pwned\n.jpg";
const CRON_SHOWN: &str = "a\\n* * * * * root touch pwned\\n.jpg";
/// A name with a terminal escape, a bell and a byte that is not UTF-8.
const TERMINAL: &[u8] = b"b\x1b[2J\x07\xff.jpg";
const TERMINAL_SHOWN: &str = "b\\x1b[2J\\x07\\xff.jpg";

#[test]
fn a_name_with_a_newline_writes_no_line_of_its_own_in_the_log_and_control_characters_print_escaped() {
    let dir = open_tempdir();
    let (source, _) = make_id_dataset(dir.path(), 1, 3);
    chmod(&source, 0o755);
    // The class directory is the attacker's to add to.
    std::os::unix::fs::chown(source.join("c0"), Some(65534), Some(65534)).expect("chown");
    for f in std::fs::read_dir(source.join("c0")).expect("list") {
        chmod(&f.expect("entry").path(), 0o644);
    }
    let not_a_jpeg = b"\xff\xd8\xff\xe0 this is no JPEG, only a name";
    nobody_writes(&source.join("c0").join(OsStr::from_bytes(CRON)), not_a_jpeg);
    nobody_writes(&source.join("c0").join(OsStr::from_bytes(TERMINAL)), not_a_jpeg);
    let log_file = dir.path().join("daemon.log");
    let config = write_config(dir.path(), "allow_other: true\ncache: { memory: 64MiB }\n");
    let mountpoint = dir.path().join("mnt");
    let mut cmd = mount_command(&config, &source, &mountpoint);
    cmd.arg("--log-file").arg(&log_file);
    let mnt = Mounted::start_command(cmd, &mountpoint, &dir.path().join("prepfs.log"), LIMIT);

    // The listing keeps the real names: readdir is not printing.
    let names: Vec<Vec<u8>> =
        std::fs::read_dir(mnt.path("encoded/c0")).expect("list").map(|e| e.expect("entry").file_name().as_bytes().to_vec()).collect();
    assert!(names.iter().any(|n| n == CRON) && names.iter().any(|n| n == TERMINAL), "{names:?}");
    // The attacker has the daemon log the names: each decode fails (EIO) and is logged.
    let cron_ppm = mnt.path("decoded/c0").join(OsStr::from_bytes(b"a\n* * * * * root touch pwned\n.ppm"));
    let out = Command::new("setpriv").args(["--reuid=65534", "--regid=65534", "--clear-groups", "cat"]).arg(&cron_ppm).output().expect("cat");
    assert!(!out.status.success(), "an undecodable sample was served");
    let terminal_ppm = mnt.path("decoded/c0").join(OsStr::from_bytes(b"b\x1b[2J\x07\xff.ppm"));
    let out = Command::new("setpriv").args(["--reuid=65534", "--regid=65534", "--clear-groups", "cat"]).arg(&terminal_ppm).output().expect("cat");
    assert!(!out.status.success(), "an undecodable sample was served");

    let started = Instant::now();
    let log = loop {
        let log = std::fs::read(&log_file).unwrap_or_default();
        let text = String::from_utf8_lossy(&log).into_owned();
        if text.matches("cannot decode").count() >= 2 {
            break log;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "the bad samples were not logged:\n{text}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let text = String::from_utf8(log.clone()).expect("the log is UTF-8: every stray byte escaped");
    for line in text.lines() {
        assert!(!line.starts_with("* * * * *"), "the name wrote a line of its own: {line:?}");
    }
    for byte in [0x1b, 0x07, b'\r'] {
        assert!(!log.contains(&byte), "a raw control character {byte:#x} in the log");
    }
    assert!(text.lines().any(|l| l.contains("cannot decode") && l.contains(CRON_SHOWN)), "{text}");
    assert!(text.lines().any(|l| l.contains("cannot decode") && l.contains(TERMINAL_SHOWN)), "{text}");

    // stats.json is JSON with those names in it (the decoded/ file's name is its own).
    let stats = mnt.stats();
    let bad = stats["bad_samples"].to_string();
    assert!(bad.contains("* * * * * root touch"), "{stats}");
    // `prepfs stats` prints the summary with no raw control character.
    let out = Command::new(prepfs_bin()).arg("stats").arg(&mnt.mountpoint).output().expect("prepfs stats");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!out.stdout.iter().any(|&b| b == 0x1b || b == 0x07), "{}", String::from_utf8_lossy(&out.stdout));

    // `prepfs check` names a source it refuses escaped, on one line (no glob character in it,
    // or it would be a shard pattern).
    let missing = dir.path().join(OsStr::from_bytes(b"gone\nroot touch pwned\n\x1bc"));
    let out = Command::new(prepfs_bin()).arg("check").arg(&config).arg("--source").arg(&missing).output().expect("prepfs check");
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).expect("UTF-8");
    assert!(err.contains("gone\\nroot touch pwned\\n\\x1bc"), "{err}");
    assert!(err.lines().all(|l| !l.starts_with("root touch")) && !err.contains('\x1b'), "{err:?}");
}

#[test]
fn idle_loader_connections_that_declare_16_mib_frames_hold_no_memory() {
    let dir = open_tempdir();
    let (source, _) = make_id_dataset(dir.path(), 2, 6);
    chmod(&source, 0o755);
    let config = write_config(dir.path(), "seed: 1\nallow_other: true\naugment:\n  - random_resized_crop: { size: 224 }\n");
    let mnt = Mounted::start(dir.path(), &config, &source, LIMIT);
    let socket = mnt.stats()["loader"]["socket"].as_str().expect("socket").to_owned();
    // A first loader's connection, so its thread's and the job's memory are in the baseline.
    let mut warm = attack(&["idle", &socket, "idle", "1", "100"]);
    assert_eq!(first_line(&mut warm)["welcomed"], 1);
    drop(warm.stdin.take());
    assert!(warm.wait().expect("wait").success());
    let started = Instant::now();
    while mnt.stats()["loader"]["open_connections"].as_u64() != Some(0) {
        assert!(started.elapsed() < Duration::from_secs(10), "{}", mnt.stats()["loader"]);
        std::thread::sleep(Duration::from_millis(50));
    }
    let before = status_bytes(mnt.pid(), "VmRSS:");
    // Eight of nobody's connections (the most one user holds), each welcomed, then declaring a
    // frame of 16 MiB (the protocol's most) and sending 6 bytes of it.
    let mut hold = attack(&["idle", &socket, "idle", "8", &(16u32 << 20).to_string()]);
    let got = first_line(&mut hold);
    assert_eq!(got["welcomed"], 8, "{got}");
    std::thread::sleep(Duration::from_secs(1));
    let during = status_bytes(mnt.pid(), "VmRSS:");
    let grown = during.saturating_sub(before);
    eprintln!("RSS {} MB before, {} MB with 8 idle connections", before >> 20, during >> 20);
    assert!(grown < 8 << 20, "8 idle connections grew the daemon by {} MB ({} -> {} MB)", grown >> 20, before >> 20, during >> 20);
    drop(hold.stdin.take());
    assert!(hold.wait().expect("wait").success());
    assert!(mnt.stop().success());
}

/// tests/support/loader_attack.py as `nobody`, its stdin and stdout piped (it holds its
/// connections until its stdin closes).
fn attack(args: &[&str]) -> std::process::Child {
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/loader_attack.py"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3")
}

/// The JSON line an attack prints once its connections are in place.
fn first_line(attack: &mut std::process::Child) -> serde_json::Value {
    let mut line = String::new();
    BufReader::new(attack.stdout.as_mut().expect("stdout")).read_line(&mut line).expect("the attack's result");
    serde_json::from_str(line.trim()).unwrap_or_else(|e| panic!("{e}: {line}"))
}

/// The files of `augmented/c0`, sorted.
fn augmented(mnt: &Mounted) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(mnt.path("augmented/c0")).expect("list").map(|e| e.expect("entry").path()).collect();
    files.sort();
    files
}

#[test]
fn one_output_larger_than_max_open_bytes_is_warned_of_and_refused_at_once() {
    let dir = open_tempdir();
    let (source, _) = make_id_dataset(dir.path(), 1, 4);
    // 16384x16384 as PPM: 768 MiB an output, against max_open_bytes' 256 MiB.
    let config = write_config(dir.path(), "cache: { memory: 0 }\naugment:\n  - random_resized_crop: { size: 16384 }\n");
    let out = Command::new(prepfs_bin()).arg("check").arg(&config).arg("--source").arg(&source).arg("--mountpoint").arg(dir.path().join("mnt")).output().expect("check");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let warned = String::from_utf8_lossy(&out.stderr);
    assert!(warned.contains("warning") && warned.contains("16384x16384") && warned.contains("768.0 MiB") && warned.contains("256.0 MiB"), "{warned}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("max_open_bytes"), "stdout stays the config");

    let mnt = Mounted::start(dir.path(), &config, &source, LIMIT);
    assert!(mnt.log().contains("16384x16384") && mnt.log().contains("768.0 MiB"), "the mount warns too: {}", mnt.log());
    let rss = status_bytes(mnt.pid(), "VmHWM:");
    let started = Instant::now();
    let readers: Vec<_> = augmented(&mnt).into_iter().map(|f| std::thread::spawn(move || std::fs::read(f).map(|b| b.len()))).collect();
    for r in readers {
        let err = r.join().expect("reader").expect_err("refused");
        assert_eq!(err.raw_os_error(), Some(libc::ENOMEM), "{err}");
    }
    assert!(started.elapsed() < Duration::from_secs(10), "refused at once, not made: {:?}", started.elapsed());
    let peak = status_bytes(mnt.pid(), "VmHWM:");
    eprintln!("peak RSS {} MB before the reads, {} MB after", rss >> 20, peak >> 20);
    assert!(peak < rss + (64 << 20), "peak RSS {} MB (was {} MB)", peak >> 20, rss >> 20);
    assert!(mnt.log().contains("more than max_open_bytes (256.0 MiB), the bound on pixel work in flight; refused"), "{}", mnt.log());
    // Not the samples' fault: none is marked bad, and their decoded files serve.
    assert_eq!(mnt.stats()["decode_errors"], 0);
    assert!(std::fs::read(mnt.path("decoded/c0/s00.ppm")).is_ok());
}

#[test]
fn concurrent_large_outputs_keep_pixel_work_in_flight_within_max_open_bytes() {
    let dir = open_tempdir();
    let (source, _) = make_id_dataset(dir.path(), 1, 8);
    // 4096x4096 as PPM: 48 MiB an output, one at a time within 64 MiB of pixel work (and one
    // pinned by an open handle within max_open_bytes); eight readers and eight decode threads.
    // (max_pixels lowered so that the largest decode fits 64 MiB too: nothing to warn of.)
    let yaml = "threads: 8\nmax_open_bytes: 64MiB\nmax_pixels: 10000000\ncache: { memory: 0, refill: false }\naugment:\n  - random_resized_crop: { size: 4096 }\n";
    let config = write_config(dir.path(), yaml);
    let mnt = Mounted::start(dir.path(), &config, &source, LIMIT);
    assert!(!mnt.log().contains("the bound on pixel work in flight:"), "nothing to warn of: {}", mnt.log());
    let base = status_bytes(mnt.pid(), "VmHWM:");
    let readers: Vec<_> = augmented(&mnt).into_iter().map(|f| std::thread::spawn(move || std::fs::read(f).map(|b| b.len()))).collect();
    let results: Vec<_> = readers.into_iter().map(|r| r.join().expect("reader")).collect();
    let peak = status_bytes(mnt.pid(), "VmHWM:");
    let served = results.iter().filter(|r| r.as_ref().is_ok_and(|&n| n == "P6\n4096 4096\n255\n".len() + 4096 * 4096 * 3)).count();
    eprintln!("{served} of 8 served; peak RSS {} MB over a base of {} MB", (peak - base) >> 20, base >> 20);
    assert!(served >= 1, "{results:?}");
    for r in &results {
        if let Err(e) = r {
            // An open may wait out its turn for the open files' budget (ENFILE), never ENOMEM.
            assert_eq!(e.raw_os_error(), Some(libc::ENFILE), "{e}");
        }
    }
    // Pixel work within 64 MiB, and 64 MiB pinned by open handles, with room for the rest.
    assert!(peak - base < 176 << 20, "pixel work grew the daemon by {} MB", (peak - base) >> 20);
    assert_eq!(mnt.stats()["pixel_work_bytes"], 0, "every reservation given back");
}
