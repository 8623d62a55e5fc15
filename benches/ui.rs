//! Dashboard benchmark: the fleet page for 2,000 ControlPlanes (8 services
//! each) and 3,000 standalone services, built from unit reports the way the
//! daemon publishes them (`ui::Publisher`) and rendered server-side. A mix
//! of states: most done, some moving, a few blocked or failed. Prints the
//! time to build the snapshot, to render the page, the two together (what
//! a pass that changed the fleet costs before the first byte of a fresh
//! page: the issue's "renders server-side under 100 ms") and the page's
//! size. Asserts nothing about the figures (goal: under 100 ms and 1 MB,
//! docs/ui.md): a measurement, not a test.
//!
//! Run: `cargo bench --bench ui`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use lockstep::follow::Progress;
use lockstep::kind::{Key, Kind};
use lockstep::rollout::{Chain, Document, Next, Step, UnitReport};

fn report(key: &Key, i: usize, children: &[Key]) -> UnitReport {
    let doc = Document::from_text(Arc::from(format!(
        r#"{{"metadata":{{"name":"{}","labels":{{"region":"r{}","tier":"gold"}}}}}}"#,
        key.name,
        i % 7
    )));
    let step = Step {
        sha: format!("{:040x}", i),
        commits: vec![format!("{:040x}", i)],
        earlier: Vec::new(),
        file: Arc::from(format!("clusters/{}/{}.yaml", key.namespace, key.name)),
        from: Some("2025.2".into()),
        release: Some("2026.1".into()),
        image: None,
        children: BTreeMap::new(),
        abort: false,
        reconfigured: false,
        document: Ok(doc),
    };
    let next = match i % 100 {
        0 => Next::Blocked(format!(
            "{key} is at 2024.2 in the cluster; Git's accepted chain goes 2025.2 → 2026.1"
        )),
        1..=9 => Next::Follow(0),
        _ => Next::Done(0),
    };
    let progress = children
        .iter()
        .enumerate()
        .map(|(n, c)| {
            let p = if matches!(next, Next::Follow(_)) && n == 0 {
                Progress::Phase {
                    phase: "Migrating".into(),
                    step: 2,
                }
            } else {
                Progress::Complete
            };
            (c.clone(), p)
        })
        .collect();
    UnitReport {
        chain: Arc::new(Chain {
            unit: key.clone(),
            from: Some("2025.2".into()),
            steps: vec![step],
            removed: None,
        }),
        next,
        progress,
        needs_person: (i % 250 == 5)
            .then(|| "expand Job failed 3 times: repair budget spent".into()),
        stalled: None,
        asked: Default::default(),
        waiting: None,
        cluster_release: None,
        settled: Default::default(),
    }
}

fn main() {
    let mut units = BTreeMap::new();
    for i in 0..2000 {
        let ns = format!("cloud-{i:04}");
        let plane = Key::new(Kind::ControlPlane, ns.clone(), format!("plane-{i:04}"));
        let kids: Vec<Key> = Kind::SERVICES
            .into_iter()
            .map(|k| Key::new(k, ns.clone(), format!("plane-{i:04}-{}", k.service())))
            .collect();
        units.insert(plane.clone(), report(&plane, i, &kids));
    }
    for i in 0..3000 {
        let kind = Kind::SERVICES[i % Kind::SERVICES.len()];
        let key = Key::new(
            kind,
            format!("svc-{:03}", i % 300),
            format!("{}-{i:04}", kind.service()),
        );
        units.insert(key.clone(), report(&key, i, std::slice::from_ref(&key)));
    }
    let (mut publisher, rx) = lockstep::ui::Publisher::new("bench", None);
    for round in 0..3 {
        let t = Instant::now();
        publisher.publish(lockstep::ui::PassState {
            cluster: "bench",
            branch: "main",
            head: Some(format!("{:040x}", 1)),
            report: None,
            units: &units,
            now: std::time::Duration::from_secs(3600),
            wall: jiff::Timestamp::now(),
            source_error: None,
        });
        let publish = t.elapsed();
        let snap = rx.borrow().clone();
        let t = Instant::now();
        let page = lockstep::ui::html::fleet(&snap, &Default::default()).into_string();
        let render = t.elapsed();
        let t = Instant::now();
        let json = serde_json::to_vec(&*snap).map(|v| v.len()).unwrap_or(0);
        let api = t.elapsed();
        println!(
            "round {round}: {} units (2,000 planes with 8 services + 3,000 services): snapshot {:.1} ms + fleet page {:.1} ms = {:.1} ms server-side, {:.0} KiB ({} bytes); /api/v1/snapshot {:.1} ms, {:.0} KiB",
            snap.units.len(),
            publish.as_secs_f64() * 1e3,
            render.as_secs_f64() * 1e3,
            (publish + render).as_secs_f64() * 1e3,
            page.len() as f64 / 1024.0,
            page.len(),
            api.as_secs_f64() * 1e3,
            json as f64 / 1024.0,
        );
    }
}
