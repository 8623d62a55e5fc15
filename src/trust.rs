//! Who may sign the commits the gate judges (`docs/gate.md`, "Signed
//! commits").
//!
//! Two kinds of trust, as git knows them: SSH keys in git's allowed-signers
//! format (`gpg.ssh.allowedSignersFile`, `ssh-keygen(1)` "ALLOWED SIGNERS")
//! and OpenPGP public keys, armored, one or more per `.asc` file of a
//! directory. Loading reads the files once; [`TrustPolicy::verify`] is pure:
//! a signature, the bytes it signs, the commit's time and its committer's
//! email in, the signer or the reason it is not trusted out.
//!
//! A signature counts only when the key was trusted at the commit's time
//! (the committer timestamp against `valid-after`/`valid-before`, or an
//! OpenPGP key's creation and expiry) and the key is trusted for the
//! committer: an SSH line's principals match the committer's email (with
//! `*` and `?` globs and `!` negations, as OpenSSH matches them), an
//! OpenPGP key has a user ID with that email.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use pgp::composed::{Deserializable as _, DetachedSignature, SignedPublicKey};
use pgp::packet::SignatureType;
use pgp::types::KeyDetails as _;
use ssh_key::{HashAlg, PublicKey, SshSig};
use thiserror::Error;

/// The namespace git signs commits in (`ssh-keygen -Y sign -n git`).
pub const GIT_NAMESPACE: &str = "git";

/// Largest allowed-signers file or keyring file read (1 MiB): trust lists
/// are small, and a larger file is a mistake.
const MAX_TRUST_FILE_BYTES: u64 = 1 << 20;

/// Reading a trust policy failed: a file is missing, unreadable or holds a
/// line or key lockstep cannot use. Each names the file (and line).
#[derive(Debug, Error)]
pub enum TrustError {
    #[error("{path}: cannot read the {what}: {message}")]
    Read {
        path: PathBuf,
        what: &'static str,
        message: String,
    },
    #[error(
        "{path}:{line}: {message} (allowed-signers lines are `PRINCIPALS [OPTIONS] KEYTYPE BASE64KEY [COMMENT]`, as in git's gpg.ssh.allowedSignersFile)"
    )]
    Line {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error("{path}: {message}")]
    Key { path: PathBuf, message: String },
    #[error("{path}: no trusted key in it; {hint}")]
    Empty { path: PathBuf, hint: &'static str },
}

/// Why a commit's signature does not make it trusted. The messages say
/// what to do; they quote nothing from Git but the committer's email and
/// key material, and are escaped where shown like every gate message.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum Untrusted {
    #[error(
        "the commit is not signed; sign it with a trusted key (`git commit -S`, or `git commit --amend -S` and push again)"
    )]
    Unsigned,
    #[error("its signature cannot be read ({0}); sign the commit again (`git commit --amend -S`)")]
    Malformed(String),
    #[error(
        "it is signed with {kind}, and no {kind} key is trusted here ({flag} is not given); sign with a trusted key, or configure {flag}"
    )]
    NoPolicy {
        kind: &'static str,
        flag: &'static str,
    },
    #[error(
        "it is signed with a signature format lockstep does not verify ({0}); sign with SSH (gpg.format ssh) or OpenPGP"
    )]
    UnsupportedFormat(String),
    #[error(
        "its SSH signature is in namespace {0:?}, not \"git\": it was not made for a commit; sign it with `git commit -S`"
    )]
    WrongNamespace(String),
    #[error(
        "signed by {key}, which is not trusted (no entry in {origin}); if it should be, add it there, else sign with a trusted key"
    )]
    UnknownKey { key: String, origin: String },
    #[error(
        "signed by {key}, which signs no commit: {why} ({origin}); sign with a trusted key that can"
    )]
    CannotSign {
        key: String,
        why: &'static str,
        origin: String,
    },
    #[error(
        "the signature by {key} does not match the commit's content: the commit was changed after it was signed; sign it again (`git commit --amend -S`)"
    )]
    BadSignature { key: String },
    #[error(
        "signed by {key}, which is trusted for {principals}, not for the committer <{email}> ({origin}); commit as one of those, or add the committer's email to the key's principals"
    )]
    PrincipalMismatch {
        key: String,
        principals: String,
        email: String,
        origin: String,
    },
    #[error(
        "signed by {key} (principal {principal}), which is trusted only for namespaces {namespaces:?}, not \"git\" ({origin}); add git to its namespaces"
    )]
    NamespaceNotAllowed {
        key: String,
        principal: String,
        namespaces: String,
        origin: String,
    },
    #[error(
        "signed by {key} (principal {principal}) at {when}, when the key was {why} ({origin}); sign the commit again with a key trusted now (`git commit --amend -S`)"
    )]
    OutsideValidity {
        key: String,
        principal: String,
        when: String,
        why: String,
        origin: String,
    },
}

/// Who signed a trusted commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signer {
    pub kind: SignerKind,
    /// `SHA256:...` for SSH, the primary key's hex fingerprint for OpenPGP.
    pub fingerprint: String,
    /// The principal pattern that matched (SSH) or the user ID (OpenPGP).
    pub principal: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SignerKind {
    Ssh,
    OpenPgp,
}

impl fmt::Display for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            SignerKind::Ssh => "SSH key",
            SignerKind::OpenPgp => "OpenPGP key",
        };
        write!(f, "{kind} {} ({})", self.fingerprint, self.principal)
    }
}

/// The keys whose signatures make a commit trusted.
#[derive(Clone, Debug, Default)]
pub struct TrustPolicy {
    pub ssh: Option<AllowedSigners>,
    pub openpgp: Option<Keyring>,
}

impl TrustPolicy {
    /// Reads the policy's files; `None` when neither is given (no policy:
    /// every commit is judged on its content alone).
    pub fn load(
        allowed_signers: Option<&Path>,
        trusted_keys: Option<&Path>,
    ) -> Result<Option<Arc<Self>>, TrustError> {
        if allowed_signers.is_none() && trusted_keys.is_none() {
            return Ok(None);
        }
        let ssh = allowed_signers.map(AllowedSigners::load).transpose()?;
        let openpgp = trusted_keys.map(Keyring::load).transpose()?;
        Ok(Some(Arc::new(Self { ssh, openpgp })))
    }

    /// Whether `signature` (a commit's `gpgsig` header) over `signed_data`
    /// comes from a key trusted for `committer_email` at `when` (the
    /// committer timestamp, seconds since the epoch).
    pub fn verify(
        &self,
        signature: &[u8],
        signed_data: &[u8],
        when: i64,
        committer_email: &str,
    ) -> Result<Signer, Untrusted> {
        let text = std::str::from_utf8(signature)
            .map_err(|_| Untrusted::Malformed("not text".into()))?
            .trim_start();
        if text.starts_with("-----BEGIN SSH SIGNATURE-----") {
            let Some(ssh) = &self.ssh else {
                return Err(Untrusted::NoPolicy {
                    kind: "an SSH key",
                    flag: "--allowed-signers",
                });
            };
            ssh.verify(text, signed_data, when, committer_email)
        } else if text.starts_with("-----BEGIN PGP SIGNATURE-----") {
            let Some(keyring) = &self.openpgp else {
                return Err(Untrusted::NoPolicy {
                    kind: "an OpenPGP key",
                    flag: "--trusted-keys",
                });
            };
            keyring.verify(text, signed_data, when, committer_email)
        } else {
            // The armor's label (`X509 SIGNED MESSAGE` from gpgsm), not
            // whatever else the committer put there.
            let first = text.lines().next().unwrap_or("");
            let label = first
                .strip_prefix("-----BEGIN ")
                .and_then(|l| l.strip_suffix("-----"))
                .filter(|l| {
                    l.len() <= 40
                        && l.bytes()
                            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b' ')
                });
            Err(Untrusted::UnsupportedFormat(match label {
                Some(l) => format!("a {l}"),
                None => "not an armored signature".into(),
            }))
        }
    }

    /// Whether the SSH public key `key` (an OpenSSH public key line, as in
    /// a `.pub` file) is trusted for `email` at `when`: lockstep's own plan
    /// commits are judged like anyone's, so their signing key must be.
    pub fn trusts_ssh_key(&self, key: &str, email: &str, when: i64) -> Result<(), String> {
        let Some(ssh) = &self.ssh else {
            return Err("no --allowed-signers is configured, so no SSH key is trusted".into());
        };
        let key = PublicKey::from_openssh(key.trim()).map_err(|e| e.to_string())?;
        ssh.trusted_entry(key.key_data(), when, email)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

// ---------------------------------------------------------------- SSH

/// git's allowed-signers file, parsed.
#[derive(Clone, Debug)]
pub struct AllowedSigners {
    pub path: PathBuf,
    pub entries: Vec<AllowedSigner>,
}

/// One line of an allowed-signers file.
#[derive(Clone, Debug, PartialEq)]
pub struct AllowedSigner {
    pub line: usize,
    /// Comma-separated patterns, as written.
    pub principals: String,
    /// `namespaces="..."`: the namespaces the key may sign in (`None`: any).
    pub namespaces: Option<Vec<String>>,
    /// Seconds since the epoch; the key is trusted from this time on.
    pub valid_after: Option<i64>,
    /// Seconds since the epoch; the key is trusted up to this time.
    pub valid_before: Option<i64>,
    pub key: PublicKey,
}

impl AllowedSigners {
    pub fn load(path: &Path) -> Result<Self, TrustError> {
        let text = read_small(path, "allowed-signers file")?;
        Self::parse(path, &text)
    }

    /// Parses the file's text. Every line that is not blank or a comment
    /// must be an entry lockstep can use: a line it cannot read would
    /// silently distrust (or, misread, trust) a key.
    pub fn parse(path: &Path, text: &str) -> Result<Self, TrustError> {
        let mut entries = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let entry = parse_line(line).map_err(|message| TrustError::Line {
                path: path.to_owned(),
                line: i + 1,
                message,
            })?;
            entries.push(AllowedSigner {
                line: i + 1,
                ..entry
            });
        }
        if entries.is_empty() {
            return Err(TrustError::Empty {
                path: path.to_owned(),
                hint: "add a line `PRINCIPAL KEYTYPE BASE64KEY` per trusted key (the key from its .pub file)",
            });
        }
        Ok(Self {
            path: path.to_owned(),
            entries,
        })
    }

    fn verify(
        &self,
        armored: &str,
        signed_data: &[u8],
        when: i64,
        email: &str,
    ) -> Result<Signer, Untrusted> {
        // Blank lines around the armor (a signer that kept the newline
        // `ssh-keygen` ends its file with) do not make it another
        // signature; `git verify-commit` reads past them too.
        let sig: SshSig = armored.trim().parse().map_err(|e: ssh_key::Error| {
            // The library's words stay in the debug log: a refusal
            // names what is wrong in ours.
            tracing::debug!(error = %e, "an SSH signature does not parse");
            Untrusted::Malformed("an SSH signature whose armor or encoding does not parse".into())
        })?;
        if sig.namespace() != GIT_NAMESPACE {
            return Err(Untrusted::WrongNamespace(sig.namespace().to_owned()));
        }
        let key = PublicKey::from(sig.public_key().clone());
        let fp = fingerprint(&key);
        if !self
            .entries
            .iter()
            .any(|e| e.key.key_data() == key.key_data())
        {
            return Err(Untrusted::UnknownKey {
                key: format!("SSH key {fp}"),
                origin: self.path.display().to_string(),
            });
        }
        // Security-key (`sk-`) and DSA signatures: ssh-key cannot check
        // them, and "changed after signing" would be the wrong answer.
        if !matches!(
            key.algorithm(),
            ssh_key::Algorithm::Ed25519
                | ssh_key::Algorithm::Rsa { .. }
                | ssh_key::Algorithm::Ecdsa { .. }
        ) {
            return Err(Untrusted::UnsupportedFormat(format!(
                "an SSH signature by a {} key; lockstep verifies ed25519, ecdsa and rsa keys",
                key.algorithm()
            )));
        }
        key.verify(GIT_NAMESPACE, signed_data, &sig)
            .map_err(|_| Untrusted::BadSignature {
                key: format!("SSH key {fp}"),
            })?;
        let entry = self.trusted_entry(key.key_data(), when, email)?;
        Ok(Signer {
            kind: SignerKind::Ssh,
            fingerprint: fp,
            principal: entry.principals.clone(),
        })
    }

    /// The line that trusts `key` for `email` in namespace git at `when`;
    /// else why none does (the first line's reason in the order: principal,
    /// namespace, validity).
    fn trusted_entry(
        &self,
        key: &ssh_key::public::KeyData,
        when: i64,
        email: &str,
    ) -> Result<&AllowedSigner, Untrusted> {
        let fp = fingerprint(&PublicKey::from(key.clone()));
        let name = format!("SSH key {fp}");
        let source = |e: &AllowedSigner| format!("{}:{}", self.path.display(), e.line);
        let lines: Vec<&AllowedSigner> = self
            .entries
            .iter()
            .filter(|e| e.key.key_data() == key)
            .collect();
        let Some(first) = lines.first() else {
            return Err(Untrusted::UnknownKey {
                key: name,
                origin: self.path.display().to_string(),
            });
        };
        let for_email: Vec<&AllowedSigner> = lines
            .iter()
            .copied()
            .filter(|e| principals_match(&e.principals, email))
            .collect();
        let Some(first_for_email) = for_email.first() else {
            return Err(Untrusted::PrincipalMismatch {
                key: name,
                principals: lines
                    .iter()
                    .map(|e| e.principals.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                email: email.to_owned(),
                origin: source(first),
            });
        };
        let in_git: Vec<&AllowedSigner> = for_email
            .iter()
            .copied()
            .filter(|e| {
                e.namespaces
                    .as_ref()
                    .is_none_or(|ns| ns.iter().any(|n| n == GIT_NAMESPACE))
            })
            .collect();
        let Some(first_in_git) = in_git.first() else {
            return Err(Untrusted::NamespaceNotAllowed {
                key: name,
                principal: first_for_email.principals.clone(),
                namespaces: first_for_email
                    .namespaces
                    .clone()
                    .unwrap_or_default()
                    .join(","),
                origin: source(first_for_email),
            });
        };
        if let Some(e) = in_git.iter().find(|e| valid_at(e, when).is_ok()) {
            return Ok(e);
        }
        let why = valid_at(first_in_git, when).err().unwrap_or_default();
        Err(Untrusted::OutsideValidity {
            key: name,
            principal: first_in_git.principals.clone(),
            when: show_time(when),
            why,
            origin: source(first_in_git),
        })
    }
}

fn fingerprint(key: &PublicKey) -> String {
    key.fingerprint(HashAlg::Sha256).to_string()
}

/// As OpenSSH's `sshsig_check_valid`: trusted from `valid-after` on, up to
/// and including `valid-before`.
fn valid_at(e: &AllowedSigner, when: i64) -> Result<(), String> {
    if let Some(after) = e.valid_after
        && when < after
    {
        return Err(format!("not yet valid (valid-after {})", show_time(after)));
    }
    if let Some(before) = e.valid_before
        && when > before
    {
        return Err(format!(
            "no longer valid (valid-before {})",
            show_time(before)
        ));
    }
    Ok(())
}

fn show_time(secs: i64) -> String {
    jiff::Timestamp::from_second(secs).map_or_else(|_| format!("{secs}s"), |t| t.to_string())
}

/// OpenSSH's `match_pattern_list` for principals: comma-separated patterns
/// with `*` and `?`; a matching `!pattern` refuses whatever else matches.
/// Case-sensitive, as OpenSSH matches principals.
pub fn principals_match(principals: &str, email: &str) -> bool {
    let mut matched = false;
    for p in principals.split(',') {
        let (negated, p) = match p.strip_prefix('!') {
            Some(rest) => (true, rest),
            None => (false, p),
        };
        if glob(p.as_bytes(), email.as_bytes()) {
            if negated {
                return false;
            }
            matched = true;
        }
    }
    matched
}

fn glob(pattern: &[u8], text: &[u8]) -> bool {
    // Iterative wildcard match with one backtrack point (linear enough for
    // the short strings here, and no recursion a hostile file could deepen).
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(&c) if c == b'?' || c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p.min(pattern.len())..].iter().all(|&c| c == b'*')
}

/// Splits off one field: a double-quoted string (quotes removed) or a run
/// of non-blank characters in which quoted parts may hold blanks (options
/// like `namespaces="a,b"`). Returns the field and the rest.
fn field(s: &str) -> Result<(String, &str), String> {
    let s = s.trim_start();
    if let Some(rest) = s.strip_prefix('"') {
        let end = rest
            .find('"')
            .ok_or_else(|| "a quote that is never closed".to_owned())?;
        return Ok((rest[..end].to_owned(), &rest[end + 1..]));
    }
    let mut in_quotes = false;
    for (i, c) in s.char_indices() {
        match c {
            '"' => in_quotes = !in_quotes,
            c if c.is_whitespace() && !in_quotes => return Ok((s[..i].to_owned(), &s[i..])),
            _ => {}
        }
    }
    if in_quotes {
        return Err("a quote that is never closed".into());
    }
    Ok((s.to_owned(), ""))
}

fn is_key_type(s: &str) -> bool {
    s.starts_with("ssh-") || s.starts_with("ecdsa-sha2-") || s.starts_with("sk-")
}

fn parse_line(line: &str) -> Result<AllowedSigner, String> {
    let (principals, rest) = field(line)?;
    if principals.is_empty() {
        return Err("no principals".into());
    }
    let (next, mut rest) = field(rest)?;
    let mut namespaces = None;
    let mut valid_after = None;
    let mut valid_before = None;
    let key_type = if is_key_type(&next) || next.is_empty() {
        next
    } else {
        for opt in split_options(&next)? {
            let (name, value) = match opt.split_once('=') {
                Some((n, v)) => (n, Some(unquote(v)?)),
                None => (opt.as_str(), None),
            };
            match (name.to_ascii_lowercase().as_str(), value) {
                ("cert-authority", None) => {
                    return Err(
                        "cert-authority (trusting certificates signed by a CA) is not supported; list each signer's own key instead"
                            .into(),
                    );
                }
                ("namespaces", Some(v)) => {
                    namespaces = Some(v.split(',').map(|n| n.trim().to_owned()).collect());
                }
                ("valid-after", Some(v)) => valid_after = Some(parse_time(&v)?),
                ("valid-before", Some(v)) => valid_before = Some(parse_time(&v)?),
                (other, _) => {
                    return Err(format!(
                        "unknown or malformed option {other:?} (known: namespaces=\"...\", valid-after=\"YYYYMMDD[HHMM[SS]][Z]\", valid-before=...)"
                    ));
                }
            }
        }
        let (t, r) = field(rest)?;
        rest = r;
        t
    };
    if key_type.is_empty() {
        return Err("no key after the principals".into());
    }
    let (blob, _comment) = field(rest)?;
    if blob.is_empty() {
        return Err(format!("key type {key_type} without its base64 key"));
    }
    let key = PublicKey::from_openssh(&format!("{key_type} {blob}"))
        .map_err(|e| format!("the key does not parse ({e})"))?;
    Ok(AllowedSigner {
        line: 0,
        principals,
        namespaces,
        valid_after,
        valid_before,
        key,
    })
}

/// Options are comma-separated; commas inside quotes belong to the value.
fn split_options(s: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_quotes = false;
    for c in s.chars() {
        match c {
            '"' => {
                in_quotes = !in_quotes;
                cur.push(c);
            }
            ',' if !in_quotes => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    if in_quotes {
        return Err("a quote that is never closed".into());
    }
    out.push(cur);
    if out.iter().any(String::is_empty) {
        return Err("an empty option (two commas, or a trailing comma)".into());
    }
    Ok(out)
}

fn unquote(v: &str) -> Result<String, String> {
    match v.strip_prefix('"') {
        Some(rest) => rest
            .strip_suffix('"')
            .map(str::to_owned)
            .ok_or_else(|| format!("option value {v} has an unclosed quote")),
        None => Ok(v.to_owned()),
    }
}

/// `YYYYMMDD`, `YYYYMMDDHHMM` or `YYYYMMDDHHMMSS`, optionally followed by
/// `Z` for UTC; without it, the system's time zone (as OpenSSH reads it).
fn parse_time(v: &str) -> Result<i64, String> {
    let bad = || format!("time {v:?}: expected YYYYMMDD[HHMM[SS]][Z]");
    let (digits, utc) = match v.strip_suffix(['Z', 'z']) {
        Some(d) => (d, true),
        None => (v, false),
    };
    if !digits.bytes().all(|b| b.is_ascii_digit()) || ![8, 12, 14].contains(&digits.len()) {
        return Err(bad());
    }
    let num = |r: std::ops::Range<usize>| -> Result<i32, String> {
        digits
            .get(r)
            .map_or(Ok(0), |s| s.parse::<i32>().map_err(|_| bad()))
    };
    let (y, mo, d) = (num(0..4)?, num(4..6)?, num(6..8)?);
    let (h, mi, s) = (num(8..10)?, num(10..12)?, num(12..14)?);
    let narrow = |x: i32| i8::try_from(x).map_err(|_| bad());
    let dt = jiff::civil::DateTime::new(
        i16::try_from(y).map_err(|_| bad())?,
        narrow(mo)?,
        narrow(d)?,
        narrow(h)?,
        narrow(mi)?,
        narrow(s)?,
        0,
    )
    .map_err(|e| format!("{}: {e}", bad()))?;
    let tz = if utc {
        jiff::tz::TimeZone::UTC
    } else {
        jiff::tz::TimeZone::system()
    };
    dt.to_zoned(tz)
        .map(|z| z.timestamp().as_second())
        .map_err(|e| format!("{}: {e}", bad()))
}

// ------------------------------------------------------------ OpenPGP

/// Armored OpenPGP public keys: every `.asc` file of a directory.
#[derive(Clone, Debug)]
pub struct Keyring {
    pub path: PathBuf,
    pub keys: Vec<(SignedPublicKey, PathBuf)>,
}

impl Keyring {
    pub fn load(dir: &Path) -> Result<Self, TrustError> {
        let read_err = |e: std::io::Error| TrustError::Read {
            path: dir.to_owned(),
            what: "trusted-keys directory",
            message: e.to_string(),
        };
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(read_err)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "asc") && p.is_file())
            .collect();
        files.sort();
        let mut keys = Vec::new();
        for f in files {
            let text = read_small(&f, "armored OpenPGP key")?;
            let bad = |message: String| TrustError::Key {
                path: f.clone(),
                message,
            };
            let (parsed, _) = SignedPublicKey::from_armor_many(text.as_bytes()).map_err(|e| {
                bad(format!(
                    "not an armored OpenPGP public key ({e}); export one with `gpg --armor --export KEYID`"
                ))
            })?;
            let mut n = 0;
            for k in parsed {
                let mut k = k.map_err(|e| bad(format!("a key does not parse: {e}")))?;
                // Certifications of its user IDs by other people's keys
                // (`gpg --export` includes them) are not the key's own:
                // they would not verify against it, and vouch for nothing
                // here. Only self-signatures (or unnamed ones, which must
                // then verify as such) are kept.
                let (fp, id) = (k.primary_key.fingerprint(), k.primary_key.legacy_key_id());
                let own = |s: &pgp::packet::Signature| {
                    let (fps, ids) = (s.issuer_fingerprint(), s.issuer_key_id());
                    (fps.is_empty() && ids.is_empty())
                        || fps.iter().any(|f| **f == fp)
                        || ids.iter().any(|i| **i == id)
                };
                for u in &mut k.details.users {
                    u.signatures.retain(own);
                }
                for a in &mut k.details.user_attributes {
                    a.signatures.retain(own);
                }
                // One left with no signature of the key's own names no
                // one (and would fail the check below for want of one).
                k.details.users.retain(|u| !u.signatures.is_empty());
                k.details
                    .user_attributes
                    .retain(|a| !a.signatures.is_empty());
                k.verify_bindings().map_err(|e| {
                    bad(format!(
                        "key {} has a self-signature that does not verify ({e}); export it again",
                        hex_fp(&k.primary_key.fingerprint())
                    ))
                })?;
                keys.push((k, f.clone()));
                n += 1;
            }
            if n == 0 {
                return Err(bad("holds no public key".into()));
            }
        }
        if keys.is_empty() {
            return Err(TrustError::Empty {
                path: dir.to_owned(),
                hint: "put each trusted key there as an armored .asc file (`gpg --armor --export KEYID > NAME.asc`)",
            });
        }
        Ok(Self {
            path: dir.to_owned(),
            keys,
        })
    }

    fn verify(
        &self,
        armored: &str,
        signed_data: &[u8],
        when: i64,
        email: &str,
    ) -> Result<Signer, Untrusted> {
        let (sig, _) = DetachedSignature::from_armor_single(armored.as_bytes()).map_err(|e| {
            tracing::debug!(error = %e, "an OpenPGP signature does not parse");
            Untrusted::Malformed("an OpenPGP signature whose armor or packets do not parse".into())
        })?;
        let sig = sig.signature;
        // A document signature (binary or text), as git makes: a trusted
        // key's signature of another type over the same bytes (a
        // certification, a revocation) vouches for no commit.
        if !matches!(sig.typ(), Some(SignatureType::Binary | SignatureType::Text)) {
            return Err(Untrusted::Malformed(
                "an OpenPGP signature that is not a document signature".into(),
            ));
        }
        let fps: Vec<String> = sig.issuer_fingerprint().iter().map(|f| hex_fp(f)).collect();
        let ids: Vec<String> = sig
            .issuer_key_id()
            .iter()
            .map(|k| hex::encode_upper(k.as_ref()))
            .collect();
        let issuer = fps
            .first()
            .or(ids.first())
            .cloned()
            .unwrap_or_else(|| "an unnamed key".into());
        let names = |fp: &pgp::types::Fingerprint, id: &pgp::types::KeyId| {
            fps.contains(&hex_fp(fp)) || ids.contains(&hex::encode_upper(id.as_ref()))
        };
        // A key revoked in any file of the directory is revoked: another
        // file's copy without the revocation (an older export) does not
        // lift it.
        let revoked: std::collections::HashSet<String> = self
            .keys
            .iter()
            .filter(|(k, _)| !k.details.revocation_signatures.is_empty())
            .map(|(k, _)| hex_fp(&k.primary_key.fingerprint()))
            .collect();
        for (key, file) in &self.keys {
            let primary = &key.primary_key;
            let source = file.display().to_string();
            let name = format!("OpenPGP key {}", hex_fp(&primary.fingerprint()));
            // Only the key that made the signature is judged: another key
            // of the directory (a revoked one kept for the record, say)
            // says nothing of this signature.
            if !names(&primary.fingerprint(), &primary.legacy_key_id())
                && !key
                    .public_subkeys
                    .iter()
                    .any(|s| names(&s.key.fingerprint(), &s.key.legacy_key_id()))
            {
                continue;
            }
            // The primary key's validity bounds every subkey's: a subkey
            // outliving an expired primary key is not trusted (as gpg and
            // `git verify-commit` say "This key has expired").
            // A revoked key vouches for nothing, whatever its revocation
            // says of the time (a compromised key signs any date).
            if revoked.contains(&hex_fp(&primary.fingerprint())) {
                return Err(Untrusted::CannotSign {
                    key: name,
                    why: "a key file of the directory holds its revocation",
                    origin: source,
                });
            }
            // Its expiry: the newest self-signature's.
            let primary_expiry = self_signatures(key)
                .filter_map(|s| Some((s.created()?, s.key_expiration_time())))
                .max_by_key(|(c, _)| c.as_secs())
                .and_then(|(_, e)| e);
            let mut windows = vec![(
                ("not yet created", "expired"),
                i64::from(primary.created_at().as_secs()),
                primary_expiry,
            )];
            // The component that made the signature: the primary key or a
            // subkey whose newest binding signature binds it for signing.
            if names(&primary.fingerprint(), &primary.legacy_key_id()) {
                // The primary key signs only if its newest self-signature
                // that carries key flags lets it.
                let flags = self_signatures(key)
                    .filter(|s| s.key_flags() != Default::default())
                    .max_by_key(|s| s.created().map(|c| c.as_secs()));
                if flags.is_some_and(|s| !s.key_flags().sign()) {
                    return Err(Untrusted::CannotSign {
                        key: name,
                        why: "its self-signature does not flag the primary key for signing",
                        origin: source,
                    });
                }
                sig.verify(primary, signed_data)
                    .map_err(|_| Untrusted::BadSignature { key: name.clone() })?;
            } else if let Some(sub) = key
                .public_subkeys
                .iter()
                .find(|s| names(&s.key.fingerprint(), &s.key.legacy_key_id()))
            {
                let binding = sub
                    .signatures
                    .iter()
                    .max_by_key(|s| s.created().map(|c| c.as_secs()));
                let Some(binding) = binding.filter(|b| b.key_flags().sign()) else {
                    return Err(Untrusted::UnknownKey {
                        key: format!("{name} (a subkey not bound for signing)"),
                        origin: source,
                    });
                };
                sig.verify(&sub.key, signed_data)
                    .map_err(|_| Untrusted::BadSignature { key: name.clone() })?;
                windows.push((
                    (
                        "without its signing subkey",
                        "past its signing subkey's expiry",
                    ),
                    i64::from(sub.key.created_at().as_secs()),
                    binding.key_expiration_time(),
                ));
            } else {
                continue;
            }
            let why = windows
                .iter()
                .find_map(|&((early, late), created, expiry)| {
                    if when < created {
                        return Some(format!("{early} (created {})", show_time(created)));
                    }
                    expiry
                        .map(|d| d.as_secs())
                        .filter(|&d| d > 0)
                        .map(|d| created.saturating_add(i64::from(d)))
                        .filter(|&end| when > end)
                        .map(|end| format!("{late} (at {})", show_time(end)))
                });
            // A revoked user ID names no one.
            let uid = key
                .details
                .users
                .iter()
                .filter(|u| !uid_revoked(u))
                .map(|u| String::from_utf8_lossy(u.id.id()).into_owned())
                .find(|u| uid_email(u).is_some_and(|e| e.eq_ignore_ascii_case(email)));
            let Some(uid) = uid else {
                return Err(Untrusted::PrincipalMismatch {
                    key: name,
                    principals: key
                        .details
                        .users
                        .iter()
                        .map(|u| String::from_utf8_lossy(u.id.id()).into_owned())
                        .collect::<Vec<_>>()
                        .join(", "),
                    email: email.to_owned(),
                    origin: source,
                });
            };
            if let Some(why) = why {
                return Err(Untrusted::OutsideValidity {
                    key: name,
                    principal: uid,
                    when: show_time(when),
                    why,
                    origin: source,
                });
            }
            return Ok(Signer {
                kind: SignerKind::OpenPgp,
                fingerprint: hex_fp(&primary.fingerprint()),
                principal: uid,
            });
        }
        Err(Untrusted::UnknownKey {
            key: format!("OpenPGP key {issuer}"),
            origin: self.path.display().to_string(),
        })
    }
}

/// The self-signatures that say what the key is (its expiry, its flags):
/// certifications of user IDs that are not revoked, and direct-key
/// signatures (never a revocation, which says neither).
fn self_signatures(key: &SignedPublicKey) -> impl Iterator<Item = &pgp::packet::Signature> {
    key.details
        .users
        .iter()
        .filter(|u| !uid_revoked(u))
        .flat_map(|u| &u.signatures)
        .filter(|s| is_certification(s))
        .chain(
            key.details
                .direct_signatures
                .iter()
                .filter(|s| s.typ() == Some(SignatureType::Key)),
        )
}

/// A certification of a user ID (0x10 to 0x13).
fn is_certification(s: &pgp::packet::Signature) -> bool {
    matches!(
        s.typ(),
        Some(
            SignatureType::CertGeneric
                | SignatureType::CertPersona
                | SignatureType::CertCasual
                | SignatureType::CertPositive
        )
    )
}

/// Whether a user ID's newest self-signature revokes it.
fn uid_revoked(u: &pgp::types::SignedUser) -> bool {
    u.signatures
        .iter()
        .max_by_key(|s| s.created().map(|c| c.as_secs()))
        .is_some_and(|s| s.typ() == Some(SignatureType::CertRevocation))
}

fn hex_fp(f: &pgp::types::Fingerprint) -> String {
    hex::encode_upper(f.as_bytes())
}

/// The email of a user ID: the part in angle brackets, or the whole ID
/// when it is a bare address.
fn uid_email(uid: &str) -> Option<&str> {
    match (uid.rfind('<'), uid.rfind('>')) {
        (Some(a), Some(b)) if a < b => Some(&uid[a + 1..b]),
        _ if uid.contains('@') && !uid.contains(' ') => Some(uid),
        _ => None,
    }
}

fn read_small(path: &Path, what: &'static str) -> Result<String, TrustError> {
    use std::io::Read as _;
    let err = |message: String| TrustError::Read {
        path: path.to_owned(),
        what,
        message,
    };
    let f = std::fs::File::open(path).map_err(|e| err(e.to_string()))?;
    let mut buf = String::new();
    f.take(MAX_TRUST_FILE_BYTES + 1)
        .read_to_string(&mut buf)
        .map_err(|e| err(e.to_string()))?;
    if buf.len() as u64 > MAX_TRUST_FILE_BYTES {
        return Err(err(format!(
            "larger than {MAX_TRUST_FILE_BYTES} bytes; a trust list is small"
        )));
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILM+rvN+ot98qgEN796jTiQfZfG1KaT0PtFDJ/XFSqti";

    fn parse(text: &str) -> Result<AllowedSigners, TrustError> {
        AllowedSigners::parse(Path::new("signers"), text)
    }

    #[test]
    fn comments_blank_lines_and_comments_after_keys() {
        let s = parse(&format!(
            "# the team\n\n   # indented comment\nalice@example.com {KEY} alice's laptop\n"
        ))
        .unwrap();
        assert_eq!(s.entries.len(), 1);
        assert_eq!(s.entries[0].line, 4);
        assert_eq!(s.entries[0].principals, "alice@example.com");
        assert_eq!(s.entries[0].namespaces, None);
    }

    #[test]
    fn quoted_options_and_multiple_principals() {
        let s = parse(&format!(
            "alice@example.com,*@ops.example.com namespaces=\"git,file\",valid-after=\"20240101\",valid-before=\"20250101120000Z\" {KEY}\n\"bob@example.com,carol@example.com\" {KEY}"
        ))
        .unwrap();
        let e = &s.entries[0];
        assert_eq!(e.principals, "alice@example.com,*@ops.example.com");
        assert_eq!(e.namespaces, Some(vec!["git".into(), "file".into()]));
        assert!(e.valid_after.is_some());
        assert_eq!(e.valid_before, Some(1_735_732_800));
        assert!(principals_match(&e.principals, "dave@ops.example.com"));
        assert!(!principals_match(&e.principals, "dave@example.com"));
        assert_eq!(s.entries[1].principals, "bob@example.com,carol@example.com");
        assert!(principals_match(
            &s.entries[1].principals,
            "carol@example.com"
        ));
    }

    #[test]
    fn globs_and_negation_as_openssh() {
        assert!(principals_match("*", "anyone@x"));
        assert!(principals_match("a?ice@example.com", "alice@example.com"));
        assert!(!principals_match(
            "*@example.com,!eve@example.com",
            "eve@example.com"
        ));
        assert!(principals_match(
            "*@example.com,!eve@example.com",
            "bob@example.com"
        ));
        assert!(!principals_match("Alice@example.com", "alice@example.com"));
        assert!(!principals_match(
            "alice@example.com",
            "alice@example.com.evil"
        ));
    }

    #[test]
    fn bad_lines_name_file_and_line() {
        for (text, want) in [
            (
                format!("# ok\nalice@example.com cert-authority {KEY}"),
                "cert-authority",
            ),
            (
                format!("alice@example.com valid-after=\"2024\" {KEY}"),
                "YYYYMMDD",
            ),
            (
                format!("alice@example.com valid-after=\"20241399\" {KEY}"),
                "YYYYMMDD",
            ),
            (
                format!("alice@example.com frobnicate {KEY}"),
                "unknown or malformed option",
            ),
            (
                "alice@example.com ssh-ed25519 AAAAnotbase64!".into(),
                "does not parse",
            ),
            ("alice@example.com".into(), "no key"),
            (
                "alice@example.com ssh-ed25519".into(),
                "without its base64 key",
            ),
            (format!("\"alice@example.com {KEY}"), "never closed"),
            (
                format!("alice@example.com namespaces=\"git {KEY}"),
                "never closed",
            ),
        ] {
            let e = parse(&text).unwrap_err().to_string();
            let line = text.lines().count();
            assert!(e.starts_with(&format!("signers:{line}: ")), "{e}");
            assert!(e.contains(want), "{e} should contain {want}");
        }
    }

    #[test]
    fn an_empty_file_is_an_error() {
        let e = parse("# nobody\n").unwrap_err().to_string();
        assert!(e.contains("no trusted key"), "{e}");
    }

    #[test]
    fn validity_bounds_are_inclusive_as_openssh() {
        let s = parse(&format!(
            "a@x valid-after=\"20240101Z\",valid-before=\"20240102Z\" {KEY}"
        ))
        .unwrap();
        let e = &s.entries[0];
        assert!(valid_at(e, 1_704_067_200).is_ok());
        assert!(valid_at(e, 1_704_153_600).is_ok());
        assert!(
            valid_at(e, 1_704_067_199)
                .unwrap_err()
                .contains("not yet valid")
        );
        assert!(
            valid_at(e, 1_704_153_601)
                .unwrap_err()
                .contains("no longer valid")
        );
    }

    #[test]
    fn unknown_formats_and_missing_policies_are_untrusted() {
        let p = TrustPolicy {
            ssh: Some(parse(&format!("a@x {KEY}")).unwrap()),
            openpgp: None,
        };
        assert!(matches!(
            p.verify(b"-----BEGIN PGP SIGNATURE-----\n", b"", 0, "a@x"),
            Err(Untrusted::NoPolicy { .. })
        ));
        assert_eq!(
            p.verify(b"-----BEGIN SIGNED MESSAGE-----\n", b"", 0, "a@x"),
            Err(Untrusted::UnsupportedFormat("a SIGNED MESSAGE".into()))
        );
        // Whatever else the committer wrote there is not repeated.
        assert_eq!(
            p.verify(b"\x1b[31mred herring of any length at all\n", b"", 0, "a@x"),
            Err(Untrusted::UnsupportedFormat(
                "not an armored signature".into()
            ))
        );
        // A signature that does not parse is said in lockstep's words, not
        // the library's.
        let garbled = p
            .verify(
                b"-----BEGIN SSH SIGNATURE-----\ngarbage\n-----END SSH SIGNATURE-----\n",
                b"",
                0,
                "a@x",
            )
            .unwrap_err();
        assert_eq!(
            garbled.to_string(),
            "its signature cannot be read (an SSH signature whose armor or encoding does not parse); sign the commit again (`git commit --amend -S`)"
        );
        let pgp = TrustPolicy {
            ssh: None,
            openpgp: Some(Keyring {
                path: PathBuf::from("keys"),
                keys: Vec::new(),
            }),
        };
        let garbled = pgp
            .verify(
                b"-----BEGIN PGP SIGNATURE-----\nnot base64 at all\n-----END PGP MESSAGE-----\n",
                b"",
                0,
                "a@x",
            )
            .unwrap_err();
        assert_eq!(
            garbled,
            Untrusted::Malformed("an OpenPGP signature whose armor or packets do not parse".into())
        );
    }
}
