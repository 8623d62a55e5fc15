//! Following an applied hop through the operator's phase machine: a pure
//! tracker from observations of the child (never the plane: it does not
//! aggregate progress, `docs/operators.md` §4.7) to progress, completion
//! (§9.1), failure (§9.2) and stall (no progress within a per-phase
//! deadline, §9.3).

use std::time::Duration;

use crate::kind::Kind;
use crate::live::LiveStatus;

/// One look at a child object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observation {
    pub kind: Kind,
    pub generation: i64,
    pub status: LiveStatus,
    /// Nova and Cinder: whether the post-contract second roll has finished
    /// (every annotated Deployment rolled to the installed release).
    pub second_roll_done: bool,
    /// The image reference the object's spec names (what was applied to
    /// it, by lockstep or by its ControlPlane's projection).
    pub image_reference: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Applied; the operator has not picked it up yet.
    Waiting,
    /// In the phase machine: `Expanding (1/4)` … `Contracting (4/4)`.
    Phase {
        phase: String,
        step: u8,
    },
    /// Contract done; Nova/Cinder roll their workers a second time, and the
    /// steady db-sync re-runs on the new image.
    Settling {
        what: &'static str,
    },
    Complete,
    /// A condition the operator will not leave by itself (`docs/operators.md`
    /// §9.2), with its message.
    Failed {
        reason: String,
        message: String,
    },
    /// No progress within the phase's deadline. `over` is that deadline,
    /// not the time waited, so the report (and a status's description)
    /// stays the same from one pass to the next instead of being posted
    /// again every pass.
    Stalled {
        phase: String,
        over: Duration,
    },
}

impl Progress {
    pub fn describe(&self) -> String {
        match self {
            Progress::Waiting => "waiting for the operator".into(),
            Progress::Phase { phase, step } => format!("{phase} ({step}/4)"),
            Progress::Settling { what } => format!("settling: {what}"),
            Progress::Complete => "complete".into(),
            Progress::Failed { reason, message } => format!("{reason}: {message}"),
            Progress::Stalled { phase, over } if phase == "Waiting" => {
                format!("stalled: not picked up for over {}", short(*over))
            }
            Progress::Stalled { phase, over } => {
                format!("stalled in {phase}: no progress for over {}", short(*over))
            }
        }
    }

    pub fn is_terminal(&self) -> bool {
        matches!(self, Progress::Complete | Progress::Failed { .. })
    }
}

/// A deadline as people write it: `20m`, `1h`, `90s`.
pub fn short(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0 => format!("{}ms", d.as_millis()),
        s if s % 3600 == 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// Deadlines per phase before a hop is called stalled.
#[derive(Clone, Debug)]
pub struct Deadlines {
    pub expanding: Duration,
    pub migrating: Duration,
    pub rolling: Duration,
    pub contracting: Duration,
    pub other: Duration,
}

impl Default for Deadlines {
    fn default() -> Self {
        Self {
            expanding: Duration::from_secs(30 * 60),
            migrating: Duration::from_secs(60 * 60),
            rolling: Duration::from_secs(30 * 60),
            contracting: Duration::from_secs(60 * 60),
            other: Duration::from_secs(20 * 60),
        }
    }
}

impl Deadlines {
    fn for_phase(&self, phase: &str) -> Duration {
        match phase {
            "Expanding" => self.expanding,
            "Migrating" => self.migrating,
            "RollingUpdate" => self.rolling,
            "Contracting" => self.contracting,
            _ => self.other,
        }
    }
}

/// The reasons on `DatabaseReady` that mean "stopped, will not move on its own".
pub const FAILURE_REASONS: [&str; 10] = [
    "ExpandFailed",
    "MigrateFailed",
    "ContractFailed",
    "DBSyncFailed",
    "SchemaDriftDetected",
    "UpgradePathInvalid",
    "DowngradeNotSupported",
    "VersionParseError",
    "UpgradeTargetChanged",
    "ImageReleaseMismatch",
];

/// Tracks one hop (`from → to`) of one object. Feed it observations with
/// the time they were made; it remembers when progress last moved.
#[derive(Clone, Debug)]
pub struct Tracker {
    pub to: String,
    /// The image the hop gives the object, when known ([`assess_hop`]).
    pub image: Option<String>,
    deadlines: Deadlines,
    last: Option<(String, Duration)>,
}

impl Tracker {
    pub fn new(to: impl Into<String>, deadlines: Deadlines) -> Self {
        Self {
            to: to.into(),
            image: None,
            deadlines,
            last: None,
        }
    }

    /// The hop's image: until the object's spec names it, the hop has not
    /// reached the object ([`assess_hop`]).
    pub fn with_image(self, image: Option<String>) -> Self {
        Self { image, ..self }
    }

    /// `now` is any monotonic clock reading (virtual in simulations).
    pub fn observe(&mut self, obs: &Observation, now: Duration) -> Progress {
        self.observe_gated(obs, now, false)
    }

    /// [`observe`](Self::observe) of a ControlPlane's child the plane holds
    /// back (`gated`): its Keystone, or a Nova's Placement, is not done with
    /// the same hop yet, and the plane projects nothing onto a child whose
    /// gate is not Ready (`docs/operators.md` §4.4). While
    /// it waits for that projection its stall clock does not run; it
    /// starts when the gate opens. Without this, a Horizon waiting out its
    /// Keystone's migration was reported stalled on an upgrade going well.
    pub fn observe_gated(&mut self, obs: &Observation, now: Duration, gated: bool) -> Progress {
        let p = assess_hop(&self.to, self.image.as_deref(), obs);
        if gated && p == Progress::Waiting {
            self.last = Some((format!("{p:?}"), now));
            return p;
        }
        let label = match &p {
            Progress::Phase { phase, .. } => phase.clone(),
            Progress::Settling { what } => (*what).to_owned(),
            other => format!("{other:?}"),
        };
        match &self.last {
            Some((l, since)) if *l == label => {
                let waited = now.saturating_sub(*since);
                let deadline = self.deadlines.for_phase(&label);
                if !p.is_terminal() && waited > deadline {
                    return Progress::Stalled {
                        phase: label,
                        over: deadline,
                    };
                }
            }
            _ => self.last = Some((label, now)),
        }
        p
    }
}

/// [`assess`] of a hop whose image is `image`: an object whose spec names
/// another image has not been given the hop yet (a ControlPlane's child
/// before the plane projects it again), so it waits, whatever its status
/// says. Without this, a Horizon or a Keystone pinned by digest (no release
/// to wait for) read as complete while still Ready on the old image.
pub fn assess_hop(to: &str, image: Option<&str>, obs: &Observation) -> Progress {
    let p = assess(to, obs);
    match (image, &p) {
        (_, Progress::Failed { .. }) => p,
        (Some(image), _) if !obs.image_reference.is_empty() && obs.image_reference != image => {
            Progress::Waiting
        }
        _ => p,
    }
}

/// Progress from one observation, without history.
pub fn assess(to: &str, obs: &Observation) -> Progress {
    let s = &obs.status;
    let db = s.condition("DatabaseReady");
    // A failure set for an older generation is what the operator said of
    // the spec before the one it holds now (an abort, a re-asserted plane
    // just applied): it has not looked at this one yet.
    if let Some(c) = db
        && c.status == "False"
        && FAILURE_REASONS.contains(&c.reason.as_str())
        && c.observed_generation.is_none_or(|g| g == obs.generation)
    {
        return Progress::Failed {
            reason: c.reason.clone(),
            message: c.message.clone(),
        };
    }
    if let Some(phase) = s.phase() {
        let step = match phase {
            "Expanding" => 1,
            "Migrating" => 2,
            "RollingUpdate" => 3,
            "Contracting" => 4,
            _ => 0,
        };
        return Progress::Phase {
            phase: phase.to_owned(),
            step,
        };
    }
    // Horizon (no release tracking) and a digest-pinned Keystone (frozen
    // release) are done when Ready at this generation: their only work is a roll.
    let tracks_release = obs.kind != Kind::Horizon && !to.is_empty();
    let installed = if tracks_release {
        s.installed().unwrap_or_default()
    } else {
        to
    };
    let target_clear = s.in_flight_target().is_none();
    // Keystone's installedRelease is the raw tag (`2026.1-p1`); compare releases.
    let installed_base = installed.split('-').next().unwrap_or_default();
    let to_base = to.split('-').next().unwrap_or_default();
    if !target_clear || installed_base != to_base {
        return Progress::Waiting;
    }
    if matches!(obs.kind, Kind::Placement | Kind::Barbican | Kind::Neutron)
        && s.installed_image
            .as_deref()
            .is_some_and(|i| i != obs.image_reference)
    {
        return Progress::Settling {
            what: "db sync on the new image",
        };
    }
    let ready = s.condition("Ready");
    let ready_now = ready.is_some_and(|r| {
        r.status == "True" && r.observed_generation.is_none_or(|g| g == obs.generation)
    });
    if matches!(obs.kind, Kind::Nova | Kind::Cinder) && !obs.second_roll_done {
        return Progress::Settling {
            what: "second roll of the workers",
        };
    }
    if !ready_now {
        return Progress::Settling {
            what: "waiting for Ready",
        };
    }
    Progress::Complete
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::Condition;

    fn obs(kind: Kind, installed: &str, target: &str, phase: &str, ready: bool) -> Observation {
        Observation {
            kind,
            generation: 3,
            status: LiveStatus {
                installed_release: Some(installed.into()),
                target_release: Some(target.into()),
                upgrade_phase: Some(phase.into()),
                installed_image: None,
                generation: Some(3),
                conditions: vec![Condition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    reason: String::new(),
                    message: String::new(),
                    observed_generation: Some(3),
                }],
                projected_by: None,
                repair_record: None,
                applied: None,
            },
            second_roll_done: true,
            image_reference: "ghcr.io/c5c3/glance:2026.2".into(),
        }
    }

    #[test]
    fn phases_then_completion_on_the_child() {
        let p = assess(
            "2026.2",
            &obs(Kind::Glance, "2026.1", "2026.2", "Migrating", false),
        );
        assert_eq!(p.describe(), "Migrating (2/4)");
        let p = assess("2026.2", &obs(Kind::Glance, "2026.1", "2026.2", "", false));
        assert_eq!(p, Progress::Waiting, "target still set");
        let p = assess("2026.2", &obs(Kind::Glance, "2026.2", "", "", false));
        assert!(matches!(p, Progress::Settling { .. }), "not Ready yet");
        let p = assess("2026.2", &obs(Kind::Glance, "2026.2", "", "", true));
        assert_eq!(p, Progress::Complete);
    }

    #[test]
    fn horizon_completes_on_ready() {
        let mut o = obs(Kind::Horizon, "", "", "", true);
        o.status.installed_release = None;
        o.status.target_release = None;
        assert_eq!(assess("2026.2", &o), Progress::Complete);
        o.status.conditions[0].status = "False".into();
        assert!(matches!(assess("2026.2", &o), Progress::Settling { .. }));
    }

    #[test]
    fn ready_must_be_for_this_generation() {
        let mut o = obs(Kind::Glance, "2026.2", "", "", true);
        o.status.conditions[0].observed_generation = Some(2);
        assert!(matches!(assess("2026.2", &o), Progress::Settling { .. }));
    }

    #[test]
    fn nova_waits_for_its_second_roll() {
        let mut o = obs(Kind::Nova, "2026.2", "", "", true);
        o.second_roll_done = false;
        assert_eq!(
            assess("2026.2", &o),
            Progress::Settling {
                what: "second roll of the workers"
            }
        );
    }

    #[test]
    fn failures_carry_the_operators_message() {
        let mut o = obs(Kind::Nova, "2026.1", "2026.2", "Expanding", false);
        o.status.conditions.push(Condition {
            type_: "DatabaseReady".into(),
            status: "False".into(),
            reason: "ExpandFailed".into(),
            message: "Expand job nova-db-expand failed: job has permanently failed: compute/nova-db-expand (upgrade check exit code 2)".into(),
            observed_generation: Some(3),
        });
        match assess("2026.2", &o) {
            Progress::Failed { reason, message } => {
                assert_eq!(reason, "ExpandFailed");
                assert!(message.contains("exit code 2"));
            }
            other => panic!("{other:?}"),
        }
        // Set for the spec before this one (an abort just applied, a plane
        // re-asserted): the operator has not looked at this spec yet.
        o.generation = 4;
        o.status.generation = Some(4);
        assert_eq!(
            assess("2026.2", &o).describe(),
            "Expanding (1/4)",
            "a failure of generation 3 read at generation 4"
        );
        // Without a generation it is taken as current, as Ready is.
        o.status.conditions[1].observed_generation = None;
        assert!(matches!(assess("2026.2", &o), Progress::Failed { .. }));
    }

    /// A Horizon (no release) or a Keystone pinned by digest, Ready on the
    /// image it had before the hop: its ControlPlane has not projected the
    /// hop onto it yet. It waits (and stalls, then is reported, if the
    /// plane never does), never reads as complete.
    #[test]
    fn a_child_still_on_the_old_image_waits_for_the_hop() {
        let old = "ghcr.io/c5c3/horizon:2026.1";
        let new = "ghcr.io/c5c3/horizon:2026.2";
        let mut o = obs(Kind::Horizon, "", "", "", true);
        o.status.installed_release = None;
        o.status.target_release = None;
        o.status.upgrade_phase = None;
        o.image_reference = old.into();
        // The old rule, blind to the image.
        assert_eq!(assess("", &o), Progress::Complete);
        assert_eq!(assess_hop("", Some(new), &o), Progress::Waiting);
        let mut t = Tracker::new(
            "",
            Deadlines {
                other: Duration::from_secs(60),
                ..Deadlines::default()
            },
        )
        .with_image(Some(new.into()));
        assert_eq!(t.observe(&o, Duration::from_secs(0)), Progress::Waiting);
        assert!(matches!(
            t.observe(&o, Duration::from_secs(61)),
            Progress::Stalled { .. }
        ));
        // Projected at last: complete once Ready at its generation.
        o.image_reference = new.into();
        assert_eq!(t.observe(&o, Duration::from_secs(62)), Progress::Complete);
        // A failure on the old spec is still a failure.
        o.image_reference = old.into();
        o.status.conditions.push(crate::live::Condition {
            type_: "DatabaseReady".into(),
            status: "False".into(),
            reason: "UpgradeTargetChanged".into(),
            message: String::new(),
            observed_generation: Some(3),
        });
        assert!(matches!(
            assess_hop("", Some(new), &o),
            Progress::Failed { .. }
        ));
    }

    /// A child its plane holds behind the Keystone gate waits without a
    /// stall clock; the clock starts when the gate opens, and the stall
    /// reads the same on every pass (its deadline, not the time waited).
    #[test]
    fn a_gated_child_waits_without_a_stall_clock() {
        let (old, new) = ("ghcr.io/c5c3/horizon:2026.1", "ghcr.io/c5c3/horizon:2026.2");
        let mut o = obs(Kind::Horizon, "", "", "", true);
        o.status.installed_release = None;
        o.image_reference = old.into();
        let mut t = Tracker::new(
            "",
            Deadlines {
                other: Duration::from_secs(600),
                ..Deadlines::default()
            },
        )
        .with_image(Some(new.into()));
        for m in 0..120 {
            assert_eq!(
                t.observe_gated(&o, Duration::from_secs(m * 60), true),
                Progress::Waiting,
                "minute {m}"
            );
        }
        // The last pass that saw the gate closed.
        let open = Duration::from_secs(119 * 60);
        assert_eq!(
            t.observe(&o, open + Duration::from_secs(599)),
            Progress::Waiting
        );
        let stalled = t.observe(&o, open + Duration::from_secs(601));
        assert_eq!(
            stalled,
            Progress::Stalled {
                phase: "Waiting".into(),
                over: Duration::from_secs(600)
            }
        );
        assert_eq!(stalled.describe(), "stalled: not picked up for over 10m");
        assert_eq!(t.observe(&o, open + Duration::from_secs(3600)), stalled);
        // A gate hides nothing but the wait: once projected, a child's
        // progress reads as it is.
        o.image_reference = new.into();
        o.status.upgrade_phase = Some("RollingUpdate".into());
        assert!(matches!(
            t.observe_gated(&o, open + Duration::from_secs(3601), true),
            Progress::Phase { .. }
        ));
    }

    #[test]
    fn stalls_after_the_phase_deadline() {
        let mut t = Tracker::new(
            "2026.2",
            Deadlines {
                expanding: Duration::from_secs(60),
                ..Deadlines::default()
            },
        );
        let o = obs(Kind::Glance, "2026.1", "2026.2", "Expanding", false);
        assert!(matches!(
            t.observe(&o, Duration::from_secs(0)),
            Progress::Phase { .. }
        ));
        assert!(matches!(
            t.observe(&o, Duration::from_secs(59)),
            Progress::Phase { .. }
        ));
        assert!(matches!(
            t.observe(&o, Duration::from_secs(61)),
            Progress::Stalled { .. }
        ));
        // Moving on resets the clock.
        let o = obs(Kind::Glance, "2026.1", "2026.2", "Migrating", false);
        assert!(matches!(
            t.observe(&o, Duration::from_secs(62)),
            Progress::Phase { .. }
        ));
    }
}
