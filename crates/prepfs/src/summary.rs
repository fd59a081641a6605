//! `prepfs stats`: finding the mount a path is inside ([`find_mount`]) and turning its
//! `.prepfs/stats.json` into a readable summary ([`summary`]), with per-second rates when an
//! earlier reading is given (`--watch`). Reads the JSON as the mount serves it, so it works
//! against any running mount; a figure missing from the document shows as `-`.
//!
//! Each figure is read at its registered path ([`prepfs_core::metrics::defs`], where the
//! metrics the summary prints are marked `in_summary`); only the mount's identity (source,
//! files, jobs' names, why passthrough is off) is read by name.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use prepfs_core::metrics::{defs, Def};
use serde_json::Value;

/// Why no mount was found for a path.
#[derive(Debug, thiserror::Error)]
pub enum FindError {
    #[error("{}: {source}", prepfs_base::escape::escaped(path))]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{} is not inside a prepfs mount (no .prepfs/stats.json at the root of its filesystem, {})", prepfs_base::escape::escaped(path), prepfs_base::escape::escaped(root))]
    NotAMount { path: PathBuf, root: PathBuf },
}

/// The root of the prepfs mount that `path` is inside: the topmost directory above it on the
/// same filesystem, which must hold `.prepfs/stats.json`. Climbing by device rather than looking
/// for `.prepfs/` in every parent asks the mount nothing on the way (a lookup under `jobs/`
/// would start a job).
pub fn find_mount(path: &Path) -> Result<PathBuf, FindError> {
    let io = |source| FindError::Io { path: path.to_path_buf(), source };
    let start = std::fs::canonicalize(path).map_err(io)?;
    let dev = std::fs::metadata(&start).map_err(io)?.dev();
    let mut root = start.as_path();
    while let Some(parent) = root.parent() {
        match std::fs::metadata(parent) {
            Ok(m) if m.dev() == dev => root = parent,
            _ => break,
        }
    }
    if root.join(".prepfs/stats.json").is_file() {
        Ok(root.to_path_buf())
    } else {
        Err(FindError::NotAMount { path: path.to_path_buf(), root: root.to_path_buf() })
    }
}

const VIEWS: [&str; 3] = ["encoded", "decoded", "augmented"];

fn num(doc: &Value, pointer: &str) -> Option<f64> {
    doc.pointer(pointer).and_then(Value::as_f64)
}

/// The `stats.json` pointer of `def`'s series with these label values.
fn at(def: &Def, labels: &[&str]) -> String {
    def.pointer(labels)
}

/// Bytes as people read them: `1.5 GiB`.
pub fn human_bytes(n: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{value:.0} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// Microseconds as people read them: `850 µs`, `3.2 ms`, `1.50 s`.
pub fn human_us(us: f64) -> String {
    if us < 1000.0 {
        format!("{us:.0} µs")
    } else if us < 1e6 {
        format!("{:.1} ms", us / 1e3)
    } else {
        format!("{:.2} s", us / 1e6)
    }
}

fn human_duration(secs: f64) -> String {
    let s = secs as u64;
    match (s / 3600, s / 60 % 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m {s:02}s"),
        (h, m, s) => format!("{h}h {m:02}m {s:02}s"),
    }
}

/// `p50 / p99` of one open histogram, or `-` when it holds nothing.
fn percentiles(doc: &Value, view: &str, outcome: &str) -> String {
    let series = at(&defs::OPEN_SECONDS, &[view, outcome]);
    let at = |p: &str| num(doc, &format!("{series}/{p}"));
    match (at("count"), at("p50"), at("p99")) {
        (Some(n), Some(p50), Some(p99)) if n > 0.0 => format!("{} / {}", human_us(p50), human_us(p99)),
        _ => "-".into(),
    }
}

/// One line per active job: its epoch, how far through it (of the set's samples), what it has
/// been served in all, its hit rate; with an earlier reading, its rate and when its epoch ends
/// at that rate.
fn job_progress(doc: &Value, previous: Option<&Value>, elapsed: Option<f64>) -> Vec<String> {
    let samples = num(doc, &at(&defs::SAMPLES, &[])).unwrap_or(0.0);
    let active = |d: &Value| d.pointer("/jobs/active").and_then(Value::as_array).cloned().unwrap_or_default();
    let field = |j: &Value, key: &str| j.get(key).and_then(Value::as_f64);
    active(doc)
        .iter()
        .filter_map(|job| {
            let name = job.get("name").and_then(Value::as_str)?;
            let (epoch, this_epoch, served) = (field(job, "epoch")?, field(job, "served_this_epoch")?, field(job, "samples_served")?);
            let mut line = format!("  {}: epoch {epoch:.0}, {this_epoch:.0}", prepfs_base::escape::escaped(name));
            if samples > 0.0 {
                line.push_str(&format!(" of {samples:.0} ({:.0}%)", 100.0 * this_epoch / samples));
            }
            line.push_str(&format!(", {served:.0} served in all, hit rate {:.2}", field(job, "hit_rate").unwrap_or(0.0)));
            let before = previous.map(active).and_then(|p| p.into_iter().find(|j| j.get("name").and_then(Value::as_str) == Some(name)));
            if let (Some(dt), Some(before)) = (elapsed, before.as_ref().and_then(|j| field(j, "samples_served"))) {
                let rate = (served - before).max(0.0) / dt;
                line.push_str(&format!(", {rate:.0}/s"));
                if rate > 0.0 && samples > this_epoch {
                    line.push_str(&format!(", epoch ends in {}", human_duration((samples - this_epoch) / rate)));
                }
            }
            Some(line)
        })
        .collect()
}

/// The readable summary of a `stats.json` document. With `previous` (an earlier reading of the
/// same mount), counters also show their rate per second since it.
pub fn summary(doc: &Value, previous: Option<&Value>) -> String {
    let elapsed = previous
        .and_then(|p| Some(num(doc, &at(&defs::UPTIME, &[]))? - num(p, &at(&defs::UPTIME, &[]))?))
        .filter(|dt| *dt > 0.0);
    // The rate of the counter at `pointer`, as ` (R/s)`, when an earlier reading is given.
    let rate = |pointer: &str, fmt: &dyn Fn(f64) -> String| -> String {
        match (elapsed, previous.and_then(|p| num(p, pointer)), num(doc, pointer)) {
            (Some(dt), Some(before), Some(now)) => format!(" ({}/s)", fmt((now - before).max(0.0) / dt)),
            _ => String::new(),
        }
    };
    let count = |n: f64| format!("{n:.0}");
    let dash = |v: Option<f64>, fmt: &dyn Fn(f64) -> String| v.map_or_else(|| "-".to_owned(), fmt);
    let mut out = Vec::new();

    out.push(format!(
        "prepfs: {}, up {}",
        prepfs_base::escape::escaped(doc.pointer("/source").and_then(Value::as_str).unwrap_or("?")),
        dash(num(doc, &at(&defs::UPTIME, &[])), &human_duration)
    ));
    out.push(format!(
        "samples      {} ({} files, {} directories)",
        dash(num(doc, &at(&defs::SAMPLES, &[])), &count),
        dash(num(doc, "/files"), &count),
        dash(num(doc, "/directories"), &count)
    ));
    out.push(format!("{:<12} {:>16} {:>9} {:>22}   {:<21} {}", "view", "opens", "hit rate", "served", "open hit p50 / p99", "miss p50 / p99"));
    for view in VIEWS {
        let opens_at = at(&defs::VIEW_OPENS, &[view]);
        let opens = format!("{}{}", dash(num(doc, &opens_at), &count), rate(&opens_at, &count));
        let (hits, misses) = (num(doc, &at(&defs::VIEW_HITS, &[view])), num(doc, &at(&defs::VIEW_MISSES, &[view])));
        let hit_rate = match (hits, misses) {
            (Some(h), Some(m)) if h + m > 0.0 => format!("{:.0}%", 100.0 * h / (h + m)),
            _ => "-".into(),
        };
        let served_at = at(&defs::VIEW_SERVED_BYTES, &[view]);
        let served = format!("{}{}", dash(num(doc, &served_at), &human_bytes), rate(&served_at, &human_bytes));
        out.push(format!(
            "{view:<12} {opens:>16} {hit_rate:>9} {served:>22}   {:<21} {}",
            percentiles(doc, view, "hit"),
            percentiles(doc, view, "miss")
        ));
    }
    let forms: Vec<String> = VIEWS
        .iter()
        .map(|f| {
            let used = dash(num(doc, &at(&defs::CACHE_USED, &[f])), &human_bytes);
            let budget = dash(num(doc, &at(&defs::CACHE_BUDGET, &[f])), &human_bytes);
            format!("{f} {used} / {budget}")
        })
        .collect();
    out.push(format!("cache        {}", forms.join(", ")));
    out.extend(recipe_lines(doc));
    if doc.pointer(&at(&defs::MEMORY, &["cache_encoded"])).is_some() {
        let m = |key: &str| dash(num(doc, &at(&defs::MEMORY, &[key])), &human_bytes);
        out.push(format!(
            "memory       {} resident (peak {}): cache {} + {} + {}, loader rings {}, catalog {}, jobs {}, open handles {}",
            m("resident"),
            m("peak_resident"),
            m("cache_encoded"),
            m("cache_decoded"),
            m("cache_augmented"),
            m("loader_rings"),
            m("catalog"),
            m("jobs_state"),
            m("open_handles")
        ));
    }
    if doc.pointer("/cache/disk").is_some_and(|d| !d.is_null()) {
        out.push(format!(
            "disk cache   {} / {}",
            dash(num(doc, &at(&defs::CACHE_USED, &["disk"])), &human_bytes),
            dash(num(doc, "/cache/disk/size"), &human_bytes)
        ));
    }
    let source_read = at(&defs::SOURCE_READ_BYTES, &[]);
    out.push(format!(
        "source       {} read{}, {} read errors, {} changed files",
        dash(num(doc, &source_read), &human_bytes),
        rate(&source_read, &human_bytes),
        dash(num(doc, &at(&defs::SOURCE_ERRORS, &[])), &count),
        dash(num(doc, &at(&defs::SOURCE_CHANGES, &[])), &count)
    ));
    let pixel = |kind: &str| {
        let series = at(&defs::PIXEL_WORK_SECONDS, &[kind]);
        let at = |p: &str| num(doc, &format!("{series}/{p}"));
        match (at("count"), at("p50"), at("p99")) {
            (Some(n), Some(p50), Some(p99)) if n > 0.0 => format!("{kind} {n:.0} × {} / {}", human_us(p50), human_us(p99)),
            _ => format!("{kind} 0"),
        }
    };
    out.push(format!(
        "pixel work   {}, {}, {} (p50 / p99 CPU); {} decode errors",
        pixel("decode"),
        pixel("decode_augment"),
        pixel("augment"),
        dash(num(doc, &at(&defs::DECODE_ERRORS, &[])), &count)
    ));
    let jobs: Vec<&str> = doc
        .pointer("/jobs/active")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|j| j.get("name").and_then(Value::as_str)).collect())
        .unwrap_or_default();
    out.push(if jobs.is_empty() { "jobs         none active".into() } else { format!("jobs         {} active: {}", jobs.len(), jobs.iter().map(|j| prepfs_base::escape::escaped(j).to_string()).collect::<Vec<_>>().join(", ")) });
    out.extend(job_progress(doc, previous, elapsed));
    let passthrough = match doc.pointer(&at(&defs::PASSTHROUGH_ENABLED, &[])).and_then(Value::as_bool) {
        Some(true) => format!("on ({} opens)", dash(num(doc, &at(&defs::PASSTHROUGH_OPENS, &[])), &count)),
        Some(false) => match doc.pointer("/passthrough/off_because").and_then(Value::as_str) {
            Some(why) => format!("off ({why})"),
            None => "off".into(),
        },
        None => "-".into(),
    };
    out.push(format!("passthrough  {passthrough}"));
    if let Some(line) = workers_line(doc) {
        out.push(line);
    }
    if let Some(line) = server_line(doc) {
        out.push(line);
    }
    out.push(format!(
        "fuse         {} requests per open; {} open handles",
        dash(num(doc, &at(&defs::FUSE_REQUESTS_PER_OPEN, &[])), &|v| format!("{v:.1}")),
        dash(num(doc, &at(&defs::OPEN_HANDLES, &[])), &count)
    ));
    let mut text = out.join("\n");
    text.push('\n');
    text
}

/// One line per recipe (`recipes`): its opens, the share served an output kept ahead, and its
/// store of kept outputs against its share of the augmented budget (the `cache` line's
/// `augmented` is `augmented/`'s own store).
fn recipe_lines(doc: &Value) -> Vec<String> {
    let Some(recipes) = doc.get("recipes").and_then(Value::as_object) else { return Vec::new() };
    recipes
        .keys()
        .map(|name| {
            let figure = |def: &Def| num(doc, &at(def, &[name]));
            let opens = figure(&defs::RECIPE_OPENS).unwrap_or(0.0);
            let kept = figure(&defs::RECIPE_SERVED_KEPT).unwrap_or(0.0);
            let share = if opens > 0.0 { format!("{:.0}%", 100.0 * kept / opens) } else { "-".into() };
            let bytes = |def: &Def| figure(def).map_or_else(|| "-".to_owned(), human_bytes);
            format!(
                "  recipe {}: {opens:.0} opens, {share} served kept ahead; cache {} / {} ({:.0} outputs)",
                prepfs_base::escape::escaped(name),
                bytes(&defs::RECIPE_CACHE_USED),
                bytes(&defs::RECIPE_CACHE_BUDGET),
                figure(&defs::RECIPE_CACHE_OUTPUTS).unwrap_or(0.0)
            )
        })
        .collect()
}

/// The serving process, for a supervised mount or one that restarted (`server`, issue 53):
/// its pid and the restarts before it, with the last one's cause.
fn server_line(doc: &Value) -> Option<String> {
    let server = doc.get("server").filter(|s| s.is_object())?;
    let restarts = server.get("restarts").and_then(Value::as_u64).unwrap_or(0);
    let supervised = server.get("supervised").and_then(Value::as_bool).unwrap_or(false);
    if restarts == 0 && !supervised {
        return None;
    }
    let pid = server.get("pid").and_then(Value::as_u64).map_or("?".into(), |p| p.to_string());
    let last = server.get("last_restart_cause").and_then(Value::as_str).map_or(String::new(), |c| format!(" (last: {c})"));
    Some(format!(
        "server       pid {pid}{}; {restarts} restart{}{last}",
        if supervised { ", supervised" } else { "" },
        if restarts == 1 { "" } else { "s" }
    ))
}

/// The remote work, where the mount has a remote tier: the workers alive and what came of the
/// items asked (`remote_work`, issue 52).
fn workers_line(doc: &Value) -> Option<String> {
    let work = doc.get("remote_work").filter(|w| w.is_object())?;
    let n = |k: &str| work.get(k).and_then(Value::as_u64).unwrap_or(0);
    let workers: Vec<String> = work
        .get("workers")
        .and_then(Value::as_array)
        .map(|ws| {
            ws.iter()
                .map(|w| format!("{} {:.0}/s", prepfs_base::escape::escaped(w.get("name").and_then(Value::as_str).unwrap_or("?")), w.get("rate").and_then(Value::as_f64).unwrap_or(0.0)))
                .collect()
        })
        .unwrap_or_default();
    let asking = match (work.get("asking").and_then(Value::as_bool), work.get("why").and_then(Value::as_str)) {
        (Some(true), Some(why)) => format!("asking: {why}"),
        (_, Some(why)) => format!("not asking: {why}"),
        _ => "-".into(),
    };
    Some(format!(
        "workers      {} alive{}; {} asked, {} done ({} late), {} dropped, {} lost; {}",
        workers.len(),
        if workers.is_empty() { String::new() } else { format!(" ({})", workers.join(", ")) },
        n("queued"),
        n("done"),
        n("late"),
        n("dropped"),
        n("lost"),
        asking
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_line_says_the_restarts_and_the_last_cause_and_is_left_out_of_a_plain_mount() {
        let supervised = serde_json::json!({"server": {"pid": 9, "restarts": 3, "last_restart_cause": "killed by signal 9 (SIGKILL)", "supervised": true}});
        assert_eq!(server_line(&supervised).as_deref(), Some("server       pid 9, supervised; 3 restarts (last: killed by signal 9 (SIGKILL))"));
        let plain = serde_json::json!({"server": {"pid": 9, "restarts": 0, "last_restart_cause": null, "supervised": false}});
        assert_eq!(server_line(&plain), None);
    }
    use serde_json::json;

    fn doc(uptime: f64, opens: u64, read: u64) -> Value {
        json!({
            "uptime_s": uptime,
            "source": "/data/imagenet",
            "samples": 1200, "files": 1201, "directories": 11,
            "views": {
                "encoded": {"opens": 0, "bytes_served": 0, "hits": 0, "misses": 0},
                "decoded": {"opens": 2, "bytes_served": 3_000_000, "hits": 1, "misses": 1},
                "augmented": {"opens": opens, "bytes_served": opens * 150_000, "hits": opens * 3 / 4, "misses": opens / 4},
            },
            "source_bytes_read": read, "source_errors": 0, "source_changes": 1, "decode_errors": 2,
            "cache": {
                "encoded": {"bytes_used": 1_048_576, "budget": 2_097_152},
                "decoded": {"bytes_used": 0, "budget": 0},
                "augmented": {"bytes_used": 512, "budget": 1024},
                "disk": null,
            },
            "latency_us": {"open": {
                "augmented": {"hit": {"count": 3, "p50": 120, "p90": 300, "p99": 900, "max": 950},
                              "miss": {"count": 1, "p50": 4200, "p90": 4200, "p99": 4200, "max": 4200}},
            }, "pixel_work": {"decode_augment": {"count": 1, "p50": 3000, "p90": 3000, "p99": 3000, "max": 3000}}},
            "jobs": {"active": [{"name": "train"}]},
            "passthrough": {"on": false, "off_because": "the kernel does not offer it"},
            "fuse_requests_per_open": 3.25,
            "open_handles": 1,
            "memory": {"cache_encoded": 1_048_576, "cache_decoded": 0, "cache_augmented": 512, "loader_rings": 0,
                       "catalog": 65_536, "jobs_state": 100, "open_handles": 0, "resident": 52_428_800, "peak_resident": 104_857_600},
        })
    }

    #[test]
    fn names_in_the_document_are_printed_escaped_on_their_own_line() {
        let mut d = doc(10.0, 4, 0);
        d["source"] = json!("/data/a\n* * * * * root touch /tmp/pwned\n\u{1b}[2J");
        d["jobs"]["active"] = json!([{"name": "j\rk"}]);
        let text = summary(&d, None);
        assert!(!text.contains('\x1b') && !text.contains('\r'), "{text:?}");
        assert!(text.lines().all(|l| !l.starts_with("* * * * *")), "{text}");
        assert!(text.lines().next().is_some_and(|l| l.contains("/data/a\\n* * * * * root touch /tmp/pwned\\n\\x1b[2J")), "{text}");
        assert!(text.contains("j\\rk"), "{text}");
    }

    #[test]
    fn the_summary_shows_each_view_the_cache_and_the_latencies_in_a_dozen_lines() {
        let text = summary(&doc(3725.0, 400, 10 * 1024 * 1024), None);
        let lines: Vec<&str> = text.lines().collect();
        assert!((10..=15).contains(&lines.len()), "{text}");
        assert!(lines[0].contains("/data/imagenet") && lines[0].contains("up 1h 02m 05s"), "{text}");
        let augmented = lines.iter().find(|l| l.starts_with("augmented")).expect("augmented line");
        assert!(augmented.contains("400") && augmented.contains("75%"), "{augmented}");
        assert!(augmented.contains("120 µs / 900 µs") && augmented.contains("4.2 ms / 4.2 ms"), "{augmented}");
        let encoded = lines.iter().find(|l| l.starts_with("encoded")).expect("encoded line");
        assert!(encoded.contains(" - "), "no opens, no hit rate: {encoded}");
        assert!(text.contains("encoded 1.0 MiB / 2.0 MiB"), "{text}");
        assert!(text.contains("10.0 MiB read"), "{text}");
        assert!(text.contains("memory       50.0 MiB resident (peak 100.0 MiB): cache 1.0 MiB + 0 B + 512 B"), "{text}");
        assert!(text.contains("decode_augment 1 × 3.0 ms"), "{text}");
        assert!(text.contains("1 active: train"), "{text}");
        assert!(text.contains("off (the kernel does not offer it)"), "{text}");
        assert!(text.contains("3.2 requests per open") || text.contains("3.3 requests per open"), "{text}");
        assert!(!text.contains("/s)"), "no rates without an earlier reading: {text}");
    }

    #[test]
    fn each_recipe_has_a_line_with_its_opens_its_share_served_kept_and_its_store_against_its_budget() {
        let mut d = doc(10.0, 4, 0);
        d["recipes"] = json!({"ta": {"opens": 300, "served_kept": 240, "kept": 12, "kept_bytes": 1_181_116_006u64, "budget": 2_147_483_648u64}});
        let text = summary(&d, None);
        let line = text.lines().find(|l| l.starts_with("  recipe ta:")).expect("a line for recipe ta");
        assert_eq!(line, "  recipe ta: 300 opens, 80% served kept ahead; cache 1.1 GiB / 2.0 GiB (12 outputs)");
        assert!(!summary(&doc(10.0, 4, 0), None).contains("recipe"), "no recipes, no recipe line");
    }

    #[test]
    fn with_an_earlier_reading_counters_show_their_rate_per_second() {
        let before = doc(10.0, 100, 0);
        let now = doc(12.0, 300, 4 * 1024 * 1024);
        let text = summary(&now, Some(&before));
        assert!(text.contains("300 (100/s)"), "{text}");
        assert!(text.contains("4.0 MiB read (2.0 MiB/s)"), "{text}");
    }

    #[test]
    fn each_job_shows_its_epoch_its_progress_through_it_and_with_an_earlier_reading_its_rate_and_eta() {
        let job = |served: u64, this_epoch: u64| json!([{"name": "train", "epoch": 3, "served_this_epoch": this_epoch, "samples_served": served, "hit_rate": 0.62}]);
        let (mut before, mut now) = (doc(10.0, 100, 0), doc(12.0, 300, 0));
        before["jobs"]["active"] = job(2_400, 0);
        now["jobs"]["active"] = job(3_000, 600);
        let text = summary(&now, None);
        assert!(text.contains("  train: epoch 3, 600 of 1200 (50%), 3000 served in all, hit rate 0.62"), "{text}");
        assert!(!text.contains("epoch ends"), "no ETA without a rate: {text}");
        // 600 samples in 2 s: 300/s, and the 600 left of 1,200 in 2 s.
        let text = summary(&now, Some(&before));
        assert!(text.contains("hit rate 0.62, 300/s, epoch ends in 2s"), "{text}");
    }

    #[test]
    fn missing_figures_show_as_dashes_rather_than_failing() {
        let text = summary(&json!({}), None);
        assert!(text.contains("samples      - (- files"), "{text}");
    }

    #[test]
    fn a_path_outside_any_mount_is_refused_with_the_reason() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = find_mount(dir.path()).expect_err("a plain directory is no mount");
        assert!(err.to_string().contains("is not inside a prepfs mount"), "{err}");
        let err = find_mount(&dir.path().join("missing")).expect_err("a missing path");
        assert!(matches!(err, FindError::Io { .. }), "{err}");
    }

    /// `value` made different enough to show in any figure's rendering.
    fn perturb(value: &mut Value) {
        match value {
            Value::Number(n) => *value = json!(n.as_f64().unwrap_or(0.0) * 7.0 + 12_345.0),
            Value::Bool(b) => *b = !*b,
            Value::Object(m) => m.values_mut().for_each(perturb),
            _ => {}
        }
    }

    #[test]
    fn every_figure_the_registry_marks_for_the_summary_changes_the_summary_when_it_changes() {
        let mut base = doc(3725.0, 400, 10 * 1024 * 1024);
        base["passthrough"] = json!({"on": true, "opens": 7});
        let before = summary(&base, None);
        for def in defs::ALL.iter().filter(|d| d.summary) {
            let series = def.series_in(&base);
            assert!(!series.is_empty(), "{def:?}: the test's document has its series");
            for pointer in series {
                let mut changed = base.clone();
                perturb(changed.pointer_mut(&pointer).expect("a series' pointer"));
                assert_ne!(summary(&changed, None), before, "{pointer} shows in the summary");
            }
        }
    }
}

