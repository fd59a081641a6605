//! Mounted end-to-end tests of the loader socket and `prepfs.Loader` (the Python module `make
//! python` installs): batches equal, sample by sample, to the mount's own files; two loaders of
//! one job served each sample once per epoch, identified by content; DLPack into numpy (and
//! torch where installed); a clear error when the mount goes away mid-epoch; nothing the source
//! denies a user served to them through the socket; and the GPU path, run where a GPU is, and
//! elsewhere a clear error naming what is missing.
//!
//! Without the module these tests say so and pass, unless `PREPFS_REQUIRE_LOADER` is set (as
//! `make test` sets it, after building and installing the module).

mod common;

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
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/loader_raw.py");
    let run = |as_nobody: bool, job: &str| -> BTreeMap<String, usize> {
        let mut cmd = if as_nobody {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3"]);
            c
        } else {
            Command::new("/usr/bin/python3")
        };
        let out = cmd.arg(&script).args([socket.as_str(), job]).output().expect("python3");
        let text = String::from_utf8_lossy(&out.stdout);
        let got: serde_json::Value = serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text} {}", String::from_utf8_lossy(&out.stderr)));
        let names = got["names"].as_array().unwrap_or_else(|| panic!("{got}"));
        let mut counts = BTreeMap::new();
        for n in names {
            *counts.entry(n.as_str().expect("name").to_owned()).or_default() += 1;
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
        assert_eq!(got["f32_samples"], 24, "{got}");
        assert!(got["f32_max_diff"].as_f64().is_some_and(|d| d < 1e-5), "the GPU's normalisation differs from the CPU's: {got}");
    }
    // Whatever the GPU path did, the mount serves on.
    assert_eq!(check("pixels", &mnt, "after").get("mismatches"), Some(&serde_json::json!([])));
    assert!(mnt.stop().success());
}
