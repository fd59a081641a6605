//! Writes the registered metrics (`defs.rs`) out: `.prepfs/metrics` in the Prometheus text
//! exposition format 0.0.4 ([`exposition`]) and the registry's part of `.prepfs/stats.json`
//! ([`json`]), each walking [`ALL`] in order.

use std::fmt::Write as _;

use super::def::{Figures, Json, Kind, Value};
use super::defs::ALL;
use crate::stats::latency::{Snapshot, BUCKETS_S};

/// Writes metric families in the text format.
struct Writer {
    out: String,
}

impl Writer {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                // Escaped as the format says (\\, \", \n), though job names, the only label
                // values from users, are [A-Za-z0-9._-] already.
                let v = v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
                let _ = write!(self.out, "{k}=\"{v}\"");
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
    }

    /// One histogram series: cumulative buckets, `+Inf`, `_sum` (seconds) and `_count`.
    fn histogram(&mut self, name: &str, labels: &[(&str, &str)], snap: &Snapshot) {
        let bucket = format!("{name}_bucket");
        for (le, count) in BUCKETS_S.iter().zip(snap.buckets) {
            let le = le.to_string();
            let mut with_le = labels.to_vec();
            with_le.push(("le", &le));
            self.sample(&bucket, &with_le, count);
        }
        let mut inf = labels.to_vec();
        inf.push(("le", "+Inf"));
        self.sample(&bucket, &inf, snap.count);
        self.sample(&format!("{name}_sum"), labels, snap.sum_us as f64 / 1e6);
        self.sample(&format!("{name}_count"), labels, snap.count);
    }
}

/// The mount's figures in the Prometheus text exposition format, version 0.0.4: every
/// registered metric with a Prometheus name, HELP and TYPE before its samples (a labelled
/// family with no series yet still says what it is; an unlabelled one the system cannot give
/// is left out).
pub(crate) fn exposition(figures: &Figures<'_>) -> String {
    let mut w = Writer { out: String::with_capacity(16 * 1024) };
    for def in ALL {
        let Some(name) = def.prom_name() else { continue };
        let series = def.series(figures);
        if def.labels.is_empty() && series.iter().all(|(_, v)| *v == Value::Absent) {
            continue;
        }
        w.family(name, def.kind.name(), def.help);
        for (values, value) in &series {
            let labels: Vec<(&str, &str)> = def.labels.iter().copied().zip(values.iter().map(String::as_str)).collect();
            match value {
                Value::Count(n) => w.sample(name, &labels, n),
                Value::Float(x) => w.sample(name, &labels, x),
                Value::Flag(on) => w.sample(name, &labels, u8::from(*on)),
                Value::Hist(snap) => w.histogram(name, &labels, snap),
                Value::Absent => {}
            }
        }
        debug_assert!(def.kind == Kind::Histogram || series.iter().all(|(_, v)| !matches!(v, Value::Hist(_))), "{name}");
    }
    w.out
}

/// A value as `stats.json` shows it (a histogram: count, p50, p90, p99 and max in microseconds).
fn json_value(value: Value) -> serde_json::Value {
    match value {
        Value::Count(n) => n.into(),
        Value::Float(x) => x.into(),
        Value::Flag(on) => on.into(),
        Value::Hist(s) => serde_json::json!({"count": s.count, "p50": s.p50_us, "p90": s.p90_us, "p99": s.p99_us, "max": s.max_us}),
        Value::Absent => serde_json::Value::Null,
    }
}

/// The registry's part of `stats.json`: every metric written at its path ([`Json::At`]), objects
/// made on the way.
pub(crate) fn json(figures: &Figures<'_>) -> serde_json::Map<String, serde_json::Value> {
    let mut doc = serde_json::Map::new();
    for def in ALL {
        let Json::At(template) = def.json else { continue };
        let series = def.series(figures);
        if series.is_empty() {
            // A labelled family with no series yet (no errors seen, no recipes) is still there,
            // empty: `fuse_errors: {}`.
            let fixed = template.split("/{").next().unwrap_or("");
            let mut at = &mut doc;
            for key in fixed.split('/').skip(1) {
                let slot = at.entry(key).or_insert_with(|| serde_json::Value::Object(serde_json::Map::new()));
                let serde_json::Value::Object(inner) = slot else { break };
                at = inner;
            }
        }
        for (values, value) in series {
            let values: Vec<&str> = values.iter().map(String::as_str).collect();
            let pointer = def.pointer(&values);
            let mut keys: Vec<String> = pointer.split('/').skip(1).map(|k| k.replace("~1", "/").replace("~0", "~")).collect();
            let Some(last) = keys.pop() else { continue };
            let mut at = &mut doc;
            for key in keys {
                let slot = at.entry(key).or_insert_with(|| serde_json::Value::Object(serde_json::Map::new()));
                if !slot.is_object() {
                    *slot = serde_json::Value::Object(serde_json::Map::new());
                }
                let serde_json::Value::Object(inner) = slot else { unreachable!("made an object above") };
                at = inner;
            }
            at.insert(last, json_value(value));
        }
    }
    doc
}

/// Adds `extra`'s keys into `doc`, object into object (a section both write, as `passthrough`,
/// keeps both's keys; elsewhere `extra`'s value wins).
pub(crate) fn merge(doc: &mut serde_json::Map<String, serde_json::Value>, extra: serde_json::Map<String, serde_json::Value>) {
    for (k, v) in extra {
        match (doc.get_mut(&k), v) {
            (Some(serde_json::Value::Object(inner)), serde_json::Value::Object(more)) => merge(inner, more),
            (_, v) => {
                doc.insert(k, v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};
    use std::time::Duration;

    use super::*;
    use crate::metrics::def::{Gauges, JobFigures, Unit};
    use crate::stats::latency::{Outcome, PixelKind};
    use crate::stats::{FuseOp, Stats};
    use prepfs_cache::form::Form;

    #[test]
    fn a_label_value_is_escaped_as_the_text_format_says() {
        let mut w = Writer { out: String::new() };
        w.sample("m", &[("job", "a\\b\"c\nd")], 1);
        assert_eq!(w.out, "m{job=\"a\\\\b\\\"c\\nd\"} 1\n");
    }

    /// A parsed sample line: name, labels, value.
    fn parse(line: &str) -> (String, HashMap<String, String>, f64) {
        let (series, value) = line.rsplit_once(' ').expect("name and value");
        let value: f64 = if value == "+Inf" { f64::INFINITY } else { value.parse().expect("a number") };
        let (name, labels) = match series.split_once('{') {
            None => (series.to_owned(), HashMap::new()),
            Some((name, rest)) => {
                let inner = rest.strip_suffix('}').expect("closing brace");
                let labels = inner
                    .split(',')
                    .map(|kv| {
                        let (k, v) = kv.split_once('=').expect("k=v");
                        (k.to_owned(), v.trim_matches('"').to_owned())
                    })
                    .collect();
                (name.to_owned(), labels)
            }
        };
        (name, labels, value)
    }

    fn busy_stats() -> Stats {
        let stats = Stats::default();
        crate::stats::bump(&stats.augmented.opens, 5);
        crate::stats::bump(&stats.requests.open, 5);
        for ms in [0.3, 2.0, 7.0, 40.0, 15_000.0] {
            stats.latency.record_open(Form::Augmented, Outcome::Miss, Duration::from_secs_f64(ms / 1e3));
        }
        stats.latency.record_open(Form::Augmented, Outcome::Hit, Duration::from_micros(80));
        stats.latency.record_pixel(PixelKind::DecodeAugment, Duration::from_millis(3));
        // Recipe 1 (`ta`): two opens served kept outputs, one made its own.
        crate::stats::bump(&stats.pipeline(1).served_kept, 2);
        crate::stats::bump(&stats.pipeline(1).made_at_open, 1);
        stats.fuse_errors.count(FuseOp::Lookup, libc::ENOENT);
        stats
    }

    fn gauges() -> Gauges {
        Gauges {
            samples: 7,
            cache: vec![("augmented", 10, 100), ("disk", 0, 0)],
            passthrough_on: true,
            remote_forged: Some(3),
            jobs: vec![JobFigures { name: "train".into(), epoch: 2, served: 9, hits: 6, misses: 3 }],
            memory: vec![("resident", Some(5)), ("peak_resident", None)],
            recipes: vec!["ta".into()],
            recipe_stores: vec![Some(super::super::def::RecipeStore { outputs: 4, bytes: 600, budget: 1000 })],
            remote_work: Some(super::super::def::RemoteWorkFigures {
                items: vec![("queued", 4), ("done", 3)],
                bytes: 450,
                workers: vec![("w1".into(), "host-a".into(), 12.5, 0.4)],
            }),
            server: crate::stats::ServerLife { pid: 42, restarts: 2, last_restart_cause: Some("killed by signal 9 (SIGKILL)".into()), supervised: true },
        }
    }

    #[test]
    fn every_metric_has_help_and_type_before_its_samples() {
        let text = exposition(&Figures { stats: &busy_stats(), gauges: &gauges() });
        let mut helped = HashSet::new();
        let mut typed = HashMap::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                helped.insert(rest.split(' ').next().expect("name").to_owned());
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("name and type");
                assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
                typed.insert(name.to_owned(), kind.to_owned());
            } else {
                let (name, _, _) = parse(line);
                let family = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|s| name.strip_suffix(s).filter(|f| typed.get(*f).is_some_and(|k| k == "histogram")))
                    .unwrap_or(&name);
                assert!(helped.contains(family) && typed.contains_key(family), "{name} has no HELP/TYPE before it");
                if typed[family] == "counter" {
                    assert!(name.ends_with("_total"), "counter {name} ends in _total");
                }
            }
        }
        assert!(text.contains("prepfs_opens_total{view=\"augmented\"} 5\n"), "{text}");
        assert!(text.contains("prepfs_remote_forged_total 3\n"), "{text}");
        assert!(text.contains("prepfs_remote_work_items_total{state=\"done\"} 3\n"), "{text}");
        assert!(text.contains("prepfs_remote_worker_rate{worker=\"w1\",host=\"host-a\"} 12.5\n"), "{text}");
        assert!(text.contains("prepfs_remote_workers 1\n"), "{text}");
        assert!(text.contains("prepfs_fuse_requests_total{kind=\"open\"} 5\n"), "{text}");
        assert!(text.contains("prepfs_cache_budget_bytes{form=\"augmented\"} 100\n"), "{text}");
        assert!(text.contains("prepfs_recipe_opens_total{recipe=\"ta\"} 3\n"), "{text}");
        assert!(text.contains("prepfs_recipe_served_kept_total{recipe=\"ta\"} 2\n"), "{text}");
        assert!(text.contains("prepfs_recipe_cache_used_bytes{recipe=\"ta\"} 600\n"), "{text}");
        assert!(text.contains("prepfs_recipe_cache_budget_bytes{recipe=\"ta\"} 1000\n"), "{text}");
        assert!(text.contains("prepfs_recipe_cache_outputs{recipe=\"ta\"} 4\n"), "{text}");
    }

    #[test]
    fn histogram_buckets_are_cumulative_and_end_with_inf_equal_to_count() {
        let text = exposition(&Figures { stats: &busy_stats(), gauges: &gauges() });
        // series (the labels but `le`) -> bucket values in order, and its _count.
        let mut buckets: HashMap<String, Vec<(f64, f64)>> = HashMap::new();
        let mut counts: HashMap<String, f64> = HashMap::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (name, mut labels, value) = parse(line);
            let le = labels.remove("le");
            let mut key: Vec<_> = labels.into_iter().collect();
            key.sort();
            if let Some(family) = name.strip_suffix("_bucket") {
                let le = le.expect("le label");
                let le = if le == "+Inf" { f64::INFINITY } else { le.parse().expect("le") };
                buckets.entry(format!("{family}{key:?}")).or_default().push((le, value));
            } else if let Some(family) = name.strip_suffix("_count") {
                counts.insert(format!("{family}{key:?}"), value);
            }
        }
        assert_eq!(buckets.len(), 3 * 3 + 3, "9 open series and 3 pixel-work series");
        for (series, values) in &buckets {
            assert!(values.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1), "{series}: {values:?}");
            let last = values.last().expect("a bucket");
            assert_eq!(last.0, f64::INFINITY, "{series} ends with +Inf");
            assert_eq!(Some(&last.1), counts.get(series), "{series}: +Inf == _count");
        }
        let miss = text
            .lines()
            .filter(|l| l.starts_with("prepfs_open_seconds_bucket{view=\"augmented\",outcome=\"miss\""))
            .map(|l| parse(l).2)
            .collect::<Vec<_>>();
        // 0.3 ms, 2 ms, 7 ms, 40 ms and 15 s: le 0.0005 holds one, le 10 four, +Inf five.
        assert_eq!((miss[2], miss[15], miss[16]), (1.0, 4.0, 5.0), "{miss:?}");
    }

    #[test]
    fn every_metric_is_declared_once_with_help_and_a_place_to_show() {
        let mut prom = HashSet::new();
        let mut json = HashSet::new();
        for def in ALL {
            assert!(!def.help.is_empty(), "{def:?} has help");
            assert!(def.prom_name().is_some() || def.json_template().is_some(), "{def:?} shows somewhere");
            if let Some(name) = def.prom_name() {
                assert!(prom.insert(name), "{name} declared twice");
                assert!(name.starts_with("prepfs_"), "{name}");
                assert_eq!(def.kind == Kind::Counter, name.ends_with("_total"), "{name}: counters, and only they, end in _total");
                match def.unit {
                    Unit::Bytes => assert!(name.contains("_bytes"), "{name} says bytes"),
                    Unit::Seconds | Unit::Latency => assert!(name.contains("_seconds"), "{name} says seconds"),
                    _ => {}
                }
            }
            if let Some(template) = def.json_template() {
                assert!(json.insert(template), "{template} declared twice");
                for label in def.labels {
                    assert!(template.contains(&format!("{{{label}}}")), "{template} places label {label}");
                }
            }
        }
        assert!(ALL.len() >= 60, "{}", ALL.len());
    }

    #[test]
    fn every_registered_metric_shows_in_the_exposition_and_its_registry_written_ones_in_stats_json() {
        let (stats, gauges) = (busy_stats(), gauges());
        let figures = Figures { stats: &stats, gauges: &gauges };
        let text = exposition(&figures);
        let doc = serde_json::Value::Object(json(&figures));
        for def in ALL {
            let series = def.series(&figures);
            assert!(!series.is_empty(), "{def:?} has series with this state");
            if let Some(name) = def.prom_name() {
                assert!(text.contains(&format!("# TYPE {name} {}\n", def.kind.name())), "{name} in the exposition");
                let sample = if def.kind == Kind::Histogram { format!("{name}_count") } else { name.to_owned() };
                assert!(text.lines().any(|l| l.starts_with(&sample)), "{name} has samples");
            }
            if let Json::At(_) = def.json {
                for (values, value) in &series {
                    let values: Vec<&str> = values.iter().map(String::as_str).collect();
                    let shown = def.lookup(&doc, &values).unwrap_or_else(|| panic!("{} in stats.json", def.pointer(&values)));
                    // The clock moves between the two reads; every other figure stands still.
                    if !std::ptr::eq(*def, &crate::metrics::defs::UPTIME) {
                        assert_eq!(*shown, json_value(value.clone()), "{}", def.pointer(&values));
                    }
                }
            }
        }
    }

    #[test]
    fn a_counter_bumped_at_its_call_site_shows_in_stats_json_and_the_exposition() {
        let (stats, gauges) = (Stats::default(), gauges());
        crate::stats::bump(&stats.decode_errors, 3);
        crate::stats::bump(&stats.decoded.hits, 2);
        stats.fuse_errors.count(FuseOp::Open, libc::EIO);
        stats.fuse_errors.count(FuseOp::Open, libc::EIO);
        let figures = Figures { stats: &stats, gauges: &gauges };
        let text = exposition(&figures);
        let doc = serde_json::Value::Object(json(&figures));
        assert_eq!(doc["decode_errors"], 3);
        assert!(text.contains("\nprepfs_decode_errors_total 3\n"), "{text}");
        assert_eq!(doc["views"]["decoded"]["hits"], 2);
        assert!(text.contains("\nprepfs_open_hits_total{view=\"decoded\"} 2\n"), "{text}");
        assert_eq!(doc["fuse_errors"]["open"]["EIO"], 2, "{doc}");
        assert!(text.contains("\nprepfs_fuse_errors_total{op=\"open\",errno=\"EIO\"} 2\n"), "{text}");
        assert!(!text.contains("op=\"lookup\""), "only the errors seen have series: {text}");
        let quiet = Stats::default();
        let doc = serde_json::Value::Object(json(&Figures { stats: &quiet, gauges: &gauges }));
        assert_eq!(doc["fuse_errors"], serde_json::json!({}), "none seen: there, empty");
    }

    #[test]
    fn stats_json_keeps_its_shape() {
        let (stats, gauges) = (busy_stats(), gauges());
        let doc = serde_json::Value::Object(json(&Figures { stats: &stats, gauges: &gauges }));
        for key in ["uptime_s", "samples", "views", "source_bytes_read", "decode_errors", "source_errors", "decodes", "decode_ms_mean", "source_changes", "open_handles", "opens_refused", "refills", "fuse_requests", "fuse_requests_per_open", "work", "latency_us", "passthrough", "loader", "recipes", "memory"] {
            assert!(doc.get(key).is_some(), "{key}: {doc}");
        }
        assert_eq!(doc["views"]["augmented"]["opens"], 5);
        assert_eq!(doc["fuse_requests"].as_object().map(|m| m.len()), Some(13));
        assert_eq!(doc["fuse_requests_per_open"], 1.0);
        assert_eq!(doc["latency_us"]["open"]["augmented"]["miss"]["count"], 5);
        assert_eq!(doc["latency_us"]["pixel_work"]["decode_augment"]["count"], 1);
        assert_eq!(doc["recipes"]["ta"]["opens"], 3);
        assert_eq!(doc["recipes"]["ta"]["served_kept"], 2);
        assert_eq!((doc["recipes"]["ta"]["kept"].as_u64(), doc["recipes"]["ta"]["kept_bytes"].as_u64(), doc["recipes"]["ta"]["budget"].as_u64()), (Some(4), Some(600), Some(1000)));
        assert_eq!(doc["passthrough"]["on"], true);
        assert!(doc["memory"]["peak_resident"].is_null(), "{doc}");
        let text = exposition(&Figures { stats: &stats, gauges: &gauges });
        assert!(!text.contains("part=\"peak_resident\""), "an unknown figure has no sample: {text}");
    }

    #[test]
    fn a_section_both_write_keeps_both_keys() {
        let mut doc = serde_json::json!({"passthrough": {"opens": 2}, "a": 1});
        let extra = serde_json::json!({"passthrough": {"on": true}, "b": 2});
        let (serde_json::Value::Object(doc_map), serde_json::Value::Object(extra)) = (&mut doc, extra) else { unreachable!() };
        merge(doc_map, extra);
        assert_eq!(doc, serde_json::json!({"passthrough": {"opens": 2, "on": true}, "a": 1, "b": 2}));
    }
}
