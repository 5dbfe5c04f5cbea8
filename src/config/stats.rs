//! Counters of what loading configurations did, read by the metrics.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::regular_file::FileLimit;

/// What loads and change checks did since the process started. Every counter only grows.
#[derive(Debug, Default)]
pub struct LoadStats {
    files_read: AtomicU64,
    files_parsed: AtomicU64,
    too_large: AtomicU64,
    not_regular: AtomicU64,
    alias_budget: AtomicU64,
}

/// A configuration limit that refused a file, as the metrics label it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigLimit {
    /// Larger than `--max-config-file-bytes`.
    FileBytes,
    /// Not a regular file (a FIFO, a device, a socket).
    FileType,
    /// Aliases expanding past `--max-config-alias-bytes`.
    AliasBytes,
}

impl ConfigLimit {
    pub const ALL: [ConfigLimit; 3] = [
        ConfigLimit::FileBytes,
        ConfigLimit::FileType,
        ConfigLimit::AliasBytes,
    ];

    /// The `limit` label value.
    pub fn label(self) -> &'static str {
        match self {
            ConfigLimit::FileBytes => "file_bytes",
            ConfigLimit::FileType => "file_type",
            ConfigLimit::AliasBytes => "alias_bytes",
        }
    }
}

impl From<FileLimit> for ConfigLimit {
    fn from(limit: FileLimit) -> ConfigLimit {
        match limit {
            FileLimit::FileBytes => ConfigLimit::FileBytes,
            FileLimit::FileType => ConfigLimit::FileType,
        }
    }
}

impl LoadStats {
    /// Files whose content was read, to load them or to see whether they changed.
    pub fn files_read(&self) -> u64 {
        self.files_read.load(Ordering::Relaxed)
    }

    /// Files parsed as YAML (each load parses every file it reads).
    pub fn files_parsed(&self) -> u64 {
        self.files_parsed.load(Ordering::Relaxed)
    }

    /// Files that `limit` refused, counted at each load that met them.
    pub fn rejected(&self, limit: ConfigLimit) -> u64 {
        self.counter(limit).load(Ordering::Relaxed)
    }

    pub(super) fn record_read(&self) {
        self.files_read.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn record_parse(&self) {
        self.files_parsed.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn record_rejection(&self, limit: ConfigLimit) {
        self.counter(limit).fetch_add(1, Ordering::Relaxed);
    }

    fn counter(&self, limit: ConfigLimit) -> &AtomicU64 {
        match limit {
            ConfigLimit::FileBytes => &self.too_large,
            ConfigLimit::FileType => &self.not_regular,
            ConfigLimit::AliasBytes => &self.alias_budget,
        }
    }
}
