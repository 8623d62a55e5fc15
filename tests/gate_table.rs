//! Every row of the gate table (`docs/gate.md`), on the pure gate: manifests
//! in, verdicts out, no Git and no cluster.

mod common;

use common::{glance_digest, nova, prod, staging};
use lockstep::desired::{Desired, expand};
use lockstep::gate::{
    CommitInput, ObjectVerdict, Reason, Transition, Verdict, commit_verdict, judge_commit,
};
use lockstep::live::{Live, parse_live};
use lockstep::manifest::{DEFAULT_MAX_FILE_BYTES, Problem, parse_file};

struct Side {
    desired: Vec<Desired>,
    problems: Vec<Problem>,
}

fn side(files: &[(&str, &str)]) -> Side {
    let mut desired = Vec::new();
    let mut problems = Vec::new();
    for (name, text) in files {
        let p = parse_file(name, text.as_bytes(), DEFAULT_MAX_FILE_BYTES);
        desired.extend(expand(&p.documents));
        problems.extend(p.problems);
    }
    Side { desired, problems }
}

fn judge_live(
    base: &[(&str, &str)],
    next: &[(&str, &str)],
    live: Option<&Live>,
) -> Vec<ObjectVerdict> {
    let b = side(base);
    let n = side(next);
    judge_commit(&CommitInput {
        baseline: &b.desired,
        next: &n.desired,
        elsewhere: &[],
        problems: &n.problems,
        live,
        floors: &Default::default(),
        policies: &Default::default(),
        acks: &Default::default(),
    })
}

fn judge(base: &[(&str, &str)], next: &[(&str, &str)]) -> Vec<ObjectVerdict> {
    judge_live(base, next, None)
}

fn one(v: &[ObjectVerdict], kind: &str, name: &str) -> ObjectVerdict {
    v.iter()
        .find(|o| o.kind.map(|k| k.as_str()) == Some(kind) && o.name.as_deref() == Some(name))
        .cloned()
        .unwrap_or_else(|| panic!("no {kind} {name} in {v:#?}"))
}

fn live_nova(installed: &str, target: &str, phase: &str) -> Live {
    parse_live(
        "live.yaml",
        &format!(
            "apiVersion: v1\nkind: List\nitems:\n- apiVersion: nova.openstack.c5c3.io/v1alpha1\n  kind: Nova\n  metadata: {{name: nova, namespace: compute, generation: 3}}\n  status: {{installedRelease: \"{installed}\", targetRelease: \"{target}\", upgradePhase: \"{phase}\"}}\n"
        ),
    )
    .expect("live parses")
}

const F: &str = "nova.yaml";

#[test]
fn new_object_is_installed() {
    let v = judge(&[], &[(F, &nova("nova", "2026.1", "2026.1"))]);
    let o = one(&v, "Nova", "nova");
    assert_eq!(
        (o.transition, o.verdict, o.reason),
        (Transition::Install, Verdict::Accepted, None)
    );
    assert_eq!(o.to.as_deref(), Some("2026.1"));
}

#[test]
fn removed_object_is_accepted_and_never_deleted() {
    let v = judge(&[(F, &nova("nova", "2026.1", "2026.1"))], &[]);
    let o = one(&v, "Nova", "nova");
    assert_eq!(
        (o.transition, o.verdict),
        (Transition::Remove, Verdict::Accepted)
    );
    assert!(o.message.contains("never deletes"), "{}", o.message);
}

#[test]
fn unparseable_release_is_version_parse_error() {
    for bad in ["2026.3", "latest", "2026", "26.1"] {
        let v = judge(
            &[(F, &nova("nova", "2026.1", "2026.1"))],
            &[(F, &nova("nova", bad, "2026.1"))],
        );
        let o = one(&v, "Nova", "nova");
        assert_eq!(o.reason, Some(Reason::VersionParseError), "{bad}");
        assert_eq!(o.verdict, Verdict::Refused);
        assert_eq!(o.line, 7, "points at openStackRelease");
    }
}

#[test]
fn tag_naming_another_release_is_image_release_mismatch() {
    let v = judge(
        &[(F, &nova("nova", "2026.1", "2026.1"))],
        &[(F, &nova("nova", "2026.2", "2026.1-p3"))],
    );
    let o = one(&v, "Nova", "nova");
    assert_eq!(o.reason, Some(Reason::ImageReleaseMismatch));
    assert_eq!(o.line, 10, "points at the image tag");
    // A tag that is not a release (an upstream version) is not compared.
    let v = judge(
        &[(F, &nova("nova", "2026.1", "2026.1"))],
        &[(F, &nova("nova", "2026.1", "33.0.0"))],
    );
    assert_eq!(one(&v, "Nova", "nova").transition, Transition::Patch);
}

#[test]
fn both_or_neither_tag_and_digest_is_manifest_invalid() {
    let both = nova("nova", "2026.1", "2026.1").replace(
        "    tag: \"2026.1\"",
        &format!("    tag: \"2026.1\"\n    digest: sha256:{}", "a".repeat(64)),
    );
    let neither = nova("nova", "2026.1", "2026.1").replace("    tag: \"2026.1\"", "");
    for text in [both, neither] {
        let v = judge(&[(F, &nova("nova", "2026.1", "2026.1"))], &[(F, &text)]);
        assert_eq!(v.len(), 1, "{v:#?}");
        assert_eq!(v[0].reason, Some(Reason::ManifestInvalid));
        assert_eq!(v[0].name.as_deref(), Some("nova"), "the object is named");
        assert!(
            v[0].message
                .contains("exactly one of image.tag or image.digest")
        );
        assert_eq!(commit_verdict(&v), Verdict::Refused);
    }
}

#[test]
fn same_release_new_image_is_a_patch_and_same_image_is_unchanged() {
    let base = nova("nova", "2026.1", "2026.1");
    let v = judge(&[(F, &base)], &[(F, &nova("nova", "2026.1", "2026.1-p1"))]);
    assert_eq!(one(&v, "Nova", "nova").transition, Transition::Patch);
    // Unchanged objects are not listed (a comment-only edit changes nothing).
    let v = judge(&[(F, &base)], &[(F, &format!("# reviewed\n{base}"))]);
    assert!(v.is_empty(), "{v:#?}");
    assert_eq!(commit_verdict(&v), Verdict::Accepted);
}

/// A document that changes but keeps its release and image is a
/// reconfiguration: accepted, and applied like a patch (`docs/gate.md`).
/// Comments, quoting and layout are not the document: unchanged. A plane's
/// own fields count; a plane whose children moved says so through them.
#[test]
fn a_changed_document_with_the_same_release_and_image_is_a_reconfiguration() {
    let base = nova("nova", "2026.1", "2026.1");
    let edited = base.replace(
        "keystoneEndpoint: http://keystone.identity.svc:5000/v3",
        "keystoneEndpoint: http://keystone-2.identity.svc:5000/v3",
    );
    assert_ne!(edited, base);
    let v = judge(&[(F, &base)], &[(F, &edited)]);
    let o = one(&v, "Nova", "nova");
    assert_eq!(
        (o.transition, o.verdict, o.reason),
        (Transition::Reconfigure, Verdict::Accepted, None)
    );
    assert_eq!(
        (o.from.as_deref(), o.to.as_deref()),
        (Some("2026.1"), Some("2026.1"))
    );
    assert_eq!(o.line, 1, "points at the document");
    // The same values written another way: nothing changed.
    let respelled = base
        .replace("openStackRelease: \"2026.1\"", "openStackRelease: '2026.1'")
        .replace("kind: Nova\n", "kind: \"Nova\"   # the kind\n");
    assert_ne!(respelled, base);
    assert!(judge(&[(F, &base)], &[(F, &respelled)]).is_empty());

    const P: &str = "prod.yaml";
    let plane = prod("2026.1", "2026.1");
    let regional = plane.replace("region: RegionOne", "region: RegionTwo");
    assert_ne!(regional, plane);
    let v = judge(&[(P, &plane)], &[(P, &regional)]);
    assert_eq!(v.len(), 1, "only the plane, its children unchanged: {v:#?}");
    assert_eq!(
        one(&v, "ControlPlane", "prod").transition,
        Transition::Reconfigure
    );
    // An override's tag moves a child: the child's patch says it all.
    let v = judge(&[(P, &plane)], &[(P, &prod("2026.1", "2026.1-p1"))]);
    assert!(
        v.iter().all(|o| o.transition == Transition::Patch),
        "{v:#?}"
    );
    assert!(!v.is_empty());
    // A service block dropped: the child leaves (kept running), and the
    // plane is reconfigured without it.
    let start = plane.find("    horizon:\n").expect("horizon block");
    let end = plane[start..].find("    glance:\n").expect("next block") + start;
    let dropped = format!("{}{}", &plane[..start], &plane[end..]);
    let v = judge(&[(P, &plane)], &[(P, &dropped)]);
    assert_eq!(
        one(&v, "Horizon", "prod-horizon").transition,
        Transition::Remove
    );
    assert_eq!(
        one(&v, "ControlPlane", "prod").transition,
        Transition::Reconfigure
    );
}

#[test]
fn next_release_with_new_image_is_an_upgrade() {
    let v = judge(
        &[(F, &nova("nova", "2026.2", "2026.2"))],
        &[(F, &nova("nova", "2027.1", "2027.1"))],
    );
    let o = one(&v, "Nova", "nova");
    assert_eq!(
        (o.transition, o.verdict),
        (Transition::Upgrade, Verdict::Accepted)
    );
    assert_eq!(
        (o.from.as_deref(), o.to.as_deref()),
        (Some("2026.2"), Some("2027.1"))
    );
}

#[test]
fn next_release_with_unchanged_image_is_refused() {
    // Only a digest can stay unchanged across a bump without a tag mismatch.
    let v = judge(
        &[(F, &glance_digest("2026.1", 'a'))],
        &[(F, &glance_digest("2026.2", 'a'))],
    );
    let o = one(&v, "Glance", "glance");
    assert_eq!(
        (o.verdict, o.reason),
        (Verdict::Refused, Some(Reason::ImageReleaseMismatch))
    );
    assert!(o.message.contains("no-ops"), "{}", o.message);
    // With the digest bumped too it is an upgrade.
    let v = judge(
        &[(F, &glance_digest("2026.1", 'a'))],
        &[(F, &glance_digest("2026.2", 'b'))],
    );
    assert_eq!(one(&v, "Glance", "glance").transition, Transition::Upgrade);
}

#[test]
fn skip_level_is_upgrade_path_invalid() {
    let v = judge(
        &[(F, &nova("nova", "2025.2", "2025.2"))],
        &[(F, &nova("nova", "2026.2", "2026.2"))],
    );
    let o = one(&v, "Nova", "nova");
    assert_eq!(
        (o.transition, o.reason),
        (Transition::Skip, Some(Reason::UpgradePathInvalid))
    );
    assert!(o.message.contains("skips 2026.1"), "{}", o.message);
    // It names the fast-forward path: a plan walks the jump one hop at a time.
    assert!(
        o.message.contains(
            "or let an UpgradePlan with to: \"2026.2\" walk it one hop at a time (plans/README.md)"
        ),
        "{}",
        o.message
    );
    assert!(
        !o.message.contains("SLURP"),
        "2025.2 is no SLURP release: {}",
        o.message
    );
}

#[test]
fn a_slurp_jump_is_refused_and_says_how_to_take_it() {
    let v = judge(
        &[(F, &nova("nova", "2025.1", "2025.1"))],
        &[(F, &nova("nova", "2026.1", "2026.1"))],
    );
    let o = one(&v, "Nova", "nova");
    assert_eq!(
        (o.transition, o.reason),
        (Transition::Skip, Some(Reason::UpgradePathInvalid))
    );
    for words in [
        "upstream OpenStack supports this SLURP upgrade directly",
        "the C5C3 operators accept one release at a time",
        "2025.1 → 2025.2 first, then 2026.1",
        "an UpgradePlan with to: \"2026.1\" walk it one hop at a time",
    ] {
        assert!(o.message.contains(words), "{words}: {}", o.message);
    }
    // Further than one SLURP step is a plain skip.
    let v = judge(
        &[(F, &nova("nova", "2025.1", "2025.1"))],
        &[(F, &nova("nova", "2027.1", "2027.1"))],
    );
    assert!(!one(&v, "Nova", "nova").message.contains("SLURP"));
}

#[test]
fn lower_release_is_downgrade_not_supported() {
    let v = judge(
        &[(F, &nova("nova", "2026.2", "2026.2"))],
        &[(F, &nova("nova", "2026.1", "2026.1"))],
    );
    let o = one(&v, "Nova", "nova");
    assert_eq!(
        (o.transition, o.reason),
        (Transition::Downgrade, Some(Reason::DowngradeNotSupported))
    );
}

#[test]
fn standalone_abort_in_flight_is_accepted() {
    let live = live_nova("2026.1", "2026.2", "Migrating");
    let v = judge_live(
        &[(F, &nova("nova", "2026.2", "2026.2"))],
        &[(F, &nova("nova", "2026.1", "2026.1"))],
        Some(&live),
    );
    let o = one(&v, "Nova", "nova");
    assert_eq!(
        (o.transition, o.verdict),
        (Transition::Abort, Verdict::Accepted)
    );
}

#[test]
fn abort_while_contracting_is_abort_unsafe() {
    let live = live_nova("2026.1", "2026.2", "Contracting");
    let v = judge_live(
        &[(F, &nova("nova", "2026.2", "2026.2"))],
        &[(F, &nova("nova", "2026.1", "2026.1"))],
        Some(&live),
    );
    let o = one(&v, "Nova", "nova");
    assert_eq!(
        (o.verdict, o.reason),
        (Verdict::Refused, Some(Reason::AbortUnsafe))
    );
}

#[test]
fn projected_service_or_plane_set_back_is_refused() {
    let v = judge(
        &[("cp.yaml", &staging("2026.2"))],
        &[("cp.yaml", &staging("2026.1"))],
    );
    for (kind, name) in [
        ("ControlPlane", "staging"),
        ("Glance", "staging-glance"),
        ("Keystone", "staging-keystone"),
    ] {
        let o = one(&v, kind, name);
        assert_eq!(o.reason, Some(Reason::DowngradeNotSupported), "{kind}");
    }
    // Even while a child is upgrading, there is no abort through the plane.
    let live = parse_live(
        "l",
        "apiVersion: glance.openstack.c5c3.io/v1alpha1\nkind: Glance\nmetadata: {name: staging-glance, namespace: openstack-staging}\nstatus: {installedRelease: \"2026.1\", targetRelease: \"2026.2\", upgradePhase: Expanding}\n",
    )
    .expect("live");
    let v = judge_live(
        &[("cp.yaml", &staging("2026.2"))],
        &[("cp.yaml", &staging("2026.1"))],
        Some(&live),
    );
    let o = one(&v, "Glance", "staging-glance");
    assert_eq!(o.reason, Some(Reason::DowngradeNotSupported));
    assert!(o.message.contains("no abort path"), "{}", o.message);
}

#[test]
fn next_hop_during_an_upgrade_is_held() {
    let live = live_nova("2026.1", "2026.2", "RollingUpdate");
    let v = judge_live(
        &[(F, &nova("nova", "2026.2", "2026.2"))],
        &[(F, &nova("nova", "2027.1", "2027.1"))],
        Some(&live),
    );
    let o = one(&v, "Nova", "nova");
    assert_eq!(
        (o.transition, o.verdict, o.reason),
        (
            Transition::Queued,
            Verdict::Held,
            Some(Reason::UpgradeInProgress)
        )
    );
    // Held objects do not refuse the commit.
    assert_eq!(commit_verdict(&v), Verdict::Accepted);
}

#[test]
fn third_release_during_an_upgrade_is_upgrade_target_changed() {
    let live = live_nova("2026.1", "2026.2", "Expanding");
    let v = judge_live(
        &[(F, &nova("nova", "2026.2", "2026.2"))],
        &[(F, &nova("nova", "2027.2", "2027.2"))],
        Some(&live),
    );
    let o = one(&v, "Nova", "nova");
    assert_eq!(
        (o.transition, o.reason),
        (Transition::Retarget, Some(Reason::UpgradeTargetChanged))
    );
}

#[test]
fn release_below_the_live_installed_one_is_refused() {
    let live = live_nova("2026.2", "", "");
    // Git still says 2026.1 (someone upgraded out of band); a patch at 2026.1 would downgrade.
    let v = judge_live(
        &[(F, &nova("nova", "2026.1", "2026.1"))],
        &[(F, &nova("nova", "2026.1", "2026.1-p1"))],
        Some(&live),
    );
    let o = one(&v, "Nova", "nova");
    assert_eq!(o.reason, Some(Reason::DowngradeNotSupported));
    assert!(o.message.contains("already runs 2026.2"), "{}", o.message);
}

#[test]
fn projected_child_also_standalone_is_refused() {
    let child = glance_digest("2026.1", 'a')
        .replacen("name: glance ", "name: staging-glance ", 1)
        .replacen("namespace: image", "namespace: openstack-staging", 1);
    let v = judge(
        &[("cp.yaml", &staging("2026.1"))],
        &[("cp.yaml", &staging("2026.1")), ("child.yaml", &child)],
    );
    let o = one(&v, "Glance", "staging-glance");
    assert_eq!(o.reason, Some(Reason::ProjectedChildEdited));
    assert_eq!(
        o.projected_by, None,
        "the standalone document is the one refused"
    );
    assert!(o.message.contains("cp.yaml"), "{}", o.message);
}

#[test]
fn duplicate_documents_are_manifest_invalid() {
    let n = nova("nova", "2026.1", "2026.1");
    let v = judge(&[], &[("a.yaml", &n), ("b.yaml", &n)]);
    assert_eq!(v.len(), 2);
    assert!(v.iter().all(|o| o.reason == Some(Reason::ManifestInvalid)));
    assert!(v[0].message.contains("defined more than once"));
}

#[test]
fn unparseable_document_names_file_and_line() {
    let broken = nova("nova", "2026.1", "2026.1").replace("  image:\n", "  image: [\n");
    let v = judge(&[(F, &nova("nova", "2026.1", "2026.1"))], &[(F, &broken)]);
    assert_eq!(v.len(), 1, "a broken file is not a removal: {v:#?}");
    assert_eq!(v[0].reason, Some(Reason::ManifestInvalid));
    assert_eq!(&*v[0].file, F);
    assert!(v[0].line > 1);
}

#[test]
fn plane_rules_run_on_each_child_image() {
    // prod moves to 2026.2 but its placement override still says 2026.1.
    let v = judge(
        &[("p.yaml", &prod("2026.1", "2026.1"))],
        &[("p.yaml", &prod("2026.2", "2026.1"))],
    );
    assert_eq!(commit_verdict(&v), Verdict::Refused);
    let o = one(&v, "Placement", "prod-placement");
    assert_eq!(o.reason, Some(Reason::ImageReleaseMismatch));
    assert!(o.message.contains("override"), "{}", o.message);
    assert_eq!(o.projected_by.as_deref(), Some("prod"));
    assert_eq!(one(&v, "Nova", "prod-nova").transition, Transition::Upgrade);
    // Both together: every child upgrades.
    let v = judge(
        &[("p.yaml", &prod("2026.1", "2026.1"))],
        &[("p.yaml", &prod("2026.2", "2026.2"))],
    );
    assert_eq!(commit_verdict(&v), Verdict::Accepted);
    assert_eq!(
        v.iter()
            .filter(|o| o.transition == Transition::Upgrade)
            .count(),
        9
    );
}

#[test]
fn plane_skip_level_is_refused_although_its_webhook_admits_it() {
    let v = judge(
        &[("cp.yaml", &staging("2026.1"))],
        &[("cp.yaml", &staging("2027.1"))],
    );
    assert_eq!(
        one(&v, "ControlPlane", "staging").reason,
        Some(Reason::UpgradePathInvalid)
    );
    assert_eq!(
        one(&v, "Horizon", "staging-horizon").reason,
        Some(Reason::UpgradePathInvalid)
    );
}

#[test]
fn keystone_release_is_its_tag() {
    let ks = |tag: &str| {
        format!(
            "apiVersion: keystone.openstack.c5c3.io/v1alpha1\nkind: Keystone\nmetadata: {{name: keystone, namespace: identity}}\nspec:\n  image:\n    repository: ghcr.io/c5c3/keystone\n    tag: \"{tag}\"\n"
        )
    };
    let v = judge(&[("k.yaml", &ks("2026.1"))], &[("k.yaml", &ks("2026.2"))]);
    assert_eq!(
        one(&v, "Keystone", "keystone").transition,
        Transition::Upgrade
    );
    let v = judge(&[("k.yaml", &ks("2026.1"))], &[("k.yaml", &ks("2027.1"))]);
    assert_eq!(
        one(&v, "Keystone", "keystone").reason,
        Some(Reason::UpgradePathInvalid)
    );
    let v = judge(&[("k.yaml", &ks("2026.1"))], &[("k.yaml", &ks("latest"))]);
    assert_eq!(
        one(&v, "Keystone", "keystone").reason,
        Some(Reason::VersionParseError)
    );
}

/// A standalone manifest for an object the cluster shows a ControlPlane
/// projecting (the plane removed from Git keeps running and re-asserts it):
/// refused with `--live`, whether the snapshot shows the controller
/// ownerReference (same namespace) or the labels (another namespace). The
/// daemon blocks such a unit by the same rule (`gate_property.rs`).
#[test]
fn standalone_over_a_child_a_live_plane_projects_is_refused() {
    let child = nova("prod-nova", "2026.1", "2026.1").replacen(
        "namespace: compute",
        "namespace: openstack",
        1,
    );
    let by_owner = "apiVersion: nova.openstack.c5c3.io/v1alpha1\nkind: Nova\nmetadata:\n  name: prod-nova\n  namespace: openstack\n  ownerReferences:\n  - {apiVersion: c5c3.io/v1alpha1, kind: ControlPlane, name: prod, uid: u1, controller: true}\nstatus: {installedRelease: \"2025.2\"}\n";
    let by_labels = "apiVersion: nova.openstack.c5c3.io/v1alpha1\nkind: Nova\nmetadata:\n  name: prod-nova\n  namespace: openstack\n  labels: {c5c3.io/controlplane-name: prod, c5c3.io/controlplane-namespace: planes}\nstatus: {installedRelease: \"2025.2\"}\n";
    for (snapshot, plane) in [(by_owner, "openstack/prod"), (by_labels, "planes/prod")] {
        let live = parse_live("live.yaml", snapshot).expect("live");
        let v = judge_live(&[], &[("prod-nova.yaml", &child)], Some(&live));
        let o = one(&v, "Nova", "prod-nova");
        assert_eq!(
            (o.verdict, o.reason),
            (Verdict::Refused, Some(Reason::ProjectedChildEdited)),
            "{o:#?}"
        );
        assert!(
            o.message.contains(&format!("ControlPlane {plane}"))
                && o.message.contains("Change the plane in Git"),
            "{}",
            o.message
        );
    }
    // Owned by something else (a Deployment, another group's ControlPlane):
    // not a plane's child; the ordinary rules judge it.
    let other = "apiVersion: nova.openstack.c5c3.io/v1alpha1\nkind: Nova\nmetadata:\n  name: prod-nova\n  namespace: openstack\n  ownerReferences:\n  - {apiVersion: example.com/v1, kind: ControlPlane, name: prod, uid: u1}\nstatus: {installedRelease: \"2025.2\"}\n";
    let live = parse_live("live.yaml", other).expect("live");
    let v = judge_live(&[], &[("prod-nova.yaml", &child)], Some(&live));
    assert_eq!(one(&v, "Nova", "prod-nova").verdict, Verdict::Accepted);
    // A malformed ownerReferences is an error, not "no owner".
    let bad = "apiVersion: nova.openstack.c5c3.io/v1alpha1\nkind: Nova\nmetadata:\n  name: prod-nova\n  namespace: openstack\n  ownerReferences: prod\n";
    let e = parse_live("live.yaml", bad)
        .expect_err("refused")
        .to_string();
    assert!(e.contains("metadata.ownerReferences is a string"), "{e}");
}
