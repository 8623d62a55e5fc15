//! Judge: the second step of a pass. On a new branch head, the new commits
//! are judged (Git only, so every replica and every restart reaches the
//! same verdicts) and the accepted ones extend the chains of their units;
//! each new step carries its parsed document, so no apply reads Git again.
//! Pull-request heads are judged too, and new verdicts are queued before
//! anything is applied.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use git2::Oid;

use super::{Daemon, PassError, PassOutcome, Repo};
use crate::cluster::Cluster;
use crate::forge::describe;
use crate::gate::Verdict;
use crate::git::{GitRepo, Store};
use crate::history::{self, CheckOptions, CheckReport, EMPTY_TREE};
use crate::kind::{Key, Kind};
use crate::metrics::{Metrics, VerdictLabels};
use crate::rollout::{self, Chain, StepDocument};

/// The branch's judged history, and what it implies.
pub(super) struct Judged {
    pub head: Oid,
    pub report: Arc<CheckReport>,
    /// Shared with the unit reports: an unchanged chain keeps its `Arc`
    /// across heads, so a pass tells changed units by pointer.
    pub chains: Arc<BTreeMap<Key, Arc<Chain>>>,
    /// The head tree's upgrade plans and the units they can select.
    pub plans: Arc<crate::plan::exec::TreePlans>,
}

/// What the judge step hands on.
pub(super) struct Judgment {
    pub head: Oid,
    pub report: Arc<CheckReport>,
    pub chains: Arc<BTreeMap<Key, Arc<Chain>>>,
}

impl<C: Cluster + 'static, R: Repo + 'static> Daemon<C, R> {
    /// Judges a new head (and new pull-request heads); `None` when nothing
    /// was ever judged successfully.
    pub(super) async fn reconcile_judgment(
        &mut self,
        path: &Path,
        head: Oid,
        pulls: Vec<(u64, Oid)>,
        out: &mut PassOutcome,
    ) -> Option<Judgment> {
        let mut fresh = false;
        if self.judged.as_ref().is_none_or(|j| j.head != head) {
            // Taken, so that the report and chains are extended in place
            // rather than copied.
            let prev = self.judged.take();
            match self.judge(path, head, prev).await {
                Ok((j, new)) => {
                    self.count_verdicts(&j.report, new);
                    self.judged = Some(j);
                    fresh = new > 0;
                }
                Err((e, prev)) => {
                    tracing::error!(error = %e, head = %head, "judging failed");
                    self.judged = prev;
                    out.source_error = Some(e.to_string());
                }
            }
        }
        if self.opts.pull_requests {
            self.judge_pulls(path, head, pulls).await;
        }
        let j = self.judged.as_ref()?;
        let judgment = Judgment {
            head: j.head,
            report: j.report.clone(),
            chains: j.chains.clone(),
        };
        // The new commits' verdicts go out before anything is applied: a
        // push is answered in the time it takes to judge it, not to apply
        // it. (The units are last pass's, so older commits' statuses are
        // unchanged and not sent again.) The first pass has no units yet:
        // its statuses wait for them.
        if fresh && self.walked.is_some() {
            self.reconcile_statuses(&judgment.report).await;
        }
        Some(judgment)
    }

    /// Counts and logs the `new` commits at the end of `report`.
    fn count_verdicts(&self, report: &CheckReport, new: usize) {
        let skip = report.commits.len().saturating_sub(new);
        for c in report.commits.iter().skip(skip) {
            let reason = c
                .objects
                .iter()
                .find_map(|o| o.reason)
                .map_or("", |r| r.as_str());
            let verdict = match c.verdict {
                Verdict::Accepted => "accepted",
                Verdict::Refused => "refused",
                Verdict::Held => "held",
            };
            self.metrics
                .commits_judged
                .get_or_create(&VerdictLabels {
                    verdict: verdict.into(),
                    reason: reason.into(),
                })
                .inc();
            tracing::info!(commit = %c.sha, verdict, reason, summary = %c.summary, "judged");
        }
    }

    /// Judges the branch: Git only, so that every replica and every restart
    /// reaches the same verdicts (in-flight rules are the planner's: a hop
    /// waits for the one before it).
    async fn judge(
        &self,
        path: &Path,
        head: Oid,
        prev: Option<Judged>,
    ) -> Result<(Judged, usize), (PassError, Option<Judged>)> {
        let path = path.to_owned();
        let opts = CheckOptions {
            base: Some(self.opts.since.clone().unwrap_or_else(|| EMPTY_TREE.into())),
            head: head.to_string(),
            prefixes: self.opts.paths.clone(),
            live: None,
            max_file_bytes: self.opts.max_file_bytes,
            memory: None,
            trust: self.opts.trust.clone(),
        };
        let t = Instant::now();
        let r = tokio::task::spawn_blocking(move || judge_blocking(&path, head, prev, &opts))
            .await
            .map_err(|e| (PassError::from(e), None))
            .and_then(|r| r);
        Metrics::observe(&self.metrics.git_seconds, "judge", r.is_ok(), t.elapsed());
        r
    }

    /// Pull-request heads get the verdict of their commits before merge.
    async fn judge_pulls(&mut self, path: &Path, head: Oid, pulls: Vec<(u64, Oid)>) {
        // The branch's floors at its head: a pull request forked there
        // needs no look back through older history.
        let memory = self
            .judged
            .as_ref()
            .filter(|j| j.head == head)
            .map(|j| j.report.memory.clone());
        for (n, oid) in pulls {
            if self.pulls.get(&n) == Some(&oid) || oid == head {
                continue;
            }
            let p = path.to_owned();
            let opts = CheckOptions {
                base: Some(head.to_string()),
                head: oid.to_string(),
                prefixes: self.opts.paths.clone(),
                live: None,
                max_file_bytes: self.opts.max_file_bytes,
                memory: memory.clone(),
                trust: self.opts.trust.clone(),
            };
            let r = tokio::task::spawn_blocking(move || {
                let repo = GitRepo::open(&p)?;
                Ok::<_, PassError>(history::check(&repo, &opts)?)
            })
            .await
            .map_err(PassError::from)
            .and_then(|r| r);
            match r {
                Ok(report) => {
                    for c in &report.commits {
                        tracing::info!(pull = n, commit = %c.sha, verdict = ?c.verdict, "pull request judged");
                        let s = describe::commit_status(
                            &self.opts.cluster_name,
                            c,
                            self.opts.target_url.as_deref(),
                        );
                        self.queue_status(c.sha.clone(), s).await;
                    }
                    self.pulls.insert(n, oid);
                }
                Err(e) => tracing::warn!(pull = n, error = %e, "judging a pull request failed"),
            }
        }
    }
}

/// The judgment itself, on the blocking pool: forward from the last head
/// when the branch moved forward, else the whole range again.
fn judge_blocking(
    path: &Path,
    head: Oid,
    prev: Option<Judged>,
    opts: &CheckOptions,
) -> Result<(Judged, usize), (PassError, Option<Judged>)> {
    let repo = match GitRepo::open(path) {
        Ok(r) => r,
        Err(e) => return Err((e.into(), prev)),
    };
    let documents = Documents::new(&repo);
    let forward = prev
        .as_ref()
        .is_some_and(|p| repo.descends_from(head, p.head));
    match prev {
        // The branch moved forward: judge only the new commits, from the
        // last accepted tree, and extend the chains they touch.
        Some(prev) if forward => {
            let more = (|| -> Result<_, crate::git::Error> {
                let baseline = match prev
                    .report
                    .commits
                    .iter()
                    .rev()
                    .find(|c| c.verdict == Verdict::Accepted)
                {
                    Some(c) => {
                        let oid = Oid::from_str(&c.sha)
                            .map_err(|_| crate::git::Error::InvalidId { id: c.sha.clone() })?;
                        Some(repo.commit(oid)?.tree)
                    }
                    None => history::base_tree(&repo, &prev.report)?,
                };
                history::check_after(&repo, opts, prev.head, baseline, &prev.report.memory)
            })();
            let more = match more {
                Ok(m) => m,
                Err(e) => return Err((e.into(), Some(prev))),
            };
            let Judged {
                report,
                chains,
                plans: prev_plans,
                ..
            } = prev;
            let mut chains = Arc::unwrap_or_clone(chains);
            rollout::extend_chains(
                &mut chains,
                &more.commits,
                |name, file, sha| plane_key(&repo, sha, file, name),
                |sha, file, key| documents.step(sha, file, key),
            );
            let mut report = Arc::unwrap_or_clone(report);
            let n = more.commits.len();
            report.commits.extend(more.commits);
            report.memory = more.memory;
            if report.commits.iter().any(|c| c.verdict == Verdict::Refused) {
                report.verdict = Verdict::Refused;
            }
            report.head = head.to_string();
            // Plans are read again only when some exist or a new commit
            // touched one (units move with every hop).
            let touched = report.commits[report.commits.len() - n..]
                .iter()
                .any(|c| crate::plan::exec::touched(&repo, &c.sha, &opts.prefixes));
            let plans = if prev_plans.plans.is_empty() && !touched {
                prev_plans
            } else {
                Arc::new(
                    crate::plan::exec::read(&repo, head, &opts.prefixes, opts.max_file_bytes)
                        .unwrap_or_default(),
                )
            };
            Ok((
                Judged {
                    head,
                    report: Arc::new(report),
                    chains: Arc::new(chains),
                    plans,
                },
                n,
            ))
        }
        // First look, or history rewritten: all of it.
        prev => {
            let report = match history::check(&repo, opts) {
                Ok(r) => r,
                Err(e) => return Err((e.into(), prev)),
            };
            let mut chains = BTreeMap::new();
            rollout::extend_chains(
                &mut chains,
                &report.commits,
                |name, file, sha| plane_key(&repo, sha, file, name),
                |sha, file, key| documents.step(sha, file, key),
            );
            // Units whose chain the rewrite did not change keep their `Arc`
            // (and so are not read again).
            if let Some(old) = prev.as_ref() {
                for (k, c) in chains.iter_mut() {
                    if let Some(o) = old.chains.get(k)
                        && **o == **c
                    {
                        *c = o.clone();
                    }
                }
            }
            let n = report.commits.len();
            let plans = crate::plan::exec::read(&repo, head, &opts.prefixes, opts.max_file_bytes)
                .unwrap_or_default();
            Ok((
                Judged {
                    head,
                    report: Arc::new(report),
                    chains: Arc::new(chains),
                    plans: Arc::new(plans),
                },
                n,
            ))
        }
    }
}

/// Reads steps' documents during one judgment, each file's blob parsed
/// once (a plane's children and a long chain of folds share it).
struct Documents<'a> {
    repo: &'a GitRepo,
    parsed: RefCell<HashMap<Oid, Option<Arc<Vec<serde_json::Value>>>>>,
}

impl<'a> Documents<'a> {
    fn new(repo: &'a GitRepo) -> Self {
        Self {
            repo,
            parsed: RefCell::new(HashMap::new()),
        }
    }

    /// The whole document of `key` as Git has it at `sha`: what lockstep
    /// applies (server-side apply owns what it sends).
    fn step(&self, sha: &str, file: &str, key: &Key) -> StepDocument {
        let short = sha.get(..10).unwrap_or(sha);
        let where_ = format!("{} at {short}", crate::escape::escape(file));
        let blob = blob_at(self.repo, sha, file).ok_or_else(|| format!("{where_} is missing"))?;
        let docs = self
            .parsed
            .borrow_mut()
            .entry(blob)
            .or_insert_with(|| parse_blob(self.repo, blob).map(Arc::new))
            .clone()
            .ok_or_else(|| format!("{where_} cannot be read as YAML"))?;
        docs.iter()
            .find(|d| {
                d.get("kind").and_then(|k| k.as_str()) == Some(key.kind.as_str())
                    && d.pointer("/metadata/name").and_then(|n| n.as_str())
                        == Some(key.name.as_str())
                    && d.pointer("/metadata/namespace")
                        .and_then(|n| n.as_str())
                        .unwrap_or("default")
                        == key.namespace
            })
            .map(|d| Arc::new(d.clone()))
            .ok_or_else(|| format!("{where_} holds no {key}"))
    }
}

/// A ControlPlane's key from the file holding it at a commit.
fn plane_key(repo: &GitRepo, sha: &str, file: &str, name: &str) -> Option<Key> {
    let docs = parse_blob(repo, blob_at(repo, sha, file)?)?;
    docs.into_iter().find_map(|d| {
        (d.get("kind")?.as_str()? == "ControlPlane"
            && d.pointer("/metadata/name")?.as_str()? == name)
            .then(|| {
                let ns = d
                    .pointer("/metadata/namespace")
                    .and_then(|n| n.as_str())
                    .unwrap_or("default");
                Key::new(Kind::ControlPlane, ns, name)
            })
    })
}

fn blob_at(repo: &impl Store, sha: &str, file: &str) -> Option<Oid> {
    let oid = Oid::from_str(sha).ok()?;
    repo.entry_at(oid, file).ok().map(|e| e.oid)
}

fn parse_blob(repo: &impl Store, blob: Oid) -> Option<Vec<serde_json::Value>> {
    let bytes = repo.read_blob(blob).ok()?;
    let text = std::str::from_utf8(&bytes).ok()?;
    // The gate read this file within its byte limit: the same budget here,
    // or a file of thousands of documents would pass the gate and then not
    // be found to apply.
    let limit = crate::yaml::Limit::manifest(text.len());
    serde_saphyr::from_multiple_with_options::<serde_json::Value>(
        text,
        crate::yaml::options(&limit, text.len()),
    )
    .ok()
}
