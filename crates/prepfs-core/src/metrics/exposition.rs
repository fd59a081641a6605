//! `.prepfs/metrics`: the Prometheus text exposition format 0.0.4 of the counters in
//! [`crate::stats`], the figures the caller gathers ([`Gauges`]) and the latency histograms.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use prepfs_cache::form::Form;
use crate::stats::{PipelineCounters, Stats};

use crate::stats::latency::{Outcome, PixelKind, Snapshot, BUCKETS_S};

/// What the exposition shows besides [`Stats`]: figures other parts own, gathered by the caller.
#[derive(Debug, Default)]
pub(crate) struct Gauges {
    /// Samples in the catalog.
    pub(crate) samples: u64,
    /// Per cache form (`encoded`, `decoded`, `augmented`, `disk`): bytes used and budget.
    pub(crate) cache: Vec<(&'static str, u64, u64)>,
    pub(crate) jobs_active: u64,
    pub(crate) passthrough_on: bool,
    /// Remote values dropped for failing their MAC (`cache.remote.forged`); `None`: no remote tier.
    pub(crate) remote_forged: Option<u64>,
    /// Each active job's figures.
    pub(crate) jobs: Vec<JobFigures>,
    /// The daemon's memory by part (`stats.json`'s `memory`).
    pub(crate) memory: Vec<(String, u64)>,
    /// The recipes' names, recipe `r`'s at `r - 1` (their series are labelled `recipe`).
    pub(crate) recipes: Vec<String>,
}

/// One job's series: `job` labels them with its name.
#[derive(Debug, Default)]
pub(crate) struct JobFigures {
    pub(crate) name: String,
    pub(crate) epoch: u64,
    pub(crate) served: u64,
    pub(crate) hits: u64,
    pub(crate) misses: u64,
}

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

    /// A single unlabelled sample with its HELP and TYPE.
    fn single(&mut self, name: &str, kind: &str, help: &str, value: impl std::fmt::Display) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
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

fn get(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

/// The mount's figures in the Prometheus text exposition format, version 0.0.4.
pub(crate) fn exposition(stats: &Stats, gauges: &Gauges) -> String {
    let mut w = Writer { out: String::with_capacity(16 * 1024) };
    w.single("prepfs_uptime_seconds", "gauge", "Seconds since the mount started.", stats.uptime().as_secs_f64());
    w.single("prepfs_samples", "gauge", "Samples in the scanned source.", gauges.samples);

    let views = [(Form::Encoded, &stats.encoded), (Form::Decoded, &stats.decoded), (Form::Augmented, &stats.augmented)];
    type Pick = fn(&crate::stats::ViewCounters) -> u64;
    let per_view: [(&str, &str, Pick); 6] = [
        ("prepfs_opens_total", "Opens of files, by view (top-level and jobs').", |v| get(&v.opens)),
        ("prepfs_open_hits_total", "Opens served from a cache form, by view (top-level and jobs').", |v| get(&v.hits)),
        ("prepfs_open_misses_total", "Opens that read the disk tier or the source, by view (top-level and jobs').", |v| get(&v.misses)),
        ("prepfs_served_bytes_total", "Bytes served, by view: the daemon's reads and the passthrough files' sizes.", |v| {
            get(&v.read_bytes) + get(&v.passthrough_bytes)
        }),
        ("prepfs_daemon_read_bytes_total", "Bytes the daemon's own reads served, by view.", |v| get(&v.read_bytes)),
        ("prepfs_passthrough_bytes_total", "Sizes of the files handed to the kernel to read (passthrough), at their opens, by view.", |v| {
            get(&v.passthrough_bytes)
        }),
    ];
    for (name, help, pick) in per_view {
        w.family(name, "counter", help);
        for (form, counters) in views {
            w.sample(name, &[("view", form.dir_name())], pick(counters));
        }
    }

    let totals: [(&str, &str, &AtomicU64); 8] = [
        ("prepfs_source_read_bytes_total", "Bytes read from the source dataset.", &stats.source_bytes_read),
        ("prepfs_source_reads_total", "Whole-file reads of the source.", &stats.source_reads),
        ("prepfs_source_errors_total", "Source files that vanished or failed to read.", &stats.source_errors),
        ("prepfs_source_changes_total", "Source files found changed since last seen.", &stats.source_changes),
        ("prepfs_decode_errors_total", "Samples that could not be decoded (per attempt).", &stats.decode_errors),
        ("prepfs_opens_refused_total", "Opens refused because open handles pinned max_open_bytes.", &stats.opens_refused),
        ("prepfs_refills_total", "Augmented outputs made by the background refill.", &stats.refills),
        ("prepfs_passthrough_opens_total", "Opens answered with a kernel passthrough backing file.", &stats.passthrough.opens),
    ];
    for (name, help, counter) in totals {
        w.single(name, "counter", help, get(counter));
    }

    w.family("prepfs_fuse_requests_total", "counter", "FUSE requests received, by kind.");
    for (kind, n) in stats.requests.by_kind() {
        w.sample("prepfs_fuse_requests_total", &[("kind", kind)], n);
    }

    w.single("prepfs_open_handles", "gauge", "File handles open now.", get(&stats.open_handles));
    w.single("prepfs_jobs_active", "gauge", "Jobs active now.", gauges.jobs_active);
    w.single("prepfs_passthrough_enabled", "gauge", "1 when kernel passthrough serves reads.", u8::from(gauges.passthrough_on));
    if let Some(forged) = gauges.remote_forged {
        w.single("prepfs_remote_forged_total", "counter", "Remote tier values dropped for failing their MAC (forged, or another secret's).", forged);
    }
    type JobPick = fn(&JobFigures) -> u64;
    let per_job: [(&str, &str, &str, JobPick); 4] = [
        ("prepfs_job_samples_served_total", "counter", "Samples a job's readers were served, by job.", |j| j.served),
        ("prepfs_job_hits_total", "counter", "A job's opens served from a cache form, by job.", |j| j.hits),
        ("prepfs_job_misses_total", "counter", "A job's opens that read the disk tier or the source, by job.", |j| j.misses),
        ("prepfs_job_epoch", "gauge", "The epoch a job is in (1 for its first), by job.", |j| j.epoch),
    ];
    for (name, kind, help, pick) in per_job {
        w.family(name, kind, help);
        for job in &gauges.jobs {
            w.sample(name, &[("job", &job.name)], pick(job));
        }
    }
    type RecipePick = fn(&PipelineCounters) -> f64;
    let per_recipe: [(&str, &str, RecipePick); 4] = [
        ("prepfs_recipe_opens_total", "Opens of a recipe's files (its top-level view and the jobs'), by recipe.", |c| c.opens() as f64),
        ("prepfs_recipe_served_kept_total", "Opens of a recipe's files served an output kept ahead (refill, prefetch, another job's open), by recipe.", |c| get(&c.served_kept) as f64),
        ("prepfs_recipe_outputs_made_total", "Outputs made through a recipe's pipeline, wherever, by recipe.", |c| get(&c.made) as f64),
        ("prepfs_recipe_pixel_seconds_total", "CPU seconds of the pixel work that made a recipe's outputs (a decode included where one was made), by recipe.", |c| get(&c.made_nanos) as f64 / 1e9),
    ];
    for (name, help, pick) in per_recipe {
        w.family(name, "counter", help);
        for (recipe, r) in gauges.recipes.iter().zip(1u8..) {
            w.sample(name, &[("recipe", recipe)], pick(stats.pipeline(r)));
        }
    }
    w.family("prepfs_memory_bytes", "gauge", "The daemon's memory by part (resident: the whole process, as ps shows it).");
    for (part, bytes) in &gauges.memory {
        w.sample("prepfs_memory_bytes", &[("part", part)], bytes);
    }
    w.family("prepfs_cache_used_bytes", "gauge", "Bytes held by each cache form (disk: the disk tier).");
    for &(form, used, _) in &gauges.cache {
        w.sample("prepfs_cache_used_bytes", &[("form", form)], used);
    }
    w.family("prepfs_cache_budget_bytes", "gauge", "Budget of each cache form (disk: the disk tier's size).");
    for &(form, _, budget) in &gauges.cache {
        w.sample("prepfs_cache_budget_bytes", &[("form", form)], budget);
    }

    w.family("prepfs_open_seconds", "histogram", "Time to open a file (wall time), by view and outcome.");
    for form in Form::ALL {
        for outcome in Outcome::ALL {
            let labels = [("view", form.dir_name()), ("outcome", outcome.name())];
            w.histogram("prepfs_open_seconds", &labels, &stats.latency.open_of(form, outcome).snapshot());
        }
    }
    w.family("prepfs_pixel_work_seconds", "histogram", "CPU time of each piece of pixel work, by kind.");
    for kind in PixelKind::ALL {
        w.histogram("prepfs_pixel_work_seconds", &[("kind", kind.name())], &stats.latency.pixel[kind as usize].snapshot());
    }
    w.out
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};
    use std::time::Duration;

    use super::*;

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
        stats
    }

    fn gauges() -> Gauges {
        Gauges { samples: 7, cache: vec![("augmented", 10, 100), ("disk", 0, 0)], jobs_active: 1, passthrough_on: true, remote_forged: Some(3), jobs: Vec::new(), memory: vec![("resident".into(), 5)], recipes: vec!["ta".into()] }
    }

    #[test]
    fn every_metric_has_help_and_type_before_its_samples() {
        let text = exposition(&busy_stats(), &gauges());
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
        assert!(text.contains("prepfs_fuse_requests_total{kind=\"open\"} 5\n"), "{text}");
        assert!(text.contains("prepfs_cache_budget_bytes{form=\"augmented\"} 100\n"), "{text}");
        assert!(text.contains("prepfs_recipe_opens_total{recipe=\"ta\"} 3\n"), "{text}");
        assert!(text.contains("prepfs_recipe_served_kept_total{recipe=\"ta\"} 2\n"), "{text}");
    }

    #[test]
    fn histogram_buckets_are_cumulative_and_end_with_inf_equal_to_count() {
        let text = exposition(&busy_stats(), &gauges());
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
}
