//! The read-only dashboard (`docs/ui.md`): the daemon publishes a
//! [`Snapshot`] at the end of every pass ([`Publisher`], a `watch` channel:
//! readers never hold up a pass), and an axum router serves it as
//! server-rendered pages (`html`, `svg`), a JSON API under `/api/v1/` and
//! Server-Sent Events that tell a page to refresh itself. The view model is
//! the core's `view` module; this module only gathers and renders.
//!
//! Every string from Git, the cluster or a webhook is escaped by maud (text
//! and attributes alike); the pages carry a Content-Security-Policy that
//! allows only our own script and stylesheet files, and an optional bearer
//! token or basic auth (read from a file, compared in constant time, never
//! rendered or logged).

pub mod html;
pub mod keep;
pub mod svg;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Serialize;
use tokio::sync::watch;

use crate::daemon::{Did, Entry};
use crate::kind::{Key, Kind};
use crate::rollout::UnitReport;
use crate::secret::Secret;
use crate::view::{self, Event, Hop, PlanView, PullView, UnitView};

/// How many journal entries the daemon keeps for the timelines: the
/// newest, so memory stays bounded however long it runs.
pub const JOURNAL_CAP: usize = 20_000;

/// What a page is drawn from: one pass's state, shared read-only.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    /// Counts passes: the Server-Sent Events say it.
    pub seq: u64,
    pub cluster: String,
    pub branch: String,
    pub head: Option<String>,
    /// RFC 3339, the daemon's clock.
    pub generated_at: String,
    /// The wall time of the timelines' second 0: the oldest entry kept
    /// (history read back from the cluster included), or this process's
    /// start.
    pub timeline_start: String,
    pub counts: view::Counts,
    /// Most urgent first.
    pub units: Vec<UnitView>,
    pub pulls: Vec<PullView>,
    pub plans: Vec<PlanView>,
    /// The recent hops, oldest first.
    pub hops: Vec<Hop>,
    /// Seconds since the timelines' start (where open hops end).
    pub now: u64,
    pub source_error: Option<String>,
    /// The judged commits (for the unit histories); not in the JSON.
    #[serde(skip)]
    pub report: Option<Arc<crate::history::CheckReport>>,
    #[serde(skip)]
    pub commit_url: Option<String>,
    /// `timeline_start` as a time (for the pages' wall-clock captions).
    #[serde(skip)]
    pub origin: Option<jiff::Timestamp>,
}

impl Snapshot {
    pub fn empty(cluster: &str) -> Self {
        Snapshot {
            seq: 0,
            cluster: cluster.to_owned(),
            branch: String::new(),
            head: None,
            generated_at: String::new(),
            timeline_start: String::new(),
            counts: view::Counts::default(),
            units: Vec::new(),
            pulls: Vec::new(),
            plans: Vec::new(),
            hops: Vec::new(),
            now: 0,
            source_error: None,
            report: None,
            commit_url: None,
            origin: None,
        }
    }

    pub fn unit(&self, key: &Key) -> Option<&UnitView> {
        self.units.iter().find(|u| {
            u.kind == key.kind.as_str() && u.namespace == key.namespace && u.name == key.name
        })
    }
}

/// The pass's state the snapshot is made of.
pub struct PassState<'a> {
    pub cluster: &'a str,
    pub branch: &'a str,
    pub head: Option<String>,
    pub report: Option<Arc<crate::history::CheckReport>>,
    pub units: &'a BTreeMap<Key, UnitReport>,
    /// The engine's clock (journal time) and the wall time, now.
    pub now: Duration,
    pub wall: jiff::Timestamp,
    pub source_error: Option<String>,
}

/// The daemon's end of the dashboard: what it keeps between passes for the
/// pages (a bounded journal, pull-request verdicts, plan views) and the
/// channel it publishes on.
pub struct Publisher {
    tx: watch::Sender<Arc<Snapshot>>,
    /// The entries the timelines are drawn from, each with its wall-clock
    /// time (history read back from the cluster first), oldest first.
    journal: VecDeque<keep::Kept>,
    /// How many shown entries were noted: the daemon writes the history
    /// when this moved.
    noted: u64,
    /// This process's start on the wall clock (the engine clock's zero).
    started: Option<jiff::Timestamp>,
    pulls: BTreeMap<u64, PullView>,
    plans: Vec<PlanView>,
    /// Labels per unit, kept while its document is the same text.
    labels: HashMap<Key, (Arc<str>, BTreeMap<String, String>)>,
    seq: u64,
    commit_url: Option<String>,
    /// How many hops the snapshot keeps (the newest).
    max_hops: usize,
}

impl Publisher {
    pub fn new(
        cluster: &str,
        commit_url: Option<String>,
    ) -> (Self, watch::Receiver<Arc<Snapshot>>) {
        let (tx, rx) = watch::channel(Arc::new(Snapshot::empty(cluster)));
        (
            Publisher {
                tx,
                journal: VecDeque::new(),
                noted: 0,
                started: None,
                pulls: BTreeMap::new(),
                plans: Vec::new(),
                labels: HashMap::new(),
                seq: 0,
                commit_url,
                max_hops: 500,
            },
            rx,
        )
    }

    /// Notes what the engine did at `wall` (the calendar time of `e.at`).
    /// Only what the pages draw is kept.
    pub fn note(&mut self, e: Entry, wall: jiff::Timestamp) {
        if !keep::shown(&e.what) {
            return;
        }
        if self.journal.len() >= JOURNAL_CAP {
            self.journal.pop_front();
        }
        self.journal.push_back(keep::Kept { wall, what: e.what });
        self.noted += 1;
    }

    /// Puts the history read back from the cluster (oldest first) before
    /// what this process noted since (anything at or before the newest
    /// entry read back is in it already: a leader that lost and regained
    /// the lease wrote it). The cap holds.
    pub fn restore(&mut self, entries: Vec<keep::Kept>) {
        let Some(last) = entries.last().map(|k| k.wall) else {
            return;
        };
        let own: Vec<keep::Kept> = self.journal.drain(..).filter(|k| k.wall > last).collect();
        self.journal.extend(entries);
        self.journal.extend(own);
        let extra = self.journal.len().saturating_sub(JOURNAL_CAP);
        self.journal.drain(..extra);
    }

    /// How many shown entries were noted so far.
    pub fn noted(&self) -> u64 {
        self.noted
    }

    /// The history to keep in the cluster: the newest entries within
    /// `budget` bytes (`keep::encode`), and how many.
    pub fn history(&self, budget: usize) -> (String, usize) {
        keep::encode(self.journal.iter(), budget)
    }

    pub fn pull(&mut self, number: u64, head: &str, commits: &[crate::verdict::CommitReport]) {
        self.pulls
            .insert(number, view::pull_view(number, head, commits));
    }

    /// Forgets requests that are no longer open.
    pub fn keep_pulls(&mut self, open: impl Iterator<Item = u64>) {
        let open: std::collections::HashSet<u64> = open.collect();
        self.pulls.retain(|n, _| open.contains(n));
    }

    pub fn plans(&mut self, plans: Vec<PlanView>) {
        self.plans = plans;
    }

    /// Builds this pass's snapshot and, when it differs from the last one
    /// in anything a page shows, sends it (the SSE streams wake on a send).
    pub fn publish(&mut self, s: PassState<'_>) {
        // Units gone from Git are forgotten, and the document text each kept.
        self.labels.retain(|k, _| s.units.contains_key(k));
        let labels = &mut self.labels;
        let units = view::fleet(s.units, |k, r| {
            let Some(doc) = r
                .chain
                .steps
                .last()
                .and_then(|st| st.document.as_ref().ok())
            else {
                return BTreeMap::new();
            };
            match labels.get(k) {
                Some((text, l)) if Arc::ptr_eq(text, doc.shared()) => l.clone(),
                _ => {
                    let l = view::labels_of(doc.text());
                    labels.insert(k.clone(), (doc.shared().clone(), l.clone()));
                    l
                }
            }
        });
        // The timelines count seconds from the oldest entry kept, or from
        // this process's start: on the wall clock, so that history from an
        // earlier process lines up with this one's (in virtual time the
        // wall clock is the virtual one: second 0 is the world's zero).
        let started = *self.started.get_or_insert_with(|| {
            jiff::SignedDuration::try_from(s.now)
                .ok()
                .and_then(|d| s.wall.checked_sub(d).ok())
                .unwrap_or(s.wall)
        });
        let start = self
            .journal
            .front()
            .map_or(started, |k| k.wall.min(started));
        let since =
            |t: jiff::Timestamp| Duration::try_from(t.duration_since(start)).unwrap_or_default();
        let events = events_at(self.journal.iter().map(|k| (since(k.wall), &k.what)), &[]);
        let now = since(s.wall).as_secs();
        let mut hops = view::timeline(&events, now);
        if hops.len() > self.max_hops {
            hops.drain(..hops.len() - self.max_hops);
        }
        let pulls: Vec<PullView> = self.pulls.values().cloned().collect();
        {
            let last = self.tx.borrow();
            let same = last.seq > 0
                && last.units == units
                && last.pulls == pulls
                && last.plans == self.plans
                && last.hops == hops
                && last.head == s.head
                && last.source_error == s.source_error;
            if same {
                return;
            }
        }
        self.seq += 1;
        let snap = Snapshot {
            seq: self.seq,
            cluster: s.cluster.to_owned(),
            branch: s.branch.to_owned(),
            head: s.head,
            generated_at: s.wall.to_string(),
            timeline_start: start.to_string(),
            counts: view::counts(&units),
            units,
            pulls,
            plans: self.plans.clone(),
            hops,
            now,
            source_error: s.source_error,
            report: s.report,
            commit_url: self.commit_url.clone(),
            origin: Some(start),
        };
        self.tx.send_replace(Arc::new(snap));
    }
}

/// The journal (and a simulated operator's Events) as the timeline reads
/// them, in time order (seconds on the engine's clock).
pub fn events<'a>(
    journal: impl Iterator<Item = &'a Entry>,
    operator: &[crate::sim::Event],
) -> Vec<(u64, Event)> {
    events_at(journal.map(|e| (e.at, &e.what)), operator)
}

/// [`events`] of entries timed by the caller (the dashboard: on the wall
/// clock, from its timelines' start).
pub fn events_at<'a>(
    journal: impl Iterator<Item = (Duration, &'a Did)>,
    operator: &[crate::sim::Event],
) -> Vec<(u64, Event)> {
    let mut out: Vec<(Duration, Event)> = Vec::new();
    for (at, what) in journal {
        let ev = match what {
            Did::Applied {
                unit,
                sha,
                from,
                to,
                reassert: false,
            } => Event::Applied {
                unit: unit.clone(),
                sha: sha.clone(),
                from: from.clone(),
                to: to.clone(),
            },
            Did::Phase { object, phase } => Event::Phase {
                object: object.clone(),
                phase: phase.clone(),
            },
            Did::Complete { object } => Event::Complete {
                object: object.clone(),
            },
            Did::HopComplete { unit, sha } => Event::HopComplete {
                unit: unit.clone(),
                sha: sha.clone(),
            },
            Did::Repaired { object, message } => Event::Repaired {
                object: object.clone(),
                message: message.clone(),
            },
            // A rehearsal has the operator's own Events for failures.
            Did::Failed { object, reason } if operator.is_empty() => Event::Operator {
                object: object.clone(),
                reason: reason.clone(),
                warning: true,
            },
            Did::NeedsPerson {
                object, message, ..
            } => Event::NeedsPerson {
                object: object.clone(),
                message: message.clone(),
            },
            _ => continue,
        };
        out.push((at, ev));
    }
    for e in operator.iter().filter(|e| !e.reason.starts_with("Repair")) {
        out.push((
            e.at,
            Event::Operator {
                object: e.key.clone(),
                reason: e.reason.clone(),
                warning: e.warning,
            },
        ));
    }
    // Stable: the journal's own order holds within a second.
    out.sort_by_key(|(at, _)| *at);
    out.into_iter().map(|(at, e)| (at.as_secs(), e)).collect()
}

/// Who may read the dashboard: nobody is asked when both are `None`.
#[derive(Clone, Default)]
pub struct Auth {
    pub token: Option<Secret>,
    /// `user:password`.
    pub basic: Option<Secret>,
    /// The dashboard listens on a loopback address: only requests that
    /// name a loopback host (`localhost`, `*.localhost`, `127.0.0.1`,
    /// `[::1]`, any port) are answered. A page of another site whose name
    /// its owner points at 127.0.0.1 (DNS rebinding) sends that name, and
    /// could otherwise read a dashboard without credentials from the
    /// browser of anyone running it locally.
    pub loopback: bool,
}

/// Whether a request names a loopback host (`Host`, or an HTTP/2
/// request's authority).
fn names_loopback(req: &axum::extract::Request) -> bool {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| req.uri().authority().map(|a| a.as_str()));
    // No name at all (an HTTP/1.0 client of its own): not a browser, so
    // not a page of another site; rebinding needs a browser, and every
    // browser sends `Host`.
    let Some(host) = host else {
        return true;
    };
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split_once(']').map_or(rest, |(h, _)| h),
        None => match host.rsplit_once(':') {
            Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
            _ => host,
        },
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost"
        || name.ends_with(".localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

impl Auth {
    /// Whether the request's `Authorization` header carries a credential
    /// this accepts (constant-time comparisons; the header is never logged).
    pub fn allows(&self, headers: &HeaderMap) -> bool {
        if self.token.is_none() && self.basic.is_none() {
            return true;
        }
        let Some(value) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
        else {
            return false;
        };
        let (scheme, rest) = value.split_once(' ').unwrap_or((value, ""));
        let rest = rest.trim();
        if scheme.eq_ignore_ascii_case("bearer") {
            return self
                .token
                .as_ref()
                .is_some_and(|t| t.matches(rest.as_bytes()));
        }
        if scheme.eq_ignore_ascii_case("basic") {
            use base64::Engine as _;
            let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(rest) else {
                return false;
            };
            return self.basic.as_ref().is_some_and(|b| b.matches(&decoded));
        }
        false
    }
}

/// The Content-Security-Policy of every answer: our own script, stylesheet
/// and images only; no inline script or style, no frames, no plugins.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

#[derive(Clone)]
struct App {
    snap: watch::Receiver<Arc<Snapshot>>,
    auth: Arc<Auth>,
    /// Event streams open at once ([`SSE_MAX`]).
    streams: Arc<tokio::sync::Semaphore>,
}

/// The dashboard's routes over the daemon's snapshots.
pub fn router(snap: watch::Receiver<Arc<Snapshot>>, auth: Auth) -> Router {
    let app = App {
        snap,
        auth: Arc::new(auth),
        streams: Arc::new(tokio::sync::Semaphore::new(SSE_MAX)),
    };
    Router::new()
        .route("/", get(fleet_page))
        .route("/unit/{kind}/{namespace}/{name}", get(unit_page))
        .route("/hops", get(hops_page))
        .route("/plans", get(plans_page))
        .route("/events", get(sse))
        .route("/static/ui.js", get(script))
        .route("/static/ui.css", get(style))
        .route("/api/v1/snapshot", get(api_snapshot))
        .route("/api/v1/units", get(api_units))
        .route("/api/v1/units/{kind}/{namespace}/{name}", get(api_unit))
        .route("/api/v1/hops", get(api_hops))
        .route("/api/v1/plans", get(api_plans))
        .route("/api/v1/pulls", get(api_pulls))
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(app.clone(), guard))
        .with_state(app)
}

/// Auth first, then the security headers on every answer.
async fn guard(
    State(app): State<App>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let mut res = if app.auth.loopback && !names_loopback(&req) {
        (
            StatusCode::MISDIRECTED_REQUEST,
            "this dashboard answers only requests for localhost\n",
        )
            .into_response()
    } else if app.auth.allows(req.headers()) {
        next.run(req).await
    } else {
        let challenge = if app.auth.basic.is_some() {
            "Basic realm=\"lockstep\", charset=\"UTF-8\""
        } else {
            "Bearer realm=\"lockstep\""
        };
        (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, challenge)],
            "authentication required\n",
        )
            .into_response()
    };
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    res
}

fn current(app: &App) -> Arc<Snapshot> {
    app.snap.borrow().clone()
}

fn html_page(body: maud::Markup) -> Response {
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        shown(body.into_string()),
    )
        .into_response()
}

/// A page as a person reads it: maud escapes HTML, and this escapes what
/// HTML does not (`docs/gate.md`, "Text from others"): an ANSI sequence,
/// a bidi override or an invisible character from a commit summary, a
/// file name or an operator's message would otherwise reach the browser
/// raw, where a bidi override reorders what it shows. One pass over every
/// page rather than a wrapper at each field, so no field can be missed.
/// Newlines, carriage returns and tabs are kept: HTML shows them as
/// spaces, and the page's own style sheet has them.
pub(crate) fn shown(page: String) -> String {
    use crate::escape::{escape, is_escaped};
    let hostile = |c: char| is_escaped(c) && !matches!(c, '\n' | '\r' | '\t');
    if !page.chars().any(hostile) {
        return page;
    }
    let mut out = String::with_capacity(page.len() + 64);
    let mut buf = [0u8; 4];
    for c in page.chars() {
        if hostile(c) {
            out.push_str(&escape(c.encode_utf8(&mut buf)));
        } else {
            out.push(c);
        }
    }
    out
}

fn pairs(q: &Option<String>) -> Vec<(String, String)> {
    q.as_deref()
        .map(|q| {
            url_pairs(q)
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect()
        })
        .unwrap_or_default()
}

/// `a=b&c=d` with `+` and `%XX` decoded (invalid UTF-8 replaced).
fn url_pairs(q: &str) -> Vec<(&str, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (k, decode(v))
        })
        .collect()
}

fn decode(v: &str) -> String {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                match std::str::from_utf8(&b[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                {
                    Some(x) => {
                        out.push(x);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn filter_of(q: &Option<String>) -> view::Filter {
    let p = pairs(q);
    view::Filter::from_pairs(p.iter().map(|(k, v)| (k.as_str(), v.as_str())))
}

async fn fleet_page(State(app): State<App>, RawQuery(q): RawQuery) -> Response {
    let s = current(&app);
    html_page(html::fleet(&s, &filter_of(&q)))
}

fn key_of(kind: &str, namespace: &str, name: &str) -> Option<Key> {
    let kind = Kind::ALL
        .into_iter()
        .find(|k| k.as_str().eq_ignore_ascii_case(kind))?;
    Some(Key::new(kind, namespace, name))
}

async fn unit_page(
    State(app): State<App>,
    Path((kind, namespace, name)): Path<(String, String, String)>,
) -> Response {
    let s = current(&app);
    match key_of(&kind, &namespace, &name).filter(|k| s.unit(k).is_some()) {
        Some(k) => html_page(html::unit(&s, &k)),
        None => (
            StatusCode::NOT_FOUND,
            html_page(html::not_found(&s, "no such unit")),
        )
            .into_response(),
    }
}

async fn hops_page(State(app): State<App>) -> Response {
    html_page(html::hops(&current(&app)))
}

async fn plans_page(State(app): State<App>) -> Response {
    html_page(html::plans(&current(&app)))
}

async fn not_found(State(app): State<App>) -> Response {
    (
        StatusCode::NOT_FOUND,
        html_page(html::not_found(&current(&app), "no such page")),
    )
        .into_response()
}

/// The page's script: a file, so the CSP needs no inline script.
pub const SCRIPT: &str = include_str!("ui.js");
pub const STYLE: &str = include_str!("ui.css");

async fn script() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        SCRIPT,
    )
        .into_response()
}

async fn style() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        STYLE,
    )
        .into_response()
}

/// How long one event stream stays open; the browser reconnects, so a
/// connection slot is never held for ever.
const SSE_LIFETIME: Duration = Duration::from_secs(300);

/// Event streams open at once. Each holds one of the server's connection
/// slots for up to [`SSE_LIFETIME`]: without a bound of their own, a few
/// hundred looping clients took every slot and every page was 503.
const SSE_MAX: usize = 32;

/// Server-Sent Events: `event: snapshot` with the pass number whenever a
/// pass published a new snapshot; the page's script fetches itself again.
async fn sse(State(app): State<App>) -> Response {
    use futures::StreamExt;
    let Ok(permit) = app.streams.clone().try_acquire_owned() else {
        // The page stays as it was, only not live (`src/ui/ui.js`).
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, "30")],
            "too many event streams open\n",
        )
            .into_response();
    };
    let mut rx = app.snap.clone();
    let first = rx.borrow_and_update().seq;
    // The stream owns the permit: it is given back when the stream ends or
    // the client goes.
    let stream = async_stream(rx, first).map(move |e| {
        let _held = &permit;
        e
    });
    let body = axum::body::Body::from_stream(stream.map(Ok::<_, std::convert::Infallible>));
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

fn async_stream(
    rx: watch::Receiver<Arc<Snapshot>>,
    first: u64,
) -> impl futures::Stream<Item = String> {
    let deadline = tokio::time::Instant::now() + SSE_LIFETIME;
    futures::stream::unfold(
        (rx, Some(first), deadline),
        |(mut rx, first, deadline)| async move {
            if let Some(seq) = first {
                return Some((
                    format!("retry: 2000\nevent: hello\ndata: {seq}\n\n"),
                    (rx, None, deadline),
                ));
            }
            let changed = tokio::time::timeout_at(deadline, async {
                tokio::select! {
                    r = rx.changed() => r.is_ok(),
                    // A comment now and then keeps proxies from closing it.
                    _ = tokio::time::sleep(Duration::from_secs(15)) => true,
                }
            })
            .await;
            match changed {
                Ok(true) => {
                    let seq = rx.borrow_and_update().seq;
                    Some((
                        format!("event: snapshot\ndata: {seq}\n\n"),
                        (rx, None, deadline),
                    ))
                }
                _ => None,
            }
        },
    )
}

fn json<T: Serialize>(v: &T) -> Response {
    axum::Json(v).into_response()
}

async fn api_snapshot(State(app): State<App>) -> Response {
    json(&*current(&app))
}

async fn api_units(State(app): State<App>, RawQuery(q): RawQuery) -> Response {
    let s = current(&app);
    let f = filter_of(&q);
    let units: Vec<&UnitView> = s.units.iter().filter(|u| f.matches(u)).collect();
    json(&units)
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct UnitDetail<'a> {
    unit: &'a UnitView,
    history: Vec<view::HistoryRow>,
    hops: Vec<&'a Hop>,
}

fn detail<'a>(s: &'a Snapshot, k: &Key) -> Option<UnitDetail<'a>> {
    let unit = s.unit(k)?;
    let history = s
        .report
        .as_ref()
        .map(|r| view::unit_history(&r.commits, k))
        .unwrap_or_default();
    let hops = s
        .hops
        .iter()
        .filter(|h| h.kind == unit.kind && h.namespace == unit.namespace && h.name == unit.name)
        .collect();
    Some(UnitDetail {
        unit,
        history,
        hops,
    })
}

async fn api_unit(
    State(app): State<App>,
    Path((kind, namespace, name)): Path<(String, String, String)>,
) -> Response {
    let s = current(&app);
    match key_of(&kind, &namespace, &name).and_then(|k| detail(&s, &k)) {
        Some(d) => json(&d),
        None => (
            StatusCode::NOT_FOUND,
            axum::Json(serde_json::json!({"error": "no such unit"})),
        )
            .into_response(),
    }
}

async fn api_hops(State(app): State<App>) -> Response {
    json(&current(&app).hops)
}

async fn api_plans(State(app): State<App>) -> Response {
    json(&current(&app).plans)
}

async fn api_pulls(State(app): State<App>) -> Response {
    json(&current(&app).pulls)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Git's text reaches a page escaped: control characters and bidi
    /// overrides as `\x1b` and `\u{202e}`, whatever field carried them;
    /// HTML's own escaping stays, and the layout's whitespace is kept.
    #[test]
    fn pages_show_control_and_bidi_characters_escaped() {
        let summary = "\u{1b}[31mred\u{1b}[0m \u{202e}evil <b>";
        let file = "x\u{202e}lmy.yaml\u{200b}";
        let page = shown(
            maud::html! { style { "a {\n\tcolor: red;\r\n}" } td { (summary) } td { (file) } }
                .into_string(),
        );
        assert!(
            !page
                .chars()
                .any(|c| crate::escape::is_escaped(c) && !matches!(c, '\n' | '\r' | '\t')),
            "{page:?}"
        );
        assert!(
            page.contains("\\x1b[31mred\\x1b[0m \\u{202e}evil &lt;b&gt;"),
            "{page}"
        );
        assert!(page.contains("x\\u{202e}lmy.yaml\\u{200b}"), "{page}");
        assert!(page.contains("a {\n\tcolor: red;\r\n}"), "{page:?}");
        // Nothing to escape: the page as it was.
        let plain = maud::html! { p { "nova 2026.1→2026.2" } }.into_string();
        assert_eq!(shown(plain.clone()), plain);
    }

    #[test]
    fn history_read_back_comes_first_on_the_wall_clock() {
        use crate::daemon::Did;
        let nova = Key::new(Kind::Nova, "compute", "nova");
        let t = |s: i64| jiff::Timestamp::from_second(1_790_000_000 + s).unwrap();
        let (mut p, rx) = Publisher::new("kube", None);
        // This process started at t(3600) and saw a phase at t(3610).
        let phase = |at: u64, ph: &str| Entry {
            at: Duration::from_secs(at),
            what: Did::Phase {
                object: nova.clone(),
                phase: Some(ph.into()),
            },
        };
        p.note(phase(10, "Expanding"), t(3610));
        // Not drawn: not kept, not counted for a write.
        p.note(
            Entry {
                at: Duration::from_secs(11),
                what: Did::PlanCommit { sha: "x".into() },
            },
            t(3611),
        );
        assert_eq!(p.noted(), 1);
        // What an earlier process kept: a hop an hour ago, and the phase
        // above (written by this process before it lost and won the lease).
        let sha = "a".repeat(40);
        let kept = |s: i64, what: Did| keep::Kept { wall: t(s), what };
        p.restore(vec![
            kept(
                0,
                Did::Applied {
                    unit: nova.clone(),
                    sha: sha.clone(),
                    from: Some("2026.1".into()),
                    to: Some("2026.2".into()),
                    reassert: false,
                },
            ),
            kept(
                60,
                Did::Phase {
                    object: nova.clone(),
                    phase: Some("Expanding".into()),
                },
            ),
            kept(
                120,
                Did::HopComplete {
                    unit: nova.clone(),
                    sha: sha.clone(),
                },
            ),
            kept(3610, phase(0, "Expanding").what),
        ]);
        let (text, n) = p.history(keep::BUDGET);
        assert_eq!(n, 4, "the phase once: {text}");
        let units = BTreeMap::new();
        p.publish(PassState {
            cluster: "kube",
            branch: "main",
            head: None,
            report: None,
            units: &units,
            now: Duration::from_secs(20),
            wall: t(3620),
            source_error: None,
        });
        let s = rx.borrow().clone();
        assert_eq!(s.timeline_start, t(0).to_string());
        assert_eq!(s.now, 3620);
        assert_eq!(s.hops.len(), 1);
        let h = &s.hops[0];
        assert_eq!((h.started, h.ended), (0, Some(120)));
        assert_eq!(h.lanes[0].segments[0].from, 60);
    }

    #[test]
    fn query_values_decode() {
        assert_eq!(decode("a+b%3Dc%2"), "a b=c%2");
        assert_eq!(decode("%E2%86%92"), "→");
        assert_eq!(decode("%zz"), "%zz");
        let p = url_pairs("kind=Nova&label=tier%3Dgold&&x");
        assert_eq!(
            p,
            [
                ("kind", "Nova".into()),
                ("label", "tier=gold".into()),
                ("x", String::new())
            ]
        );
    }

    #[test]
    fn auth_accepts_only_the_configured_credentials() {
        use base64::Engine as _;
        let a = Auth {
            token: Some(Secret::new("t0ken")),
            basic: Some(Secret::new("ann:pw")),
            loopback: false,
        };
        let h = |v: &str| {
            let mut m = HeaderMap::new();
            m.insert(header::AUTHORIZATION, HeaderValue::from_str(v).unwrap());
            m
        };
        assert!(a.allows(&h("Bearer t0ken")));
        assert!(!a.allows(&h("Bearer t0ke")));
        let b = base64::engine::general_purpose::STANDARD.encode("ann:pw");
        assert!(a.allows(&h(&format!("Basic {b}"))));
        assert!(!a.allows(&h("Basic !!!")));
        assert!(!a.allows(&HeaderMap::new()));
        assert!(Auth::default().allows(&HeaderMap::new()));
    }

    /// At most `SSE_MAX` event streams are open at once; the next is 503,
    /// and a stream given up frees its place.
    #[tokio::test]
    async fn event_streams_are_bounded() {
        use tower::ServiceExt as _;
        let (_p, rx) = Publisher::new("t", None);
        let app = router(rx, Auth::default());
        let open = || {
            axum::http::Request::builder()
                .uri("/events")
                .body(axum::body::Body::empty())
                .unwrap()
        };
        let mut streams = Vec::new();
        for _ in 0..SSE_MAX {
            let res = app.clone().oneshot(open()).await.unwrap();
            assert_eq!(res.status(), StatusCode::OK);
            streams.push(res);
        }
        let res = app.clone().oneshot(open()).await.unwrap();
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        streams.pop();
        let res = app.clone().oneshot(open()).await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
    }

    /// Bound to loopback, the dashboard answers only requests naming a
    /// loopback host: a rebound name (`Host: attacker.example`) gets 421
    /// and no page, through the whole router, security headers included.
    #[tokio::test]
    async fn a_loopback_dashboard_answers_only_loopback_names() {
        use tower::ServiceExt as _;
        let (_p, rx) = Publisher::new("t", None);
        let app = router(
            rx,
            Auth {
                loopback: true,
                ..Auth::default()
            },
        );
        for (host, ok) in [
            ("127.0.0.1:8080", true),
            ("localhost:8080", true),
            ("LOCALHOST", true),
            ("dash.localhost:1", true),
            ("[::1]:8080", true),
            ("127.0.0.2", true),
            ("attacker.example", false),
            ("attacker.example:8080", false),
            ("127.0.0.1.attacker.example", false),
            ("localhost.attacker.example", false),
            ("[::2]:8080", false),
            ("", false),
        ] {
            let req = axum::http::Request::builder()
                .uri("/api/v1/snapshot")
                .header(header::HOST, host)
                .body(axum::body::Body::empty())
                .unwrap();
            let res = app.clone().oneshot(req).await.unwrap();
            let want = if ok {
                StatusCode::OK
            } else {
                StatusCode::MISDIRECTED_REQUEST
            };
            assert_eq!(res.status(), want, "Host: {host:?}");
            assert!(res.headers().contains_key(header::CONTENT_SECURITY_POLICY));
        }
        // No Host at all (an HTTP/1.0 client, never a browser): answered.
        let req = axum::http::Request::builder()
            .uri("/api/v1/snapshot")
            .body(axum::body::Body::empty())
            .unwrap();
        assert_eq!(
            app.clone().oneshot(req).await.unwrap().status(),
            StatusCode::OK
        );
        // Not bound to loopback (a pod's 0.0.0.0 behind a Service): any name.
        let (_p, rx) = Publisher::new("t", None);
        let open = router(rx, Auth::default());
        let req = axum::http::Request::builder()
            .uri("/api/v1/snapshot")
            .header(header::HOST, "lockstep.ops.svc")
            .body(axum::body::Body::empty())
            .unwrap();
        assert_eq!(open.oneshot(req).await.unwrap().status(), StatusCode::OK);
    }
}
