//! A newcomer without the upstream CRDs (`../shared/fixtures/crds`, or
//! `LOCKSTEP_SHARED`) sees one sentence from every test that needs them,
//! naming the files, where they were looked for and the variable, before
//! any server starts. One test in its own binary: it sets the variable for
//! the whole process.

mod common;

use std::panic;

fn panic_text(e: Box<dyn std::any::Any + Send>) -> String {
    e.downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default()
}

#[test]
fn without_the_crds_kube_and_schema_tests_say_exactly_what_is_missing() {
    let empty = tempfile::tempdir().expect("tempdir");
    // SAFETY: the only test of this binary; nothing else reads the
    // environment concurrently.
    unsafe { std::env::set_var("LOCKSTEP_SHARED", empty.path()) };
    let want = common::missing_crds(&empty.path().join("fixtures/crds"));
    assert!(
        want.contains("LOCKSTEP_SHARED") && want.contains("../shared") && want.contains("*.yaml"),
        "{want}"
    );
    // What the CRD-schema test calls first.
    let e = panic::catch_unwind(common::shared_crds).expect_err("refused");
    assert_eq!(panic_text(e), want);
    // What every real-API-server test calls first: no server is started.
    let Err(e) = panic::catch_unwind(common::ApiServer::start) else {
        panic!("an API server started without CRDs");
    };
    assert_eq!(panic_text(e), want);
    // A directory with files but no CRDs says the same.
    std::fs::create_dir_all(empty.path().join("fixtures/crds")).expect("mkdir");
    std::fs::write(empty.path().join("fixtures/crds/README.md"), "none").expect("write");
    let e = panic::catch_unwind(common::shared_crds).expect_err("refused");
    assert_eq!(panic_text(e), want);
}
