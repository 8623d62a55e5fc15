//! The `lockstep` command line: parses arguments, calls the library, maps
//! outcomes to exit codes (0 accepted, 1 refused, 2 usage or I/O error).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};

use lockstep::cluster::kube::KubeCluster;
use lockstep::forge::delivery::{Outcome, RetryPolicy};
use lockstep::forge::{self, AnyForge, ForgeKind, ForgeSpec};
use lockstep::gate::Verdict;
use lockstep::git::GitRepo;
use lockstep::history::{CheckOptions, check};
use lockstep::repair::Retried;
use lockstep::secret::Secret;
use lockstep::{demo, history, live, manifest, rehearse, report};

#[derive(Parser)]
#[command(
    name = "lockstep",
    version,
    about = "GitOps release gate for C5C3 OpenStack control planes: one release hop at a time, release and image together",
    after_help = "Exit codes: 0 every judged commit accepted (held objects included), 1 a commit refused, 2 usage error or unreadable repository, revision or file."
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
        /// Refuse manifest files larger than this.
        #[arg(long, default_value_t = manifest::DEFAULT_MAX_FILE_BYTES, value_name = "BYTES")]
        max_file_bytes: usize,
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
    },
    /// Re-run a permanently failed phase Job of an object (the forward
    /// repair lockstep does by itself for projected services).
    Retry {
        /// The object, as kind/namespace/name (e.g. nova/compute/nova).
        object: String,
        /// Kubeconfig to use [default: in-cluster, or $KUBECONFIG / ~/.kube/config].
        #[arg(long, env = "KUBECONFIG", value_name = "FILE")]
        kubeconfig: Option<PathBuf>,
    },
    /// Build a throwaway repository from the embedded example fleet, walk a
    /// scripted history through the gate and print what a user would see.
    Demo {
        /// Keep the demo repository in this (new or empty) directory.
        #[arg(long, value_name = "DIR")]
        keep: Option<PathBuf>,
        #[arg(short, long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum ReportTo {
    Github,
    Gitlab,
    Gitea,
    Notes,
}

/// Where verdicts go as commit statuses.
#[derive(clap::Args)]
struct ReportArgs {
    /// Post each judged commit's verdict as a commit status.
    #[arg(long, value_enum, value_name = "HOST")]
    report: Option<ReportTo>,
    /// This cluster's name: statuses go under lockstep/<cluster>, so clusters never overwrite each other.
    #[arg(long, env = "LOCKSTEP_CLUSTER", default_value = "default")]
    cluster: String,
    /// API base (GitHub Enterprise: https://HOST/api/v3) or server URL (GitLab, Gitea).
    #[arg(long, env = "LOCKSTEP_FORGE_URL", value_name = "URL")]
    forge_url: Option<String>,
    /// owner/name (GitLab: the project path or id) [default: from the origin remote].
    #[arg(long, env = "LOCKSTEP_FORGE_REPO", value_name = "REPO")]
    forge_repo: Option<String>,
    /// File holding the API token (a mounted Secret).
    #[arg(long, env = "LOCKSTEP_TOKEN_FILE", value_name = "FILE")]
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
        let kind = match to {
            ReportTo::Github => ForgeKind::GitHub,
            ReportTo::Gitlab => ForgeKind::GitLab,
            ReportTo::Gitea => ForgeKind::Gitea,
            ReportTo::Notes => ForgeKind::Notes,
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
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("lockstep: error: {e:#}");
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
            report: report_args,
        } => {
            let spec = report_args.spec(&repo)?;
            let live = live
                .map(|path| -> anyhow::Result<_> {
                    let text = std::fs::read_to_string(&path)
                        .with_context(|| format!("cannot read live state {}", path.display()))?;
                    Ok(live::parse_live(&path.display().to_string(), &text)?)
                })
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
        } => {
            let faults = faults
                .iter()
                .map(|f| rehearse::parse_fault(f))
                .collect::<Result<Vec<_>, _>>()?;
            let git = GitRepo::open(&repo)?;
            let opts = CheckOptions {
                base,
                head,
                prefixes: paths,
                ..CheckOptions::default()
            };
            let report = check(&git, &opts)?;
            let (baseline, _) =
                history::tree_desired(&git, history::base_tree(&git, &report)?, &opts)?;
            let refused = report
                .commits
                .iter()
                .filter(|c| c.verdict == Verdict::Refused)
                .count();
            if refused > 0 {
                println!(
                    "{refused} refused commit(s) in the range are not rehearsed (see lockstep check)"
                );
            }
            let r =
                rehearse::rehearse(&baseline, &report, faults, lockstep::sim::Params::default());
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
                    println!("{why}");
                    Ok(ExitCode::from(1))
                }
            }
        }
        Command::Demo { keep, output } => {
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
                    "lockstep demo: a fleet repository with a scripted history, built in {}\n",
                    dir.display()
                );
            }
            let report = demo::run(&dir)?;
            print(&report, output);
            if matches!(output, Output::Text) {
                println!(
                    "\nEach refused commit left the baseline where it was, so each fix was judged against the last good state.\nTry it yourself: lockstep demo --keep ./demo-fleet && lockstep check --repo ./demo-fleet --base HEAD~3 -o json"
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
        Output::Json => println!("{}", report::json(report)),
    }
}
