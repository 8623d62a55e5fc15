//! What the three HTTP hosts share: a client, auth, and turning answers into
//! [`ForgeError`]s that say whether and when to try again.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::header::{HeaderMap, RETRY_AFTER};
use reqwest::{RequestBuilder, Response, StatusCode};

use super::ForgeError;

/// Longest wait a host may ask for before we give up on this attempt and
/// leave the status to the queue.
const MAX_WAIT: Duration = Duration::from_secs(15 * 60);

pub fn client() -> Result<reqwest::Client, ForgeError> {
    reqwest::Client::builder()
        .user_agent(concat!("lockstep/", env!("CARGO_PKG_VERSION")))
        .timeout(Duration::from_secs(30))
        .connect_timeout(Duration::from_secs(10))
        // Never follow a redirect: a POST answered 302 is followed as a GET,
        // and the sign-in page it lands on answers 200, so a status that
        // reached no one would count as delivered. A 3xx is an error that
        // names where the host pointed.
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| ForgeError::Config(format!("HTTP client: {e}")))
}

/// Joins an API base URL and a path without doubling or losing slashes.
pub fn join(base: &str, path: &str) -> String {
    format!(
        "{}/{}",
        base.trim_end_matches('/'),
        path.trim_start_matches('/')
    )
}

/// `path?k=v&...` with every value percent-encoded (a branch name has
/// slashes, an owner:branch filter a colon).
pub fn with_query(path: &str, pairs: &[(&str, &str)]) -> String {
    let mut out = String::from(path);
    for (i, (k, v)) in pairs.iter().enumerate() {
        out.push(if i == 0 { '?' } else { '&' });
        out.push_str(&encode(k));
        out.push('=');
        out.push_str(&encode(v));
    }
    out
}

fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Sends a request; a non-2xx answer becomes an error classified by `quirk`
/// first (host-specific), then by the common rules.
pub async fn send(
    host: &'static str,
    what: &str,
    req: RequestBuilder,
) -> Result<Response, ForgeError> {
    let (client, req) = req.build_split();
    let req = req.map_err(|e| ForgeError::Transport {
        host,
        what: what.to_owned(),
        message: without_url_secrets(e),
    })?;
    // What this request carries that must never come back out: a proxy or
    // a host that echoes the request in its error body would otherwise put
    // the token into stderr and the log.
    let secrets = credentials(req.headers());
    let resp = client
        .execute(req)
        .await
        .map_err(|e| ForgeError::Transport {
            host,
            what: what.to_owned(),
            message: redact(&without_url_secrets(e), &secrets),
        })?;
    if resp.status().is_success() {
        return Ok(resp);
    }
    let status = resp.status();
    let headers = resp.headers().clone();
    let location = headers
        .get(reqwest::header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let text = capped(resp, MAX_ERROR_BODY)
        .await
        .ok()
        .flatten()
        .unwrap_or_default();
    let mut body = redact(&String::from_utf8_lossy(&text), &secrets);
    if status.is_redirection() {
        body = format!(
            "the host redirected the request{}; lockstep does not follow redirects (a write would be lost), so set the API URL to the API itself",
            location.map_or_else(String::new, |l| format!(" to {}", redact(&l, &secrets)))
        );
    }
    let retry_after = wait_hint(status, &headers);
    let retryable = status.is_server_error()
        || status == StatusCode::TOO_MANY_REQUESTS
        || status == StatusCode::REQUEST_TIMEOUT
        || (status == StatusCode::FORBIDDEN && rate_limited(&headers, &body));
    Err(ForgeError::Http {
        host,
        what: what.to_owned(),
        status: status.as_u16(),
        body: super::shorten(body.trim(), 300),
        retry_after,
        retryable,
    })
}

/// Sends a request and parses a JSON answer, naming the host when the
/// answer is not what its API documents.
pub async fn get_json<T: serde::de::DeserializeOwned>(
    host: &'static str,
    what: &str,
    req: RequestBuilder,
) -> Result<T, ForgeError> {
    let resp = send(host, what, req).await?;
    parse(host, what, resp).await
}

/// The most of an error's body kept (the host's message is cut to 300
/// characters anyway).
const MAX_ERROR_BODY: usize = 64 * 1024;

/// The most of a successful answer read: a page of 100 statuses is tens of
/// KiB. A host (or a proxy in front of it) that streams more is refused,
/// never held whole.
pub const MAX_ANSWER: usize = 4 * 1024 * 1024;

/// At most `max` bytes of `resp`'s body: `Ok(None)` past that.
async fn capped(
    mut resp: reqwest::Response,
    max: usize,
) -> Result<Option<Vec<u8>>, reqwest::Error> {
    if resp.content_length().is_some_and(|n| n > max as u64) {
        return Ok(None);
    }
    let mut out = Vec::new();
    while let Some(chunk) = resp.chunk().await? {
        if out.len() + chunk.len() > max {
            return Ok(None);
        }
        out.extend_from_slice(&chunk);
    }
    Ok(Some(out))
}

/// A JSON answer of at most [`MAX_ANSWER`] bytes.
async fn parse<T: serde::de::DeserializeOwned>(
    host: &'static str,
    what: &str,
    resp: reqwest::Response,
) -> Result<T, ForgeError> {
    let answer = |message: String| ForgeError::Answer {
        host,
        what: what.to_owned(),
        message,
    };
    let body = capped(resp, MAX_ANSWER)
        .await
        .map_err(|e| ForgeError::Transport {
            host,
            what: what.to_owned(),
            message: format!("the answer was cut off: {}", without_url_secrets(e)),
        })?
        .ok_or_else(|| answer(format!("the answer is larger than {MAX_ANSWER} bytes")))?;
    serde_json::from_slice(&body).map_err(|e| answer(format!("unexpected answer: {e}")))
}

/// At most this many pages of a list are read (1,000 statuses at GitHub's
/// 100 a page): a host that always says "next" cannot keep lockstep
/// reading.
pub const MAX_PAGES: u32 = 10;

/// Every page of a list: `page(1)`, `page(2)`, … while the answer's `Link`
/// header names a `rel="next"` (GitHub, Gitea and GitLab all send one while
/// more follow) and the page was full: `size` items, as asked, or fewer
/// than the `X-Total-Count` the host gives (a Gitea whose administrator
/// caps pages below `size`). A mock that always links a next page of a
/// few items (Prism serves GitHub's example header) is read once. At most
/// [`MAX_PAGES`]. The next request is built by `page`, never taken from
/// the header: a link to another origin would carry the token there. A
/// list longer than that is cut, with a warning: what was read is still
/// the newest (the hosts list statuses newest first).
pub async fn get_pages<T: serde::de::DeserializeOwned>(
    host: &'static str,
    what: &str,
    size: usize,
    page: impl Fn(u32) -> RequestBuilder,
) -> Result<Vec<T>, ForgeError> {
    let mut all = Vec::new();
    for n in 1..=MAX_PAGES {
        let resp = send(host, what, page(n)).await?;
        let next = has_next(resp.headers());
        let total = header_u64(resp.headers(), "x-total-count");
        let items: Vec<T> = parse(host, what, resp).await?;
        let got = items.len();
        all.extend(items);
        let full = got >= size || total.is_some_and(|t| (all.len() as u64) < t);
        if !next || got == 0 || !full {
            return Ok(all);
        }
    }
    tracing::warn!(
        host,
        what,
        pages = MAX_PAGES,
        "the host lists more than lockstep reads; going on with the newest"
    );
    Ok(all)
}

/// Whether a `Link` header (RFC 8288) names a next page.
fn has_next(headers: &HeaderMap) -> bool {
    headers
        .get_all(reqwest::header::LINK)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|link| {
            link.split(';').skip(1).any(|param| {
                param.split_once('=').is_some_and(|(k, v)| {
                    k.trim().eq_ignore_ascii_case("rel")
                        && v.trim()
                            .trim_matches('"')
                            .split_ascii_whitespace()
                            .any(|r| r.eq_ignore_ascii_case("next"))
                })
            })
        })
}

/// A 403 is a rate limit (retry later) rather than a permission problem
/// (never retry) when the host says so in its headers or body.
fn rate_limited(headers: &HeaderMap, body: &str) -> bool {
    header_u64(headers, "x-ratelimit-remaining") == Some(0)
        || headers.contains_key(RETRY_AFTER)
        || body.contains("rate limit")
}

/// How long the host asked us to wait: `Retry-After` (seconds), or the
/// rate-limit reset time when the budget is spent.
fn wait_hint(status: StatusCode, headers: &HeaderMap) -> Option<Duration> {
    if let Some(secs) = header_u64(headers, RETRY_AFTER.as_str()) {
        return Some(Duration::from_secs(secs).min(MAX_WAIT));
    }
    let spent = header_u64(headers, "x-ratelimit-remaining") == Some(0);
    if spent || status == StatusCode::TOO_MANY_REQUESTS {
        let reset = header_u64(headers, "x-ratelimit-reset")?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        // One extra second: the reset instant is inclusive on the host's clock.
        return Some(Duration::from_secs(reset.saturating_sub(now) + 1).min(MAX_WAIT));
    }
    None
}

fn header_u64(headers: &HeaderMap, name: &str) -> Option<u64> {
    headers.get(name)?.to_str().ok()?.trim().parse().ok()
}

/// reqwest errors print the URL; ours carry no credentials, but keep the
/// message to the cause anyway.
/// The credential values of a request's headers (`Authorization`, with and
/// without its scheme, and any header naming a token), longest first.
fn credentials(headers: &HeaderMap) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (name, value) in headers {
        let name = name.as_str();
        if name != "authorization" && !name.contains("token") {
            continue;
        }
        let Ok(v) = value.to_str() else { continue };
        out.push(v.to_owned());
        if let Some((_, rest)) = v.split_once(' ') {
            out.push(rest.trim().to_owned());
            // Basic auth: the base64 pair, and the password inside it.
            if let Ok(pair) = base64_decode(rest.trim())
                && let Some((_, password)) = pair.split_once(':')
            {
                out.push(password.to_owned());
            }
        }
    }
    out.retain(|s| s.len() >= 4);
    out.sort_by_key(|s| std::cmp::Reverse(s.len()));
    out.dedup();
    out
}

fn base64_decode(s: &str) -> Result<String, ()> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(s)
        .map_err(|_| ())?;
    String::from_utf8(bytes).map_err(|_| ())
}

/// `text` with every secret replaced by `<redacted>`.
pub fn redact(text: &str, secrets: &[String]) -> String {
    let mut out = text.to_owned();
    for s in secrets {
        if out.contains(s.as_str()) {
            out = out.replace(s.as_str(), "<redacted>");
        }
    }
    out
}

fn without_url_secrets(e: reqwest::Error) -> String {
    let timeout = e.is_timeout();
    let mut msg = e.without_url().to_string();
    if timeout {
        msg.push_str(" (timed out)");
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_never_come_back_out() {
        let mut h = HeaderMap::new();
        h.insert(
            "authorization",
            "Bearer ghs_SEKRET1234".parse().expect("header"),
        );
        h.insert("private-token", "glpat-OTHER5678".parse().expect("header"));
        h.insert("accept", "application/json".parse().expect("header"));
        let secrets = credentials(&h);
        let echoed = "proxy says: got Authorization: Bearer ghs_SEKRET1234 and PRIVATE-TOKEN glpat-OTHER5678, token ghs_SEKRET1234";
        let out = redact(echoed, &secrets);
        assert!(
            !out.contains("SEKRET") && !out.contains("OTHER5678"),
            "{out}"
        );
        assert!(out.contains("application/json") || !echoed.contains("application/json"));
        assert_eq!(out.matches("<redacted>").count(), 3, "{out}");
        // Basic auth: the pair and the password alone.
        let mut h = HeaderMap::new();
        h.insert(
            "authorization",
            "Basic dXNlcjpwYXNzd29yZDk5".parse().expect("header"),
        );
        let out = redact("echo dXNlcjpwYXNzd29yZDk5 / password99", &credentials(&h));
        assert!(
            !out.contains("password99") && !out.contains("dXNlcjpw"),
            "{out}"
        );
    }

    #[test]
    fn joins_paths() {
        assert_eq!(
            join("https://h/api/v3/", "/repos/a"),
            "https://h/api/v3/repos/a"
        );
        assert_eq!(join("https://h", "repos/a"), "https://h/repos/a");
    }

    #[test]
    fn queries_are_encoded() {
        assert_eq!(
            with_query(
                "repos/o/r/pulls",
                &[("head", "o:lockstep/plan/a b"), ("n", "1")]
            ),
            "repos/o/r/pulls?head=o%3Alockstep%2Fplan%2Fa%20b&n=1"
        );
        assert_eq!(with_query("x", &[]), "x");
    }

    #[test]
    fn wait_hints() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", "7".parse().unwrap());
        assert_eq!(
            wait_hint(StatusCode::TOO_MANY_REQUESTS, &h),
            Some(Duration::from_secs(7))
        );
        let mut h = HeaderMap::new();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        h.insert("x-ratelimit-remaining", "0".parse().unwrap());
        h.insert("x-ratelimit-reset", (now + 20).to_string().parse().unwrap());
        let w = wait_hint(StatusCode::FORBIDDEN, &h).unwrap();
        assert!(
            w >= Duration::from_secs(19) && w <= Duration::from_secs(22),
            "{w:?}"
        );
        assert!(rate_limited(&h, ""));
        assert!(!rate_limited(
            &HeaderMap::new(),
            "Resource not accessible by integration"
        ));
    }

    #[test]
    fn a_next_page_is_read_from_any_link_header() {
        let links = |values: &[&str]| {
            let mut h = HeaderMap::new();
            for v in values {
                h.append(reqwest::header::LINK, v.parse().unwrap());
            }
            has_next(&h)
        };
        // GitHub and GitLab: one header, several links.
        assert!(links(&[
            r#"<https://h/x?page=2>; rel="next", <https://h/x?page=5>; rel="last""#
        ]));
        // Gitea's order, several headers, a relation list, other cases.
        assert!(links(&[
            r#"<https://h/x?page=1>; rel="first""#,
            r#"<u>;REL=Next"#
        ]));
        assert!(links(&[r#"<u>; title="a"; rel="prev next""#]));
        // The last page, and links that only look like it.
        assert!(!links(&[
            r#"<https://h/x?page=1>; rel="first", <https://h/x?page=1>; rel="prev""#
        ]));
        assert!(!links(&[
            r#"<https://h/next>; rel="last""#,
            r#"<u>; title="next""#
        ]));
        assert!(!links(&[]));
    }
}
