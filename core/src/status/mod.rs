//! Commit statuses as lockstep means them: the states, the contexts (one
//! per cluster, one per object) and what a status says ([`describe`]).
//! Pure: the Git hosts that carry them are the shell's `forge`.

pub mod describe;

use std::fmt;

use sha2::{Digest, Sha256};

/// lockstep's status states; each host maps them onto its own vocabulary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum State {
    /// Judging, or waiting to apply.
    Pending,
    /// An accepted hop being applied and followed.
    Running,
    Success,
    /// Refused, or the upgrade failed.
    Failure,
    /// lockstep could not decide (an unreadable repository, say).
    Error,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Running => "running",
            State::Success => "success",
            State::Failure => "failure",
            State::Error => "error",
        }
    }
}

/// A commit status as lockstep means it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Status {
    pub state: State,
    pub context: String,
    pub description: String,
    pub target_url: Option<String>,
}

/// Status contexts that can never collide across clusters: every cluster
/// writes under its own name, so two clusters watching one repository do not
/// overwrite each other's verdicts (Flux's mistake).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Context(String);

/// Whether `name` may name a cluster in contexts: 1 to 63 of `A-Z a-z 0-9
/// . _ -`. A `/` would let one cluster's commit context be another's
/// object context (cluster `eu/compute/nova` writing over cluster `eu`'s
/// Nova line), and anything else is text a host or a note shows.
pub fn valid_cluster_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 63 {
        return Err(format!("1 to 63 characters, not {}", name.len()));
    }
    match name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        Some(c) => Err(format!(
            "letters, digits, '.', '_' and '-' only, not {:?} (statuses go under lockstep/<cluster>/<namespace>/<name>)",
            c
        )),
        None => Ok(()),
    }
}

impl Context {
    /// `lockstep/<cluster>`: the verdict on a commit.
    pub fn commit(cluster: &str) -> Self {
        Self(format!("lockstep/{cluster}"))
    }

    /// `lockstep/<cluster>/review`: the gate's verdict on a change before
    /// it lands (a pull request's head, a `check --report` range). Apart
    /// from [`Self::commit`], which the daemon holds pending on a branch
    /// commit until what it carries is applied: a fast-forward merge
    /// brings the reviewed commit itself to the branch, and a review's
    /// success there would read as done before the apply.
    pub fn review(cluster: &str) -> Self {
        Self(format!("lockstep/{cluster}/review"))
    }

    /// `lockstep/<cluster>/<namespace>/<name>`: one object's upgrade progress.
    pub fn object(cluster: &str, namespace: &str, name: &str) -> Self {
        Self(format!("lockstep/{cluster}/{namespace}/{name}"))
    }

    /// A context as text already holds it (a status's `context` field),
    /// to be fitted to a host's limit.
    pub fn from_text(text: impl Into<String>) -> Self {
        Self(text.into())
    }

    /// The context within `max` characters: longer ones keep their start and
    /// end in a hash of the whole, so two long contexts stay distinct.
    pub fn fit(&self, max: usize) -> String {
        if self.0.chars().count() <= max {
            return self.0.clone();
        }
        let digest = Sha256::digest(self.0.as_bytes());
        let suffix = format!("~{}", &hex::encode(digest)[..10]);
        let keep = max.saturating_sub(suffix.len());
        let head: String = self.0.chars().take(keep).collect();
        format!("{head}{suffix}")
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Shortens text to `max` characters, marking the cut with an ellipsis.
pub fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contexts_fit_and_stay_distinct() {
        let c = Context::object("eu-de-1", "openstack", "prod-nova");
        assert_eq!(c.fit(255), "lockstep/eu-de-1/openstack/prod-nova");
        let long_a = Context::object(&"c".repeat(200), "ns", &format!("{}a", "n".repeat(100)));
        let long_b = Context::object(&"c".repeat(200), "ns", &format!("{}b", "n".repeat(100)));
        let (a, b) = (long_a.fit(255), long_b.fit(255));
        assert_eq!(a.chars().count(), 255);
        assert_ne!(a, b, "the hash suffix keeps them apart");
        assert!(a.starts_with("lockstep/ccc"));
        assert_eq!(long_a.fit(255), a, "stable");
    }

    #[test]
    fn shorten_respects_characters() {
        assert_eq!(shorten("abc", 3), "abc");
        assert_eq!(shorten("abcd", 3), "ab…");
        assert_eq!(shorten("→→→→", 3).chars().count(), 3);
    }
}
