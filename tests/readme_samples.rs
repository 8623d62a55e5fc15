//! The README shows what the commands print, and a sample that drifted from
//! the binary teaches a newcomer something false. Every fenced block the
//! README marks `<!-- sample: NAME -->` is regenerated here from the real
//! binary and compared line by line. A line `...` in a sample stands for
//! lines left out; without one at the top (bottom) the sample must start
//! (end) where the output does. The suggestions the CLI prints are run too.

mod common;

use std::path::Path;
use std::process::Command;

use common::lockstep_bin;

/// The marked samples of the README: name → lines of the block.
fn samples() -> Vec<(String, Vec<String>)> {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("README.md");
    let lines: Vec<&str> = readme.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let Some(name) = l
            .trim()
            .strip_prefix("<!-- sample:")
            .and_then(|r| r.strip_suffix("-->"))
        else {
            continue;
        };
        assert!(
            lines.get(i + 1).is_some_and(|f| f.starts_with("```")),
            "README.md:{}: a sample marker must sit right above its fenced block",
            i + 1
        );
        let body: Vec<String> = lines[i + 2..]
            .iter()
            .take_while(|l| !l.starts_with("```"))
            .map(|l| (*l).to_owned())
            .collect();
        out.push((name.trim().to_owned(), body));
    }
    out
}

fn sample(name: &str) -> Vec<String> {
    samples()
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, b)| b)
        .unwrap_or_else(|| panic!("README.md has no sample {name:?}"))
}

/// Whether `sample` is `output` with the `...` gaps filled: segments match
/// contiguous output lines, in order; the ends are anchored unless a gap
/// stands there. Returns the first line that does not match.
fn matches(sample: &[String], output: &str) -> Result<(), String> {
    let out: Vec<&str> = output.lines().collect();
    let gap = |l: &String| l.trim() == "...";
    let mut segments: Vec<&[String]> = sample.split(gap).collect();
    let open_start = sample.first().is_some_and(gap);
    let open_end = sample.last().is_some_and(gap);
    segments.retain(|s| !s.is_empty());
    let mut at = 0usize;
    for (i, seg) in segments.iter().enumerate() {
        let first = i == 0 && !open_start;
        let last = i + 1 == segments.len() && !open_end;
        let fits =
            |p: usize| p + seg.len() <= out.len() && seg.iter().zip(&out[p..]).all(|(a, b)| a == b);
        let found = if first && last {
            (fits(at) && at + seg.len() == out.len()).then_some(at)
        } else if first {
            fits(at).then_some(at)
        } else if last {
            out.len()
                .checked_sub(seg.len())
                .filter(|&p| p >= at && fits(p))
        } else {
            (at..out.len()).find(|&p| fits(p))
        };
        match found {
            Some(p) => at = p + seg.len(),
            None => {
                return Err(format!(
                    "the sample's lines\n{}\ndo not appear {} in the output:\n{output}",
                    seg.join("\n"),
                    if first {
                        "at its start"
                    } else if last {
                        "at its end"
                    } else {
                        "in order"
                    }
                ));
            }
        }
    }
    if segments.is_empty() {
        return Err("an empty sample".into());
    }
    Ok(())
}

#[test]
fn the_matcher_anchors_ends_and_honours_gaps() {
    let s = |t: &str| t.lines().map(str::to_owned).collect::<Vec<_>>();
    let out = "a\nb\nc\nd\n";
    assert!(matches(&s("a\nb\nc\nd"), out).is_ok());
    assert!(matches(&s("a\n...\nd"), out).is_ok());
    assert!(matches(&s("...\nb\nc\n..."), out).is_ok());
    // Left out without saying so: the first or last line missing.
    assert!(matches(&s("b\nc\nd"), out).is_err());
    assert!(matches(&s("a\nb\nc"), out).is_err());
    // Out of order, or changed.
    assert!(matches(&s("a\n...\nc\nb\n...\n"), out).is_err());
    assert!(matches(&s("a\nB\n...\n"), out).is_err());
}

#[test]
fn the_run_sample_is_what_run_until_idle_prints() {
    let out = Command::new(lockstep_bin())
        .args(["run", "--until-idle"])
        .env_remove("LOCKSTEP_CONFIG")
        .output()
        .expect("lockstep runs");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    matches(&sample("run"), &stdout).unwrap_or_else(|e| panic!("README run sample: {e}"));
    // The temporary repository is named as temporary.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("(temporary: removed at exit; --keep DIR keeps it)"),
        "{stderr}"
    );
}

#[test]
fn the_demo_sample_and_its_suggestion_hold() {
    let out = Command::new(lockstep_bin())
        .arg("demo")
        .output()
        .expect("lockstep runs");
    // The one exception to the exit-code rule, stated in --help.
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    matches(&sample("demo"), &stdout).unwrap_or_else(|e| panic!("README demo sample: {e}"));
    assert!(
        stdout
            .lines()
            .next()
            .is_some_and(|l| l.contains("(temporary: removed at exit")),
        "{stdout}"
    );
    let help = String::from_utf8_lossy(
        &Command::new(lockstep_bin())
            .arg("--help")
            .output()
            .expect("help")
            .stdout,
    )
    .into_owned();
    assert!(help.contains("demo exits 0 once it has run"), "{help}");

    // The suggestion it prints, run as printed (in a directory of our own).
    let line = stdout
        .lines()
        .find(|l| l.starts_with("Try it yourself: "))
        .expect("a suggestion");
    let cmd = line.trim_start_matches("Try it yourself: ");
    let (keep, check) = cmd.split_once(" && ").expect("two commands");
    let work = tempfile::tempdir().expect("tempdir");
    let run = |c: &str| {
        let words: Vec<&str> = c.split_whitespace().collect();
        assert_eq!(words[0], "lockstep", "{c}");
        Command::new(lockstep_bin())
            .args(&words[1..])
            .current_dir(work.path())
            .output()
            .expect("runs")
    };
    let kept = run(keep);
    assert_eq!(kept.status.code(), Some(0));
    assert!(
        !String::from_utf8_lossy(&kept.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .contains("temporary"),
        "a kept repository is not temporary"
    );
    let checked = run(check);
    assert_eq!(
        checked.status.code(),
        Some(1),
        "the range holds refused commits"
    );
    let json: serde_json::Value = serde_json::from_slice(&checked.stdout).expect("json");
    let judged: Vec<(String, String)> = json["commits"]
        .as_array()
        .expect("commits")
        .iter()
        .map(|c| {
            (
                c["sha"].as_str().unwrap_or_default()[..10].to_owned(),
                c["verdict"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    // Exactly the demo's verdicts on those commits, starting after the
    // accepted prod upgrade (not from a refused commit).
    let demo: Vec<(String, String)> = stdout
        .lines()
        .filter_map(|l| {
            let (verdict, rest) = l.split_once(' ')?;
            let v = match verdict {
                "accepted" => "accepted",
                "REFUSED" => "refused",
                _ => return None,
            };
            Some((rest.trim_start().get(..10)?.to_owned(), v.to_owned()))
        })
        .collect();
    assert_eq!(demo.len(), 7, "{stdout}");
    assert_eq!(judged, demo[2..].to_vec());
}

/// A sample that starts with `$ ` lines is a session: the commands run in
/// order in a fresh directory (the binary under test as `lockstep`), and
/// the lines after the last command are what it prints.
#[test]
fn the_rehearse_session_is_what_the_commands_print() {
    let lines = sample("rehearse");
    let commands: Vec<&str> = lines
        .iter()
        .take_while(|l| l.starts_with("$ "))
        .map(|l| &l[2..])
        .collect();
    assert!(!commands.is_empty(), "a session starts with commands");
    let expected: Vec<String> = lines[commands.len()..].to_vec();
    let work = tempfile::tempdir().expect("tempdir");
    let bin_dir = lockstep_bin()
        .parent()
        .expect("the binary's directory")
        .to_owned();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut last = String::new();
    for c in &commands {
        let out = Command::new("bash")
            .args(["-c", c])
            .current_dir(work.path())
            .env("PATH", &path)
            .output()
            .expect("bash runs");
        assert!(
            out.status.success(),
            "{c}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        last = String::from_utf8_lossy(&out.stdout).into_owned();
    }
    matches(&expected, &last).unwrap_or_else(|e| panic!("README rehearse sample: {e}"));
}
