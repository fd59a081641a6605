//! Arbitrary UTF-8 text as a mount config (`Config::parse`), and the value parsers it uses
//! (`parse_bytes`, `parse_rate`, `parse_duration`, `planner::Split`'s `E-D-A` parser) on the
//! whole text and on each line's value. Errors are fine; a panic is a finding.
//!
//! `Config::parse` creates the `cache.disk.path` directory it validates. The harness parses in a
//! scratch directory of its own (relative paths land there) and skips any input whose disk path
//! is absolute outside that directory or climbs out of it with `..`, so fuzzing never creates
//! directories elsewhere on the machine.
#![no_main]

use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use prepfs_core::config::{self, Config, Overrides};
use serde_norway::Value;

struct Sandbox {
    root: PathBuf,
    overrides: Overrides,
}

/// A scratch directory for this process (`$TMPDIR/prepfs-fuzz/config-PID`) holding the source
/// and mountpoint the overrides name, and `cwd/`, the current directory while a config is
/// parsed.
fn sandbox() -> &'static Sandbox {
    static SANDBOX: OnceLock<Sandbox> = OnceLock::new();
    SANDBOX.get_or_init(|| {
        let base = std::env::temp_dir().join("prepfs-fuzz");
        // Scratch directories of fuzzing processes that are gone.
        if let Ok(entries) = std::fs::read_dir(&base) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if let Some(pid) = name.strip_prefix("config-") {
                    if !Path::new("/proc").join(pid).exists() {
                        let _ = std::fs::remove_dir_all(e.path());
                    }
                }
            }
        }
        let root = base.join(format!("config-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for d in ["src", "mnt", "cwd"] {
            std::fs::create_dir_all(root.join(d)).expect("create the config sandbox");
        }
        let root = root.canonicalize().expect("canonical sandbox");
        let overrides = Overrides { source: Some(root.join("src")), mountpoint: Some(root.join("mnt")), seed: None };
        Sandbox { root, overrides }
    })
}

/// Whether `Config::parse` may be given `text`: its disk path, if it names one, stays inside
/// the sandbox.
fn disk_path_is_contained(text: &str, root: &Path) -> bool {
    let Ok(doc) = serde_norway::from_str::<Value>(text) else {
        // Config::parse uses the same parser: it will refuse the text before any validation.
        return true;
    };
    let Some(disk) = doc.get("cache").and_then(|c| c.get("disk")) else {
        // No disk tier as far as the tree shows; refuse texts that spell one in a way the
        // tree walk above does not see (tags, odd keys).
        return !text.contains("disk");
    };
    match disk.get("path") {
        None => true,
        Some(Value::String(p)) => {
            let p = Path::new(p);
            let climbs = p.components().any(|c| c == Component::ParentDir);
            !climbs && (p.is_relative() || p.starts_with(root))
        }
        Some(_) => false,
    }
}

fn value_parsers(s: &str) {
    let _ = config::parse_bytes(s);
    let _ = config::parse_rate(s);
    let _ = config::parse_duration(s);
    if let Ok(split) = s.parse::<prepfs_planner::Split>() {
        assert_eq!(split.as_array().iter().map(|&p| u64::from(p)).sum::<u64>(), 100, "split {s:?} -> {split:?}");
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };

    value_parsers(text);
    for line in text.lines().take(64) {
        let value = line.split_once(':').map_or(line, |(_, v)| v);
        let value = value.split_once('#').map_or(value, |(v, _)| v);
        value_parsers(value);
    }

    let sandbox = sandbox();
    if !disk_path_is_contained(text, &sandbox.root) {
        return;
    }
    // Relative disk paths resolve against the current directory: the sandbox's, for the parse
    // only (libFuzzer writes corpus files relative to the directory it started in).
    let home = std::env::current_dir().expect("current directory");
    std::env::set_current_dir(sandbox.root.join("cwd")).expect("enter the config sandbox");
    let parsed = Config::parse(text, &sandbox.overrides);
    std::env::set_current_dir(home).expect("leave the config sandbox");
    if let Ok(config) = parsed {
        let _ = config.to_yaml();
        let _ = config.decode_parallelism();
        let _ = config.augmented_size();
    }
});
