//! Declarative upgrade plans. The format, the gate's rules for plans
//! (`validate`), maintenance windows (`window`) and when a wave may start
//! (`schedule`) are pure and live in `lockstep_core::plan`, re-exported
//! here; this module adds the daemon's side: reading plans from Git and
//! carrying out decisions (`exec`), hop commits (`writeback`), `mode:
//! propose` (`propose`) and the views (`status`, `rehearse`).

pub mod exec;
pub mod propose;
pub mod rehearse;
pub mod status;
pub mod writeback;

pub use lockstep_core::plan::*;
