//! A real Gitea on 127.0.0.1 (built from the Go module proxy by
//! `tests/peers/gitea/build.sh`, sqlite, its own temporary directory): an
//! admin user `lockstep` with an access token, webhooks allowed to loopback.
//! Killed when dropped. Statuses, webhooks, branches and pull requests are
//! Gitea's own code, so a request Gitea would refuse fails the test.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub struct Gitea {
    child: Option<Child>,
    dir: tempfile::TempDir,
    pub port: u16,
    pub token: String,
}

pub const USER: &str = "lockstep";

/// `(GITEA_BIN, GITEA_STATIC)` from the peer's build script (cached after
/// the first build).
fn build() -> (PathBuf, PathBuf) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/gitea/build.sh");
    let out = Command::new("bash")
        .arg(&script)
        .stderr(Stdio::inherit())
        .output()
        .expect("bash runs");
    assert!(out.status.success(), "{} failed", script.display());
    let text = String::from_utf8_lossy(&out.stdout);
    let var = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .map(PathBuf::from)
            .unwrap_or_else(|| panic!("build.sh printed no {name}: {text}"))
    };
    (var("GITEA_BIN"), var("GITEA_STATIC"))
}

impl Gitea {
    pub fn start() -> Gitea {
        let (bin, static_root) = build();
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path().display().to_string();
        let port = super::free_port();
        // Gitea refuses to run as root unless told; CI runs as root. sqlite
        // in WAL mode with a long busy timeout: statuses, webhook tasks and
        // the push queue write at once, and "database is locked" is not
        // what these tests are about.
        let config = format!(
            "APP_NAME = lockstep test peer\nRUN_MODE = prod\nRUN_USER = {user}\n\
             I_AM_BEING_UNSAFE_RUNNING_AS_ROOT = true\nWORK_PATH = {d}\n\n\
             [server]\nPROTOCOL = http\nHTTP_ADDR = 127.0.0.1\nHTTP_PORT = {port}\n\
             ROOT_URL = http://127.0.0.1:{port}/\nDISABLE_SSH = true\nOFFLINE_MODE = true\n\
             LFS_START_SERVER = false\nSTATIC_ROOT_PATH = {static_root}\nAPP_DATA_PATH = {d}/data\n\n\
             [database]\nDB_TYPE = sqlite3\nPATH = {d}/data/gitea.db\n\
             SQLITE_JOURNAL_MODE = WAL\nSQLITE_TIMEOUT = 20000\n\n\
             [repository]\nROOT = {d}/repos\nDEFAULT_BRANCH = main\n\n\
             [security]\nINSTALL_LOCK = true\nSECRET_KEY = lockstep-test-secret-key\n\n\
             [service]\nDISABLE_REGISTRATION = true\n\n\
             [webhook]\nALLOWED_HOST_LIST = loopback\nDELIVER_TIMEOUT = 10\n\n\
             [log]\nMODE = file\nLEVEL = Info\nROOT_PATH = {d}/log\n\n\
             [cron]\nENABLED = false\n\n[mailer]\nENABLED = false\n",
            user = super::current_user(),
            static_root = static_root.display(),
        );
        let ini = dir.path().join("app.ini");
        std::fs::write(&ini, config).expect("app.ini");
        let gitea = |args: &[&str]| {
            let out = Command::new(&bin)
                .args(args)
                .arg("--config")
                .arg(&ini)
                .env("GITEA_WORK_DIR", dir.path())
                .output()
                .expect("gitea runs");
            assert!(
                out.status.success(),
                "gitea {args:?}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        gitea(&["migrate"]);
        gitea(&[
            "admin",
            "user",
            "create",
            "--username",
            USER,
            "--password",
            "lockstep-test-password",
            "--email",
            "lockstep@example.invalid",
            "--admin",
            "--must-change-password=false",
        ]);
        let token = gitea(&[
            "admin",
            "user",
            "generate-access-token",
            "--username",
            USER,
            "--token-name",
            "tests",
            "--scopes",
            "all",
            "--raw",
        ])
        // Gitea may log a warning (running as root) before or after the
        // token, depending on timing: the token is the 40-hex-digit line.
        .lines()
        .map(str::trim)
        .find(|l| l.len() == 40 && l.bytes().all(|b| b.is_ascii_hexdigit()))
        .unwrap_or_default()
        .to_owned();
        assert_eq!(token.len(), 40, "an access token: {token:?}");
        let log = std::fs::File::create(dir.path().join("web.log")).expect("log");
        let child = Command::new(&bin)
            .args(["web", "--config"])
            .arg(&ini)
            .env("GITEA_WORK_DIR", dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("gitea web runs");
        let mut g = Gitea {
            child: Some(child),
            dir,
            port,
            token,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if matches!(
                super::http(&g.addr(), "GET", "/api/healthz", &[], b""),
                Ok((200, _))
            ) {
                return g;
            }
            if let Some(c) = g.child.as_mut()
                && let Ok(Some(status)) = c.try_wait()
            {
                panic!("gitea web exited ({status}): {}", g.log());
            }
            assert!(
                Instant::now() < deadline,
                "gitea did not answer: {}",
                g.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr())
    }

    /// The clone URL of `owner/name`, without credentials.
    pub fn clone_url(&self, repo: &str) -> String {
        format!("{}/{repo}.git", self.url())
    }

    /// The clone URL with the admin's token as password, for the git CLI.
    pub fn push_url(&self, repo: &str) -> String {
        format!("http://{USER}:{}@{}/{repo}.git", self.token, self.addr())
    }

    /// What Gitea logged (its web process and the router log).
    pub fn log(&self) -> String {
        let mut text = std::fs::read_to_string(self.dir.path().join("web.log")).unwrap_or_default();
        text.push_str(
            &std::fs::read_to_string(self.dir.path().join("log/gitea.log")).unwrap_or_default(),
        );
        text
    }

    /// The errors Gitea logged (a 5xx answer, an `[E]` line), for failure
    /// messages.
    pub fn errors(&self) -> String {
        self.log()
            .lines()
            .filter(|l| l.contains(" [E] ") || l.contains(", 50"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// A call to `/api/v1{path}` as the admin: (status, JSON body or Null).
    pub fn api(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let payload = body.map(|b| b.to_string()).unwrap_or_default();
        let (code, text) = super::http(
            &self.addr(),
            method,
            &format!("/api/v1{path}"),
            &[
                ("Authorization", format!("token {}", self.token)),
                ("Content-Type", "application/json".into()),
                ("Accept", "application/json".into()),
            ],
            payload.as_bytes(),
        )
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        (code, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// Like [`Gitea::api`], and the status must be `want`.
    pub fn must(&self, method: &str, path: &str, body: Option<Value>, want: u16) -> Value {
        let (code, json) = self.api(method, path, body);
        assert_eq!(code, want, "{method} {path}: {json}");
        json
    }

    /// An empty repository `lockstep/<name>` with `main` as its default branch.
    pub fn create_repo(&self, name: &str) -> String {
        self.must(
            "POST",
            "/user/repos",
            Some(serde_json::json!({"name": name, "default_branch": "main"})),
            201,
        );
        format!("{USER}/{name}")
    }

    /// Waits until Gitea has processed the first push to `repo`: its push
    /// queue clears the "empty" flag a moment after `git push` returns, and
    /// until then the pull-request API answers 404.
    pub fn wait_pushed(&self, repo: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (code, json) = self.api("GET", &format!("/repos/{repo}"), None);
            if code == 200 && json["empty"] == false {
                return;
            }
            assert!(Instant::now() < deadline, "{repo} still empty: {json}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The statuses Gitea holds for `sha` (newest first, as Gitea lists them).
    pub fn statuses(&self, repo: &str, sha: &str) -> Vec<Value> {
        match self.must(
            "GET",
            &format!("/repos/{repo}/statuses/{sha}?limit=50"),
            None,
            200,
        ) {
            Value::Array(list) => list,
            other => panic!("statuses of {sha}: {other}"),
        }
    }
}

impl Drop for Gitea {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
