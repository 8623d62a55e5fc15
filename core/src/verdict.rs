//! The gate's judgment of a range of history, as plain values: what
//! `check` prints, what a status says and what `rollout` turns into chains
//! of steps. The shell's walker (`history`) fills them in from Git.

use std::sync::Arc;

use serde::Serialize;

use crate::gate::{ObjectVerdict, Verdict};
use crate::manifest::Skip;

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckReport<M = ()> {
    pub verdict: Verdict,
    /// The starting baseline (commit or tree id), null for the empty tree.
    pub base: Option<String>,
    pub head: String,
    pub commits: Vec<CommitReport>,
    /// What the walker keeps to judge on from here (the shell's floors,
    /// tied to Git's object ids); the core never looks at it.
    #[serde(skip)]
    pub memory: M,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CommitReport {
    pub sha: String,
    pub summary: String,
    pub verdict: Verdict,
    pub objects: Vec<ObjectVerdict>,
    /// Content that is not a Kubernetes object, passed over.
    pub skipped: Vec<SkipReport>,
    /// Manifest files this commit changed relative to its baseline.
    pub files_changed: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct SkipReport {
    pub file: Arc<str>,
    pub line: u32,
    pub message: String,
}

impl From<&Skip> for SkipReport {
    fn from(s: &Skip) -> Self {
        Self {
            file: s.file.clone(),
            line: s.line,
            message: s.message.clone(),
        }
    }
}
