//! Change detection for hot reload: a digest of the configuration files' names and contents that
//! reads a file only when `stat` says it may have changed.
//!
//! Polling content rather than file-system events is robust where events are not: a Kubernetes
//! ConfigMap update swaps the `..data` symlink to a new directory at once (every file changes
//! together, mtimes may not), an editor may replace a file by renaming. Each poll costs one
//! `stat` per file; a file is read and hashed again only when its [`Stamp`] (device, inode,
//! size, mtime, ctime) differs from the one its cached digest was taken with, or when that stamp
//! was too recent to be trusted on a file system with coarse timestamps. A file too large to load
//! or not a regular file is never read: its stamp stands for its content.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use parking_lot::Mutex;
use sha2::{Digest, Sha256};

use super::bounds::file_refusal;
use super::{config_files, Loader};
use crate::regular_file::{self as file, FileError, Stamp};

/// Digest of the configuration files' names and contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint([u8; 32]);

/// A file's content digest and the stamp it was taken with.
#[derive(Debug, Clone, Copy)]
struct Cached {
    stamp: Stamp,
    digest: [u8; 32],
    /// Whether the stamp was settled when the digest was taken (see [`Stamp::settled`]).
    settled: bool,
}

/// Takes fingerprints, remembering each file's digest until its stamp changes.
#[derive(Debug, Default)]
pub struct Fingerprinter {
    cache: Mutex<HashMap<PathBuf, Cached>>,
}

impl Fingerprinter {
    /// The fingerprint of what `paths` name now, as `loader` would load them. Unreadable paths
    /// and files contribute their error, so a file appearing, vanishing or becoming readable is a
    /// change too.
    pub fn take(&self, paths: &[PathBuf], loader: &Loader) -> Fingerprint {
        let mut errors = Vec::new();
        let files = config_files(paths, loader.options.layout, &mut errors);
        let mut hasher = Sha256::new();
        for error in &errors {
            hasher.update(b"error\0");
            hasher.update(error.to_string().as_bytes());
            hasher.update(b"\0");
        }
        let mut cache = self.cache.lock();
        let mut kept = HashMap::with_capacity(files.len());
        for path in &files {
            hasher.update(b"file\0");
            hasher.update(path.to_string_lossy().as_bytes());
            hasher.update(b"\0");
            match self.file_digest(path, cache.get(path), loader) {
                Ok(cached) => {
                    hasher.update(b"content\0");
                    hasher.update(cached.digest);
                    kept.insert(path.clone(), cached);
                }
                Err(Refused { why, stamp }) => {
                    hasher.update(b"refused\0");
                    hasher.update(why.as_bytes());
                    if let Some(stamp) = stamp {
                        hasher.update(stamp.to_bytes());
                    }
                }
            }
        }
        *cache = kept;
        Fingerprint(hasher.finalize().into())
    }

    fn file_digest(
        &self,
        path: &Path,
        cached: Option<&Cached>,
        loader: &Loader,
    ) -> Result<Cached, Refused> {
        let max = loader.bounds().max_file_bytes;
        let stamp = file::stat(path).map_err(Refused::without_stamp)?;
        file::check_size(&stamp, max).map_err(|error| Refused::with_stamp(error, stamp))?;
        if let Some(cached) = cached.filter(|c| c.settled && c.stamp == stamp) {
            return Ok(*cached);
        }
        let now = SystemTime::now();
        let (content, stamp) = file::read(path, max).map_err(Refused::without_stamp)?;
        loader.stats().record_read();
        let mut digest = Sha256::new();
        digest.update((content.len() as u64).to_le_bytes());
        digest.update(&content);
        Ok(Cached {
            stamp,
            digest: digest.finalize().into(),
            settled: stamp.settled(now),
        })
    }
}

/// A file that was not read, why, and (when it exists) its stamp, which stands for its content.
struct Refused {
    why: String,
    stamp: Option<Stamp>,
}

impl Refused {
    fn without_stamp(error: FileError) -> Refused {
        Refused {
            why: file_refusal(&error),
            stamp: None,
        }
    }

    fn with_stamp(error: FileError, stamp: Stamp) -> Refused {
        Refused {
            why: file_refusal(&error),
            stamp: Some(stamp),
        }
    }
}
