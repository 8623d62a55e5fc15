//! Webhook deliveries: the headers and JSON body of a GitHub, GitLab or
//! Gitea/Forgejo push or pull/merge-request event.
//!
//! Input, readable so that seeds can be written by hand:
//!
//! ```text
//! github                       <- host: github, gitlab or gitea (else picked by length)
//! x-github-event: push         <- headers, one per line, up to an empty line
//! x-github-delivery: 1234
//!
//! {"ref": "refs/heads/main", ...}   <- the body, to the end
//! ```
//!
//! Asserts: `webhook::parse_unverified` never panics and is deterministic;
//! only a push or pull/merge-request event name can make a trigger; a
//! trigger carries the host it came in on, the delivery id from a header,
//! the repository and commit as the body has them, never the all-zero
//! commit of a deleted branch, and a ref matching its kind (a pull request's
//! own head ref, a base under `refs/heads/`). The HMAC check accepts exactly
//! the digest `sign_hex` computes, and a GitLab token only when equal.
#![no_main]

use http::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;
use lockstep::secret::Secret;
use lockstep::webhook::{Host, Parsed, parse_unverified, sign_hex, verify_hmac_hex};
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let (host_line, rest) = split_line(data);
    let host = match host_line {
        b"github" => Host::GitHub,
        b"gitlab" => Host::GitLab,
        b"gitea" => Host::Gitea,
        other => [Host::GitHub, Host::GitLab, Host::Gitea][other.len() % 3],
    };
    let mut headers = HeaderMap::new();
    let mut rest = rest;
    loop {
        let (line, tail) = split_line(rest);
        rest = tail;
        if line.is_empty() {
            break;
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        // What hyper would let through: a valid name, a valid value.
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(line[..colon].trim_ascii()),
            HeaderValue::from_bytes(line[colon + 1..].trim_ascii()),
        ) {
            headers.append(name, value);
        }
    }
    let body = rest;

    let parsed = parse_unverified(host, &headers, body);
    assert_eq!(
        parsed,
        parse_unverified(host, &headers, body),
        "not deterministic"
    );
    if let Parsed::Trigger(t) = &parsed {
        trigger(host, &headers, body, t);
    }
    signatures(&headers, body);
});

fn trigger(host: Host, headers: &HeaderMap, body: &[u8], t: &lockstep::webhook::Trigger) {
    assert_eq!(t.host, host);
    let values: Vec<&str> = headers.values().filter_map(|v| v.to_str().ok()).collect();
    let event = |names: &[&str]| values.iter().any(|v| names.contains(v));
    assert!(
        t.delivery.is_empty() || values.contains(&t.delivery.as_str()),
        "delivery {:?} is in no header",
        t.delivery
    );
    let json: Value = serde_json::from_slice(body).expect("a trigger from a body that is not JSON");
    let at = |path: &[&str]| {
        path.iter()
            .try_fold(&json, |v, k| v.get(k))
            .and_then(Value::as_str)
    };
    let repo = match host {
        Host::GitLab => at(&["project", "path_with_namespace"]),
        Host::GitHub | Host::Gitea => at(&["repository", "full_name"]),
    };
    assert_eq!(Some(t.repo.as_str()), repo);
    match t.pull_request {
        None => {
            assert!(
                event(&["push", "Push Hook"]),
                "a push trigger from {values:?}"
            );
            assert_eq!(Some(t.git_ref.as_str()), at(&["ref"]));
            let sha = match host {
                Host::GitLab => at(&["checkout_sha"]).or_else(|| at(&["after"])),
                Host::GitHub | Host::Gitea => at(&["after"]),
            };
            assert_eq!(Some(t.sha.as_str()), sha);
            assert!(
                t.sha.is_empty() || !t.sha.bytes().all(|b| b == b'0'),
                "a deleted branch became a trigger"
            );
            assert_eq!(t.base_ref, None);
        }
        Some(n) => {
            assert!(
                event(&["pull_request", "pull_request_sync", "Merge Request Hook"]),
                "a pull-request trigger from {values:?}"
            );
            let want = match host {
                Host::GitLab => format!("refs/merge-requests/{n}/head"),
                Host::GitHub | Host::Gitea => format!("refs/pull/{n}/head"),
            };
            assert_eq!(t.git_ref, want);
            let sha = match host {
                Host::GitLab => at(&["object_attributes", "last_commit", "id"]),
                Host::GitHub | Host::Gitea => at(&["pull_request", "head", "sha"]),
            };
            assert_eq!(Some(t.sha.as_str()), sha);
            if let Some(b) = &t.base_ref {
                assert!(b.starts_with("refs/heads/"), "{b:?}");
            }
        }
    }
}

/// The signature checks the receiver runs before anything is parsed.
fn signatures(headers: &HeaderMap, body: &[u8]) {
    let secret = Secret::new("fuzz-secret");
    let good = sign_hex(&secret, body);
    assert_eq!(good.len(), 64);
    assert!(verify_hmac_hex(&secret, body, &good));
    for v in headers.values().filter_map(|v| v.to_str().ok()) {
        let v = v.strip_prefix("sha256=").unwrap_or(v);
        assert_eq!(
            verify_hmac_hex(&secret, body, v),
            v.trim().eq_ignore_ascii_case(&good),
            "{v:?}"
        );
        assert_eq!(
            secret.matches(v.as_bytes()),
            v == "fuzz-secret",
            "token {v:?}"
        );
    }
}

fn split_line(data: &[u8]) -> (&[u8], &[u8]) {
    match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[]),
    }
}
