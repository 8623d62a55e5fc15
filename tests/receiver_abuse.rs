//! The webhook receiver under abuse, over loopback, against the real
//! binary (`lockstep run` on the example fleet, sim mode): idle, slow-header
//! and slow-body clients are cut off, a flood of connections is answered
//! 503 past the cap with the process's descriptors bounded, `/healthz`
//! keeps answering throughout, a signed body replayed under 2,000 new long
//! delivery ids is a duplicate every time with memory flat, and no secret
//! reaches stdout or stderr at trace level (nor `--help`).
//!
//! The limits are the defaults of `src/server.rs` (headers within 10 s,
//! a whole request within 30 s, 256 connections), so this test takes
//! about 35 seconds; the slow clients run side by side.

mod common;

use std::fs::File;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, lockstep_bin};

const SECRET: &str = "whsec-Abuse-7f3e9c1d2b";
const TOKEN: &str = "ghp_TokenNeverPrinted_5a4b3c";

struct Run {
    child: Child,
    dir: tempfile::TempDir,
}

impl Run {
    fn pid(&self) -> u32 {
        self.child.id()
    }
    fn output(&self) -> String {
        let read = |n: &str| std::fs::read_to_string(self.dir.path().join(n)).unwrap_or_default();
        format!("{}\n{}", read("stdout"), read("stderr"))
    }
    /// Open descriptors of the process.
    fn fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .map(|d| d.count())
            .unwrap_or(0)
    }
    /// Resident memory in KiB.
    fn rss_kib(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("VmRSS:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            })
            .unwrap_or(0)
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One request, the status code of the answer (HTTP/1.0, read to the end).
fn request(addr: &str, head: &str, body: &[u8]) -> Result<u16, String> {
    let mut s = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok();
    s.write_all(head.as_bytes()).map_err(|e| e.to_string())?;
    s.write_all(body).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    status_of(&out).ok_or_else(|| format!("no HTTP answer: {:?}", String::from_utf8_lossy(&out)))
}

fn status_of(answer: &[u8]) -> Option<u16> {
    std::str::from_utf8(answer.get(..12)?)
        .ok()?
        .strip_prefix("HTTP/1.")?
        .get(2..5)?
        .parse()
        .ok()
}

fn healthz(addr: &str) -> Result<u16, String> {
    request(addr, "GET /healthz HTTP/1.0\r\n\r\n", b"")
}

fn hook(addr: &str, delivery: &str, body: &[u8]) -> Result<u16, String> {
    use hmac::{KeyInit, Mac};
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(SECRET.as_bytes()).expect("key");
    mac.update(body);
    let sig = hex::encode(mac.finalize().into_bytes());
    request(
        addr,
        &format!(
            "POST /hooks/github HTTP/1.0\r\nX-GitHub-Event: push\r\nX-GitHub-Delivery: {delivery}\r\nX-Hub-Signature-256: sha256={sig}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        ),
        body,
    )
}

/// How long until the server closes a connection that behaves like `act`
/// (which writes at its own pace and returns when it gives up), and what it
/// answered, if anything.
fn cut_off(addr: &str, act: impl FnOnce(&mut TcpStream) + Send + 'static) -> (Duration, Vec<u8>) {
    let mut s = TcpStream::connect(addr).expect("connect");
    let t = Instant::now();
    let mut writer = s.try_clone().expect("clone");
    let w = std::thread::spawn(move || act(&mut writer));
    s.set_read_timeout(Some(Duration::from_secs(60))).ok();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let took = t.elapsed();
    let _ = s.shutdown(Shutdown::Both);
    let _ = w.join();
    (took, out)
}

#[test]
fn the_receiver_holds_under_slow_clients_floods_and_replays_and_never_prints_a_secret() {
    let dir = tempfile::tempdir().expect("tempdir");
    let secret_file = dir.path().join("github-secret");
    std::fs::write(&secret_file, format!("{SECRET}\n")).expect("write");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, TOKEN).expect("write");
    let listen = format!("127.0.0.1:{}", free_port());
    let metrics = format!("127.0.0.1:{}", free_port());
    let logs = tempfile::tempdir().expect("tempdir");
    let mut cmd = Command::new(lockstep_bin());
    cmd.args([
        "run",
        "--listen",
        &listen,
        "--metrics-listen",
        &metrics,
        "--github-webhook-secret-file",
        &secret_file.to_string_lossy(),
        "--log-level",
        "trace",
    ])
    .stdin(Stdio::null())
    .stdout(File::create(logs.path().join("stdout")).expect("file"))
    .stderr(File::create(logs.path().join("stderr")).expect("file"));
    for (k, _) in std::env::vars() {
        if k.starts_with("LOCKSTEP_") || k == "KUBECONFIG" {
            cmd.env_remove(k);
        }
    }
    let run = Run {
        child: cmd.spawn().expect("lockstep runs"),
        dir: logs,
    };
    let t0 = Instant::now();
    while healthz(&metrics) != Ok(200) {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "never healthy: {}",
            run.output()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    while request(&listen, "GET / HTTP/1.0\r\n\r\n", b"").is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no receiver: {}",
            run.output()
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // 1. Slow clients, side by side: idle, headers at a byte every half
    //    second, a body at a byte a second.
    let a = listen.clone();
    let idle = std::thread::spawn(move || cut_off(&a, |_| {}));
    let a = listen.clone();
    let slow_head = std::thread::spawn(move || {
        cut_off(&a, |s| {
            for b in b"POST /hooks/github HTTP/1.1\r\nX-GitHub-Event: push\r\nX-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" {
                if s.write_all(&[*b]).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        })
    });
    let a = listen.clone();
    let slow_body = std::thread::spawn(move || {
        cut_off(&a, |s| {
            // Well shaped but wrongly signed: an unsigned one is answered
            // before its body is read.
            let head = format!(
                "POST /hooks/github HTTP/1.1\r\nHost: x\r\nX-Hub-Signature-256: sha256={}\r\nContent-Length: 200\r\n\r\n",
                "0".repeat(64)
            );
            if s.write_all(head.as_bytes()).is_err() {
                return;
            }
            for _ in 0..200 {
                if s.write_all(b"{").is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        })
    });

    // 2. A flood: 2,000 connections held open at once.
    std::thread::sleep(Duration::from_millis(300));
    let fds_before = run.fds();
    let mut held = Vec::new();
    let flood = Instant::now();
    for _ in 0..2_000 {
        if let Ok(s) = TcpStream::connect(&listen) {
            held.push(s);
        }
    }
    assert!(held.len() >= 1_900, "connections opened: {}", held.len());
    // The listener's queue takes the whole burst: a kernel that drops
    // connections past a short queue makes each retry its handshake a second
    // or more later, and a flood then outlasts the header deadline of the
    // first connections, whose places go to later ones.
    let connecting = flood.elapsed();
    assert!(
        connecting < Duration::from_secs(5),
        "2,000 connections took {connecting:?} to open: the listener's backlog drops a burst"
    );
    // Past the cap each is answered 503 at once and closed: none is held.
    let mut busy = 0;
    let mut held_open = 0;
    let mut other = std::collections::BTreeMap::<String, usize>::new();
    for s in held.iter_mut().rev().take(500) {
        s.set_read_timeout(Some(Duration::from_secs(3))).ok();
        let mut out = Vec::new();
        match s.read_to_end(&mut out) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => held_open += 1,
            _ if status_of(&out) == Some(503) => busy += 1,
            Err(e) => *other.entry(format!("{:?}", e.kind())).or_default() += 1,
            Ok(n) => *other.entry(format!("closed after {n} bytes")).or_default() += 1,
        }
    }
    assert!(
        held_open <= 5 && busy >= 250,
        "the last 500 of the flood: {busy} answered 503, {held_open} still open after 3 s, \
         others {other:?}"
    );
    let fds_during = run.fds();
    assert!(
        fds_during <= fds_before + 256 + 16,
        "descriptors bounded by the cap: {fds_before} before, {fds_during} during the flood"
    );
    // Health answers while the receiver is full.
    let h = Instant::now();
    assert_eq!(healthz(&metrics), Ok(200));
    assert!(
        h.elapsed() < Duration::from_secs(2),
        "/healthz took {:?}",
        h.elapsed()
    );
    drop(held);

    // 3. One signed body under 2,000 new delivery ids of 8 KB each.
    let body = br#"{"ref":"refs/heads/main","after":"0123456789abcdef0123456789abcdef01234567","repository":{"full_name":"fleet/fleet"}}"#;
    let t = Instant::now();
    while hook(&listen, "first-delivery", body) == Err(String::new()) {
        assert!(t.elapsed() < Duration::from_secs(10));
    }
    let rss_before = run.rss_kib();
    let mut duplicates = 0;
    for i in 0..2_000 {
        let id = format!("{i}-{}", "d".repeat(8 * 1024));
        match hook(&listen, &id, body) {
            Ok(200) => duplicates += 1,
            Ok(503) => std::thread::sleep(Duration::from_millis(10)),
            other => panic!("replay {i}: {other:?}"),
        }
    }
    let rss_after = run.rss_kib();
    assert!(duplicates >= 1_990, "duplicates: {duplicates}");
    assert!(
        rss_after <= rss_before + 20 * 1024,
        "memory flat under replays: {rss_before} KiB → {rss_after} KiB"
    );

    // The slow clients were cut off within their deadlines.
    let (took, out) = idle.join().expect("idle");
    assert!(
        took < Duration::from_secs(14) && out.is_empty(),
        "idle: {took:?} {out:?}"
    );
    let (took, _) = slow_head.join().expect("slow head");
    assert!(took < Duration::from_secs(14), "slow headers: {took:?}");
    let (took, out) = slow_body.join().expect("slow body");
    assert!(took < Duration::from_secs(34), "slow body: {took:?}");
    assert_eq!(
        status_of(&out),
        Some(408),
        "{:?}",
        String::from_utf8_lossy(&out)
    );

    // Still serving, and the secret never printed, at trace level.
    assert_eq!(healthz(&metrics), Ok(200));
    let output = run.output();
    assert!(output.contains("DEBUG"), "verbose logging on");
    assert!(!output.contains(SECRET), "the webhook secret was printed");
    let long_ids = output.matches(&"d".repeat(100)).count();
    assert_eq!(long_ids, 0, "a long delivery id was logged in full");

    // --help with credentials in the environment shows none of them.
    for sub in [&["run", "--help"][..], &["check", "--help"][..]] {
        let out = Command::new(lockstep_bin())
            .args(sub)
            .env(
                "LOCKSTEP_URL",
                format!("https://x-access-token:{TOKEN}@git.example/r"),
            )
            .env(
                "LOCKSTEP_FORGE_URL",
                format!("https://u:{TOKEN}@api.example"),
            )
            .env("LOCKSTEP_TOKEN_FILE", &token_file)
            .output()
            .expect("help");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(!text.contains(TOKEN), "{sub:?} printed a credential");
        assert!(text.contains("LOCKSTEP_URL") || sub[0] == "check", "{text}");
    }
}
