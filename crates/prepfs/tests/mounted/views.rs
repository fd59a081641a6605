//! Mounted end-to-end tests of the three views: the real `prepfs` binary over a generated
//! dataset, read through the kernel as a training job would. Each test has its own temporary
//! directory, a mount guard that unmounts on every way out, and a time limit.

use crate::common;

use std::collections::BTreeMap;
use std::fs;
use std::io::{ErrorKind, Read};
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{is_mounted, make_dataset, python, write_config, Mounted};

const LIMIT: Duration = Duration::from_secs(120);
const BAD_FILES: [&str; 6] = ["bad_truncated", "bad_corrupt", "bad_empty", "bad_text", "bad_huge", "bad_png"];

const CONFIG: &str = "seed: 1\nthreads: 2\n";

/// Every file under `root`, relative path -> bytes.
fn tree_bytes(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).expect("read_dir") {
            let entry = entry.expect("entry");
            let path = entry.path();
            if entry.file_type().expect("type").is_dir() {
                stack.push(path);
            } else {
                let rel = path.strip_prefix(root).expect("rel").to_path_buf();
                out.insert(rel, fs::read(&path).expect("read"));
            }
        }
    }
    out
}

fn read_all(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut f = fs::File::open(path)?;
    let mut buf = Vec::new();
    f.read_to_end(&mut buf)?;
    Ok(buf)
}

#[test]
fn encoded_is_byte_identical_and_pixel_views_match_pil() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = make_dataset(tmp.path(), 3, 8, true);
    let config = write_config(tmp.path(), CONFIG);
    let before = tree_bytes(&source);
    let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);

    // encoded/: the same tree, byte for byte, non-image files included.
    let served = tree_bytes(&mnt.path("encoded"));
    assert_eq!(served.keys().collect::<Vec<_>>(), before.keys().collect::<Vec<_>>());
    for (rel, bytes) in &before {
        assert!(served[rel] == *bytes, "encoded/{} differs from the source", rel.display());
    }

    // decoded/ and augmented/: image samples only, as .ppm; augmented has one fixed size.
    let class0 = fs::read_dir(mnt.path("decoded/n00000000")).expect("list").count();
    let images0 = before.keys().filter(|p| p.starts_with("n00000000") && !p.ends_with("README.txt")).count();
    assert_eq!(class0, images0);
    for entry in fs::read_dir(mnt.path("augmented/n00000001")).expect("list") {
        let entry = entry.expect("entry");
        assert_eq!(entry.path().extension().and_then(|e| e.to_str()), Some("ppm"));
        assert_eq!(entry.metadata().expect("stat").len(), 15 + 224 * 224 * 3);
    }

    // Decoded sizes are exact before any read, and PIL agrees on every pixel.
    for entry in fs::read_dir(mnt.path("decoded/n00000001")).expect("list") {
        let path = entry.expect("entry").path();
        let stat_len = fs::metadata(&path).expect("stat").len();
        assert_eq!(read_all(&path).expect("read").len() as u64, stat_len, "{}", path.display());
    }
    let mut args = vec![source.clone().into_os_string(), mnt.mountpoint.clone().into_os_string(), "--skip".into()];
    args.extend(BAD_FILES.iter().map(Into::into));
    let report = python("compare_pil.py", &args);
    assert!(report.contains("\"compared\""), "{report}");

    drop(mnt);
    assert_eq!(tree_bytes(&source), before, "the source was modified");
}

#[test]
fn augmented_opens_draw_fresh_crops_pinned_to_their_handle() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = make_dataset(tmp.path(), 1, 4, false);
    let config = write_config(tmp.path(), CONFIG);
    let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);
    let path = mnt.path("augmented/n00000000/n00000000_000001.ppm");

    let a = read_all(&path).expect("first open");
    // The close's release reaches the daemon a moment after close returns; an open that comes
    // before it shares the handle still open (docs/mounting.md: overlapping opens see one draw).
    mnt.wait_released();
    let b = read_all(&path).expect("second open");
    assert_eq!(a.len(), b.len());
    assert!(a != b, "two opens served the same augmentation");

    // One handle, read in small pieces with seeks, sees one consistent image.
    let mut f = fs::File::open(&path).expect("open");
    let mut pieces = Vec::new();
    let mut chunk = vec![0u8; 4096];
    loop {
        let n = f.read(&mut chunk).expect("read");
        if n == 0 {
            break;
        }
        pieces.extend_from_slice(&chunk[..n]);
    }
    use std::os::unix::fs::FileExt;
    let mut again = vec![0u8; pieces.len()];
    f.read_exact_at(&mut again, 0).expect("pread");
    assert_eq!(pieces, again, "a handle's content changed between reads");
    assert!(pieces.starts_with(b"P6\n224 224\n255\n"));
}

#[test]
fn bad_samples_get_eio_and_everything_else_keeps_working() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = make_dataset(tmp.path(), 2, 4, true);
    let config = write_config(tmp.path(), CONFIG);
    let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);
    let bad_dir = "n00000001";
    for name in BAD_FILES {
        for view in ["decoded", "augmented"] {
            let path = mnt.path(&format!("{view}/{bad_dir}/{name}.ppm"));
            let err = read_all(&path).expect_err(&format!("{view}/{name} should fail"));
            assert_eq!(err.raw_os_error(), Some(libc::EIO), "{view}/{name}: {err}");
        }
        // The original bytes stay readable, damaged or not.
        let encoded = fs::read_dir(mnt.path(&format!("encoded/{bad_dir}"))).expect("list");
        assert!(encoded.filter_map(Result::ok).any(|e| e.file_name().to_string_lossy().starts_with(name)));
    }
    // Every good sample still decodes.
    for class in ["n00000000", "n00000001"] {
        for entry in fs::read_dir(mnt.path(&format!("augmented/{class}"))).expect("list") {
            let path = entry.expect("entry").path();
            if !path.file_name().is_some_and(|n| n.to_string_lossy().starts_with("bad_")) {
                assert_eq!(read_all(&path).expect("good sample").len(), 15 + 224 * 224 * 3);
            }
        }
    }
    let stats = mnt.stats();
    assert!(stats["decode_errors"].as_u64().unwrap_or(0) >= BAD_FILES.len() as u64, "{stats}");
    // stats.json names each bad sample (relative to the source) with its reason.
    let listed = stats["bad_samples"]["samples"].as_array().expect("bad_samples.samples");
    for name in BAD_FILES {
        let entry = listed.iter().find(|e| e["path"].as_str().is_some_and(|p| p.starts_with(&format!("{bad_dir}/{name}."))));
        let entry = entry.unwrap_or_else(|| panic!("{name} not listed: {stats}"));
        assert!(entry["reason"].as_str().is_some_and(|r| !r.is_empty()), "{entry}");
    }
    assert_eq!(listed.len(), BAD_FILES.len(), "only the bad ones: {stats}");
    let log = mnt.log();
    for name in BAD_FILES {
        assert!(log.contains(name), "no log line names {name}:\n{log}");
    }
}

#[test]
fn a_jpeg_cut_short_fails_at_its_first_open_though_most_crops_lie_above_the_cut() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = make_dataset(tmp.path(), 1, 8, false);
    // Every JPEG cut at 85% of its bytes: most random crops lie wholly above the cut, and a
    // region decode reads nothing below its rows.
    let class = source.join("n00000000");
    let mut cut = Vec::new();
    for entry in fs::read_dir(&class).expect("list") {
        let path = entry.expect("entry").path();
        let ext = path.extension().map(|e| e.to_string_lossy().to_lowercase());
        if matches!(ext.as_deref(), Some("jpeg" | "jpg")) {
            let bytes = fs::read(&path).expect("read");
            fs::write(&path, &bytes[..bytes.len() * 85 / 100]).expect("cut");
            cut.push(path.file_stem().expect("stem").to_string_lossy().into_owned());
        }
    }
    assert!(cut.len() >= 6, "{cut:?}");
    // No refill (it decodes in full ahead of readers) and no room for pixels: each open
    // region-decodes its crop.
    let config = write_config(tmp.path(), &format!("{CONFIG}cache: {{ memory: 64MiB, split: 0-0-100, refill: false }}\n"));
    let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);
    for stem in &cut {
        let err = match read_all(&mnt.path(&format!("augmented/n00000000/{stem}.ppm"))) {
            Ok(bytes) => panic!("{stem}: {} bytes served of a file cut short", bytes.len()),
            Err(e) => e,
        };
        assert_eq!(err.raw_os_error(), Some(libc::EIO), "{stem}: {err}");
    }
    let stats = mnt.stats();
    assert_eq!(stats["bad_samples"]["samples"].as_array().map(Vec::len), Some(cut.len()), "{stats}");
}

#[test]
fn the_mount_is_read_only() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = make_dataset(tmp.path(), 1, 2, false);
    let config = write_config(tmp.path(), CONFIG);
    let before = tree_bytes(&source);
    let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);
    let file = mnt.path("encoded/n00000000/n00000000_000000.JPEG");
    let file = if file.exists() { file } else { mnt.path("encoded/n00000000/n00000000_000000.jpg") };
    let erofs = |r: std::io::Result<()>| {
        let e = r.expect_err("write should fail");
        assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
    };
    erofs(fs::OpenOptions::new().write(true).open(&file).map(|_| ()));
    erofs(fs::write(mnt.path("encoded/new.txt"), b"x"));
    erofs(fs::create_dir(mnt.path("encoded/newdir")));
    erofs(fs::remove_file(&file));
    erofs(fs::rename(&file, mnt.path("encoded/n00000000/moved.jpg")));
    drop(mnt);
    assert_eq!(tree_bytes(&source), before);
}

#[test]
fn a_file_vanishing_under_the_mount_fails_alone() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = make_dataset(tmp.path(), 1, 4, false);
    let config = write_config(tmp.path(), CONFIG);
    let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);
    let class = source.join("n00000000");
    let mut names: Vec<_> = fs::read_dir(&class).expect("list").map(|e| e.expect("e").file_name()).collect();
    names.sort();
    let victim = names.iter().find(|n| n.to_string_lossy().ends_with("JPEG") || n.to_string_lossy().ends_with("jpg")).expect("a jpeg").clone();
    fs::remove_file(class.join(&victim)).expect("remove");
    let stem = Path::new(&victim).file_stem().expect("stem").to_string_lossy().into_owned();
    let err = read_all(&mnt.path(&format!("augmented/n00000000/{stem}.ppm"))).expect_err("vanished");
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    let err = read_all(&mnt.path(&format!("encoded/n00000000/{}", victim.to_string_lossy()))).expect_err("vanished");
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    let others = names.iter().filter(|n| **n != victim && !n.to_string_lossy().ends_with(".txt"));
    for name in others {
        let stem = Path::new(name).file_stem().expect("stem").to_string_lossy().into_owned();
        read_all(&mnt.path(&format!("augmented/n00000000/{stem}.ppm"))).expect("other samples keep working");
    }
    assert!(mnt.stats()["source_errors"].as_u64().unwrap_or(0) >= 1);
}

#[test]
fn parallel_readers_all_get_their_samples() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = make_dataset(tmp.path(), 4, 10, false);
    let config = write_config(tmp.path(), CONFIG);
    let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);
    let mut files: Vec<PathBuf> = Vec::new();
    for class in fs::read_dir(mnt.path("augmented")).expect("list") {
        for f in fs::read_dir(class.expect("class").path()).expect("list") {
            files.push(f.expect("file").path());
        }
    }
    assert_eq!(files.len(), 40);
    let chunks: Vec<Vec<PathBuf>> = files.chunks(10).map(<[PathBuf]>::to_vec).collect();
    let handles: Vec<_> = chunks
        .into_iter()
        .map(|chunk| {
            std::thread::spawn(move || chunk.iter().map(|p| read_all(p).map(|b| b.len())).collect::<Vec<_>>())
        })
        .collect();
    for h in handles {
        for len in h.join().expect("reader thread") {
            assert_eq!(len.expect("read"), 15 + 224 * 224 * 3);
        }
    }
}

#[test]
fn sigterm_unmounts_and_a_dead_mount_is_recovered() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = make_dataset(tmp.path(), 1, 2, false);
    let config = write_config(tmp.path(), CONFIG);

    // SIGTERM: a clean exit and nothing left mounted.
    let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);
    let mountpoint = mnt.mountpoint.clone();
    let status = mnt.stop();
    assert!(status.success(), "prepfs exited with {status}");
    assert!(!is_mounted(&mountpoint));

    // A daemon killed with its fusermount3 helper leaves a dead mount (ENOTCONN); the next
    // mount clears it and serves.
    let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);
    let mnt = mnt.forget_mount();
    common::kill_leaving_a_dead_mount(mnt.pid());
    std::thread::sleep(Duration::from_millis(300));
    // statfs reaches the (dead) daemon; stat may be answered from cached attributes.
    let err = nix::sys::statfs::statfs(&mountpoint).expect_err("dead mount");
    assert_eq!(err, nix::errno::Errno::ENOTCONN);
    drop(mnt);
    let again = Mounted::start(tmp.path(), &config, &source, LIMIT);
    assert!(again.log().contains("dead mount"), "{}", again.log());
    assert!(fs::read_dir(again.path("augmented/n00000000")).expect("serves").count() >= 2);
}

#[test]
fn a_config_typo_is_refused_before_mounting() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = make_dataset(tmp.path(), 1, 1, false);
    let config = write_config(tmp.path(), "seed: 1\naugment:\n  - random_resized_crop: { size: 224, scael: [0.1, 1.0] }\n");
    let mountpoint = tmp.path().join("mnt");
    let out = common::mount_command(&config, &source, &mountpoint)
        .output()
        .expect("run prepfs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("scael") && stderr.contains("line 3"), "{stderr}");
    assert!(!is_mounted(&mountpoint));
}

#[test]
fn images_sharing_a_stem_are_each_served_under_their_whole_name() {
    use common::{id_levels, id_of_pixels, make_id_dataset, parse_ppm};
    let tmp = tempfile::tempdir().expect("tempdir");
    let (source, _) = make_id_dataset(tmp.path(), 2, 3);
    // c0/s00.jpg is sample 0; beside it, c0/s00.ppm holds sample 40's levels.
    let (w, h) = (160usize, 120usize);
    let (r, g) = id_levels(40);
    let mut ppm = format!("P6\n{w} {h}\n255\n").into_bytes();
    ppm.extend(std::iter::repeat_n([r, g, 128], w * h).flatten());
    fs::write(source.join("c0/s00.ppm"), &ppm).expect("write");
    let config = write_config(tmp.path(), "seed: 1\nthreads: 2\njobs: { ods: false }\n");
    let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);
    for view in ["decoded", "augmented", "jobs/j/decoded"] {
        let mut names: Vec<String> =
            fs::read_dir(mnt.path(&format!("{view}/c0"))).expect("list").map(|e| e.expect("entry").file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        assert_eq!(names, ["s00.jpg.ppm", "s00.ppm.ppm", "s01.ppm", "s02.ppm"], "{view}");
        for (name, id) in [("s00.jpg.ppm", 0), ("s00.ppm.ppm", 40), ("s01.ppm", 1)] {
            let bytes = fs::read(mnt.path(&format!("{view}/c0/{name}"))).expect("read");
            let (_, _, pixels) = parse_ppm(&bytes);
            let (found, distance) = id_of_pixels(pixels);
            assert_eq!(found, id, "{view}/c0/{name} serves sample {found} (distance {distance})");
        }
        // The old name of the pair is gone, not silently one of them.
        assert_eq!(fs::metadata(mnt.path(&format!("{view}/c0/s00.ppm"))).expect_err("no s00.ppm").kind(), ErrorKind::NotFound);
    }
    assert_eq!(mnt.stats()["stem_collisions"].as_u64(), Some(0));
    assert_eq!(mnt.stats()["samples"].as_u64(), Some(7));
}
