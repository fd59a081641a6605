//! Latency histograms and the Prometheus text exposition.
//!
//! Owns: the mount's latency histograms ([`Latencies`]: each open per view and outcome, each
//! piece of pixel work by kind), recorded in microseconds into HdrHistograms; their percentiles
//! for `stats.json`; and `.prepfs/metrics`, the Prometheus text exposition format 0.0.4 of the
//! counters in [`crate::stats`] and these histograms ([`exposition`]).
//!
//! [`http`] answers `GET /metrics` for `prepfs mount --metrics-addr`, on a worker thread that
//! `tasks::Workers` owns.
//!
//! Each histogram sits behind its own mutex, taken to record one value or to copy the figures
//! out: never across I/O, decoding or formatting.
//!
//! One concern per file: `latency.rs` (the histograms), `exposition.rs` (the text format),
//! `http.rs` (the endpoint).

mod exposition;
pub mod http;
mod latency;

pub(crate) use exposition::{exposition, Gauges, JobFigures};
pub(crate) use latency::Latencies;
pub(crate) use latency::{Outcome, PixelKind};
