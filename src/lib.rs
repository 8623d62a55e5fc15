//! lockstep: a GitOps release gate and reconciler for C5C3 (CobaltCore)
//! OpenStack-on-Kubernetes control planes.
//!
//! The core is pure and its own crate, `lockstep_core` ([`release`],
//! [`manifest`], [`desired`], [`gate`], [`rollout`], the plan format, ...),
//! re-exported here under the same paths; this crate is the shell: the
//! edges ([`git`], [`cluster`], [`forge`]) feed the core, [`history`] walks
//! commits and [`report`] prints what the gate decided.

// Input never panics the library: errors name the file, line and rule.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

// The pure core, under the paths the shell has always used.
pub use lockstep_core::{
    desired, duration, follow, gate, kind, live, manifest, policy, preflight, release, rollout,
    status, verdict, view, yaml,
};

pub mod allocator;
pub mod cluster;
pub mod config;
pub mod daemon;
pub mod demo;
pub mod escape;
pub mod file;
pub mod forge;
pub mod forward;
pub mod git;
pub mod history;
pub mod lease;
pub mod metrics;
pub mod names;
pub mod plan;
pub mod rehearse;
pub mod repair;
pub mod report;
pub mod secret;
pub mod server;
pub mod service;
pub mod sim;
pub mod source;
pub mod trust;
pub mod ui;
pub mod webhook;
