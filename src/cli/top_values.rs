//! `GET /top`: how many values and rules it keeps, and whether it shows values or hashes.

use std::path::{Path, PathBuf};

use crate::regular_file;
use crate::service::top_values::{HashKey, TopSettings};

/// Largest `--top-hash-key-file` read.
const MAX_KEY_FILE_BYTES: u64 = 4096;

/// Top limited values (docs/operations/http-endpoints.md, "/top").
#[derive(clap::Args)]
pub struct TopValuesArgs {
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=TopSettings::MAX_VALUES as i64))]
    top_values: u32,
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=100_000))]
    top_max_rules: u32,
    #[arg(long)]
    top_show_values: bool,
    #[arg(long)]
    top_hash_key_file: Option<PathBuf>,
}

impl TopValuesArgs {
    /// The settings, with the key file read; an error names the flag and the file.
    pub fn settings(&self) -> Result<TopSettings, String> {
        let hash_key = match &self.top_hash_key_file {
            Some(path) => Some(
                read_key(path)
                    .map_err(|error| format!("--top-hash-key-file {}: {error}", path.display()))?,
            ),
            None => None,
        };
        Ok(TopSettings {
            values: self.top_values as usize,
            max_rules: self.top_max_rules as usize,
            show_values: self.top_show_values,
            hash_key,
        })
    }
}

fn read_key(path: &Path) -> Result<HashKey, String> {
    let (bytes, _) =
        regular_file::read(path, MAX_KEY_FILE_BYTES).map_err(|error| error.to_string())?;
    let key = bytes.trim_ascii();
    if key.len() < HashKey::MIN_BYTES {
        return Err(format!(
            "the key has {} bytes, fewer than {}",
            key.len(),
            HashKey::MIN_BYTES
        ));
    }
    Ok(HashKey::new(key))
}
