//! What a status says: short enough for a Git host's one line, specific
//! enough that a person knows what to fix without opening a log.
//! `refused: nova 2026.1→2027.1 skips 2026.2 (UpgradePathInvalid)`.
//!
//! Names, files and releases go in as Git has them; every status is escaped
//! on its way to the host (the shell's `forge::delivery::fit`, with
//! [`crate::escape`]), so a control character in a file name never reaches
//! a host or a note raw.

use super::{Context, State, Status};
use crate::gate::{ObjectVerdict, Reason, Transition, Verdict};
use crate::release::Release;
use crate::verdict::CommitReport;

/// The verdict status of one judged commit, under `lockstep/<cluster>`.
pub fn commit_status(cluster: &str, commit: &CommitReport, target_url: Option<&str>) -> Status {
    let refused: Vec<&ObjectVerdict> = commit
        .objects
        .iter()
        .filter(|o| o.verdict == Verdict::Refused)
        .collect();
    let (state, description) = if let Some(first) = refused.first() {
        let more = if refused.len() > 1 {
            format!(" (+{} more)", refused.len() - 1)
        } else {
            String::new()
        };
        (State::Failure, format!("refused: {}{more}", refusal(first)))
    } else {
        (
            State::Success,
            format!("accepted: {}", accepted(&commit.objects)),
        )
    };
    Status {
        state,
        context: Context::commit(cluster).to_string(),
        description,
        target_url: target_url.map(str::to_owned),
    }
}

/// A change's verdict before it lands, under `lockstep/<cluster>/review`
/// ([`Context::review`]): what `check --report` posts.
pub fn review_status(cluster: &str, commit: &CommitReport, target_url: Option<&str>) -> Status {
    Status {
        context: Context::review(cluster).to_string(),
        ..commit_status(cluster, commit, target_url)
    }
}

/// A pull request's verdict as the daemon posts it on the request's
/// commits: [`daemon_status`] under `lockstep/<cluster>/review`.
pub fn pull_status(cluster: &str, commit: &CommitReport, target_url: Option<&str>) -> Status {
    Status {
        context: Context::review(cluster).to_string(),
        ..daemon_status(cluster, commit, target_url)
    }
}

/// The verdict status as the daemon posts it: a held commit is pending
/// and names what it waits for (the daemon applies it, or judges the pull
/// request again, once that completes). A one-shot `check --report` posts
/// [`commit_status`], where held is accepted work: nothing would ever turn
/// a pending status there.
pub fn daemon_status(cluster: &str, commit: &CommitReport, target_url: Option<&str>) -> Status {
    let status = commit_status(cluster, commit, target_url);
    if status.state == State::Failure {
        return status;
    }
    match commit.objects.iter().find(|o| o.verdict == Verdict::Held) {
        Some(held) => Status {
            state: State::Pending,
            description: format!(
                "held: {}{} waits for the upgrade to {} in flight (UpgradeInProgress)",
                who(held),
                hop(held),
                held.from.as_deref().unwrap_or("its target")
            ),
            ..status
        },
        None => status,
    }
}

/// What an accepted (or held) commit's status says once every step it
/// carries is complete: `applied: …`, or `aborted: …` for an abort.
pub fn done(commit: &CommitReport) -> String {
    // Read in place: the fleet's first commit holds every object, and this
    // is asked of it on every pass that posts statuses (a copy of each
    // verdict was most of a pass at 20,000 files).
    let objects = &commit.objects;
    let aborts: Vec<&ObjectVerdict> = objects
        .iter()
        .filter(|o| o.transition == Transition::Abort)
        .collect();
    match aborts.as_slice() {
        [] => format!("applied: {}", summary(objects, true)),
        [one]
            if objects
                .iter()
                .filter(|o| o.transition != Transition::Unchanged)
                .count()
                == 1 =>
        {
            format!("aborted: {}{}", who(one), hop(one))
        }
        _ => format!("applied, with aborts: {}", summary(objects, true)),
    }
}

fn who(o: &ObjectVerdict) -> String {
    o.name.clone().unwrap_or_else(|| o.file.to_string())
}

fn hop(o: &ObjectVerdict) -> String {
    match (&o.from, &o.to) {
        (Some(f), Some(t)) if f != t => format!(" {f}→{t}"),
        (None, Some(t)) => format!(" {t}"),
        _ => String::new(),
    }
}

/// One refused object in a handful of words, reason last.
pub fn refusal(o: &ObjectVerdict) -> String {
    let reason = o.reason.map_or("refused", Reason::as_str);
    let what = match o.reason {
        Some(Reason::UpgradePathInvalid) => {
            let skipped = match (
                o.from
                    .as_deref()
                    .and_then(|f| Release::parse_strict(f).ok()),
                o.to.as_deref().and_then(|t| Release::parse_strict(t).ok()),
            ) {
                (Some(f), Some(t)) => {
                    let mut between = Vec::new();
                    let mut r = f.next();
                    while r < t && between.len() < 3 {
                        between.push(r.to_string());
                        r = r.next();
                    }
                    format!(" skips {}", between.join(", "))
                }
                _ => " skips a release".into(),
            };
            format!("{}{}{skipped}", who(o), hop(o))
        }
        Some(Reason::DowngradeNotSupported) => format!("{}{} is a downgrade", who(o), hop(o)),
        Some(Reason::ImageReleaseMismatch) if o.transition == Transition::Upgrade => {
            format!("{}{} keeps its old image", who(o), hop(o))
        }
        Some(Reason::ImageReleaseMismatch) => {
            format!("{}{}: image names another release", who(o), hop(o))
        }
        Some(Reason::VersionParseError) => format!(
            "{}: release {} does not parse",
            who(o),
            o.to.as_deref().unwrap_or("?")
        ),
        Some(Reason::AbortUnsafe) => format!("{} abort while Contracting", who(o)),
        Some(Reason::UpgradeTargetChanged) => {
            format!("{}{} changes the target mid-upgrade", who(o), hop(o))
        }
        Some(Reason::ProjectedChildEdited) => format!("{} is a projected child", who(o)),
        // The policy's reason and URL: what a person reads first.
        Some(Reason::UpgradeBlocked) => format!(
            "{}{} blocked: {}",
            who(o),
            hop(o),
            o.message
                .split_once("): ")
                .map_or(o.message.as_str(), |(_, why)| why)
        ),
        Some(Reason::AckRequired) => format!(
            "{}{} needs acknowledgement {}",
            who(o),
            hop(o),
            o.message
                .split("needs acknowledgement ")
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
                .unwrap_or("?")
        ),
        Some(Reason::PolicyInvalid) => format!("policy {}: {}", who(o), o.message),
        Some(Reason::ManifestInvalid) if o.line == 0 => format!("{} invalid", o.file),
        Some(Reason::ManifestInvalid) => format!("{}:{} invalid", o.file, o.line),
        Some(Reason::UntrustedCommit) => "commit not signed by a trusted key".to_owned(),
        Some(
            Reason::PlanInvalid
            | Reason::PlanTargetInvalid
            | Reason::PlanSelectsNothing
            | Reason::PlanOverlap
            | Reason::PlanWindowInvalid,
        ) => format!("plan {}: {}", who(o), o.message),
        Some(Reason::UpgradeInProgress) | None => format!("{}{}", who(o), hop(o)),
    };
    format!("{what} ({reason})")
}

fn accepted(objects: &[ObjectVerdict]) -> String {
    summary(objects, false)
}

/// The objects' changes in a few words. `done`: as the work stands once
/// applied, every object accepted and a queued hop an upgrade.
fn summary(objects: &[ObjectVerdict], done: bool) -> String {
    let transition = |o: &ObjectVerdict| {
        if done && o.transition == Transition::Queued {
            Transition::Upgrade
        } else {
            o.transition
        }
    };
    let changed: Vec<&ObjectVerdict> = objects
        .iter()
        .filter(|o| o.transition != Transition::Unchanged)
        .collect();
    let held = if done {
        0
    } else {
        objects
            .iter()
            .filter(|o| o.verdict == Verdict::Held)
            .count()
    };
    let held_text = if held > 0 {
        format!(", {held} held until the running upgrade completes")
    } else {
        String::new()
    };
    match changed.as_slice() {
        [] => "no C5C3 object changed".into(),
        [one] => format!(
            "{}{} {}{held_text}",
            who(one),
            hop(one),
            verb(transition(one))
        ),
        many => {
            let mut counts: Vec<(Transition, usize)> = Vec::new();
            for o in many {
                let t = transition(o);
                match counts.iter_mut().find(|(c, _)| *c == t) {
                    Some((_, n)) => *n += 1,
                    None => counts.push((t, 1)),
                }
            }
            let parts: Vec<String> = counts
                .iter()
                .map(|(t, n)| format!("{n} {}", noun(*t, *n)))
                .collect();
            format!("{}{held_text}", parts.join(", "))
        }
    }
}

fn verb(t: Transition) -> &'static str {
    match t {
        Transition::Install => "installed",
        Transition::Remove => "removed from Git (kept running)",
        Transition::Patch => "patched",
        Transition::Reconfigure => "reconfigured",
        Transition::Upgrade => "upgrade",
        Transition::Abort => "abort",
        Transition::Queued => "queued",
        _ => "",
    }
}

fn noun(t: Transition, n: usize) -> &'static str {
    match (t, n == 1) {
        (Transition::Install, true) => "install",
        (Transition::Install, false) => "installs",
        (Transition::Remove, true) => "removal",
        (Transition::Remove, false) => "removals",
        (Transition::Patch, true) => "patch",
        (Transition::Patch, false) => "patches",
        (Transition::Reconfigure, true) => "reconfiguration",
        (Transition::Reconfigure, false) => "reconfigurations",
        (Transition::Upgrade, true) => "upgrade",
        (Transition::Upgrade, false) => "upgrades",
        (Transition::Abort, true) => "abort",
        (Transition::Abort, false) => "aborts",
        (Transition::Queued, _) => "queued",
        _ => "changes",
    }
}

/// Progress of one object's hop, for `lockstep/<cluster>/<ns>/<name>`:
/// `nova 2026.1→2026.2: Migrating (2/4)`.
pub fn progress(name: &str, from: &str, to: &str, phase: &str) -> String {
    let step = match phase {
        "Expanding" => " (1/4)",
        "Migrating" => " (2/4)",
        "RollingUpdate" => " (3/4)",
        "Contracting" => " (4/4)",
        _ => "",
    };
    format!("{name} {from}→{to}: {phase}{step}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::Kind;

    fn object(name: &str, transition: Transition, verdict: Verdict) -> ObjectVerdict {
        ObjectVerdict {
            kind: Some(Kind::Nova),
            namespace: Some("compute".into()),
            name: Some(name.into()),
            file: "nova.yaml".into(),
            line: 1,
            projected_by: None,
            from: Some("2026.1".into()),
            to: Some("2026.2".into()),
            from_image: None,
            to_image: None,
            transition,
            verdict,
            reason: None,
            message: String::new(),
        }
    }

    fn commit(objects: Vec<ObjectVerdict>) -> CommitReport {
        CommitReport {
            sha: "c".into(),
            summary: String::new(),
            verdict: Verdict::Accepted,
            objects,
            skipped: Vec::new(),
            files_changed: 1,
        }
    }

    /// Once applied, a commit's words count what it did: a queued or held
    /// hop is an upgrade done, and no "held" is left in them, while the
    /// verdict's words still say what waited.
    #[test]
    fn done_says_what_the_work_became() {
        let c = commit(vec![
            object("a", Transition::Upgrade, Verdict::Accepted),
            object("b", Transition::Queued, Verdict::Held),
            object("c", Transition::Unchanged, Verdict::Accepted),
        ]);
        assert_eq!(done(&c), "applied: 2 upgrades");
        assert_eq!(
            commit_status("x", &c, None).description,
            "accepted: 1 upgrade, 1 queued, 1 held until the running upgrade completes"
        );
        let one = commit(vec![object("b", Transition::Queued, Verdict::Held)]);
        assert_eq!(done(&one), "applied: b 2026.1→2026.2 upgrade");
        let abort = commit(vec![
            object("a", Transition::Abort, Verdict::Accepted),
            object("c", Transition::Unchanged, Verdict::Accepted),
        ]);
        assert_eq!(done(&abort), "aborted: a 2026.1→2026.2");
        let mixed = commit(vec![
            object("a", Transition::Abort, Verdict::Accepted),
            object("b", Transition::Queued, Verdict::Accepted),
        ]);
        assert_eq!(done(&mixed), "applied, with aborts: 1 abort, 1 upgrade");
    }
}
