//! The Prometheus text exposition and its endpoint.
//!
//! Owns `.prepfs/metrics`, the Prometheus text exposition format 0.0.4 of the counters and the
//! latency histograms in [`crate::stats`] ([`exposition`]).
//!
//! [`http`] answers `GET /metrics` for `prepfs mount --metrics-addr`, on a worker thread that
//! `tasks::Workers` owns.
//!
//! One concern per file: `exposition.rs` (the text format), `http.rs` (the endpoint).

mod exposition;
pub mod http;

pub(crate) use exposition::{exposition, Gauges, JobFigures};
