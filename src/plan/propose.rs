//! `mode: propose`: a wave's hop commit goes onto a branch of its own and a
//! pull/merge request asks a person to merge it, instead of the daemon
//! committing it to the watched branch.
//!
//! The commit is the one commit mode writes (same edits, message, author
//! and signature), on top of the watched branch's head, on
//! `lockstep/plan/<plan>/wave-<n>`. Merging it is the person's decision;
//! the merged commit reaches the watched branch and the normal loop judges
//! and applies it like any other (the request's head is judged before the
//! merge, as every pull request is).
//!
//! lockstep keeps no state of its own, so every pass works out from the
//! host and the remote where a wave stands:
//!
//! - an **open** request from the wave's branch: wait for it (the branch
//!   is never rewritten under an open request: a reviewer's approval and
//!   anyone's pushes to it stay);
//! - otherwise the branch is made to carry the wave's commit on the current
//!   head: a remote branch that already does (same parent, same tree) is
//!   reused as it is; one lockstep wrote, or whose tip the watched branch
//!   already holds (merged), is replaced; one ending in anyone else's
//!   commit is never pushed over ([`ProposeError::Foreign`]);
//! - a request for exactly that commit that was **closed without merging**
//!   was declined: nothing is opened again until the watched branch moves
//!   (the wave is then proposed afresh on the new head) or someone deletes
//!   the branch;
//! - else a request is opened.
//!
//! A wave whose objects the watched branch already has at the target is
//! not proposed at all (the scheduler counts them as started), so a merged
//! request is never proposed twice.

use std::fmt::Write as _;
use std::path::Path;

use git2::Oid;
use sha2::{Digest, Sha256};
use thiserror::Error;

use crate::escape::escape;
use crate::forge::propose::{NewProposal, Proposal, ProposalState, Propose, open_one};
use crate::forge::{Forge, State};
use crate::git::{Error as GitError, GitRepo, Store as _};
use crate::kind::Key;
use crate::source::{PushTarget, SourceError};

use super::writeback::{self, Author, Bump, WritebackError};

/// The branch a wave is proposed from: `lockstep/plan/<plan>/wave-<n>`,
/// where `wave` is the wave's index and `n` counts from 1, as the status
/// counts waves. Deterministic, so a
/// restarted daemon finds its branch and request again; one per wave, so
/// successive batches of a wave (`maxParallel` smaller than the wave) reuse
/// it once the previous batch is merged. A plan name with characters a
/// branch cannot carry is spelled with `-` and a short hash of the real
/// name, so two such names never share a branch.
pub fn branch(plan: &str, wave: usize) -> String {
    let mut name: String = plan
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .collect();
    while name.contains("..") {
        name = name.replace("..", ".");
    }
    let mut name = name.trim_matches(['.', '-']).to_owned();
    if let Some(stem) = name.strip_suffix(".lock") {
        name = stem.to_owned();
    }
    if name != plan || name.is_empty() {
        let digest = Sha256::digest(plan.as_bytes());
        name = format!("{name}-{}", &hex::encode(digest)[..8])
            .trim_start_matches('-')
            .to_owned();
    }
    format!("lockstep/plan/{name}/wave-{}", wave.saturating_add(1))
}

/// The proposal branch of a wave in one hop of a fast-forward plan: the
/// plan's last hop (every hop of a one-hop plan) is [`branch`]; an earlier
/// hop's branch names its target, `lockstep/plan/<plan>/wave-<n>-to-<release>`,
/// so a hop never reuses the branch (or a declined request) of another.
pub fn hop_branch(plan: &str, wave: usize, hop_to: &str, plan_to: &str) -> String {
    let b = branch(plan, wave);
    if hop_to == plan_to {
        b
    } else {
        let release: String = hop_to
            .chars()
            .filter(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        format!("{b}-to-{release}")
    }
}

/// One object a wave moves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Object {
    pub key: Key,
    /// The file holding it, as a path in the tree.
    pub file: String,
    /// Its release in the head tree (what the request moves it from).
    pub from: Option<String>,
}

/// "Propose this wave": everything the daemon needs to write the branch and
/// open the request, decided by [`super::exec::run`] without any I/O.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub plan: String,
    /// Index in `spec.waves`, from 0.
    pub wave: usize,
    pub waves: usize,
    pub wave_name: String,
    pub to: String,
    pub objects: Vec<Object>,
    /// The watched branch's head the commit goes on.
    pub head: Oid,
    /// The watched branch: the request's target.
    pub base: String,
    /// The proposal branch ([`branch`]).
    pub branch: String,
    /// The commit message, as commit mode writes it.
    pub message: String,
    /// The hop of a fast-forward (`hop 1/2 (2026.1 → 2026.2)`), which the
    /// plan's status names before the wave; `None` for a one-hop plan.
    pub hop: Option<String>,
}

impl Request {
    pub fn keys(&self) -> Vec<Key> {
        self.objects.iter().map(|o| o.key.clone()).collect()
    }

    pub fn bumps(&self) -> Vec<Bump> {
        self.objects
            .iter()
            .map(|o| Bump {
                key: o.key.clone(),
                file: o.file.clone(),
                to: self.to.clone(),
            })
            .collect()
    }

    /// The plan status for this wave: `wave 2/3 (eu): <what>`.
    pub fn describe(&self, what: &str) -> String {
        let wave = format!(
            "wave {}/{} ({}): {what}",
            self.wave.saturating_add(1),
            self.waves,
            self.wave_name
        );
        match &self.hop {
            Some(hop) => format!("{hop}, {wave}"),
            None => wave,
        }
    }

    /// The request's title: the commit's subject, one line of plain text
    /// (names from the fleet's files are escaped: [`crate::escape`]).
    pub fn title(&self) -> String {
        escape(self.message.lines().next().unwrap_or_default()).into_owned()
    }

    /// The request's description, in Markdown (all three hosts render it):
    /// what moves from which release, and what merging does.
    pub fn body(&self) -> String {
        // Names come from the fleet's files: keep them out of the Markdown,
        // and on their line of the table.
        let code = |s: &str| format!("`{}`", escape(s).replace('`', "'"));
        let mut b = String::new();
        let _ = writeln!(
            b,
            "lockstep plan {}: wave {}/{} ({}) to {}.",
            code(&self.plan),
            self.wave.saturating_add(1),
            self.waves,
            code(&self.wave_name),
            code(&self.to)
        );
        b.push('\n');
        let _ = writeln!(
            b,
            "Moves {} one release forward, release and image together:",
            if self.objects.len() == 1 {
                "this object".to_owned()
            } else {
                format!("these {} objects", self.objects.len())
            }
        );
        b.push('\n');
        b.push_str("| object | file | release |\n| --- | --- | --- |\n");
        for o in &self.objects {
            let _ = writeln!(
                b,
                "| {} | {} | {} → {} |",
                code(&o.key.to_string()),
                code(&o.file),
                o.from.as_deref().map_or_else(|| "?".to_owned(), &code),
                code(&self.to)
            );
        }
        b.push('\n');
        let _ = writeln!(
            b,
            "Merging applies the wave: lockstep judges the merged commit on {} like any other \
             and rolls it out; the next wave is proposed once this one is complete (and has \
             soaked). Closing this without merging declines this commit: lockstep proposes \
             the wave again only when {} moves. `spec.paused: true` in the plan stops new \
             proposals.",
            code(&self.base),
            code(&self.base)
        );
        b
    }

    pub fn new_proposal(&self) -> NewProposal {
        NewProposal {
            head: self.branch.clone(),
            base: self.base.clone(),
            title: self.title(),
            body: self.body(),
        }
    }
}

/// Why a wave's branch could not be written or pushed.
#[derive(Debug, Error)]
pub enum ProposeError {
    #[error(transparent)]
    Write(#[from] WritebackError),
    #[error(transparent)]
    Remote(#[from] SourceError),
    #[error(transparent)]
    Git(#[from] crate::git::Error),
    /// The remote branch holds a commit lockstep did not write: a
    /// reviewer's, kept on a branch whose request the host's search did not
    /// show (Gitea searches the most recent 250). Never pushed over.
    #[error(
        "{branch} ends in commit {commit}, which lockstep did not write as it is (no Lockstep-Plan: {plan} trailer under lockstep's own commit, or amended, or a merge), and which is not merged; lockstep does not push over it: merge its request, or delete the branch, and the wave is proposed again"
    )]
    Foreign {
        branch: String,
        commit: Oid,
        plan: String,
    },
}

/// The commit on the remote's proposal branch after [`prepare`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prepared {
    pub commit: Oid,
    /// A new commit was written and pushed (false: the remote branch
    /// already carried the wave's commit and was left alone).
    pub wrote: bool,
}

/// Makes the remote's proposal branch carry the wave's commit on
/// `req.head`. Blocking (libgit2): call it from `spawn_blocking`.
///
/// A remote branch whose tip already is a wave commit for this head (its
/// only parent is `req.head` and its tree is the edited tree) is reused:
/// nothing is written, nothing pushed. Otherwise the commit is written in
/// the local repository (`refs/heads/<branch>`) and pushed over what the
/// remote branch held, if that is lockstep's own commit, one the watched
/// branch already holds, or the head of a request the host shows as merged
/// (`merged`, squash merges included); never over anyone else's work. The
/// caller makes sure no open request uses it.
pub fn prepare(
    repo_path: &Path,
    req: &Request,
    author: &Author,
    signing_key: Option<&Path>,
    target: &PushTarget,
    merged: &[String],
) -> Result<Prepared, ProposeError> {
    let refname = format!("refs/heads/{}", req.branch);
    if !git2::Reference::is_valid_name(&refname) {
        return Err(WritebackError::InvalidBranch {
            branch: req.branch.clone(),
        }
        .into());
    }
    let git = GitRepo::open(repo_path)?;
    let repo = git.raw();
    let fail = |what: String| move |e: git2::Error| GitError::classify(&e, what, repo_path);
    let parent = repo
        .find_commit(req.head)
        .map_err(fail(format!("commit {}", req.head)))?;
    let tree = writeback::wave_tree(repo, &parent, &req.bumps())?;
    if let Some(tip) = target.branch_tip(repo, &req.branch)? {
        if repo.find_commit(tip).is_err() {
            target.fetch_branch(repo, &req.branch)?;
        }
        // Reused only as lockstep wrote it: the wave's tree on this head
        // and lockstep's message to the byte (a trailer added, such as an
        // acknowledgement a policy asks for, would be proposed, and merged,
        // under lockstep's name: it is written over instead).
        let reusable = repo.find_commit(tip).is_ok_and(|c| {
            c.parent_count() == 1
                && c.parent_id(0).ok() == Some(req.head)
                && c.tree_id() == tree
                && c.message_raw_bytes() == req.message.as_bytes()
        });
        // Written by lockstep for this plan and never rewritten: one
        // parent, the trailer `writeback::message` puts in the last
        // paragraph, and its author as committer (an amend, a squash or a
        // host's rebase keeps lockstep's message under another committer).
        // Or already safe elsewhere: in the watched branch, or merged.
        let ours = repo.find_commit(tip).is_ok_and(|c| {
            let trailer = c.message_raw().is_ok_and(|m| {
                m.trim_end().rsplit("\n\n").next().is_some_and(|last| {
                    last.lines()
                        .any(|l| l.strip_prefix("Lockstep-Plan: ") == Some(req.plan.as_str()))
                })
            });
            let (a, k) = (c.author(), c.committer());
            c.parent_count() == 1
                && trailer
                && a.name_bytes() == k.name_bytes()
                && a.email_bytes() == k.email_bytes()
        });
        let kept = tip == req.head
            || repo.graph_descendant_of(req.head, tip).unwrap_or(false)
            || merged.iter().any(|m| *m == tip.to_string());
        // A tip carrying exactly the wave's edits on this head under
        // lockstep's message is reused whoever committed it (nothing is
        // pushed over it).
        if !ours && !kept && !reusable {
            return Err(ProposeError::Foreign {
                branch: req.branch.clone(),
                commit: tip,
                plan: req.plan.clone(),
            });
        }
        if reusable {
            repo.reference(
                &refname,
                tip,
                true,
                "lockstep: the proposal branch as pushed",
            )
            .map_err(fail(format!("moving {refname}")))?;
            return Ok(Prepared {
                commit: tip,
                wrote: false,
            });
        }
    }
    let commit = writeback::write_commit(repo, &parent, tree, &req.message, author, signing_key)?;
    let log = format!("lockstep: {}", req.title());
    repo.reference(&refname, commit, true, &log)
        .map_err(fail(format!("moving {refname}")))?;
    // Forced: the branch is lockstep's own while no open request uses it.
    match git.push(target, &req.branch, true) {
        Ok(()) => {}
        // What a callback refused (a token, a host key), in the source's words.
        Err(GitError::Remote(found)) => return Err(ProposeError::Remote(*found)),
        Err(e) => return Err(e.into()),
    }
    Ok(Prepared {
        commit,
        wrote: true,
    })
}

/// What one pass did about a proposed wave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The plan status (without the `wave i/n (name): ` prefix).
    pub what: String,
    pub state: State,
    /// The open request the wave waits on, if any.
    pub proposal: Option<Proposal>,
    /// This pass opened a request.
    pub opened: bool,
    /// This pass wrote and pushed the branch.
    pub pushed: bool,
}

impl Outcome {
    fn waiting(p: Proposal, opened: bool, pushed: bool) -> Outcome {
        Outcome {
            what: format!("proposed as {p}, waiting for merge"),
            state: State::Pending,
            proposal: Some(p),
            opened,
            pushed,
        }
    }

    fn trouble(what: String) -> Outcome {
        Outcome {
            what,
            state: State::Pending,
            proposal: None,
            opened: false,
            pushed: false,
        }
    }

    /// Propose mode on a forge that cannot open requests (git notes).
    pub fn no_host() -> Outcome {
        Outcome {
            what: format!("{}; nothing proposed", crate::forge::PROPOSE_NEEDS_HOST),
            state: State::Error,
            proposal: None,
            opened: false,
            pushed: false,
        }
    }

    /// Propose mode with nowhere to push the branch.
    pub fn no_remote() -> Outcome {
        Outcome {
            what: "propose mode needs a remote to push the wave's branch to (a source url, or a \
                   local repository with an origin remote); nothing proposed"
                .into(),
            state: State::Error,
            proposal: None,
            opened: false,
            pushed: false,
        }
    }
}

/// One pass over a wave to propose: ask the host, make the branch carry the
/// wave's commit (`prepare`, run on the blocking pool), open a request when
/// none is open or declined. `opened_before` is a request this process
/// opened for the same objects earlier: a host's list may lag behind a
/// create, and must not make a second one.
pub async fn step<F, P>(
    forge: &F,
    req: &Request,
    opened_before: Option<&Proposal>,
    prepare: P,
) -> Outcome
where
    F: Forge + Propose,
    P: FnOnce(Vec<String>) -> Result<Prepared, ProposeError> + Send + 'static,
{
    let host = forge.host();
    let found = match forge.proposals(&req.branch, &req.base).await {
        Ok(f) => f,
        Err(e) => {
            return Outcome::trouble(format!("asking {host} for proposals failed: {e}"));
        }
    };
    if let Some(open) = open_one(&found) {
        return Outcome::waiting(open.clone(), false, false);
    }
    if let Some(p) = opened_before
        && p.state == ProposalState::Open
        && !found.iter().any(|f| f.number == p.number)
    {
        return Outcome::waiting(p.clone(), false, false);
    }
    // The heads of merged requests: their work is in the watched branch
    // (a squash merge leaves no ancestry to find it by).
    let merged: Vec<String> = found
        .iter()
        .filter(|p| p.state == ProposalState::Merged)
        .filter_map(|p| p.head_sha.clone())
        .collect();
    let prepared = match tokio::task::spawn_blocking(move || prepare(merged)).await {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => {
            return Outcome::trouble(format!("writing the branch {} failed: {e}", req.branch));
        }
        Err(e) => return Outcome::trouble(format!("writing the branch {}: {e}", req.branch)),
    };
    let sha = prepared.commit.to_string();
    if let Some(p) = found
        .iter()
        .find(|p| p.head_sha.as_deref() == Some(sha.as_str()))
    {
        let what = match p.state {
            ProposalState::Closed => format!(
                "declined: {p} was closed without merging; proposed again when {} moves",
                req.base
            ),
            ProposalState::Merged => {
                format!("{p} was merged; waiting for {} to show it", req.base)
            }
            ProposalState::Open => return Outcome::waiting(p.clone(), false, prepared.wrote),
        };
        return Outcome {
            what,
            state: State::Pending,
            proposal: None,
            opened: false,
            pushed: prepared.wrote,
        };
    }
    match forge.propose(&req.new_proposal()).await {
        Ok(p) => {
            tracing::info!(plan = %req.plan, wave = %req.wave_name, branch = %req.branch, commit = %sha, proposal = %p, "plan: proposed the wave");
            Outcome::waiting(p, true, prepared.wrote)
        }
        Err(e) => Outcome {
            what: format!("opening the {host} request from {} failed: {e}", req.branch),
            state: State::Pending,
            proposal: None,
            opened: false,
            pushed: prepared.wrote,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::Kind;

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .args([
                "-c",
                "user.name=Rev Iewer",
                "-c",
                "user.email=rev@example.com",
            ])
            .args(args)
            .current_dir(dir)
            .output()
            .expect("git runs");
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// The rule that lets lockstep replace a proposal branch ending in a
    /// commit it did not write: only when the host shows that commit as a
    /// merged request's head (a squash merge leaves it out of the watched
    /// branch). A reviewer's commit the host does not show as merged is
    /// never pushed over. Real repositories, a bare remote over file://.
    #[test]
    fn a_foreign_tip_is_pushed_over_only_once_its_request_merged() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (work, bare) = (dir.path().join("work"), dir.path().join("remote.git"));
        std::fs::create_dir_all(work.join("standalone/compute")).expect("mkdir");
        let nova = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("examples/fleet/standalone/compute/nova.yaml"),
        )
        .expect("example nova");
        std::fs::write(work.join("standalone/compute/nova.yaml"), nova).expect("write");
        git(dir.path(), &["init", "-q", "--bare", "remote.git"]);
        git(&work, &["init", "-q", "-b", "main"]);
        git(&work, &["add", "-A"]);
        git(&work, &["commit", "-q", "-m", "fleet"]);
        let url = format!("file://{}", bare.display());
        git(&work, &["push", "-q", &url, "main"]);
        let head = Oid::from_str(&git(&work, &["rev-parse", "HEAD"])).expect("oid");
        let branch = branch("p", 0);
        // A reviewer's own commit on the wave's branch.
        git(&work, &["checkout", "-q", "-b", "review"]);
        std::fs::write(work.join("REVIEW.md"), "a note\n").expect("write");
        git(&work, &["add", "-A"]);
        git(&work, &["commit", "-q", "-m", "review: a note"]);
        git(
            &work,
            &["push", "-q", &url, &format!("HEAD:refs/heads/{branch}")],
        );
        let theirs = git(&work, &["rev-parse", "HEAD"]);
        git(&work, &["checkout", "-q", "main"]);
        let req = Request {
            plan: "p".into(),
            wave: 0,
            waves: 1,
            wave_name: "all".into(),
            to: "2026.2".into(),
            objects: vec![Object {
                key: Key::new(Kind::Nova, "compute", "nova"),
                file: "standalone/compute/nova.yaml".into(),
                from: Some("2026.1".into()),
            }],
            head,
            base: "main".into(),
            branch: branch.clone(),
            message: "plan p: wave 1/1 (all) to 2026.2\n\nLockstep-Plan: p".into(),
            hop: None,
        };
        let author = crate::git::Author {
            name: "lockstep".into(),
            email: "lockstep@example.com".into(),
        };
        let target = PushTarget::new(&url, Default::default()).expect("target");
        let tip = || git(&bare, &["rev-parse", &format!("refs/heads/{branch}")]);
        match prepare(&work, &req, &author, None, &target, &[]) {
            Err(ProposeError::Foreign { commit, .. }) => assert_eq!(commit.to_string(), theirs),
            other => panic!("pushed over a reviewer's commit: {other:?}"),
        }
        assert_eq!(tip(), theirs, "left as it was");
        let other_merged = ["0".repeat(40)];
        assert!(matches!(
            prepare(&work, &req, &author, None, &target, &other_merged),
            Err(ProposeError::Foreign { .. })
        ));
        let merged = [theirs.clone()];
        let p = prepare(&work, &req, &author, None, &target, &merged).expect("pushed");
        assert!(p.wrote);
        assert_eq!(tip(), p.commit.to_string());
        assert_eq!(
            git(&bare, &["rev-parse", &format!("refs/heads/{branch}~1")]),
            head.to_string(),
            "the wave's commit on the watched branch's head"
        );

        // Someone pushes the wave's tree on the head under lockstep's
        // message with an acknowledgement added: it is written over with
        // lockstep's own commit, never proposed as lockstep's.
        let repo = git2::Repository::open(&work).expect("open");
        let parent = repo.find_commit(head).expect("head");
        let tree = crate::plan::writeback::wave_tree(&repo, &parent, &req.bumps()).expect("tree");
        let sig = git2::Signature::now("lockstep", "lockstep@example.com").expect("sig");
        let forged = repo
            .commit(
                None,
                &sig,
                &sig,
                &format!("{}\nLockstep-Ack: nova-api-removal\n", req.message),
                &repo.find_tree(tree).expect("tree"),
                &[&parent],
            )
            .expect("commit");
        git(
            &work,
            &[
                "push",
                "-q",
                "-f",
                &url,
                &format!("{forged}:refs/heads/{branch}"),
            ],
        );
        let p = prepare(&work, &req, &author, None, &target, &[]).expect("pushed over");
        assert!(p.wrote, "reused a commit lockstep did not write");
        assert_eq!(tip(), p.commit.to_string());
        assert_eq!(
            git(&bare, &["log", "-1", "--format=%B", &branch]).trim_end(),
            req.message,
            "lockstep's message, nothing added"
        );
    }

    #[test]
    fn branches_are_deterministic_valid_and_distinct() {
        assert_eq!(
            branch("fleet-to-2026.2", 0),
            "lockstep/plan/fleet-to-2026.2/wave-1"
        );
        assert_eq!(branch("rings", 2), "lockstep/plan/rings/wave-3");
        for name in ["a b", "a/b", "..x", "x.lock", "", "ü", "a..b", "-x-"] {
            let b = branch(name, 0);
            assert!(
                git2::Reference::is_valid_name(&format!("refs/heads/{b}")),
                "{name:?} → {b}"
            );
            assert!(
                b.starts_with("lockstep/plan/") && b.ends_with("/wave-1"),
                "{b}"
            );
        }
        assert_ne!(branch("a b", 0), branch("a/b", 0));
        assert_ne!(branch("a b", 0), branch("a-b", 0));
        // A fast-forward: the last hop keeps the plain name, earlier hops
        // name their release.
        assert_eq!(
            hop_branch("rings", 0, "2027.1", "2027.1"),
            "lockstep/plan/rings/wave-1"
        );
        let b = hop_branch("rings", 1, "2026.1", "2027.1");
        assert_eq!(b, "lockstep/plan/rings/wave-2-to-2026.1");
        assert!(git2::Reference::is_valid_name(&format!("refs/heads/{b}")));
    }

    #[test]
    fn the_body_names_every_object_and_its_hop() {
        let req = Request {
            plan: "fleet".into(),
            wave: 1,
            waves: 3,
            wave_name: "eu`x".into(),
            to: "2026.2".into(),
            objects: vec![
                Object {
                    key: Key::new(Kind::ControlPlane, "openstack", "prod"),
                    file: "clusters/prod/controlplane.yaml".into(),
                    from: Some("2026.1".into()),
                },
                Object {
                    key: Key::new(Kind::Nova, "compute", "nova"),
                    file: "standalone/compute/nova.yaml".into(),
                    from: None,
                },
            ],
            head: Oid::ZERO_SHA1,
            base: "main".into(),
            branch: branch("fleet", 1),
            message: "lockstep plan fleet: wave eu (2/3) to 2026.2\n\nbody\n".into(),
            hop: None,
        };
        assert_eq!(req.title(), "lockstep plan fleet: wave eu (2/3) to 2026.2");
        let body = req.body();
        assert!(
            body.contains("| `ControlPlane openstack/prod` | `clusters/prod/controlplane.yaml` | `2026.1` → `2026.2` |"),
            "{body}"
        );
        assert!(body.contains("| `Nova compute/nova` |"), "{body}");
        assert!(body.contains("wave 2/3 (`eu'x`)"), "{body}");
        assert!(body.contains("these 2 objects"), "{body}");
        assert_eq!(
            req.describe("proposed as #7, waiting for merge"),
            "wave 2/3 (eu`x): proposed as #7, waiting for merge"
        );
        // A fast-forward's status names the hop first.
        let ff = Request {
            hop: Some("hop 1/2 (2026.1 → 2026.2)".into()),
            ..req.clone()
        };
        assert_eq!(
            ff.describe("proposed as #7, waiting for merge"),
            "hop 1/2 (2026.1 → 2026.2), wave 2/3 (eu`x): proposed as #7, waiting for merge"
        );
        let p = req.new_proposal();
        assert_eq!(
            (p.head.as_str(), p.base.as_str()),
            ("lockstep/plan/fleet/wave-2", "main")
        );
    }

    #[test]
    fn names_from_git_stay_on_their_line_of_the_request() {
        let req = Request {
            plan: "fleet".into(),
            wave: 0,
            waves: 1,
            wave_name: "eu\n| forged | row |".into(),
            to: "2026.2".into(),
            objects: vec![Object {
                key: Key::new(Kind::Nova, "compute", "nova"),
                file: "standalone/\x1b[31mnova\u{202e}.yaml".into(),
                from: Some("2026.1".into()),
            }],
            head: Oid::ZERO_SHA1,
            base: "main".into(),
            branch: branch("fleet", 0),
            message: "lockstep plan fleet: wave e\u{202e}u (1/1) to 2026.2\n\nbody\n".into(),
            hop: None,
        };
        assert_eq!(
            req.title(),
            "lockstep plan fleet: wave e\\u{202e}u (1/1) to 2026.2"
        );
        let body = req.body();
        assert!(!body.contains(['\x1b', '\u{202e}']), "{body:?}");
        assert!(body.contains("(`eu\\n| forged | row |`)"), "{body}");
        assert!(
            body.contains("| `standalone/\\x1b[31mnova\\u{202e}.yaml` |"),
            "{body}"
        );
        assert_eq!(body.lines().filter(|l| l.starts_with("| `")).count(), 1);
    }
}
