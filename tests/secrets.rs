//! Secrets never print. A Git host (or a proxy in front of it) that echoes
//! the request in its error body would put the token into stderr: the
//! real binary posts statuses to a host that does exactly that, for every
//! host kind lockstep speaks to, and neither stdout nor stderr may carry
//! the token. The host is a few lines of std over loopback: what matters
//! here is an answer no real host gives on purpose, so no real peer can
//! play it.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::Command;

use common::{FleetRepo, lockstep_bin, nova};

const TOKEN: &str = "glpat-EchoedBack-91c2d3e4f5";

/// Answers every request with `status` and a body echoing the request's
/// head (Authorization and PRIVATE-TOKEN included), as some proxies do.
fn echo_host(status: &'static str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream);
            let mut head = String::new();
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
                head.push_str(&line);
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            let text = format!(
                "{{\"message\":\"denied; you sent: {}\"}}",
                head.replace(['\r', '\n', '"'], " ")
            );
            let mut s = reader.into_inner();
            let _ = write!(
                s,
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
                text.len()
            );
        }
    });
    format!("http://{addr}")
}

#[test]
fn a_host_that_echoes_the_request_never_gets_the_token_printed() {
    let repo = FleetRepo::new();
    repo.write("nova.yaml", nova("nova", "2026.1", "2026.1"));
    repo.commit("fleet");
    let dir = tempfile::tempdir().expect("tempdir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).expect("write");
    let path = repo.path().to_string_lossy().into_owned();
    for (host, status) in [
        ("github", "401 Unauthorized"),
        ("gitlab", "403 Forbidden"),
        ("gitea", "422 Unprocessable Entity"),
        ("github", "500 Internal Server Error"),
    ] {
        let url = echo_host(status);
        let out = Command::new(lockstep_bin())
            .args([
                "check",
                "--repo",
                &path,
                "--report",
                host,
                "--forge-url",
                &url,
                "--forge-repo",
                "fleet/fleet",
                "--token-file",
                &token_file.to_string_lossy(),
            ])
            .env("RUST_LOG", "trace")
            .output()
            .expect("lockstep runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{host} {status}: a status not posted is an error\n{stderr}"
        );
        // The echo did reach the message: the host's words are shown,
        // with the credential taken out.
        assert!(stderr.contains("you sent"), "{host}: {stderr}");
        assert!(stderr.contains("<redacted>"), "{host}: {stderr}");
        assert!(
            !stdout.contains(TOKEN) && !stderr.contains(TOKEN) && !stderr.contains("EchoedBack"),
            "{host} {status}: the token was printed\n{stderr}"
        );
    }
}

/// Secret files are read with a bound, and a dashboard credentials file
/// that no browser could ever match is refused at start (it locked the
/// dashboard with no word why): exit 2, the file named, its content never
/// printed.
#[test]
fn unusable_secret_files_stop_the_start_by_name() {
    let dir = tempfile::tempdir().expect("tmp");
    let no_colon = dir.path().join("basic-auth");
    std::fs::write(&no_colon, "admin-hunter2\n").expect("write");
    let cases = [
        (
            vec!["--ui-listen", "127.0.0.1:0", "--ui-basic-auth-file"],
            no_colon.to_string_lossy().into_owned(),
            "expected one line user:password",
        ),
        (
            vec!["--ui-listen", "127.0.0.1:0", "--ui-token-file"],
            "/dev/zero".to_owned(),
            "larger than",
        ),
    ];
    for (flags, file, why) in cases {
        let out = Command::new(lockstep_bin())
            .args(["run", "--until-idle"])
            .args(&flags)
            .arg(&file)
            .output()
            .expect("run lockstep");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {err}");
        assert!(err.contains(&file) && err.contains(why), "{flags:?}: {err}");
        assert!(!err.contains("hunter2"), "{err}");
    }
}

/// A Git host's token that cannot be one HTTP header (a second line pasted
/// into the file, a stray space, nothing but spaces), and a `--token-env`
/// naming a variable that is not set (a typo), stop `run` and `check
/// --report` at once, naming where the token came from, never its value.
/// Before, the second line failed every request with "builder error", and
/// `check` sent the typo'd variable's requests with no token at all.
#[test]
fn a_token_that_cannot_be_sent_stops_the_start_by_name() {
    let repo = FleetRepo::new();
    repo.write("nova.yaml", nova("nova", "2026.1", "2026.1"));
    repo.commit("nova");
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("token");
    let file_arg = file.to_string_lossy().into_owned();
    let runs: [Vec<&str>; 2] = [
        vec![
            "check",
            "--report",
            "github",
            "--forge-repo",
            "o/r",
            "--forge-url",
            "http://127.0.0.1:9",
        ],
        vec![
            "run",
            "--until-idle",
            "--report",
            "github",
            "--forge-repo",
            "o/r",
            "--forge-url",
            "http://127.0.0.1:9",
        ],
    ];
    for args in &runs {
        for (content, why) in [
            ("ghp_Secret1\nghp_Secret2\n", "a line break"),
            ("ghp_Secret1 \n", "surrounding spaces"),
            ("   \n", "only spaces"),
        ] {
            std::fs::write(&file, content).expect("write");
            let out = Command::new(lockstep_bin())
                .args(args)
                .args([
                    "--repo",
                    &repo.path().to_string_lossy(),
                    "--token-file",
                    &file_arg,
                ])
                .env_remove("LOCKSTEP_TOKEN")
                .output()
                .expect("run lockstep");
            let err = String::from_utf8_lossy(&out.stderr);
            assert_ne!(out.status.code(), Some(0), "{args:?} {content:?}: {err}");
            assert!(
                err.contains(&file_arg) && err.contains(why),
                "{args:?} {content:?}: {err}"
            );
            assert!(!err.contains("ghp_"), "{err}");
        }
        let out = Command::new(lockstep_bin())
            .args(args)
            .args([
                "--repo",
                &repo.path().to_string_lossy(),
                "--token-env",
                "LOCKSTEP_TOKNE",
            ])
            .env_remove("LOCKSTEP_TOKNE")
            .output()
            .expect("run lockstep");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{args:?}: {err}");
        assert!(
            err.contains("environment variable LOCKSTEP_TOKNE is not set"),
            "{args:?}: {err}"
        );
    }
}

/// A kubeconfig with a YAML mistake next to its token: kube's own message
/// quotes the lines around the mistake, so the token went to stderr (a
/// pod's or a CI job's log). The error names the file and the line only,
/// for `--kubeconfig` and for `~/.kube/config` found on its own.
#[test]
fn a_broken_kubeconfig_is_named_never_quoted() {
    let dir = tempfile::tempdir().expect("tmp");
    let kube = dir.path().join(".kube");
    std::fs::create_dir_all(&kube).expect("mkdir");
    let config = kube.join("config");
    std::fs::write(
        &config,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: \"https://127.0.0.1:9\"}\nusers:\n- name: u\n  user:\n    token: sha256~KubeSecretToken\n     bad-indent: x\n",
    )
    .expect("write");
    let repo = FleetRepo::new();
    repo.write("nova.yaml", nova("nova", "2026.1", "2026.1"));
    repo.commit("nova");
    let config_arg = config.to_string_lossy().into_owned();
    let repo_arg = repo.path().to_string_lossy().into_owned();
    let runs: [(Vec<&str>, bool); 2] = [
        (
            vec!["retry", "Nova/compute/nova", "--kubeconfig", &config_arg],
            true,
        ),
        (
            vec![
                "run",
                "--until-idle",
                "--cluster-mode",
                "kube",
                "--repo",
                &repo_arg,
            ],
            false,
        ),
    ];
    for (args, named) in runs {
        let out = Command::new(lockstep_bin())
            .args(&args)
            .env_remove("KUBECONFIG")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env("HOME", dir.path())
            .output()
            .expect("run lockstep");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{args:?}: {err}");
        assert!(
            err.contains("line 10") && !err.contains("KubeSecretToken"),
            "{args:?}: {err}"
        );
        if named {
            assert!(err.contains(&config_arg), "{err}");
        } else {
            assert!(err.contains("~/.kube/config"), "{err}");
        }
    }
}

/// A password that is not percent-encoded (its `/` ends the host early) and
/// a token in the URL's query stay out of the error that names the URL.
#[test]
fn a_source_url_is_named_without_its_credentials() {
    for url in [
        "https://u:pa/SECRETpw@127.0.0.1:1/x.git",
        "https://u:1234/SECRETpw@127.0.0.1:1/x.git",
        "https://127.0.0.1:1/x.git?access_token=SECRETpw",
    ] {
        let out = Command::new(lockstep_bin())
            .args(["run", "--until-idle", "--url", url])
            .output()
            .expect("run lockstep");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{url}: {err}");
        assert!(err.contains("127.0.0.1:1/x.git"), "{url}: {err}");
        assert!(
            !err.contains("SECRETpw") && !String::from_utf8_lossy(&out.stdout).contains("SECRETpw"),
            "{url}: {err}"
        );
    }
}
