//! `lockstep run` assembled from its configuration: the source, the forge,
//! the cluster, the webhook and metrics servers, leader election, signals.
//! The loop itself is [`crate::daemon`]; this is the wiring, kept out of
//! `main.rs` so tests can start the whole service in-process.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;
use tokio::sync::{mpsc, watch};

use crate::cluster::Cluster;
use crate::cluster::kube::KubeCluster;
use crate::cluster::memory::MemoryCluster;
use crate::config::{ClusterMode, Config, ReportKind};
use crate::daemon::{self, Daemon, Options, PassOutcome, Repo};
use crate::follow::Deadlines;
use crate::forge::delivery::{RetryPolicy, StatusQueue};
use crate::forge::{AnyForge, ForgeKind, ForgeSpec};
use crate::metrics::Metrics;
use crate::repair::RepairPolicy;
use crate::secret::Secret;
use crate::sim::{Params, World};
use crate::source::{Auth, Origin, PushTarget, Source};

#[derive(Debug, Error)]
pub enum ServiceError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Source(#[from] crate::source::SourceError),
    #[error(transparent)]
    Forge(#[from] crate::forge::ForgeError),
    #[error(transparent)]
    Cluster(#[from] crate::cluster::ClusterError),
    #[error(transparent)]
    Secret(#[from] crate::secret::SecretError),
    #[error(transparent)]
    Lease(#[from] crate::lease::LeaseError),
    #[error("{what} {addr}: {message}")]
    Listen {
        what: &'static str,
        addr: String,
        message: String,
    },
    #[error("{0}")]
    Other(String),
}

/// What a bounded run (`--until-idle`) ended with.
#[derive(Debug, Default)]
pub struct Summary {
    pub last: PassOutcome,
    /// Statuses not delivered at stop: still queued (the host was down) or
    /// refused by the host.
    pub undelivered: usize,
    /// What a person must act on at stop ([`Daemon::needs_person`]): each
    /// is a status that ended in failure.
    pub needs_person: Vec<daemon::NeedsPerson>,
    pub metrics: String,
}

/// Runs the service until SIGTERM/Ctrl-C, or until idle with `until_idle`.
/// The configured trust policy, if any. lockstep's own plan commits are
/// judged like anyone's, so with a policy their signing key must be trusted
/// for `plans.authorEmail` now: a key that is not stops the start, and no
/// key at all is a warning (plan commits would be unsigned and refused).
fn load_trust(config: &Config) -> Result<Option<Arc<crate::trust::TrustPolicy>>, ServiceError> {
    let trust = crate::trust::TrustPolicy::load(
        config.trust.allowed_signers_file.as_deref(),
        config.trust.trusted_keys_dir.as_deref(),
    )
    .map_err(|e| ServiceError::Other(e.to_string()))?;
    let Some(policy) = &trust else {
        return Ok(None);
    };
    // Where judging starts is where signing began: a name (a tag, a
    // branch, an abbreviation a ref can shadow) can be moved, and the
    // commits it then skips would be taken as given, never judged.
    if let Some(since) = &config.source.since {
        let full = (since.len() == 40 || since.len() == 64)
            && since.bytes().all(|b| b.is_ascii_hexdigit());
        if !full {
            return Err(ServiceError::Other(format!(
                "source.since {:?}: with a trust policy, give the full commit id (`git rev-parse {}`): a name can be moved, and the commits it skips would never be judged",
                crate::escape::escape(since),
                crate::escape::escape(since)
            )));
        }
    }
    match &config.plans.signing_key_file {
        Some(key) => {
            let public = ssh_key::PrivateKey::read_openssh_file(key)
                .map_err(|e| {
                    ServiceError::Other(format!(
                        "plans.signingKeyFile {}: cannot read the key ({e})",
                        key.display()
                    ))
                })?
                .public_key()
                .to_openssh()
                .map_err(|e| ServiceError::Other(e.to_string()))?;
            let now = jiff::Timestamp::now().as_second();
            policy
                .trusts_ssh_key(&public, &config.plans.author_email, now)
                .map_err(|why| {
                    ServiceError::Other(format!(
                        "plans.signingKeyFile {}: lockstep's plan commits would be refused by its own trust policy: {why}; add its public key to the allowed signers for {:?} (plans.authorEmail)",
                        key.display(),
                        config.plans.author_email
                    ))
                })?;
        }
        None => tracing::warn!(
            "a trust policy is configured but plans.signingKeyFile is not: plan hop commits would be unsigned and refused (UntrustedCommit); set it to an SSH key the allowed signers trust for plans.authorEmail"
        ),
    }
    Ok(trust)
}

pub async fn run(config: Config, until_idle: bool) -> Result<Summary, ServiceError> {
    config.validate()?;
    // `./clusters/prod/` selects what `clusters/prod` does; `/etc` and `..`
    // select nothing and are refused before anything starts.
    let paths = crate::git::normalize_prefixes(&config.source.paths)
        .map_err(|e| ServiceError::Other(e.to_string()))?;
    let metrics = Arc::new(Metrics::new());
    let trust = load_trust(&config)?;

    // The source.
    let auth = || -> Result<Auth, ServiceError> {
        Ok(Auth {
            token: config
                .source
                .token_file
                .as_deref()
                .map(Secret::from_file)
                .transpose()?,
            token_user: config.source.token_user.clone(),
            ssh_key: config.source.ssh_key_file.clone(),
            known_hosts: config.source.known_hosts_file.clone(),
        })
    };
    let origin = match (&config.source.repo, &config.source.url) {
        (Some(path), _) => Origin::Local(path.clone()),
        (None, Some(url)) => Origin::Remote {
            url: url.clone(),
            cache_dir: config
                .source
                .cache_dir
                .clone()
                .unwrap_or_else(default_cache_dir),
            auth: auth()?,
        },
        (None, None) => return Err(ServiceError::Other("no source".into())),
    };
    let local = matches!(origin, Origin::Local(_));
    let branch = config.source.branch.clone();
    let source = tokio::task::spawn_blocking(move || Source::open(origin, &branch))
        .await
        .map_err(|e| ServiceError::Other(e.to_string()))??;
    let repo_path = Repo::path(&source);
    tracing::info!(source = %source.location(), branch = %config.source.branch, "source opened");
    // Plan commits are pushed where the source came from; proposal
    // branches too, or, for a local repository, to its origin remote.
    let plan_push = source.push_target();
    let plan_propose_to = match &plan_push {
        Some(t) => Some(t.clone()),
        None => local_origin(&repo_path).and_then(|url| {
            match auth().and_then(|a| Ok(PushTarget::new(&url, a)?)) {
                Ok(t) => Some(t),
                Err(e) => {
                    tracing::warn!(error = %e, "the local repository's origin cannot take proposal branches");
                    None
                }
            }
        }),
    };

    // Notes go where the source came from, with its credentials, unless
    // another remote of the repository is named.
    let notes_remote = config.report.push_notes.as_ref().map(|r| {
        use crate::forge::notes::NotesRemote;
        match (&plan_push, r.as_str()) {
            (Some(t), "" | "origin") => NotesRemote::Source(t.clone()),
            _ => NotesRemote::Named(r.clone()),
        }
    });

    // The forge.
    let kind = match config.report.kind {
        ReportKind::Notes => ForgeKind::Notes,
        ReportKind::Github => ForgeKind::GitHub,
        ReportKind::Gitlab => ForgeKind::GitLab,
        ReportKind::Gitea => ForgeKind::Gitea,
    };
    let token = match kind {
        ForgeKind::Notes => None,
        _ => crate::secret::token(
            config.report.token_file.as_deref(),
            config.report.token_env.as_deref(),
        )?,
    };
    let forge = Arc::new(AnyForge::build(&ForgeSpec {
        kind,
        url: config.report.url.clone(),
        repo: config.report.repo.clone().or_else(|| {
            config
                .source
                .url
                .as_deref()
                .and_then(crate::forge::repo_from_url)
        }),
        token,
        local: repo_path.clone(),
    })?);

    // Triggers: webhooks, the local watcher.
    let (trigger_tx, trigger_rx) = mpsc::channel::<()>(1);
    let _watcher = if local {
        match crate::source::watch_local(&repo_path) {
            Ok((w, mut rx)) => {
                let tx = trigger_tx.clone();
                tokio::spawn(async move {
                    while rx.recv().await.is_some() {
                        let _ = tx.try_send(());
                    }
                });
                Some(w)
            }
            Err(e) => {
                tracing::warn!(error = %e, "no file watcher; polling only");
                None
            }
        }
    } else {
        None
    };

    let opts = Options {
        cluster_name: config.cluster.name.clone(),
        branch: config.source.branch.clone(),
        paths,
        since: config.source.since.clone(),
        poll: config.poll_interval(),
        pull_requests: config.source.pull_requests,
        lands_commit_by_commit: config.source.lands_commit_by_commit,
        target_url: config.report.target_url.clone(),
        deadlines: stall_deadlines(
            crate::duration::positive(&config.cluster.stall_after)
                .ok()
                .unwrap_or(Duration::from_secs(1800)),
        ),
        repair: RepairPolicy {
            budget: config.cluster.repair_budget,
            ..RepairPolicy::default()
        },
        max_file_bytes: crate::manifest::DEFAULT_MAX_FILE_BYTES,
        until_idle,
        resync: Duration::from_secs(600),
        plan_author: crate::plan::writeback::Author {
            name: config.plans.author_name.clone(),
            email: config.plans.author_email.clone(),
        },
        plan_signing_key: config.plans.signing_key_file.clone(),
        plan_push,
        plan_propose_to,
        plan_merge_proposals: false,
        trust,
        ..Options::default()
    };
    let queue = StatusQueue::new(10_000);

    match config.cluster.mode {
        ClusterMode::Sim => {
            let mut world = World::new(Params::default());
            world.faults = config
                .cluster
                .faults
                .iter()
                .map(|f| crate::sim::parse_fault(f))
                .collect::<Result<_, _>>()
                .map_err(|e| ServiceError::Other(e.to_string()))?;
            let mem = MemoryCluster::new(world);
            // The simulated cluster runs what the first judged commit says,
            // "taken as given"; the engine applies what follows.
            // The seed's parse of the first tree is the first judgment's.
            let mut opts = opts;
            opts.parsed = Some(Arc::default());
            if let Some(head) = Repo::head(&source) {
                let (m, p, o) = (mem.clone(), repo_path.clone(), opts.clone());
                tokio::task::spawn_blocking(move || daemon::seed_simulation(&m, &p, head, &o))
                    .await
                    .map_err(|e| ServiceError::Other(e.to_string()))?
                    .map_err(|e| ServiceError::Other(e.to_string()))?;
            }
            let (_keep, leader) = watch::channel(true);
            let mut daemon = Daemon::new(
                opts,
                source,
                mem.clone(),
                Arc::new(daemon::VirtualClock::new(mem)),
                queue.clone(),
                metrics.clone(),
            );
            daemon.set_forge(forge.clone());
            drive(
                &config,
                daemon,
                forge,
                notes_remote,
                queue,
                metrics,
                trigger_tx,
                trigger_rx,
                leader,
                None,
            )
            .await
        }
        ClusterMode::Kube => {
            let cluster = match &config.cluster.kubeconfig {
                Some(k) => KubeCluster::from_kubeconfig(k).await?,
                None => KubeCluster::infer().await?,
            };
            let leadership = if config.leader_election.enabled {
                let ns = config
                    .leader_election
                    .namespace
                    .clone()
                    .or_else(|| std::env::var("POD_NAMESPACE").ok())
                    .unwrap_or_else(|| "lockstep".into());
                let identity = identity(&config);
                let duration = crate::duration::positive(&config.leader_election.lease_duration)
                    .ok()
                    .unwrap_or(Duration::from_secs(15));
                crate::lease::Leadership::start(
                    cluster.client().clone(),
                    crate::lease::LeaseConfig {
                        namespace: ns,
                        name: config.leader_election.lease_name.clone(),
                        identity,
                        duration,
                        // A third of the duration (the defaults' 15 s / 5 s), so a
                        // lease shorter than the fixed 5 s default grace still works.
                        grace: Duration::from_secs((duration.as_secs() / 3).max(1)),
                    },
                )
                .await?
            } else {
                crate::lease::Leadership::always()
            };
            let leader = leadership.subscribe();
            let mut daemon = Daemon::new(
                opts,
                source,
                cluster,
                Arc::new(daemon::SystemClock::new()),
                queue.clone(),
                metrics.clone(),
            );
            daemon.set_forge(forge.clone());
            let leadership = Arc::new(leadership);
            let r = drive(
                &config,
                daemon,
                forge,
                notes_remote,
                queue,
                metrics,
                trigger_tx,
                trigger_rx,
                leader,
                Some(leadership.clone()),
            )
            .await;
            if let Ok(l) = Arc::try_unwrap(leadership) {
                l.resign().await;
            }
            r
        }
    }
}

/// The pod's identity for the Lease: its name, and where its webhook port
/// answers (so followers can forward triggers to the leader).
fn identity(config: &Config) -> String {
    let name = std::env::var("POD_NAME")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| format!("lockstep-{}", std::process::id()));
    let port = config
        .webhook
        .listen
        .as_deref()
        .and_then(|l| l.rsplit_once(':'))
        .map(|(_, p)| p.to_owned());
    // Through SocketAddr, so an IPv6 pod IP gets its brackets
    // (`name@[fd00::7]:8080`), as `lease::parse_holder` reads it.
    let ip = std::env::var("POD_IP")
        .ok()
        .and_then(|ip| ip.parse::<std::net::IpAddr>().ok());
    let port = port.and_then(|p| p.parse::<u16>().ok());
    match (ip, port) {
        (Some(ip), Some(port)) => crate::lease::identity(&name, SocketAddr::new(ip, port)),
        _ => name,
    }
}

fn stall_deadlines(d: Duration) -> Deadlines {
    Deadlines {
        expanding: d,
        migrating: d,
        rolling: d,
        contracting: d,
        other: d,
    }
}

/// The URL of a local repository's `origin` remote, if it has one; a
/// relative path taken from the top of its work tree, as `git push` would.
fn local_origin(repo: &std::path::Path) -> Option<String> {
    let repo = git2::Repository::open(repo).ok()?;
    let remote = repo.find_remote("origin").ok()?;
    let url = match remote.pushurl() {
        Ok(Some(u)) => u.to_owned(),
        _ => remote.url().ok()?.to_owned(),
    };
    Some(crate::git::resolve_relative(&repo, &url).unwrap_or(url))
}

fn default_cache_dir() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("lockstep")
        .join("git")
}

async fn bind(what: &'static str, addr: &str) -> Result<tokio::net::TcpListener, ServiceError> {
    let parsed: SocketAddr = addr.parse().map_err(|e| ServiceError::Listen {
        what,
        addr: addr.to_owned(),
        message: format!("not an address ({e}); expected HOST:PORT like 127.0.0.1:8080"),
    })?;
    let failed = |e: std::io::Error| ServiceError::Listen {
        what,
        addr: addr.to_owned(),
        message: e.to_string(),
    };
    let socket = if parsed.is_ipv4() {
        tokio::net::TcpSocket::new_v4()
    } else {
        tokio::net::TcpSocket::new_v6()
    }
    .map_err(failed)?;
    socket.set_reuseaddr(true).map_err(failed)?;
    socket.bind(parsed).map_err(failed)?;
    // `TcpListener::bind` asks for a queue of 128, like the standard
    // library. A burst past that is dropped by the kernel, each client
    // retrying its handshake a second or more later, so a flood of 2,000
    // took 8-13 s to connect (`tests/receiver_abuse.rs`). With a long queue
    // the burst waits and is answered at once, 503 past
    // `Limits::max_connections`. The kernel caps the queue at
    // `net.core.somaxconn`; Go's listeners (Flux's receiver among them) ask
    // for that cap too.
    socket.listen(LISTEN_BACKLOG).map_err(failed)
}

/// Connections the kernel may queue before `accept` (see `bind`).
const LISTEN_BACKLOG: u32 = 4096;

#[allow(clippy::too_many_arguments)]
async fn drive<C: Cluster + 'static, R: Repo + 'static>(
    config: &Config,
    mut daemon: Daemon<C, R>,
    forge: Arc<AnyForge>,
    notes_remote: Option<crate::forge::notes::NotesRemote>,
    queue: StatusQueue,
    metrics: Arc<Metrics>,
    trigger_tx: mpsc::Sender<()>,
    trigger_rx: mpsc::Receiver<()>,
    leader: watch::Receiver<bool>,
    leadership: Option<Arc<crate::lease::Leadership>>,
) -> Result<Summary, ServiceError> {
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut servers = Vec::new();
    if let Some(addr) = &config.webhook.listen {
        let listener = bind("webhook listener", addr).await?;
        let secrets = |f: &Option<PathBuf>| f.as_deref().map(Secret::from_file).transpose();
        let wh = crate::webhook::WebhookConfig {
            github: secrets(&config.webhook.github_secret_file)?,
            gitlab: secrets(&config.webhook.gitlab_secret_file)?,
            gitea: secrets(&config.webhook.gitea_secret_file)?,
            ..Default::default()
        };
        let (tx, mut rx) = mpsc::channel(64);
        let tt = trigger_tx.clone();
        tokio::spawn(async move {
            while let Some(t) = rx.recv().await {
                // The receiver logged it (once, the delivery id cut short).
                let _: crate::webhook::Trigger = t;
                let _ = tt.try_send(());
            }
        });
        // The checks before a body is read come first, for a follower's
        // forwarding as for the receiver.
        let app = crate::webhook::admitted(
            crate::forward::leader_only(
                crate::webhook::router(wh.clone(), tx),
                leadership.clone(),
                wh.clone(),
            ),
            &wh,
        );
        tracing::info!(%addr, "webhook receiver listening");
        servers.push(tokio::spawn(serve(listener, app, stop_rx.clone())));
    }
    if let Some(addr) = &config.server.listen {
        let listener = bind("metrics listener", addr).await?;
        tracing::info!(%addr, "health and metrics listening");
        servers.push(tokio::spawn(serve(
            listener,
            crate::metrics::router(metrics.clone()),
            stop_rx.clone(),
        )));
    }
    if let Some(addr) = &config.ui.listen {
        let listener = bind("dashboard listener", addr).await?;
        let loopback = listener.local_addr().is_ok_and(|a| a.ip().is_loopback());
        let auth = crate::ui::Auth {
            loopback,
            token: config
                .ui
                .token_file
                .as_deref()
                .map(Secret::from_file)
                .transpose()?,
            basic: config
                .ui
                .basic_auth_file
                .as_deref()
                // One `user:password` line, at start and whenever the
                // file changes (`Secret::user_password_file`).
                .map(Secret::user_password_file)
                .transpose()?,
        };
        let (publisher, snapshots) =
            crate::ui::Publisher::new(&config.cluster.name, config.ui.commit_url.clone());
        daemon.set_ui(publisher);
        tracing::info!(%addr, auth = auth.token.is_some() || auth.basic.is_some(), "dashboard listening");
        servers.push(tokio::spawn(serve(
            listener,
            crate::ui::router(snapshots, auth),
            stop_rx.clone(),
        )));
    }
    let policy = RetryPolicy::default();
    let delivery = (!daemon_until_idle(&daemon)).then(|| {
        tokio::spawn(daemon::deliver_forever(
            queue.clone(),
            forge.clone(),
            metrics.clone(),
            policy.clone(),
            notes_remote.clone(),
            leader.clone(),
        ))
    });
    drop(trigger_tx);
    let leading = leader.clone();
    let last = daemon.run(trigger_rx, leader, shutdown_signal()).await;
    let needs_person = daemon.needs_person();
    tracing::info!("stopping: delivering queued statuses");
    if let Some(d) = delivery {
        d.abort();
        let _ = d.await;
    }
    // What a delivery held when it was stopped goes out with the rest; a
    // process that no longer leads says nothing: the leader does.
    queue.restore_in_flight().await;
    if !*leading.borrow() {
        queue.clear().await;
    }
    // Whatever is queued goes out now (bounded: the host may be down).
    // Statuses the host refuses outright (a bad token, a wrong repository)
    // were not delivered either.
    let rejected = tokio::time::timeout(Duration::from_secs(20), async {
        let t = std::time::Instant::now();
        let r = queue.drain(&*forge, &policy).await;
        daemon::record_drain(&metrics, &r, t.elapsed());
        r.rejected.len()
    })
    .await
    .unwrap_or(0);
    if let Some(remote) = &notes_remote {
        daemon::push_notes_to(&forge, remote).await;
    }
    let _ = stop_tx.send(true);
    for s in servers {
        let _ = s.await;
    }
    Ok(Summary {
        last,
        undelivered: queue.len().await + rejected,
        needs_person,
        metrics: metrics.encode(),
    })
}

fn daemon_until_idle<C: Cluster + 'static, R: Repo + 'static>(d: &Daemon<C, R>) -> bool {
    d.until_idle()
}

async fn serve(listener: tokio::net::TcpListener, app: axum::Router, stop: watch::Receiver<bool>) {
    crate::server::serve(listener, app, crate::server::Limits::default(), stop).await;
}

/// SIGTERM (Kubernetes) or Ctrl-C. The handlers are installed when this is
/// called, not when the future is first polled: the loop first polls it after
/// its first pass, and until then a signal's default action would kill the
/// process (a pod stopped right after it turned ready) with statuses queued.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    let (term, int) = {
        use tokio::signal::unix::{SignalKind, signal};
        (
            signal(SignalKind::terminate()).ok(),
            signal(SignalKind::interrupt()).ok(),
        )
    };
    async move {
        #[cfg(unix)]
        {
            async fn recv(s: Option<tokio::signal::unix::Signal>) {
                match s {
                    Some(mut s) => {
                        s.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            }
            tokio::select! {
                _ = recv(term) => {}
                _ = recv(int) => {}
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
        tracing::info!("shutdown signal received");
    }
}

/// Logs to stderr as the configuration says; text logs escape every
/// field ([`crate::escape::LogFields`]). A second call does nothing.
pub fn init_logging(log: &crate::config::LogConfig) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_new(&log.level).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // A log line that cannot be written (the reader of stderr went away)
        // is dropped: reporting it on that same stderr panicked the daemon.
        .log_internal_errors(false);
    let _ = match log.format {
        crate::config::LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .try_init(),
        // Text logs escape every field: a ref or summary from Git stays on its line.
        crate::config::LogFormat::Text => builder
            .fmt_fields(crate::escape::LogFields)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init(),
    };
}
