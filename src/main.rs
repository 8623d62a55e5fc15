//! The `lockstep` command line: parses arguments, calls the library, maps
//! outcomes to exit codes (0 accepted, 1 refused, 2 usage or I/O error).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};

use lockstep::gate::Verdict;
use lockstep::git::GitRepo;
use lockstep::history::{CheckOptions, check};
use lockstep::{demo, live, manifest, report};

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
        } => {
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
            Ok(if report.verdict == Verdict::Refused {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            })
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

fn print(report: &lockstep::history::CheckReport, output: Output) {
    match output {
        Output::Text => print!("{}", report::text(report)),
        Output::Json => println!("{}", report::json(report)),
    }
}
