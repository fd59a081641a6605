//! The mount's side of the cache plan: the models are prepfs-planner's pure functions; this
//! module measures their inputs and acts on their answers.
//!
//! - `calibrate.rs`: the inputs measured at mount (each form's pixel work on a probe of the
//!   set's samples, the machine's cores and memory), as [`prepfs_planner::PlanParams`].
//! - `controller.rs` ([`PlanController`]): the plan's control loop while serving: it re-measures
//!   what serving costs, re-plans the split with the models, and sets the cache's budgets.

pub(crate) mod calibrate;
mod controller;

pub(crate) use controller::{initial_split, PlanController};
