//! `lockstep run`'s configuration file (a ConfigMap in the deployment).
//!
//! Asserts: `Config::from_yaml` never panics and its errors name the file; a
//! parsed configuration survives a JSON round trip unchanged (the schema is
//! generated from the same types) and `validate` never panics; a valid one
//! has exactly one source, a non-zero poll interval that `poll_interval`
//! returns, durations that parse and a cluster name without blanks.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use lockstep::config::{Config, duration};

const FILE: &str = "lockstep-config.yaml";

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let config = match Config::from_yaml(text, Path::new(FILE)) {
        Ok(c) => c,
        Err(e) => {
            let shown = e.to_string();
            assert!(shown.starts_with(FILE), "{shown}");
            return;
        }
    };
    let value = serde_json::to_value(&config).expect("a parsed configuration serializes");
    let back: Config = serde_json::from_value(value.clone())
        .unwrap_or_else(|e| panic!("{e}: does not read back: {value}"));
    assert_eq!(back, config, "JSON round trip");

    if config.validate().is_err() {
        return;
    }
    assert!(config.source.repo.is_some() != config.source.url.is_some());
    let poll = duration(&config.source.poll_interval).expect("a valid pollInterval parses");
    assert!(!poll.is_zero());
    assert_eq!(config.poll_interval(), poll);
    assert!(duration(&config.cluster.stall_after).is_some());
    assert!(duration(&config.leader_election.lease_duration).is_some());
    assert!(!config.cluster.name.is_empty());
    assert!(!config.cluster.name.contains(char::is_whitespace));
});
