//! Where `lockstep run` gets the fleet repository from, kept fresh cheaply
//! (Flux's source-controller is the model).
//!
//! A remote is mirrored into a bare cache that survives restarts. Each
//! refresh first asks the server for its refs (an ls-remote, one round trip,
//! no objects) and fetches only when the branch tip or a pull-request head
//! moved, so polling every few seconds costs next to nothing. A failed
//! refresh leaves the last good state in place: the daemon keeps reconciling
//! what it had and reports the error.
//!
//! The API is blocking (libgit2); the daemon calls it from `spawn_blocking`.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use git2::{
    AutotagOption, CertificateCheckStatus, Cred, CredentialType, Direction, FetchOptions, Oid,
    RemoteCallbacks, Repository,
};
use notify::event::{AccessKind, AccessMode, EventKind};
use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use sha2::{Digest, Sha256};
use thiserror::Error;
use tokio::sync::mpsc;

use crate::secret::Secret;

/// Where local copies of pull-request heads live in the cache: outside
/// `refs/heads` and `refs/remotes` so that nothing else (a human's `git
/// fetch`, a branch listing) mistakes them for branches.
const PR_NAMESPACE: &str = "refs/lockstep/pr/";

/// Pull-request heads as forges advertise them: GitHub, then GitLab.
const FORGE_PULLS: &[(&str, &str)] = &[("refs/pull/", "/head"), ("refs/merge-requests/", "/head")];

/// A local repository may be a forge-like mirror (pushed `refs/pull/...`)
/// or another lockstep cache, so all three namespaces count there.
const LOCAL_PULLS: &[(&str, &str)] = &[
    ("refs/pull/", "/head"),
    ("refs/merge-requests/", "/head"),
    (PR_NAMESPACE, ""),
];

const CACHE_PULLS: &[(&str, &str)] = &[(PR_NAMESPACE, "")];

/// libgit2 asks for credentials again after every refusal, forever; a
/// refused token will not become valid on the next try.
const MAX_CREDENTIAL_CALLS: usize = 4;

/// Where the fleet repository comes from.
pub enum Origin {
    /// A repository on this machine (work tree or bare), read in place.
    Local(PathBuf),
    /// A repository on a server, mirrored into `cache_dir`.
    Remote {
        url: String,
        cache_dir: PathBuf,
        auth: Auth,
    },
}

impl fmt::Debug for Origin {
    // Derived Debug would print a URL's embedded password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Local(path) => f.debug_tuple("Local").field(path).finish(),
            Origin::Remote {
                url,
                cache_dir,
                auth,
            } => f
                .debug_struct("Remote")
                .field("url", &redact_url(url))
                .field("cache_dir", cache_dir)
                .field("auth", auth)
                .finish(),
        }
    }
}

/// Credentials for a remote. `Debug` is safe to log: the token prints as a
/// placeholder.
#[derive(Clone, Debug, Default)]
pub struct Auth {
    /// Sent as the password over https.
    pub token: Option<Secret>,
    /// The user name sent with the token: GitHub wants `x-access-token`
    /// (the default), GitLab accepts `oauth2`.
    pub token_user: Option<String>,
    /// Private key for ssh URLs.
    pub ssh_key: Option<PathBuf>,
    /// OpenSSH known_hosts file; ssh is refused without one, because an
    /// unchecked host key lets anyone on the path serve the fleet.
    pub known_hosts: Option<PathBuf>,
}

/// What a refresh found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refresh {
    Unchanged,
    Changed,
}

#[derive(Debug, Error)]
pub enum SourceError {
    #[error("cannot open Git repository {path}: {message}")]
    Open { path: PathBuf, message: String },
    #[error("branch {branch:?} does not exist in {location}")]
    NoBranch { location: String, branch: String },
    #[error("{branch:?} is not a valid branch name")]
    InvalidBranch { branch: String },
    #[error("unsupported Git URL {url}: {message}")]
    Url { url: String, message: String },
    #[error(
        "{url}: ssh needs a known_hosts file to check the server's host key \
         (lockstep refuses unchecked ssh); create one with `ssh-keyscan -p PORT HOST` \
         and pass it as known_hosts"
    )]
    NoKnownHosts { url: String },
    #[error("cannot read known_hosts file {path}: {message}")]
    KnownHostsFile { path: PathBuf, message: String },
    #[error("{url}: host key check against {known_hosts} failed: {message}")]
    HostKey {
        url: String,
        known_hosts: PathBuf,
        message: String,
    },
    #[error("{url}: ssh needs a private key file (none configured)")]
    NoSshKey { url: String },
    #[error("{url} asks for credentials but no token is configured")]
    NoToken { url: String },
    #[error(
        "{url}: refusing to send a token over plain http to a host that is not \
         this machine; use https"
    )]
    InsecureToken { url: String },
    #[error("{url} refused the {what}; check that it is valid and may read the repository")]
    AuthRefused { url: String, what: &'static str },
    #[error("{op} {url}: {message}")]
    Remote {
        op: &'static str,
        url: String,
        message: String,
    },
    #[error("Git cache {path}: {message}")]
    Cache { path: PathBuf, message: String },
    #[error("cannot watch {path}: {message}")]
    Watch { path: PathBuf, message: String },
}

/// The refs lockstep follows, as of one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Tips {
    head: Option<Oid>,
    pulls: BTreeMap<u64, Oid>,
}

/// A remote URL taken apart, so that it can be shown without its userinfo
/// and so that ssh knows which host and port to check the key of.
#[derive(Clone, Debug)]
struct GitUrl {
    scheme: Scheme,
    user: Option<String>,
    password: Option<String>,
    host: String,
    port: Option<u16>,
    /// The URL without userinfo: what errors, logs and the cache name use.
    display: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scheme {
    Ssh,
    Http,
    Https,
    Git,
    File,
}

#[derive(Clone)]
struct RemoteSpec {
    /// As given, userinfo included: only libgit2 sees it.
    url: String,
    parsed: GitUrl,
    auth: Auth,
}

enum Kind {
    Local {
        path: PathBuf,
    },
    Remote {
        spec: Box<RemoteSpec>,
        cache: PathBuf,
    },
}

/// The fleet repository, opened and kept fresh.
pub struct Source {
    kind: Kind,
    repo: Repository,
    branch: String,
    tips: Tips,
    fetches: u64,
}

impl fmt::Debug for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Source");
        match &self.kind {
            Kind::Local { path } => d.field("local", path),
            Kind::Remote { spec, cache } => d
                .field("url", &spec.parsed.display)
                .field("cache", cache)
                .field("auth", &spec.auth),
        };
        d.field("branch", &self.branch)
            .field("head", &self.tips.head)
            .field("pulls", &self.tips.pulls.len())
            .finish()
    }
}

impl Source {
    /// Opens a local repository, or brings the cache of a remote up to
    /// date (cloning it when missing or unusable). A reused cache is
    /// refreshed before `open` returns: a daemon restarting on an old cache
    /// must not reconcile yesterday's fleet, so an unreachable remote fails
    /// the open instead.
    pub fn open(origin: Origin, branch: &str) -> Result<Source, SourceError> {
        if !git2::Reference::is_valid_name(&format!("refs/heads/{branch}")) {
            return Err(SourceError::InvalidBranch {
                branch: branch.to_owned(),
            });
        }
        match origin {
            Origin::Local(path) => open_local(path, branch),
            Origin::Remote {
                url,
                cache_dir,
                auth,
            } => open_remote(url, &cache_dir, auth, branch),
        }
    }

    /// Brings head and pulls up to date. On error they stay as they were.
    pub fn refresh(&mut self) -> Result<Refresh, SourceError> {
        let tips = match &self.kind {
            Kind::Local { path } => read_local_tips(&self.repo, &self.branch, path)?,
            Kind::Remote { spec, cache } => {
                if sync(&self.repo, spec, &self.branch)? {
                    self.fetches += 1;
                }
                let tips =
                    read_tips(&self.repo, &self.branch, CACHE_PULLS).map_err(cache_error(cache))?;
                if tips.head.is_none() {
                    return Err(SourceError::NoBranch {
                        location: spec.parsed.display.clone(),
                        branch: self.branch.clone(),
                    });
                }
                tips
            }
        };
        let changed = tips != self.tips;
        self.tips = tips;
        tracing::debug!(source = %self.location(), changed, "source refreshed");
        Ok(if changed {
            Refresh::Changed
        } else {
            Refresh::Unchanged
        })
    }

    /// What to hand to `crate::git::GitRepo::open`: the local repository
    /// as given, or the bare cache.
    pub fn path(&self) -> &Path {
        match &self.kind {
            Kind::Local { path } => path,
            Kind::Remote { cache, .. } => cache,
        }
    }

    /// The branch tip after the last successful refresh.
    pub fn head(&self) -> Option<Oid> {
        self.tips.head
    }

    /// Pull-request heads (number, head) the origin advertised at the last
    /// successful refresh, by number. GitHub keeps the heads of closed pull
    /// requests, so which are open is the forge API's to say.
    pub fn pulls(&self) -> Vec<(u64, Oid)> {
        self.tips.pulls.iter().map(|(n, o)| (*n, *o)).collect()
    }

    /// How many fetches (object downloads) this source has run, for
    /// metrics: polling should mostly end at the ls-remote.
    pub fn fetches(&self) -> u64 {
        self.fetches
    }

    /// Where plan commits and proposal branches are pushed: the remote
    /// this source mirrors, with its credentials. `None` for a local
    /// repository (it is the truth; nothing to push to).
    pub fn push_target(&self) -> Option<PushTarget> {
        match &self.kind {
            Kind::Local { .. } => None,
            Kind::Remote { spec, .. } => Some(PushTarget {
                spec: (**spec).clone(),
            }),
        }
    }

    /// The origin as errors and logs name it (no credentials).
    pub fn location(&self) -> String {
        match &self.kind {
            Kind::Local { path } => path.display().to_string(),
            Kind::Remote { spec, .. } => spec.parsed.display.clone(),
        }
    }
}

fn open_local(path: PathBuf, branch: &str) -> Result<Source, SourceError> {
    let repo = Repository::open(&path).map_err(|e| SourceError::Open {
        path: path.clone(),
        message: e.message().to_owned(),
    })?;
    let tips = read_local_tips(&repo, branch, &path)?;
    Ok(Source {
        kind: Kind::Local { path },
        repo,
        branch: branch.to_owned(),
        tips,
        fetches: 0,
    })
}

fn read_local_tips(repo: &Repository, branch: &str, path: &Path) -> Result<Tips, SourceError> {
    let tips = read_tips(repo, branch, LOCAL_PULLS).map_err(|e| SourceError::Open {
        path: path.to_owned(),
        message: e.message().to_owned(),
    })?;
    if tips.head.is_none() {
        return Err(SourceError::NoBranch {
            location: path.display().to_string(),
            branch: branch.to_owned(),
        });
    }
    Ok(tips)
}

fn open_remote(
    url: String,
    cache_dir: &Path,
    auth: Auth,
    branch: &str,
) -> Result<Source, SourceError> {
    let parsed = parse_url(&url)?;
    preflight(&parsed, &auth)?;
    let spec = RemoteSpec { url, parsed, auth };
    std::fs::create_dir_all(cache_dir).map_err(|e| SourceError::Cache {
        path: cache_dir.to_owned(),
        message: e.to_string(),
    })?;
    let dir = cache_dir.join(cache_name(&spec.parsed));
    let (repo, fetched) = match check_cache(&dir, &spec.parsed.display) {
        Cache::Usable(repo) => {
            let fetched = sync(&repo, &spec, branch)?;
            (repo, fetched)
        }
        Cache::Missing => clone_into(&dir, cache_dir, &spec, branch)?,
        Cache::Unusable(why) => {
            tracing::warn!(
                url = %spec.parsed.display,
                cache = %dir.display(),
                reason = %why,
                "Git cache is unusable; cloning afresh"
            );
            std::fs::remove_dir_all(&dir).map_err(|e| SourceError::Cache {
                path: dir.clone(),
                message: format!("cannot remove the unusable cache ({why}): {e}"),
            })?;
            clone_into(&dir, cache_dir, &spec, branch)?
        }
    };
    repo.set_head(&format!("refs/heads/{branch}"))
        .map_err(cache_error(&dir))?;
    let tips = read_tips(&repo, branch, CACHE_PULLS).map_err(cache_error(&dir))?;
    if tips.head.is_none() {
        return Err(SourceError::NoBranch {
            location: spec.parsed.display.clone(),
            branch: branch.to_owned(),
        });
    }
    Ok(Source {
        kind: Kind::Remote {
            spec: Box::new(spec),
            cache: dir,
        },
        repo,
        branch: branch.to_owned(),
        tips,
        fetches: u64::from(fetched),
    })
}

/// Refuses, before any connection, what would otherwise fail late or
/// insecurely.
fn preflight(url: &GitUrl, auth: &Auth) -> Result<(), SourceError> {
    match url.scheme {
        Scheme::Ssh => {
            let Some(known_hosts) = &auth.known_hosts else {
                return Err(SourceError::NoKnownHosts {
                    url: url.display.clone(),
                });
            };
            read_known_hosts(known_hosts)?;
            if auth.ssh_key.is_none() {
                return Err(SourceError::NoSshKey {
                    url: url.display.clone(),
                });
            }
        }
        Scheme::Http if auth.token.is_some() && !is_loopback(&url.host) => {
            return Err(SourceError::InsecureToken {
                url: url.display.clone(),
            });
        }
        _ => {}
    }
    Ok(())
}

fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

enum Cache {
    Usable(Repository),
    Missing,
    Unusable(String),
}

/// A cache is reused only when it is a bare repository of the same URL whose
/// followed refs all point at commits that are really there; anything else
/// (an interrupted clone, a disk that lost objects) is cheaper to clone again
/// than to repair.
fn check_cache(dir: &Path, display: &str) -> Cache {
    if !dir.exists() {
        return Cache::Missing;
    }
    let repo = match Repository::open_bare(dir) {
        Ok(r) => r,
        Err(e) => return Cache::Unusable(format!("not a bare repository: {}", e.message())),
    };
    match cache_url(&repo) {
        Some(u) if u == display => {}
        Some(u) => return Cache::Unusable(format!("it mirrors {u}")),
        None => return Cache::Unusable("it records no remote URL".into()),
    }
    let refs = match repo.references() {
        Ok(r) => r,
        Err(e) => return Cache::Unusable(format!("cannot list refs: {}", e.message())),
    };
    for r in refs {
        let r = match r {
            Ok(r) => r,
            Err(e) => return Cache::Unusable(format!("cannot read a ref: {}", e.message())),
        };
        let Some(oid) = r.target() else { continue };
        let name = String::from_utf8_lossy(r.name_bytes()).into_owned();
        if let Err(e) = repo.find_commit(oid).and_then(|c| c.tree().map(|_| ())) {
            return Cache::Unusable(format!("{name} points at {oid}: {}", e.message()));
        }
    }
    Cache::Usable(repo)
}

fn cache_url(repo: &Repository) -> Option<String> {
    let remote = repo.find_remote("origin").ok()?;
    remote.url().ok().map(str::to_owned)
}

/// Clones into a temporary directory beside the cache and renames it into
/// place, so an interrupted clone never looks like a cache.
fn clone_into(
    dir: &Path,
    cache_dir: &Path,
    spec: &RemoteSpec,
    branch: &str,
) -> Result<(Repository, bool), SourceError> {
    let tmp = tempfile::Builder::new()
        .prefix(".clone-")
        .tempdir_in(cache_dir)
        .map_err(|e| SourceError::Cache {
            path: cache_dir.to_owned(),
            message: e.to_string(),
        })?;
    let fetched = {
        let repo = Repository::init_bare(tmp.path()).map_err(cache_error(tmp.path()))?;
        // The URL without userinfo, so the token never lands on disk.
        repo.config()
            .and_then(|mut c| c.set_str("remote.origin.url", &spec.parsed.display))
            .map_err(cache_error(tmp.path()))?;
        sync(&repo, spec, branch)?
    };
    std::fs::rename(tmp.path(), dir).map_err(|e| SourceError::Cache {
        path: dir.to_owned(),
        message: format!("cannot move the fresh clone into place: {e}"),
    })?;
    let repo = Repository::open_bare(dir).map_err(cache_error(dir))?;
    Ok((repo, fetched))
}

fn cache_error(path: &Path) -> impl Fn(git2::Error) -> SourceError + '_ {
    move |e| SourceError::Cache {
        path: path.to_owned(),
        message: e.message().to_owned(),
    }
}

/// The cache directory of a URL: readable for humans, unique by a hash of
/// the URL without userinfo (a rotated token keeps its cache).
fn cache_name(url: &GitUrl) -> String {
    let digest = Sha256::digest(url.display.as_bytes());
    let last = url
        .display
        .trim_end_matches('/')
        .rsplit(['/', ':'])
        .next()
        .unwrap_or_default();
    let last = last.strip_suffix(".git").unwrap_or(last);
    let readable: String = format!("{}-{}", url.host, last)
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(48)
        .collect();
    let readable = readable.trim_start_matches(['.', '-']);
    format!("{readable}-{}", &hex::encode(digest)[..16])
}

/// Lists the remote's refs and fetches only when a followed ref points at
/// something new; prunes pull requests that are gone. Returns whether a
/// fetch ran.
fn sync(repo: &Repository, spec: &RemoteSpec, branch: &str) -> Result<bool, SourceError> {
    let errs = RefCell::new(None);
    let mut remote = repo
        .remote_anonymous(&spec.url)
        .map_err(|e| spec.error("cannot use", e, &errs))?;
    let mut conn = remote
        .connect_auth(Direction::Fetch, Some(spec.callbacks(&errs)), None)
        .map_err(|e| spec.error("cannot list the refs of", e, &errs))?;
    let listed = {
        let heads = conn
            .list()
            .map_err(|e| spec.error("cannot list the refs of", e, &errs))?;
        let mut listed = Tips::default();
        let branch_ref = format!("refs/heads/{branch}");
        for h in heads {
            let name = h.name();
            if name == branch_ref {
                listed.head = Some(h.oid());
            } else if let Some(n) = pr_number(name, FORGE_PULLS) {
                listed.pulls.insert(n, h.oid());
            }
        }
        listed
    };
    if listed.head.is_none() {
        return Err(SourceError::NoBranch {
            location: spec.parsed.display.clone(),
            branch: branch.to_owned(),
        });
    }
    let local = read_tips(repo, branch, CACHE_PULLS).map_err(cache_error(repo.path()))?;
    let needs_fetch = listed.head != local.head
        || listed
            .pulls
            .iter()
            .any(|(n, oid)| local.pulls.get(n) != Some(oid));
    if needs_fetch {
        let mut opts = FetchOptions::new();
        opts.remote_callbacks(spec.callbacks(&errs))
            .download_tags(AutotagOption::None)
            .update_fetchhead(false);
        // Forced: a force-pushed branch or pull request is followed, as
        // the forge shows it.
        let refspecs = [
            format!("+refs/heads/{branch}:refs/heads/{branch}"),
            format!("+refs/pull/*/head:{PR_NAMESPACE}*"),
            format!("+refs/merge-requests/*/head:{PR_NAMESPACE}*"),
        ];
        conn.remote()
            .fetch(&refspecs, Some(&mut opts), None)
            .map_err(|e| spec.error("cannot fetch from", e, &errs))?;
    }
    drop(conn);
    prune_pulls(repo, &listed).map_err(cache_error(repo.path()))?;
    Ok(needs_fetch)
}

/// Deletes local pull-request heads the remote no longer advertises (a
/// closed GitLab merge request, a deleted ref), and anything in the
/// namespace that is not a pull-request number.
fn prune_pulls(repo: &Repository, listed: &Tips) -> Result<(), git2::Error> {
    let mut stale = Vec::new();
    for r in repo.references_glob(&format!("{PR_NAMESPACE}*"))? {
        let r = r?;
        let name = String::from_utf8_lossy(r.name_bytes()).into_owned();
        match pr_number(&name, CACHE_PULLS) {
            Some(n) if listed.pulls.contains_key(&n) => {}
            _ => stale.push(name),
        }
    }
    for name in stale {
        repo.find_reference(&name)?.delete()?;
    }
    Ok(())
}

fn read_tips(repo: &Repository, branch: &str, pulls: &[(&str, &str)]) -> Result<Tips, git2::Error> {
    let head = match repo.refname_to_id(&format!("refs/heads/{branch}")) {
        Ok(oid) => Some(oid),
        Err(e) if e.code() == git2::ErrorCode::NotFound => None,
        Err(e) => return Err(e),
    };
    let mut tips = Tips {
        head,
        pulls: BTreeMap::new(),
    };
    for r in repo.references()? {
        let r = r?;
        let Ok(name) = r.name() else { continue };
        let Some(n) = pr_number(name, pulls) else {
            continue;
        };
        let oid = match r.target() {
            Some(oid) => oid,
            None => match r.resolve() {
                Ok(r) => match r.target() {
                    Some(oid) => oid,
                    None => continue,
                },
                Err(_) => continue,
            },
        };
        tips.pulls.insert(n, oid);
    }
    Ok(tips)
}

/// The pull-request number of a ref in one of `namespaces` (prefix, suffix);
/// only plain decimal numbers count.
fn pr_number(name: &str, namespaces: &[(&str, &str)]) -> Option<u64> {
    namespaces.iter().find_map(|(prefix, suffix)| {
        let n = name.strip_prefix(prefix)?.strip_suffix(suffix)?;
        if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        n.parse().ok()
    })
}

impl RemoteSpec {
    /// The error to report for a failed network operation: what a callback
    /// found (a host key mismatch, a refused token) says more than
    /// libgit2's generic message.
    fn error(
        &self,
        op: &'static str,
        e: git2::Error,
        errs: &RefCell<Option<SourceError>>,
    ) -> SourceError {
        if let Some(found) = errs.borrow_mut().take() {
            return found;
        }
        SourceError::Remote {
            op,
            url: self.parsed.display.clone(),
            message: self.scrub(e.message()),
        }
    }

    /// libgit2 sometimes quotes the URL it was given; keep credentials out
    /// of anything that may be logged.
    fn scrub(&self, message: &str) -> String {
        let mut out = message.replace(&self.url, &self.parsed.display);
        let token = self.auth.token.as_ref().map(|t| t.expose());
        let mut secrets: Vec<&str> = Vec::new();
        if let Some(p) = &self.parsed.password {
            secrets.push(p);
        }
        if let Some(t) = &token {
            secrets.push(t);
        }
        for s in secrets {
            if !s.is_empty() {
                out = out.replace(s, "<redacted>");
            }
        }
        out
    }

    fn callbacks<'a>(&'a self, errs: &'a RefCell<Option<SourceError>>) -> RemoteCallbacks<'a> {
        let record = move |e: SourceError| {
            let mut slot = errs.borrow_mut();
            if slot.is_none() {
                *slot = Some(e);
            }
        };
        let display = &self.parsed.display;
        let mut cb = RemoteCallbacks::new();
        let mut calls = 0usize;
        let mut gave_token = false;
        let mut gave_key = false;
        cb.credentials(move |_url, user_from_url, allowed| {
            calls += 1;
            let refused = |what: &'static str| {
                record(SourceError::AuthRefused {
                    url: display.clone(),
                    what,
                });
                Err(git2::Error::from_str("credentials refused"))
            };
            if calls > MAX_CREDENTIAL_CALLS {
                return refused("credentials");
            }
            let ssh_user = user_from_url
                .or(self.parsed.user.as_deref())
                .unwrap_or("git");
            if allowed.contains(CredentialType::SSH_KEY) {
                if gave_key {
                    return refused("ssh key");
                }
                let Some(key) = &self.auth.ssh_key else {
                    record(SourceError::NoSshKey {
                        url: display.clone(),
                    });
                    return Err(git2::Error::from_str("no ssh key"));
                };
                gave_key = true;
                return Cred::ssh_key(ssh_user, None, key, None);
            }
            if allowed.contains(CredentialType::USERNAME) {
                return Cred::username(ssh_user);
            }
            if allowed.contains(CredentialType::USER_PASS_PLAINTEXT) {
                if gave_token {
                    return refused("token");
                }
                let Some(token) = &self.auth.token else {
                    record(SourceError::NoToken {
                        url: display.clone(),
                    });
                    return Err(git2::Error::from_str("no token"));
                };
                gave_token = true;
                let user = self.auth.token_user.as_deref().unwrap_or("x-access-token");
                return Cred::userpass_plaintext(user, &token.expose());
            }
            refused("credentials (no supported kind was asked for)")
        });
        cb.certificate_check(move |cert, _host| {
            // TLS certificates are libgit2's (and the system store's) to judge.
            let Some(hostkey) = cert.as_hostkey() else {
                return Ok(CertificateCheckStatus::CertificatePassthrough);
            };
            let fail = |e: SourceError| {
                record(e);
                Err(git2::Error::from_str("host key rejected"))
            };
            let Some(path) = &self.auth.known_hosts else {
                return fail(SourceError::NoKnownHosts {
                    url: display.clone(),
                });
            };
            let Some(blob) = hostkey.hostkey() else {
                return fail(SourceError::HostKey {
                    url: display.clone(),
                    known_hosts: path.clone(),
                    message: "the server's raw host key is not available".into(),
                });
            };
            // Read on every connection: a rotated key in a mounted Secret
            // takes effect without a restart.
            let entries = match read_known_hosts(path) {
                Ok(e) => e,
                Err(e) => return fail(e),
            };
            let port = self.parsed.port.unwrap_or(22);
            match check_host_key(&entries, &self.parsed.host, port, blob) {
                Ok(()) => Ok(CertificateCheckStatus::CertificateOk),
                Err(problem) => fail(SourceError::HostKey {
                    url: display.clone(),
                    known_hosts: path.clone(),
                    message: problem.describe(&self.parsed.host, port),
                }),
            }
        });
        cb
    }
}

/// A remote that lockstep writes to (plan commits, proposal branches),
/// reached exactly as the source reaches it: the same URL parsing, the same
/// preflight (no token over plain http to another machine, no ssh without
/// known_hosts and a key) and the same credential and host-key callbacks.
/// So whatever lets the daemon fetch lets it push, and nothing weaker.
/// `Debug` shows the URL without userinfo and the token as a placeholder.
#[derive(Clone)]
pub struct PushTarget {
    spec: RemoteSpec,
}

impl fmt::Debug for PushTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PushTarget")
            .field("url", &self.spec.parsed.display)
            .field("auth", &self.spec.auth)
            .finish()
    }
}

impl PushTarget {
    /// A remote by URL (as a source's `url`, userinfo allowed) with the
    /// source's credentials. Refused before any connection as a source
    /// would be.
    pub fn new(url: &str, auth: Auth) -> Result<PushTarget, SourceError> {
        let parsed = parse_url(url)?;
        preflight(&parsed, &auth)?;
        Ok(PushTarget {
            spec: RemoteSpec {
                url: url.to_owned(),
                parsed,
                auth,
            },
        })
    }

    /// The URL to hand to libgit2 (userinfo included: never log it).
    pub fn url(&self) -> &str {
        &self.spec.url
    }

    /// The URL as logs and errors show it (no userinfo).
    pub fn location(&self) -> &str {
        &self.spec.parsed.display
    }

    /// Credential and host-key callbacks for one network operation; what
    /// they refuse is recorded in `errs` (see [`PushTarget::explain`]).
    pub fn callbacks<'a>(&'a self, errs: &'a RefCell<Option<SourceError>>) -> RemoteCallbacks<'a> {
        self.spec.callbacks(errs)
    }

    /// The error to report for a failed operation `op`: what a callback
    /// recorded (a refused token, a host key mismatch) if anything, else
    /// libgit2's message without credentials.
    pub fn explain(
        &self,
        op: &'static str,
        e: git2::Error,
        errs: &RefCell<Option<SourceError>>,
    ) -> SourceError {
        self.spec.error(op, e, errs)
    }

    /// Where `refs/heads/<branch>` points on the remote (an ls-remote: one
    /// round trip, no objects).
    pub fn branch_tip(&self, repo: &Repository, branch: &str) -> Result<Option<Oid>, SourceError> {
        let errs = RefCell::new(None);
        let mut remote = repo
            .remote_anonymous(&self.spec.url)
            .map_err(|e| self.explain("cannot use", e, &errs))?;
        let conn = remote
            .connect_auth(Direction::Fetch, Some(self.callbacks(&errs)), None)
            .map_err(|e| self.explain("cannot list the refs of", e, &errs))?;
        let want = format!("refs/heads/{branch}");
        let tip = conn
            .list()
            .map_err(|e| self.explain("cannot list the refs of", e, &errs))?
            .iter()
            .find(|h| h.name() == want)
            .map(|h| h.oid());
        Ok(tip)
    }

    /// Fetches the remote's `refs/heads/<branch>` into the same local ref
    /// (forced: the remote's word is what counts).
    pub fn fetch_branch(&self, repo: &Repository, branch: &str) -> Result<(), SourceError> {
        let errs = RefCell::new(None);
        let mut remote = repo
            .remote_anonymous(&self.spec.url)
            .map_err(|e| self.explain("cannot use", e, &errs))?;
        let mut opts = FetchOptions::new();
        opts.remote_callbacks(self.callbacks(&errs))
            .download_tags(AutotagOption::None)
            .update_fetchhead(false);
        let spec = format!("+refs/heads/{branch}:refs/heads/{branch}");
        remote
            .fetch(&[spec.as_str()], Some(&mut opts), None)
            .map_err(|e| self.explain("cannot fetch from", e, &errs))
    }
}

/// Parses a remote URL: `scheme://[user[:password]@]host[:port]/path`,
/// scp-like `[user@]host:path` (ssh), or a local path.
fn parse_url(url: &str) -> Result<GitUrl, SourceError> {
    let bad = |message: &str| SourceError::Url {
        url: redact_unparsed(url),
        message: message.to_owned(),
    };
    // A password with a `/` ends the authority early, and its rest reads
    // as a path; `@` has no other use before a query in a Git remote.
    const AT_IN_PATH: &str = "an '@' after the host: write a password's '/', '@', '?' or '#' as %2F, %40, %3F or %23, or give the password in a file (--git-token-file)";
    if let Some((scheme_text, rest)) = url.split_once("://") {
        let scheme_text = scheme_text.to_ascii_lowercase();
        let scheme = match scheme_text.as_str() {
            "ssh" | "git+ssh" | "ssh+git" => Scheme::Ssh,
            "http" => Scheme::Http,
            "https" => Scheme::Https,
            "git" => Scheme::Git,
            "file" => Scheme::File,
            _ => return Err(bad("the scheme is not one of https, http, ssh, git, file")),
        };
        if scheme == Scheme::File {
            return Ok(GitUrl {
                scheme,
                user: None,
                password: None,
                host: String::new(),
                port: None,
                display: url.to_owned(),
            });
        }
        // The authority ends where git's and libgit2's does: at the first
        // `/`, `?` or `#`. An `@` after it is a password's `/` or `?` not
        // percent-encoded (or a token in a query): refused, never shown.
        let (authority, path) = match rest.find(['/', '?', '#']) {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        if path.contains('@') {
            return Err(bad(AT_IN_PATH));
        }
        // A query can carry a token (`?access_token=`): never shown.
        let (path, query) = match path.find(['?', '#']) {
            Some(i) => (&path[..i], "?…"),
            None => (path, ""),
        };
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let (user, password) = match userinfo {
            Some(u) => match u.split_once(':') {
                Some((user, pass)) => (Some(user.to_owned()), Some(pass.to_owned())),
                None => (Some(u.to_owned()), None),
            },
            None => (None, None),
        };
        let (host, port) = split_host_port(hostport).ok_or_else(|| bad("bad host or port"))?;
        if host.is_empty() {
            return Err(bad("no host"));
        }
        return Ok(GitUrl {
            scheme,
            user: user.filter(|u| !u.is_empty()),
            password,
            host,
            port,
            display: format!("{scheme_text}://{hostport}{path}{query}"),
        });
    }
    // scp-like: a colon before any slash, as git itself decides.
    if let Some((before, path)) = url.split_once(':')
        && !before.contains('/')
        && !before.is_empty()
    {
        if path.contains('@') {
            return Err(bad(AT_IN_PATH));
        }
        let (user, host) = match before.rsplit_once('@') {
            Some((u, h)) => (Some(u.to_owned()), h),
            None => (None, before),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(bad("no host"));
        }
        let path = path
            .find(['?', '#'])
            .map_or(path.to_owned(), |i| format!("{}?…", &path[..i]));
        return Ok(GitUrl {
            scheme: Scheme::Ssh,
            user: user.filter(|u| !u.is_empty()),
            password: None,
            host: host.to_owned(),
            port: None,
            display: format!("{host}:{path}"),
        });
    }
    Ok(GitUrl {
        scheme: Scheme::File,
        user: None,
        password: None,
        host: String::new(),
        port: None,
        // A mistyped URL read as a path (`https//u:pw@host/x`) may still
        // carry a password: what an `@` precedes is not shown.
        display: if url.contains('@') {
            redact_unparsed(url)
        } else {
            url.to_owned()
        },
    })
}

fn split_host_port(hostport: &str) -> Option<(String, Option<u16>)> {
    if let Some(rest) = hostport.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = if after.is_empty() || after == ":" {
            None
        } else {
            Some(after.strip_prefix(':')?.parse().ok()?)
        };
        return Some((host.to_owned(), port));
    }
    match hostport.rsplit_once(':') {
        Some((host, "")) => Some((host.to_owned(), None)),
        Some((host, port)) => Some((host.to_owned(), Some(port.parse().ok()?))),
        None => Some((hostport.to_owned(), None)),
    }
}

/// The URL without userinfo, also for URLs that do not parse.
fn redact_url(url: &str) -> String {
    match parse_url(url) {
        Ok(u) => u.display,
        Err(_) => redact_unparsed(url),
    }
}

/// What an error may show of a URL that does not parse: nothing up to its
/// last `@` (userinfo, also a password whose `/` or `?` ended the authority
/// early) and no query or fragment (`?access_token=…`). It may hide more
/// than it must; it never shows a credential.
fn redact_unparsed(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((s, r)) => (Some(s), r),
        None => (None, url),
    };
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let rest = match rest.find(['?', '#']) {
        Some(i) => format!("{}?…", &rest[..i]),
        None => rest.to_owned(),
    };
    match scheme {
        Some(s) => format!("{s}://{rest}"),
        None => rest,
    }
}

/// One line of an OpenSSH known_hosts file.
#[derive(Clone, Debug, PartialEq, Eq)]
struct KnownHost {
    marker: Marker,
    /// Comma-separated patterns: `host`, `[host]:port`, wildcards, `!negation`.
    patterns: Vec<String>,
    /// `|1|salt|hash` entries need HMAC-SHA1, which lockstep does not carry.
    hashed: bool,
    key_type: String,
    key: Vec<u8>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Marker {
    None,
    Revoked,
    CertAuthority,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum HostKeyProblem {
    Revoked,
    Mismatch { key_type: String },
    Unknown { key_type: String, hashed: bool },
}

impl HostKeyProblem {
    fn describe(&self, host: &str, port: u16) -> String {
        let target = host_port(host, port);
        match self {
            HostKeyProblem::Revoked => format!("the host key of {target} is marked @revoked"),
            HostKeyProblem::Mismatch { key_type } => format!(
                "the {key_type} host key of {target} differs from the recorded one \
                 (a man in the middle, or a changed server key: verify it, then update the file)"
            ),
            HostKeyProblem::Unknown { key_type, hashed } => {
                let mut m = format!("no {key_type} key recorded for {target}");
                if *hashed {
                    m.push_str(
                        "; the file has hashed entries (|1|...), which lockstep cannot read: \
                         add unhashed lines (ssh-keyscan without -H)",
                    );
                }
                m
            }
        }
    }
}

fn read_known_hosts(path: &Path) -> Result<Vec<KnownHost>, SourceError> {
    let text = std::fs::read_to_string(path).map_err(|e| SourceError::KnownHostsFile {
        path: path.to_owned(),
        message: e.to_string(),
    })?;
    Ok(parse_known_hosts(&text))
}

/// Lines that do not parse are skipped, as OpenSSH does.
fn parse_known_hosts(text: &str) -> Vec<KnownHost> {
    text.lines().filter_map(parse_known_host).collect()
}

fn parse_known_host(line: &str) -> Option<KnownHost> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let mut fields = line.split_whitespace();
    let mut first = fields.next()?;
    let marker = match first {
        "@revoked" => Marker::Revoked,
        "@cert-authority" => Marker::CertAuthority,
        m if m.starts_with('@') => return None,
        _ => Marker::None,
    };
    if marker != Marker::None {
        first = fields.next()?;
    }
    let key_type = fields.next()?.to_owned();
    let key = base64_decode(fields.next()?)?;
    let patterns: Vec<String> = first.split(',').map(str::to_ascii_lowercase).collect();
    let hashed = patterns.iter().any(|p| p.starts_with("|1|"));
    Some(KnownHost {
        marker,
        patterns,
        hashed,
        key_type,
        key,
    })
}

/// How known_hosts names a host: bare for port 22, `[host]:port` otherwise.
fn host_port(host: &str, port: u16) -> String {
    if port == 22 {
        host.to_owned()
    } else {
        format!("[{host}]:{port}")
    }
}

impl KnownHost {
    fn matches(&self, target: &str) -> bool {
        let mut hit = false;
        for p in &self.patterns {
            if let Some(negated) = p.strip_prefix('!') {
                if glob(negated, target) {
                    return false;
                }
            } else if glob(p, target) {
                hit = true;
            }
        }
        hit
    }
}

/// OpenSSH's rules: a matching @revoked key is refused outright; otherwise
/// a matching key is accepted; a different key of the same type is a
/// mismatch; no key of that type is unknown.
fn check_host_key(
    entries: &[KnownHost],
    host: &str,
    port: u16,
    blob: &[u8],
) -> Result<(), HostKeyProblem> {
    let target = host_port(host, port).to_ascii_lowercase();
    let key_type = blob_key_type(blob).unwrap_or("unknown").to_owned();
    let (mut ok, mut mismatch, mut hashed) = (false, false, false);
    for e in entries {
        if e.hashed {
            hashed = true;
            continue;
        }
        if !e.matches(&target) {
            continue;
        }
        match e.marker {
            Marker::Revoked if e.key == blob => return Err(HostKeyProblem::Revoked),
            Marker::Revoked | Marker::CertAuthority => {}
            Marker::None if e.key == blob => ok = true,
            Marker::None if e.key_type == key_type => mismatch = true,
            Marker::None => {}
        }
    }
    if ok {
        Ok(())
    } else if mismatch {
        Err(HostKeyProblem::Mismatch { key_type })
    } else {
        Err(HostKeyProblem::Unknown { key_type, hashed })
    }
}

/// The key type named inside an SSH public key blob (a length-prefixed
/// string first), which is what the key really is whatever a file claims.
fn blob_key_type(blob: &[u8]) -> Option<&str> {
    let len = u32::from_be_bytes(blob.get(..4)?.try_into().ok()?) as usize;
    std::str::from_utf8(blob.get(4..4usize.checked_add(len)?)?).ok()
}

/// `*` and `?` wildcards, as in known_hosts patterns.
fn glob(pattern: &str, text: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        match p.get(pi) {
            Some(b'*') => {
                star = Some((pi, ti));
                pi += 1;
            }
            Some(&c) if c == b'?' || c == t[ti] => {
                pi += 1;
                ti += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    pi = sp + 1;
                    ti = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in s.trim_end_matches('=').bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// Watches a local repository so that the daemon rescans as soon as a ref
/// moves instead of at the next poll. Any write event (and any watcher
/// error, which may mean lost events) is only a hint to rescan: the channel
/// holds one pending hint, so a burst of events (a commit touches many
/// files) becomes one rescan. Reads are not hints: the rescan itself opens
/// HEAD and the refs, and would otherwise trigger the next rescan forever.
/// Polling stays the backstop, so a missed event costs at most one poll
/// interval. Keep the watcher alive as long as the receiver is used.
pub fn watch_local(path: &Path) -> Result<(RecommendedWatcher, mpsc::Receiver<()>), SourceError> {
    let watch_error = |p: &Path, e: notify::Error| SourceError::Watch {
        path: p.to_owned(),
        message: e.to_string(),
    };
    let repo = Repository::open(path).map_err(|e| SourceError::Open {
        path: path.to_owned(),
        message: e.message().to_owned(),
    })?;
    // Refs and packed-refs live in the common dir (shared by linked work
    // trees); HEAD in the git dir. Objects are left out: they change without
    // any ref moving, and there are many directories of them.
    let git_dir = repo.path().to_owned();
    let common = repo.commondir().to_owned();
    let (tx, rx) = mpsc::channel(1);
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if let Ok(e) = &event
            && is_read(&e.kind)
        {
            return;
        }
        let _ = tx.try_send(());
    })
    .map_err(|e| watch_error(path, e))?;
    let refs = common.join("refs");
    watcher
        .watch(&refs, RecursiveMode::Recursive)
        .map_err(|e| watch_error(&refs, e))?;
    watcher
        .watch(&common, RecursiveMode::NonRecursive)
        .map_err(|e| watch_error(&common, e))?;
    if git_dir != common {
        watcher
            .watch(&git_dir, RecursiveMode::NonRecursive)
            .map_err(|e| watch_error(&git_dir, e))?;
    }
    Ok((watcher, rx))
}

/// Opening, reading and closing without writing change nothing.
fn is_read(kind: &EventKind) -> bool {
    matches!(kind, EventKind::Access(a) if !matches!(a, AccessKind::Close(AccessMode::Write)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Push targets are built like sources: the same refusals before any
    /// connection, nothing secret in Debug. (No ssh server runs here; the
    /// https token path is exercised against git's http-backend in
    /// tests/plan_propose.rs.)
    #[test]
    fn push_targets_refuse_what_sources_refuse_and_hide_secrets() {
        let dir = tempfile::tempdir().expect("tempdir");
        let key = dir.path().join("id_ed25519");
        std::fs::write(&key, "not read").expect("key");
        let known = dir.path().join("known_hosts");
        std::fs::write(&known, "").expect("known_hosts");
        let ssh = "ssh://git@git.example.com:2222/fleet.git";
        let e = PushTarget::new(
            ssh,
            Auth {
                ssh_key: Some(key.clone()),
                ..Auth::default()
            },
        )
        .expect_err("no known_hosts");
        assert!(matches!(e, SourceError::NoKnownHosts { .. }), "{e:?}");
        let e = PushTarget::new(
            ssh,
            Auth {
                known_hosts: Some(known.clone()),
                ..Auth::default()
            },
        )
        .expect_err("no key");
        assert!(matches!(e, SourceError::NoSshKey { .. }), "{e:?}");
        let t = PushTarget::new(
            "git@git.example.com:fleet.git",
            Auth {
                ssh_key: Some(key),
                known_hosts: Some(known),
                ..Auth::default()
            },
        )
        .expect("ssh with key and known_hosts");
        assert_eq!(t.location(), "git.example.com:fleet.git");
        assert_eq!(t.url(), "git@git.example.com:fleet.git");

        let token = "tok-push-5e1";
        let e = PushTarget::new(
            "http://git.example.com/fleet.git",
            Auth {
                token: Some(Secret::new(token)),
                ..Auth::default()
            },
        )
        .expect_err("a token over plain http");
        assert!(matches!(e, SourceError::InsecureToken { .. }), "{e:?}");
        let t = PushTarget::new(
            "https://me:url-pw@git.example.com/fleet.git",
            Auth {
                token: Some(Secret::new(token)),
                ..Auth::default()
            },
        )
        .expect("https with a token");
        let shown = format!("{t:?}");
        assert!(
            !shown.contains(token) && !shown.contains("url-pw"),
            "{shown}"
        );
        assert_eq!(t.location(), "https://git.example.com/fleet.git");
        let errs = RefCell::new(None);
        let _callbacks = t.callbacks(&errs);
    }

    fn blob(key_type: &str, body: &[u8]) -> Vec<u8> {
        let mut b = (key_type.len() as u32).to_be_bytes().to_vec();
        b.extend_from_slice(key_type.as_bytes());
        b.extend_from_slice(body);
        b
    }

    fn b64(bytes: &[u8]) -> String {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    fn line(hosts: &str, key_type: &str, body: &[u8]) -> String {
        format!("{hosts} {key_type} {} comment", b64(&blob(key_type, body)))
    }

    #[test]
    fn base64_round_trips_every_length() {
        for len in 0..40u8 {
            let bytes: Vec<u8> = (0..len).map(|i| i.wrapping_mul(37)).collect();
            assert_eq!(base64_decode(&b64(&bytes)), Some(bytes));
        }
        assert_eq!(base64_decode("not base64!"), None);
    }

    #[test]
    fn plain_hosts_match_on_port_22_only() {
        let key = blob("ssh-ed25519", b"A");
        let entries = parse_known_hosts(&line("github.com,140.82.121.4", "ssh-ed25519", b"A"));
        assert_eq!(entries.len(), 1);
        assert_eq!(check_host_key(&entries, "github.com", 22, &key), Ok(()));
        assert_eq!(check_host_key(&entries, "GitHub.com", 22, &key), Ok(()));
        assert_eq!(check_host_key(&entries, "140.82.121.4", 22, &key), Ok(()));
        assert!(matches!(
            check_host_key(&entries, "github.com", 2222, &key),
            Err(HostKeyProblem::Unknown { .. })
        ));
        assert!(matches!(
            check_host_key(&entries, "gitlab.com", 22, &key),
            Err(HostKeyProblem::Unknown { .. })
        ));
    }

    #[test]
    fn bracketed_entries_carry_the_port() {
        let key = blob("ssh-ed25519", b"B");
        let entries = parse_known_hosts(&line("[git.example.com]:2222", "ssh-ed25519", b"B"));
        assert_eq!(
            check_host_key(&entries, "git.example.com", 2222, &key),
            Ok(())
        );
        assert!(check_host_key(&entries, "git.example.com", 22, &key).is_err());
        assert!(check_host_key(&entries, "git.example.com", 2223, &key).is_err());
    }

    #[test]
    fn wildcards_and_negations() {
        let key = blob("ssh-ed25519", b"C");
        let entries = parse_known_hosts(&line(
            "*.example.com,!evil.example.com",
            "ssh-ed25519",
            b"C",
        ));
        assert_eq!(
            check_host_key(&entries, "git.example.com", 22, &key),
            Ok(())
        );
        assert!(check_host_key(&entries, "evil.example.com", 22, &key).is_err());
        assert!(check_host_key(&entries, "example.org", 22, &key).is_err());
        assert!(glob("git?.example.com", "git1.example.com"));
        assert!(!glob("git?.example.com", "git12.example.com"));
        assert!(glob("*", ""));
        assert!(!glob("a*b", "acbd"));
    }

    #[test]
    fn a_different_key_of_the_same_type_is_a_mismatch() {
        let entries = parse_known_hosts(&format!(
            "{}\n{}\n",
            line("host", "ssh-ed25519", b"recorded"),
            line("host", "ssh-rsa", b"other type")
        ));
        let presented = blob("ssh-ed25519", b"presented");
        let err = check_host_key(&entries, "host", 22, &presented).unwrap_err();
        assert_eq!(
            err,
            HostKeyProblem::Mismatch {
                key_type: "ssh-ed25519".into()
            }
        );
        assert!(err.describe("host", 22).contains("man in the middle"));
        // Only a key of another type recorded: unknown, not a mismatch.
        let ecdsa = blob("ecdsa-sha2-nistp256", b"x");
        assert_eq!(
            check_host_key(&entries, "host", 22, &ecdsa),
            Err(HostKeyProblem::Unknown {
                key_type: "ecdsa-sha2-nistp256".into(),
                hashed: false
            })
        );
    }

    #[test]
    fn revoked_wins_and_cert_authorities_are_not_host_keys() {
        let key = blob("ssh-ed25519", b"K");
        let text = format!(
            "@revoked {}\n{}\n",
            line("*", "ssh-ed25519", b"K"),
            line("host", "ssh-ed25519", b"K")
        );
        assert_eq!(
            check_host_key(&parse_known_hosts(&text), "host", 22, &key),
            Err(HostKeyProblem::Revoked)
        );
        let ca = format!("@cert-authority {}\n", line("host", "ssh-ed25519", b"K"));
        assert!(check_host_key(&parse_known_hosts(&ca), "host", 22, &key).is_err());
    }

    #[test]
    fn comments_blank_and_broken_lines_are_skipped() {
        let text = format!(
            "# a comment\n\n   \nhost ssh-ed25519\nhost ssh-ed25519 !!!notbase64\n@weird {}\n{}\n",
            line("host", "ssh-ed25519", b"K"),
            line("host", "ssh-ed25519", b"K")
        );
        let entries = parse_known_hosts(&text);
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].patterns, vec!["host".to_owned()]);
    }

    #[test]
    fn hashed_entries_are_named_in_the_error() {
        let key = blob("ssh-ed25519", b"K");
        let text = format!(
            "|1|c2FsdA==|aGFzaA== ssh-ed25519 {}\n",
            b64(&blob("ssh-ed25519", b"K"))
        );
        let entries = parse_known_hosts(&text);
        assert!(entries[0].hashed);
        let err = check_host_key(&entries, "host", 22, &key).unwrap_err();
        assert_eq!(
            err,
            HostKeyProblem::Unknown {
                key_type: "ssh-ed25519".into(),
                hashed: true
            }
        );
        let text = err.describe("host", 22);
        assert!(
            text.contains("hashed") && text.contains("ssh-keyscan without -H"),
            "{text}"
        );
    }

    /// Real keys from ssh-keygen, as users will have them: the line parses,
    /// the blob names its type, and `ssh-keygen -H` output is recognised as
    /// hashed.
    #[test]
    fn keys_written_by_ssh_keygen() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("host_key");
        let status = std::process::Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(&key)
            .status()
            .unwrap();
        assert!(status.success());
        let public = std::fs::read_to_string(key.with_extension("pub")).unwrap();
        let mut fields = public.split_whitespace();
        let (kt, b) = (fields.next().unwrap(), fields.next().unwrap());
        let blob = base64_decode(b).unwrap();
        assert_eq!(blob_key_type(&blob), Some("ssh-ed25519"));
        assert_eq!(kt, "ssh-ed25519");
        let known = dir.path().join("known_hosts");
        std::fs::write(&known, format!("[127.0.0.1]:2222 {kt} {b}\n")).unwrap();
        let entries = read_known_hosts(&known).unwrap();
        assert_eq!(check_host_key(&entries, "127.0.0.1", 2222, &blob), Ok(()));
        let status = std::process::Command::new("ssh-keygen")
            .arg("-H")
            .arg("-f")
            .arg(&known)
            .stderr(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
        let entries = read_known_hosts(&known).unwrap();
        assert!(entries[0].hashed, "{entries:?}");
        assert_eq!(
            check_host_key(&entries, "127.0.0.1", 2222, &blob),
            Err(HostKeyProblem::Unknown {
                key_type: "ssh-ed25519".into(),
                hashed: true
            })
        );
    }

    #[test]
    fn urls_lose_their_userinfo() {
        let u = parse_url("https://x-access-token:s3cret@github.com/org/fleet.git").unwrap();
        assert_eq!(u.scheme, Scheme::Https);
        assert_eq!(u.display, "https://github.com/org/fleet.git");
        assert_eq!(u.password.as_deref(), Some("s3cret"));
        assert_eq!(u.host, "github.com");
        let u = parse_url("ssh://git@git.example.com:2222/org/fleet.git").unwrap();
        assert_eq!((u.scheme, u.port), (Scheme::Ssh, Some(2222)));
        assert_eq!(u.user.as_deref(), Some("git"));
        assert_eq!(u.display, "ssh://git.example.com:2222/org/fleet.git");
        let u = parse_url("git@github.com:org/fleet.git").unwrap();
        assert_eq!((u.scheme, u.host.as_str()), (Scheme::Ssh, "github.com"));
        assert_eq!(u.display, "github.com:org/fleet.git");
        let u = parse_url("ssh://[::1]:2222/x.git").unwrap();
        assert_eq!((u.host.as_str(), u.port), ("::1", Some(2222)));
        let u = parse_url("/srv/git/fleet.git").unwrap();
        assert_eq!(u.scheme, Scheme::File);
        assert!(parse_url("ftp://host/x").is_err());
        assert!(parse_url("https://host:notaport/x").is_err());
        let err = parse_url("ftp://u:pw@host/x").unwrap_err().to_string();
        assert!(err.contains("ftp://host/x") && !err.contains("pw"), "{err}");
    }

    /// Passwords that are not percent-encoded, and tokens in a query, never
    /// reach an error or a log line.
    #[test]
    fn credentials_outside_the_userinfo_are_not_shown() {
        for (url, shown) in [
            ("https://u:pa/SECRET@host/x.git", "https://host/x.git"),
            ("https://u:1234/SECRET@host/x.git", "https://host/x.git"),
            (
                "https://u:p?SECRET@host:badport/x",
                "https://host:badport/x",
            ),
            ("u:pa@SECRET@host:org/x.git", "host:org/x.git"),
        ] {
            let err = parse_url(url).unwrap_err().to_string();
            assert!(err.contains(shown), "{url}: {err}");
            assert!(!err.contains("SECRET"), "{url}: {err}");
            assert_eq!(redact_url(url), shown.to_owned(), "{url}");
        }
        let err = parse_url("https://u:pa/SECRET@host/x.git")
            .unwrap_err()
            .to_string();
        assert!(err.contains("%2F"), "{err}");
        let u = parse_url("https://host/org/x.git?access_token=s3cret#frag").unwrap();
        assert_eq!(u.display, "https://host/org/x.git?…");
        for url in [
            "https://u:1234/SE?CRET@host/x.git",
            "https://u:/SE#CRET@host",
            "https://u:p?CRET@host/x",
        ] {
            let err = parse_url(url).unwrap_err().to_string();
            assert!(!err.contains("CRET") && !err.contains("SE"), "{url}: {err}");
        }
        for (url, shown) in [
            ("https://host?access_token=SECRET", "https://host?…"),
            ("https://tok@host?t=SECRET", "https://host?…"),
            ("git@host:org/x.git?access_token=SECRET", "host:org/x.git?…"),
            ("https//u:SECRET@host/x", "host/x"),
        ] {
            assert_eq!(parse_url(url).unwrap().display, shown, "{url}");
        }
        let err = parse_url("https://host:bad/x.git?access_token=s3cret")
            .unwrap_err()
            .to_string();
        assert!(!err.contains("s3cret"), "{err}");
    }

    #[test]
    fn cache_names_are_readable_stable_and_free_of_credentials() {
        let a = parse_url("https://user:one@github.com/org/fleet.git").unwrap();
        let b = parse_url("https://user:two@github.com/org/fleet.git").unwrap();
        let c = parse_url("https://github.com/org/other.git").unwrap();
        assert_eq!(cache_name(&a), cache_name(&b));
        assert_ne!(cache_name(&a), cache_name(&c));
        assert!(
            cache_name(&a).starts_with("github.com-fleet-"),
            "{}",
            cache_name(&a)
        );
        assert!(!cache_name(&a).contains("one"));
        let weird = parse_url("ssh://git@[::1]:22/../..").unwrap();
        assert!(!cache_name(&weird).contains('/'));
        assert!(!cache_name(&weird).starts_with('.'));
    }

    #[test]
    fn pull_request_numbers_are_plain_decimals() {
        assert_eq!(pr_number("refs/pull/7/head", FORGE_PULLS), Some(7));
        assert_eq!(
            pr_number("refs/merge-requests/12/head", FORGE_PULLS),
            Some(12)
        );
        assert_eq!(pr_number("refs/pull/7/merge", FORGE_PULLS), None);
        assert_eq!(pr_number("refs/pull/+7/head", FORGE_PULLS), None);
        assert_eq!(pr_number("refs/pull//head", FORGE_PULLS), None);
        assert_eq!(pr_number("refs/lockstep/pr/3", CACHE_PULLS), Some(3));
        assert_eq!(pr_number("refs/lockstep/pr/3/x", CACHE_PULLS), None);
    }
}
