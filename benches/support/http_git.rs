//! Git's smart HTTP protocol on 127.0.0.1: `git http-backend` (git's own
//! CGI program) behind a small CGI server written here, one thread and one
//! http-backend process per request. Every client reads through it: the git
//! CLI, libgit2 (lockstep) and go-git (Flux's source-controller). Fetches
//! only (pushes go to the bare repository on disk). Used by `race.rs` and
//! smoke-tested by `tests/race_plumbing.rs`.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Serves every repository under a directory at
/// `http://127.0.0.1:PORT/<name>`; stops when dropped.
pub struct GitHttp {
    pub port: u16,
    stop: Arc<AtomicBool>,
    /// Requests answered so far.
    pub served: Arc<AtomicUsize>,
}

impl GitHttp {
    pub fn start(root: &Path) -> GitHttp {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let stop = Arc::new(AtomicBool::new(false));
        let served = Arc::new(AtomicUsize::new(0));
        let exec = Command::new("git")
            .arg("--exec-path")
            .output()
            .expect("git runs");
        let backend =
            PathBuf::from(String::from_utf8_lossy(&exec.stdout).trim()).join("git-http-backend");
        assert!(backend.exists(), "no {}", backend.display());
        let (root, s, n) = (root.to_owned(), stop.clone(), served.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (root, backend, n) = (root.clone(), backend.clone(), n.clone());
                std::thread::spawn(move || {
                    if let Err(e) = serve(conn, &root, &backend) {
                        eprintln!("http-backend server: {e}");
                    }
                    n.fetch_add(1, Ordering::Relaxed);
                });
            }
        });
        GitHttp { port, stop, served }
    }

    pub fn url(&self, name: &str) -> String {
        format!("http://127.0.0.1:{}/{name}", self.port)
    }
}

impl Drop for GitHttp {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the accept loop.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// One request: parse it, run http-backend with the CGI variables, relay
/// its answer (the `Status:` header becomes the status line).
fn serve(conn: TcpStream, root: &Path, backend: &Path) -> std::io::Result<()> {
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let (method, target) = match (parts.next(), parts.next()) {
        (Some(m), Some(t)) => (m.to_owned(), t.to_owned()),
        _ => return Ok(()),
    };
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let mut env: Vec<(String, String)> = Vec::new();
    let (mut length, mut chunked) = (None, false);
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h.trim().is_empty() {
            break;
        }
        let Some((k, v)) = h.trim_end().split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_owned());
        match k.as_str() {
            "content-length" => length = v.parse::<usize>().ok(),
            "content-type" => env.push(("CONTENT_TYPE".into(), v.clone())),
            "transfer-encoding" => chunked = v.eq_ignore_ascii_case("chunked"),
            _ => {}
        }
        env.push((
            format!("HTTP_{}", k.to_ascii_uppercase().replace('-', "_")),
            v,
        ));
    }
    let body = if chunked {
        dechunk(&mut reader)?
    } else {
        let mut b = vec![0; length.unwrap_or(0)];
        reader.read_exact(&mut b)?;
        b
    };
    let mut child = Command::new(backend)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("REQUEST_METHOD", &method)
        .env("PATH_INFO", path)
        .env("QUERY_STRING", query)
        .env("CONTENT_LENGTH", body.len().to_string())
        .env("REMOTE_ADDR", "127.0.0.1")
        .env("SERVER_PROTOCOL", "HTTP/1.1")
        .env("GATEWAY_INTERFACE", "CGI/1.1")
        .envs(env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let mut stdin = child.stdin.take().expect("stdin");
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(&body);
    });
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let (mut status, mut headers) = ("200 OK".to_owned(), String::new());
    loop {
        let mut h = String::new();
        if out.read_line(&mut h)? == 0 || h.trim().is_empty() {
            break;
        }
        let h = h.trim_end();
        match h.split_once(':') {
            Some((k, v)) if k.eq_ignore_ascii_case("status") => status = v.trim().to_owned(),
            _ => {
                headers.push_str(h);
                headers.push_str("\r\n");
            }
        }
    }
    // The whole answer, then its length: libgit2 reads no body that is
    // only ended by the connection's close.
    let mut answer = Vec::new();
    out.read_to_end(&mut answer)?;
    let mut conn = conn;
    write!(
        conn,
        "HTTP/1.1 {status}\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n",
        answer.len()
    )?;
    conn.write_all(&answer)?;
    let _ = feeder.join();
    child.wait()?;
    conn.flush()
}

/// A chunked request body (git sends large fetch negotiations so).
fn dechunk(r: &mut impl BufRead) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut size = String::new();
        r.read_line(&mut size)?;
        let n = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16)
            .map_err(|e| std::io::Error::other(format!("chunk size {size:?}: {e}")))?;
        let mut chunk = vec![0; n + 2];
        r.read_exact(&mut chunk)?;
        if n == 0 {
            return Ok(body);
        }
        body.extend_from_slice(&chunk[..n]);
    }
}
