//! Mounted test of WebDataset tar shards as the source: the real `prepfs` binary over shards
//! packed from real JPEGs (`KEY.jpg` with `KEY.cls` or `KEY.json`), read through the kernel:
//! every sample byte for byte in `encoded/`, the right pixels in `decoded/`, decodable outputs in
//! `augmented/`, a truncated shard's members before the cut, a shard's permissions kept for an
//! unprivileged user, and the kept index reused by the next mount. Its own temporary directory,
//! a mount guard that unmounts on every way out, and a time limit.

use crate::common;
use common::{chmod};

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{add_tar_member as add, id_of_pixels, make_id_dataset, parse_ppm, write_config, Mounted};

const LIMIT: Duration = Duration::from_secs(120);

/// The bytes of a member named like an image that is none.
const NOT_AN_IMAGE: &[u8] = b"these bytes are not a JPEG";

/// A sample as packed: its served class and name, its id, its JPEG bytes.
struct Packed {
    class: &'static str,
    name: String,
    id: usize,
    jpeg: Vec<u8>,
}

fn as_nobody_cat(path: &Path) -> Result<Vec<u8>, String> {
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--", "cat"])
        .arg(path)
        .output()
        .expect("setpriv (util-linux)");
    if out.status.success() {
        Ok(out.stdout)
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// Three shards of 15 id-coded JPEGs in 3 classes: `train-000.tar` (ids 0-7, labels in `.cls`,
/// id 7's key with directories in it), `train-001.tar` (ids 8-14, labels in `.json`; mode
/// 0600), and `train-002.tar`, with a member that is not an image and cut inside its third
/// sample. Returns the shards' directory and
/// the samples served.
fn pack_shards(dir: &Path) -> (PathBuf, Vec<Packed>) {
    let (images, class_of) = make_id_dataset(dir, 3, 5);
    let jpeg = |id: usize| std::fs::read(images.join(format!("c{}/s{id:02}.jpg", class_of[id]))).expect("jpeg");
    let shards = dir.join("shards");
    std::fs::create_dir_all(&shards).expect("mkdir");
    chmod(&shards, 0o755);
    let classes = ["0", "1", "2"];
    let mut packed = Vec::new();
    let mut first = tar::Builder::new(std::fs::File::create(shards.join("train-000.tar")).expect("create"));
    for id in 0..8 {
        let key = if id == 7 { "nested/dir/s07".to_string() } else { format!("s{id:02}") };
        add(&mut first, &format!("{key}.jpg"), &jpeg(id));
        add(&mut first, &format!("{key}.cls"), format!("{}\n", class_of[id]).as_bytes());
        packed.push(Packed { class: classes[class_of[id]], name: format!("{}.jpg", key.replace('/', "%2F")), id, jpeg: jpeg(id) });
    }
    first.into_inner().expect("finish");
    let mut second = tar::Builder::new(std::fs::File::create(shards.join("train-001.tar")).expect("create"));
    for id in 8..15 {
        let key = format!("s{id:02}");
        add(&mut second, &format!("{key}.json"), format!("{{\"class\": {}, \"caption\": \"x\"}}", class_of[id]).as_bytes());
        add(&mut second, &format!("{key}.jpg"), &jpeg(id));
        packed.push(Packed { class: classes[class_of[id]], name: format!("{key}.jpg"), id, jpeg: jpeg(id) });
    }
    second.into_inner().expect("finish");
    let cut = shards.join("train-002.tar");
    let mut third = tar::Builder::new(std::fs::File::create(&cut).expect("create"));
    add(&mut third, "t00.jpg", &jpeg(0));
    add(&mut third, "t00.cls", b"0");
    add(&mut third, "t02.jpg", NOT_AN_IMAGE);
    add(&mut third, "t02.cls", b"0");
    add(&mut third, "t01.jpg", &jpeg(1));
    add(&mut third, "t01.cls", b"0");
    third.into_inner().expect("finish");
    packed.push(Packed { class: "0", name: "t00.jpg".into(), id: 0, jpeg: jpeg(0) });
    // Cut inside t01.jpg's data: t00 is served, t01 is not.
    let whole = std::fs::read(&cut).expect("read");
    let t01_data = whole.len() - 1024 - 1024 - jpeg(1).len().div_ceil(512) * 512;
    std::fs::write(&cut, &whole[..t01_data + 100]).expect("cut");
    for name in ["train-000.tar", "train-002.tar"] {
        chmod(&shards.join(name), 0o644);
    }
    chmod(&shards.join("train-001.tar"), 0o600);
    (shards, packed)
}

fn shard_names(shards: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(shards).expect("ls").map(|e| e.expect("entry").file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

#[test]
fn samples_packed_in_tar_shards_are_served_byte_for_byte_as_an_image_folder_and_the_index_is_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    chmod(dir.path(), 0o755);
    let (shards, packed) = pack_shards(dir.path());
    let pattern = format!("{}/train-{{000..002}}.tar", shards.display());
    let index_dir = dir.path().join("index");
    let run = dir.path().join("run");
    std::fs::create_dir_all(&run).expect("mkdir");
    chmod(&run, 0o755);
    let yaml = format!("allow_other: true\nseed: 3\nthreads: 2\ncache: {{ memory: 64MiB }}\nsource: {{ shards: \"{pattern}\", index_dir: {} }}\n", index_dir.display());
    let config = write_config(&run, &yaml);
    let mnt = Mounted::start(&run, &config, Path::new(&pattern), LIMIT);

    // The classes from the labels, each sample under its key's safe name.
    let mut classes: Vec<String> = std::fs::read_dir(mnt.path("encoded")).expect("ls").map(|e| e.expect("entry").file_name().to_string_lossy().into_owned()).collect();
    classes.sort();
    assert_eq!(classes, ["0", "1", "2"]);
    let mut listed = 0;
    for class in &classes {
        listed += std::fs::read_dir(mnt.path(&format!("encoded/{class}"))).expect("ls").count();
    }
    assert_eq!(listed, packed.len() + 1, "every sample once (and t02, not an image): t01, cut by the end of its shard, is not served");
    assert!(!mnt.path("encoded/0/t01.jpg").exists());
    for s in &packed {
        let rel = format!("{}/{}", s.class, s.name);
        let encoded = std::fs::read(mnt.path(&format!("encoded/{rel}"))).unwrap_or_else(|e| panic!("encoded/{rel}: {e}"));
        assert!(encoded == s.jpeg, "encoded/{rel} is the member's bytes");
        let stem = rel.trim_end_matches(".jpg");
        let decoded = std::fs::read(mnt.path(&format!("decoded/{stem}.ppm"))).unwrap_or_else(|e| panic!("decoded/{stem}.ppm: {e}"));
        let (_, _, rgb) = parse_ppm(&decoded);
        assert_eq!(id_of_pixels(rgb).0, s.id, "decoded/{stem}.ppm holds sample {}'s pixels", s.id);
        for _ in 0..2 {
            let out = std::fs::read(mnt.path(&format!("augmented/{stem}.ppm"))).unwrap_or_else(|e| panic!("augmented/{stem}.ppm: {e}"));
            let (w, h, rgb) = parse_ppm(&out);
            assert!(w > 0 && h > 0);
            assert_eq!(id_of_pixels(rgb).0, s.id, "augmented/{stem}.ppm is an augmentation of sample {}", s.id);
        }
    }

    // A shard's permissions are its samples': nobody reads a 0644 shard's, not a 0600 one's.
    let open = packed.iter().find(|s| s.id == 2).expect("from train-000");
    assert!(as_nobody_cat(&mnt.path(&format!("encoded/{}/{}", open.class, open.name))).expect("readable") == open.jpeg);
    let closed = packed.iter().find(|s| s.id == 9).expect("from train-001");
    for view in ["encoded", "decoded", "augmented"] {
        let name = if view == "encoded" { closed.name.clone() } else { closed.name.replace(".jpg", ".ppm") };
        let denied = as_nobody_cat(&mnt.path(&format!("{view}/{}/{name}", closed.class)));
        assert!(denied.as_ref().is_err_and(|e| e.contains("Permission denied")), "{view}: {denied:?}");
    }
    assert!(mnt.log().contains("shard has bad members"), "the cut shard is said: {}", mnt.log());

    // A member that is not an image: its bytes in `encoded/`, EIO in the pixel views, the
    // others served.
    assert!(std::fs::read(mnt.path("encoded/0/t02.jpg")).expect("encoded") == NOT_AN_IMAGE);
    for view in ["decoded/0/t02.ppm", "augmented/0/t02.ppm"] {
        let err = std::fs::read(mnt.path(view)).expect_err("not an image");
        assert_eq!(err.raw_os_error(), Some(libc::EIO), "{view}: {err}");
    }
    assert!(std::fs::read(mnt.path("augmented/0/t00.ppm")).is_ok());

    // A job's epoch over the shards (opportunistic sampling: cached samples first, another of
    // the same class served in place of one not cached): every sample once, in its class.
    let mut served = Vec::new();
    for class in &classes {
        let dir = mnt.path(&format!("jobs/j1/augmented/{class}"));
        let mut names: Vec<_> = std::fs::read_dir(&dir).expect("job listing").map(|e| e.expect("entry").file_name()).collect();
        names.sort();
        for name in names {
            let out = std::fs::read(dir.join(&name)).unwrap_or_else(|e| panic!("jobs/j1/augmented/{class}/{name:?}: {e}"));
            let (_, _, rgb) = parse_ppm(&out);
            served.push((class.clone(), id_of_pixels(rgb).0));
        }
    }
    let mut want: Vec<(String, usize)> = packed.iter().map(|s| (s.class.to_string(), s.id)).collect();
    served.sort();
    want.sort();
    assert_eq!(served, want, "the job's epoch serves each sample once (t02, known bad, hidden)");
    assert_eq!(mnt.stop().code(), Some(0));

    // The index was kept beside nothing of the source's, and the next mount reuses it.
    assert_eq!(shard_names(&shards), ["train-000.tar", "train-001.tar", "train-002.tar"], "the source is never written");
    assert_eq!(std::fs::read_dir(&index_dir).expect("index dir").filter(|e| e.as_ref().expect("entry").file_name().to_string_lossy().ends_with(".idx")).count(), 3, "one kept index per shard");
    // As a user mounts shards: `prepfs mount 'PATTERN' MOUNTPOINT --config FILE`.
    let mut cmd = Command::new(common::prepfs_bin());
    cmd.arg("mount").arg(&pattern).arg(run.join("mnt")).arg("--config").arg(&config).arg("--drain").arg("0.2");
    cmd.env("PREPFS_RUN_DIR", run.join("prepfs-run"));
    let again = Mounted::start_command(cmd, &run.join("mnt"), &run.join("prepfs.log"), LIMIT);
    let log = again.log();
    assert!(log.contains("reused=3") && log.contains("indexed=0"), "{log}");
    let s = &packed[7];
    assert!(std::fs::read(again.path(&format!("encoded/{}/{}", s.class, s.name))).expect("read") == s.jpeg);
    assert_eq!(again.stop().code(), Some(0));
}
