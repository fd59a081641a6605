//! The metrics registry and what it writes.
//!
//! `defs.rs` declares every metric once (name, kind, help, unit, labels, its `stats.json` path,
//! whether `prepfs stats` prints it; `def.rs` says what a declaration is). `render.rs` writes
//! them as `.prepfs/metrics` (Prometheus's text exposition format 0.0.4) and as the registry's
//! part of `.prepfs/stats.json`; `prepfs stats` reads its figures at the registry's paths.
//!
//! [`http`] answers `GET /metrics` for `prepfs mount --metrics-addr`, on a worker thread that
//! `tasks::Workers` owns.

mod def;
pub mod defs;
pub mod http;
mod render;

pub use def::{Def, Json, Kind, Unit};
pub(crate) use def::{Figures, Gauges, JobFigures, RecipeStore, RemoteWorkFigures};
#[cfg(test)]
pub(crate) use def::Value;
pub(crate) use render::{exposition, json, merge};
