//! Mounted tests of bad samples as ML users meet them (`bad_samples` in the config): a job view
//! never hands one out (an ImageFolder-style reader whose listing holds bad files gets through
//! every epoch without an error, each bad file served as another sample of its class), the
//! bad ones leave the next listing, the top-level views keep them unless `hide: all`, and
//! `validate: scan` finds every one at mount. Each test has its own temporary directory, a mount
//! guard that unmounts on every way out, and a time limit.

use crate::common;

use std::fs;
use std::time::Duration;

use common::{make_dataset, python, write_config, Mounted};

const LIMIT: Duration = Duration::from_secs(120);
const BAD_FILES: [&str; 6] = ["bad_truncated", "bad_corrupt", "bad_empty", "bad_text", "bad_huge", "bad_png"];
const BAD_DIR: &str = "n00000001";

fn names(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir).expect("list").map(|e| e.expect("entry").file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

fn bad_listed(stats: &serde_json::Value) -> Vec<String> {
    stats["bad_samples"]["samples"].as_array().expect("bad_samples").iter().filter_map(|e| e["path"].as_str().map(str::to_owned)).collect()
}

#[test]
fn a_job_view_serves_an_image_folder_reader_every_epoch_without_an_error() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = make_dataset(tmp.path(), 2, 4, true);
    // No background refill: it would find the bad samples before the reader does.
    let config = write_config(tmp.path(), "seed: 1\nthreads: 2\ncache: { refill: false }\n");
    let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);
    let view = mnt.path("jobs/train/augmented");
    // Nothing is known bad yet: the first listing holds the bad files.
    let first = names(&view.join(BAD_DIR));
    assert!(BAD_FILES.iter().all(|b| first.contains(&format!("{b}.ppm"))), "{first:?}");
    // ImageFolder + DataLoader(shuffle=True, num_workers=2), through PIL, two epochs: any
    // EIO would fail the script.
    let out = python("read_job_pil.py", &[view.to_str().expect("utf-8"), "2", "7"]);
    let epochs: Vec<Vec<serde_json::Value>> = serde_json::from_str(&out).expect("json");
    let listed = 4 + 4 + BAD_FILES.len();
    for (e, epoch) in epochs.iter().enumerate() {
        assert_eq!(epoch.len(), listed, "epoch {e}: every listed file was read");
    }
    let stats = mnt.stats();
    let bad = bad_listed(&stats);
    for name in BAD_FILES {
        assert!(bad.iter().any(|p| p.starts_with(&format!("{BAD_DIR}/{name}."))), "{name} not found bad: {stats}");
    }
    let job = &stats["jobs"]["active"][0];
    assert!(job["bad_skipped"].as_u64().unwrap_or(0) >= BAD_FILES.len() as u64, "{job}");
    // The next listing of the job's views leaves them out; the top level keeps them (hide: jobs).
    for form in ["augmented", "decoded", "encoded"] {
        let again = names(&mnt.path(&format!("jobs/train/{form}/{BAD_DIR}")));
        assert_eq!(again.len(), 4, "jobs/train/{form}: {again:?}");
        assert!(again.iter().all(|n| !n.starts_with("bad_")), "jobs/train/{form}: {again:?}");
    }
    let top = names(&mnt.path(&format!("augmented/{BAD_DIR}")));
    assert_eq!(top.len(), 4 + BAD_FILES.len(), "{top:?}");
    // An open by name of a known-bad file in a job view is served another sample of its class.
    let served = fs::read(mnt.path(&format!("jobs/train/augmented/{BAD_DIR}/bad_text.ppm"))).expect("served another sample");
    assert!(served.starts_with(b"P6\n224 224\n255\n"));
    // With hide: jobs, the top level still refuses it.
    let err = fs::read(mnt.path(&format!("augmented/{BAD_DIR}/bad_text.ppm"))).expect_err("top level");
    assert_eq!(err.raw_os_error(), Some(libc::EIO));
}

#[test]
fn validate_scan_finds_every_bad_sample_at_mount_and_hide_all_leaves_them_out_everywhere() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = make_dataset(tmp.path(), 2, 4, true);
    let config = write_config(tmp.path(), "seed: 1\nthreads: 2\nbad_samples: { validate: scan }\n");
    let mut cmd = common::mount_command(&config, &source, &tmp.path().join("mnt"));
    cmd.args(["--hide-bad-samples", "all"]);
    let mnt = Mounted::start_command(cmd, &tmp.path().join("mnt"), &tmp.path().join("prepfs.log"), LIMIT);
    // Found before any open.
    let stats = mnt.stats();
    let bad = bad_listed(&stats);
    assert_eq!(bad.len(), BAD_FILES.len(), "{stats}");
    assert_eq!(stats["views"]["decoded"]["opens"].as_u64(), Some(0), "{stats}");
    let log = mnt.log();
    assert!(log.contains("validating (full decode)") && log.contains("done"), "{log}");
    for view in ["augmented", "decoded", "encoded", "jobs/j/augmented"] {
        let listed = names(&mnt.path(&format!("{view}/{BAD_DIR}")));
        assert_eq!(listed.len(), 4, "{view}: {listed:?}");
    }
    // The good samples all serve.
    for name in names(&mnt.path(&format!("augmented/{BAD_DIR}"))) {
        assert!(fs::read(mnt.path(&format!("augmented/{BAD_DIR}/{name}"))).is_ok(), "{name}");
    }
    let config_yaml = fs::read_to_string(mnt.path(".prepfs/config.yaml")).expect("config.yaml");
    assert!(config_yaml.contains("hide: all") && config_yaml.contains("validate: scan"), "{config_yaml}");
}
