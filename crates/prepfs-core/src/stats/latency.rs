//! The mount's latency histograms ([`Latencies`]: each open per view and outcome, each piece of
//! pixel work by kind), recorded in microseconds into HdrHistograms, and their percentiles for
//! `stats.json`. Each histogram sits behind its own mutex, taken to record one value or to copy
//! the figures out: never across I/O, decoding or formatting.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hdrhistogram::Histogram;

use prepfs_cache::form::Form;
use prepfs_base::sync::{LockExt, Mutex};

/// How an open ended: served from a cache form (or another open's handle), made from a source
/// or disk read, or failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Hit,
    Miss,
    Error,
}

impl Outcome {
    pub(crate) const ALL: [Outcome; 3] = [Outcome::Hit, Outcome::Miss, Outcome::Error];

    /// A served open: a miss when its bytes came from the disk tier or the source.
    pub(crate) fn served(miss: bool) -> Outcome {
        if miss {
            Outcome::Miss
        } else {
            Outcome::Hit
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Outcome::Hit => "hit",
            Outcome::Miss => "miss",
            Outcome::Error => "error",
        }
    }
}

/// Kinds of pixel work, as `pixels::work` times them (CPU time of the working thread).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PixelKind {
    /// A full decode.
    Decode,
    /// Decode and augment from encoded bytes.
    DecodeAugment,
    /// Augment from decoded pixels.
    Augment,
}

impl PixelKind {
    pub(crate) const ALL: [PixelKind; 3] = [PixelKind::Decode, PixelKind::DecodeAugment, PixelKind::Augment];

    pub(crate) fn name(self) -> &'static str {
        match self {
            PixelKind::Decode => "decode",
            PixelKind::DecodeAugment => "decode_augment",
            PixelKind::Augment => "augment",
        }
    }
}

/// The histograms' upper bound: an hour, in microseconds (longer values are recorded as an hour).
const MAX_US: u64 = 3_600_000_000;

/// The exposition's bucket bounds, in seconds: 100 µs to 10 s.
pub(crate) const BUCKETS_S: [f64; 16] =
    [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// One latency histogram, in microseconds, with the exact sum beside it.
#[derive(Debug)]
pub(crate) struct Latency {
    recorded: Mutex<Histogram<u64>>,
    sum_us: AtomicU64,
}

/// A histogram's figures, copied out under its lock.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Snapshot {
    pub(crate) count: u64,
    pub(crate) sum_us: u64,
    pub(crate) p50_us: u64,
    pub(crate) p90_us: u64,
    pub(crate) p99_us: u64,
    pub(crate) max_us: u64,
    /// Values at most each bound of [`BUCKETS_S`], cumulative.
    pub(crate) buckets: [u64; BUCKETS_S.len()],
}

impl Default for Latency {
    fn default() -> Self {
        // Two significant digits (1% precision) keep each histogram near 30 KiB. The bounds are
        // constants within hdrhistogram's limits: this cannot fail.
        let histogram = Histogram::new_with_bounds(1, MAX_US, 2).expect("constant histogram bounds are valid");
        Latency { recorded: Mutex::new(histogram), sum_us: AtomicU64::new(0) }
    }
}

impl Latency {
    /// Records one duration.
    pub(crate) fn record(&self, took: Duration) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX).clamp(1, MAX_US);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
        self.recorded.lock_or_recover().saturating_record(us);
    }

    /// The figures now.
    pub(crate) fn snapshot(&self) -> Snapshot {
        let h = self.recorded.lock_or_recover();
        let mut snap = Snapshot {
            count: h.len(),
            sum_us: self.sum_us.load(Ordering::Relaxed),
            p50_us: h.value_at_quantile(0.5),
            p90_us: h.value_at_quantile(0.9),
            p99_us: h.value_at_quantile(0.99),
            max_us: h.max(),
            buckets: [0; BUCKETS_S.len()],
        };
        for v in h.iter_recorded() {
            let us = h.median_equivalent(v.value_iterated_to());
            let first = BUCKETS_S.iter().position(|&le| us as f64 <= le * 1e6).unwrap_or(BUCKETS_S.len());
            for b in &mut snap.buckets[first..] {
                *b += v.count_at_value();
            }
        }
        snap
    }
}

/// The mount's latency histograms.
#[derive(Debug, Default)]
pub(crate) struct Latencies {
    /// Opens of files, by view (`Form::index`) and outcome.
    pub(crate) open: [[Latency; 3]; 3],
    /// Pixel work by kind.
    pub(crate) pixel: [Latency; 3],
}

impl Latencies {
    /// Records an open of a file in `form`'s view (top-level or a job's).
    pub(crate) fn record_open(&self, form: Form, outcome: Outcome, took: Duration) {
        self.open_of(form, outcome).record(took);
    }

    /// Records one piece of pixel work.
    pub(crate) fn record_pixel(&self, kind: PixelKind, took: Duration) {
        self.pixel[kind as usize].record(took);
    }

    pub(crate) fn open_of(&self, form: Form, outcome: Outcome) -> &Latency {
        &self.open[form.index() as usize][outcome as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_come_from_the_recorded_values() {
        let latency = Latency::default();
        for us in 1..=1000 {
            latency.record(Duration::from_micros(us));
        }
        let snap = latency.snapshot();
        assert_eq!(snap.count, 1000);
        assert_eq!(snap.sum_us, 500_500);
        let near = |v: u64, want: u64| v.abs_diff(want) * 100 <= want * 2;
        assert!(near(snap.p50_us, 500) && near(snap.p90_us, 900) && near(snap.p99_us, 990), "{snap:?}");
        assert!(near(snap.max_us, 1000), "{snap:?}");
    }
}
