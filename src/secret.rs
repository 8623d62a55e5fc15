//! Secrets (API tokens, webhook secrets): read from a file or the
//! environment, never printed, compared in constant time.

use std::fmt;
use std::path::Path;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use thiserror::Error;

/// A secret value. `Debug` and `Display` print a placeholder, so a secret
/// can sit in any struct that is logged without leaking.
#[derive(Clone)]
pub struct Secret(String);

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
    let (secret, from) = match (file, env) {
        (Some(f), _) => (Secret::from_file(f)?, format!("file {}", f.display())),
        (None, Some(v)) => (Secret::from_env(v)?, format!("environment variable {v}")),
        (None, None) => match Secret::from_env(DEFAULT_TOKEN_ENV) {
            Ok(s) => (s, format!("environment variable {DEFAULT_TOKEN_ENV}")),
            Err(_) => return Ok(None),
        },
    };
    let v = secret.expose();
    if v.trim().is_empty() {
        return Err(SecretError::Blank(from));
    }
    if v.trim() != v || v.chars().any(char::is_control) {
        return Err(SecretError::NotOneLine(from));
    }
    Ok(Some(secret))
}

/// The most a secret file may hold (a token, a webhook secret, a
/// dashboard credentials file of a few lines).
pub const MAX_FILE_BYTES: usize = 64 * 1024;

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// Reads a secret file (a mounted Kubernetes Secret, say); one trailing
    /// newline is not part of the secret.
    /// At most [`MAX_FILE_BYTES`] are read (`file::read_text`, the bounded
    /// read every file a person names goes through): a path naming
    /// `/dev/zero` (or a log file by mistake) is an error, not memory
    /// without end.
    pub fn from_file(path: &Path) -> Result<Self, SecretError> {
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
        Ok(Self(value.to_owned()))
    }

    pub fn from_env(var: &str) -> Result<Self, SecretError> {
        match std::env::var(var) {
            Ok(v) if !v.is_empty() => Ok(Self(v)),
            _ => Err(SecretError::Env(var.to_owned())),
        }
    }

    /// The value, for the one place that must send it (an HTTP header, an HMAC key).
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Constant-time comparison with what a client presented. Both sides are
    /// hashed first so that not even the length leaks through timing.
    pub fn matches(&self, presented: &[u8]) -> bool {
        let a = Sha256::digest(self.0.as_bytes());
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
        assert_eq!(Secret::from_file(&p).unwrap().expose(), "abc");
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
