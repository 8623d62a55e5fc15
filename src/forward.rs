//! Webhooks on a follower replica: the Service spreads deliveries over
//! every replica, but only the leader writes. A follower passes a delivery,
//! as received, to the leader (whose address is in the Lease's holder
//! identity); the leader checks the signature again and deduplicates, so no
//! new secret is shared between replicas and a follower cannot forge one.
//!
//! The Lease is the only thing that names the leader, and whoever can write
//! a Lease in the namespace (often a broader role than lockstep's own) could
//! name any address there. So a follower forwards nothing it would not have
//! accepted itself (the host's signature, checked before anything is sent:
//! no stranger can make it post to anyone), and only to a holder it has
//! found to be a replica: a pod of the Lease's namespace, of the name the
//! holder identity gives, running as this replica's own ServiceAccount,
//! with the holder's address among its pod IPs. A holder that is not gets
//! nothing (503, and a warning naming the holder): a GitLab token and the
//! body of a delivery never leave for an address a Lease merely claims.

use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderName, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use tokio::sync::OnceCell;

use crate::lease::{Leadership, parse_holder};
use crate::webhook::{self, WebhookConfig};

/// Marks a forwarded delivery, so two followers never bounce one between them.
const FORWARDED: &str = "x-lockstep-forwarded";

/// How long a holder found to be a replica is believed without asking the
/// API server again. Short: a pod that stops running gives its IP back
/// to the cluster at once (the API keeps showing it on the pod), so a
/// replica found running may not be for long.
const BELIEVED_FOR: Duration = Duration::from_secs(5);

/// The most of a leader's answer relayed (its answers are a line).
const MAX_ANSWER: usize = 4096;

/// Request headers that belong to one connection (RFC 9110 §7.6.1), not to
/// the delivery: never sent on.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "expect",
    "host",
    "content-length",
];

#[derive(Clone)]
struct Forwarding {
    leadership: Arc<Leadership>,
    webhooks: Arc<WebhookConfig>,
    client: reqwest::Client,
    replicas: Arc<Replicas>,
}

/// `inner` on the leader; a forward to the leader elsewhere. Without
/// leader election, `inner` as it is. `webhooks` is the receiver's own
/// configuration: a follower checks a delivery with it before forwarding.
pub fn leader_only(
    inner: Router,
    leadership: Option<Arc<Leadership>>,
    webhooks: WebhookConfig,
) -> Router {
    let Some(leadership) = leadership else {
        return inner;
    };
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        // Straight to the pod that was checked: a proxy from the
        // environment (set for the Git host) would receive the delivery.
        .no_proxy()
        // The leader answers itself; a redirect would be a holder sending
        // the delivery on to somewhere no one checked.
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap_or_default();
    let replicas = Arc::new(Replicas {
        pods: leadership.pods(),
        own: leadership
            .identity()
            .map(|id| id.split('@').next().unwrap_or(id).to_owned()),
        account: OnceCell::new(),
        believed: Mutex::new(None),
    });
    inner.layer(middleware::from_fn_with_state(
        Forwarding {
            leadership,
            webhooks: Arc::new(webhooks),
            client,
            replicas,
        },
        forward,
    ))
}

async fn forward(State(f): State<Forwarding>, req: Request, next: Next) -> Response {
    if f.leadership.is_leader() {
        return next.run(req).await;
    }
    // Only deliveries are forwarded; anything else gets the receiver's own
    // answer (404, 405) here.
    let host = match webhook::host_of(req.uri().path()) {
        Some(host) if req.method() == Method::POST => host,
        _ => return next.run(req).await,
    };
    if req.headers().contains_key(FORWARDED) {
        return (StatusCode::SERVICE_UNAVAILABLE, "not the leader\n").into_response();
    }
    let (parts, body) = req.into_parts();
    let Ok(bytes) = to_bytes(body, f.webhooks.max_body).await else {
        return (StatusCode::PAYLOAD_TOO_LARGE, "body too large\n").into_response();
    };
    if let Err(reply) = webhook::authentic(&f.webhooks, host, &parts.headers, &bytes) {
        return reply.into_response();
    }
    let holder = match f.leadership.holder().await {
        Ok(Some(h)) => h,
        _ => return (StatusCode::SERVICE_UNAVAILABLE, "no leader yet\n").into_response(),
    };
    let Some((name, addr)) = parse_holder(&holder) else {
        return (StatusCode::SERVICE_UNAVAILABLE, "leader address unknown\n").into_response();
    };
    if let Err(why) = f.replicas.check(&holder, name, addr.ip()).await {
        tracing::warn!(
            leader = %holder,
            reason = %why,
            "a webhook delivery was not forwarded: the Lease's holder is not known to be a replica of lockstep"
        );
        return (StatusCode::SERVICE_UNAVAILABLE, "leader not verified\n").into_response();
    }
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "/".into());
    let mut out = f.client.post(format!("http://{addr}{path}")).body(bytes);
    for (name, value) in &parts.headers {
        if !HOP_BY_HOP.contains(&name.as_str()) {
            out = out.header(name.as_str(), value.as_bytes());
        }
    }
    out = out.header(HeaderName::from_static(FORWARDED), "1");
    match out.send().await {
        Ok(mut r) => {
            let status =
                StatusCode::from_u16(r.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
            let mut text = Vec::new();
            while text.len() < MAX_ANSWER
                && let Ok(Some(chunk)) = r.chunk().await
            {
                text.extend_from_slice(&chunk);
            }
            text.truncate(MAX_ANSWER);
            tracing::debug!(leader = %holder, %status, "webhook forwarded to the leader");
            (status, Body::from(text)).into_response()
        }
        Err(e) => {
            tracing::warn!(leader = %holder, error = %e, "forwarding a webhook to the leader failed");
            (StatusCode::BAD_GATEWAY, "leader unreachable\n").into_response()
        }
    }
}

/// What a follower knows of its fellow replicas.
struct Replicas {
    pods: Option<Api<Pod>>,
    /// This replica's pod name (its identity before the `@`).
    own: Option<String>,
    /// This replica's ServiceAccount, read from its own pod once.
    account: OnceCell<String>,
    /// The last holder found to be a replica, and when.
    believed: Mutex<Option<(String, Instant)>>,
}

impl Replicas {
    async fn check(&self, holder: &str, name: &str, ip: IpAddr) -> Result<(), String> {
        if !is_pod_name(name) {
            return Err("the holder names no pod (not a DNS-1123 name)".into());
        }
        if let Ok(b) = self.believed.lock()
            && let Some((h, at)) = &*b
            && h == holder
            && at.elapsed() < BELIEVED_FOR
        {
            return Ok(());
        }
        let Some(pods) = &self.pods else {
            return Err("no election".into());
        };
        let account = self
            .account
            .get_or_try_init(|| async {
                let own = self.own.as_deref().unwrap_or_default();
                match pods.get_opt(own).await {
                    Ok(Some(pod)) => Ok(account_of(&pod).to_owned()),
                    Ok(None) => Err(format!(
                        "this replica's own pod {own:?} is not in the Lease's namespace (set POD_NAME from the downward API)"
                    )),
                    Err(e) => Err(format!(
                        "reading this replica's own pod {own:?}: {}",
                        kube_words(&e)
                    )),
                }
            })
            .await?;
        let pod = match pods.get_opt(name).await {
            Ok(Some(pod)) => pod,
            Ok(None) => return Err(format!("no pod {name:?} in the Lease's namespace")),
            Err(e) => return Err(format!("reading pod {name:?}: {}", kube_words(&e))),
        };
        vouches(&pod, account, ip)?;
        if let Ok(mut b) = self.believed.lock() {
            *b = Some((holder.to_owned(), Instant::now()));
        }
        Ok(())
    }
}

/// A pod's ServiceAccount (`default` when its spec names none).
fn account_of(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.service_account_name.as_deref())
        .filter(|a| !a.is_empty())
        .unwrap_or("default")
}

/// Whether `name` can be a pod's name (a DNS-1123 subdomain), so nothing
/// else (`x/status`, `x?y`) reaches the API path.
fn is_pod_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|l| {
            !l.is_empty()
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

/// Whether `pod` is a replica that may receive deliveries at `ip`: it runs
/// as `account`, it is running and not being deleted (a pod that stopped
/// keeps its IP in the API after the cluster handed it to another pod), it
/// has a network of its own (on the host's network its IP is the node's,
/// where any process may listen), and `ip` is one of its pod IPs. Any port
/// at that IP is the pod's own network: no port is checked.
fn vouches(pod: &Pod, account: &str, ip: IpAddr) -> Result<(), String> {
    if pod.metadata.deletion_timestamp.is_some() {
        return Err("its pod is being deleted".into());
    }
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if phase != Some("Running") {
        return Err(format!(
            "its pod is not running (phase {})",
            phase.unwrap_or("unknown")
        ));
    }
    if pod.spec.as_ref().and_then(|s| s.host_network) == Some(true) {
        return Err("its pod is on the host's network".into());
    }
    let theirs = account_of(pod);
    if theirs != account {
        return Err(format!(
            "its pod runs as ServiceAccount {theirs:?}, not {account:?} as this replica does"
        ));
    }
    let status = pod.status.as_ref();
    let ips = status
        .and_then(|s| s.pod_ips.as_ref())
        .into_iter()
        .flatten()
        .map(|p| p.ip.as_str())
        .chain(status.and_then(|s| s.pod_ip.as_deref()));
    for theirs in ips {
        if theirs.parse::<IpAddr>().is_ok_and(|t| t == ip) {
            return Ok(());
        }
    }
    Err(format!("{ip} is not an IP of its pod"))
}

/// An API error in a few words of our own: the status code and reason the
/// API server gave, never the client library's text.
fn kube_words(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("the API server answered {} {}", s.code, s.reason),
        _ => "the API server could not be reached".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(account: Option<&str>, ip: Option<&str>, ips: &[&str]) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [], "serviceAccountName": account},
            "status": {
                "phase": "Running",
                "podIP": ip,
                "podIPs": ips.iter().map(|i| serde_json::json!({"ip": i})).collect::<Vec<_>>(),
            },
        }))
        .unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_replica_runs_as_our_account_at_the_address_the_lease_gives() {
        let p = pod(Some("lockstep"), Some("10.0.0.7"), &["10.0.0.7", "fd00::7"]);
        assert_eq!(vouches(&p, "lockstep", ip("10.0.0.7")), Ok(()));
        // Another spelling of the same IPv6 address is the same address.
        assert_eq!(vouches(&p, "lockstep", ip("fd00:0:0::7")), Ok(()));
        let other = vouches(&p, "lockstep", ip("10.0.0.8")).unwrap_err();
        assert!(
            other.contains("10.0.0.8 is not an IP of its pod"),
            "{other}"
        );
        let account = vouches(&p, "other", ip("10.0.0.7")).unwrap_err();
        assert!(account.contains("ServiceAccount \"lockstep\""), "{account}");
    }

    #[test]
    fn a_pod_that_stopped_is_going_or_shares_its_nodes_network_vouches_for_nothing() {
        let ok = pod(Some("lockstep"), Some("10.0.0.7"), &[]);
        assert_eq!(vouches(&ok, "lockstep", ip("10.0.0.7")), Ok(()));
        for phase in ["Failed", "Succeeded", "Pending"] {
            let mut p = ok.clone();
            p.status.as_mut().unwrap().phase = Some(phase.into());
            let e = vouches(&p, "lockstep", ip("10.0.0.7")).unwrap_err();
            assert!(e.contains(phase), "{e}");
        }
        let mut going = ok.clone();
        going.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        assert!(vouches(&going, "lockstep", ip("10.0.0.7")).is_err());
        let mut host = ok.clone();
        host.spec.as_mut().unwrap().host_network = Some(true);
        assert!(vouches(&host, "lockstep", ip("10.0.0.7")).is_err());
    }

    #[test]
    fn only_a_pod_name_reaches_the_api_path() {
        for good in ["lockstep-7d9-abc", "a", "a.b-c", "0lockstep"] {
            assert!(is_pod_name(good), "{good}");
        }
        for bad in [
            "",
            "x/status",
            "x?watch=1",
            "X",
            "-a",
            "a-",
            "a..b",
            "a_b",
            "..",
            "%2e",
        ] {
            assert!(!is_pod_name(bad), "{bad}");
        }
    }

    #[test]
    fn a_pod_without_an_ip_or_an_account_vouches_for_nothing_it_should_not() {
        // Not yet scheduled: no IP at all.
        let p = pod(Some("lockstep"), None, &[]);
        assert!(vouches(&p, "lockstep", ip("10.0.0.7")).is_err());
        // No ServiceAccount named is `default`, not ours.
        let p = pod(None, Some("10.0.0.7"), &[]);
        assert!(vouches(&p, "lockstep", ip("10.0.0.7")).is_err());
        assert_eq!(vouches(&p, "default", ip("10.0.0.7")), Ok(()));
    }
}
