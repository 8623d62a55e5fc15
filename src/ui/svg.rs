//! A hop's timeline as hand-made SVG: one lane per followed object, its
//! stages (expand, migrate, roll, contract, second roll) as bars on a time
//! axis, failed tries, repairs and completions as marks with a `<title>`
//! (the text escaped by maud like any other). Colours come from classes in
//! `ui.css`, so the CSP needs no inline style.

use maud::{Markup, html};

use crate::view::{Hop, MarkKind, Stage, clock};

const LEFT: u64 = 170;
const WIDTH: u64 = 900;
const LANE: u64 = 26;
const TOP: u64 = 8;

const STAGES: [Stage; 6] = [
    Stage::Waiting,
    Stage::Expand,
    Stage::Migrate,
    Stage::Roll,
    Stage::Contract,
    Stage::SecondRoll,
];

fn class(s: Stage) -> &'static str {
    match s {
        Stage::Waiting => "st-waiting",
        Stage::Expand => "st-expand",
        Stage::Migrate => "st-migrate",
        Stage::Roll => "st-roll",
        Stage::Contract => "st-contract",
        Stage::SecondRoll => "st-second",
    }
}

fn mark_class(k: MarkKind) -> &'static str {
    match k {
        MarkKind::Failed => "mk-failed",
        MarkKind::Repair => "mk-repair",
        MarkKind::NeedsPerson => "mk-person",
        MarkKind::Event => "mk-event",
        MarkKind::Complete => "mk-complete",
    }
}

fn mark_word(k: MarkKind) -> &'static str {
    match k {
        MarkKind::Failed => "failed try",
        MarkKind::Repair => "repair",
        MarkKind::NeedsPerson => "needs a person",
        MarkKind::Event => "event",
        MarkKind::Complete => "complete",
    }
}

/// The legend: what each colour and mark means (in text, not colour only).
pub fn legend() -> Markup {
    html! {
        ul.legend aria-label="Timeline legend" {
            @for s in STAGES {
                li { svg width="14" height="14" aria-hidden="true" { rect class=(class(s)) width="14" height="14" {} } " " (s.as_str()) }
            }
            @for k in [MarkKind::Failed, MarkKind::Repair, MarkKind::NeedsPerson, MarkKind::Complete] {
                li { svg width="14" height="14" aria-hidden="true" { circle class=(mark_class(k)) cx="7" cy="7" r="5" {} } " " (mark_word(k)) }
            }
        }
    }
}

/// One hop's timeline; an open hop runs to `now`.
pub fn hop(h: &Hop, now: u64) -> Markup {
    let start = h.started;
    // A hop stopped on a person ends its axis shortly after the last thing
    // that happened (its open stretch is clipped there); one still moving
    // runs to now.
    let last = h
        .lanes
        .iter()
        .flat_map(|l| l.marks.iter().map(|m| m.at))
        .max()
        .unwrap_or(start);
    let stopped = h
        .lanes
        .iter()
        .any(|l| l.marks.iter().any(|m| m.kind == MarkKind::NeedsPerson));
    let end = match h.ended {
        Some(e) => e,
        None if stopped => {
            let span = last.saturating_sub(start).max(60);
            (last + span / 10).min(now.max(last))
        }
        None => now,
    }
    .max(start + 1);
    let span = end - start;
    let plot = WIDTH - LEFT - 10;
    let x = |t: u64| LEFT + (t.saturating_sub(start).min(span) * plot) / span;
    let lanes = h.lanes.len().max(1) as u64;
    let height = TOP + lanes * LANE + 28;
    let ticks: Vec<u64> = (0..=4).map(|i| start + span * i / 4).collect();
    let label = format!(
        "Timeline of {} from {} to {}{}",
        h.unit,
        clock(start),
        clock(end),
        if h.ended.is_some() {
            ""
        } else {
            " (in flight)"
        }
    );
    html! {
        svg.timeline xmlns="http://www.w3.org/2000/svg" role="img" viewBox={ "0 0 " (WIDTH) " " (height) }
            width=(WIDTH) height=(height) aria-label=(label) {
            title { (label) }
            @for (i, lane) in h.lanes.iter().enumerate() {
                @let y = TOP + i as u64 * LANE;
                g.lane data-object=(lane.object) {
                    text.lane-label x="4" y=(y + 17) {
                        title { (lane.object) }
                        (lane.object.rsplit('/').next().unwrap_or(&lane.object))
                    }
                    line.lane-rule x1=(LEFT) x2=(WIDTH - 10) y1=(y + LANE - 2) y2=(y + LANE - 2) {}
                    @for sgm in &lane.segments {
                        rect class=(class(sgm.stage)) data-stage=(sgm.stage.as_str())
                            x=(x(sgm.from)) y=(y + 4) width=((x(sgm.to) - x(sgm.from)).max(2)) height="16" {
                            title { (sgm.stage.as_str()) " " (clock(sgm.from)) "–" (clock(sgm.to)) }
                        }
                    }
                    @for m in &lane.marks {
                        @if m.kind != MarkKind::Event {
                            circle class=(mark_class(m.kind)) data-mark=(mark_word(m.kind)) cx=(x(m.at)) cy=(y + 12) r="5" {
                                title { (mark_word(m.kind)) " at " (clock(m.at)) ": " (m.text) }
                            }
                        } @else {
                            line.mk-event x1=(x(m.at)) x2=(x(m.at)) y1=(y + 2) y2=(y + 22) {
                                title { (clock(m.at)) " " (m.text) }
                            }
                        }
                    }
                }
            }
            @let axis = TOP + lanes * LANE + 4;
            line.axis x1=(LEFT) x2=(WIDTH - 10) y1=(axis) y2=(axis) {}
            @for t in &ticks {
                line.axis x1=(x(*t)) x2=(x(*t)) y1=(axis) y2=(axis + 5) {}
                text.tick x=(x(*t)) y=(axis + 18) text-anchor="middle" { (clock(*t)) }
            }
        }
    }
}
