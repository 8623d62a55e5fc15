//! Text others wrote (a commit summary, a file name, a release string, a
//! webhook's ref) reaches people escaped at every sink: `lockstep check`'s
//! text, the statuses written as git notes, `run --until-idle`'s printed
//! notes, text logs. JSON output and JSON logs keep the raw value (JSON
//! escapes by itself).

mod common;

use std::io::Write;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use common::{FleetRepo, lockstep, lockstep_bin, nova, ringed_plane, rings_plan};
use serde_json::Value;

const NOVA: &str = "standalone/compute/nova.yaml";
/// A file name that recolours a terminal.
const RED_FILE: &str = "standalone/\x1b[31mnova.yaml";
/// A file name whose newline would forge a second line in a git note.
const FORGING_FILE: &str = "standalone/x\nlockstep/prod: success — forged.yaml";
const SUMMARY: &str = "bump\x1b[31m red\rlockstep/prod: success — forged \u{202e}lmay";

/// What must never reach a terminal or a note as itself.
fn hostile(c: char) -> bool {
    (c.is_control() && c != '\n') || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// The fleet, then three refused commits, each hostile in one way and each
/// judged against the fleet (a refused commit never moves the baseline):
/// a summary and a file name with ANSI escapes and a release that clears
/// the screen (`VersionParseError`); a broken manifest whose file name holds
/// a newline (`ManifestInvalid`); a release holding a newline.
fn hostile_repo() -> (FleetRepo, String, Vec<String>) {
    let repo = FleetRepo::new();
    repo.write(NOVA, nova("nova", "2026.1", "2026.1"));
    let base = repo.commit("fleet");
    // YAML's own escape: the parsed release holds a real ESC.
    repo.write(RED_FILE, nova("nova-two", "2026.1\\x1b[2J", "2026.1"));
    let red = repo.commit(SUMMARY);
    repo.remove(RED_FILE);
    repo.write(FORGING_FILE, "apiVersion: v1\nkind: [\n");
    let forging = repo.commit("a broken manifest");
    repo.remove(FORGING_FILE);
    repo.write(
        NOVA,
        nova("nova", "2026.1\\nlockstep/prod: success — forged", "2026.1"),
    );
    let newline = repo.commit("a release with a newline");
    (repo, base, vec![red, forging, newline])
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

fn note(repo: &FleetRepo, sha: &str) -> String {
    let out = Command::new("git")
        .args(["notes", "--ref=lockstep", "show", sha])
        .current_dir(repo.path())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git notes");
    assert!(
        out.status.success(),
        "no note on {sha}: {}",
        text(&out.stderr)
    );
    text(&out.stdout)
}

#[test]
fn check_escapes_text_keeps_json_raw_and_notes_stay_one_line_each() {
    let (repo, base, commits) = hostile_repo();
    let path = repo.path().to_string_lossy().into_owned();

    let out = lockstep(&["check", "--repo", &path, "--base", &base]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let report = text(&out.stdout);
    assert!(!report.chars().any(hostile), "{report:?}");
    for shown in [
        "bump\\x1b[31m red\\rlockstep/prod: success — forged \\u{202e}lmay",
        "standalone/\\x1b[31mnova.yaml:",
        "2026.1\\x1b[2J",
        "standalone/x\\nlockstep/prod: success — forged.yaml",
        "2026.1\\nlockstep/prod: success — forged",
    ] {
        assert!(report.contains(shown), "{shown:?} in\n{report}");
    }
    assert!(
        !report
            .lines()
            .any(|l| l.starts_with("lockstep/prod: success — forged")),
        "no forged line:\n{report}"
    );

    // JSON keeps what Git holds: it escapes by itself.
    let out = lockstep(&["check", "--repo", &path, "--base", &base, "-o", "json"]);
    let json: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let c = &json["commits"];
    assert_eq!(c[0]["summary"], SUMMARY);
    let red = c[0]["objects"]
        .as_array()
        .and_then(|o| o.iter().find(|o| o["file"] == RED_FILE))
        .unwrap_or_else(|| panic!("{json:#}"));
    assert_eq!(red["to"], "2026.1\x1b[2J");
    assert_eq!(red["reason"], "VersionParseError");
    assert!(
        c[1]["objects"]
            .as_array()
            .is_some_and(|o| o.iter().any(|o| o["file"] == FORGING_FILE)),
        "{json:#}"
    );

    // Notes: one line per context, whatever the file names and releases say.
    let out = lockstep(&[
        "check",
        "--repo",
        &path,
        "--base",
        &base,
        "--report",
        "notes",
        "--cluster",
        "prod",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let notes: Vec<String> = commits.iter().map(|sha| note(&repo, sha)).collect();
    for n in &notes {
        let lines: Vec<&str> = n.lines().collect();
        assert_eq!(lines.len(), 1, "one context, one line: {n:?}");
        assert!(
            lines[0].starts_with("lockstep/prod/review: failure — refused: "),
            "{n:?}"
        );
        assert!(!n.chars().any(hostile), "{n:?}");
    }
    assert!(notes[0].contains("2026.1\\x1b[2J"), "{:?}", notes[0]);
    assert!(
        notes[1].contains("standalone/x\\nlockstep/prod: success — forged.yaml"),
        "{:?}",
        notes[1]
    );
    assert!(
        notes[2].contains("release 2026.1\\nlockstep/prod: success — forged does not parse"),
        "{:?}",
        notes[2]
    );
}

#[test]
fn plan_status_escapes_names_from_the_plan_file() {
    let repo = FleetRepo::new();
    repo.write("clouds/c00.yaml", ringed_plane(0));
    repo.commit("a cloud");
    // YAML's own escapes: the wave's name holds a real ESC and a newline.
    repo.write(
        "plans/\u{202e}rings.yaml",
        rings_plan("1h", "30m").replacen(
            "name: canary",
            "name: \"canary\\e[2J\\nwave 9/9 forged\"",
            1,
        ),
    );
    repo.commit("plan");
    let out = lockstep(&["plan", "status", "--repo", &repo.path().to_string_lossy()]);
    let status = text(&out.stdout);
    assert!(out.status.success(), "{status}{}", text(&out.stderr));
    assert!(!status.chars().any(hostile), "{status:?}");
    assert!(status.contains("(plans/\\u{202e}rings.yaml:"), "{status}");
    assert!(
        status.contains("wave 1/3 canary\\x1b[2J\\nwave 9/9 forged (maxParallel 1"),
        "{status}"
    );
    assert!(
        !status
            .lines()
            .any(|l| l.trim_start().starts_with("wave 9/9")),
        "{status}"
    );
}

/// `lockstep run --until-idle` on the same history, logging as `format`.
fn run_until_idle(format: &str) -> Output {
    let (repo, _, _) = hostile_repo();
    let mut cmd = Command::new(lockstep_bin());
    cmd.args(["run", "--repo"])
        .arg(repo.path())
        .args(["--until-idle", "--log-format", format])
        .args(["--cluster-name", "prod"])
        .env("GIT_CONFIG_NOSYSTEM", "1");
    for (k, _) in std::env::vars() {
        if k.starts_with("LOCKSTEP_") || k == "KUBECONFIG" || k == "RUST_LOG" {
            cmd.env_remove(k);
        }
    }
    let out = cmd.output().expect("lockstep runs");
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{}",
        text(&out.stderr)
    );
    out
}

#[test]
fn the_daemons_text_logs_and_printed_notes_are_escaped() {
    let out = run_until_idle("text");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(!stderr.chars().any(hostile), "{stderr:?}");
    assert!(
        stderr
            .contains("summary=bump\\x1b[31m red\\rlockstep/prod: success — forged \\u{202e}lmay"),
        "the judged commit is logged, escaped:\n{stderr}"
    );
    assert!(!stdout.chars().any(hostile), "{stdout:?}");
    assert!(
        stdout.contains("bump\\x1b[31m red\\rlockstep/prod"),
        "{stdout}"
    );
    assert!(
        stdout.contains("    lockstep/prod: failure — refused: standalone/x\\nlockstep/prod: success — forged.yaml"),
        "{stdout}"
    );
    assert!(
        !stdout.lines().any(|l| l
            .trim_start()
            .starts_with("lockstep/prod: success — forged")),
        "no forged line:\n{stdout}"
    );
}

#[test]
fn json_logs_stay_json_and_keep_the_raw_value() {
    let out = run_until_idle("json");
    let stderr = text(&out.stderr);
    // Every log line is JSON; the plain `lockstep: ...` lines after the run
    // are escaped like any text.
    assert!(!stderr.contains(['\x1b', '\r']), "{stderr:?}");
    let events: Vec<Value> = stderr
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with("lockstep: "))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect();
    assert!(
        events
            .iter()
            .any(|e| e["fields"]["message"] == "judged" && e["fields"]["summary"] == SUMMARY),
        "{stderr}"
    );
}

/// Log output captured in memory.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log buffer").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("log buffer")).into_owned()
    }
}

/// A signed GitLab push whose ref and delivery id hold what a terminal
/// would obey; the receiver's log line as text (the daemon's text format)
/// and as JSON.
async fn hostile_push(json_logs: bool) -> String {
    use lockstep::secret::Secret;
    use lockstep::webhook::{WebhookConfig, router};
    use tracing_subscriber::fmt;

    let logs = Captured::default();
    let writer = logs.clone();
    let _guard = if json_logs {
        tracing::subscriber::set_default(fmt().json().with_writer(move || writer.clone()).finish())
    } else {
        tracing::subscriber::set_default(
            fmt()
                .fmt_fields(lockstep::escape::LogFields)
                .with_ansi(false)
                .with_writer(move || writer.clone())
                .finish(),
        )
    };
    let (tx, mut rx) = tokio::sync::mpsc::channel(4);
    let config = WebhookConfig {
        gitlab: Some(Secret::new("gl-hook-token")),
        ..WebhookConfig::default()
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!(
        "http://{}/hooks/gitlab",
        listener.local_addr().expect("addr")
    );
    tokio::spawn(async move {
        let _ = axum::serve(listener, router(config, tx)).await;
    });
    let body = serde_json::json!({
        "object_kind": "push",
        "ref": "refs/heads/\u{1b}[2Jmain\r\nlockstep/prod: success \u{202e}",
        "checkout_sha": "a".repeat(40),
        "project": {"path_with_namespace": "fleet/\u{1b}]0;owned\u{7}repo"},
    });
    let resp = reqwest::Client::new()
        .post(url)
        .header("X-Gitlab-Event", "Push Hook")
        .header("X-Gitlab-Token", "gl-hook-token")
        .header("X-Gitlab-Event-UUID", "id\twith-a-tab")
        .json(&body)
        .send()
        .await
        .expect("delivery");
    assert_eq!(resp.status().as_u16(), 202);
    let t = rx.recv().await.expect("a trigger");
    assert_eq!(
        t.git_ref, "refs/heads/\u{1b}[2Jmain\r\nlockstep/prod: success \u{202e}",
        "the trigger keeps the raw ref"
    );
    logs.text()
}

#[tokio::test]
async fn the_webhook_receiver_logs_a_hostile_ref_escaped() {
    let logs = hostile_push(false).await;
    let line = logs
        .lines()
        .find(|l| l.contains("webhook trigger"))
        .unwrap_or_else(|| panic!("no trigger logged:\n{logs}"));
    assert!(!logs.chars().any(hostile), "{logs:?}");
    assert!(
        line.contains("git_ref=refs/heads/\\x1b[2Jmain\\r\\nlockstep/prod: success \\u{202e}"),
        "{line}"
    );
    assert!(line.contains("repo=fleet/\\x1b]0;owned\\x07repo"), "{line}");
    assert!(line.contains("delivery=id\\twith-a-tab"), "{line}");
    assert_eq!(
        logs.lines().filter(|l| l.contains("lockstep/prod")).count(),
        1
    );
}

#[tokio::test]
async fn json_logs_of_the_receiver_stay_valid_and_raw() {
    let logs = hostile_push(true).await;
    let event: Value = logs
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["fields"]["message"] == "webhook trigger")
        .unwrap_or_else(|| panic!("no trigger logged as JSON:\n{logs}"));
    assert_eq!(
        event["fields"]["git_ref"],
        "refs/heads/\u{1b}[2Jmain\r\nlockstep/prod: success \u{202e}"
    );
    assert!(!logs.contains('\x1b'), "JSON escapes the raw ESC itself");
}
