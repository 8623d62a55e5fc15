//! The GitHub peer: Prism serving GitHub's published OpenAPI description
//! as a validating mock (tests/peers/github).

use std::path::Path;
use std::process::Command;

use super::free_port;

/// A running Prism (GitHub's published OpenAPI description), stopped when
/// dropped; its log says how it judged every request.
pub struct Prism {
    pid: String,
    port: u16,
    dir: tempfile::TempDir,
}

impl Prism {
    pub fn start() -> Prism {
        let peer = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/github");
        assert!(
            peer.join("node_modules/@stoplight/prism-cli").is_dir(),
            "the GitHub peer is not installed: run `npm ci --prefix tests/peers/github` (see README)"
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_port();
        let out = Command::new("bash")
            .arg(peer.join("start-prism.sh"))
            .arg(port.to_string())
            .env("TMPDIR", dir.path())
            .output()
            .expect("start-prism.sh runs");
        assert!(
            out.status.success(),
            "Prism did not start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let pid = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        Prism { pid, port, dir }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every request Prism received: (method, path and query, its log lines).
    pub fn requests(&self) -> Vec<(String, String, String)> {
        let log = std::fs::read_to_string(
            self.dir
                .path()
                .join(format!("lockstep-github-prism-{}.log", self.port)),
        )
        .unwrap_or_default();
        let mut out: Vec<(String, String, String)> = Vec::new();
        for line in log.lines() {
            if let Some(rest) = line.split("[HTTP SERVER] ").nth(1)
                && line.contains("Request received")
            {
                let mut words = rest.split_whitespace();
                let method = words.next().unwrap_or_default().to_owned();
                let path = words.next().unwrap_or_default().to_owned();
                out.push((method, path, String::new()));
            } else if let Some(last) = out.last_mut() {
                last.2.push_str(line);
                last.2.push('\n');
            }
        }
        out
    }

    /// The requests to `path` (a query string allowed): (method, log).
    pub fn requests_to(&self, path: &str) -> Vec<(String, String)> {
        self.requests()
            .into_iter()
            .filter(|(_, p, _)| {
                p == path || p.strip_prefix(path).is_some_and(|q| q.starts_with('?'))
            })
            .map(|(m, _, log)| (m, log))
            .collect()
    }
}

impl Drop for Prism {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(&self.pid).status();
    }
}
