//! Bounds on what loading a configuration may cost, so that no file (however large, however
//! aliased, whatever its type) can take the process down or stall its reloads.

use crate::regular_file::{FileBound, FileError};

/// Bounds applied to every configuration file, by `check`, at startup and on every reload.
///
/// Together with the YAML caps ([`super::yaml::MAX_DEPTH`], [`super::yaml::MAX_NODES`]) they
/// bound the memory one file's parse can take to a small multiple of
/// `max_file_bytes + max_alias_bytes`, whatever the file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigBounds {
    /// Largest file read, in bytes. Checked on the file's size before it is opened, and again
    /// while reading (a file that grows past it is rejected, never read further).
    pub max_file_bytes: u64,
    /// Most bytes of scalars (keys and values) that the aliases (`*name`) of one file may add
    /// when they are expanded. The node cap alone does not stop one large anchored string from
    /// being copied a few thousand times.
    pub max_alias_bytes: u64,
}

impl ConfigBounds {
    /// 8 MiB: a domain of 50 000 descriptors, each with a value and a limit, takes about 5 MB.
    pub const DEFAULT_MAX_FILE_BYTES: u64 = 8 << 20;
    /// 8 MiB: aliases that share a `rate_limit` block among thousands of descriptors add a few
    /// hundred KiB; only a crafted file comes near this.
    pub const DEFAULT_MAX_ALIAS_BYTES: u64 = 8 << 20;
}

impl Default for ConfigBounds {
    fn default() -> ConfigBounds {
        ConfigBounds {
            max_file_bytes: ConfigBounds::DEFAULT_MAX_FILE_BYTES,
            max_alias_bytes: ConfigBounds::DEFAULT_MAX_ALIAS_BYTES,
        }
    }
}

/// Why a configuration file was refused, as its error says it: a size refusal names
/// `--max-config-file-bytes`, the flag that raises the cap.
pub(super) fn file_refusal(error: &FileError) -> String {
    match error.bound() {
        Some(FileBound::FileBytes) => format!("{error} (--max-config-file-bytes)"),
        _ => error.to_string(),
    }
}
