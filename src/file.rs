//! Reading the files a person names (`--live`, `--config`), bounded: never
//! more than the limit + 1 bytes, so `/dev/zero` or a pipe that never ends
//! fails at once. Reading is the shell's; what the text means is the
//! core's (`yaml`, `live`).

use std::fs::File;
use std::io::Read as _;
use std::path::Path;

use crate::live::{Live, LiveError, parse_live_within};
use crate::yaml::{self, Limit, ReadError};

/// Reads a file as UTF-8 text, never reading more than `limit` + 1 bytes: a
/// device (`/dev/zero`) or a pipe that never ends is refused as soon as it
/// passes the limit, without growing memory past it.
pub fn read_text(path: &Path, limit: &Limit) -> Result<String, ReadError> {
    let mut file = File::open(path).map_err(ReadError::Io)?;
    let too_large = || ReadError::TooLarge { limit: *limit };
    // A regular file says its size: one over the limit is not read at all.
    let known = file
        .metadata()
        .ok()
        .filter(std::fs::Metadata::is_file)
        .map(|m| m.len());
    if known.is_some_and(|len| len > limit.bytes as u64) {
        return Err(too_large());
    }
    // Devices and pipes do not. Read in chunks, keeping at most `limit`
    // bytes: the first byte beyond it is enough to refuse. The buffer is
    // reserved once, for the file's size or the limit (pages the read never
    // touches cost no memory); growing it by doubling instead left about
    // twice the limit resident after reading /dev/zero.
    let want = known
        .and_then(|len| usize::try_from(len).ok())
        .unwrap_or(limit.bytes)
        .min(limit.bytes);
    let mut bytes: Vec<u8> = Vec::new();
    // A limit too large to reserve (--max-live-bytes of terabytes) falls
    // back to growing as the input comes.
    let _ = bytes.try_reserve_exact(want);
    let mut chunk = [0u8; 64 * 1024];
    loop {
        // Never ask for more than one byte past the limit.
        let room = (limit.bytes - bytes.len())
            .saturating_add(1)
            .min(chunk.len());
        let n = match file.read(&mut chunk[..room]) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(ReadError::Io(e)),
        };
        if n > limit.bytes - bytes.len() {
            return Err(too_large());
        }
        bytes
            .try_reserve(n)
            .map_err(|e| ReadError::Io(std::io::Error::new(std::io::ErrorKind::OutOfMemory, e)))?;
        bytes.extend_from_slice(&chunk[..n]);
    }
    yaml::text(bytes)
}

/// Reads and parses a snapshot file, never reading more than `max_bytes`
/// (+1, to know it is over): `/dev/zero` fails at once.
pub fn read_live(path: &Path, max_bytes: usize) -> Result<Live, LiveError> {
    let file = path.display().to_string();
    let limit = Limit::live(max_bytes);
    let text = read_text(path, &limit).map_err(|reason| LiveError::Read {
        file: file.clone(),
        reason,
    })?;
    parse_live_within(&file, &text, max_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_stop_one_byte_past_the_limit() {
        let limit = Limit::live(4096);
        let started = std::time::Instant::now();
        let e = read_text(Path::new("/dev/zero"), &limit).unwrap_err();
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        assert_eq!(
            e.to_string(),
            "is larger than the live snapshot limit of 4 KiB; raise --max-live-bytes, or select fewer kinds or namespaces"
        );
        let dir = tempfile::tempdir().unwrap();
        let exact = dir.path().join("exact.yaml");
        std::fs::write(&exact, vec![b'#'; 4096]).unwrap();
        assert_eq!(read_text(&exact, &limit).unwrap().len(), 4096);
        std::fs::write(&exact, vec![b'#'; 4097]).unwrap();
        assert!(matches!(
            read_text(&exact, &limit),
            Err(ReadError::TooLarge { .. })
        ));
        std::fs::write(&exact, b"a: 1\nb: \xff\n").unwrap();
        assert_eq!(
            read_text(&exact, &limit).unwrap_err().to_string(),
            "is not UTF-8 (an invalid byte on line 2); YAML must be UTF-8"
        );
        assert!(matches!(
            read_text(&dir.path().join("none.yaml"), &limit),
            Err(ReadError::Io(_))
        ));
    }

    #[test]
    fn live_files_are_read_within_their_limit() {
        let text = "apiVersion: v1\nkind: List\nitems: []\n";
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("live.yaml");
        std::fs::write(&path, text).unwrap();
        assert!(read_live(&path, 1024).unwrap().objects.is_empty());
        assert!(
            read_live(&path, 16)
                .unwrap_err()
                .to_string()
                .contains("larger than the live snapshot limit of 16 bytes")
        );
    }
}
