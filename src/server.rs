//! The HTTP listeners (webhook receiver, health and metrics) as a server
//! that a stranger cannot wear down. `axum::serve` sets no timer, so a
//! client that sends its headers or body at a byte a second, or opens a
//! connection and says nothing, holds a file descriptor for ever; enough of
//! them and the process cannot open a Git fetch or answer `/healthz`
//! (`docs/threat-model.md`). Here every connection has:
//!
//! - a deadline for its request headers, which also closes an idle
//!   keep-alive connection (hyper starts the clock whenever it waits for a
//!   request head);
//! - a deadline for the whole request, body included (408 past it);
//! - a place among at most `max_connections`: past the cap a connection is
//!   answered `503` at once and closed, so descriptors stay bounded.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tower::ServiceExt;

/// How long a client may take, and how many it may be at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Request headers must arrive within this; also the idle limit of a
    /// keep-alive connection between requests.
    pub header_timeout: Duration,
    /// The whole request, body and answer included.
    pub request_timeout: Duration,
    /// Connections served at once; more are answered 503 and closed.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            // Git hosts send a delivery in one go; ten seconds is generous.
            header_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            // Far below the usual 1,024 descriptors, far above what three
            // Git hosts and a Prometheus scraper need.
            max_connections: 256,
        }
    }
}

/// The whole answer past the cap (the body is 32 bytes).
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: 32\r\nconnection: close\r\nretry-after: 1\r\n\r\ntoo many connections; try again\n";

/// Serves `app` on `listener` until `stop` turns true, then lets the
/// requests in flight finish (each within its own deadline).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    mut stop: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors or the like: pause rather than spin.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = async { let _ = stop.wait_for(|s| *s).await; } => break,
        };
        // Reap finished connections so the set stays as small as the load.
        while tasks.try_join_next().is_some() {}
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tasks.spawn(async move {
                let mut stream = stream;
                let _ = tokio::time::timeout(Duration::from_secs(1), async {
                    let _ = stream.write_all(BUSY).await;
                    let _ = stream.shutdown().await;
                })
                .await;
            });
            continue;
        };
        let app = app.clone();
        let mut stop = stop.clone();
        tasks.spawn(async move {
            let _slot = slot;
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let app = app.clone();
                async move {
                    let answer = tokio::time::timeout(
                        limits.request_timeout,
                        app.oneshot(req.map(Body::new)),
                    )
                    .await;
                    Ok::<_, Infallible>(match answer {
                        Ok(Ok(r)) => r,
                        Ok(Err(never)) => match never {},
                        Err(_) => timed_out(),
                    })
                }
            });
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .max_buf_size(64 * 1024);
            let conn = http.serve_connection(TokioIo::new(stream), service);
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = async { let _ = stop.wait_for(|s| *s).await; } => {
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(limits.request_timeout, conn).await;
                }
            }
        });
    }
    // In-flight requests finish within their deadlines; idle ones close.
    let _ = tokio::time::timeout(limits.request_timeout, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
}

fn timed_out() -> Response<Body> {
    let mut r = Response::new(Body::from("request took too long\n"));
    *r.status_mut() = StatusCode::REQUEST_TIMEOUT;
    r.headers_mut().insert(
        axum::http::header::CONNECTION,
        axum::http::HeaderValue::from_static("close"),
    );
    r
}
