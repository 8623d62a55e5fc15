//! What the engine did, in the order it did it, on its own clock: applies,
//! phases seen, completions, repairs, reports, plan decisions and plan
//! commits. Kept only when `Options::journal` asks (rehearsals render it);
//! no decision ever reads it, so it is not state a restart would need.

use std::time::Duration;

use crate::kind::Key;

/// One thing the engine did, and when (the engine's clock: virtual time in
/// a simulation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub at: Duration,
    pub what: Did,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Did {
    /// A step of a unit applied. `reassert`: the same step again, after an
    /// edit outside Git parked a child or moved the unit off it (a repair,
    /// not a new hop).
    Applied {
        unit: Key,
        sha: String,
        from: Option<String>,
        to: Option<String>,
        reassert: bool,
    },
    /// A followed object's upgrade phase, as the engine saw it change
    /// (`None`: no phase any more).
    Phase { object: Key, phase: Option<String> },
    /// A followed object reached its step's target.
    Complete { object: Key },
    /// Every followed object of the unit's step `sha` is complete: the
    /// engine moved past it.
    HopComplete { unit: Key, sha: String },
    /// A followed object seen failed (a Job try that failed, a condition
    /// the operator will not leave by itself), once per failure.
    Failed { object: Key, reason: String },
    /// A forward repair made on an object.
    Repaired { object: Key, message: String },
    /// Something only a person can fix, first seen.
    NeedsPerson {
        unit: Key,
        object: Key,
        message: String,
    },
    /// A plan's decision, when it changed.
    PlanDecision { plan: String, description: String },
    /// A plan wave's hop commit, written.
    PlanCommit { sha: String },
}
