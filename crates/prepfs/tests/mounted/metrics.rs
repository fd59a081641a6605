//! Mounted tests of monitoring as a user meets it: `.prepfs/metrics` in Prometheus's text format
//! agreeing with `stats.json`, and `prepfs stats` found from a path inside the mount (a summary,
//! `--json`, `--watch`), refusing a path outside any mount. Each test mounts in its own
//! temporary directory, under a time limit, and unmounts on every way out.

use crate::common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{make_id_dataset, prepfs_bin, Mounted};

const LIMIT: Duration = Duration::from_secs(120);

/// `prepfs ARGS...` under `timeout` (SIGINT after `secs`, as Ctrl-C would), its output.
fn prepfs_for(secs: f64, args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    let mut cmd = Command::new("timeout");
    cmd.arg("-s").arg("INT").arg("-k").arg("5").arg(secs.to_string()).arg(prepfs_bin());
    for a in args {
        cmd.arg(a);
    }
    cmd.stdin(Stdio::null()).output().expect("run prepfs under timeout")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Mounts a small id dataset (2 classes of 3) with the shipped defaults, and `extra` options.
fn mount_with(dir: &Path, extra: &[&str]) -> Mounted {
    let (source, _) = make_id_dataset(dir, 2, 3);
    let mnt = dir.join("mnt");
    std::fs::create_dir(&mnt).expect("mkdir");
    let mut cmd = Command::new(prepfs_bin());
    cmd.arg("mount").arg(&source).arg(&mnt).args(extra);
    Mounted::start_command(cmd, &mnt, &dir.join("prepfs.log"), LIMIT)
}

fn mount(dir: &Path) -> Mounted {
    mount_with(dir, &[])
}

/// The samples of `.prepfs/metrics`: each non-comment line parsed as `name{labels} value`, keyed
/// by the series as written (`name{labels}`).
fn metrics(mnt: &Mounted) -> HashMap<String, f64> {
    let body = std::fs::read_to_string(mnt.path(".prepfs/metrics")).expect("read .prepfs/metrics");
    assert!(body.contains("# TYPE prepfs_open_seconds histogram"), "{body}");
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap_or_else(|| panic!("not `name value`: {l}"));
            let name_ok = series.split('{').next().is_some_and(|n| n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
            assert!(name_ok && (!series.contains('{') || series.ends_with('}')), "not `name{{labels}} value`: {l}");
            (series.to_owned(), value.parse::<f64>().unwrap_or_else(|_| panic!("not a number: {l}")))
        })
        .collect()
}

#[test]
fn the_metrics_file_parses_and_its_open_counts_agree_with_stats_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mnt = mount(dir.path());
    for name in ["c0/s00", "c0/s01", "c1/s03", "c0/s00"] {
        std::fs::read(mnt.path(&format!("augmented/{name}.ppm"))).expect("read augmented");
    }
    std::fs::read(mnt.path("decoded/c1/s04.ppm")).expect("read decoded");
    let listing: Vec<String> =
        std::fs::read_dir(mnt.path(".prepfs")).expect("ls .prepfs").map(|e| e.expect("entry").file_name().to_string_lossy().into_owned()).collect();
    assert!(listing.contains(&"metrics".to_owned()), "{listing:?}");

    let m = metrics(&mnt);
    let stats = mnt.stats();
    for view in ["encoded", "decoded", "augmented"] {
        let opens = m[&format!("prepfs_opens_total{{view=\"{view}\"}}")];
        assert_eq!(opens as u64, stats["views"][view]["opens"].as_u64().expect("opens"), "{view}");
        // Every open is timed once, whatever its outcome.
        let timed: f64 = ["hit", "miss", "error"].iter().map(|o| m[&format!("prepfs_open_seconds_count{{view=\"{view}\",outcome=\"{o}\"}}")]).sum();
        assert_eq!(timed, opens, "{view}: the histograms count every open");
    }
    assert_eq!(m["prepfs_opens_total{view=\"augmented\"}"], 4.0);
    assert!(m["prepfs_fuse_requests_total{kind=\"open\"}"] >= 5.0, "{m:?}");
    assert!(m["prepfs_source_read_bytes_total"] > 0.0);
    assert!(m.contains_key("prepfs_cache_budget_bytes{form=\"augmented\"}"), "{m:?}");
    for (outcome, counter) in [("hit", "prepfs_open_hits_total"), ("miss", "prepfs_open_misses_total")] {
        let series = format!("{{view=\"augmented\",outcome=\"{outcome}\"");
        let inf = m[&format!("prepfs_open_seconds_bucket{series},le=\"+Inf\"}}")];
        assert_eq!(inf, m[&format!("prepfs_open_seconds_count{series}}}")], "{outcome}: +Inf == count");
        // The refill may have made every output before the reads: hits and misses as it fell.
        let counted = m[&format!("{counter}{{view=\"augmented\"}}")];
        assert_eq!(inf, counted, "{outcome}: each top-level open timed under its outcome");
        let timed = &stats["latency_us"]["open"]["augmented"][outcome];
        assert_eq!(timed["count"].as_f64(), Some(inf), "{timed}");
        if inf > 0.0 {
            assert!(timed["p50"].as_u64() > Some(0) && timed["p99"].as_u64() >= timed["p50"].as_u64(), "{timed}");
        }
    }
    assert!(mnt.stop().success());
}

#[test]
fn each_views_opens_are_its_hits_and_misses_with_the_jobs_views_counted_and_bytes_served_match_the_files_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mnt = mount(dir.path());
    let mut read = HashMap::<&str, u64>::new();
    for view in ["augmented", "jobs/a/augmented", "jobs/b/augmented", "decoded", "jobs/a/decoded", "encoded"] {
        for class in ["c0", "c1"] {
            for entry in std::fs::read_dir(mnt.path(&format!("{view}/{class}"))).expect("ls") {
                let bytes = std::fs::read(entry.expect("entry").path()).expect("read");
                *read.entry(view.rsplit('/').next().unwrap_or(view)).or_default() += bytes.len() as u64;
            }
        }
    }
    let stats = mnt.stats();
    let m = metrics(&mnt);
    for view in ["encoded", "decoded", "augmented"] {
        let v = &stats["views"][view];
        let (opens, hits, misses) = (v["opens"].as_u64(), v["hits"].as_u64().unwrap_or(0), v["misses"].as_u64().unwrap_or(0));
        assert_eq!(opens, Some(hits + misses), "{view}: {v}");
        assert_eq!(v["bytes_served"].as_u64(), read.get(view).copied(), "{view}: {v}");
        assert_eq!(m[&format!("prepfs_open_hits_total{{view=\"{view}\"}}")], hits as f64, "{view}");
        assert_eq!(m[&format!("prepfs_served_bytes_total{{view=\"{view}\"}}")], read[view] as f64, "{view}");
    }
    assert_eq!(stats["views"]["augmented"]["opens"], 18, "{stats}");
    // Per-job series: what each job was served, its hits and misses summing to it.
    // (6 samples: job a has read two whole epochs and is in its third, job b in its second.)
    for (job, served, epoch) in [("a", 12.0, 3.0), ("b", 6.0, 2.0)] {
        let series = |name: &str| m[&format!("{name}{{job=\"{job}\"}}")];
        assert_eq!(series("prepfs_job_samples_served_total"), served, "{job}: {}", stats["jobs"]);
        assert_eq!(series("prepfs_job_hits_total") + series("prepfs_job_misses_total"), served, "{job}");
        assert_eq!(series("prepfs_job_epoch"), epoch, "{job}");
    }
    // Where the memory is: each form's bytes as the cache counts them, and the process's own.
    let memory = &stats["memory"];
    for form in ["encoded", "decoded", "augmented"] {
        assert_eq!(memory[&format!("cache_{form}")], stats["cache"][form]["bytes_used"], "{memory}");
    }
    let resident = memory["resident"].as_u64().unwrap_or(0);
    assert!(resident > 1 << 20 && memory["peak_resident"].as_u64() >= Some(resident), "{memory}");
    assert!(memory["catalog"].as_u64().is_some_and(|b| b > 0), "{memory}");
    assert!(m["prepfs_memory_bytes{part=\"resident\"}"] > 0.0, "{m:?}");
    // A job's name is the label (names are [A-Za-z0-9._-], so nothing in one needs escaping).
    std::fs::read(mnt.path("jobs/run-7.b_x/augmented/c0/s00.ppm")).expect("read in job run-7.b_x");
    let m = metrics(&mnt);
    assert_eq!(m["prepfs_job_samples_served_total{job=\"run-7.b_x\"}"], 1.0, "{m:?}");
    assert!(mnt.stop().success());
}

#[test]
fn prepfs_stats_finds_the_mount_from_a_subdirectory_and_prints_a_summary_or_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mnt = mount(dir.path());
    std::fs::read(mnt.path("augmented/c0/s00.ppm")).expect("read augmented");
    let inside = mnt.path("augmented/c0");

    let out = prepfs_for(30.0, &[&"stats", &inside]);
    let summary = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(summary.lines().count() <= 16, "a summary, not the JSON: {summary}");
    assert!(summary.contains(&mnt.mountpoint.display().to_string()), "names the mount: {summary}");
    let augmented = summary.lines().find(|l| l.starts_with("augmented")).expect("an augmented line");
    assert!(augmented.split_whitespace().nth(1) == Some("1"), "one augmented open: {augmented}");
    assert!(summary.contains("samples      6"), "{summary}");

    let out = prepfs_for(30.0, &[&"stats", &inside, &"--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("--json prints JSON");
    assert_eq!(doc["views"]["augmented"]["opens"], 1);

    // Three readings or so in 1.5 s; the later ones show rates.
    let out = prepfs_for(1.5, &[&"stats", &"--watch", &"0.4", &inside]);
    let watched = text(&out.stdout);
    assert!(watched.matches("\nsamples").count() >= 2, "{watched}");
    assert!(watched.contains("/s)"), "rates after the first reading: {watched}");

    let out = prepfs_for(30.0, &[&"stats", &dir.path()]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("is not inside a prepfs mount"), "{}", text(&out.stderr));
    assert!(mnt.stop().success());
}

#[test]
fn with_metrics_addr_the_mount_answers_get_metrics_over_http() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mnt = mount_with(dir.path(), &["--metrics-addr", "127.0.0.1:0"]);
    std::fs::read(mnt.path("augmented/c0/s00.ppm")).expect("read augmented");
    let log = mnt.log();
    let at = log.find("http://").unwrap_or_else(|| panic!("the log names the endpoint: {log}")) + "http://".len();
    let addr: String = log[at..].chars().take_while(|c| *c != '/').collect();
    let mut stream = std::net::TcpStream::connect(&addr).expect("connect to the endpoint");
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    write!(stream, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n").expect("send");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read the answer");
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    assert!(answer.contains("\nprepfs_opens_total{view=\"augmented\"} 1\n"), "{answer}");
    assert!(mnt.stop().success(), "the endpoint's worker is joined at unmount");
}

#[test]
fn a_failed_request_is_counted_by_operation_and_errno_in_stats_json_and_the_metrics() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mnt = mount(dir.path());
    // A name that is not there (ENOENT from lookup), twice.
    for _ in 0..2 {
        let err = std::fs::metadata(mnt.path("augmented/c0/missing.ppm")).expect_err("no such sample");
        assert_eq!(err.raw_os_error(), Some(libc::ENOENT), "{err}");
    }
    let stats = mnt.stats();
    let m = metrics(&mnt);
    let lookups = stats["fuse_errors"]["lookup"]["ENOENT"].as_u64().unwrap_or(0);
    // The kernel may cache a negative entry (then one lookup) or ask again (two).
    assert!((1..=2).contains(&lookups), "{}", stats["fuse_errors"]);
    assert_eq!(m["prepfs_fuse_errors_total{op=\"lookup\",errno=\"ENOENT\"}"], lookups as f64, "{m:?}");
    // A file made where nothing may be: refused (EROFS) as a change.
    let err = std::fs::File::create(mnt.path("augmented/c0/new.ppm")).expect_err("read-only");
    assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{err}");
    let m = metrics(&mnt);
    let refused: f64 = m.iter().filter(|(k, _)| k.starts_with("prepfs_fuse_errors_total{") && k.contains("errno=\"EROFS\"")).map(|(_, v)| v).sum();
    assert!(refused >= 1.0, "the refused create is counted: {m:?}");
    assert!(mnt.stop().success());
}

/// Every file of `view` read once, in the order a listing gives: one epoch of a job's view.
fn read_epoch(mnt: &Mounted, view: &str) -> usize {
    let mut read = 0;
    for class in std::fs::read_dir(mnt.path(view)).expect("list the view").map(|e| e.expect("entry").path()) {
        for file in std::fs::read_dir(&class).expect("list a class").map(|e| e.expect("entry").path()) {
            assert!(!std::fs::read(&file).expect("read a sample").is_empty());
            read += 1;
        }
    }
    read
}

#[test]
fn a_job_reading_a_recipe_for_three_epochs_shows_its_served_count_epoch_rate_and_the_recipes_cache_everywhere() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (source, _) = make_id_dataset(dir.path(), 2, 3);
    let config = common::write_config(dir.path(), "recipes:\n  ta: { augment: [ {random_resized_crop: {size: 16}}, {random_horizontal_flip: {}} ] }\n");
    let mnt = Mounted::start(dir.path(), &config, &source, LIMIT);
    let samples = 6;
    let job = |doc: &serde_json::Value| -> serde_json::Value {
        doc["jobs"]["active"].as_array().and_then(|a| a.iter().find(|j| j["name"] == "train").cloned()).expect("job train in stats.json")
    };
    for _ in 0..2 {
        assert_eq!(read_epoch(&mnt, "jobs/train/ta"), samples);
    }
    let before = mnt.stats();
    // Half of epoch 3, a reading, then the rest: the summary's rate and the epoch's end from two readings.
    let mut third = 0;
    for class in std::fs::read_dir(mnt.path("jobs/train/ta")).expect("list").map(|e| e.expect("entry").path()).take(1) {
        for file in std::fs::read_dir(&class).expect("list a class").map(|e| e.expect("entry").path()) {
            std::fs::read(&file).expect("read");
            third += 1;
        }
    }
    let midway = mnt.stats();
    let line = prepfs::summary::summary(&midway, Some(&before));
    let job_line = line.lines().find(|l| l.starts_with("  train: ")).unwrap_or_else(|| panic!("a line for job train: {line}"));
    assert!(job_line.starts_with(&format!("  train: epoch 3, {third} of {samples} (50%), {} served in all", 2 * samples + third)), "{job_line}");
    assert!(job_line.contains("/s, epoch ends in "), "a rate and when the epoch ends from two readings: {job_line}");
    third += std::fs::read_dir(mnt.path("jobs/train/ta"))
        .expect("list")
        .map(|e| e.expect("entry").path())
        .skip(1)
        .flat_map(|c| std::fs::read_dir(c).expect("list a class").map(|e| e.expect("entry").path()).collect::<Vec<_>>())
        .map(|f| assert!(!std::fs::read(f).expect("read").is_empty()))
        .count();
    assert_eq!(third, samples);

    // stats.json: the job's served count and epoch, its recipe view's, and the recipe's store.
    let doc = mnt.stats();
    let train = job(&doc);
    // Three epochs whole: the job is at the start of its fourth.
    assert_eq!(train["samples_served"], 3 * samples as u64, "{train}");
    assert_eq!((train["epoch"].as_u64(), train["served_this_epoch"].as_u64()), (Some(4), Some(0)), "{train}");
    assert_eq!(train["recipes"]["ta"]["epoch"], 4, "{train}");
    assert_eq!(train["recipes"]["ta"]["samples_served"], 3 * samples as u64, "{train}");
    let recipe = &doc["recipes"]["ta"];
    assert_eq!(recipe["opens"], 3 * samples as u64, "{recipe}");
    let (kept, kept_bytes, budget) = (recipe["kept"].as_u64().expect("kept"), recipe["kept_bytes"].as_u64().expect("kept_bytes"), recipe["budget"].as_u64().expect("budget"));
    assert!(budget > 0 && kept_bytes <= budget && (kept == 0) == (kept_bytes == 0), "{recipe}");

    // The same figures in the exposition.
    let m = metrics(&mnt);
    let series = |s: &str| *m.get(s).unwrap_or_else(|| panic!("no series {s}"));
    assert_eq!(series("prepfs_job_samples_served_total{job=\"train\"}"), (3 * samples) as f64);
    assert_eq!(series("prepfs_job_epoch{job=\"train\"}"), 4.0);
    assert_eq!(series("prepfs_recipe_opens_total{recipe=\"ta\"}"), (3 * samples) as f64);
    let after = mnt.stats();
    let recipe = &after["recipes"]["ta"];
    assert_eq!(series("prepfs_recipe_cache_budget_bytes{recipe=\"ta\"}"), recipe["budget"].as_u64().expect("budget") as f64);
    assert!(series("prepfs_recipe_cache_used_bytes{recipe=\"ta\"}") <= recipe["budget"].as_u64().expect("budget") as f64);

    // And in `prepfs stats`.
    let out = prepfs_for(30.0, &[&"stats", &mnt.mountpoint]);
    let summary = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(summary.contains(&format!("  train: epoch 4, 0 of {samples} (0%), {} served in all", 3 * samples)), "{summary}");
    let recipe_line = summary.lines().find(|l| l.starts_with("  recipe ta: ")).unwrap_or_else(|| panic!("a line for recipe ta: {summary}"));
    assert!(recipe_line.starts_with(&format!("  recipe ta: {} opens, ", 3 * samples)) && recipe_line.contains("; cache "), "{recipe_line}");
    assert!(mnt.stop().success());
}
