//! The engine's time. The daemon never reads a clock of its own: trackers,
//! stall deadlines, repair backoff, maintenance windows and soaks all ask the
//! [`Clock`] it was given, so the same engine runs a real cluster on the
//! system clock and the simulated one (`run` in sim mode, `rehearse`,
//! `rehearse --plan`) in virtual time.

use std::time::{Duration, Instant};

use jiff::Timestamp;

use crate::cluster::memory::MemoryCluster;

/// Where the engine's time comes from, and what happens between passes.
pub trait Clock: Send + Sync {
    /// Time since the engine started: what trackers, stall deadlines and
    /// repair backoff count in.
    fn now(&self) -> Duration;
    /// The calendar: maintenance windows and soaks are read against it.
    fn wall(&self) -> Timestamp;
    /// Called between two passes. `None`: time is real, and the loop waits
    /// for a poll, a webhook or a watch event. `Some(moved)`: time is
    /// virtual; the clock let the simulated world work until its next due
    /// event (or moved a minute on when only time can move the engine,
    /// `busy`: a soak, a window, a repair backoff) and says whether the world
    /// had anything to do.
    fn between_passes(&self, busy: bool) -> Option<bool>;
}

/// Real time: the process's monotonic clock and the system calendar.
pub struct SystemClock {
    started: Instant,
}

impl SystemClock {
    pub fn new() -> Self {
        Self {
            started: Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        self.started.elapsed()
    }
    fn wall(&self) -> Timestamp {
        Timestamp::now()
    }
    fn between_passes(&self, _busy: bool) -> Option<bool> {
        None
    }
}

/// Virtual time: the simulated operator's clock. Phases of minutes pass in
/// microseconds, and every pass happens exactly when something in the world
/// was due, so what the engine sees (a phase change, a completion, a failed
/// Job) it sees at the second it happened.
pub struct VirtualClock {
    world: MemoryCluster,
    /// The calendar time the world's zero stands for (a rehearsal's `--start`).
    base: Timestamp,
}

/// How far virtual time moves at most between two passes. A minute: the
/// repair backoff and the plans' soaks are whole minutes, so waiting in
/// minutes from the moment they started lands on them exactly.
const VIRTUAL_STEP: Duration = Duration::from_secs(60);

impl VirtualClock {
    /// The world's zero is now on the calendar.
    pub fn new(world: MemoryCluster) -> Self {
        Self::starting_at(world, Timestamp::now())
    }

    /// The world's zero is `base` on the calendar.
    pub fn starting_at(world: MemoryCluster, base: Timestamp) -> Self {
        Self { world, base }
    }
}

impl Clock for VirtualClock {
    fn now(&self) -> Duration {
        self.world.now()
    }
    fn wall(&self) -> Timestamp {
        jiff::SignedDuration::try_from(self.world.now())
            .ok()
            .and_then(|d| self.base.checked_add(d).ok())
            .unwrap_or(self.base)
    }
    fn between_passes(&self, busy: bool) -> Option<bool> {
        let moved = self.world.step(VIRTUAL_STEP).unwrap_or(false);
        if !moved && busy {
            self.world.advance(VIRTUAL_STEP);
        }
        Some(moved)
    }
}
