//! UpgradePlans: any YAML file of the fleet may hold them.
//!
//! Asserts: `plan::parse_plans` never panics; text without `UpgradePlan`
//! yields nothing; every plan it returns is of our apiVersion and kind,
//! starts on a line of the file and survives a JSON round trip unchanged;
//! every refusal names the file, a line and a reason. The plan's own
//! parsers run on what it yields without panicking: maintenance windows
//! (cron, duration, time zone; at an instant taken from the input, an open
//! window started at or before it and closes after it, and the next start
//! lies after it and opens the window) and the plan gate with no units.
#![no_main]

use jiff::Timestamp;
use libfuzzer_sys::fuzz_target;
use lockstep::plan::{API_VERSION, KIND, UpgradePlan, parse_plans, validate, window};

const FILE: &str = "plans/fuzz.yaml";

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (plans, errors) = parse_plans(FILE, text);
    if !text.contains(KIND) {
        assert!(plans.is_empty() && errors.is_empty());
    }
    let lines = u32::try_from(text.lines().count())
        .unwrap_or(u32::MAX)
        .max(1);
    for p in &plans {
        assert_eq!(&*p.file, FILE);
        assert!((1..=lines).contains(&p.line), "line {} of {lines}", p.line);
        assert_eq!(p.plan.api_version, API_VERSION);
        assert_eq!(p.plan.kind, KIND);
        let value = serde_json::to_value(&p.plan).expect("a parsed plan serializes");
        let back: UpgradePlan = serde_json::from_value(value.clone())
            .unwrap_or_else(|e| panic!("{e}: does not read back: {value}"));
        assert_eq!(back, p.plan, "JSON round trip");

        let refusals = validate::validate(p, &[], &plans);
        // No units: a plan with waves selects nothing, and is refused for it.
        assert!(p.plan.spec.waves.is_empty() || !refusals.is_empty());
        windows(&p.plan, text);
    }
    for e in &errors {
        assert_eq!(&*e.file, FILE);
        assert!((1..=lines).contains(&e.line), "line {} of {lines}", e.line);
        assert!(!e.message.is_empty());
    }
});

fn windows(plan: &UpgradePlan, text: &str) {
    // The instant asked about: from the input (FNV-1a), so that mutations
    // move it, within 2024-2028 so that zones' rules matter.
    let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    let base: Timestamp = "2024-01-01T00:00:00Z".parse().expect("a timestamp");
    let offset = i64::try_from(hash % (5 * 366 * 24 * 3600)).expect("fits");
    let at = base
        .checked_add(jiff::SignedDuration::from_secs(offset))
        .expect("in range");
    let mut schedules = Vec::new();
    for w in &plan.spec.windows {
        let Ok(s) = window::Schedule::parse(w) else {
            continue;
        };
        assert_eq!(s.start(), w.start);
        let dur = s.duration();
        if let Some(start) = s.open_at(at) {
            assert!(start <= at, "{w:?}: open at {at} from {start}");
            let end = start.checked_add(dur).expect("in range");
            assert!(at < end, "{w:?}: open at {at} but closed at {end}");
            assert_eq!(s.closes_at(at), Some(end));
        } else {
            assert_eq!(s.closes_at(at), None);
        }
        if let Some(next) = s.next_start(at) {
            assert!(next > at, "{w:?}: next start {next} is not after {at}");
            if dur.is_positive() {
                assert_eq!(
                    s.open_at(next),
                    Some(next),
                    "{w:?} starts at {next} but is not open then"
                );
            }
        }
        schedules.push(s);
    }
    if let Some(t) = window::next_open(&schedules, at) {
        // `at` itself only when open there; otherwise a start after it.
        assert_eq!(
            t == at,
            window::is_open(&schedules, at),
            "next open {t} at {at}"
        );
        assert!(t >= at);
    }
}
