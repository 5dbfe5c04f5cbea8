//! The bearer token of `POST /counters/reset` (`--admin-token-file`): read through the one file
//! reader, read again when the file changes, compared in constant time.
//!
//! The file is looked at when a reset asks for the token, not by a task of its own: resets are
//! rare, a `stat` is cheap, and a token rotated on disk is in force at the next reset. A
//! replacement that cannot be used (unreadable, too short) is logged once and the token in use
//! stays, as the TLS files are handled: a half-written file never locks the operator out.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use parking_lot::Mutex;
use sha2::{Digest, Sha256};

use crate::regular_file::{self, Stamp};

/// The admin token and the file it comes from.
pub struct AdminToken {
    path: PathBuf,
    state: Mutex<Loaded>,
}

/// What the file held when last read.
struct Loaded {
    /// SHA-256 of the token in force: compared digest to digest, so neither the comparison's
    /// time nor its length says anything about the token.
    digest: [u8; 32],
    stamp: Stamp,
    /// The stamp of a replacement refused, so it is reported once.
    refused: Option<Stamp>,
}

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminToken")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl AdminToken {
    /// Fewest bytes a token may have (after surrounding whitespace is dropped).
    pub const MIN_BYTES: usize = 16;
    /// Largest token file read.
    pub const MAX_FILE_BYTES: u64 = 4096;

    /// Reads the token from `path`: its content without surrounding whitespace, at least
    /// [`AdminToken::MIN_BYTES`] visible ASCII characters (what an `Authorization` header
    /// carries). The error says what is wrong with the file.
    pub fn load(path: &Path) -> Result<AdminToken, String> {
        let (digest, stamp) = read(path)?;
        Ok(AdminToken {
            path: path.to_owned(),
            state: Mutex::new(Loaded {
                digest,
                stamp,
                refused: None,
            }),
        })
    }

    /// The file the token is read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether `presented` is the token in force, after reading the file again when it changed.
    pub fn accepts(&self, presented: &[u8]) -> bool {
        self.reload_if_changed();
        let presented: [u8; 32] = Sha256::digest(presented).into();
        let expected = self.state.lock().digest;
        presented
            .iter()
            .zip(expected.iter())
            .fold(0u8, |differ, (a, b)| differ | (a ^ b))
            == 0
    }

    /// Reads the file again unless its stamp is the one read and old enough to tell a change
    /// (see [`Stamp::settled`]).
    fn reload_if_changed(&self) {
        let now = SystemTime::now();
        let current = regular_file::stat(&self.path);
        {
            let state = self.state.lock();
            if let Ok(stamp) = &current {
                if *stamp == state.stamp && stamp.settled(now) {
                    return;
                }
                if state.refused == Some(*stamp) {
                    return;
                }
            }
        }
        match read(&self.path) {
            Ok((digest, stamp)) => {
                let mut state = self.state.lock();
                state.refused = None;
                if digest != state.digest {
                    tracing::info!(
                        file = %self.path.display(),
                        "--admin-token-file changed: the new token is in force"
                    );
                }
                state.digest = digest;
                state.stamp = stamp;
            }
            Err(error) => {
                let mut state = self.state.lock();
                let refused = current.ok().unwrap_or(state.stamp);
                if state.refused != Some(refused) {
                    tracing::error!(
                        file = %self.path.display(),
                        "--admin-token-file changed but cannot be used, the token in force stays: {error}"
                    );
                }
                state.refused = Some(refused);
            }
        }
    }
}

/// The digest of the token `path` holds, and the stamp of what was read.
fn read(path: &Path) -> Result<([u8; 32], Stamp), String> {
    let (bytes, stamp) =
        regular_file::read(path, AdminToken::MAX_FILE_BYTES).map_err(|error| error.to_string())?;
    let token = bytes.trim_ascii();
    if token.len() < AdminToken::MIN_BYTES {
        return Err(format!(
            "the token has {} bytes, fewer than {}",
            token.len(),
            AdminToken::MIN_BYTES
        ));
    }
    if !token.iter().all(u8::is_ascii_graphic) {
        return Err(
            "the token must be visible ASCII characters (no spaces or control characters inside)"
                .to_owned(),
        );
    }
    Ok((Sha256::digest(token).into(), stamp))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, content: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "ratelimitd-admin-token-{}-{name}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("token");
        std::fs::write(&path, content).unwrap();
        path
    }

    #[test]
    fn accepts_only_the_token_without_its_surrounding_whitespace() {
        let path = file("accepts", "  0123456789abcdef-token\n");
        let token = AdminToken::load(&path).unwrap();
        assert!(token.accepts(b"0123456789abcdef-token"));
        assert!(!token.accepts(b"0123456789abcdef-toke"));
        assert!(!token.accepts(b"0123456789abcdef-token\n"));
        assert!(!token.accepts(b""));
    }

    #[test]
    fn refuses_short_or_unprintable_tokens_and_missing_files() {
        let short = AdminToken::load(&file("short", "short\n")).unwrap_err();
        assert!(short.contains("fewer than 16"), "{short}");
        let spaced = AdminToken::load(&file("spaced", "0123456789 abcdef")).unwrap_err();
        assert!(spaced.contains("visible ASCII"), "{spaced}");
        assert!(AdminToken::load(Path::new("/nonexistent/ratelimitd/token")).is_err());
    }

    #[test]
    fn a_changed_file_is_read_again_and_a_bad_replacement_keeps_the_token() {
        let path = file("reload", "first-token-0123456789");
        let token = AdminToken::load(&path).unwrap();
        assert!(token.accepts(b"first-token-0123456789"));
        std::fs::write(&path, "second-token-0123456789").unwrap();
        assert!(token.accepts(b"second-token-0123456789"));
        assert!(!token.accepts(b"first-token-0123456789"));
        std::fs::write(&path, "tiny").unwrap();
        assert!(token.accepts(b"second-token-0123456789"));
        assert!(!token.accepts(b"tiny"));
        std::fs::remove_file(&path).unwrap();
        assert!(token.accepts(b"second-token-0123456789"));
    }
}
