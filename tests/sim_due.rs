//! The simulated world steps only what is in flight (`World::step_due`,
//! what the daemon's virtual clock runs between two passes) and must end
//! exactly where the whole-world `settle` + `advance_to` ends, over random
//! histories of applies, plane applies, deleted Jobs, faults and time.

use std::time::Duration;

use lockstep::kind::{Key, Kind, ReleaseSource};
use lockstep::release::ImageRef;
use lockstep::sim::{Fault, JobKind, Params, World};
use proptest::prelude::*;

const KINDS: [Kind; 8] = Kind::SERVICES;
const RELEASES: [&str; 4] = ["2025.2", "2026.1", "2026.2", "2027.1"];
const JOBS: [JobKind; 4] = [
    JobKind::Sync,
    JobKind::Expand,
    JobKind::Migrate,
    JobKind::Contract,
];

fn img(kind: Kind, release: &str) -> ImageRef {
    ImageRef::new(
        Some(&format!("ghcr.io/c5c3/{}", kind.service())),
        Some(release),
        None,
    )
    .unwrap()
}

fn field(kind: Kind, release: &str) -> Option<String> {
    (kind.release_source() == ReleaseSource::Field).then(|| release.to_owned())
}

#[derive(Clone, Debug)]
enum Op {
    /// Release `r` with the image of release `i` (a mismatch when they differ).
    Apply {
        obj: usize,
        r: usize,
        i: usize,
    },
    Plane {
        r: usize,
    },
    DeleteJob {
        obj: usize,
        job: usize,
    },
    Step {
        max_wait: u64,
    },
    Advance {
        secs: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..12usize, 0..4usize, 0..4usize).prop_map(|(obj, r, i)| Op::Apply { obj, r, i }),
        (0..4usize).prop_map(|r| Op::Plane { r }),
        (0..12usize, 0..4usize).prop_map(|(obj, job)| Op::DeleteJob { obj, job }),
        (1..3600u64).prop_map(|max_wait| Op::Step { max_wait }),
        (1..900u64).prop_map(|secs| Op::Advance { secs }),
        (1..3600u64).prop_map(|max_wait| Op::Step { max_wait }),
    ]
}

#[derive(Clone, Debug)]
struct Setup {
    /// (kind, namespace, name, release, projected by the plane)
    objects: Vec<(usize, usize, usize, usize, bool)>,
    faults: Vec<(usize, u8, usize, u32, u64)>,
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        prop::collection::vec(
            (0..8usize, 0..2usize, 0..3usize, 0..3usize, any::<bool>()),
            1..12,
        ),
        prop::collection::vec((0..3usize, 0..3u8, 0..4usize, 0..4u32, 0..7200u64), 0..4),
    )
        .prop_map(|(objects, faults)| Setup { objects, faults })
}

const NAMES: [&str; 3] = ["a", "b", "c"];
const NAMESPACES: [&str; 2] = ["x", "y"];

fn build(s: &Setup) -> (World, Vec<Key>, Key) {
    let mut w = World::new(Params::default());
    let plane = Key::new(Kind::ControlPlane, "x", "plane");
    w.install_plane(plane.clone(), RELEASES[1].into());
    let mut keys = Vec::new();
    for &(k, ns, n, r, projected) in &s.objects {
        let kind = KINDS[k];
        let key = Key::new(kind, NAMESPACES[ns], NAMES[n]);
        // Jobs are named after their object (`<name>-db-sync`): two kinds
        // of one namespace and name would share them, in the simulator as
        // in a real cluster, so a fleet holds each namespace/name once.
        if keys
            .iter()
            .any(|k: &Key| k.namespace == key.namespace && k.name == key.name)
        {
            continue;
        }
        let release = RELEASES[r];
        w.install_steady(
            key.clone(),
            field(kind, release),
            img(kind, release),
            projected.then(|| plane.clone()),
        );
        keys.push(key);
    }
    for &(n, what, job, tries, secs) in &s.faults {
        let object = NAMES[n].to_owned();
        w.faults.push(match what {
            0 => Fault::JobFails {
                object,
                job: JOBS[job],
                tries,
            },
            1 => Fault::DatabaseDown {
                object,
                until: Duration::from_secs(secs),
            },
            _ => Fault::RolloutStall {
                object,
                extra: Duration::from_secs(secs),
            },
        });
    }
    (w, keys, plane)
}

/// Everything the operator's world is made of, but the count of reconcile
/// calls (which the indexed step makes fewer of: that is its point).
fn state(w: &World) -> String {
    format!(
        "now {:?}\nobjects {:?}\nplanes {:?}\njobs {:?}\nevents {:?}\nchanged {:?}\nfaults {:?}\nobserved {:?}",
        w.now,
        w.objects,
        w.planes,
        w.jobs,
        w.events,
        w.changed,
        w.faults,
        w.objects.keys().map(|k| w.observe(k)).collect::<Vec<_>>(),
    )
}

/// One op on both worlds: `whole` the way the world always stepped,
/// `indexed` the way the daemon's clock steps it now.
fn run(whole: &mut World, indexed: &mut World, keys: &[Key], plane: &Key, op: &Op) {
    for (w, fast) in [(&mut *whole, false), (&mut *indexed, true)] {
        match *op {
            Op::Apply { obj, r, i } => {
                let key = &keys[obj % keys.len()];
                let _ = w.apply(
                    key,
                    field(key.kind, RELEASES[r]),
                    img(key.kind, RELEASES[i]),
                );
                w.settle_only(std::slice::from_ref(key));
            }
            Op::Plane { r } => {
                let children: Vec<(Key, ImageRef)> = w
                    .objects
                    .values()
                    .filter(|o| o.projected_by.as_ref() == Some(plane))
                    .map(|o| (o.key.clone(), img(o.key.kind, RELEASES[r])))
                    .collect();
                let _ = w.apply_plane(plane, RELEASES[r], &children);
                let touched: Vec<Key> = children.into_iter().map(|(k, _)| k).collect();
                w.settle_only(&touched);
            }
            Op::DeleteJob { obj, job } => {
                let key = &keys[obj % keys.len()];
                let name = format!("{}-{}", key.name, JOBS[job].suffix());
                w.delete_job(&key.namespace, &name);
            }
            Op::Step { max_wait } => {
                let max_wait = Duration::from_secs(max_wait);
                if fast {
                    w.step_due(max_wait);
                } else {
                    w.settle();
                    if let Some(t) = w.next_due() {
                        let t = t.min(w.now + max_wait);
                        w.advance_to(t);
                    }
                }
            }
            Op::Advance { secs } => {
                let t = w.now + Duration::from_secs(secs);
                if fast {
                    w.advance_due(t);
                } else {
                    w.advance_to(t);
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn stepping_what_is_due_ends_where_stepping_everything_ends(
        s in setup(),
        ops in prop::collection::vec(op(), 1..40),
    ) {
        let (mut whole, keys, plane) = build(&s);
        let mut indexed = whole.clone();
        // The daemon's cluster settles everything once, then steps the index.
        whole.settle();
        indexed.settle();
        for (i, op) in ops.iter().enumerate() {
            run(&mut whole, &mut indexed, &keys, &plane, op);
            prop_assert_eq!(state(&whole), state(&indexed), "after op {} {:?}", i, op);
        }
        // And both run to the end the same way.
        for _ in 0..200 {
            run(&mut whole, &mut indexed, &keys, &plane, &Op::Step { max_wait: 3600 });
        }
        prop_assert_eq!(state(&whole), state(&indexed));
        prop_assert!(whole.next_due().is_none(), "the world came to rest");
    }
}

/// The index is not decoration: a history where it matters (a roll and a
/// Job in flight while other objects sit still) steps fewer objects.
#[test]
fn the_indexed_step_reconciles_only_what_is_in_flight() {
    let mut w = World::new(Params::default());
    let mut keys = Vec::new();
    for i in 0..200 {
        let key = Key::new(Kind::Glance, "image", format!("g{i}"));
        w.install_steady(
            key.clone(),
            Some("2026.1".into()),
            img(Kind::Glance, "2026.1"),
            None,
        );
        keys.push(key);
    }
    w.settle();
    w.apply(&keys[7], Some("2026.2".into()), img(Kind::Glance, "2026.2"))
        .unwrap();
    let before = w.passes;
    let mut steps = 0;
    while w.step_due(Duration::from_secs(600)) {
        steps += 1;
    }
    let reconciles = w.passes - before;
    assert!(steps > 2, "the hop took several steps ({steps})");
    assert!(
        reconciles < 10 * steps + 10,
        "{reconciles} reconciles for {steps} steps of one object in a world of 200"
    );
    assert_eq!(
        w.objects[&keys[7]].status.installed_release.as_deref(),
        Some("2026.2"),
        "the hop completed"
    );
}
