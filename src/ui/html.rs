//! The dashboard's pages, server-rendered with maud: text and attribute
//! values are escaped by the macro, paths into links are percent-encoded
//! here ([`seg`]), and links to the Git host come only from an http(s)
//! template (`view::commit_link`). No inline script or style: the pages
//! name `/static/ui.js` and `/static/ui.css` (the CSP in `ui/mod.rs`).

use maud::{DOCTYPE, Markup, PreEscaped, html};

use super::Snapshot;
use crate::kind::{Key, Kind};
use crate::view::{self, Attention, Filter, Hop, PlanView, UnitView};

/// A path segment percent-encoded (anything but unreserved characters).
pub fn seg(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn unit_href(kind: &str, namespace: &str, name: &str) -> String {
    format!("/unit/{}/{}/{}", seg(kind), seg(namespace), seg(name))
}

fn short(sha: &str) -> &str {
    sha.get(..10).unwrap_or(sha)
}

/// A commit, linked to the Git host when a template is configured.
fn commit(s: &Snapshot, sha: &str) -> Markup {
    match view::commit_link(s.commit_url.as_deref(), sha) {
        Some(url) => html! { a.sha href=(url) rel="noreferrer" { code { (short(sha)) } } },
        None => html! { code.sha title=(sha) { (short(sha)) } },
    }
}

fn layout(s: &Snapshot, title: &str, current: &str, body: Markup) -> Markup {
    let nav = [("/", "Fleet"), ("/hops", "Hops"), ("/plans", "Plans")];
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " — lockstep " (s.cluster) }
                link rel="stylesheet" href="/static/ui.css";
                script src="/static/ui.js" defer {}
            }
            body {
                a.skip href="#live" { "Skip to content" }
                header {
                    span.brand { "lockstep" }
                    span.cluster { "cluster " strong { (s.cluster) } }
                    @if !s.branch.is_empty() {
                        span { "branch " strong { (s.branch) } }
                    }
                    @if let Some(h) = &s.head { span { "head " (commit(s, h)) } }
                    nav aria-label="Pages" {
                        ul {
                            @for (href, label) in nav {
                                li {
                                    @if href == current {
                                        a href=(href) aria-current="page" { (label) }
                                    } @else {
                                        a href=(href) { (label) }
                                    }
                                }
                            }
                            li { a href="/api/v1/snapshot" { "JSON" } }
                        }
                    }
                }
                (body)
                footer {
                    "pass " span #seq { (s.seq) } " · " (s.generated_at)
                    " · updates live when JavaScript is on; reload otherwise"
                }
            }
        }
    }
}

fn progress(step: u8, label: &str) -> Markup {
    html! {
        progress max="4" value=(step) aria-label=(label) { (step) "/4" }
        span.step { (step) "/4" }
    }
}

fn release_range(u: &UnitView) -> Markup {
    let installed = u.installed.as_deref().unwrap_or("?");
    let target = u.target.as_deref().unwrap_or("?");
    html! {
        @if installed == target { (target) } @else { (installed) " → " (target) }
    }
}

/// The fleet: what needs a person first, then every unit (filtered).
pub fn fleet(s: &Snapshot, f: &Filter) -> Markup {
    let attention: Vec<&UnitView> = s
        .units
        .iter()
        .filter(|u| {
            matches!(
                u.attention,
                Attention::Failed | Attention::Blocked | Attention::Stalled
            )
        })
        .collect();
    let pulls: Vec<&view::PullView> = s.pulls.iter().filter(|p| p.verdict != "accepted").collect();
    let shown: Vec<&UnitView> = s.units.iter().filter(|u| f.matches(u)).collect();
    let c = &s.counts;
    let body = html! {
        form.filters method="get" action="/" role="search" aria-label="Filter units" {
            label for="f-release" { "Release" }
            input #f-release name="release" value=(f.release) placeholder="2026.1";
            label for="f-kind" { "Kind" }
            select #f-kind name="kind" {
                option value="" { "any" }
                @for k in Kind::ALL {
                    @if f.kind.eq_ignore_ascii_case(k.as_str()) {
                        option value=(k.as_str()) selected { (k.as_str()) }
                    } @else {
                        option value=(k.as_str()) { (k.as_str()) }
                    }
                }
            }
            label for="f-namespace" { "Namespace" }
            input #f-namespace name="namespace" value=(f.namespace);
            label for="f-label" { "Label" }
            input #f-label name="label" value=(f.label) placeholder="key=value";
            label for="f-state" { "State" }
            select #f-state name="state" {
                option value="" { "any" }
                @for a in ["failed", "blocked", "stalled", "moving", "pending", "done"] {
                    @if f.state == a { option value=(a) selected { (a) } } @else { option value=(a) { (a) } }
                }
            }
            button type="submit" { "Filter" }
            @if !f.is_empty() { a href="/" { "Clear" } }
        }
        main #live data-seq=(s.seq) {
            h1 { "Fleet" }
            @if let Some(e) = &s.source_error {
                p.alert role="alert" { "The source could not be read; showing the last good state: " (e) }
            }
            p.counts {
                (c.units) " units: "
                span.failed { (c.failed) " failed" } ", "
                span.blocked { (c.blocked) " blocked" } ", "
                span.stalled { (c.stalled) " stalled" } ", "
                span.moving { (c.moving) " moving" } ", "
                (c.pending) " pending, " (c.done) " done"
            }
            @if !attention.is_empty() || !pulls.is_empty() {
                section #attention aria-labelledby="h-attention" {
                    h2 #h-attention { "Needs a person" }
                    ul.attention {
                        @for u in &attention {
                            li class=(u.attention.as_str()) {
                                strong { (u.attention.as_str()) } " "
                                a href=(unit_href(&u.kind, &u.namespace, &u.name)) { (u.kind) " " (u.namespace) "/" (u.name) }
                                @if let Some(r) = &u.reason { p.reason { (r) } }
                                @if let Some(a) = &u.action { p.action { "What to do: " (a) } }
                            }
                        }
                        @for p in &pulls {
                            li class=(p.verdict) {
                                strong { (p.verdict) } " pull request #" (p.number) " at " (commit(s, &p.head))
                                ul {
                                    @for (who, why) in &p.reasons { li.reason { (who) ": " (why) } }
                                }
                                @if let Some(a) = &p.action { p.action { "What to do: " (a) } }
                            }
                        }
                    }
                }
            }
            h2 #h-units { "Units" @if !f.is_empty() { " (" (shown.len()) " of " (s.units.len()) ")" } }
            table.units aria-labelledby="h-units" {
                thead { tr { th scope="col" { "Kind" } th scope="col" { "Unit" } th scope="col" { "Release" } th scope="col" { "Phase" } th scope="col" { "Status" } } }
                tbody { (PreEscaped(rows(&shown))) }
            }
        }
    };
    layout(s, "Fleet", "/", body)
}

fn rows(units: &[&UnitView]) -> String {
    let mut out = String::with_capacity(units.len() * 200);
    for u in units {
        row(&mut out, u);
    }
    out
}

/// One fleet row, written by hand rather than by the macro so that the
/// optional end tags (`</td>`, `</tr>`) can be left out: the page lists
/// thousands of rows and must stay under 1 MB for 5,000 units
/// (`benches/ui.rs`). Every string goes through maud's own [`Escaper`]
/// (text and the double-quoted attribute alike); paths are [`seg`]-encoded.
fn row(out: &mut String, u: &UnitView) {
    use std::fmt::Write as _;
    let text = |out: &mut String, s: &str| {
        let _ = maud::Escaper::new(out).write_str(s);
    };
    let _ = write!(out, "<tr class=\"{}\"><td>", u.attention.as_str());
    text(out, &u.kind);
    out.push_str("<td><a href=\"");
    text(out, &unit_href(&u.kind, &u.namespace, &u.name));
    out.push_str("\">");
    text(out, &u.namespace);
    out.push('/');
    text(out, &u.name);
    out.push_str("</a><td>");
    // Escaped by the macro already.
    out.push_str(&release_range(u).into_string());
    let _ = write!(
        out,
        "<td><progress max=\"4\" value=\"{0}\">{0}/4</progress><td>",
        u.step
    );
    // Kept short: the unit's page has everything.
    if u.attention == Attention::Done {
        out.push_str("done");
    } else if u.children.is_empty() {
        text(out, &u.status);
    } else {
        let complete = u
            .children
            .iter()
            .filter(|c| c.step == 4 && !c.failed)
            .count();
        let details = html! {
            details {
                summary { (u.status) " · " (complete) "/" (u.children.len()) " services complete" }
                ul {
                    @for c in u.children.iter().filter(|c| c.step < 4 || c.failed) {
                        li { (c.kind) " " (c.name) ": " (c.progress) }
                    }
                }
            }
        };
        out.push_str(&details.into_string());
    }
    out.push('\n');
}

/// A unit: where it stands, its hops as timelines, and its judged commits.
pub fn unit(s: &Snapshot, key: &Key) -> Markup {
    let Some(d) = super::detail(s, key) else {
        return not_found(s, "no such unit");
    };
    let u = d.unit;
    let title = format!("{} {}/{}", u.kind, u.namespace, u.name);
    let body = html! {
        main #live data-seq=(s.seq) {
            h1 { (title) }
            dl.facts {
                dt { "Release" } dd { (release_range(u)) }
                dt { "Phase" } dd { (progress(u.step, "phase of the least advanced service")) }
                dt { "Status" } dd class=(u.attention.as_str()) { (u.attention.as_str()) ": " (u.status) }
                @if let Some(r) = &u.reason { dt { "Reason" } dd.reason { (r) } }
                @if let Some(a) = &u.action { dt { "What to do" } dd.action { (a) } }
                @if let Some(c) = &u.commit { dt { "Commit" } dd { (commit(s, c)) } }
                @if !u.labels.is_empty() {
                    dt { "Labels" }
                    dd { @for (k, v) in &u.labels { code.label { (k) "=" (v) } " " } }
                }
            }
            @if !u.children.is_empty() {
                h2 { "Services" }
                table.children {
                    thead { tr { th scope="col" { "Kind" } th scope="col" { "Name" } th scope="col" { "Phase" } th scope="col" { "Progress" } } }
                    tbody {
                        @for c in &u.children {
                            tr class=[c.failed.then_some("failed")] {
                                td { (c.kind) } td { (c.name) }
                                td { progress max="4" value=(c.step) aria-label={ "phase of " (c.name) } { (c.step) "/4" } }
                                td { (c.progress) }
                            }
                        }
                    }
                }
            }
            h2 { "Hops" }
            @if d.hops.is_empty() { p { "No hop recorded yet." } }
            @for h in d.hops.iter().rev() { (hop_figure(s, h)) }
            h2 { "History" }
            @if d.history.is_empty() { p { "No judged commit names this unit." } }
            @else {
                table.history {
                    thead { tr { th scope="col" { "Commit" } th scope="col" { "Verdict" } th scope="col" { "Summary" } th scope="col" { "What it does" } } }
                    tbody {
                        @for r in &d.history {
                            tr class=(r.verdict) {
                                td { (commit(s, &r.sha)) }
                                td { (r.verdict) }
                                td { (r.summary) }
                                td {
                                    ul {
                                        @for o in &r.objects {
                                            li class=(o.verdict) {
                                                (o.object) ": "
                                                (o.from.as_deref().unwrap_or("new")) " → " (o.to.as_deref().unwrap_or("removed"))
                                                " — " (o.verdict) ": " (o.message)
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    layout(s, &title, "", body)
}

/// One hop with its timeline.
pub fn hop_figure(s: &Snapshot, h: &Hop) -> Markup {
    let range = match (&h.from, &h.to) {
        (Some(f), Some(t)) if f != t => format!("{f} → {t}"),
        (_, Some(t)) => t.clone(),
        _ => String::new(),
    };
    let state = match h.ended {
        Some(e) => format!(
            "complete after {}",
            view::clock(e.saturating_sub(h.started))
        ),
        None => "in flight or stopped".to_owned(),
    };
    // When it began, on the calendar (second precision, UTC).
    let began = s.origin.and_then(|o| {
        o.checked_add(jiff::SignedDuration::from_secs(h.started as i64))
            .ok()
    });
    html! {
        figure.hop {
            figcaption {
                a href=(unit_href(&h.kind, &h.namespace, &h.name)) { (h.unit) } " " (range) " · commit " (commit(s, &h.sha))
                @if let Some(b) = began {
                    " · began " time datetime=(b.strftime("%Y-%m-%dT%H:%M:%SZ")) { (b.strftime("%Y-%m-%d %H:%M:%S UTC")) }
                }
                " · " (state)
            }
            (super::svg::hop(h, s.now))
        }
    }
}

/// Every recent hop.
pub fn hops(s: &Snapshot) -> Markup {
    let body = html! {
        main #live data-seq=(s.seq) {
            h1 { "Hops" }
            p { "Time is seconds from " (s.timeline_start) " (UTC), the oldest entry kept; hops from before a restart are read back from the cluster in kube mode." }
            (super::svg::legend())
            @if s.hops.is_empty() { p { "No hop recorded yet." } }
            @for h in s.hops.iter().rev() { (hop_figure(s, h)) }
        }
    };
    layout(s, "Hops", "/hops", body)
}

fn countdown(secs: i64) -> String {
    if secs <= 0 {
        return "now".into();
    }
    let s = secs as u64;
    match s {
        0..60 => format!("in {s}s"),
        60..3600 => format!("in {}m{:02}s", s / 60, s % 60),
        _ => format!("in {}h{:02}m", s / 3600, (s / 60) % 60),
    }
}

fn plan_section(s: &Snapshot, p: &PlanView) -> Markup {
    let proposal = p
        .proposal
        .as_deref()
        .filter(|u| u.starts_with("https://") || u.starts_with("http://"));
    html! {
        section.plan class=(p.state) aria-labelledby={ "plan-" (seg(&p.name)) } {
            h2 id={ "plan-" (seg(&p.name)) } { (p.name) " → " (p.to) }
            dl.facts {
                dt { "State" } dd class=(p.state) { (p.state) ": " (p.description) }
                dt { "Mode" } dd { (p.mode) @if p.paused { " · paused" } }
                dt { "Plan commit" } dd { (commit(s, &p.sha)) }
                @if !p.windows.is_empty() {
                    dt { "Windows" } dd { ul { @for w in &p.windows { li { (w) } } } }
                }
                @if let Some(t) = &p.next_opening {
                    dt { "Next opening" }
                    dd { time datetime=(t) { (t) } @if let Some(l) = p.seconds_left { " (" (countdown(l)) ")" } }
                }
                @if let Some(t) = &p.soak_until {
                    dt { "Soak until" }
                    dd { time datetime=(t) { (t) } @if let Some(l) = p.seconds_left { " (" (countdown(l)) ")" } }
                }
                @if let Some(url) = proposal {
                    dt { "Proposal" } dd { a href=(url) rel="noreferrer" { (url) } }
                } @else if let Some(other) = &p.proposal {
                    dt { "Proposal" } dd { (other) }
                }
            }
            ol.waves {
                @for (i, w) in p.waves.iter().enumerate() {
                    li class=[(p.wave == Some(i)).then_some("current")] {
                        strong { (w.name) } " · " (w.complete) "/" (w.objects.len()) " complete · at most "
                        (w.max_parallel) " at once · soak " (w.soak)
                        @if p.wave == Some(i) { " · " em { "current" } }
                        details {
                            summary { (w.objects.len()) " objects" }
                            ul { @for o in &w.objects { li { (o) } } }
                        }
                    }
                }
            }
        }
    }
}

/// The upgrade plans: waves, windows, soaks, pause and hold.
pub fn plans(s: &Snapshot) -> Markup {
    let body = html! {
        main #live data-seq=(s.seq) {
            h1 { "Plans" }
            @if s.plans.is_empty() { p { "No upgrade plan in the head tree (or plans are off)." } }
            @for p in &s.plans { (plan_section(s, p)) }
        }
    };
    layout(s, "Plans", "/plans", body)
}

pub fn not_found(s: &Snapshot, what: &str) -> Markup {
    layout(
        s,
        "Not found",
        "",
        html! { main #live { h1 { "Not found" } p { (what) } p { a href="/" { "Back to the fleet" } } } },
    )
}

/// `rehearse --html`: one self-contained page (stylesheet inlined, allowed
/// by its hash in the page's own CSP; no script).
pub fn standalone(title: &str, summary: &[String], hops: &[Hop], now: u64) -> String {
    use base64::Engine as _;
    use sha2::Digest as _;
    let css = super::STYLE;
    let hash =
        base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(css.as_bytes()));
    let csp = format!(
        "default-src 'none'; style-src 'sha256-{hash}'; img-src 'none'; base-uri 'none'; form-action 'none'"
    );
    let s = Snapshot::empty("rehearsal");
    let page = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta http-equiv="Content-Security-Policy" content=(csp);
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) }
                style { (PreEscaped(css)) }
            }
            body {
                main #live {
                    h1 { (title) }
                    ul.summary { @for l in summary { li { (l) } } }
                    (super::svg::legend())
                    @for h in hops {
                        figure.hop {
                            figcaption {
                                (h.unit) " "
                                @match (&h.from, &h.to) {
                                    (Some(f), Some(t)) if f != t => { (f) " → " (t) }
                                    (_, Some(t)) => { (t) }
                                    _ => {}
                                }
                                " · commit " code { (short(&h.sha)) }
                                " · " @match h.ended {
                                    Some(e) => { "complete after " (view::clock(e.saturating_sub(h.started))) }
                                    None => { "NOT complete" }
                                }
                            }
                            (super::svg::hop(h, now))
                        }
                    }
                }
                footer { "Predicted by lockstep rehearse: the daemon's engine against the simulated operator, in virtual time." }
            }
        }
    };
    let _ = s;
    super::shown(page.into_string())
}
