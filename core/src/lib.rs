//! lockstep's pure core: decisions as functions of plain values. No I/O
//! (not even reading a file: the shell's `file` does that and hands the
//! text in), no clock, no network, no Git and no cluster.
//!
//! The `lockstep` crate (the shell) reads Git, the cluster and the Git
//! host, calls these functions and carries out what they decide. This
//! crate may not depend on the shell's runtime crates (tokio, git2, kube,
//! k8s-openapi, reqwest, axum, hyper, notify); `tests/core_is_pure.rs` in
//! the top crate fails if one is added.

// Input never panics the library: errors name the file, line and rule.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod desired;
pub mod duration;
pub mod escape;
pub mod follow;
pub mod gate;
pub mod kind;
pub mod kube_reading;
pub mod live;
pub mod manifest;
pub mod plan;
pub mod policy;
pub mod preflight;
pub mod release;
pub mod rollout;
pub mod status;
pub mod verdict;
pub mod view;
pub mod yaml;
pub mod yaml_fast;
pub mod yaml_lines;
