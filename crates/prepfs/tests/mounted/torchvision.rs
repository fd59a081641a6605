//! Each augment op statistically indistinguishable from torchvision v2: drawn many times through
//! a real mount and through torchvision on the same real photographs (500 draws of each of 3, so
//! 1,500 a side), the distributions of per-image statistics (channel means, standard deviation,
//! zero share, erased share) compared with a two-sample KS test at alpha = 0.001 (critical value
//! 0.071; tests/support/compare_torchvision.py).
//!
//! torch and torchvision are heavy (from PyPI with their CUDA libraries), so `make test` does not
//! install them: where they are absent this test says "skipped: ..." and passes, unless
//! `PREPFS_REQUIRE_TORCHVISION=1`, which `make compare-torchvision` sets after installing them.
//! `PREPFS_TORCH_PYTHON` names the interpreter that has them (python3 by default);
//! `PREPFS_TORCHVISION_CASES` (names, comma-separated) runs only those cases. timm's RandAugment
//! variant is compared against timm itself, where timm is installed.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::{write_config, Mounted};

/// How long one case's mount may live.
const LIMIT: Duration = Duration::from_secs(600);
/// How long the ops' input mount (shared by every case) may live: the whole run.
const BASE_LIMIT: Duration = Duration::from_secs(3 * 3600);
/// Reads (and torchvision draws) of each photograph per case: 1,500 a side over the three.
const DRAWS: &str = "500";

fn torch_python(script: &str, args: &[&std::ffi::OsStr]) -> String {
    let python = std::env::var("PREPFS_TORCH_PYTHON").unwrap_or_else(|_| "python3".into());
    common::python_in(&python, script, args)
}

fn mount(tmp: &Path, name: &str, source: &Path, yaml: &str, limit: Duration) -> Mounted {
    let dir = tmp.join(name);
    std::fs::create_dir_all(&dir).expect("dir");
    let config = write_config(&dir, yaml);
    Mounted::start(&dir, &config, source, limit)
}

#[test]
fn every_op_draws_per_image_statistics_distributed_as_torchvisions() {
    let check = torch_python("compare_torchvision.py", &["check".as_ref()]);
    if check.starts_with("skipped") {
        assert!(std::env::var("PREPFS_REQUIRE_TORCHVISION").is_err(), "PREPFS_REQUIRE_TORCHVISION is set: {check}");
        eprintln!("{}", check.trim());
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = tmp.path().join("src");
    torch_python("compare_torchvision.py", &["prepare".as_ref(), source.as_os_str()]);
    let cases: serde_json::Value =
        serde_json::from_str(torch_python("compare_torchvision.py", &["cases".as_ref()]).trim()).expect("cases JSON");
    let cases = cases.as_object().expect("a mapping of cases");
    let mut failures = Vec::new();
    let mut base: Option<Mounted> = None;
    let only: Option<Vec<String>> =
        std::env::var("PREPFS_TORCHVISION_CASES").ok().map(|v| v.split(',').map(|s| s.trim().to_string()).collect());
    let mut ran = 0;
    for (name, case) in cases {
        if only.as_ref().is_some_and(|only| !only.contains(name)) {
            continue;
        }
        ran += 1;
        let ours = mount(tmp.path(), name, &source, case["config"].as_str().expect("config"), LIMIT);
        if base.is_none() {
            if let Some(yaml) = case["base"].as_str() {
                base = Some(mount(tmp.path(), "base", &source, yaml, BASE_LIMIT));
            }
        }
        let base_dir = base.as_ref().map_or(ours.mountpoint.clone(), |b| b.mountpoint.clone());
        let out = torch_python(
            "compare_torchvision.py",
            &[
                "compare".as_ref(),
                name.as_ref(),
                ours.mountpoint.as_os_str(),
                base_dir.as_os_str(),
                source.as_os_str(),
                DRAWS.as_ref(),
            ],
        );
        drop(ours);
        let result: serde_json::Value = serde_json::from_str(out.trim()).expect("one JSON line");
        eprintln!("{result}");
        for (stat, ks) in result["stats"].as_object().expect("stats") {
            let (d, critical) = (ks["d"].as_f64().expect("d"), ks["critical"].as_f64().expect("critical"));
            if d > critical {
                failures.push(format!("{name} {stat}: KS {d} over {critical}"));
            }
        }
    }
    assert!(ran > 0, "PREPFS_TORCHVISION_CASES names none of the cases: {:?}", cases.keys().collect::<Vec<_>>());
    assert!(failures.is_empty(), "distributions differ from torchvision's: {failures:#?}");
}
