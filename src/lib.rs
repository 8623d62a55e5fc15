//! lockstep: a GitOps release gate and reconciler for C5C3 (CobaltCore)
//! OpenStack-on-Kubernetes control planes.
//!
//! The core is pure ([`release`], [`manifest`], [`desired`], [`gate`]); the
//! edges ([`git`], reading live state) feed it; [`history`] walks commits and
//! [`report`] prints what the gate decided.

// Input never panics the library: errors name the file, line and rule.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod cluster;
pub mod config;
pub mod daemon;
pub mod demo;
pub mod desired;
pub mod escape;
pub mod follow;
pub mod forge;
pub mod forward;
pub mod gate;
pub mod git;
pub mod history;
pub mod kind;
pub mod lease;
pub mod live;
pub mod manifest;
pub mod metrics;
pub mod plan;
pub mod rehearse;
pub mod release;
pub mod repair;
pub mod report;
pub mod rollout;
pub mod secret;
pub mod server;
pub mod service;
pub mod sim;
pub mod source;
pub mod webhook;
pub mod yaml;
