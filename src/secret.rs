//! Secrets (API tokens, webhook secrets): read from a file or the
//! environment, never printed, compared in constant time.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use thiserror::Error;

/// A secret value. `Debug` and `Display` print a placeholder, so a secret
/// can sit in any struct that is logged without leaking.
///
/// One read from a file follows the file: a token rotated in a mounted
/// Kubernetes Secret (the kubelet swaps a symbolic link), or rewritten by a
/// person, is used from the next request on, without a restart. The file is
/// looked at (its size, time and inode) at most once a second, and read
/// again only when it changed; a new value that is not a valid secret (an
/// empty file mid-write, a second line) is not taken: the old one stays,
/// and a warning names the file. Clones share what they read.
#[derive(Clone)]
pub struct Secret(Arc<Inner>);

struct Inner {
    /// `None`: from the environment or the program, fixed.
    file: Option<Followed>,
    current: RwLock<Arc<str>>,
}

struct Followed {
    path: PathBuf,
    /// What a new value must be to be taken.
    shape: Shape,
    recheck: Duration,
    seen: Mutex<Seen>,
}

struct Seen {
    checked: Instant,
    stamp: Option<Stamp>,
    /// The stamp whose refusal was last warned about: warned once.
    warned: Option<Stamp>,
}

/// What tells a file changed without reading it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
    inode: u64,
}

impl Stamp {
    fn of(path: &Path) -> Option<Stamp> {
        let m = std::fs::metadata(path).ok()?;
        #[cfg(unix)]
        let inode = std::os::unix::fs::MetadataExt::ino(&m);
        #[cfg(not(unix))]
        let inode = 0;
        Some(Stamp {
            len: m.len(),
            modified: m.modified().ok(),
            inode,
        })
    }
}

/// What a secret file must hold; checked at start and at every change.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Shape {
    /// Any non-empty text (a webhook secret, a dashboard token).
    Any,
    /// One line of visible characters: it goes into an HTTP header ([`token`]).
    Token,
    /// One `user:password` line, both parts non-empty (a dashboard
    /// basic-auth file): a line without the colon could never match what a
    /// browser sends, and the dashboard would be locked with no word why.
    UserPassword,
}

impl Shape {
    fn check(self, v: &str, path: &Path) -> Result<(), SecretError> {
        let from = || format!("file {}", path.display());
        match self {
            Shape::Any => Ok(()),
            Shape::Token => one_line(v, from()),
            Shape::UserPassword => {
                let pair = !v.contains('\n')
                    && v.split_once(':')
                        .is_some_and(|(u, p)| !u.is_empty() && !p.is_empty());
                if pair {
                    Ok(())
                } else {
                    Err(SecretError::NotUserPassword(path.display().to_string()))
                }
            }
        }
    }
}

/// How often a secret file is looked at for a new value.
const RECHECK: Duration = Duration::from_secs(1);

#[derive(Debug, Error)]
pub enum SecretError {
    #[error("cannot read secret file {path}: {message}")]
    File { path: String, message: String },
    #[error("secret file {0} is empty")]
    EmptyFile(String),
    #[error("environment variable {0} is not set or empty")]
    Env(String),
    #[error(
        "the token in {0} holds a line break, a control character or surrounding spaces: a token is one line of visible characters"
    )]
    NotOneLine(String),
    #[error("the token in {0} is only spaces")]
    Blank(String),
    #[error("dashboard basic-auth file {0}: expected one line user:password")]
    NotUserPassword(String),
}

/// The variable a Git host's token is read from when no file and no other
/// variable is named.
pub const DEFAULT_TOKEN_ENV: &str = "LOCKSTEP_TOKEN";

/// A Git host's API token: from `file`; else from the variable `env`, which
/// must then be set (a typo in its name is an error, not an anonymous
/// request); else from [`DEFAULT_TOKEN_ENV`] when it is set. A token goes
/// into an HTTP header, so it must be one line of visible characters: a
/// second line pasted into the file would otherwise fail every request
/// with an HTTP library's error that names neither the file nor the cause.
pub fn token(file: Option<&Path>, env: Option<&str>) -> Result<Option<Secret>, SecretError> {
    // A file is checked as it is read, at start and at every change.
    let (secret, from) = match (file, env) {
        (Some(f), _) => return Secret::follow(f, Shape::Token).map(Some),
        (None, Some(v)) => (Secret::from_env(v)?, format!("environment variable {v}")),
        (None, None) => match Secret::from_env(DEFAULT_TOKEN_ENV) {
            Ok(s) => (s, format!("environment variable {DEFAULT_TOKEN_ENV}")),
            Err(_) => return Ok(None),
        },
    };
    one_line(&secret.expose(), from)?;
    Ok(Some(secret))
}

/// A token goes into an HTTP header: one line of visible characters.
fn one_line(v: &str, from: String) -> Result<(), SecretError> {
    if v.trim().is_empty() {
        return Err(SecretError::Blank(from));
    }
    if v.trim() != v || v.chars().any(char::is_control) {
        return Err(SecretError::NotOneLine(from));
    }
    Ok(())
}

/// The most a secret file may hold (a token, a webhook secret, a
/// dashboard credentials file of a few lines).
pub const MAX_FILE_BYTES: usize = 64 * 1024;

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self::fixed(value.into())
    }

    fn fixed(value: String) -> Self {
        Secret(Arc::new(Inner {
            file: None,
            current: RwLock::new(value.into()),
        }))
    }

    /// Reads a secret file (a mounted Kubernetes Secret, say), and follows
    /// it as it changes (`read_file` says how it is read).
    pub fn from_file(path: &Path) -> Result<Self, SecretError> {
        Self::follow(path, Shape::Any)
    }

    /// [`Secret::from_file`] of a dashboard basic-auth file: one
    /// `user:password` line, at start and at every change.
    pub fn user_password_file(path: &Path) -> Result<Self, SecretError> {
        Self::follow(path, Shape::UserPassword)
    }

    fn follow(path: &Path, shape: Shape) -> Result<Self, SecretError> {
        Self::follow_every(path, shape, RECHECK)
    }

    fn follow_every(path: &Path, shape: Shape, recheck: Duration) -> Result<Self, SecretError> {
        let stamp = Stamp::of(path);
        let value = read_file(path)?;
        shape.check(&value, path)?;
        Ok(Secret(Arc::new(Inner {
            file: Some(Followed {
                path: path.to_owned(),
                shape,
                recheck,
                seen: Mutex::new(Seen {
                    checked: Instant::now(),
                    stamp,
                    warned: None,
                }),
            }),
            current: RwLock::new(value.into()),
        })))
    }
}

/// Reads a secret file; one trailing newline is not part of the secret.
/// At most [`MAX_FILE_BYTES`] are read (`file::read_text`, the bounded read
/// every file a person names goes through): a path naming `/dev/zero` (or a
/// log file by mistake) is an error, not memory without end.
fn read_file(path: &Path) -> Result<String, SecretError> {
    use crate::yaml::ReadError;
    let limit = crate::yaml::Limit {
        bytes: MAX_FILE_BYTES,
        what: "secret file",
        raise: "a secret file holds one token or key",
    };
    let text = crate::file::read_text(path, &limit).map_err(|e| SecretError::File {
        path: path.display().to_string(),
        message: match e {
            ReadError::Io(e) => e.to_string(),
            ReadError::NotUtf8 { .. } => "not UTF-8 text".to_owned(),
            e @ ReadError::TooLarge { .. } => e.to_string(),
        },
    })?;
    let value = text.strip_suffix('\n').unwrap_or(&text);
    let value = value.strip_suffix('\r').unwrap_or(value);
    if value.is_empty() {
        return Err(SecretError::EmptyFile(path.display().to_string()));
    }
    Ok(value.to_owned())
}

impl Secret {
    pub fn from_env(var: &str) -> Result<Self, SecretError> {
        match std::env::var(var) {
            Ok(v) if !v.is_empty() => Ok(Self::fixed(v)),
            _ => Err(SecretError::Env(var.to_owned())),
        }
    }

    /// The value, for the one place that must send it (an HTTP header, an
    /// HMAC key): the file's newest valid value.
    pub fn expose(&self) -> Arc<str> {
        self.refresh();
        match self.0.current.read() {
            Ok(v) => v.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Reads the file again when it changed since it was last looked at
    /// (at most once per `recheck`).
    fn refresh(&self) {
        let Some(f) = &self.0.file else { return };
        let Ok(mut seen) = f.seen.try_lock() else {
            // Another request is looking: it takes what is new.
            return;
        };
        if seen.checked.elapsed() < f.recheck {
            return;
        }
        seen.checked = Instant::now();
        let stamp = Stamp::of(&f.path);
        if stamp == seen.stamp || stamp.is_none() {
            // Unchanged, or gone for a moment (a Secret's link swapped):
            // the value read last stands.
            return;
        }
        // Read again only a regular file: a path made a FIFO (or a device)
        // would block the request that looked, or never end.
        if !std::fs::metadata(&f.path).is_ok_and(|m| m.is_file()) {
            return;
        }
        let read = read_file(&f.path).and_then(|v| {
            f.shape.check(&v, &f.path)?;
            Ok(v)
        });
        match read {
            Ok(v) => {
                seen.stamp = stamp;
                seen.warned = None;
                let mut current = match self.0.current.write() {
                    Ok(c) => c,
                    Err(poisoned) => poisoned.into_inner(),
                };
                if **current != *v {
                    tracing::info!(file = %crate::escape::Escaped(&f.path.display().to_string()), "a secret file changed: its new value is used from now on");
                    *current = v.into();
                }
            }
            Err(e) => {
                // Not taken (a write half done, a second line): looked at
                // again next time; said once per state of the file.
                if seen.warned != stamp {
                    seen.warned = stamp;
                    tracing::warn!(error = %e, "a secret file changed to something that is not a secret; the value read before stays in use");
                }
            }
        }
    }

    /// Constant-time comparison with what a client presented. Both sides are
    /// hashed first so that not even the length leaks through timing.
    pub fn matches(&self, presented: &[u8]) -> bool {
        let a = Sha256::digest(self.expose().as_bytes());
        let b = Sha256::digest(presented);
        a.as_slice().ct_eq(b.as_slice()).into()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_printed_and_compared_exactly() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s:?} {s}"), "Secret(<redacted>) <redacted>");
        assert!(s.matches(b"hunter2"));
        assert!(!s.matches(b"hunter3"));
        assert!(!s.matches(b"hunter"));
        assert!(!s.matches(b""));
    }

    #[test]
    fn from_file_strips_one_newline() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("token");
        std::fs::write(&p, "abc\n").unwrap();
        assert_eq!(&*Secret::from_file(&p).unwrap().expose(), "abc");
        std::fs::write(&p, "\n").unwrap();
        assert!(Secret::from_file(&p).is_err());
        let err = Secret::from_file(&dir.path().join("missing")).unwrap_err();
        assert!(err.to_string().contains("missing"));
    }

    #[test]
    fn a_token_is_one_line_of_visible_characters() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("token");
        for (text, ok) in [
            ("ghp_abc\n", true),
            ("ghp_abc\r\n", true),
            ("ghp_abc\nghp_def\n", false),
            ("ghp_abc \n", false),
            ("\tghp_abc", false),
            ("   \n", false),
            ("ghp\u{7f}abc", false),
        ] {
            std::fs::write(&p, text).unwrap();
            let r = token(Some(&p), None);
            assert_eq!(r.is_ok(), ok, "{text:?}: {:?}", r.err());
            if let Err(e) = r {
                let e = e.to_string();
                assert!(
                    e.contains("token") && e.contains(&*p.to_string_lossy()),
                    "{e}"
                );
                assert!(!e.contains("ghp_"), "{e}");
            }
        }
        let e = token(None, Some("LOCKSTEP_TEST_NO_SUCH_VARIABLE")).unwrap_err();
        assert!(
            e.to_string().contains("LOCKSTEP_TEST_NO_SUCH_VARIABLE"),
            "{e}"
        );
    }

    /// A followed file: a new value is taken once the file changed (a new
    /// inode, a new size or time), one that is no secret is not, and
    /// nothing is looked at more often than the recheck allows.
    #[test]
    fn a_secret_file_is_followed_as_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("token");
        let write = |text: &str| {
            let tmp = dir.path().join("token.tmp");
            std::fs::write(&tmp, text).unwrap();
            std::fs::rename(&tmp, &p).unwrap();
        };
        write("one\n");
        let s = Secret::follow_every(&p, Shape::Token, Duration::ZERO).unwrap();
        let slow = Secret::follow_every(&p, Shape::Token, Duration::from_secs(3600)).unwrap();
        let clone = s.clone();
        assert_eq!(&*s.expose(), "one");
        write("two\n");
        assert_eq!(&*s.expose(), "two");
        assert_eq!(&*clone.expose(), "two", "clones share the value");
        assert!(s.matches(b"two") && !s.matches(b"one"));
        assert_eq!(&*slow.expose(), "one", "not looked at before its recheck");
        // Half written, two lines, gone: the value before stays.
        for bad in ["", "three\nfour\n", "  \n"] {
            write(bad);
            assert_eq!(&*s.expose(), "two", "{bad:?}");
        }
        std::fs::remove_file(&p).unwrap();
        assert_eq!(&*s.expose(), "two");
        write("five");
        assert_eq!(&*s.expose(), "five");
        // Fixed values do not move.
        assert_eq!(&*Secret::new("x").expose(), "x");
        // Made a FIFO: not opened (it would block the request that looked).
        std::fs::remove_file(&p).unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(&p)
            .status()
            .unwrap();
        assert!(made.success());
        assert_eq!(&*s.expose(), "five");
    }

    /// A dashboard basic-auth file is one `user:password` line at start and
    /// at every change: a rotation to a line without the colon (or with an
    /// empty user) is not taken.
    #[test]
    fn a_user_password_file_keeps_its_shape() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("basic");
        std::fs::write(&p, "ann\n").unwrap();
        let e = Secret::user_password_file(&p).unwrap_err().to_string();
        assert!(
            e.contains("expected one line user:password") && !e.contains("ann"),
            "{e}"
        );
        std::fs::write(&p, "ann:pw\n").unwrap();
        let s = Secret::follow_every(&p, Shape::UserPassword, Duration::ZERO).unwrap();
        for bad in [":\n", "ann\n", "ann:pw\nbob:pw\n"] {
            let tmp = dir.path().join("tmp");
            std::fs::write(&tmp, bad).unwrap();
            std::fs::rename(&tmp, &p).unwrap();
            assert_eq!(&*s.expose(), "ann:pw", "{bad:?}");
        }
        std::fs::write(dir.path().join("tmp"), "bob:pw2").unwrap();
        std::fs::rename(dir.path().join("tmp"), &p).unwrap();
        assert_eq!(&*s.expose(), "bob:pw2");
    }

    /// `/dev/zero` (or any path named by mistake) is a bounded read and an
    /// error naming the file, not memory without end.
    #[test]
    fn from_file_reads_a_bounded_amount() {
        let err = Secret::from_file(Path::new("/dev/zero"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("/dev/zero") && err.contains("larger than"),
            "{err}"
        );
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("token");
        std::fs::write(&p, "x".repeat(MAX_FILE_BYTES)).unwrap();
        assert_eq!(
            Secret::from_file(&p).unwrap().expose().len(),
            MAX_FILE_BYTES
        );
        std::fs::write(&p, [0xff, 0xfe]).unwrap();
        assert!(
            Secret::from_file(&p)
                .unwrap_err()
                .to_string()
                .contains("UTF-8")
        );
    }
}
