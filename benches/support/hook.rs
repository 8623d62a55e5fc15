//! Talking to `lockstep run` over loopback HTTP: its metrics, and a signed
//! GitHub push event (what GitHub sends after a push). Shared by
//! `daemon.rs` and `race.rs`.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use hmac::{KeyInit, Mac};

/// GET `path`: the whole answer when it is a 200.
pub fn get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    out.starts_with("HTTP/1.1 200").then_some(out)
}

/// A GitHub push event for `sha` on main, signed with `secret`; true when
/// the receiver took it (202, or 200 for a replay).
pub fn post_push(port: u16, secret: &str, sha: &str, n: usize) -> bool {
    let body = format!(
        r#"{{"ref":"refs/heads/main","before":"0000000000000000000000000000000000000000","after":"{sha}","repository":{{"full_name":"bench/fleet"}}}}"#
    );
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).expect("key");
    mac.update(body.as_bytes());
    let sig = hex::encode(mac.finalize().into_bytes());
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let req = format!(
        "POST /hooks/github HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-GitHub-Event: push\r\nX-GitHub-Delivery: bench-{n}\r\nX-Hub-Signature-256: sha256={sig}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    if s.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut line = String::new();
    let _ = BufReader::new(s).read_line(&mut line);
    line.contains(" 202") || line.contains(" 200")
}

/// A counter or histogram sum from the Prometheus text.
pub fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The daemon's mirror of the repository under its `--cache-dir`, once
/// it exists.
pub fn mirror(cache: &std::path::Path) -> Option<std::path::PathBuf> {
    std::fs::read_dir(cache)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.is_dir())
}

/// Whether `repo` (the mirror) holds a lockstep note on `sha`: the commit's
/// verdict was written.
pub fn has_note(repo: &std::path::Path, sha: &str) -> bool {
    let Ok(r) = git2::Repository::open(repo) else {
        return false;
    };
    let Ok(oid) = git2::Oid::from_str(sha) else {
        return false;
    };
    r.find_note(Some("refs/notes/lockstep"), oid).is_ok()
}
