//! The mount's side of preprocessing on other machines' CPUs (issue 52; the queue itself is
//! [`prepfs_cache::remote::work`]): what this mount asked `prepfs worker`s for and has not
//! received, the workers alive, whether to ask now (the placement), and the figures.
//!
//! What is asked is the filesystem's choice (`fs/remote_work.rs`: along what readers will want,
//! as the refill chooses); here is only the bookkeeping, so the rules read in one place:
//!
//! - an item is outstanding from the ask until its result arrives or [`LOST_AFTER`] passes (a
//!   worker died with it and none took it over in time: counted `lost`); each sample is asked at
//!   most once per pipeline at a time, and the refill passes over samples asked;
//! - a result whose item is not outstanding (made twice after a takeover, or lost before) is
//!   dropped (`dropped`): an output is admitted once, so never served twice;
//! - how many items may be outstanding: [`AHEAD_PER_THREAD`] per making thread of the workers
//!   alive, so each worker always has the next item in hand and the mount never holds more work
//!   in flight than the workers can make within a few items' time.
//!
//! The figures (`remote_work` in stats.json): `queued` items asked; `done` results that came
//! for an outstanding item; of those, `late` ones whose readers had been served the sample (made
//! here) before they came (kept for the next pass where there is room); `dropped` results not
//! kept (a duplicate, one refused for its MAC or its mount, its file changed since, no room);
//! `lost` items given up after [`LOST_AFTER`]; `queue_ms` the time from ask to take, `make_ms`
//! the worker's CPU time making it (percentiles of the last [`TIMES_KEPT`]).
//!
//! Placement (`placement:`): `local` never asks; `remote` asks for whatever the stock has room
//! for; `auto` (Pecan's AutoPlacement, in its one-machine form: remote workers only for the
//! deficit) asks while the mount cannot keep up by itself: its readers had outputs made at open
//! in the last second, or a stock of ready outputs is below half its room. With no worker alive,
//! or the server down, nothing is asked: the configuration costs nothing but speed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::config::Placement;
use prepfs_base::bitset::Bitset;
use prepfs_base::sync::{LockExt, Mutex};
use prepfs_cache::remote::work::{unix_ms, WorkItem, WorkQueue, WorkResult, WorkerBeat};
use prepfs_source::catalog::FileId;

/// An item not answered for this long is given up (`lost`); its sample may be asked again.
pub(crate) const LOST_AFTER: Duration = Duration::from_secs(30);
/// Items outstanding per making thread of the workers alive.
pub(crate) const AHEAD_PER_THREAD: usize = 32;
/// How often the workers' beats are read.
const WORKERS_READ_EVERY: Duration = Duration::from_secs(1);
/// Queue and making times kept for their percentiles (the most recent).
const TIMES_KEPT: usize = 4096;

/// An item asked and not yet answered.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Asked {
    pub(crate) id: FileId,
    pub(crate) pipeline: u8,
    /// The version the item names (size, mtime): a result for another is not admitted.
    pub(crate) len: u64,
    pub(crate) mtime_ns: i128,
    /// When it was asked: this clock, and the Unix time the item carries.
    at: Instant,
    queued_ms: u64,
}

/// Why the mount asks workers now, or does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    Ask(&'static str),
    Hold(&'static str),
}

/// The mount's bookkeeping: see the module documentation.
pub(crate) struct RemoteWork {
    queue: WorkQueue,
    placement: Placement,
    next_seq: AtomicU64,
    outstanding: Mutex<HashMap<u64, Asked>>,
    /// Per pipeline, the samples asked and not answered.
    asked: Vec<Bitset>,
    /// Per pipeline, where the next choice of samples begins.
    cursors: Vec<AtomicUsize>,
    workers: Mutex<(Vec<WorkerBeat>, Option<Instant>)>,
    decision: Mutex<Decision>,
    /// Outputs made at open (all pipelines) at the last decision, and when it was taken.
    made_at_open_seen: Mutex<(u64, Instant)>,
    queued: AtomicU64,
    done: AtomicU64,
    late: AtomicU64,
    dropped: AtomicU64,
    lost: AtomicU64,
    bytes_received: AtomicU64,
    /// Recent results' time in the queue (taken minus queued) and making time, in ms.
    times: Mutex<(Vec<f64>, Vec<f64>)>,
}

impl RemoteWork {
    pub(crate) fn new(queue: WorkQueue, placement: Placement, pipelines: u8, files: usize) -> RemoteWork {
        RemoteWork {
            queue,
            placement,
            next_seq: AtomicU64::new(0),
            outstanding: Mutex::new(HashMap::new()),
            asked: (0..pipelines).map(|_| Bitset::new(files)).collect(),
            cursors: (0..pipelines).map(|_| AtomicUsize::new(0)).collect(),
            workers: Mutex::new((Vec::new(), None)),
            decision: Mutex::new(Decision::Hold("no worker heard from yet")),
            made_at_open_seen: Mutex::new((0, Instant::now())),
            queued: AtomicU64::new(0),
            done: AtomicU64::new(0),
            late: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            bytes_received: AtomicU64::new(0),
            times: Mutex::new((Vec::new(), Vec::new())),
        }
    }

    /// The workers alive (their beats read at most once a second).
    pub(crate) fn workers(&self) -> Vec<WorkerBeat> {
        let fresh = {
            let guard = self.workers.lock_or_recover();
            guard.1.is_some_and(|at| at.elapsed() < WORKERS_READ_EVERY)
        };
        if !fresh {
            // Read outside the lock: a round trip.
            let beats = self.queue.workers();
            *self.workers.lock_or_recover() = (beats, Some(Instant::now()));
        }
        self.workers.lock_or_recover().0.clone()
    }

    /// Whether to ask now, given the placement, the workers alive, whether a reader has come
    /// (or the refill works from the mount on), the outputs made at open so far (all
    /// pipelines) and whether some stock is below half its room.
    pub(crate) fn decide(&self, readers_came: bool, made_at_open: u64, stock_low: bool) -> Decision {
        let threads: usize = self.workers().iter().map(|w| w.threads.max(1) as usize).sum();
        let missed = {
            let mut seen = self.made_at_open_seen.lock_or_recover();
            let missed = made_at_open > seen.0;
            if missed || seen.1.elapsed() >= Duration::from_secs(1) {
                *seen = (made_at_open, Instant::now());
            }
            missed
        };
        let decision = match self.placement {
            Placement::Local => Decision::Hold("placement: local"),
            _ if !self.queue.is_up() => Decision::Hold("the remote tier does not answer"),
            _ if threads == 0 => Decision::Hold("no worker alive"),
            _ if !readers_came => Decision::Hold("no reader yet"),
            Placement::Remote => Decision::Ask("placement: remote"),
            Placement::Auto if missed => Decision::Ask("readers had outputs made at open: this machine alone is short"),
            Placement::Auto if stock_low => Decision::Ask("a stock of ready outputs is below half its room"),
            Placement::Auto => Decision::Hold("the stock keeps up with the readers: no deficit"),
        };
        *self.decision.lock_or_recover() = decision;
        decision
    }

    /// Whether the mount's own refill should leave the cores to the job (`placement: remote`
    /// with a worker alive).
    pub(crate) fn refill_is_remote(&self) -> bool {
        self.placement == Placement::Remote && !self.workers.lock_or_recover().0.is_empty()
    }

    /// How many more items may be outstanding now.
    pub(crate) fn room(&self) -> usize {
        let threads: usize = self.workers.lock_or_recover().0.iter().map(|w| w.threads.max(1) as usize).sum();
        (threads * AHEAD_PER_THREAD).saturating_sub(self.outstanding.lock_or_recover().len())
    }

    /// Where pipeline `pipeline`'s next choice begins (and moves it on by `by`).
    pub(crate) fn cursor(&self, pipeline: u8, by: usize) -> usize {
        self.cursors.get(usize::from(pipeline)).map_or(0, |c| c.fetch_add(by, Ordering::Relaxed))
    }

    /// Whether `id` is asked in `pipeline` and not answered.
    pub(crate) fn is_asked(&self, pipeline: u8, id: FileId) -> bool {
        self.asked.get(usize::from(pipeline)).is_some_and(|b| b.get(id))
    }

    /// A new item's number and this mount's number.
    pub(crate) fn next_item(&self) -> (u64, u64) {
        (self.queue.mount(), self.next_seq.fetch_add(1, Ordering::Relaxed))
    }

    /// Queues `items` (each with what the mount remembers of it); returns how many went.
    pub(crate) fn ask(&self, items: Vec<WorkItem>) -> usize {
        let sent = self.queue.ask(&items);
        if sent < items.len() {
            // The server took none (a pipeline fails whole): nothing is outstanding.
            return 0;
        }
        let now = Instant::now();
        let mut outstanding = self.outstanding.lock_or_recover();
        for item in &items {
            if let Some(bits) = self.asked.get(usize::from(item.pipeline)) {
                bits.set(item.id);
            }
            outstanding.insert(item.seq, Asked { id: item.id, pipeline: item.pipeline, len: item.len, mtime_ns: item.mtime_ns, at: now, queued_ms: item.queued_ms });
        }
        drop(outstanding);
        self.queued.fetch_add(sent as u64, Ordering::Relaxed);
        sent
    }

    /// The results that arrived (waiting up to `wait` for a first), each with its item; results
    /// of items not outstanding, or refused (not under the secret, not for this mount), are
    /// dropped and counted. Items outstanding past [`LOST_AFTER`] are given up.
    pub(crate) fn receive(&self, wait: Duration) -> Vec<(Asked, WorkResult)> {
        let mut refused = 0;
        let results = self.queue.receive(wait, 64, &mut refused);
        self.dropped.fetch_add(refused, Ordering::Relaxed);
        let mut matched = Vec::with_capacity(results.len());
        {
            let mut outstanding = self.outstanding.lock_or_recover();
            for result in results {
                self.bytes_received.fetch_add(result.output().len() as u64, Ordering::Relaxed);
                match outstanding.remove(&result.seq) {
                    Some(asked) => {
                        if let Some(bits) = self.asked.get(usize::from(asked.pipeline)) {
                            bits.clear(asked.id);
                        }
                        matched.push((asked, result));
                    }
                    None => {
                        self.dropped.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            let before = outstanding.len();
            outstanding.retain(|_, asked| {
                let keep = asked.at.elapsed() < LOST_AFTER;
                if !keep {
                    if let Some(bits) = self.asked.get(usize::from(asked.pipeline)) {
                        bits.clear(asked.id);
                    }
                }
                keep
            });
            self.lost.fetch_add((before - outstanding.len()) as u64, Ordering::Relaxed);
        }
        if !matched.is_empty() {
            let mut times = self.times.lock_or_recover();
            for (asked, result) in &matched {
                // Two machines' clocks: as good as their agreement (NTP: a few ms).
                push_bounded(&mut times.0, result.taken_ms.saturating_sub(asked.queued_ms) as f64);
                push_bounded(&mut times.1, result.made_us as f64 / 1e3);
            }
        }
        matched
    }

    /// Counts a result that arrived for an outstanding item (`done`): `late` when its readers
    /// were served the sample (made here) before it came; `kept` whether it went into a stock
    /// (else `dropped`: its file changed, the stock holds one already or has no room).
    pub(crate) fn arrived(&self, late: bool, kept: bool) {
        self.done.fetch_add(1, Ordering::Relaxed);
        if late {
            self.late.fetch_add(1, Ordering::Relaxed);
        }
        if !kept {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The counters by state, for the metrics: queued, done, late, dropped, lost.
    pub(crate) fn counts(&self) -> [(&'static str, u64); 5] {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        [("queued", get(&self.queued)), ("done", get(&self.done)), ("late", get(&self.late)), ("dropped", get(&self.dropped)), ("lost", get(&self.lost))]
    }

    /// Bytes of outputs received.
    pub(crate) fn bytes_received(&self) -> u64 {
        self.bytes_received.load(Ordering::Relaxed)
    }

    /// The workers as last read, with seconds since each was heard from.
    pub(crate) fn workers_seen(&self) -> Vec<(WorkerBeat, f64)> {
        let now = unix_ms();
        self.workers.lock_or_recover().0.iter().map(|w| (w.clone(), now.saturating_sub(w.at_ms) as f64 / 1e3)).collect()
    }

    /// The `remote_work` section of stats.json.
    pub(crate) fn stats(&self) -> serde_json::Value {
        let decision = *self.decision.lock_or_recover();
        let (asking, why) = match decision {
            Decision::Ask(why) => (true, why),
            Decision::Hold(why) => (false, why),
        };
        let (queue_ms, make_ms) = {
            let times = self.times.lock_or_recover();
            (percentiles(&times.0), percentiles(&times.1))
        };
        let mut doc = json!({
            "placement": self.placement,
            "asking": asking,
            "why": why,
            "mount": format!("{:016x}", self.queue.mount()),
            "outstanding": self.outstanding.lock_or_recover().len(),
            "bytes_received": self.bytes_received(),
            "queue_ms": queue_ms,
            "make_ms": make_ms,
        });
        for (state, n) in self.counts() {
            doc[state] = n.into();
        }
        let workers: Vec<serde_json::Value> = self
            .workers_seen()
            .into_iter()
            .map(|(w, ago)| json!({"name": w.name, "host": w.host, "threads": w.threads, "rate": w.rate, "done": w.done, "last_seen_s": ago}))
            .collect();
        doc["workers_alive"] = workers.len().into();
        doc["workers"] = workers.into();
        doc
    }
}

fn push_bounded(v: &mut Vec<f64>, x: f64) {
    if v.len() >= TIMES_KEPT {
        v.remove(0);
    }
    v.push(x);
}

/// The median and 99th percentile of `v` (nearest rank); nulls where it is empty.
fn percentiles(v: &[f64]) -> serde_json::Value {
    if v.is_empty() {
        return json!({"p50": null, "p99": null, "n": 0});
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let at = |q: f64| s[((q * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1];
    json!({"p50": at(0.5), "p99": at(0.99), "n": s.len()})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentiles(&v), json!({"p50": 50.0, "p99": 99.0, "n": 100}));
        assert_eq!(percentiles(&[7.0]), json!({"p50": 7.0, "p99": 7.0, "n": 1}));
        assert_eq!(percentiles(&[])["p50"], serde_json::Value::Null);
    }
}
