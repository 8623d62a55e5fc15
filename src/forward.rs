//! Webhooks on a follower replica: the Service spreads deliveries over
//! every replica, but only the leader writes. A follower passes the
//! delivery, as received, to the leader (whose address is in the Lease's
//! holder identity); the leader checks the signature itself, so no new
//! secret is shared between replicas and a follower cannot forge one.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderName, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};

use crate::lease::{Leadership, parse_holder};

/// Marks a forwarded delivery, so two followers never bounce one between them.
const FORWARDED: &str = "x-lockstep-forwarded";

/// Largest body forwarded (the receiver's own limit applies at the leader).
const MAX_FORWARD: usize = 25 * 1024 * 1024;

#[derive(Clone)]
struct Forwarding {
    leadership: Arc<Leadership>,
    client: reqwest::Client,
}

/// `inner` on the leader; a forward to the leader elsewhere. Without
/// leader election, `inner` as it is.
pub fn leader_only(inner: Router, leadership: Option<Arc<Leadership>>) -> Router {
    let Some(leadership) = leadership else {
        return inner;
    };
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap_or_default();
    inner.layer(middleware::from_fn_with_state(
        Forwarding { leadership, client },
        forward,
    ))
}

async fn forward(State(f): State<Forwarding>, req: Request, next: Next) -> Response {
    if f.leadership.is_leader() {
        return next.run(req).await;
    }
    if req.headers().contains_key(FORWARDED) {
        return (StatusCode::SERVICE_UNAVAILABLE, "not the leader").into_response();
    }
    let holder = match f.leadership.holder().await {
        Ok(Some(h)) => h,
        _ => return (StatusCode::SERVICE_UNAVAILABLE, "no leader yet").into_response(),
    };
    let Some((_, addr)) = parse_holder(&holder) else {
        return (StatusCode::SERVICE_UNAVAILABLE, "leader address unknown").into_response();
    };
    let (parts, body) = req.into_parts();
    let Ok(bytes) = to_bytes(body, MAX_FORWARD).await else {
        return (StatusCode::PAYLOAD_TOO_LARGE, "body too large").into_response();
    };
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "/".into());
    let mut out = f.client.post(format!("http://{addr}{path}")).body(bytes);
    for (name, value) in &parts.headers {
        if name != axum::http::header::HOST && name != axum::http::header::CONTENT_LENGTH {
            out = out.header(name.as_str(), value.as_bytes());
        }
    }
    out = out.header(HeaderName::from_static(FORWARDED), "1");
    match out.send().await {
        Ok(r) => {
            let status =
                StatusCode::from_u16(r.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
            let text = r.text().await.unwrap_or_default();
            tracing::debug!(leader = %holder, %status, "webhook forwarded to the leader");
            (status, Body::from(text)).into_response()
        }
        Err(e) => {
            tracing::warn!(leader = %holder, error = %e, "forwarding a webhook to the leader failed");
            (StatusCode::BAD_GATEWAY, "leader unreachable").into_response()
        }
    }
}
