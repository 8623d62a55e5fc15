//! The simulated operator against the operators' behaviour
//! (`docs/operators.md` §2–§7), in virtual time.

use std::time::Duration;

use lockstep::follow::{Progress, assess};
use lockstep::kind::{Key, Kind};
use lockstep::release::ImageRef;
use lockstep::sim::{Fault, JobKind, JobState, Params, World};

fn img(svc: &str, tag: &str) -> ImageRef {
    ImageRef::new(Some(&format!("ghcr.io/c5c3/{svc}")), Some(tag), None).unwrap()
}

fn world_with(kind: Kind, ns: &str, name: &str, release: &str) -> (World, Key) {
    let mut w = World::new(Params::default());
    let key = Key::new(kind, ns, name);
    let rel = (kind != Kind::Keystone && kind != Kind::Horizon).then(|| release.to_owned());
    w.install_steady(key.clone(), rel, img(kind.service(), release), None);
    (w, key)
}

fn complete(w: &World, key: &Key, to: &str) -> bool {
    w.observe(key)
        .is_some_and(|o| assess(to, &o) == Progress::Complete)
}

#[test]
fn a_glance_hop_walks_the_phase_machine() {
    let (mut w, key) = world_with(Kind::Glance, "image", "glance", "2026.1");
    w.apply(&key, Some("2026.2".into()), img("glance", "2026.2"))
        .unwrap();
    assert!(w.run_until(|w| complete(w, &key, "2026.2")));
    assert_eq!(
        w.event_reasons(&key),
        [
            "UpgradeInitiated",
            "ExpandComplete",
            "MigrateComplete",
            "DeploymentRolloutComplete",
            "UpgradeComplete"
        ]
    );
    let p = Params::default();
    // expand + migrate + one roll + contract + the steady db-sync on the new image
    assert_eq!(w.now, p.expand + p.migrate + p.roll + p.contract + p.sync);
    let o = &w.objects[&key];
    assert_eq!(o.status.installed_release.as_deref(), Some("2026.2"));
    assert_eq!(o.status.target_release, None);
}

#[test]
fn nova_rolls_its_roles_in_order_then_a_second_time() {
    let (mut w, key) = world_with(Kind::Nova, "compute", "nova", "2026.1");
    w.apply(&key, Some("2026.2".into()), img("nova", "2026.2"))
        .unwrap();
    w.run_until(|w| w.objects[&key].status.upgrade_phase.as_deref() == Some("Contracting"));
    let p = Params::default();
    assert_eq!(
        w.now,
        p.expand + p.migrate + 5 * p.roll,
        "five roles, one after another"
    );
    w.run_until(|w| w.objects[&key].status.installed_release.as_deref() == Some("2026.2"));
    let obs = w.observe(&key).unwrap();
    assert!(
        !obs.second_roll_done,
        "the annotated roles roll again after contract"
    );
    assert!(w.run_until(|w| complete(w, &key, "2026.2")));
    let d = &w.objects[&key].deployments;
    assert!(
        d.iter()
            .filter(|d| d.annotation.is_some())
            .all(|d| d.annotation.as_deref() == Some("2026.2"))
    );
    assert_eq!(
        d.iter().filter(|d| d.annotation.is_some()).count(),
        4,
        "not the API"
    );
}

#[test]
fn a_permanently_failed_job_waits_until_deleted() {
    let (mut w, key) = world_with(Kind::Glance, "image", "glance", "2026.1");
    w.faults.push(Fault::JobFails {
        object: "glance".into(),
        job: JobKind::Expand,
        tries: 6,
    });
    w.apply(&key, Some("2026.2".into()), img("glance", "2026.2"))
        .unwrap();
    w.run_until(|w| {
        matches!(
            w.observe(&key).map(|o| assess("2026.2", &o)),
            Some(Progress::Failed { .. })
        )
    });
    let p = Params::default();
    assert_eq!(w.now, 5 * p.failed_try, "backoffLimit 4: five tries");
    assert_eq!(
        w.job("image", "glance-db-expand").unwrap().state,
        JobState::Failed
    );
    assert!(w.event_reasons(&key).contains(&"ExpandFailed"));
    // The operator never re-creates it; time passes and nothing moves.
    assert!(w.next_due().is_none());
    // Deleting the Job (lockstep's repair) makes the operator run it again.
    assert!(w.delete_job("image", "glance-db-expand"));
    assert!(w.run_until(|w| complete(w, &key, "2026.2")));
    assert_eq!(
        w.job("image", "glance-db-expand").unwrap().failed_tries,
        1,
        "the sixth try failed once more, then it ran"
    );
}

#[test]
fn abort_and_retarget() {
    let (mut w, key) = world_with(Kind::Glance, "image", "glance", "2026.1");
    w.apply(&key, Some("2026.2".into()), img("glance", "2026.2"))
        .unwrap();
    w.run_until(|w| w.objects[&key].status.upgrade_phase.as_deref() == Some("Migrating"));
    // A third release: UpgradeTargetChanged, nothing advances.
    w.apply(&key, Some("2027.2".into()), img("glance", "2027.2"))
        .unwrap();
    w.run_until(|w| w.next_due().is_none());
    let o = w.observe(&key).unwrap();
    assert!(
        matches!(assess("2026.2", &o), Progress::Failed { ref reason, .. } if reason == "UpgradeTargetChanged")
    );
    // Back to the installed release (with its image): the upgrade is aborted.
    w.apply(&key, Some("2026.1".into()), img("glance", "2026.1"))
        .unwrap();
    w.settle();
    assert!(w.event_reasons(&key).contains(&"UpgradeAborted"));
    assert!(
        w.job("image", "glance-db-expand").is_none()
            && w.job("image", "glance-db-migrate").is_none()
    );
    assert!(w.run_until(|w| complete(w, &key, "2026.1")));
}

#[test]
fn plane_projection_admits_skips_and_rejects_downgrades() {
    let mut w = World::new(Params::default());
    let plane = Key::new(Kind::ControlPlane, "openstack", "prod");
    w.install_plane(plane.clone(), "2026.1".into());
    let child = Key::new(Kind::Glance, "openstack", "prod-glance");
    w.install_steady(
        child.clone(),
        Some("2026.1".into()),
        img("glance", "2026.1"),
        Some(plane.clone()),
    );
    let err = w
        .apply_plane(
            &plane,
            "2025.2",
            &[(child.clone(), img("glance", "2025.2"))],
        )
        .unwrap_err();
    assert!(err.0.contains("admission webhook denied"));
    w.apply_plane(
        &plane,
        "2027.1",
        &[(child.clone(), img("glance", "2027.1"))],
    )
    .unwrap();
    w.run_until(|w| w.next_due().is_none());
    let o = w.observe(&child).unwrap();
    assert!(
        matches!(assess("2027.1", &o), Progress::Failed { ref reason, .. } if reason == "UpgradePathInvalid")
    );
}

#[test]
fn release_gates_of_placement_and_the_lockstep_guard() {
    let (mut w, key) = world_with(Kind::Placement, "openstack", "placement", "2026.1");
    // A bump with the image unchanged is refused by the operator's gate
    // (`docs/operators.md` §2.4).
    w.apply(
        &key,
        Some("2026.2".into()),
        ImageRef::new(
            Some("ghcr.io/c5c3/placement"),
            None,
            Some(&format!("sha256:{}", "0".repeat(64))),
        )
        .unwrap(),
    )
    .unwrap();
    w.settle();
    w.apply(
        &key,
        Some("2026.1".into()),
        ImageRef::new(
            Some("ghcr.io/c5c3/placement"),
            None,
            Some(&format!("sha256:{}", "0".repeat(64))),
        )
        .unwrap(),
    )
    .unwrap();
    w.run_until(|w| w.next_due().is_none());
    w.apply(
        &key,
        Some("2026.2".into()),
        ImageRef::new(
            Some("ghcr.io/c5c3/placement"),
            None,
            Some(&format!("sha256:{}", "0".repeat(64))),
        )
        .unwrap(),
    )
    .unwrap();
    w.settle();
    let o = w.observe(&key).unwrap();
    assert!(
        matches!(assess("2026.2", &o), Progress::Failed { ref reason, .. } if reason == "ImageReleaseMismatch"),
        "{o:?}"
    );
    // A tag naming another release parks any openStackRelease service.
    let (mut w, key) = world_with(Kind::Nova, "compute", "nova", "2026.1");
    w.apply(&key, Some("2026.2".into()), img("nova", "2026.1"))
        .unwrap();
    w.settle();
    let o = w.observe(&key).unwrap();
    assert!(
        matches!(assess("2026.2", &o), Progress::Failed { ref reason, .. } if reason == "ImageReleaseMismatch")
    );
    assert!(w.next_due().is_none(), "parked: nothing runs");
}

#[test]
fn a_database_outage_costs_failed_tries() {
    let (mut w, key) = world_with(Kind::Glance, "image", "glance", "2026.1");
    w.faults.push(Fault::DatabaseDown {
        object: "glance".into(),
        until: Duration::from_secs(500),
    });
    w.apply(&key, Some("2026.2".into()), img("glance", "2026.2"))
        .unwrap();
    assert!(w.run_until(|w| complete(w, &key, "2026.2")));
    assert_eq!(
        w.job("image", "glance-db-expand").unwrap().failed_tries,
        3,
        "tries at 0, 207, 414 fail; 621 succeeds"
    );
}

/// A projected child belongs to the plane defined in its own file: two
/// planes of one name (in two namespaces, two files) each get their own
/// children, whatever the order of the list (the seed indexes the list
/// once instead of searching it per child).
#[test]
fn seeding_gives_each_child_the_plane_of_its_own_file() {
    use lockstep::desired::Desired;
    let d = |key: Key, file: &str, plane: Option<&str>| Desired {
        image: (key.kind != Kind::ControlPlane).then(|| img(key.kind.service(), "2026.1")),
        key,
        file: file.into(),
        line: 1,
        projected_by: plane.map(str::to_owned),
        release: Some("2026.1".into()),
        release_line: 1,
        lockstep_release: Some("2026.1".into()),
        image_line: 1,
        image_overridden: false,
        recreate_below: None,
        fingerprint: None,
    };
    let plane_a = Key::new(Kind::ControlPlane, "a", "prod");
    let plane_b = Key::new(Kind::ControlPlane, "b", "prod");
    let nova_a = Key::new(Kind::Nova, "a-compute", "nova");
    let nova_b = Key::new(Kind::Nova, "b-compute", "nova");
    // Children listed before, between and after the planes.
    let desired = vec![
        d(nova_b.clone(), "b.yaml", Some("prod")),
        d(plane_a.clone(), "a.yaml", None),
        d(nova_a.clone(), "a.yaml", Some("prod")),
        d(plane_b.clone(), "b.yaml", None),
    ];
    let mut w = World::new(Params::default());
    w.seed(&desired);
    assert_eq!(w.objects[&nova_a].projected_by.as_ref(), Some(&plane_a));
    assert_eq!(w.objects[&nova_b].projected_by.as_ref(), Some(&plane_b));
    assert_eq!(w.planes.len(), 2);
    // A child whose file defines no such plane: the plane of that name in
    // the child's namespace.
    let lone = Key::new(Kind::Glance, "c", "glance");
    w.seed(&[d(lone.clone(), "c.yaml", Some("edge"))]);
    assert_eq!(
        w.objects[&lone].projected_by,
        Some(Key::new(Kind::ControlPlane, "c", "edge"))
    );
}
