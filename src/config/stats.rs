//! Counters of what loading configurations did, read by the metrics.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::regular_file::FileBound;

/// What loads and change checks did since the process started. Every counter only grows.
#[derive(Debug, Default)]
pub struct LoadStats {
    files_read: AtomicU64,
    files_parsed: AtomicU64,
    too_large: AtomicU64,
    not_regular: AtomicU64,
    alias_budget: AtomicU64,
}

/// A configuration bound that refused a file, as the metrics label it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigBound {
    /// Larger than `--max-config-file-bytes`.
    FileBytes,
    /// Not a regular file (a FIFO, a device, a socket).
    FileType,
    /// Aliases expanding past `--max-config-alias-bytes`.
    AliasBytes,
}

impl ConfigBound {
    pub const ALL: [ConfigBound; 3] = [
        ConfigBound::FileBytes,
        ConfigBound::FileType,
        ConfigBound::AliasBytes,
    ];

    /// The `limit` label value.
    pub fn label(self) -> &'static str {
        match self {
            ConfigBound::FileBytes => "file_bytes",
            ConfigBound::FileType => "file_type",
            ConfigBound::AliasBytes => "alias_bytes",
        }
    }
}

impl From<FileBound> for ConfigBound {
    fn from(bound: FileBound) -> ConfigBound {
        match bound {
            FileBound::FileBytes => ConfigBound::FileBytes,
            FileBound::FileType => ConfigBound::FileType,
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

    /// Files that `bound` refused, counted at each load that met them.
    pub fn rejected(&self, bound: ConfigBound) -> u64 {
        self.counter(bound).load(Ordering::Relaxed)
    }

    pub(super) fn record_read(&self) {
        self.files_read.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn record_parse(&self) {
        self.files_parsed.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn record_rejection(&self, bound: ConfigBound) {
        self.counter(bound).fetch_add(1, Ordering::Relaxed);
    }

    fn counter(&self, bound: ConfigBound) -> &AtomicU64 {
        match bound {
            ConfigBound::FileBytes => &self.too_large,
            ConfigBound::FileType => &self.not_regular,
            ConfigBound::AliasBytes => &self.alias_budget,
        }
    }
}
