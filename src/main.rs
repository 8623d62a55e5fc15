//! The `lockstep` command line: parses arguments, calls the library, maps
//! outcomes to exit codes (0 accepted, 1 refused, 2 usage or I/O error).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};

use lockstep::cluster::kube::KubeCluster;
use lockstep::escape::Escaped;
use lockstep::forge::delivery::{Outcome, RetryPolicy};
use lockstep::forge::{self, AnyForge, ForgeKind, ForgeSpec};
use lockstep::gate::Verdict;
use lockstep::git::GitRepo;
use lockstep::history::{CheckOptions, check};
use lockstep::repair::Retried;
use lockstep::secret::Secret;
use lockstep::{demo, live, manifest, rehearse, report};

/// mimalloc, not glibc's malloc: after the first judgement frees a large,
/// fragmented heap, glibc's `posix_memalign` (behind every tokio task)
/// spent 150-400 ms per poll sorting its free lists, and its per-thread
/// arenas kept peak RSS about 15 MiB higher (benches/daemon.rs).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "lockstep",
    version,
    about = "GitOps release gate for C5C3 OpenStack control planes: one release hop at a time, release and image together",
    after_help = "Exit codes, every subcommand: 0 done and nothing refused or failed; 1 the work was done and its answer is no (check: a commit refused; rehearse: a hop would not complete; run --until-idle: a status undelivered or a person must act; retry: nothing to retry); 2 usage error or unreadable repository, revision or file. One exception: demo exits 0 once it has run, because the refused commits it shows are the demonstration (check exits 1 on the same history)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum Output {
    Text,
    Json,
}

// Parsed once at start-up; the size difference between commands is irrelevant.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Judge every commit of BASE..HEAD (first parent, oldest first) against the release gate.
    Check {
        /// The fleet repository (a work tree or a bare repository).
        #[arg(long, default_value = ".")]
        repo: PathBuf,
        /// Starting baseline [default: HEAD's first parent; the empty tree for a root commit].
        #[arg(long)]
        base: Option<String>,
        /// Last commit to judge.
        #[arg(long, default_value = "HEAD")]
        head: String,
        /// Live state: what `kubectl get <kinds> -A -o yaml` prints.
        #[arg(long, value_name = "FILE")]
        live: Option<PathBuf>,
        /// Only judge files under this path (repeatable).
        #[arg(long = "path", value_name = "PREFIX")]
        paths: Vec<String>,
        #[arg(short, long, value_enum, default_value_t = Output::Text)]
        output: Output,
        /// Refuse manifest files larger than this (8 MiB); the YAML node and
        /// document limits grow with it.
        #[arg(long, default_value_t = manifest::DEFAULT_MAX_FILE_BYTES, value_name = "BYTES")]
        max_file_bytes: usize,
        /// Refuse a --live snapshot larger than this (64 MiB); the YAML node
        /// and document limits grow with it.
        #[arg(long, default_value_t = live::DEFAULT_MAX_LIVE_BYTES, value_name = "BYTES")]
        max_live_bytes: usize,
        /// Refuse commits not signed by an SSH key this allowed-signers
        /// file (git's gpg.ssh.allowedSignersFile format) trusts for the
        /// committer's email at the commit's time (UntrustedCommit).
        #[arg(long, value_name = "FILE")]
        allowed_signers: Option<PathBuf>,
        /// Refuse commits not signed by an OpenPGP key of this directory
        /// (armored *.asc files) with a user ID of the committer's email.
        #[arg(long, value_name = "DIR")]
        trusted_keys: Option<PathBuf>,
        #[command(flatten)]
        report: ReportArgs,
    },
    /// Run the accepted hops of BASE..HEAD through a simulated C5C3 operator
    /// (virtual time, with lockstep's own follow and repair) and print the
    /// predicted timeline: rehearse before the maintenance window.
    Rehearse {
        #[arg(long, default_value = ".")]
        repo: PathBuf,
        /// Starting baseline [default: HEAD's first parent].
        #[arg(long)]
        base: Option<String>,
        #[arg(long, default_value = "HEAD")]
        head: String,
        #[arg(long = "path", value_name = "PREFIX")]
        paths: Vec<String>,
        /// Inject trouble: OBJECT:JOB:fail=N (JOB: sync, expand, migrate,
        /// contract), OBJECT:db-down=DURATION, OBJECT:roll-stall=DURATION (repeatable).
        #[arg(long = "fault", value_name = "SPEC")]
        faults: Vec<String>,
        /// Rehearse the UpgradePlans of the branch instead: the daemon runs
        /// them on a throwaway clone in virtual time and prints the schedule.
        #[arg(long)]
        plan: bool,
        /// With --plan: the branch to rehearse on.
        #[arg(long, default_value = "main")]
        branch: String,
        /// With --plan: when the rehearsal starts (RFC 3339) [default: now].
        #[arg(long, value_name = "TIME")]
        start: Option<String>,
    },
    /// Re-run a permanently failed phase Job of an object (the forward
    /// repair lockstep does by itself for projected services).
    Retry {
        /// The object, as kind/namespace/name (e.g. nova/compute/nova).
        object: String,
        /// Kubeconfig to use [default: in-cluster, or $KUBECONFIG / ~/.kube/config].
        #[arg(long, hide_env_values = true, env = "KUBECONFIG", value_name = "FILE")]
        kubeconfig: Option<PathBuf>,
    },
    /// The continuous-sync daemon: watch the repository, judge every new
    /// commit (and pull request), apply accepted hops one at a time, follow
    /// and repair them, and report on the Git host. Without a source it runs
    /// on the embedded example fleet's scripted history, simulated cluster
    /// and git notes (sim mode only: kube mode needs --repo or --url).
    Run(Box<RunArgs>),
    /// Print the JSON Schema of `lockstep run --config` files.
    ConfigSchema,
    /// Print the JSON Schema of UpgradePlan documents.
    PlanSchema,
    /// Where each UpgradePlan of a revision stands: its waves, which
    /// objects' hop commits exist, the `mode: propose` branches the
    /// repository knows, and the plan statuses in git notes.
    Plan {
        #[command(subcommand)]
        command: PlanCommand,
    },
    /// Build a throwaway repository from the embedded example fleet, walk a
    /// scripted history through the gate and print what a user would see.
    /// Exits 0 once it has run: its refused commits are the demonstration.
    Demo {
        /// Keep the demo repository in this (new or empty) directory.
        #[arg(long, value_name = "DIR")]
        keep: Option<PathBuf>,
        #[arg(short, long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
}

/// `lockstep run`: a config file, then environment and flags on top.
#[derive(clap::Args)]
struct RunArgs {
    /// YAML configuration (see plans/lockstep-config.schema.json).
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_CONFIG",
        value_name = "FILE"
    )]
    config: Option<PathBuf>,
    /// A local fleet repository to watch.
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_REPO",
        value_name = "PATH",
        conflicts_with = "url"
    )]
    repo: Option<PathBuf>,
    /// A remote fleet repository (https://, ssh://, git://).
    #[arg(long, hide_env_values = true, env = "LOCKSTEP_URL")]
    url: Option<String>,
    #[arg(long, hide_env_values = true, env = "LOCKSTEP_BRANCH")]
    branch: Option<String>,
    /// Only manifests under this path (repeatable).
    #[arg(long = "path", value_name = "PREFIX")]
    paths: Vec<String>,
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_CACHE_DIR",
        value_name = "DIR"
    )]
    cache_dir: Option<PathBuf>,
    /// HTTPS token for the remote repository (a file).
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_GIT_TOKEN_FILE",
        value_name = "FILE"
    )]
    git_token_file: Option<PathBuf>,
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_SSH_KEY_FILE",
        value_name = "FILE"
    )]
    ssh_key_file: Option<PathBuf>,
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_KNOWN_HOSTS_FILE",
        value_name = "FILE"
    )]
    known_hosts_file: Option<PathBuf>,
    /// Poll interval (90s, 5m).
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_POLL",
        value_name = "DURATION"
    )]
    poll: Option<String>,
    /// Judge only commits after this one.
    #[arg(long, value_name = "REV")]
    since: Option<String>,
    /// sim (the simulated operator, default) or kube. kube needs a source
    /// (--repo or --url): the example fleet is for sim only.
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_CLUSTER_MODE",
        value_name = "MODE",
        value_enum
    )]
    cluster_mode: Option<lockstep::config::ClusterMode>,
    #[arg(long, hide_env_values = true, env = "KUBECONFIG", value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// This cluster's name in status contexts (lockstep/<name>).
    #[arg(long, hide_env_values = true, env = "LOCKSTEP_CLUSTER")]
    cluster_name: Option<String>,
    /// Where statuses go: notes (default), github, gitlab, gitea (or forgejo).
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_REPORT",
        value_name = "HOST",
        value_enum
    )]
    report: Option<lockstep::config::ReportKind>,
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_FORGE_URL",
        value_name = "URL"
    )]
    forge_url: Option<String>,
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_FORGE_REPO",
        value_name = "REPO"
    )]
    forge_repo: Option<String>,
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_TOKEN_FILE",
        value_name = "FILE"
    )]
    token_file: Option<PathBuf>,
    #[arg(long, value_name = "VAR")]
    token_env: Option<String>,
    #[arg(long, value_name = "URL")]
    target_url: Option<String>,
    /// With notes: push refs/notes/lockstep after each delivery and when stopping (to REMOTE, or the branch's remote).
    #[arg(long, value_name = "REMOTE", num_args = 0..=1, default_missing_value = "")]
    push_notes: Option<String>,
    /// Webhook receiver address (HOST:PORT).
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_LISTEN",
        value_name = "ADDR"
    )]
    listen: Option<String>,
    /// /healthz, /readyz and /metrics address (HOST:PORT).
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_METRICS_LISTEN",
        value_name = "ADDR"
    )]
    metrics_listen: Option<String>,
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_GITHUB_WEBHOOK_SECRET_FILE",
        value_name = "FILE"
    )]
    github_webhook_secret_file: Option<PathBuf>,
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_GITLAB_WEBHOOK_SECRET_FILE",
        value_name = "FILE"
    )]
    gitlab_webhook_secret_file: Option<PathBuf>,
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_GITEA_WEBHOOK_SECRET_FILE",
        value_name = "FILE"
    )]
    gitea_webhook_secret_file: Option<PathBuf>,
    /// Elect a leader on a Lease (several replicas, kube mode).
    #[arg(long)]
    leader_election: bool,
    /// text or json.
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_LOG_FORMAT",
        value_name = "FORMAT",
        value_enum
    )]
    log_format: Option<lockstep::config::LogFormat>,
    /// A tracing filter (info, lockstep=debug).
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_LOG",
        value_name = "FILTER"
    )]
    log_level: Option<String>,
    /// Stop once every hop is complete (or waits on a person) and every
    /// status is delivered. Exit 1 when a status could not be delivered or
    /// a status ends in failure that a person must act on: a unit blocked
    /// (off its chain), a hop failed for good or its repair budget spent,
    /// an apply the cluster rejected, a plan held or unable to propose, or
    /// the branch head refused by the gate. Refused commits below the head
    /// (a later commit moved past them) and pull requests exit 0.
    #[arg(long)]
    until_idle: bool,
    /// Without a source (sim mode): keep the example repository in this new
    /// directory. With a source it is a usage error.
    #[arg(long, value_name = "DIR")]
    keep: Option<PathBuf>,
    /// Sim mode: inject trouble into the simulated operator, as `rehearse
    /// --fault` does (repeatable).
    #[arg(long = "fault", value_name = "SPEC")]
    faults: Vec<String>,
    /// Refuse commits not signed by an SSH key this allowed-signers file
    /// trusts (as `check --allowed-signers`).
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_ALLOWED_SIGNERS",
        value_name = "FILE"
    )]
    allowed_signers: Option<PathBuf>,
    /// Refuse commits not signed by an OpenPGP key of this directory (as
    /// `check --trusted-keys`).
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_TRUSTED_KEYS",
        value_name = "DIR"
    )]
    trusted_keys: Option<PathBuf>,
}

impl RunArgs {
    /// The file's configuration with flags and environment on top.
    fn config(&self) -> anyhow::Result<lockstep::config::Config> {
        use lockstep::config::Config;
        let mut c = match &self.config {
            Some(f) => Config::load(f)?,
            None => Config::default(),
        };
        let set = |slot: &mut Option<PathBuf>, v: &Option<PathBuf>| {
            if v.is_some() {
                *slot = v.clone();
            }
        };
        if self.repo.is_some() {
            c.source.repo = self.repo.clone();
            c.source.url = None;
        }
        if self.url.is_some() {
            c.source.url = self.url.clone();
            c.source.repo = None;
        }
        if let Some(b) = &self.branch {
            c.source.branch = b.clone();
        }
        if !self.paths.is_empty() {
            c.source.paths = self.paths.clone();
        }
        set(&mut c.source.cache_dir, &self.cache_dir);
        set(&mut c.source.token_file, &self.git_token_file);
        set(&mut c.source.ssh_key_file, &self.ssh_key_file);
        set(&mut c.source.known_hosts_file, &self.known_hosts_file);
        if let Some(p) = &self.poll {
            c.source.poll_interval = p.clone();
        }
        if self.since.is_some() {
            c.source.since = self.since.clone();
        }
        if let Some(m) = self.cluster_mode {
            c.cluster.mode = m;
        }
        if !self.faults.is_empty() {
            c.cluster.faults = self.faults.clone();
        }
        set(&mut c.cluster.kubeconfig, &self.kubeconfig);
        if let Some(n) = &self.cluster_name {
            c.cluster.name = n.clone();
        }
        if let Some(r) = self.report {
            c.report.kind = r;
        }
        if self.forge_url.is_some() {
            c.report.url = self.forge_url.clone();
        }
        if self.forge_repo.is_some() {
            c.report.repo = self.forge_repo.clone();
        }
        set(&mut c.report.token_file, &self.token_file);
        if self.token_env.is_some() {
            c.report.token_env = self.token_env.clone();
        }
        if self.target_url.is_some() {
            c.report.target_url = self.target_url.clone();
        }
        if self.push_notes.is_some() {
            c.report.push_notes = self.push_notes.clone();
        }
        if self.listen.is_some() {
            c.webhook.listen = self.listen.clone();
        }
        if self.metrics_listen.is_some() {
            c.server.listen = self.metrics_listen.clone();
        }
        set(
            &mut c.webhook.github_secret_file,
            &self.github_webhook_secret_file,
        );
        set(
            &mut c.webhook.gitlab_secret_file,
            &self.gitlab_webhook_secret_file,
        );
        set(
            &mut c.webhook.gitea_secret_file,
            &self.gitea_webhook_secret_file,
        );
        if self.leader_election {
            c.leader_election.enabled = true;
        }
        if let Some(f) = &self.log_format {
            c.log.format = *f;
        }
        if let Some(l) = &self.log_level {
            c.log.level = l.clone();
        }
        set(&mut c.trust.allowed_signers_file, &self.allowed_signers);
        set(&mut c.trust.trusted_keys_dir, &self.trusted_keys);
        Ok(c)
    }
}

fn init_logging(log: &lockstep::config::LogConfig) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_new(&log.level).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match log.format {
        lockstep::config::LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .try_init(),
        // Text logs escape every field: a ref or summary from Git stays on its line.
        lockstep::config::LogFormat::Text => builder
            .fmt_fields(lockstep::escape::LogFields)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init(),
    };
}

fn run_daemon(args: &RunArgs) -> anyhow::Result<ExitCode> {
    let mut config = args.config()?;
    init_logging(&config.log);
    // No source: the embedded example fleet's scripted history, in sim mode
    // only (kube mode without a source stops here, before any cluster call).
    let example = config.source_choice()? == lockstep::config::SourceChoice::Example;
    if let Some(d) = args.keep.as_ref().filter(|_| !example) {
        anyhow::bail!(
            "--keep {}: only without a source (it keeps the example fleet); drop --keep or drop the source",
            d.display()
        );
    }
    let _example = if example {
        let (dir, tmp) = match &args.keep {
            Some(d) => {
                if d.exists() && d.read_dir()?.next().is_some() {
                    anyhow::bail!("--keep {}: directory is not empty", d.display());
                }
                (d.clone(), None)
            }
            None => {
                let t = tempfile::tempdir().context("creating a temporary directory")?;
                (t.path().to_owned(), Some(t))
            }
        };
        demo::build_repository(&dir)?;
        eprintln!(
            "lockstep: no source given: running on the example fleet at {}{}",
            dir.display(),
            if tmp.is_some() {
                " (temporary: removed at exit; --keep DIR keeps it)"
            } else {
                ""
            }
        );
        config.source.repo = Some(dir);
        config.source.branch = "main".into();
        tmp
    } else {
        None
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let summary = rt.block_on(lockstep::service::run(config.clone(), args.until_idle))?;
    if args.until_idle {
        let repo = config.source.repo.clone().unwrap_or_default();
        print_notes(&repo, &config.source.branch);
        if summary.undelivered > 0 {
            eprintln!(
                "lockstep: {} statuses could not be delivered",
                summary.undelivered
            );
        }
        if let Some(first) = summary.needs_person.first() {
            eprintln!(
                "lockstep: {} waiting on a person; first: {}",
                summary.needs_person.len(),
                Escaped(first)
            );
        }
        if summary.undelivered > 0 || !summary.needs_person.is_empty() {
            return Ok(ExitCode::from(1));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// After a bounded run on a local repository: the statuses per commit, as
/// `git log --notes=lockstep` would show them.
fn print_notes(repo: &std::path::Path, branch: &str) {
    let Ok(r) = git2::Repository::open(repo) else {
        return;
    };
    let Ok(head) = r.revparse_single(&format!("refs/heads/{branch}")) else {
        return;
    };
    let Ok(mut walk) = r.revwalk() else { return };
    let _ = walk.push(head.id());
    let _ = walk.simplify_first_parent();
    let _ = walk.set_sorting(git2::Sort::TOPOLOGICAL | git2::Sort::REVERSE);
    for id in walk.flatten() {
        let Ok(c) = r.find_commit(id) else { continue };
        println!(
            "{} {}",
            &id.to_string()[..10],
            Escaped(c.summary().ok().flatten().unwrap_or(""))
        );
        if let Ok(n) = r.find_note(Some("refs/notes/lockstep"), id) {
            for line in n.message().unwrap_or("").lines() {
                println!("    {}", Escaped(line));
            }
        }
    }
}

#[derive(Subcommand)]
enum PlanCommand {
    /// Show the plans of REV's tree.
    Status {
        #[arg(long, default_value = ".")]
        repo: PathBuf,
        #[arg(long, default_value = "HEAD")]
        rev: String,
        #[arg(long = "path", value_name = "PREFIX")]
        paths: Vec<String>,
    },
}

/// Where verdicts go as commit statuses.
#[derive(clap::Args)]
struct ReportArgs {
    /// Post each judged commit's verdict as a commit status.
    #[arg(long, value_enum, value_name = "HOST")]
    report: Option<lockstep::config::ReportKind>,
    /// This cluster's name: statuses go under lockstep/<cluster>, so clusters never overwrite each other.
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_CLUSTER",
        default_value = "default"
    )]
    cluster: String,
    /// API base (GitHub Enterprise: https://HOST/api/v3) or server URL (GitLab, Gitea).
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_FORGE_URL",
        value_name = "URL"
    )]
    forge_url: Option<String>,
    /// owner/name (GitLab: the project path or id) [default: from the origin remote].
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_FORGE_REPO",
        value_name = "REPO"
    )]
    forge_repo: Option<String>,
    /// File holding the API token (a mounted Secret).
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_TOKEN_FILE",
        value_name = "FILE"
    )]
    token_file: Option<PathBuf>,
    /// Environment variable holding the API token.
    #[arg(long, default_value = "LOCKSTEP_TOKEN", value_name = "VAR")]
    token_env: String,
    /// Link shown with each status (your CI job, say).
    #[arg(long, value_name = "URL")]
    target_url: Option<String>,
    /// With --report notes: push refs/notes/lockstep afterwards, to REMOTE or,
    /// without one, to the current branch's remote.
    #[arg(long, value_name = "REMOTE", num_args = 0..=1, default_missing_value = "")]
    push_notes: Option<String>,
}

impl ReportArgs {
    fn spec(&self, repo: &std::path::Path) -> anyhow::Result<Option<ForgeSpec>> {
        let Some(to) = self.report else {
            return Ok(None);
        };
        use lockstep::config::ReportKind;
        let kind = match to {
            ReportKind::Github => ForgeKind::GitHub,
            ReportKind::Gitlab => ForgeKind::GitLab,
            ReportKind::Gitea => ForgeKind::Gitea,
            ReportKind::Notes => ForgeKind::Notes,
        };
        let token = match (&self.token_file, kind) {
            (_, ForgeKind::Notes) => None,
            (Some(f), _) => Some(Secret::from_file(f)?),
            (None, _) => Secret::from_env(&self.token_env).ok(),
        };
        Ok(Some(ForgeSpec {
            kind,
            url: self.forge_url.clone(),
            repo: self.forge_repo.clone(),
            token,
            local: repo.to_owned(),
        }))
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Check { .. } = cli.command {
        // A check reads the repository; only `--push-notes` may connect,
        // and loads the CA certificates first (`post_statuses`).
        // SAFETY: no other thread exists yet, and libgit2 is untouched.
        unsafe { lockstep::git::init_without_certificates() };
    }
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("lockstep: error: {}", Escaped(format_args!("{e:#}")));
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Check {
            repo,
            base,
            head,
            live,
            paths,
            output,
            max_file_bytes,
            max_live_bytes,
            allowed_signers,
            trusted_keys,
            report: report_args,
        } => {
            let spec = report_args.spec(&repo)?;
            let trust = lockstep::trust::TrustPolicy::load(
                allowed_signers.as_deref(),
                trusted_keys.as_deref(),
            )?;
            let live = live
                .map(|path| lockstep::file::read_live(&path, max_live_bytes))
                .transpose()?;
            let git = GitRepo::open(&repo)?;
            let report = check(
                &git,
                &CheckOptions {
                    base,
                    head,
                    prefixes: paths,
                    live,
                    max_file_bytes,
                    memory: None,
                    trust,
                    recorded: None,
                },
            )?;
            print(&report, output);
            if let Some(spec) = spec {
                post_statuses(&spec, &report_args, &report)?;
            }
            Ok(if report.verdict == Verdict::Refused {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            })
        }
        Command::Rehearse {
            repo,
            base,
            head,
            paths,
            faults,
            plan,
            branch,
            start,
        } => {
            let faults = faults
                .iter()
                .map(|f| rehearse::parse_fault(f))
                .collect::<Result<Vec<_>, _>>()?;
            if plan {
                let start: jiff::Timestamp = match start {
                    Some(s) => s.parse().with_context(|| {
                        format!("--start {s:?}: expected RFC 3339, like 2026-12-01T18:00:00Z")
                    })?,
                    None => jiff::Timestamp::now(),
                };
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .enable_all()
                    .build()
                    .context("starting the async runtime")?;
                let s = rt
                    .block_on(lockstep::plan::rehearse::rehearse(
                        &repo, &branch, faults, start,
                    ))
                    .map_err(|e| anyhow::anyhow!(e))?;
                print!("{}", lockstep::plan::rehearse::text(&s, start));
                return Ok(if s.failed {
                    ExitCode::from(1)
                } else {
                    ExitCode::SUCCESS
                });
            }
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .context("starting the async runtime")?;
            let r = rt.block_on(rehearse::rehearse(&rehearse::Range {
                repo,
                base,
                head,
                paths,
                faults,
                params: lockstep::sim::Params::default(),
            }))?;
            if r.refused > 0 {
                println!(
                    "{} refused commit(s) in the range are not rehearsed (see lockstep check)",
                    r.refused
                );
            }
            print!("{}", rehearse::text(&r));
            Ok(if r.failed {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            })
        }
        Command::Retry { object, kubeconfig } => {
            let key = parse_object(&object)?;
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let outcome = runtime.block_on(async {
                let cluster = match &kubeconfig {
                    Some(k) => KubeCluster::from_kubeconfig(k).await?,
                    None => KubeCluster::infer().await?,
                };
                lockstep::repair::retry(&cluster, &key).await
            })?;
            match outcome {
                Retried::Deleted(job) => {
                    println!("{key}: deleted failed Job {job}; the operator runs it again");
                    Ok(ExitCode::SUCCESS)
                }
                Retried::Nothing(why) => {
                    println!("{}", Escaped(&why));
                    Ok(ExitCode::from(1))
                }
            }
        }
        Command::Run(args) => run_daemon(&args),
        Command::ConfigSchema => {
            print!("{}", lockstep::config::schema_json());
            Ok(ExitCode::SUCCESS)
        }
        Command::Plan {
            command: PlanCommand::Status { repo, rev, paths },
        } => {
            let text = lockstep::plan::status::render(&repo, &rev, &paths)
                .map_err(|e| anyhow::anyhow!("{}: {e}", repo.display()))?;
            print!("{text}");
            Ok(ExitCode::SUCCESS)
        }
        Command::PlanSchema => {
            print!("{}", lockstep::plan::schema_json());
            Ok(ExitCode::SUCCESS)
        }
        Command::Demo { keep, output } => {
            let keep_given = keep.is_some();
            let tmp;
            let dir = match keep {
                Some(d) => {
                    if d.exists() && d.read_dir()?.next().is_some() {
                        anyhow::bail!("--keep {}: directory is not empty", d.display());
                    }
                    std::fs::create_dir_all(&d)?;
                    d
                }
                None => {
                    tmp = tempfile::tempdir()?;
                    tmp.path().to_owned()
                }
            };
            if matches!(output, Output::Text) {
                println!(
                    "lockstep demo: a fleet repository with a scripted history, built in {}{}\n",
                    dir.display(),
                    if !keep_given {
                        " (temporary: removed at exit; --keep DIR keeps it)"
                    } else {
                        ""
                    }
                );
            }
            let report = demo::run(&dir)?;
            print(&report, output);
            if matches!(output, Output::Text) {
                println!(
                    "\nEach refused commit left the baseline where it was, so each fix was judged against the last good state.\nTry it yourself: lockstep demo --keep ./demo-fleet && lockstep check --repo ./demo-fleet --base HEAD~5 -o json\n(HEAD~5 is the accepted prod upgrade: the five commits after it are judged as above)"
                );
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Posts the verdicts; a failure to post is an error (exit 2): a gate whose
/// verdict never reaches the pull request protects nobody.
fn post_statuses(
    spec: &ForgeSpec,
    args: &ReportArgs,
    report: &lockstep::history::CheckReport,
) -> anyhow::Result<()> {
    let forge = AnyForge::build(spec)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let posted = runtime.block_on(forge::publish(
        &forge,
        &RetryPolicy::default(),
        &args.cluster,
        report,
        args.target_url.as_deref(),
    ))?;
    for (sha, outcome) in &posted {
        eprintln!(
            "lockstep: status lockstep/{} on {}: {}",
            args.cluster,
            &sha[..sha.len().min(10)],
            match outcome {
                Outcome::Posted => "posted",
                Outcome::AlreadyThere => "already there",
            }
        );
    }
    if let (AnyForge::Notes(n), Some(remote)) = (&forge, &args.push_notes) {
        let remote = if remote.is_empty() {
            n.branch_remote().ok_or_else(|| {
                anyhow::anyhow!("--push-notes: the current branch has no remote; name one")
            })?
        } else {
            remote.clone()
        };
        lockstep::git::load_certificates()?;
        n.push(&remote)?;
        eprintln!(
            "lockstep: pushed {} to {remote}",
            lockstep::forge::notes::NOTES_REF
        );
    }
    Ok(())
}

/// `kind/namespace/name`, the kind by its service name or kind name.
fn parse_object(s: &str) -> anyhow::Result<lockstep::kind::Key> {
    let parts: Vec<&str> = s.split('/').collect();
    let [kind, ns, name] = parts.as_slice() else {
        anyhow::bail!("{s:?}: expected kind/namespace/name, e.g. nova/compute/nova");
    };
    let kind = lockstep::kind::Kind::from_service(&kind.to_lowercase())
        .ok_or_else(|| anyhow::anyhow!("{s:?}: {kind:?} is not a service kind (keystone, glance, placement, barbican, horizon, nova, cinder, neutron)"))?;
    Ok(lockstep::kind::Key::new(kind, *ns, *name))
}

fn print(report: &lockstep::history::CheckReport, output: Output) {
    match output {
        Output::Text => print!("{}", report::text(report)),
        Output::Json => {
            use std::io::Write as _;
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            if let Err(e) = report::write_json(report, &mut out).and_then(|()| out.flush()) {
                // As `println!` would.
                panic!("failed printing to stdout: {e}");
            }
        }
    }
}
