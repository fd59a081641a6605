//! Mounted end-to-end tests of the loader socket and `prepfs.Loader` (the Python module `make
//! python` installs): batches equal, sample by sample, to the mount's own files; two loaders of
//! one job served each sample once per epoch, identified by content; DLPack into numpy (and
//! torch where installed); a clear error when the mount goes away mid-epoch; nothing the source
//! denies a user served to them through the socket; and the GPU path, run where a GPU is, and
//! elsewhere a clear error naming what is missing.
//!
//! Without the module these tests say so and pass, unless `PREPFS_REQUIRE_LOADER` is set (as
//! `make test` sets it, after building and installing the module).

use crate::common;

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{make_id_dataset, write_config, Mounted};

const LIMIT: Duration = Duration::from_secs(120);

/// Whether `prepfs` imports in python3; without it a test is skipped, saying so, unless the
/// module is required.
fn module_ready() -> bool {
    let ok = Command::new("python3").args(["-c", "import prepfs"]).stderr(Stdio::null()).status().is_ok_and(|s| s.success());
    if !ok {
        assert!(std::env::var_os("PREPFS_REQUIRE_LOADER").is_none(), "the prepfs Python module is not installed (make python)");
        eprintln!("skipped: the prepfs Python module is not installed (make python builds and installs it)");
    }
    ok
}

/// Runs tests/support/loader_check.py MODE on the mount; its JSON result.
fn check(mode: &str, mnt: &Mounted, job: &str) -> serde_json::Value {
    let out = common::python("loader_check.py", &[mode, mnt.mountpoint.to_str().expect("path"), job]);
    serde_json::from_str(out.lines().last().unwrap_or("")).unwrap_or_else(|e| panic!("{e}: {out}\n{}", mnt.log()))
}

/// A mount of an id-coded dataset (3 classes of 8), with `augment` as the config's list.
fn mount(dir: &Path, augment: &str, extra: &str) -> Mounted {
    let (source, _) = make_id_dataset(dir, 3, 8);
    let config = write_config(dir, &format!("seed: 3\naugment:\n{augment}{extra}"));
    Mounted::start(dir, &config, &source, LIMIT)
}

const CENTER: &str = "  - resize: { size: 256 }\n  - center_crop: { size: 224 }\n";
const RANDOM: &str = "  - random_resized_crop: { size: 224 }\n  - random_horizontal_flip: { p: 0.5 }\n";

#[test]
fn batches_hold_the_mounts_own_samples_pixel_for_pixel_with_imagefolders_labels() {
    if !module_ready() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    // A transform without chance: the same sample is the same pixels in the loader and the view.
    let mnt = mount(tmp.path(), CENTER, "");
    let got = check("pixels", &mnt, "px");
    assert_eq!(got["samples"], 24, "{got}");
    assert_eq!(got["batches"], 5, "{got}");
    assert_eq!(got["len"], 5, "{got}");
    assert_eq!(got["mismatches"], serde_json::json!([]), "{got}");
    assert_eq!(got["label_errors"], serde_json::json!([]), "{got}");
    assert_eq!(got["classes"], serde_json::json!(["c0", "c1", "c2"]));
    let stats = mnt.stats();
    assert_eq!(stats["loader"]["samples"], 24, "{stats}");
    assert!(stats["loader"]["socket"].as_str().is_some_and(|s| s.ends_with(".sock")), "{stats}");
    assert!(mnt.stop().success());
}

#[test]
fn a_loader_of_a_recipes_view_walks_the_job_there_and_gets_the_recipes_own_pixels() {
    if !module_ready() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let recipes = "recipes:\n  val: { augment: [ {resize: {size: 40}}, {center_crop: {size: 32}} ] }\n  pngs:\n    augment: [ {center_crop: {size: 16}} ]\n    output: { format: png }\n";
    let mnt = mount(tmp.path(), CENTER, recipes);
    let got = check("recipe", &mnt, "rc");
    // The recipe's shape, its own pixels (no chance: the same as its view's file), every one of
    // the 24 samples once.
    assert_eq!(got["shapes"], serde_json::json!(["[32, 32, 3]"]), "{got}");
    assert_eq!(got["mismatches"], serde_json::json!([]), "{got}");
    let mut names: Vec<&str> = got["samples"].as_array().expect("samples").iter().filter_map(|n| n.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), 24, "{got}");
    assert_eq!(got["samples"].as_array().map(Vec::len), Some(24), "{got}");
    // A view the mount has not, and one whose files are not raw pixels: refused, saying why.
    let nope = got["nope"].as_str().unwrap_or_default();
    assert!(nope.contains("no view `nope`") && nope.contains("`val`") && nope.contains("`augmented`"), "{got}");
    let pngs = got["pngs"].as_str().unwrap_or_default();
    assert!(pngs.contains("pngs/ serves png"), "{got}");
    assert!(mnt.stop().success());
}

#[test]
fn a_loader_closed_by_its_with_block_refuses_to_iterate_keeps_live_batches_intact_and_gives_its_ring_back_after_them() {
    if !module_ready() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let mnt = mount(tmp.path(), CENTER, "");
    let got = check("close", &mnt, "closing");
    assert!(got["ring_bytes_open"].as_u64().is_some_and(|b| b > 0), "{got}");
    assert_eq!(got["ring_bytes_closed"], 0, "{got}");
    assert_eq!(got["closed"], true, "{got}");
    assert_eq!(got["iter"], "ValueError", "{got}");
    assert_eq!(got["next"], "ValueError", "{got}");
    assert_eq!(got["kept_shape"], serde_json::json!([4, 224, 224, 3]), "{got}");
    assert!(got["kept_sum"].as_i64().is_some_and(|s| s > 0), "{got}");
    // A batch kept past close() stays the same pixels while it lives (the ring is not freed
    // under it), and the ring is given back once it is dropped.
    assert_eq!(got["kept_sum_later"], got["kept_sum"], "{got}");
    assert_eq!(got["ring_bytes_while_kept"], got["ring_bytes_open"], "{got}");
    let open = got["repr_open"].as_str().unwrap_or("");
    assert!(open.starts_with("prepfs.Loader(mountpoint=") && open.contains("job=\"closing\"") && open.ends_with(", open)"), "{open}");
    assert!(open.contains("samples=24, classes=3"), "{open}");
    assert!(got["repr_closed"].as_str().is_some_and(|r| r.ends_with(", closed)")), "{got}");
    assert!(mnt.stop().success());
}

#[test]
fn two_loaders_of_one_job_are_served_every_sample_once_per_epoch() {
    if !module_ready() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let mnt = mount(tmp.path(), RANDOM, "");
    let got = check("two", &mnt, "train");
    assert_eq!(got["errors"], serde_json::json!([]), "{got}");
    for epoch in 0..2 {
        // Each sample identified by its pixels: every id once across both loaders.
        let mut ids: Vec<u64> = Vec::new();
        let mut per_loader = Vec::new();
        for k in 0..2 {
            let served = got["seen"][k][epoch].as_array().expect("served");
            per_loader.push(served.len());
            for entry in served {
                let (name, id, label) = (entry[0].as_str().expect("name"), entry[1].as_u64().expect("id"), entry[2].as_u64().expect("label"));
                assert_eq!(label, id / 8, "{name}: label {label} for sample {id}");
                assert!(name.starts_with(&format!("c{}/", id / 8)), "{name} holds sample {id}");
                ids.push(id);
            }
        }
        ids.sort_unstable();
        assert_eq!(ids, (0..24).collect::<Vec<u64>>(), "epoch {epoch}: not every sample exactly once ({per_loader:?})");
        assert!(per_loader.iter().all(|&n| n > 0), "epoch {epoch}: one loader got nothing: {per_loader:?}");
    }
    let stats = mnt.stats();
    let job = &stats["jobs"]["active"][0];
    assert_eq!((job["name"].as_str(), job["epoch"].as_u64()), (Some("train"), Some(3)), "{stats}");
    assert!(mnt.stop().success());
}

#[test]
fn batches_go_into_torch_through_dlpack_where_torch_is_installed() {
    if !module_ready() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let mnt = mount(tmp.path(), RANDOM, "");
    let got = check("torch", &mnt, "t");
    match got["skipped"].as_str() {
        Some(why) => eprintln!("skipped the torch part: {why}"),
        None => {
            assert_eq!(got["shape"], serde_json::json!([3, 3, 224, 224]), "{got}");
            assert_eq!((got["dtype"].as_str(), got["labels"].as_str()), (Some("torch.float32"), Some("torch.int64")), "{got}");
        }
    }
    assert!(mnt.stop().success());
}

#[test]
fn a_mount_that_goes_away_mid_epoch_gives_the_loader_a_clear_error() {
    if !module_ready() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let mnt = mount(tmp.path(), RANDOM, "");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/loader_check.py");
    let mut child = Command::new("timeout")
        .args(["60", "python3"])
        .arg(&script)
        .args(["unmount", mnt.mountpoint.to_str().expect("path"), "u"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("ready");
    assert_eq!(line.trim(), "ready", "{}", mnt.log());
    assert!(mnt.stop().success());
    child.stdin.take().expect("stdin").write_all(b"go\n").expect("tell it");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).expect("result");
    assert!(child.wait().expect("exit").success(), "{rest}");
    let got: serde_json::Value = serde_json::from_str(rest.trim()).unwrap_or_else(|e| panic!("{e}: {rest}"));
    assert_eq!(got["error"], "ConnectionError", "{got}");
    assert!(got["message"].as_str().is_some_and(|m| m.contains("unmounted")), "{got}");
}

#[test]
fn nobody_is_never_served_roots_private_sample_through_the_socket() {
    let tmp = tempfile::tempdir().expect("tempdir");
    fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
    let (source, _) = make_id_dataset(tmp.path(), 2, 6);
    let private = source.join("c1/s10.jpg");
    fs::set_permissions(&private, fs::Permissions::from_mode(0o600)).expect("chmod");
    let config = write_config(tmp.path(), &format!("seed: 1\nallow_other: true\naugment:\n{RANDOM}"));
    let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);
    let socket = mnt.stats()["loader"]["socket"].as_str().expect("socket").to_owned();
    let run = |as_nobody: bool, job: &str| -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for n in raw_epoch(&socket, as_nobody, job).unwrap_or_else(|e| panic!("{e}")) {
            *counts.entry(n).or_default() += 1;
        }
        counts
    };
    let nobody = run(true, "mine");
    assert!(!nobody.contains_key("c1/s10.jpg"), "nobody was served root's 0600 sample: {nobody:?}");
    assert_eq!(nobody.len(), 11, "nobody is served every other sample once: {nobody:?}");
    assert!(nobody.values().all(|&n| n == 1));
    let root = run(false, "root");
    assert!(root.contains_key("c1/s10.jpg") && root.len() == 12, "{root:?}");
    assert!(mnt.stop().success());
}

/// Runs `program` with `args` as user `nobody` (uid and gid 65534, no other groups); its output.
fn as_nobody(program: &str, args: &[&str]) -> std::process::Output {
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", program])
        .args(args)
        .output()
        .expect("setpriv")
}

/// tests/support/loader_find.py as nobody: the socket found from `mountpoint` as prepfs.Loader
/// finds it, and one epoch of `job` over it.
fn find_and_load_as_nobody(mountpoint: &Path, job: &str) -> serde_json::Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/loader_find.py");
    let out = as_nobody("/usr/bin/python3", &[script.to_str().expect("path"), mountpoint.to_str().expect("path"), job]);
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text} {}", String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn nobody_finds_the_loader_socket_from_an_allow_other_mountpoint_and_no_more_of_the_owners_files() {
    let tmp = tempfile::tempdir().expect("tempdir");
    fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
    let (source, _) = make_id_dataset(tmp.path(), 2, 6);
    fs::set_permissions(source.join("c1/s10.jpg"), fs::Permissions::from_mode(0o600)).expect("chmod");
    let config = write_config(tmp.path(), &format!("seed: 1\nallow_other: true\naugment:\n{RANDOM}"));
    let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);

    let got = find_and_load_as_nobody(&mnt.mountpoint, "mine");
    assert!(got["found_in"].as_str().is_some_and(|f| f.ends_with(".prepfs/loader.json")), "{got}");
    let names: Vec<&str> = got["names"].as_array().unwrap_or_else(|| panic!("{got}")).iter().filter_map(|n| n.as_str()).collect();
    assert_eq!(names.len(), 11, "nobody is served every sample but root's 0600 one: {names:?}");
    assert!(!names.contains(&"c1/s10.jpg"), "{names:?}");

    // loader.json holds the socket and nothing else.
    let loader: serde_json::Value = serde_json::from_slice(&fs::read(mnt.path(".prepfs/loader.json")).expect("loader.json")).expect("json");
    assert_eq!(loader["socket"], mnt.stats()["loader"]["socket"], "{loader}");
    assert_eq!(loader.as_object().map(|o| o.len()), Some(2), "{loader}");

    // The owner's files stay the owner's: stats.json, config.yaml, metrics, and the listing.
    let cat = |rel: &str| as_nobody("/bin/cat", &[mnt.path(rel).to_str().expect("path")]);
    for rel in [".prepfs/stats.json", ".prepfs/config.yaml", ".prepfs/metrics"] {
        let out = cat(rel);
        assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("Permission denied"), "nobody read {rel}");
    }
    let ls = as_nobody("/bin/ls", &[mnt.path(".prepfs").to_str().expect("path")]);
    assert!(!ls.status.success(), "nobody listed .prepfs/: {}", String::from_utf8_lossy(&ls.stdout));

    // `prepfs stats` tells nobody why, and how the owner would share the figures.
    let bin = common::prepfs_bin();
    let stats = as_nobody(bin.to_str().expect("path"), &["stats", mnt.mountpoint.to_str().expect("path")]);
    let err = String::from_utf8_lossy(&stats.stderr);
    assert!(!stats.status.success() && err.contains("control_public"), "{err}");
    assert!(mnt.stop().success());
}

#[test]
fn nobody_whom_the_source_root_shuts_out_finds_no_loader_socket_through_the_mount() {
    let tmp = tempfile::tempdir().expect("tempdir");
    fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
    let (source, _) = make_id_dataset(tmp.path(), 2, 2);
    fs::set_permissions(&source, fs::Permissions::from_mode(0o700)).expect("chmod");
    let config = write_config(tmp.path(), &format!("seed: 1\nallow_other: true\naugment:\n{RANDOM}"));
    let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);
    let got = find_and_load_as_nobody(&mnt.mountpoint, "mine");
    assert!(got["error"].as_str().is_some_and(|e| e.contains("Permission denied")) && got.get("names").is_none(), "{got}");
    assert!(mnt.stop().success());
}

/// Whether the NVIDIA driver's library is on this machine's library path.
fn libcuda_here() -> bool {
    Command::new("sh").args(["-c", "ldconfig -p | grep -q 'libcuda\\.so'"]).status().is_ok_and(|s| s.success())
}

#[test]
fn the_gpu_path_uploads_the_mounts_own_samples_or_says_what_is_missing() {
    if !module_ready() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let mnt = mount(tmp.path(), CENTER, "");
    let got = check("gpu", &mnt, "gpu");
    if std::env::var_os("PREPFS_REQUIRE_LOADER").is_some() {
        assert_eq!(got["gpu_support"], true, "make python builds the module with the gpu feature: {got}");
    }
    if let Some(error) = got["error"].as_str() {
        // No GPU here: the error names what is missing, and the module is still alive.
        if got["gpu_support"] == false {
            assert!(error.contains("gpu` feature"), "{error}");
        } else if !libcuda_here() {
            assert!(error.contains("libcuda.so"), "no driver here, and the error does not say so: {error}");
        } else {
            assert!(error.contains("cuda"), "{error}");
        }
        eprintln!("skipped the GPU upload: {error}");
    } else if let Some(why) = got["skipped"].as_str() {
        eprintln!("skipped the GPU upload: {why}");
    } else {
        assert_eq!(got["samples"], 24, "{got}");
        assert_eq!(got["mismatches"], serde_json::json!([]), "{got}");
        assert_eq!(got["label_errors"], serde_json::json!([]), "{got}");
        assert_eq!(got["devices"], serde_json::json!(["cuda:0"]), "{got}");
        // Uploaded straight from the ring (a memfd the driver registers), saying so; the staging
        // copy, the fallback, asked for, serves the same pixels.
        assert_eq!(got["gpu_upload"], "direct", "the driver refused the ring (the warning says why): {got}");
        assert_eq!(got["warnings"], serde_json::json!([]), "{got}");
        assert_eq!(got["staged_upload"], "staged", "{got}");
        assert_eq!(got["staged"]["samples"], 24, "{got}");
        assert_eq!(got["staged"]["mismatches"], serde_json::json!([]), "{got}");
        assert_eq!(got["staged"]["label_errors"], serde_json::json!([]), "{got}");
        assert_eq!(got["f32_upload"], "direct", "{got}");
        assert_eq!(got["cpu_upload"], serde_json::Value::Null, "{got}");
        assert_eq!(got["f32_samples"], 24, "{got}");
        assert!(got["f32_max_diff"].as_f64().is_some_and(|d| d < 1e-5), "the GPU's normalisation differs from the CPU's: {got}");
    }
    // Whatever the GPU path did, the mount serves on.
    assert_eq!(check("pixels", &mnt, "after").get("mismatches"), Some(&serde_json::json!([])));
    assert!(mnt.stop().success());
}

/// Runs tests/support/loader_attack.py with `args`, as `nobody` or as root; its JSON result.
fn attack(as_nobody: bool, args: &[&str]) -> serde_json::Value {
    let out = attack_command(as_nobody, args).output().expect("python3");
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text} {}", String::from_utf8_lossy(&out.stderr)))
}

fn attack_command(as_nobody: bool, args: &[&str]) -> Command {
    let mut cmd = python3(as_nobody);
    cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/loader_attack.py")).args(args);
    cmd
}

/// Debian's python3 (which any user may run) as `nobody` (uid and gid 65534, no other groups),
/// or as root.
fn python3(as_nobody: bool) -> Command {
    if as_nobody {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3"]);
        c
    } else {
        Command::new("/usr/bin/python3")
    }
}

/// One epoch of `job` through tests/support/loader_raw.py, as `nobody` or root: the names
/// served, or the daemon's error.
fn raw_epoch(socket: &str, as_nobody: bool, job: &str) -> Result<Vec<String>, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/loader_raw.py");
    let out = python3(as_nobody).arg(&script).args([socket, job]).output().expect("python3");
    let text = String::from_utf8_lossy(&out.stdout);
    let got: serde_json::Value = serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text} {}", String::from_utf8_lossy(&out.stderr)));
    match got["names"].as_array() {
        Some(names) => Ok(names.iter().map(|n| n.as_str().expect("name").to_owned()).collect()),
        None => Err(got["error"].as_str().unwrap_or("?").to_owned()),
    }
}

/// A mount others may use (`allow_other`) of an id-coded dataset of 2 classes of 6 under a
/// world-searchable temporary directory, with `extra` in its config; and its loader socket.
fn public_mount(tmp: &Path, extra: &str, prepare: impl FnOnce(&Path)) -> (Mounted, String) {
    fs::set_permissions(tmp, fs::Permissions::from_mode(0o755)).expect("chmod");
    let (source, _) = make_id_dataset(tmp, 2, 6);
    prepare(&source);
    let config = write_config(tmp, &format!("seed: 1\nallow_other: true\naugment:\n{RANDOM}{extra}"));
    let mnt = Mounted::start(tmp, &config, &source, LIMIT);
    let socket = mnt.stats()["loader"]["socket"].as_str().expect("socket").to_owned();
    (mnt, socket)
}

#[test]
fn nobody_is_never_served_samples_of_a_class_directory_it_may_not_enter() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mnt, socket) = public_mount(tmp.path(), "", |source| {
        fs::set_permissions(source.join("c1"), fs::Permissions::from_mode(0o700)).expect("chmod");
    });
    // The kernel refuses nobody the directory through the mount...
    let through_mount = as_nobody("ls", &[mnt.path("augmented/c1").to_str().expect("path")]);
    assert!(!through_mount.status.success(), "the kernel let nobody list a 0700 directory");
    // ... and so does the socket, although the files inside are 0644.
    let nobody = raw_epoch(&socket, true, "mine").expect("nobody's epoch");
    assert!(nobody.iter().all(|n| n.starts_with("c0/")), "nobody was served samples of root's 0700 directory: {nobody:?}");
    assert_eq!(nobody.len(), 6, "nobody is served every sample it may reach once: {nobody:?}");
    assert!(mnt.stats()["loader"]["denied"].as_u64().unwrap_or(0) >= 6, "{}", mnt.stats()["loader"]);
    let root = raw_epoch(&socket, false, "root").expect("root's epoch");
    assert_eq!(root.len(), 12, "root is served every sample: {root:?}");
    assert!(mnt.stop().success());
}

#[test]
fn a_job_is_used_through_the_socket_only_by_its_owner_or_root() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mnt, socket) = public_mount(tmp.path(), "", |_| {});
    assert_eq!(raw_epoch(&socket, false, "roots").expect("root's job").len(), 12);
    let refused = raw_epoch(&socket, true, "roots").expect_err("nobody joined root's job");
    assert!(refused.contains("user 0's"), "{refused}");
    // Nobody's own job is theirs, and root may use it as root may enter its directory.
    assert_eq!(raw_epoch(&socket, true, "nobodys").expect("nobody's job").len(), 12);
    assert_eq!(raw_epoch(&socket, false, "nobodys").expect("root in nobody's job").len(), 12);
    assert!(mnt.stop().success());
}

#[test]
fn one_user_holds_no_more_ring_memory_than_their_share_and_root_is_still_served() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mnt, socket) = public_mount(tmp.path(), "loader: { ring_memory: 64MiB, ring_memory_per_user: 16MiB }\n", |_| {});
    // 32 connections of 4 slots of 16 224x224 samples (9.6 MB each), every slot filled.
    let mut hold = attack_command(true, &["rings", &socket, "mine", "32", "16", "4"]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("python3");
    let mut line = String::new();
    BufReader::new(hold.stdout.as_mut().expect("stdout")).read_line(&mut line).expect("the attack's result");
    let got: serde_json::Value = serde_json::from_str(line.trim()).unwrap_or_else(|e| panic!("{e}: {line}"));
    let welcomed: u64 = got["welcomed"].as_array().expect("welcomed").iter().map(|b| b.as_u64().expect("bytes")).sum();
    assert!(welcomed > 0 && welcomed <= 16 << 20, "nobody's rings take {welcomed} bytes: {got}");
    assert!(got["errors"].as_array().expect("errors").iter().any(|e| e.as_str().is_some_and(|e| e.contains("ring_memory_per_user"))), "{got}");
    let held = mnt.stats()["loader"]["ring_bytes"].as_u64().expect("ring_bytes");
    assert_eq!(held, welcomed, "the daemon holds what it welcomed");
    // Root's loader is served in full while nobody holds their share.
    assert_eq!(raw_epoch(&socket, false, "root").expect("root's epoch").len(), 12);
    drop(hold.stdin.take());
    assert!(hold.wait().expect("wait").success());
    let started = std::time::Instant::now();
    while mnt.stats()["loader"]["ring_bytes"].as_u64() != Some(0) {
        assert!(started.elapsed() < Duration::from_secs(10), "the rings were not given back: {}", mnt.stats()["loader"]);
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(mnt.stop().success());
}

#[test]
fn silent_connections_are_let_go_and_never_lock_root_out() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mnt, socket) = public_mount(tmp.path(), "", |_| {});
    // 40 connections from nobody that never say hello, held 7 s: more than every place.
    let silent = attack_command(true, &["silent", &socket, "40", "7"]).stdout(Stdio::piped()).spawn().expect("python3");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(raw_epoch(&socket, false, "root").expect("root's epoch while nobody floods").len(), 12);
    let out = silent.wait_with_output().expect("wait");
    let got: serde_json::Value = serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).expect("json");
    assert_eq!(got["open"], 0, "the daemon still held silent connections after the hello timeout: {got}");
    assert!(mnt.stats()["loader"]["refused"].as_u64().unwrap_or(0) >= 40, "{}", mnt.stats()["loader"]);
    assert!(mnt.stop().success());
}

#[test]
fn a_loader_can_neither_shrink_nor_grow_its_ring_under_the_daemon() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mnt, socket) = public_mount(tmp.path(), "", |_| {});
    let got = attack(true, &["shrink", &socket, "mine"]);
    assert_eq!(got["shrink"], "EPERM", "{got}");
    assert_eq!(got["grow"], "EPERM", "{got}");
    assert_eq!(got["batch"], 2, "the daemon fills the ring as before: {got}");
    let log = mnt.log();
    assert!(mnt.stop().success(), "{log}");
}

#[test]
fn a_loader_socket_path_holding_another_file_refuses_the_mount_and_the_file_is_kept() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (source, _) = make_id_dataset(tmp.path(), 2, 2);
    let precious = tmp.path().join("precious.txt");
    fs::write(&precious, "keep me").expect("write");
    let mountpoint = tmp.path().join("mnt");
    fs::create_dir(&mountpoint).expect("mkdir");
    let config = write_config(tmp.path(), &format!("seed: 1\nloader: {{ socket: {} }}\n", precious.display()));
    let out = Command::new("timeout")
        .arg("60")
        .arg(common::prepfs_bin())
        .args(["mount"])
        .arg(&config)
        .arg("--source")
        .arg(&source)
        .arg("--mountpoint")
        .arg(&mountpoint)
        .stdin(Stdio::null())
        .output()
        .expect("prepfs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && out.status.code() != Some(124), "{stderr}");
    assert!(stderr.contains("not a socket"), "{stderr}");
    assert_eq!(fs::read_to_string(&precious).expect("the file is kept"), "keep me");
    assert!(!common::is_mounted(&mountpoint));

    // A file put in place of the socket while mounted is not removed at unmount either.
    let socket = tmp.path().join("loader.sock");
    let config = write_config(tmp.path(), &format!("seed: 1\nloader: {{ socket: {} }}\n", socket.display()));
    let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);
    assert!(fs::symlink_metadata(&socket).is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type())));
    fs::remove_file(&socket).expect("rm");
    fs::write(&socket, "not prepfs's").expect("write");
    assert!(mnt.stop().success());
    assert_eq!(fs::read_to_string(&socket).expect("kept at unmount"), "not prepfs's");
}
