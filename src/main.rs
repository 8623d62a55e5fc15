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
use lockstep::{demo, live, manifest, rehearse, report};

/// `print!`, `println!` and `eprintln!` panic when the stream cannot be
/// written (`check > /dev/full`); these return the error instead (`emit`)
/// or, for standard error, drop what cannot be written.
macro_rules! out {
    ($($t:tt)*) => { emit(format_args!($($t)*))? };
}
macro_rules! outln {
    ($($t:tt)*) => { emit(format_args!("{}\n", format_args!($($t)*)))? };
}
macro_rules! errln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}

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
        /// Keep and use a names index in $GIT_DIR/lockstep/names-v1: a
        /// commit adding an object skips the directories that cannot hold
        /// its name. [default: on for a person at a terminal; off in a CI
        /// job, without a terminal, and with --report (which it conflicts
        /// with), where another job could forge the file and hide a
        /// duplicate name from the check; never from `run`, which keeps its
        /// own in memory]. See docs/names-index.md.
        #[arg(long, overrides_with = "no_names_index", conflicts_with = "report")]
        names_index: bool,
        /// Neither read nor write the names index: search every file.
        #[arg(long, overrides_with = "names_index")]
        no_names_index: bool,
        /// The range reaches the cluster one commit at a time: merged by
        /// rebase or fast-forward onto a branch lockstep applies. Without
        /// it the range is also judged as the one change a merge commit, a
        /// squash, or Flux and Argo CD applying the head make of it: a
        /// chain of hops that skips a release in all is refused on the head.
        #[arg(long)]
        lands_commit_by_commit: bool,
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
        #[arg(long, conflicts_with = "plan")]
        base: Option<String>,
        #[arg(long, default_value = "HEAD", conflicts_with = "plan")]
        head: String,
        #[arg(long = "path", value_name = "PREFIX", conflicts_with = "plan")]
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
        #[arg(long, default_value = "main", requires = "plan")]
        branch: String,
        /// With --plan: when the rehearsal starts (RFC 3339) [default: now].
        #[arg(long, value_name = "TIME", requires = "plan")]
        start: Option<String>,
        /// Also write the timeline as one self-contained HTML page (SVG,
        /// no script) to FILE, to attach to a change ticket.
        #[arg(long, value_name = "FILE")]
        html: Option<PathBuf>,
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
    /// Print the JSON Schema of UpgradePolicy documents.
    PolicySchema,
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
    #[command(flatten)]
    overrides: lockstep::config::Overrides,
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
}

impl RunArgs {
    /// The file's configuration with flags and environment on top.
    fn config(&self) -> anyhow::Result<lockstep::config::Config> {
        let file = match &self.config {
            Some(f) => lockstep::config::Config::load(f)?,
            None => lockstep::config::Config::default(),
        };
        Ok(file.with_overrides(&self.overrides))
    }
}

fn run_daemon(args: &RunArgs, rt: &Runtime) -> anyhow::Result<ExitCode> {
    let mut config = args.config()?;
    lockstep::service::init_logging(&config.log);
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
        let (dir, tmp) = demo::workdir(args.keep.as_deref())?;
        demo::build_repository(&dir)?;
        errln!(
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
    let summary = rt
        .get()?
        .block_on(lockstep::service::run(config.clone(), args.until_idle))?;
    if args.until_idle {
        let repo = config.source.repo.clone().unwrap_or_default();
        out!(
            "{}",
            lockstep::forge::notes::history_text(&repo, &config.source.branch)
        );
        if summary.undelivered > 0 {
            errln!(
                "lockstep: {} statuses could not be delivered",
                summary.undelivered
            );
        }
        if let Some(first) = summary.needs_person.first() {
            errln!(
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
    /// Post each judged commit's verdict as a commit status: notes, github,
    /// gitlab, gitea (or forgejo).
    #[arg(long, value_enum, value_name = "HOST")]
    report: Option<lockstep::config::ReportKind>,
    /// This cluster's name: statuses go under lockstep/<cluster>, so clusters never overwrite each other.
    #[arg(
        long,
        hide_env_values = true,
        env = "LOCKSTEP_CLUSTER",
        default_value = "default",
        value_parser = cluster_name
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
    /// Environment variable holding the API token; it must be set [default: LOCKSTEP_TOKEN, when set].
    #[arg(long, value_name = "VAR")]
    token_env: Option<String>,
    /// Link shown with each status (your CI job, say).
    #[arg(long, value_name = "URL")]
    target_url: Option<String>,
    /// With --report notes: push refs/notes/lockstep afterwards, to REMOTE or,
    /// without one, to the current branch's remote.
    #[arg(
        long,
        value_name = "REMOTE",
        num_args = 0..=1,
        default_missing_value = "",
        requires = "report"
    )]
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
        let token = match kind {
            ForgeKind::Notes => None,
            _ => lockstep::secret::token(self.token_file.as_deref(), self.token_env.as_deref())?,
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
    lockstep::allocator::tune();
    let cli = Cli::parse();
    if let Command::Check { .. } = cli.command {
        // A check reads the repository; only `--push-notes` may connect,
        // and loads the CA certificates first (`post_statuses`).
        // SAFETY: no other thread exists yet, and libgit2 is untouched.
        unsafe { lockstep::git::init_without_certificates() };
    }
    let rt = Runtime::default();
    match run(cli, &rt) {
        Ok(code) => code,
        Err(e) => {
            errln!("lockstep: error: {}", Escaped(format_args!("{e:#}")));
            ExitCode::from(2)
        }
    }
}

/// The one async runtime, built on first use: `check` without `--report`,
/// the schemas, `plan status` and `demo` never start one (nor its threads).
#[derive(Default)]
struct Runtime(std::cell::OnceCell<tokio::runtime::Runtime>);

impl Runtime {
    fn get(&self) -> anyhow::Result<&tokio::runtime::Runtime> {
        if let Some(rt) = self.0.get() {
            return Ok(rt);
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        Ok(self.0.get_or_init(|| rt))
    }
}

fn run(cli: Cli, rt: &Runtime) -> anyhow::Result<ExitCode> {
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
            names_index,
            no_names_index,
            lands_commit_by_commit,
            report: report_args,
        } => {
            if report_args.push_notes.is_some()
                && !matches!(
                    report_args.report,
                    Some(lockstep::config::ReportKind::Notes)
                )
            {
                errln!("lockstep: --push-notes pushes git notes: it needs --report notes");
                return Ok(ExitCode::from(2));
            }
            let spec = report_args.spec(&repo)?;
            let trust = lockstep::trust::TrustPolicy::load(
                allowed_signers.as_deref(),
                trusted_keys.as_deref(),
            )?;
            let live = live
                .map(|path| lockstep::file::read_live(&path, max_live_bytes))
                .transpose()?;
            let git = GitRepo::open(&repo)?;
            let asked = (names_index || no_names_index).then_some(names_index);
            let names = lockstep::names::wanted(asked, report_args.report.is_some())
                .then(|| std::sync::Arc::new(lockstep::names::NameIndex::new(git.common_dir())));
            let mut report = check(
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
                    sources: None,
                    names: names.clone(),
                    // Nothing judges on from this report.
                    keep_floors: false,
                    // `--base` reads as a pull request's target.
                    from_base: false,
                },
            )?;
            // Derived data: a repository lockstep cannot write to is
            // checked all the same, only without keeping the index.
            if let Some(names) = names
                && let Err(e) = names.save()
            {
                tracing::debug!(file = %names.path().unwrap_or(std::path::Path::new("")).display(), error = %e, "names index not saved");
            }
            if !lands_commit_by_commit {
                lockstep::verdict::land_whole(&mut report);
            }
            print(&report, output)?;
            if let Some(spec) = spec {
                post_statuses(&spec, &report_args, &report, rt)?;
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
            html,
        } => {
            let write_html = |page: String| -> anyhow::Result<()> {
                if let Some(f) = &html {
                    std::fs::write(f, page)
                        .with_context(|| format!("writing --html {}", f.display()))?;
                }
                Ok(())
            };
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
                let s = rt.get()?.block_on(lockstep::plan::rehearse::rehearse(
                    &repo, &branch, faults, start,
                ))?;
                out!("{}", lockstep::plan::rehearse::text(&s, start));
                write_html(lockstep::plan::rehearse::html(&s, start))?;
                return Ok(if s.failed {
                    ExitCode::from(1)
                } else {
                    ExitCode::SUCCESS
                });
            }
            let r = rt.get()?.block_on(rehearse::rehearse(&rehearse::Range {
                repo,
                base,
                head,
                paths,
                faults,
                params: lockstep::sim::Params::default(),
            }))?;
            if r.refused > 0 {
                outln!(
                    "{} refused commit(s) in the range are not rehearsed (see lockstep check)",
                    r.refused
                );
            }
            out!("{}", rehearse::text(&r));
            write_html(rehearse::html(&r))?;
            Ok(if r.failed {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            })
        }
        Command::Retry { object, kubeconfig } => {
            let key = parse_object(&object)?;
            let outcome = rt.get()?.block_on(async {
                let cluster = match &kubeconfig {
                    Some(k) => KubeCluster::from_kubeconfig(k).await?,
                    None => KubeCluster::infer().await?,
                };
                lockstep::repair::retry(&cluster, &key).await
            })?;
            match outcome {
                Retried::Deleted(job) => {
                    outln!("{key}: deleted failed Job {job}; the operator runs it again");
                    Ok(ExitCode::SUCCESS)
                }
                Retried::Nothing(why) => {
                    outln!("{}", Escaped(&why));
                    Ok(ExitCode::from(1))
                }
            }
        }
        Command::Run(args) => run_daemon(&args, rt),
        Command::ConfigSchema => {
            out!("{}", lockstep::config::schema_json());
            Ok(ExitCode::SUCCESS)
        }
        Command::Plan {
            command: PlanCommand::Status { repo, rev, paths },
        } => {
            // Its errors name the repository.
            let text = lockstep::plan::status::render(&repo, &rev, &paths)?;
            out!("{text}");
            Ok(ExitCode::SUCCESS)
        }
        Command::PlanSchema => {
            out!("{}", lockstep::plan::schema_json());
            Ok(ExitCode::SUCCESS)
        }
        Command::PolicySchema => {
            out!("{}", lockstep::policy::schema_json());
            Ok(ExitCode::SUCCESS)
        }
        Command::Demo { keep, output } => {
            let (dir, tmp) = demo::workdir(keep.as_deref())?;
            if matches!(output, Output::Text) {
                outln!(
                    "lockstep demo: a fleet repository with a scripted history, built in {}{}\n",
                    dir.display(),
                    if tmp.is_some() {
                        " (temporary: removed at exit; --keep DIR keeps it)"
                    } else {
                        ""
                    }
                );
            }
            let report = demo::run(&dir)?;
            print(&report, output)?;
            if matches!(output, Output::Text) {
                outln!(
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
    rt: &Runtime,
) -> anyhow::Result<()> {
    let forge = AnyForge::build(spec)?;
    let posted = rt.get()?.block_on(forge::publish(
        &forge,
        &RetryPolicy::default(),
        &args.cluster,
        report,
        args.target_url.as_deref(),
    ))?;
    for (sha, outcome) in &posted {
        errln!(
            "lockstep: status lockstep/{}/review on {}: {}",
            args.cluster,
            &sha[..sha.len().min(10)],
            match outcome {
                Outcome::Posted => "posted",
                Outcome::AlreadyThere => "already there",
                Outcome::Settled => "already success; pending is not posted over it",
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
        errln!(
            "lockstep: pushed {} to {remote}",
            lockstep::forge::notes::NOTES_REF
        );
    }
    Ok(())
}

/// `--cluster`: a name contexts cannot confuse
/// (`lockstep_core::status::valid_cluster_name`).
fn cluster_name(s: &str) -> Result<String, String> {
    lockstep_core::status::valid_cluster_name(s).map(|()| s.to_owned())
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

fn print(report: &lockstep::history::CheckReport, output: Output) -> anyhow::Result<()> {
    match output {
        Output::Text => out!("{}", report::text(report)),
        Output::Json => {
            use std::io::Write as _;
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            written(report::write_json(report, &mut out).and_then(|()| out.flush()))?;
        }
    }
    Ok(())
}

/// What writing to standard output came to. A reader that went away
/// (`| head`) is not an error: the exit code still says the verdict.
/// Anything else (a full disk, `> /dev/full`) is one, exit 2 with a plain
/// message, never a panic.
fn written(r: std::io::Result<()>) -> anyhow::Result<()> {
    match r {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(anyhow::anyhow!("cannot write to standard output: {e}")),
    }
}

fn emit(args: std::fmt::Arguments<'_>) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    written(out.write_fmt(args).and_then(|()| out.flush()))
}
