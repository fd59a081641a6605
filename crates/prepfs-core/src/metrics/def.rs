//! What a registered metric is ([`Def`]): its kind, help, unit, labels, where it shows
//! (`stats.json`'s path, the Prometheus family, whether `prepfs stats` prints it) and how its
//! series are read from the counters ([`Figures`]). The metrics themselves are declared in
//! `defs.rs`; `render.rs` writes them out.

use crate::stats::latency::Snapshot;
use crate::stats::Stats;

/// The Prometheus type of a metric (a figure only in `stats.json` has one too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// What a figure's number counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Things: opens, requests, samples.
    Count,
    Bytes,
    Seconds,
    Milliseconds,
    Nanoseconds,
    /// Histograms: microseconds in `stats.json` (count, p50, p90, p99, max), seconds in the
    /// exposition's buckets.
    Latency,
    /// A quotient of two counts (a rate, a mean).
    Ratio,
    /// On or off (`true`/`false` in `stats.json`, 1/0 in the exposition).
    Flag,
}

/// Where a metric shows in `stats.json`: a JSON pointer whose `{label}` segments take the
/// series' label values (an array on the way is entered at the element whose `name` is the
/// value: `jobs/active`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Json {
    /// Nowhere.
    None,
    /// Written there from the registry.
    At(&'static str),
    /// Written there by the part that owns that section (the cache's `cache`, the jobs'
    /// `jobs`): the registry only says where, and a test holds the two together.
    Owned(&'static str),
}

/// One series' value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Count(u64),
    Float(f64),
    Flag(bool),
    Hist(Snapshot),
    /// Not known (a figure the system does not give): `null` in `stats.json`, no sample.
    Absent,
}

impl From<u64> for Value {
    fn from(n: u64) -> Self {
        Value::Count(n)
    }
}

impl From<f64> for Value {
    fn from(x: f64) -> Self {
        Value::Float(x)
    }
}

impl From<Option<u64>> for Value {
    fn from(n: Option<u64>) -> Self {
        n.map_or(Value::Absent, Value::Count)
    }
}

/// `n / d`, or 0 with nothing to divide.
pub(crate) fn ratio(n: u64, d: u64) -> f64 {
    if d == 0 {
        0.0
    } else {
        n as f64 / d as f64
    }
}

/// What the metrics are read from: the counters, and the figures other parts own that the
/// caller gathers (cache, jobs, memory, catalog).
#[derive(Debug)]
pub(crate) struct Figures<'a> {
    pub(crate) stats: &'a Stats,
    pub(crate) gauges: &'a Gauges,
}

/// The figures [`Stats`] does not hold, gathered by the caller (`fs/control.rs`).
#[derive(Debug, Default)]
pub(crate) struct Gauges {
    /// Samples in the catalog.
    pub(crate) samples: u64,
    /// Per cache form (`encoded`, `decoded`, `augmented`, `disk`): bytes used and budget.
    pub(crate) cache: Vec<(&'static str, u64, u64)>,
    pub(crate) passthrough_on: bool,
    /// Remote values dropped for failing their MAC (`cache.remote.forged`); `None`: no remote tier.
    pub(crate) remote_forged: Option<u64>,
    /// Each active job's figures.
    pub(crate) jobs: Vec<JobFigures>,
    /// The daemon's memory by part (`None`: the system does not say).
    pub(crate) memory: Vec<(&'static str, Option<u64>)>,
    /// The recipes' names, recipe `r`'s at `r - 1` (their series are labelled `recipe`).
    pub(crate) recipes: Vec<String>,
    /// What each recipe's store of kept outputs holds, at the same places as `recipes` (`None`:
    /// no store).
    pub(crate) recipe_stores: Vec<Option<RecipeStore>>,
    /// What this mount asked `prepfs worker`s for (`remote_work` in stats.json, which writes it
    /// whole); `None`: no remote tier.
    pub(crate) remote_work: Option<RemoteWorkFigures>,
    /// The process serving now and the restarts before it (`server` in stats.json).
    pub(crate) server: crate::stats::ServerLife,
}

/// A recipe's store of kept outputs: how many, their bytes, and its share of the augmented budget.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct RecipeStore {
    pub(crate) outputs: u64,
    pub(crate) bytes: u64,
    pub(crate) budget: u64,
}

/// The remote work's series: items by state, bytes received, and each worker alive.
#[derive(Debug, Default)]
pub(crate) struct RemoteWorkFigures {
    pub(crate) items: Vec<(&'static str, u64)>,
    pub(crate) bytes: u64,
    /// Each worker: name, host, outputs a second, seconds since its beat.
    pub(crate) workers: Vec<(String, String, f64, f64)>,
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

/// Where a metric's series go as they are read: each with its label values, in [`Def::labels`]'
/// order.
pub(crate) type Sink<'s> = dyn FnMut(&[&str], Value) + 's;

/// How a metric's series are read.
pub(crate) type Read = fn(&Figures<'_>, &mut Sink<'_>);

/// One registered metric: everything said about it, said once.
#[derive(Debug, Clone, Copy)]
pub struct Def {
    /// Its Prometheus family name; empty: not in the exposition.
    pub prom: &'static str,
    pub kind: Kind,
    pub help: &'static str,
    pub unit: Unit,
    /// Its labels' names, in order.
    pub labels: &'static [&'static str],
    pub json: Json,
    /// Whether `prepfs stats`' summary prints it.
    pub summary: bool,
    pub(crate) read: Read,
}

impl Def {
    const fn new(prom: &'static str, kind: Kind, help: &'static str) -> Def {
        Def { prom, kind, help, unit: Unit::Count, labels: &[], json: Json::None, summary: false, read: |_, _| {} }
    }

    /// A counter (`prom` empty: in `stats.json` only).
    pub(crate) const fn counter(prom: &'static str, help: &'static str) -> Def {
        Def::new(prom, Kind::Counter, help)
    }

    /// A gauge (`prom` empty: in `stats.json` only).
    pub(crate) const fn gauge(prom: &'static str, help: &'static str) -> Def {
        Def::new(prom, Kind::Gauge, help)
    }

    /// A latency histogram.
    pub(crate) const fn histogram(prom: &'static str, help: &'static str) -> Def {
        Def { unit: Unit::Latency, ..Def::new(prom, Kind::Histogram, help) }
    }

    pub(crate) const fn unit(self, unit: Unit) -> Def {
        Def { unit, ..self }
    }

    pub(crate) const fn labels(self, labels: &'static [&'static str]) -> Def {
        Def { labels, ..self }
    }

    pub(crate) const fn at(self, pointer: &'static str) -> Def {
        Def { json: Json::At(pointer), ..self }
    }

    pub(crate) const fn owned_at(self, pointer: &'static str) -> Def {
        Def { json: Json::Owned(pointer), ..self }
    }

    pub(crate) const fn in_summary(self) -> Def {
        Def { summary: true, ..self }
    }

    pub(crate) const fn read(self, read: Read) -> Def {
        Def { read, ..self }
    }

    /// Its Prometheus family name, if it has one.
    pub fn prom_name(&self) -> Option<&'static str> {
        (!self.prom.is_empty()).then_some(self.prom)
    }

    /// Its `stats.json` pointer template, wherever written.
    pub fn json_template(&self) -> Option<&'static str> {
        match self.json {
            Json::None => None,
            Json::At(p) | Json::Owned(p) => Some(p),
        }
    }

    /// Its series' `stats.json` pointer for these label values (in [`Def::labels`]' order).
    pub fn pointer(&self, values: &[&str]) -> String {
        let template = self.json_template().unwrap_or("");
        let mut out = String::with_capacity(template.len() + 16);
        for segment in template.split('/').skip(1) {
            out.push('/');
            let value = segment
                .strip_prefix('{')
                .and_then(|s| s.strip_suffix('}'))
                .and_then(|label| self.labels.iter().position(|l| *l == label))
                .and_then(|i| values.get(i));
            match value {
                // RFC 6901: `~` and `/` in a key are escaped.
                Some(v) => out.push_str(&v.replace('~', "~0").replace('/', "~1")),
                None => out.push_str(segment),
            }
        }
        out
    }

    /// The value of its series with these label values in `doc` (an array on the way entered at
    /// the element whose `name` is the value).
    pub fn lookup<'d>(&self, doc: &'d serde_json::Value, values: &[&str]) -> Option<&'d serde_json::Value> {
        self.pointer(values).split('/').skip(1).try_fold(doc, |node, key| match node {
            serde_json::Value::Array(items) => items.iter().find(|i| i["name"] == key),
            _ => node.get(key.replace("~1", "/").replace("~0", "~")),
        })
    }

    /// Every pointer in `doc` that is one of this metric's series (its template with any key,
    /// or any array element's `name`, at the label segments).
    pub fn series_in(&self, doc: &serde_json::Value) -> Vec<String> {
        fn walk(node: &serde_json::Value, rest: &[&str], at: String, out: &mut Vec<String>) {
            let Some((segment, rest)) = rest.split_first() else {
                out.push(at);
                return;
            };
            let label = segment.starts_with('{') && segment.ends_with('}');
            match node {
                serde_json::Value::Object(map) if label => {
                    for (k, v) in map {
                        walk(v, rest, format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")), out);
                    }
                }
                serde_json::Value::Object(map) => {
                    if let Some(v) = map.get(*segment) {
                        walk(v, rest, format!("{at}/{segment}"), out);
                    }
                }
                serde_json::Value::Array(items) if label => {
                    for (i, v) in items.iter().enumerate() {
                        walk(v, rest, format!("{at}/{i}"), out);
                    }
                }
                _ => {}
            }
        }
        let mut out = Vec::new();
        if let Some(template) = self.json_template() {
            let segments: Vec<&str> = template.split('/').skip(1).collect();
            walk(doc, &segments, String::new(), &mut out);
        }
        out
    }

    /// Its series now: label values and value.
    pub(crate) fn series(&self, figures: &Figures<'_>) -> Vec<(Vec<String>, Value)> {
        let mut out = Vec::new();
        (self.read)(figures, &mut |labels, value| out.push((labels.iter().map(|l| (*l).to_owned()).collect(), value)));
        out
    }
}
