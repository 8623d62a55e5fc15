//! The dashboard in a real browser (`docs/ui.md`): Debian's headless
//! Chromium (installed by `tests/peers/install.sh`) driven over the DevTools
//! protocol on a pipe (`--remote-debugging-pipe`: no websocket client
//! needed), against
//!
//! - `lockstep run` in sim mode on a story fleet: a plane whose hop failed
//!   for good (expand Jobs that keep failing: failed tries, repairs, then a
//!   person), a standalone Nova whose hop completed, a pull request held
//!   behind the plane's hop, and a plan waiting for its maintenance window;
//! - the real router over a snapshot made of hostile strings (a blocked
//!   unit whose reason, labels and pull-request reasons carry HTML, script
//!   and control characters): they must render inert.
//!
//! Screenshots go to `target/ui-screenshots/` for people to look at.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{FleetRepo, free_port, nova, prod};
use serde_json::{Value, json};

/// Chromium over the DevTools protocol on fds 3 (to it) and 4 (from it).
struct Browser {
    child: Child,
    to: std::fs::File,
    from: BufReader<std::fs::File>,
    id: u64,
    session: String,
}

fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: pipe fills the two descriptors it is given.
    let r = unsafe { libc::pipe(fds.as_mut_ptr()) };
    assert_eq!(r, 0, "pipe");
    // SAFETY: both were just opened and are owned here.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

fn chromium() -> String {
    for c in ["chromium", "chromium-browser"] {
        if Command::new(c)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return c.to_owned();
        }
    }
    panic!("chromium is not installed: run tests/peers/install.sh (apt-get install chromium)");
}

impl Browser {
    fn start() -> Browser {
        let (to_read, to_write) = pipe();
        let (from_read, from_write) = pipe();
        let (r3, w4) = (to_read.as_raw_fd(), from_write.as_raw_fd());
        let profile = tempfile::tempdir().expect("profile dir").keep();
        let mut cmd = Command::new(chromium());
        cmd.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--hide-scrollbars",
            "--window-size=1280,900",
            "--remote-debugging-pipe",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("about:blank")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        // SAFETY: only async-signal-safe calls (dup2) between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(r3, 3) < 0 || libc::dup2(w4, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().expect("start chromium");
        drop(to_read);
        drop(from_write);
        let mut b = Browser {
            child,
            to: std::fs::File::from(to_write),
            from: BufReader::new(std::fs::File::from(from_read)),
            id: 0,
            session: String::new(),
        };
        let t = b.call_browser("Target.createTarget", json!({"url": "about:blank"}));
        let target = t["targetId"].as_str().expect("targetId").to_owned();
        let s = b.call_browser(
            "Target.attachToTarget",
            json!({"targetId": target, "flatten": true}),
        );
        b.session = s["sessionId"].as_str().expect("sessionId").to_owned();
        b.call("Page.enable", json!({}));
        b.call("Runtime.enable", json!({}));
        b
    }

    fn send(&mut self, msg: Value) -> u64 {
        self.id += 1;
        let mut m = msg;
        m["id"] = json!(self.id);
        let mut bytes = serde_json::to_vec(&m).expect("json");
        bytes.push(0);
        self.to.write_all(&bytes).expect("write to chromium");
        self.id
    }

    fn answer(&mut self, id: u64) -> Value {
        loop {
            let mut buf = Vec::new();
            let n = self
                .from
                .read_until(0, &mut buf)
                .expect("read from chromium");
            assert!(n > 0, "chromium closed its pipe");
            buf.pop();
            let v: Value = serde_json::from_slice(&buf).expect("devtools json");
            if v["id"].as_u64() == Some(id) {
                if let Some(e) = v.get("error") {
                    panic!("devtools error: {e}");
                }
                return v["result"].clone();
            }
        }
    }

    fn call_browser(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(json!({"method": method, "params": params}));
        self.answer(id)
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(json!({"method": method, "params": params, "sessionId": self.session}));
        self.answer(id)
    }

    /// Evaluates `expr` in the page; its value (by JSON).
    fn eval(&mut self, expr: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expr, "returnByValue": true, "awaitPromise": true}),
        );
        if let Some(e) = r.get("exceptionDetails") {
            panic!("{expr}: {e}");
        }
        r["result"]["value"].clone()
    }

    /// Waits until `expr` is true (15 s at most).
    fn wait_for(&mut self, expr: &str) {
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(15) {
            if self.eval(expr) == json!(true) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let html = self.eval("document.documentElement.outerHTML");
        panic!(
            "timed out waiting for {expr}; page:\n{}",
            html.as_str().unwrap_or("")
        );
    }

    fn open(&mut self, url: &str) {
        self.call("Page.navigate", json!({"url": url}));
        self.wait_for("document.readyState === 'complete' && !!document.getElementById('live')");
    }

    fn screenshot(&mut self, name: &str) {
        use base64::Engine as _;
        let r = self.call(
            "Page.captureScreenshot",
            json!({"format": "png", "captureBeyondViewport": true}),
        );
        let png = base64::engine::general_purpose::STANDARD
            .decode(r["data"].as_str().expect("png data"))
            .expect("base64");
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/ui-screenshots");
        std::fs::create_dir_all(&dir).expect("screenshot dir");
        std::fs::write(dir.join(format!("{name}.png")), png).expect("write screenshot");
    }

    fn text(&mut self) -> String {
        self.eval("document.body.innerText")
            .as_str()
            .unwrap_or("")
            .to_owned()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What every page must be: no inline script or style, every control
/// labelled, text contrast at least 4.5:1, nothing injected.
const PAGE_RULES: &str = r#"(() => {
  const bad = [];
  for (const s of document.scripts) if (!s.src) bad.push('inline script');
  if (document.querySelectorAll('[style]').length) bad.push('style attribute');
  if (document.querySelectorAll('style').length) bad.push('style element');
  for (const e of document.querySelectorAll('input, select, textarea'))
    if (!e.labels || e.labels.length === 0) bad.push('unlabelled ' + e.name);
  if (window.__pwned) bad.push('hostile script ran');
  if (document.querySelectorAll('img, iframe, object, embed').length) bad.push('injected element');
  for (const el of document.querySelectorAll('*'))
    for (const a of el.attributes) if (a.name.startsWith('on')) bad.push('handler ' + a.name);
  const lum = c => {
    const m = c.match(/\d+(\.\d+)?/g).map(Number);
    const f = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(m[0]) + 0.7152 * f(m[1]) + 0.0722 * f(m[2]);
  };
  for (const el of document.querySelectorAll('main p, main td, main li, main a, main dd, main strong, header, footer')) {
    const fg = lum(getComputedStyle(el).color);
    const ratio = (Math.max(fg, 1) + 0.05) / (Math.min(fg, 1) + 0.05);
    if (ratio < 4.5) bad.push('contrast ' + ratio.toFixed(2) + ' ' + el.tagName + ' ' + el.textContent.slice(0, 30));
  }
  return bad.slice(0, 10);
})()"#;

fn rules(b: &mut Browser, page: &str) {
    assert_eq!(b.eval(PAGE_RULES), json!([]), "{page}");
}

struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_http(port: u16) {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(60) {
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            let _ = s.write_all(b"GET /api/v1/snapshot HTTP/1.0\r\n\r\n");
            let mut body = String::new();
            let _ = s.read_to_string(&mut body);
            // Wait for a pass that has seen the fleet.
            if body.contains("\"prod\"") {
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("the dashboard did not come up on {port}");
}

fn staging_in_ring() -> String {
    common::staging("2026.1").replacen(
        "namespace: openstack-staging",
        "namespace: openstack-staging\n  labels:\n    ring: canary",
        1,
    )
}

/// A plan whose only window opens on the 1st of January at 03:00 Berlin
/// time: from the daemon's start (virtual time starts now) it waits.
const PLAN: &str = r#"apiVersion: lockstep.c5c3.io/v1alpha1
kind: UpgradePlan
metadata:
  name: staging-window
spec:
  to: "2026.2"
  windows:
    - start: "0 3 1 1 *"
      duration: 1h
      timeZone: Europe/Berlin
  waves:
    - name: canary
      select: [{kind: ControlPlane, labels: {ring: canary}}]
      maxParallel: 1
"#;

const HOSTILE_SUMMARY: &str = "nova to 2026.2 <script>window.__pwned=1</script><img src=x onerror=\"window.__pwned=2\"> & \u{7}\u{1b}[31m";

#[test]
fn the_story_fleet_in_a_real_browser() {
    let repo = FleetRepo::new();
    repo.write("prod.yaml", prod("2026.1", "2026.1"))
        .write("nova.yaml", nova("nova", "2026.1", "2026.1"))
        .write("staging.yaml", staging_in_ring())
        .write("plan.yaml", PLAN);
    repo.commit("fleet");
    repo.write("prod.yaml", prod("2026.2", "2026.2"));
    repo.commit("prod to 2026.2");
    repo.write("nova.yaml", nova("nova", "2026.2", "2026.2"));
    let hostile = repo.commit(HOSTILE_SUMMARY);
    // A pull request taking prod one release further while its hop is stuck.
    repo.write("prod.yaml", prod("2027.1", "2027.1"));
    let pr = repo.commit("prod to 2027.1");
    repo.git(&["reset", "-q", "--hard", &hostile]);

    let port = free_port();
    let daemon = Daemon(
        Command::new(common::lockstep_bin())
            .args([
                "run",
                "--repo",
                &repo.path().display().to_string(),
                "--cluster-mode",
                "sim",
                "--fault",
                "prod-nova:expand:fail=20",
                "--ui-listen",
                &format!("127.0.0.1:{port}"),
                "--ui-commit-url",
                "https://git.example/fleet/commit/{sha}",
                "--log-level",
                "warn",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start lockstep run"),
    );
    wait_http(port);
    let base = format!("http://127.0.0.1:{port}");
    let mut b = Browser::start();

    // The fleet: what needs a person first, with the reason and the action.
    b.open(&format!("{base}/"));
    b.wait_for("!!document.querySelector('#attention li.failed')");
    let text = b.text();
    assert!(text.contains("Needs a person"), "{text}");
    let failed = b.eval("document.querySelector('#attention li.failed').innerText");
    let failed = failed.as_str().unwrap_or("");
    assert!(failed.contains("ControlPlane openstack/prod"), "{failed}");
    assert!(
        failed.contains("lockstep retry controlplane/openstack/prod"),
        "{failed}"
    );
    // A pull request opened now, taking prod one release further while its
    // hop is stuck: held, with why.
    repo.git(&["update-ref", "refs/pull/7/head", &pr]);
    b.wait_for("!!document.querySelector('#attention li.held')");
    let held = b.eval("document.querySelector('#attention li.held').innerText");
    let held = held.as_str().unwrap_or("");
    assert!(held.contains("pull request #7"), "{held}");
    assert!(held.contains("judged again every pass"), "{held}");
    // Every unit with its releases and phase.
    let rows = b.eval(
        "[...document.querySelectorAll('table.units tbody tr')].map(r => [...r.cells].map(c => c.innerText.trim()).slice(0, 3).join(' | '))",
    );
    let rows: Vec<String> = serde_json::from_value(rows).expect("rows");
    assert!(
        rows.contains(&"ControlPlane | openstack/prod | 2026.1 → 2026.2".to_owned()),
        "{rows:?}"
    );
    assert!(
        rows.contains(&"Nova | compute/nova | 2026.2".to_owned()),
        "{rows:?}"
    );
    assert!(
        rows.iter().any(|r| r.contains("openstack-staging/staging")),
        "{rows:?}"
    );
    // The failed plane is first.
    assert!(rows[0].contains("prod"), "{rows:?}");
    assert_eq!(
        b.eval("document.querySelectorAll('table.units progress').length"),
        json!(rows.len())
    );
    rules(&mut b, "fleet");

    // Live: the plan keeps the engine passing (virtual time runs towards the
    // window), each pass is an SSE event, and the page swaps its <main>
    // without a reload (the marker on the old one is gone, the window's
    // variable survives).
    b.eval("window.__sameDocument = 1; document.getElementById('live').dataset.mark = 'old'; true");
    b.wait_for(
        "document.getElementById('live').dataset.mark === undefined && window.__sameDocument === 1 && document.documentElement.dataset.live === 'on'",
    );
    b.screenshot("fleet");

    // Filters by GET query, without JavaScript's help.
    b.open(&format!("{base}/?kind=Nova"));
    let n = b.eval("document.querySelectorAll('table.units tbody tr').length");
    assert_eq!(n, json!(2), "prod (its child nova) and the standalone nova");
    b.open(&format!("{base}/?label=ring%3Dcanary"));
    let rows =
        b.eval("[...document.querySelectorAll('table.units tbody tr')].map(r => r.innerText)");
    let rows: Vec<String> = serde_json::from_value(rows).expect("rows");
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(rows[0].contains("staging"), "{rows:?}");
    assert_eq!(
        b.eval("document.getElementById('f-label').value"),
        json!("ring=canary")
    );

    // Keyboard: the skip link first, then the page's links and controls.
    b.open(&format!("{base}/"));
    let mut focused = Vec::new();
    for _ in 0..8 {
        for t in ["keyDown", "keyUp"] {
            b.call(
                "Input.dispatchKeyEvent",
                json!({"type": t, "key": "Tab", "code": "Tab", "windowsVirtualKeyCode": 9}),
            );
        }
        focused.push(
            b.eval("document.activeElement.id || document.activeElement.textContent.trim().slice(0, 20)")
                .as_str()
                .unwrap_or("")
                .to_owned(),
        );
    }
    assert_eq!(focused[0], "Skip to content", "{focused:?}");
    assert!(focused.contains(&"Fleet".to_owned()), "{focused:?}");
    assert!(focused.contains(&"f-release".to_owned()), "{focused:?}");

    // The plane: its failed hop as a timeline (expand, failed tries,
    // repairs, the person), its history linked to the Git host.
    b.open(&format!("{base}/unit/ControlPlane/openstack/prod"));
    b.wait_for("!!document.querySelector('svg.timeline rect[data-stage=expand]')");
    let marks = b.eval(
        "[...new Set([...document.querySelectorAll('svg.timeline [data-mark]')].map(m => m.dataset.mark))].sort()",
    );
    let marks: Vec<String> = serde_json::from_value(marks).expect("marks");
    assert!(marks.contains(&"failed try".to_owned()), "{marks:?}");
    assert!(marks.contains(&"repair".to_owned()), "{marks:?}");
    assert!(marks.contains(&"needs a person".to_owned()), "{marks:?}");
    let link = b.eval("document.querySelector('table.history a.sha').href");
    assert!(
        link.as_str()
            .unwrap_or("")
            .starts_with("https://git.example/fleet/commit/"),
        "{link}"
    );
    rules(&mut b, "prod");
    b.screenshot("unit-prod");

    // The standalone Nova: a finished hop through every stage, and the
    // hostile commit message as text.
    b.open(&format!("{base}/unit/Nova/compute/nova"));
    let stages = b.eval(
        "[...new Set([...document.querySelectorAll('svg.timeline rect[data-stage]')].map(r => r.dataset.stage))]",
    );
    let stages: Vec<String> = serde_json::from_value(stages).expect("stages");
    for s in ["expand", "migrate", "roll", "contract"] {
        assert!(stages.contains(&s.to_owned()), "{s} in {stages:?}");
    }
    let summary =
        b.eval("document.querySelector('table.history tbody tr td:nth-child(3)').textContent");
    assert!(
        summary
            .as_str()
            .unwrap_or("")
            .contains("<script>window.__pwned=1</script>"),
        "{summary}"
    );
    rules(&mut b, "nova");
    b.screenshot("unit-nova");

    // Hops and plans.
    b.open(&format!("{base}/hops"));
    let n = b.eval("document.querySelectorAll('svg.timeline').length");
    assert!(n.as_u64().unwrap_or(0) >= 2, "{n}");
    rules(&mut b, "hops");
    b.screenshot("hops");
    b.open(&format!("{base}/plans"));
    let plan = b.text();
    assert!(plan.contains("staging-window → 2026.2"), "{plan}");
    assert!(plan.contains("waits for the maintenance window"), "{plan}");
    assert!(plan.contains("Next opening"), "{plan}");
    assert!(plan.contains("Europe/Berlin"), "{plan}");
    assert!(plan.contains("canary"), "{plan}");
    rules(&mut b, "plans");
    b.screenshot("plans");
    drop(daemon);
}

#[test]
fn hostile_strings_render_inert_and_auth_is_asked() {
    use lockstep::kind::{Key, Kind};
    use lockstep::rollout::{Chain, Document, Next, Step, UnitReport};
    use std::collections::BTreeMap;
    use std::sync::Arc;

    let hostile = "<script>window.__pwned=1</script>\"><img src=x onerror=window.__pwned=2><svg onload=window.__pwned=3> \u{1b}[2J\u{7} ' &amp;";
    let key = Key::new(Kind::Nova, "prod", "nova-x");
    let doc = serde_json::json!({"metadata": {"name": "nova-x", "labels": {"team": hostile}}});
    let step = Step {
        sha: "0123456789abcdef0123456789abcdef01234567".into(),
        commits: vec![],
        file: Arc::from(format!("{hostile}.yaml")),
        from: Some("2025.2".into()),
        release: Some(hostile.into()),
        image: None,
        children: BTreeMap::new(),
        abort: false,
        document: Ok(Document::from_text(Arc::from(doc.to_string()))),
    };
    let mut units = BTreeMap::new();
    units.insert(
        key.clone(),
        UnitReport {
            chain: Arc::new(Chain {
                unit: key.clone(),
                from: Some("2025.2".into()),
                steps: vec![step],
            }),
            next: Next::Blocked(format!("blocked because {hostile}")),
            progress: BTreeMap::new(),
            needs_person: None,
            waiting: None,
        },
    );
    let (mut publisher, rx) = lockstep::ui::Publisher::new(hostile, None);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let port = free_port();
    let token_dir = tempfile::tempdir().expect("tempdir");
    let token = token_dir.path().join("token");
    std::fs::write(&token, "s3cret-t0ken\n").expect("token file");
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let _guard = rt.enter();
    publisher.publish(lockstep::ui::PassState {
        cluster: hostile,
        branch: hostile,
        head: None,
        report: None,
        units: &units,
        now: Duration::from_secs(10),
        wall: jiff::Timestamp::now(),
        source_error: Some(hostile.into()),
    });
    let listener = rt
        .block_on(tokio::net::TcpListener::bind(("127.0.0.1", port)))
        .expect("bind");
    rt.spawn(lockstep::server::serve(
        listener,
        lockstep::ui::router(rx.clone(), lockstep::ui::Auth::default()),
        lockstep::server::Limits::default(),
        stop_rx.clone(),
    ));
    let base = format!("http://127.0.0.1:{port}");
    let mut b = Browser::start();
    b.open(&format!("{base}/"));
    // The blocked unit, its reason shown as text, nothing injected.
    let reason = b.eval("document.querySelector('#attention li.blocked .reason').textContent");
    assert!(
        reason
            .as_str()
            .unwrap_or("")
            .contains("<script>window.__pwned=1</script>"),
        "{reason}"
    );
    let action = b.eval("document.querySelector('#attention li.blocked .action').textContent");
    assert!(action.as_str().unwrap_or("").contains("Git"), "{action}");
    // The fleet row (written without the macro) shows the release as text.
    let cell = b.eval("document.querySelector('table.units tbody tr').cells[2].textContent");
    assert_eq!(cell, json!(format!("? → {hostile}")));
    rules(&mut b, "hostile fleet");
    b.screenshot("hostile");
    b.open(&format!("{base}/unit/Nova/prod/nova-x"));
    let label = b.eval("document.querySelector('code.label').textContent");
    assert!(
        label.as_str().unwrap_or("").starts_with("team=<script>"),
        "{label}"
    );
    rules(&mut b, "hostile unit");
    // Filters echo the query as a value, not as markup.
    b.open(&format!(
        "{base}/?namespace=%22%3E%3Cscript%3Ewindow.__pwned%3D4%3C%2Fscript%3E"
    ));
    assert_eq!(
        b.eval("document.getElementById('f-namespace').value"),
        json!("\"><script>window.__pwned=4</script>")
    );
    rules(&mut b, "hostile filter");

    // With a token: nothing without it, everything with it; the token is
    // in no answer.
    let port2 = free_port();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind(("127.0.0.1", port2)))
        .expect("bind");
    let auth = lockstep::ui::Auth {
        token: Some(lockstep::secret::Secret::from_file(&token).expect("token")),
        basic: None,
    };
    rt.spawn(lockstep::server::serve(
        listener,
        lockstep::ui::router(rx, auth),
        lockstep::server::Limits::default(),
        stop_rx,
    ));
    let get = |path: &str, header: Option<&str>| -> (String, String) {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port2)).expect("connect");
        let extra = header.map(|h| format!("{h}\r\n")).unwrap_or_default();
        write!(s, "GET {path} HTTP/1.0\r\n{extra}\r\n").expect("send");
        let mut r = String::new();
        s.read_to_string(&mut r).expect("read");
        let (head, body) = r.split_once("\r\n\r\n").unwrap_or((&r, ""));
        (head.to_owned(), body.to_owned())
    };
    let (head, _) = get("/api/v1/units", None);
    assert!(head.starts_with("HTTP/1.0 401"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-security-policy: default-src 'none'"),
        "{head}"
    );
    let (head, _) = get("/", Some("Authorization: Bearer wrong"));
    assert!(head.starts_with("HTTP/1.0 401"), "{head}");
    let (head, body) = get("/api/v1/units", Some("Authorization: Bearer s3cret-t0ken"));
    assert!(head.starts_with("HTTP/1.0 200"), "{head}");
    let units: Value = serde_json::from_str(&body).expect("json");
    // Raw in JSON, with the documented field names.
    assert_eq!(units[0]["attention"], json!("blocked"));
    assert_eq!(units[0]["target"], json!(hostile));
    assert_eq!(units[0]["labels"]["team"], json!(hostile));
    for page in ["/", "/plans", "/hops", "/api/v1/snapshot"] {
        let (_, body) = get(page, Some("Authorization: Bearer s3cret-t0ken"));
        assert!(!body.contains("s3cret-t0ken"), "{page}");
    }
    let _ = stop_tx.send(true);
}

#[test]
fn rehearse_html_is_one_self_contained_page_with_the_timeline() {
    let (repo, base) = common::hop_story();
    let out_dir = tempfile::tempdir().expect("tempdir");
    let page = out_dir.path().join("rehearsal.html");
    let out = Command::new(common::lockstep_bin())
        .args(["rehearse", "--repo"])
        .arg(repo.path())
        .args([
            "--base",
            &base,
            "--fault",
            "prod-nova:expand:fail=5",
            "--html",
        ])
        .arg(&page)
        .output()
        .expect("run rehearse");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = std::fs::read_to_string(&page).expect("the page");
    // Self-contained: no script, nothing fetched, the stylesheet allowed by
    // its hash.
    assert!(!html.contains("<script"), "{html}");
    assert!(!html.contains("href=\"/"), "{html}");
    assert!(html.contains("style-src 'sha256-"), "{html}");
    let mut b = Browser::start();
    b.call(
        "Page.navigate",
        json!({"url": format!("file://{}", page.display())}),
    );
    b.wait_for("document.readyState === 'complete' && !!document.getElementById('live')");
    // Three hops: the plane (its Nova with a failed try and its repair),
    // then the standalone Nova twice.
    assert_eq!(
        b.eval("document.querySelectorAll('svg.timeline').length"),
        json!(3)
    );
    let stages = b.eval(
        "[...new Set([...document.querySelectorAll('svg.timeline rect[data-stage]')].map(r => r.dataset.stage))].sort()",
    );
    let stages: Vec<String> = serde_json::from_value(stages).expect("stages");
    for s in ["contract", "expand", "migrate", "roll", "second roll"] {
        assert!(stages.contains(&s.to_owned()), "{s} in {stages:?}");
    }
    let marks = b.eval("[...new Set([...document.querySelectorAll('svg.timeline [data-mark]')].map(m => m.dataset.mark))].sort()");
    let marks: Vec<String> = serde_json::from_value(marks).expect("marks");
    assert!(marks.contains(&"failed try".to_owned()), "{marks:?}");
    assert!(marks.contains(&"repair".to_owned()), "{marks:?}");
    // The stylesheet applied (its hash matched): the bars are coloured.
    assert_eq!(
        b.eval("getComputedStyle(document.querySelector('rect[data-stage=expand]')).fill"),
        json!("rgb(91, 141, 239)")
    );
    // The one exception to the page rules: the inlined stylesheet, which
    // the page's CSP allows by its hash (and applied, above).
    assert_eq!(b.eval(PAGE_RULES), json!(["style element"]), "rehearsal");
    b.screenshot("rehearse");

    // The plan rehearsal writes the same kind of page.
    let plan_repo = FleetRepo::new();
    plan_repo
        .write("staging.yaml", staging_in_ring())
        .write("plan.yaml", PLAN.replace("0 3 1 1 *", "0 22 * * *"));
    plan_repo.commit("fleet and plan");
    let page = out_dir.path().join("plan.html");
    let out = Command::new(common::lockstep_bin())
        .args([
            "rehearse",
            "--plan",
            "--start",
            "2026-12-01T12:00:00Z",
            "--repo",
        ])
        .arg(plan_repo.path())
        .arg("--html")
        .arg(&page)
        .output()
        .expect("run rehearse --plan");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let html = std::fs::read_to_string(&page).expect("the plan page");
    assert!(html.contains("waits for the maintenance window"), "{html}");
    assert!(html.contains("class=\"timeline\""), "{html}");
    assert!(!html.contains("<script"), "{html}");
}
