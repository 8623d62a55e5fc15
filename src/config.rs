//! `lockstep run`'s configuration: a YAML file (optional), then environment
//! and flags on top (the binary merges those). The file's JSON Schema is
//! generated from these types (`lockstep config-schema`) and kept in
//! `plans/lockstep-config.schema.json`; a test fails when the two drift.
//!
//! Secrets never appear here, only the files or variables that hold them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use thiserror::Error;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(title = "lockstep run configuration")]
pub struct Config {
    #[serde(default)]
    pub source: SourceConfig,
    #[serde(default)]
    pub cluster: ClusterConfig,
    #[serde(default)]
    pub report: ReportConfig,
    #[serde(default)]
    pub webhook: WebhookConfigFile,
    #[serde(default)]
    pub server: ServerConfig,
    #[serde(default)]
    pub leader_election: LeaderElectionConfig,
    #[serde(default)]
    pub log: LogConfig,
    #[serde(default)]
    pub plans: PlansConfig,
    #[serde(default)]
    pub trust: TrustConfig,
    #[serde(default)]
    pub ui: UiConfig,
}

/// The read-only dashboard (`docs/ui.md`): off unless `listen` is set.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UiConfig {
    /// Address of the dashboard and its JSON API, `/api/v1/...` (off when
    /// absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
    /// A file holding the bearer token every request must present
    /// (`Authorization: Bearer TOKEN`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
    /// A file holding `user:password` for HTTP basic auth (what a browser
    /// asks for). With both files, either is accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic_auth_file: Option<PathBuf>,
    /// A link to each commit on the Git host, `{sha}` standing for the
    /// commit (`https://github.com/org/fleet/commit/{sha}`); only http(s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit_url: Option<String>,
}

/// Whose signatures make a commit trusted (`docs/gate.md`, "Signed
/// commits"). With neither set, commits are judged on their content alone;
/// with either, every judged commit (branch and pull requests) must carry a
/// signature by a key trusted for its committer at its time.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TrustConfig {
    /// SSH keys in git's allowed-signers format (`gpg.ssh.allowedSignersFile`):
    /// `PRINCIPALS [OPTIONS] KEYTYPE BASE64KEY`; the principals match the
    /// committer's email.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_signers_file: Option<PathBuf>,
    /// A directory of armored OpenPGP public keys (`*.asc`); a key's user
    /// IDs must hold the committer's email.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trusted_keys_dir: Option<PathBuf>,
}

/// How upgrade plans write their hop commits.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PlansConfig {
    #[serde(default = "default_author_name")]
    pub author_name: String,
    #[serde(default = "default_author_email")]
    pub author_email: String,
    /// An OpenSSH private key: plan commits are signed with it (git's SSH
    /// signature format).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signing_key_file: Option<PathBuf>,
}

impl Default for PlansConfig {
    fn default() -> Self {
        Self {
            author_name: default_author_name(),
            author_email: default_author_email(),
            signing_key_file: None,
        }
    }
}

fn default_author_name() -> String {
    "lockstep".into()
}
fn default_author_email() -> String {
    "lockstep@localhost".into()
}

/// Where the fleet repository comes from: a local path or a remote URL.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SourceConfig {
    /// A local repository (work tree or bare); watched for changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo: Option<PathBuf>,
    /// A remote repository (https:// or ssh://), cloned into `cacheDir`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The watched branch.
    #[serde(default = "default_branch")]
    pub branch: String,
    /// Only manifests under these paths are judged and applied.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
    /// Where remote repositories are cloned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_dir: Option<PathBuf>,
    /// HTTPS token for the remote (a file holding it); plan commits and
    /// proposal branches are pushed with it too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
    /// User name sent with the token (GitHub: x-access-token, GitLab: oauth2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_user: Option<String>,
    /// SSH private key for ssh:// remotes (fetches and plan pushes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_key_file: Option<PathBuf>,
    /// OpenSSH known_hosts for ssh:// remotes (required: ssh fails closed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub known_hosts_file: Option<PathBuf>,
    /// How often to look for new commits (webhooks and the local watcher
    /// only make it sooner).
    #[serde(default = "default_poll")]
    #[schemars(schema_with = "lockstep_core::duration::schema")]
    pub poll_interval: String,
    /// Judge pull/merge request heads and post their status before merge.
    #[serde(default = "yes")]
    pub pull_requests: bool,
    /// Pull requests reach the branch commit by commit (merged by rebase or
    /// fast-forward): judge them so. By default a pull request is also
    /// judged as the one change a merge commit or a squash makes of it, and
    /// a chain of hops in it is refused on its head.
    #[serde(default)]
    pub lands_commit_by_commit: bool,
    /// Judge from this commit on (exclusive); default: the whole first-parent history.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
}

impl Default for SourceConfig {
    fn default() -> Self {
        Self {
            repo: None,
            url: None,
            branch: default_branch(),
            paths: Vec::new(),
            cache_dir: None,
            token_file: None,
            token_user: None,
            ssh_key_file: None,
            known_hosts_file: None,
            poll_interval: default_poll(),
            pull_requests: true,
            lands_commit_by_commit: false,
            since: None,
        }
    }
}

#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum ClusterMode {
    /// The in-process simulated C5C3 operator (the embedded default).
    #[default]
    Sim,
    /// A real cluster: in-cluster service account or a kubeconfig.
    Kube,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterConfig {
    #[serde(default)]
    pub mode: ClusterMode,
    /// Kubeconfig file (kube mode); default: in-cluster, then $KUBECONFIG.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig: Option<PathBuf>,
    /// This cluster's name in status contexts (`lockstep/<name>`).
    #[serde(default = "default_cluster_name")]
    pub name: String,
    /// How long a phase may show no progress before it is reported stalled.
    #[serde(default = "default_stall")]
    #[schemars(schema_with = "lockstep_core::duration::schema")]
    pub stall_after: String,
    /// Re-runs of a failed phase Job per hop before lockstep reports.
    #[serde(default = "default_budget")]
    pub repair_budget: u32,
    /// Sim mode only: trouble the simulated operator injects, in the
    /// grammar of `lockstep rehearse --fault` (`nova:expand:fail=2`,
    /// `prod-glance:db-down=15m`), so a run and a rehearsal can be compared.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<String>,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            mode: ClusterMode::Sim,
            kubeconfig: None,
            name: default_cluster_name(),
            stall_after: default_stall(),
            repair_budget: default_budget(),
            faults: Vec::new(),
        }
    }
}

#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum ReportKind {
    /// git notes under refs/notes/lockstep in the repository (the embedded default).
    #[default]
    Notes,
    Github,
    Gitlab,
    // Forgejo speaks Gitea's API: `--report forgejo` on the command line.
    #[value(alias = "forgejo")]
    Gitea,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReportConfig {
    #[serde(default)]
    pub kind: ReportKind,
    /// API base (GitHub) or server URL (GitLab, Gitea).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// owner/name (GitHub, Gitea) or project path (GitLab); default: from the source URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo: Option<String>,
    /// File holding the API token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
    /// Environment variable holding the API token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_env: Option<String>,
    /// Link on every status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_url: Option<String>,
    /// Notes: push refs/notes/lockstep to this remote after writing. Empty
    /// or `origin` with a remote source: the source's URL and credentials.
    /// A push refused because another cluster pushed first is merged by
    /// context and tried again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push_notes: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WebhookConfigFile {
    /// Address of the webhook receiver (off when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub github_secret_file: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gitlab_secret_file: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gitea_secret_file: Option<PathBuf>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServerConfig {
    /// Address of /healthz, /readyz and /metrics (off when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LeaderElectionConfig {
    /// Elect a leader on a Lease (kube mode, several replicas).
    #[serde(default)]
    pub enabled: bool,
    /// The Lease's namespace; default: $POD_NAMESPACE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default = "default_lease_name")]
    pub lease_name: String,
    #[serde(default = "default_lease_duration")]
    #[schemars(schema_with = "lockstep_core::duration::schema")]
    pub lease_duration: String,
}

impl Default for LeaderElectionConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            namespace: None,
            lease_name: default_lease_name(),
            lease_duration: default_lease_duration(),
        }
    }
}

#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LogConfig {
    #[serde(default)]
    pub format: LogFormat,
    /// A tracing filter: `info`, `lockstep=debug`, ...
    #[serde(default = "default_level")]
    pub level: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            format: LogFormat::Text,
            level: default_level(),
        }
    }
}

fn default_branch() -> String {
    "main".into()
}
fn default_poll() -> String {
    "30s".into()
}
fn yes() -> bool {
    true
}
fn default_cluster_name() -> String {
    "default".into()
}
fn default_stall() -> String {
    "30m".into()
}
fn default_budget() -> u32 {
    3
}
fn default_lease_name() -> String {
    "lockstep".into()
}
fn default_lease_duration() -> String {
    "15s".into()
}
fn default_level() -> String {
    "info".into()
}

#[derive(Debug, Error)]
pub enum ConfigError {
    /// Unreadable, over [`crate::yaml::CONFIG_MAX_BYTES`], or not UTF-8.
    #[error("{path}: {reason}")]
    Read {
        path: PathBuf,
        reason: crate::yaml::ReadError,
    },
    #[error("{path}:{line}: {message}")]
    Parse {
        path: PathBuf,
        line: u32,
        message: String,
    },
    #[error("{field}: {message}")]
    Invalid {
        field: &'static str,
        message: String,
    },
}

/// What to pass when no source is given.
const NO_SOURCE: &str = "no source: pass --repo PATH or --url URL (or set source.repo or source.url in the config file)";
const NO_SOURCE_KUBE: &str = "cluster mode kube needs a source: pass --repo PATH or --url URL (or set source.repo or source.url in the config file); the embedded example fleet is for sim mode only";

/// Where `lockstep run` gets its fleet ([`Config::source_choice`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceChoice {
    /// `source.repo` or `source.url`.
    Configured,
    /// None given, `sim` mode: the embedded example fleet's scripted history.
    Example,
}

impl Config {
    /// Reads a YAML file of at most [`crate::yaml::CONFIG_MAX_BYTES`],
    /// never reading past that (`--config /dev/zero` fails at once). Errors
    /// name the file and line.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = crate::file::read_text(path, &crate::yaml::Limit::CONFIG).map_err(|reason| {
            ConfigError::Read {
                path: path.to_owned(),
                reason,
            }
        })?;
        Self::from_yaml(&text, path)
    }

    /// Parses the text of a configuration file; `path` only names it in the
    /// error. What [`Config::load`] does once the file is read (and what
    /// `fuzz/` drives).
    pub fn from_yaml(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let limit = crate::yaml::Limit::CONFIG;
        if text.len() > limit.bytes {
            return Err(ConfigError::Read {
                path: path.to_owned(),
                reason: crate::yaml::ReadError::TooLarge { limit },
            });
        }
        serde_saphyr::from_str_with_options(text, crate::yaml::options(&limit, text.len())).map_err(
            |e| {
                let d = crate::yaml::describe(&e, &limit);
                ConfigError::Parse {
                    path: path.to_owned(),
                    line: d.line,
                    message: if d.over_limit {
                        format!("the file {}", d.message)
                    } else {
                        d.message
                    },
                }
            },
        )
    }

    /// Checks what types cannot: exactly one source, durations that parse,
    /// the fields a host needs.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |field, message: &str| ConfigError::Invalid {
            field,
            message: message.to_owned(),
        };
        self.source_choice()?;
        if self.source.repo.is_none() && self.source.url.is_none() {
            return Err(bad("source", NO_SOURCE));
        }
        if let Some(u) = &self.source.url
            && !(u.starts_with("https://")
                || u.starts_with("http://")
                || u.starts_with("ssh://")
                || u.starts_with("git://")
                || u.starts_with("file://"))
        {
            return Err(bad(
                "source.url",
                "expected https://, ssh://, git:// or file:// (scp-like user@host:path: write ssh://user@host/path)",
            ));
        }
        for (field, v) in [
            ("source.pollInterval", &self.source.poll_interval),
            ("cluster.stallAfter", &self.cluster.stall_after),
            (
                "leaderElection.leaseDuration",
                &self.leader_election.lease_duration,
            ),
        ] {
            lockstep_core::duration::positive(v)
                .map_err(|_| bad(field, "expected a duration like 90s, 15m or 1h"))?;
        }
        if let Err(why) = lockstep_core::status::valid_cluster_name(&self.cluster.name) {
            return Err(bad("cluster.name", &why));
        }
        // Checked at start: a host refuses every status carrying one it
        // cannot take (GitLab: not http(s), or over 255 characters).
        if let Some(u) = &self.report.target_url
            && (!(u.starts_with("https://") || u.starts_with("http://"))
                || u.len() > 255
                || u.chars().any(|c| c.is_control() || c.is_whitespace()))
        {
            return Err(bad(
                "report.targetUrl (--target-url)",
                "expected an http:// or https:// URL of at most 255 characters, without spaces",
            ));
        }
        // Addresses are checked here, with the key (and flag) named, not
        // when the listener is opened after the first pass.
        for (field, addr) in [
            ("webhook.listen (--listen)", &self.webhook.listen),
            ("server.listen (--metrics-listen)", &self.server.listen),
            ("ui.listen (--ui-listen)", &self.ui.listen),
        ] {
            if let Some(a) = addr
                && a.parse::<std::net::SocketAddr>().is_err()
            {
                return Err(bad(
                    field,
                    "not an address; expected IP:PORT, like 127.0.0.1:8080 or [::1]:8080",
                ));
            }
        }
        // The dashboard links only http(s): another value would be dropped
        // from every page without a word.
        if let Some(u) = &self.ui.commit_url
            && !(u.starts_with("https://") || u.starts_with("http://"))
        {
            return Err(bad(
                "ui.commitUrl (--ui-commit-url)",
                "expected an https:// (or http://) URL with {sha} for the commit, like https://github.com/org/fleet/commit/{sha}",
            ));
        }
        if self.report.kind == ReportKind::Gitea && self.report.url.is_none() {
            return Err(bad("report.url", "Gitea/Forgejo needs the server's URL"));
        }
        for f in &self.cluster.faults {
            crate::sim::parse_fault(f).map_err(|e| bad("cluster.faults", &e.to_string()))?;
        }
        if !self.cluster.faults.is_empty() && self.cluster.mode != ClusterMode::Sim {
            return Err(bad(
                "cluster.faults",
                "faults are injected into the simulated operator: cluster.mode sim only",
            ));
        }
        if self.leader_election.enabled && self.cluster.mode != ClusterMode::Kube {
            return Err(bad(
                "leaderElection.enabled",
                "leader election needs cluster.mode: kube",
            ));
        }
        Ok(())
    }

    /// Where `lockstep run` gets its fleet: the configured source, or, in
    /// `sim` mode with none given, the embedded example fleet. `kube` mode
    /// without a source is a usage error (the example fleet must never reach
    /// a real cluster); so are both a repo and a url, or an empty one. Reads
    /// nothing and calls nothing: entry points ask this before any cluster
    /// client exists.
    pub fn source_choice(&self) -> Result<SourceChoice, ConfigError> {
        let bad = |field, message: &str| ConfigError::Invalid {
            field,
            message: message.to_owned(),
        };
        if self
            .source
            .repo
            .as_ref()
            .is_some_and(|r| r.as_os_str().is_empty())
        {
            return Err(bad("source.repo", "is empty; give a local repository path"));
        }
        if self.source.url.as_ref().is_some_and(|u| u.is_empty()) {
            return Err(bad("source.url", "is empty; give the repository's URL"));
        }
        match (&self.source.repo, &self.source.url, self.cluster.mode) {
            (Some(_), Some(_), _) => Err(bad("source", "give repo or url, not both")),
            (None, None, ClusterMode::Kube) => Err(bad("source", NO_SOURCE_KUBE)),
            (None, None, ClusterMode::Sim) => Ok(SourceChoice::Example),
            _ => Ok(SourceChoice::Configured),
        }
    }

    pub fn poll_interval(&self) -> Duration {
        lockstep_core::duration::positive(&self.source.poll_interval)
            .unwrap_or(Duration::from_secs(30))
    }
}

/// `90s`, `15m`, `1h`, longer than zero: [`lockstep_core::duration::positive`],
/// kept under this name for callers outside the crate (the fuzz targets).
pub fn duration(s: &str) -> Option<Duration> {
    lockstep_core::duration::positive(s).ok()
}

/// What the command line and the environment set on top of the file
/// (`lockstep run`'s flags; each variable is named by its flag's help). A
/// field left `None` (or empty, or `false`) keeps the file's value.
#[derive(Clone, Debug, Default, PartialEq, clap::Args)]
pub struct Overrides {
    /// A local fleet repository to watch.
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_REPO",
        value_name = "PATH",
        conflicts_with = "url"
    )]
    pub repo: Option<PathBuf>,
    /// A remote fleet repository (https://, ssh://, git://).
    #[arg(long, hide_env_values = true, env = "LOCKSTEP_URL")]
    pub url: Option<String>,
    #[arg(long, hide_env_values = true, env = "LOCKSTEP_BRANCH")]
    pub branch: Option<String>,
    /// Only manifests under this path (repeatable).
    #[arg(long = "path", value_name = "PREFIX")]
    pub paths: Vec<String>,
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_CACHE_DIR",
        value_name = "DIR"
    )]
    pub cache_dir: Option<PathBuf>,
    /// HTTPS token for the remote repository (a file).
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_GIT_TOKEN_FILE",
        value_name = "FILE"
    )]
    pub git_token_file: Option<PathBuf>,
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_SSH_KEY_FILE",
        value_name = "FILE"
    )]
    pub ssh_key_file: Option<PathBuf>,
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_KNOWN_HOSTS_FILE",
        value_name = "FILE"
    )]
    pub known_hosts_file: Option<PathBuf>,
    /// Poll interval (90s, 5m).
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_POLL",
        value_name = "DURATION"
    )]
    pub poll: Option<String>,
    /// Judge only commits after this one.
    #[arg(long, value_name = "REV")]
    pub since: Option<String>,
    /// sim (the simulated operator, default) or kube. kube needs a source
    /// (--repo or --url): the example fleet is for sim only.
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_CLUSTER_MODE",
        value_name = "MODE",
        value_enum
    )]
    pub cluster_mode: Option<ClusterMode>,
    #[arg(long, hide_env_values = true, env = "KUBECONFIG", value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// This cluster's name in status contexts (lockstep/<name>).
    #[arg(long, hide_env_values = true, env = "LOCKSTEP_CLUSTER")]
    pub cluster_name: Option<String>,
    /// Where statuses go: notes (default), github, gitlab, gitea (or forgejo).
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_REPORT",
        value_name = "HOST",
        value_enum
    )]
    pub report: Option<ReportKind>,
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_FORGE_URL",
        value_name = "URL"
    )]
    pub forge_url: Option<String>,
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_FORGE_REPO",
        value_name = "REPO"
    )]
    pub forge_repo: Option<String>,
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_TOKEN_FILE",
        value_name = "FILE"
    )]
    pub token_file: Option<PathBuf>,
    #[arg(long, value_name = "VAR")]
    pub token_env: Option<String>,
    #[arg(long, value_name = "URL")]
    pub target_url: Option<String>,
    /// With notes: push refs/notes/lockstep after each delivery and when stopping (to REMOTE, or the branch's remote).
    #[arg(long, value_name = "REMOTE", num_args = 0..=1, default_missing_value = "")]
    pub push_notes: Option<String>,
    /// Webhook receiver address (HOST:PORT).
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_LISTEN",
        value_name = "ADDR"
    )]
    pub listen: Option<String>,
    /// /healthz, /readyz and /metrics address (HOST:PORT).
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_METRICS_LISTEN",
        value_name = "ADDR"
    )]
    pub metrics_listen: Option<String>,
    /// The read-only dashboard's address (HOST:PORT; docs/ui.md).
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_UI_LISTEN",
        value_name = "ADDR"
    )]
    pub ui_listen: Option<String>,
    /// A file with the bearer token the dashboard asks for.
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_UI_TOKEN_FILE",
        value_name = "FILE"
    )]
    pub ui_token_file: Option<PathBuf>,
    /// A file with `user:password` for the dashboard's basic auth.
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_UI_BASIC_AUTH_FILE",
        value_name = "FILE"
    )]
    pub ui_basic_auth_file: Option<PathBuf>,
    /// The dashboard's link to a commit, `{sha}` standing for it.
    #[arg(long, value_name = "URL")]
    pub ui_commit_url: Option<String>,
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_GITHUB_WEBHOOK_SECRET_FILE",
        value_name = "FILE"
    )]
    pub github_webhook_secret_file: Option<PathBuf>,
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_GITLAB_WEBHOOK_SECRET_FILE",
        value_name = "FILE"
    )]
    pub gitlab_webhook_secret_file: Option<PathBuf>,
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_GITEA_WEBHOOK_SECRET_FILE",
        value_name = "FILE"
    )]
    pub gitea_webhook_secret_file: Option<PathBuf>,
    /// Elect a leader on a Lease (several replicas, kube mode).
    #[arg(long)]
    pub leader_election: bool,
    /// text or json.
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_LOG_FORMAT",
        value_name = "FORMAT",
        value_enum
    )]
    pub log_format: Option<LogFormat>,
    /// A tracing filter (info, lockstep=debug).
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_LOG",
        value_name = "FILTER"
    )]
    pub log_level: Option<String>,
    /// Sim mode: inject trouble into the simulated operator, as `rehearse
    /// --fault` does (repeatable).
    #[arg(long = "fault", value_name = "SPEC")]
    pub faults: Vec<String>,
    /// Refuse commits not signed by an SSH key this allowed-signers file
    /// trusts (as `check --allowed-signers`).
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_ALLOWED_SIGNERS",
        value_name = "FILE"
    )]
    pub allowed_signers: Option<PathBuf>,
    /// Refuse commits not signed by an OpenPGP key of this directory (as
    /// `check --trusted-keys`).
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_TRUSTED_KEYS",
        value_name = "DIR"
    )]
    pub trusted_keys: Option<PathBuf>,
}

impl Config {
    /// This configuration with `o` on top: what is given replaces the
    /// file's value; a `repo` drops the file's `url` and the other way
    /// round (one source); a list given replaces the file's list, an empty
    /// one keeps it; `leader_election` can only turn election on.
    pub fn with_overrides(mut self, o: &Overrides) -> Config {
        fn set<T: Clone>(slot: &mut T, v: &Option<T>) {
            if let Some(v) = v {
                *slot = v.clone();
            }
        }
        fn set_opt<T: Clone>(slot: &mut Option<T>, v: &Option<T>) {
            if v.is_some() {
                slot.clone_from(v);
            }
        }
        let c = &mut self;
        if o.repo.is_some() {
            c.source.repo.clone_from(&o.repo);
            c.source.url = None;
        }
        if o.url.is_some() {
            c.source.url.clone_from(&o.url);
            c.source.repo = None;
        }
        set(&mut c.source.branch, &o.branch);
        if !o.paths.is_empty() {
            c.source.paths.clone_from(&o.paths);
        }
        set_opt(&mut c.source.cache_dir, &o.cache_dir);
        set_opt(&mut c.source.token_file, &o.git_token_file);
        set_opt(&mut c.source.ssh_key_file, &o.ssh_key_file);
        set_opt(&mut c.source.known_hosts_file, &o.known_hosts_file);
        set(&mut c.source.poll_interval, &o.poll);
        set_opt(&mut c.source.since, &o.since);
        set(&mut c.cluster.mode, &o.cluster_mode);
        if !o.faults.is_empty() {
            c.cluster.faults.clone_from(&o.faults);
        }
        set_opt(&mut c.cluster.kubeconfig, &o.kubeconfig);
        set(&mut c.cluster.name, &o.cluster_name);
        set(&mut c.report.kind, &o.report);
        set_opt(&mut c.report.url, &o.forge_url);
        set_opt(&mut c.report.repo, &o.forge_repo);
        set_opt(&mut c.report.token_file, &o.token_file);
        set_opt(&mut c.report.token_env, &o.token_env);
        set_opt(&mut c.report.target_url, &o.target_url);
        set_opt(&mut c.report.push_notes, &o.push_notes);
        set_opt(&mut c.webhook.listen, &o.listen);
        set_opt(&mut c.server.listen, &o.metrics_listen);
        set_opt(&mut c.ui.listen, &o.ui_listen);
        set_opt(&mut c.ui.token_file, &o.ui_token_file);
        set_opt(&mut c.ui.basic_auth_file, &o.ui_basic_auth_file);
        set_opt(&mut c.ui.commit_url, &o.ui_commit_url);
        set_opt(
            &mut c.webhook.github_secret_file,
            &o.github_webhook_secret_file,
        );
        set_opt(
            &mut c.webhook.gitlab_secret_file,
            &o.gitlab_webhook_secret_file,
        );
        set_opt(
            &mut c.webhook.gitea_secret_file,
            &o.gitea_webhook_secret_file,
        );
        if o.leader_election {
            c.leader_election.enabled = true;
        }
        set(&mut c.log.format, &o.log_format);
        set(&mut c.log.level, &o.log_level);
        set_opt(&mut c.trust.allowed_signers_file, &o.allowed_signers);
        set_opt(&mut c.trust.trusted_keys_dir, &o.trusted_keys);
        self
    }
}

/// The JSON Schema of the configuration file, as committed under `plans/`.
pub fn schema_json() -> String {
    let schema = schemars::schema_for!(Config);
    let mut s = serde_json::to_string_pretty(&schema).unwrap_or_default();
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(yaml: &str) -> Config {
        Config::from_yaml(yaml, Path::new("lockstep.yaml")).unwrap()
    }

    #[test]
    fn a_flag_overrides_the_file_and_absent_flags_keep_it() {
        let c = file(
            "source:\n  repo: /srv/fleet\n  branch: prod\n  pollInterval: 5m\ncluster:\n  name: east\nlog:\n  level: debug\n",
        );
        let o = Overrides {
            branch: Some("main".into()),
            cluster_name: Some("west".into()),
            report: Some(ReportKind::Gitea),
            ..Overrides::default()
        };
        let c = c.with_overrides(&o);
        assert_eq!(c.source.branch, "main");
        assert_eq!(c.cluster.name, "west");
        assert_eq!(c.report.kind, ReportKind::Gitea);
        // Not given: the file's.
        assert_eq!(c.source.poll_interval, "5m");
        assert_eq!(c.log.level, "debug");
        assert_eq!(c.source.repo, Some(PathBuf::from("/srv/fleet")));
        // No overrides at all: the file unchanged.
        let f = file("source:\n  repo: /srv/fleet\n");
        assert_eq!(f.clone().with_overrides(&Overrides::default()), f);
    }

    #[test]
    fn a_repo_flag_replaces_the_files_url_and_the_other_way_round() {
        let remote = file("source:\n  url: https://git.example/fleet.git\n");
        let c = remote.with_overrides(&Overrides {
            repo: Some("/srv/fleet".into()),
            ..Overrides::default()
        });
        assert_eq!(c.source.repo, Some(PathBuf::from("/srv/fleet")));
        assert_eq!(c.source.url, None);
        c.validate().unwrap();
        let local = file("source:\n  repo: /srv/fleet\n");
        let c = local.with_overrides(&Overrides {
            url: Some("https://git.example/fleet.git".into()),
            ..Overrides::default()
        });
        assert_eq!(
            c.source.url.as_deref(),
            Some("https://git.example/fleet.git")
        );
        assert_eq!(c.source.repo, None);
    }

    #[test]
    fn lists_replace_the_files_only_when_given_and_election_only_turns_on() {
        let c = file(
            "source:\n  repo: /srv/fleet\n  paths: [clusters/prod]\ncluster:\n  faults: ['nova:expand:fail=1']\nleaderElection:\n  enabled: true\n",
        );
        let kept = c.clone().with_overrides(&Overrides::default());
        assert_eq!(kept.source.paths, vec!["clusters/prod".to_owned()]);
        assert_eq!(kept.cluster.faults, vec!["nova:expand:fail=1".to_owned()]);
        // `--leader-election` absent is false: it cannot turn the file's off.
        assert!(kept.leader_election.enabled);
        let replaced = c.with_overrides(&Overrides {
            paths: vec!["standalone".into(), "clusters/dev".into()],
            faults: vec!["glance:db-down=5m".into()],
            ..Overrides::default()
        });
        assert_eq!(replaced.source.paths, vec!["standalone", "clusters/dev"]);
        assert_eq!(replaced.cluster.faults, vec!["glance:db-down=5m"]);
        let on = file("source:\n  repo: x\n").with_overrides(&Overrides {
            leader_election: true,
            push_notes: Some(String::new()),
            ..Overrides::default()
        });
        assert!(on.leader_election.enabled);
        // `--push-notes` without a remote: present, and empty.
        assert_eq!(on.report.push_notes.as_deref(), Some(""));
    }

    #[test]
    fn a_minimal_file_gets_the_defaults() {
        let c: Config = serde_saphyr::from_str("source:\n  repo: /srv/fleet\n").unwrap();
        assert_eq!(c.source.branch, "main");
        assert_eq!(c.cluster.mode, ClusterMode::Sim);
        assert_eq!(c.report.kind, ReportKind::Notes);
        assert_eq!(c.poll_interval(), Duration::from_secs(30));
        c.validate().unwrap();
    }

    #[test]
    fn unknown_fields_and_bad_values_are_refused_by_name() {
        let e = serde_saphyr::from_str::<Config>("source:\n  repo: x\n  brnch: main\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("brnch"), "{e}");
        let c: Config =
            serde_saphyr::from_str("source:\n  repo: x\n  pollInterval: soon\n").unwrap();
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("source.pollInterval"), "{e}");
        let c: Config = serde_saphyr::from_str("source:\n  url: git@host:o/r.git\n").unwrap();
        assert!(c.validate().unwrap_err().to_string().contains("ssh://"));
        let c: Config = serde_saphyr::from_str("source: {}\n").unwrap();
        assert!(c.validate().is_err());
        let c: Config =
            serde_saphyr::from_str("source: {repo: x}\nleaderElection: {enabled: true}\n").unwrap();
        assert!(c.validate().unwrap_err().to_string().contains("kube"));
        // A cluster name is one segment of a context: a '/' let cluster
        // `eu/compute/nova` write over cluster `eu`'s Nova line.
        for bad in [
            "eu/compute/nova",
            "eu west",
            "",
            "eu\\u001b",
            &"x".repeat(64),
        ] {
            let c: Config = serde_saphyr::from_str(&format!(
                "source: {{repo: x}}\ncluster: {{name: \"{bad}\"}}\n"
            ))
            .unwrap();
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains("cluster.name"), "{bad:?}: {e}");
        }
        for (text, key) in [
            (
                "server: {listen: not-an-addr}",
                "server.listen (--metrics-listen)",
            ),
            (
                "webhook: {listen: \"localhost:80\"}",
                "webhook.listen (--listen)",
            ),
            ("ui: {listen: \"8081\"}", "ui.listen (--ui-listen)"),
        ] {
            let c: Config =
                serde_saphyr::from_str(&format!("source: {{repo: x}}\n{text}\n")).unwrap();
            let e = c.validate().unwrap_err().to_string();
            assert!(
                e.starts_with(key) && e.contains("not an address"),
                "{text}: {e}"
            );
        }
        for good in ["eu", "eu-de-1", "Prod_2.west"] {
            let c: Config = serde_saphyr::from_str(&format!(
                "source: {{repo: x}}\ncluster: {{name: {good}}}\n"
            ))
            .unwrap();
            c.validate().unwrap();
        }
    }

    #[test]
    fn a_commit_link_that_is_not_http_is_refused_by_name() {
        for (url, ok) in [
            ("https://github.com/org/fleet/commit/{sha}", true),
            ("http://gitea.local/org/fleet/commit/{sha}", true),
            ("javascript:alert(1)//{sha}", false),
            ("github.com/org/fleet/commit/{sha}", false),
        ] {
            let c: Config = serde_saphyr::from_str(&format!(
                "source: {{repo: /srv/fleet}}\nui: {{commitUrl: \"{url}\"}}\n"
            ))
            .unwrap();
            match c.validate() {
                Ok(()) => assert!(ok, "{url}"),
                Err(e) => {
                    assert!(!ok, "{url}: {e}");
                    assert!(
                        e.to_string().contains("ui.commitUrl (--ui-commit-url)"),
                        "{e}"
                    );
                }
            }
        }
    }

    /// Every status carries the link; a host refuses each one that carries
    /// a link it cannot take, so it is checked before the first pass.
    #[test]
    fn a_status_link_a_host_would_refuse_is_refused_at_start() {
        let long = format!("https://ci.example/{}", "x".repeat(250));
        for (url, ok) in [
            ("https://ci.example/job/1", true),
            ("http://ci.local/1", true),
            ("ci.example/job/1", false),
            ("javascript:alert(1)", false),
            ("https://ci.example/a b", false),
            (long.as_str(), false),
        ] {
            let c: Config = serde_saphyr::from_str(&format!(
                "source: {{repo: /srv/fleet}}\nreport: {{targetUrl: \"{url}\"}}\n"
            ))
            .unwrap();
            match c.validate() {
                Ok(()) => assert!(ok, "{url}"),
                Err(e) => {
                    assert!(!ok, "{url}: {e}");
                    assert!(
                        e.to_string().contains("report.targetUrl (--target-url)"),
                        "{e}"
                    );
                }
            }
        }
    }

    #[test]
    fn kube_mode_needs_a_source_and_only_sim_runs_the_example() {
        for text in [
            "cluster: {mode: kube}\n",
            "source: {}\ncluster: {mode: kube}\n",
        ] {
            let c: Config = serde_saphyr::from_str(text).unwrap();
            let e = c.source_choice().unwrap_err().to_string();
            for what in [
                "kube",
                "--repo PATH",
                "--url URL",
                "source.repo",
                "source.url",
            ] {
                assert!(e.contains(what), "{what} in {e}");
            }
            assert!(!e.contains('\n'), "one line: {e}");
            assert_eq!(c.validate().unwrap_err().to_string(), e);
        }
        let c = Config::default();
        assert_eq!(c.source_choice().unwrap(), SourceChoice::Example);
        // The library runs no example: the binary builds it and names it.
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("--repo PATH"), "{e}");
        let c: Config =
            serde_saphyr::from_str("source: {repo: /srv/fleet}\ncluster: {mode: kube}\n").unwrap();
        assert_eq!(c.source_choice().unwrap(), SourceChoice::Configured);
        c.validate().unwrap();
        let c: Config =
            serde_saphyr::from_str("source: {url: \"\"}\ncluster: {mode: kube}\n").unwrap();
        assert!(c.validate().unwrap_err().to_string().contains("source.url"));
        let c: Config =
            serde_saphyr::from_str("source: {repo: \"\"}\ncluster: {mode: sim}\n").unwrap();
        assert!(
            c.source_choice()
                .unwrap_err()
                .to_string()
                .contains("source.repo")
        );
        let c: Config = serde_saphyr::from_str("source: {repo: a, url: https://h/r}\n").unwrap();
        assert!(
            c.source_choice()
                .unwrap_err()
                .to_string()
                .contains("not both")
        );
    }

    #[test]
    fn loading_is_bounded_and_errors_are_in_plain_words() {
        let started = std::time::Instant::now();
        let e = Config::load(Path::new("/dev/zero"))
            .unwrap_err()
            .to_string();
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(
            e,
            "/dev/zero: is larger than the configuration file limit of 1 MiB; the limit is fixed: check that --config names the configuration file"
        );
        let p = Path::new("c.yaml");
        let err = |text: &str| Config::from_yaml(text, p).unwrap_err().to_string();
        assert_eq!(
            err("source: {repo: a}\nsource: {repo: b}\n"),
            "c.yaml:2: the key \"source\" appears twice in one mapping; keep one"
        );
        let e = err("source:\n  repo: x\n  brnch: main\n");
        assert!(
            e.starts_with("c.yaml:3: unknown field \"brnch\"; the fields here are: repo, url,"),
            "{e}"
        );
        assert_eq!(err("source: 7\n"), "c.yaml:1: expected a mapping");
        assert_eq!(
            err("leaderElection: {enabled: maybe}\n"),
            "c.yaml:1: expected true or false"
        );
        assert_eq!(
            err("cluster: {repairBudget: -1}\n"),
            "c.yaml:1: expected a whole number, 0 or more"
        );
        let e = err(&"x".repeat(crate::yaml::CONFIG_MAX_BYTES + 1));
        assert!(e.starts_with("c.yaml: is larger than the configuration file limit of 1 MiB"));
        for e in [e, err("source: {repo: a}\nsource: {repo: b}\n")] {
            for internal in ["DuplicateKeyPolicy", "Options", "struct ", "budget", "u32"] {
                assert!(!e.contains(internal), "{internal} in {e}");
            }
        }
    }

    #[test]
    fn the_deploy_config_map_parses() {
        let text = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/configmap.yaml"),
        )
        .unwrap();
        let cm: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
        let inner = cm["data"]["config.yaml"].as_str().unwrap();
        let c: Config = serde_saphyr::from_str(inner).unwrap();
        c.validate().unwrap();
        assert_eq!(c.cluster.mode, ClusterMode::Kube);
        assert!(c.leader_election.enabled);
    }
}
