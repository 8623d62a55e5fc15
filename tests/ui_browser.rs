//! The dashboard in a real browser (`docs/ui.md`): Debian's headless
//! Chromium (installed by `tests/peers/install.sh`) driven over the DevTools
//! protocol on a pipe (`--remote-debugging-pipe`: no websocket client
//! needed), against
//!
//! - `lockstep run` in sim mode on a story fleet: a plane whose hop failed
//!   for good (expand Jobs that keep failing: failed tries, repairs, then a
//!   person), a standalone Nova whose hop completed, a pull request held
//!   behind the plane's hop, and a plan waiting for its maintenance window;
//! - `lockstep run --cluster-mode kube` against a real kube-apiserver with
//!   etcd and the upstream CRDs (tests/peers/kube; `LOCKSTEP_SHARED` when
//!   not beside ../shared), the simulated operator (`common::sim_kube`)
//!   standing in for the C5C3 one through the API server, as in
//!   `run_kube.rs`: two standalone Novas; someone moves one of them off
//!   Git's chain with `kubectl patch` and the page lists it under "Needs a
//!   person" with the reason and what to do, while lockstep leaves it
//!   alone; then Git takes the other one hop further and the page, loaded
//!   once, follows that hop phase by phase (`n/4`, the progress bar, the
//!   timeline) through Server-Sent Events, without a reload;
//! - the real router over a snapshot made of hostile strings (a blocked
//!   unit whose reason, labels and pull-request reasons carry HTML, script
//!   and control characters): they must render inert.
//!
//! On every page: no inline script or style, every control labelled, and
//! every text element (SVG text, placeholders and the shown option of a
//! select included) at least 4.5:1 (3:1 when large) against the background
//! it is really drawn on (`PAGE_RULES`; shown to fail on a dark item).
//!
//! Screenshots go to `target/ui-screenshots/` for people to look at (the
//! kube story's at its in-flight moments: `kube-fleet-in-flight`,
//! `kube-fleet-next-phase`, `kube-unit-in-flight`).

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
/// labelled, every piece of text at least 4.5:1 (3:1 when large) against
/// the background it is drawn on, nothing injected.
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
  // Contrast: every element that shows text of its own, its colour
  // against the background it is really drawn on (the ancestors'
  // backgrounds composited down to the first opaque one, the canvas white
  // below), at least 4.5:1, or 3:1 for large text (24px, or 18.66px bold).
  const rgba = c => {
    const m = /^rgba?\(([\d.]+)[, ]+([\d.]+)[, ]+([\d.]+)(?:[,/ ]+([\d.]+))?\)$/.exec(c.trim());
    return m ? [+m[1], +m[2], +m[3], m[4] === undefined ? 1 : +m[4]] : null;
  };
  const over = (top, under) => [0, 1, 2].map(i => top[i] * top[3] + under[i] * (1 - top[3])).concat([1]);
  const lum = c => {
    const f = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]);
  };
  const shown = el => el.getClientRects().length > 0 && getComputedStyle(el).visibility !== 'hidden';
  let checked = 0;
  for (const node of document.querySelectorAll('body *')) {
    if (['SCRIPT', 'STYLE', 'PROGRESS', 'TITLE', 'OPTION'].includes(node.tagName.toUpperCase())) continue;
    // A select shows its chosen option; an input its value or placeholder.
    const control = node.tagName === 'SELECT' || (node.tagName === 'INPUT' && (node.value || node.placeholder));
    if (!control && ![...node.childNodes].some(n => n.nodeType === 3 && n.textContent.trim())) continue;
    if (!shown(node)) continue;
    const st = node.tagName === 'INPUT' && !node.value ? getComputedStyle(node, '::placeholder') : getComputedStyle(node);
    const svg = node instanceof SVGElement;
    let fg = rgba(svg ? st.fill : st.color);
    const layers = [];
    let bgBad = null;
    for (let a = node; a; a = a.parentElement) {
      const s = getComputedStyle(a);
      if (s.backgroundImage !== 'none') bgBad = 'background image under text';
      if (parseFloat(s.opacity) < 1) bgBad = 'opacity under 1';
      const c = rgba(s.backgroundColor);
      if (!c) { bgBad = 'unread background ' + s.backgroundColor; break; }
      if (c[3] > 0) layers.push(c);
      if (c[3] >= 1) break;
    }
    const what = node.tagName + ' "' + (node.value || node.placeholder || node.textContent).trim().slice(0, 30) + '"';
    if (!fg || bgBad) { bad.push((bgBad || 'unread colour ' + (svg ? st.fill : st.color)) + ': ' + what); continue; }
    let bg = [255, 255, 255, 1];
    for (const l of layers.reverse()) bg = over(l, bg);
    fg = over(fg, bg);
    const [hi, lo] = [lum(fg), lum(bg)].sort((x, y) => y - x);
    const ratio = (hi + 0.05) / (lo + 0.05);
    const px = parseFloat(st.fontSize), bold = parseInt(st.fontWeight, 10) >= 700;
    const need = px >= 24 || (px >= 18.66 && bold) ? 3 : 4.5;
    checked++;
    if (ratio < need) bad.push('contrast ' + ratio.toFixed(2) + ' < ' + need + ': ' + what + ' ' + st.color + ' on ' + 'rgb(' + bg.slice(0, 3).map(Math.round) + ')');
  }
  if (checked === 0) bad.push('no text checked');
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
    // Its BEL and ESC shown escaped, never raw (`ui::shown`).
    assert!(
        summary.as_str().unwrap_or("").ends_with("& \\x07\\x1b[31m"),
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

/// A GET on the dashboard; the body, or `None` while it does not answer.
fn http_get(port: u16, path: &str) -> Option<(String, String)> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\n\r\n").ok()?;
    let mut r = String::new();
    s.read_to_string(&mut r).ok()?;
    let (head, body) = r.split_once("\r\n\r\n")?;
    Some((head.to_owned(), body.to_owned()))
}

/// A unit as the JSON API gives it (`docs/ui.md`), `None` until the
/// daemon's snapshot has it.
fn api_unit(port: u16, key: &lockstep::kind::Key) -> Option<Value> {
    let path = format!(
        "/api/v1/units/{}/{}/{}",
        key.kind.as_str(),
        key.namespace,
        key.name
    );
    let (head, body) = http_get(port, &path)?;
    if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
        return None;
    }
    serde_json::from_str::<Value>(&body)
        .ok()
        .map(|v| v["unit"].clone())
}

/// The kube story's fleet: two standalone Novas; the simulated operator
/// (`common::sim_kube`) adopts each once lockstep has created it.
struct KubeFleet {
    cluster: lockstep::cluster::kube::KubeCluster,
    op: common::sim_kube::KubeOperator,
    adopted: std::collections::BTreeSet<lockstep::kind::Key>,
    rounds: usize,
    /// How long nova stays in a phase it has just entered, at least. The
    /// timeline draws a stage on the engine's clock in whole seconds: a
    /// phase left within the second it was entered has no bar.
    pace: Duration,
    /// nova's phase after the last round.
    phase: Option<String>,
}

fn kube_nova() -> lockstep::kind::Key {
    lockstep::kind::Key::new(lockstep::kind::Kind::Nova, "compute", "nova")
}

fn kube_edge() -> lockstep::kind::Key {
    lockstep::kind::Key::new(lockstep::kind::Kind::Nova, "compute", "nova-edge")
}

impl KubeFleet {
    /// One operator round, adopting first what lockstep created. Virtual
    /// time moves 30 s at most a round, half a phase of
    /// `common::kube::world`, so that each phase is written to the API
    /// server (a minute would take Expanding and its Job in one round).
    /// Errors are retried by the next round, as a controller would.
    async fn tick(&mut self) {
        use lockstep::cluster::Cluster as _;
        let mut r: Result<bool, String> = Ok(false);
        for key in [kube_nova(), kube_edge()] {
            if self.adopted.contains(&key) {
                continue;
            }
            match self.cluster.get(&key).await {
                Ok(Some(_)) => match self.op.adopt(&key).await {
                    Ok(()) => {
                        self.adopted.insert(key);
                    }
                    Err(e) => r = Err(format!("adopting {key}: {e}")),
                },
                Ok(None) => {}
                Err(e) => r = Err(e.to_string()),
            }
        }
        if r.is_ok() {
            r = self
                .op
                .step(Duration::from_secs(30))
                .await
                .map_err(|e| e.to_string());
        }
        self.rounds += 1;
        let pause = match r {
            Ok(true) => 20,
            Ok(false) => 100,
            Err(e) => {
                eprintln!("operator round failed (retrying): {e}");
                500
            }
        };
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }

    /// The object's `status.upgradePhase` as the API server has it.
    async fn phase(&self, key: &lockstep::kind::Key) -> Option<String> {
        use lockstep::cluster::Cluster as _;
        self.cluster
            .get(key)
            .await
            .ok()
            .flatten()
            .and_then(|o| o.status.upgrade_phase)
    }

    /// Steps the operator until `done` holds (checked before each round).
    fn drive(
        &mut self,
        rt: &tokio::runtime::Runtime,
        what: &str,
        limit: Duration,
        mut done: impl FnMut(&tokio::runtime::Runtime, &KubeFleet) -> bool,
    ) {
        let (start, before) = (Instant::now(), self.rounds);
        loop {
            if done(rt, self) {
                eprintln!(
                    "{what}: {:.1}s ({} operator rounds)",
                    start.elapsed().as_secs_f64(),
                    self.rounds - before
                );
                return;
            }
            assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
            rt.block_on(self.tick());
            if !self.pace.is_zero() {
                let now = rt.block_on(self.phase(&kube_nova()));
                if now != self.phase {
                    self.phase = now;
                    std::thread::sleep(self.pace);
                }
            }
        }
    }
}

/// The fleet row of `compute/nova` in the page, as a JavaScript expression.
const NOVA_ROW: &str = "[...document.querySelectorAll('table.units tbody tr')].find(r => r.cells[1].innerText.trim() === 'compute/nova')";

#[test]
fn a_blocked_unit_and_a_moving_hop_on_a_real_api_server() {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::{Api, PostParams};

    let t0 = Instant::now();
    let server = common::ApiServer::start();
    eprintln!("API server ready: {:.1}s", t0.elapsed().as_secs_f64());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let repo = FleetRepo::new();
    repo.write(
        "standalone/compute/nova.yaml",
        nova("nova", "2026.1", "2026.1"),
    )
    .write(
        "standalone/compute/nova-edge.yaml",
        nova("nova-edge", "2026.1", "2026.1"),
    );
    repo.commit("two Novas at 2026.1");
    let mut fleet = rt.block_on(async {
        let cluster = lockstep::cluster::kube::KubeCluster::from_kubeconfig(&server.kubeconfig())
            .await
            .expect("the kubeconfig");
        let client = cluster.client().clone();
        // A plain object lockstep ignores: the test creates it.
        Api::<Namespace>::all(client.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": "compute"}}))
                    .expect("namespace"),
            )
            .await
            .expect("create the namespace");
        KubeFleet {
            cluster,
            op: common::sim_kube::KubeOperator::new(client, common::kube::world()),
            adopted: Default::default(),
            rounds: 0,
            pace: Duration::ZERO,
            phase: None,
        }
    });
    let logs = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let daemon = common::kube::Daemon::start(
        "lockstep",
        &server,
        repo.path(),
        logs.path(),
        &["--ui-listen", &listen],
        &[],
    );
    let done = |key: &lockstep::kind::Key| {
        api_unit(port, key).is_some_and(|u| u["attention"] == json!("done"))
    };
    fleet.drive(
        &rt,
        "both Novas installed",
        Duration::from_secs(45),
        |_, f| f.adopted.len() == 2 && done(&kube_nova()) && done(&kube_edge()),
    );

    // A careless person moves nova-edge off Git's chain with kubectl,
    // straight through the API server, to a release Git's chain never
    // reaches: lockstep must not guess where it belongs.
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(server.kubeconfig())
        .args([
            "-n",
            "compute",
            "patch",
            "novas.nova.openstack.c5c3.io",
            "nova-edge",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"openStackRelease":"2025.2"}}"#,
        ])
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "kubectl patch: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let base = format!("http://127.0.0.1:{port}");
    let mut b = Browser::start();
    b.open(&format!("{base}/"));
    let edge_item = "[...document.querySelectorAll('#attention li.blocked')].find(l => l.innerText.includes('compute/nova-edge'))";
    b.wait_for(&format!("!!{edge_item}"));
    let blocked = b.eval(&format!("{edge_item}.innerText"));
    let blocked = blocked.as_str().unwrap_or("");
    assert!(
        blocked.starts_with("blocked Nova compute/nova-edge"),
        "{blocked}"
    );
    assert!(
        blocked.contains("is at 2025.2 in the cluster; Git's accepted chain goes"),
        "{blocked}"
    );
    assert!(
        blocked.contains("What to do: move Git to where the cluster is"),
        "{blocked}"
    );
    assert_eq!(
        b.eval(&format!(
            "{edge_item}.querySelector('.reason').innerText.includes('2025.2')"
        )),
        json!(true)
    );
    let row = b.eval(
        "[...document.querySelectorAll('table.units tbody tr')].filter(r => r.cells[1].innerText.trim() === 'compute/nova-edge').map(r => r.className + ' | ' + r.cells[4].innerText.trim())",
    );
    assert_eq!(row, json!(["blocked | blocked"]));
    // Its Release column says what the cluster runs, not "?".
    let release = b.eval(
        "[...document.querySelectorAll('table.units tbody tr')].find(r => r.cells[1].innerText.trim() === 'compute/nova-edge').cells[2].innerText.trim()"
    );
    assert_eq!(release, json!("2025.2 → 2026.1"));
    rules(&mut b, "kube fleet, blocked");
    // lockstep left the edited object alone: it applied each Nova once.
    assert_eq!(
        daemon.applied_sorted(),
        [
            (kube_nova().to_string(), "2026.1".to_owned()),
            (kube_edge().to_string(), "2026.1".to_owned()),
        ]
    );

    // A hop in flight: Git takes nova to 2026.2; the page, loaded once,
    // follows it through Server-Sent Events (the window's marker survives,
    // the marker on the old <main> goes with it).
    b.eval("window.__kube = 1; document.getElementById('live').dataset.mark = 'old'; true");
    repo.write(
        "standalone/compute/nova.yaml",
        nova("nova", "2026.2", "2026.2"),
    );
    repo.commit("nova to 2026.2");
    fleet.pace = Duration::from_millis(1500);
    let first = std::cell::RefCell::new(None::<String>);
    fleet.drive(
        &rt,
        "nova's hop in flight",
        Duration::from_secs(45),
        |rt, f| {
            let p = rt.block_on(f.phase(&kube_nova()));
            *first.borrow_mut() = p.clone();
            p.is_some()
        },
    );
    let first = first.into_inner().expect("a phase");
    let step = |p: &str| match p {
        "Expanding" => 1,
        "Migrating" => 2,
        "RollingUpdate" => 3,
        "Contracting" => 4,
        _ => panic!("unknown phase {p}"),
    };
    let s1 = step(&first);
    eprintln!("in flight: {first} ({s1}/4)");
    b.wait_for(&format!(
        "window.__kube === 1 && document.getElementById('live').dataset.mark === undefined && ({NOVA_ROW})?.querySelector('progress')?.value === {s1}"
    ));
    let text = b.eval(&format!("({NOVA_ROW}).innerText"));
    let text = text.as_str().unwrap_or("");
    assert!(text.contains("2026.1 → 2026.2"), "{text}");
    assert!(text.contains(&format!("{first} ({s1}/4)")), "{text}");
    assert_eq!(b.eval(&format!("({NOVA_ROW}).className")), json!("moving"));
    // The blocked unit is still there, and first in the table: the most
    // urgent first.
    assert_eq!(b.eval(&format!("!!{edge_item}")), json!(true));
    assert_eq!(
        b.eval("document.querySelector('table.units tbody tr').cells[1].innerText.trim()"),
        json!("compute/nova-edge")
    );
    rules(&mut b, "kube fleet, in flight");
    b.screenshot("kube-fleet-in-flight");

    // The operator moves on; the next phase arrives without a reload.
    b.eval("document.getElementById('live').dataset.mark = 'old'; true");
    let later = std::cell::RefCell::new(None::<String>);
    fleet.drive(
        &rt,
        "nova's next phase",
        Duration::from_secs(30),
        |rt, f| {
            let p = rt.block_on(f.phase(&kube_nova()));
            let moved = p.as_deref() != Some(first.as_str());
            *later.borrow_mut() = p;
            moved
        },
    );
    let later = later.into_inner();
    let (s2, word) = match &later {
        Some(p) => (step(p), format!("{p} ({}/4)", step(p))),
        None => (4, "done".to_owned()),
    };
    assert!(s2 > s1, "{first} then {later:?}");
    eprintln!("then: {word}");
    b.wait_for(&format!(
        "window.__kube === 1 && document.getElementById('live').dataset.mark === undefined && ({NOVA_ROW})?.querySelector('progress')?.value === {s2}"
    ));
    let text = b.eval(&format!("({NOVA_ROW}).innerText"));
    assert!(text.as_str().unwrap_or("").contains(&word), "{text}");
    b.screenshot("kube-fleet-next-phase");

    // The unit's own page, still in flight: its hop's timeline has no end
    // yet; then the hop completes and the page says so, live.
    b.open(&format!("{base}/unit/Nova/compute/nova"));
    b.wait_for("!!document.querySelector('svg.timeline rect[data-stage]')");
    let caption = b.eval("document.querySelector('figure.hop figcaption').innerText");
    let caption = caption.as_str().unwrap_or("");
    assert!(caption.contains("2026.1 → 2026.2"), "{caption}");
    if later.is_some() {
        assert!(caption.contains("in flight"), "{caption}");
        rules(&mut b, "kube unit, in flight");
        b.screenshot("kube-unit-in-flight");
    }
    b.eval("window.__kube = 2; true");
    fleet.drive(
        &rt,
        "nova's hop complete",
        Duration::from_secs(45),
        |_, _| done(&kube_nova()),
    );
    b.wait_for(
        "window.__kube === 2 && document.querySelector('figure.hop figcaption').innerText.includes('complete after')",
    );
    let stages = b.eval(
        "[...new Set([...document.querySelectorAll('svg.timeline rect[data-stage]')].map(r => r.dataset.stage))]",
    );
    let stages: Vec<String> = serde_json::from_value(stages).expect("stages");
    for s in ["expand", "migrate", "roll", "contract"] {
        assert!(stages.contains(&s.to_owned()), "{s} in {stages:?}");
    }
    rules(&mut b, "kube unit, complete");
    b.screenshot("kube-unit-complete");
    // Through it all, lockstep never touched the edited Nova: one apply of
    // each install and one of the hop.
    let mut want = vec![
        (kube_nova().to_string(), "2026.1".to_owned()),
        (kube_nova().to_string(), "2026.2".to_owned()),
        (kube_edge().to_string(), "2026.1".to_owned()),
    ];
    want.sort();
    assert_eq!(daemon.applied_sorted(), want);
    let edge = rt
        .block_on(lockstep::cluster::Cluster::get(
            &fleet.cluster,
            &kube_edge(),
        ))
        .expect("get nova-edge")
        .expect("nova-edge exists");
    assert_eq!(edge.release.as_deref(), Some("2025.2"));
    drop(b);
    drop(daemon);
    eprintln!("total: {:.1}s", t0.elapsed().as_secs_f64());
}

/// `/api/v1/hops` as JSON, with the snapshot's `timelineStart`.
fn api_hops(port: u16) -> Option<(Vec<Value>, jiff::Timestamp)> {
    let (_, body) = http_get(port, "/api/v1/snapshot")?;
    let snap: Value = serde_json::from_str(&body).ok()?;
    let start: jiff::Timestamp = snap["timelineStart"].as_str()?.parse().ok()?;
    let (_, body) = http_get(port, "/api/v1/hops")?;
    Some((serde_json::from_str(&body).ok()?, start))
}

/// nova's finished hop to 2026.2 in `/api/v1/hops`: its stages (in order,
/// each once), when it began and ended on the wall clock (whole seconds).
fn finished_hop(port: u16) -> Option<(Vec<String>, i64, i64)> {
    let (hops, start) = api_hops(port)?;
    let h = hops
        .iter()
        .find(|h| h["unit"] == json!(kube_nova().to_string()) && h["to"] == json!("2026.2"))?;
    let ended = h["ended"].as_i64()?;
    let mut stages: Vec<String> = Vec::new();
    for seg in h["lanes"][0]["segments"].as_array()? {
        let st = seg["stage"].as_str()?.to_owned();
        if stages.last() != Some(&st) {
            stages.push(st);
        }
    }
    let t0 = start.as_second();
    Some((stages, t0 + h["started"].as_i64()?, t0 + ended))
}

/// The dashboard's history survives a restart (`docs/ui.md`, "What
/// survives a restart"): a Nova's hop completes on a real API server,
/// lockstep is killed and started again, and the new process shows the
/// finished hop, with its phases at the wall-clock times the first one saw,
/// in `/api/v1/hops` and on the unit's page in the browser, though it
/// applied nothing and saw none of it. Then the kept value is replaced with
/// garbage: the next start warns once, runs, and writes it anew.
#[test]
fn the_hop_history_survives_a_restart_on_a_real_api_server() {
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
    use kube::api::{Api, Patch, PatchParams, PostParams};

    let t0 = Instant::now();
    let server = common::ApiServer::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let repo = FleetRepo::new();
    repo.write(
        "standalone/compute/nova.yaml",
        nova("nova", "2026.1", "2026.1"),
    );
    repo.commit("nova at 2026.1");
    let (mut fleet, records) = rt.block_on(async {
        let cluster = lockstep::cluster::kube::KubeCluster::from_kubeconfig(&server.kubeconfig())
            .await
            .expect("the kubeconfig");
        let client = cluster.client().clone();
        Api::<Namespace>::all(client.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": "compute"}}))
                    .expect("namespace"),
            )
            .await
            .expect("create the namespace");
        let records: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        (
            KubeFleet {
                cluster,
                op: common::sim_kube::KubeOperator::new(client, common::kube::world()),
                adopted: Default::default(),
                rounds: 0,
                pace: Duration::ZERO,
                phase: None,
            },
            records,
        )
    });
    let kept = || -> Option<String> {
        let cm = rt.block_on(records.get_opt("lockstep-history")).ok()??;
        cm.data?
            .remove(&format!("history.{}", common::kube::CLUSTER))
    };
    let logs = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut first = common::kube::Daemon::start(
        "lockstep",
        &server,
        repo.path(),
        logs.path(),
        &["--ui-listen", &listen],
        &[],
    );
    let done =
        |port: u16| api_unit(port, &kube_nova()).is_some_and(|u| u["attention"] == json!("done"));
    fleet.drive(&rt, "nova installed", Duration::from_secs(45), |_, f| {
        !f.adopted.is_empty() && done(port)
    });
    repo.write(
        "standalone/compute/nova.yaml",
        nova("nova", "2026.2", "2026.2"),
    );
    repo.commit("nova to 2026.2");
    // Each phase lasts past a second, so each has its bar.
    fleet.pace = Duration::from_millis(1500);
    let before = std::cell::RefCell::new(None);
    fleet.drive(
        &rt,
        "nova's hop complete",
        Duration::from_secs(60),
        |_, _| {
            *before.borrow_mut() = finished_hop(port);
            before.borrow().is_some()
        },
    );
    let before = before.into_inner().expect("the finished hop");
    let (stages, began, ended) = before.clone();
    eprintln!("hop before the restart: {before:?}");
    assert_eq!(
        stages[..4],
        ["expand", "migrate", "roll", "contract"],
        "{before:?}"
    );
    assert!(ended - began >= 6, "{before:?}");
    // Written by the first process, within a pass or two.
    let wait_kept = |what: &str, ok: &dyn Fn(&str) -> bool| {
        let t = Instant::now();
        loop {
            if kept().is_some_and(|k| ok(&k)) {
                return;
            }
            assert!(
                t.elapsed() < Duration::from_secs(40),
                "{what}: {:?}",
                kept()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    wait_kept("the hop complete, kept", &|k| {
        k.contains("\"did\":\"hopComplete\"")
    });
    // In a ConfigMap of its own: the verdict record's (if one was written)
    // holds no history, so a large history can never make its write fail.
    let in_records = rt
        .block_on(records.get_opt("lockstep-records"))
        .expect("read lockstep-records")
        .and_then(|cm| cm.data)
        .unwrap_or_default();
    assert!(
        in_records.keys().all(|k| !k.starts_with("history.")),
        "{:?}",
        in_records.keys().collect::<Vec<_>>()
    );
    first.kill();
    let hops_of_first = first.applied_sorted();

    // A new process, on a new port: it never saw the hop.
    let port2 = free_port();
    let listen2 = format!("127.0.0.1:{port2}");
    let second = common::kube::Daemon::start(
        "lockstep-2",
        &server,
        repo.path(),
        logs.path(),
        &["--ui-listen", &listen2],
        &[],
    );
    let t = Instant::now();
    let after = loop {
        if let Some(h) = finished_hop(port2) {
            break h;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the restarted dashboard shows no finished hop: {:?}",
            http_get(port2, "/api/v1/hops")
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    // The same hop: its phases, and its times to the second (kept in whole
    // seconds; each process counts from its own second 0).
    assert_eq!(after.0, before.0, "{after:?} {before:?}");
    assert!(
        (after.1 - before.1).abs() <= 1 && (after.2 - before.2).abs() <= 1,
        "{after:?} {before:?}"
    );
    assert!(
        second
            .records()
            .iter()
            .any(|r| r["fields"]["message"] == "dashboard history read back"
                && r["fields"]["entries"].as_u64().is_some_and(|n| n >= 6)),
        "{}",
        second.text()
    );
    // The unit's page in the browser: the hop complete, every stage drawn,
    // the time it began on the calendar.
    let mut b = Browser::start();
    b.open(&format!("http://127.0.0.1:{port2}/unit/Nova/compute/nova"));
    b.wait_for(
        "[...document.querySelectorAll('figure.hop figcaption')].some(c => c.innerText.includes('2026.1 → 2026.2') && c.innerText.includes('complete after'))",
    );
    let stages = b.eval(
        "[...new Set([...document.querySelectorAll('svg.timeline rect[data-stage]')].map(r => r.dataset.stage))]",
    );
    let stages: Vec<String> = serde_json::from_value(stages).expect("stages");
    for s in ["expand", "migrate", "roll", "contract"] {
        assert!(stages.contains(&s.to_owned()), "{s} in {stages:?}");
    }
    let when = b.eval(
        "[...document.querySelectorAll('figure.hop figcaption')].find(c => c.innerText.includes('2026.1 → 2026.2')).querySelector('time').dateTime",
    );
    let want = jiff::Timestamp::from_second(after.1)
        .unwrap()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    assert_eq!(when, json!(want));
    rules(&mut b, "kube unit, after a restart");
    b.screenshot("kube-unit-after-restart");
    drop(b);
    // It showed the hop without doing it again.
    assert!(second.applied().is_empty(), "{:?}", second.applied());
    assert_eq!(hops_of_first.len(), 2, "{hops_of_first:?}");
    drop(second);

    // Garbage in the kept value (not lockstep's writing): one warning, the
    // daemon runs and the dashboard answers (a write of something new would
    // replace the value).
    rt.block_on(records.patch(
        "lockstep-history",
        &PatchParams::apply("someone-else").force(),
        &Patch::Apply(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "lockstep-history"},
            "data": {format!("history.{}", common::kube::CLUSTER): "{\"version\":1,\"entries\":[{\"did\":\"phase\",\"t\":\"<b>\"}"}
        })),
    ))
    .expect("corrupt the kept history");
    let port3 = free_port();
    let listen3 = format!("127.0.0.1:{port3}");
    let mut third = common::kube::Daemon::start(
        "lockstep-3",
        &server,
        repo.path(),
        logs.path(),
        &["--ui-listen", &listen3],
        &[],
    );
    let t = Instant::now();
    while !done(port3) {
        assert!(t.elapsed() < Duration::from_secs(60), "{}", third.text());
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(third.alive());
    let warned: Vec<Value> = third
        .records()
        .into_iter()
        .filter(|r| {
            r["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("kept history cannot be read"))
        })
        .collect();
    assert_eq!(warned.len(), 1, "{}", third.text());
    assert!(!third.text().contains("<b>"), "nothing read is logged");
    // Nothing to show from before (the value was dropped), nothing new.
    assert_eq!(
        api_hops(port3).map(|(h, _)| h.len()),
        Some(0),
        "{:?}",
        http_get(port3, "/api/v1/hops")
    );
    drop(third);
    eprintln!("total: {:.1}s", t0.elapsed().as_secs_f64());
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
        earlier: Vec::new(),
        file: Arc::from(format!("{hostile}.yaml")),
        from: Some("2025.2".into()),
        release: Some(hostile.into()),
        image: None,
        children: BTreeMap::new(),
        abort: false,
        reconfigured: false,
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
                removed: None,
            }),
            next: Next::Blocked(format!("blocked because {hostile}")),
            progress: BTreeMap::new(),
            needs_person: None,
            stalled: None,
            asked: Default::default(),
            waiting: None,
            cluster_release: None,
            settled: Default::default(),
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
    // Text as text; its control characters shown escaped (`ui::shown`).
    assert_eq!(
        cell,
        json!(format!("? → {}", lockstep::escape::escape(hostile)))
    );
    let raw = b.eval("document.documentElement.outerHTML");
    assert!(
        !raw.as_str().unwrap_or("").contains(['\u{1b}', '\u{7}']),
        "a control character reached the page"
    );
    rules(&mut b, "hostile fleet");
    b.screenshot("hostile");
    // The contrast rule can fail, and it judges text on the background it
    // is drawn on: the needs-a-person item on dark grey (its dark text
    // would pass on white).
    b.eval("(() => { const s = document.styleSheets[0]; s.insertRule('ul.attention > li { background: #555 }', s.cssRules.length); return true; })()");
    let bad: Vec<String> = serde_json::from_value(b.eval(PAGE_RULES)).expect("rules");
    assert!(
        bad.iter().any(|m| m.starts_with("contrast")
            && m.contains("P \"blocked because")
            && m.ends_with("on rgb(85,85,85)")),
        "{bad:?}"
    );
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
        loopback: true,
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
