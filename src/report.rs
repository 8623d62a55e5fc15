//! Rendering check reports for people (text) and machines (JSON).

use std::fmt::Write as _;

use crate::escape::Escaped;
use crate::gate::{ObjectVerdict, Transition, Verdict};
use crate::history::{CheckReport, CommitReport};

pub fn json(report: &CheckReport) -> String {
    // Serialising plain data structures cannot fail.
    serde_json::to_string_pretty(report).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

/// [`json`] and a line break, written as it is serialized: the report of a
/// whole fleet is tens of megabytes, and no second copy of it is held.
pub fn write_json(report: &CheckReport, out: &mut impl std::io::Write) -> std::io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, report)?;
    out.write_all(b"\n")
}

/// The report for people. Every line that holds text from Git (summaries,
/// file names, releases, images, the gate's messages quoting them) is
/// escaped as a whole ([`crate::escape`]): the JSON keeps the raw values.
pub fn text(report: &CheckReport) -> String {
    let mut s = String::new();
    let n = report.commits.len();
    let base = report
        .base
        .as_deref()
        .map_or_else(|| "the empty tree".to_owned(), short);
    let _ = writeln!(
        s,
        "lockstep check {}..{}: {n} commit{} judged against {base}",
        report.base.as_deref().map_or("∅".to_owned(), short),
        short(&report.head),
        if n == 1 { "" } else { "s" },
    );
    if n == 0 {
        let _ = writeln!(
            s,
            "  nothing to judge: the head has no commit the base lacks (it is the base, or behind it)"
        );
    }
    for c in &report.commits {
        commit_text(&mut s, c);
    }
    let refused = report
        .commits
        .iter()
        .filter(|c| c.verdict == Verdict::Refused)
        .count();
    let held: usize = report
        .commits
        .iter()
        .flat_map(|c| &c.objects)
        .filter(|o| o.verdict == Verdict::Held)
        .count();
    let _ = write!(
        s,
        "verdict: {}",
        if refused > 0 { "REFUSED" } else { "accepted" }
    );
    if refused > 0 {
        let _ = write!(
            s,
            " ({refused} of {n} commits refused; nothing of a refused commit is applied)"
        );
    }
    if held > 0 {
        let _ = write!(
            s,
            " ({held} object hop{} held until the cluster finishes its current upgrade)",
            if held == 1 { "" } else { "s" }
        );
    }
    s.push('\n');
    s
}

fn commit_text(s: &mut String, c: &CommitReport) {
    let mark = match c.verdict {
        Verdict::Refused => "REFUSED ",
        _ => "accepted",
    };
    let _ = writeln!(
        s,
        "{}",
        Escaped(format_args!("{mark} {} {}", short(&c.sha), c.summary))
    );
    if c.objects.is_empty() {
        let _ = writeln!(
            s,
            "         no C5C3 object changed relative to the last accepted commit ({} manifest file{} differ{})",
            c.files_changed,
            if c.files_changed == 1 { "" } else { "s" },
            if c.files_changed == 1 { "s" } else { "" }
        );
    }
    for o in &c.objects {
        object_text(s, o);
    }
    for k in &c.skipped {
        let _ = writeln!(
            s,
            "{}",
            Escaped(format_args!(
                "         skipped {}:{}: {}",
                k.file, k.line, k.message
            ))
        );
    }
}

fn object_text(s: &mut String, o: &ObjectVerdict) {
    let who = match (&o.kind, &o.namespace, &o.name) {
        (Some(k), Some(ns), Some(n)) => format!("{k} {ns}/{n}"),
        // A refusal of the commit itself (its signature), at no file.
        _ if o.file.is_empty() => "commit".to_owned(),
        _ => "file".to_owned(),
    };
    let via = o
        .projected_by
        .as_deref()
        .map(|p| format!(" (via ControlPlane {p})"))
        .unwrap_or_default();
    let hop = match (&o.from, &o.to) {
        (Some(f), Some(t)) if f != t => format!(" {f} → {t}"),
        (None, Some(t)) => format!(" {t}"),
        (Some(f), None) if o.transition == Transition::Remove => format!(" {f}"),
        (Some(f), Some(_)) => format!(" {f}"),
        _ => String::new(),
    };
    match o.verdict {
        Verdict::Refused => {
            let reason = o.reason.map(|r| r.as_str()).unwrap_or("refused");
            let _ = writeln!(
                s,
                "{}",
                Escaped(format_args!("  ✗ {who}{via}{hop}: {reason}"))
            );
            if o.file.is_empty() {
                let _ = writeln!(s, "{}", Escaped(format_args!("      {}", o.message)));
            } else if o.line == 0 {
                // The file as a whole (its name, its place in the tree).
                let _ = writeln!(
                    s,
                    "{}",
                    Escaped(format_args!("      {}: {}", o.file, o.message))
                );
            } else {
                let _ = writeln!(
                    s,
                    "{}",
                    Escaped(format_args!("      {}:{}: {}", o.file, o.line, o.message))
                );
            }
        }
        Verdict::Held => {
            let _ = writeln!(
                s,
                "{}",
                Escaped(format_args!(
                    "  ⏸ {who}{via}{hop}: held (UpgradeInProgress)"
                ))
            );
            let _ = writeln!(s, "      {}", Escaped(&o.message));
        }
        Verdict::Accepted => {
            let t = serde_json::to_value(o.transition)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            let detail = if o.message.is_empty() {
                String::new()
            } else {
                format!(" — {}", o.message)
            };
            let _ = writeln!(
                s,
                "{}",
                Escaped(format_args!("  ✓ {t} {who}{via}{hop}{detail}"))
            );
        }
    }
}

fn short(sha: &str) -> String {
    sha.chars().take(10).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::Reason;
    use crate::history::SkipReport;
    use crate::kind::Kind;

    fn object(file: &str, to: &str, verdict: Verdict, message: &str) -> ObjectVerdict {
        ObjectVerdict {
            kind: Some(Kind::Nova),
            namespace: Some("compute".into()),
            name: Some("nova".into()),
            file: file.into(),
            line: 7,
            projected_by: None,
            from: Some("2026.1".into()),
            to: Some(to.into()),
            from_image: None,
            to_image: None,
            transition: Transition::Invalid,
            verdict,
            reason: (verdict == Verdict::Refused).then_some(Reason::VersionParseError),
            message: message.into(),
        }
    }

    #[test]
    fn text_from_git_is_escaped_and_json_keeps_it_raw() {
        let commit = CommitReport {
            sha: "a".repeat(40),
            summary: "fix\x1b[31m red\rforged".into(),
            verdict: Verdict::Refused,
            objects: vec![
                object(
                    "standalone/\x1b[31mnova.yaml",
                    "2026.1\x1b[2J",
                    Verdict::Refused,
                    "openStackRelease: \"2026.1\u{1b}[2J\" is not a release",
                ),
                object(
                    "standalone/\u{202e}lmay.yaml",
                    "2026.2",
                    Verdict::Held,
                    "waits\nfor nova",
                ),
            ],
            skipped: vec![SkipReport {
                file: "notes/\u{9b}31m.yaml".into(),
                line: 1,
                message: "not\u{2028}an object".into(),
            }],
            files_changed: 3,
        };
        let mut text = String::new();
        commit_text(&mut text, &commit);
        assert!(
            !text
                .chars()
                .any(|c| c != '\n' && crate::escape::is_escaped(c)),
            "{text:?}"
        );
        for shown in [
            "fix\\x1b[31m red\\rforged",
            "2026.1 → 2026.1\\x1b[2J: VersionParseError",
            "standalone/\\x1b[31mnova.yaml:7:",
            "      waits\\nfor nova\n",
            "skipped notes/\\u{9b}31m.yaml:1: not\\u{2028}an object",
        ] {
            assert!(text.contains(shown), "{shown:?} in {text}");
        }
        assert_eq!(text.lines().count(), 6, "one line each: {text}");

        let c = serde_json::to_value(&commit).unwrap();
        assert_eq!(c["summary"], "fix\x1b[31m red\rforged");
        assert_eq!(c["objects"][0]["to"], "2026.1\x1b[2J");
        assert_eq!(c["objects"][0]["file"], "standalone/\x1b[31mnova.yaml");
    }
}
