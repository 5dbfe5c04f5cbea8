//! Hot reload: notice that the configuration files changed, validate them, and swap the rules
//! atomically.
//!
//! Change detection polls a *fingerprint* of the configuration: the list of files the paths expand
//! to (as [`super::load`] expands them) with a SHA-256 of each file's content. Polling the content
//! is simple and robust where file-system events are not: a Kubernetes ConfigMap update swaps the
//! `..data` symlink to a new directory atomically (every file changes at once, mtimes may not), an
//! editor may replace a file by renaming, a file may be rewritten within the same second with
//! the same length. Configuration files are small, so hashing them every second costs nothing.
//!
//! A reload validates everything first ([`super::load`]); only a configuration without errors
//! replaces the running one, by one atomic pointer swap: requests in flight keep the rules they
//! started with. A broken configuration leaves the running one in place; its fingerprint is
//! remembered so the same broken content is reported once, not every poll.
use std::fs;
use std::path::PathBuf;
use std::sync::Arc;

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use sha2::{Digest, Sha256};

use super::{config_files, load_with, ConfigErrors, LoadOptions};
use crate::limiter::Rules;

/// Digest of the configuration files' names and contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint([u8; 32]);

/// Fingerprint of what `paths` name now. Unreadable paths and files contribute their error, so
/// a file appearing, vanishing or becoming readable is a change too.
pub fn fingerprint(paths: &[PathBuf]) -> Fingerprint {
    let mut errors = Vec::new();
    let files = config_files(paths, &mut errors);
    let mut hasher = Sha256::new();
    for error in &errors {
        hasher.update(b"error\0");
        hasher.update(error.to_string().as_bytes());
        hasher.update(b"\0");
    }
    for file in &files {
        hasher.update(b"file\0");
        hasher.update(file.to_string_lossy().as_bytes());
        hasher.update(b"\0");
        match fs::read(file) {
            Ok(content) => {
                hasher.update((content.len() as u64).to_le_bytes());
                hasher.update(Sha256::digest(&content));
            }
            Err(error) => {
                hasher.update(b"unreadable\0");
                hasher.update(error.to_string().as_bytes());
            }
        }
    }
    Fingerprint(hasher.finalize().into())
}

/// What a reload did.
#[derive(Debug)]
pub enum ReloadOutcome {
    /// The configuration is valid and now in use. `changed` is false when it equals the one it
    /// replaced.
    Applied {
        domains: usize,
        limits: usize,
        changed: bool,
    },
    /// The configuration has errors; the running one stays.
    Rejected(ConfigErrors),
}

/// Reloads `paths` into `rules` on demand or when their fingerprint changes.
pub struct Reloader {
    paths: Vec<PathBuf>,
    rules: Arc<ArcSwap<Rules>>,
    /// How the files come together, as at startup.
    options: LoadOptions,
    /// Fingerprint of the last configuration tried (applied or rejected).
    last: Mutex<Fingerprint>,
}

impl Reloader {
    /// `loaded_from` is the fingerprint taken *before* the running rules were loaded, so a
    /// change made while they loaded is noticed at the first poll.
    pub fn new(paths: Vec<PathBuf>, rules: Arc<ArcSwap<Rules>>, loaded_from: Fingerprint) -> Self {
        Reloader {
            paths,
            rules,
            options: LoadOptions::default(),
            last: Mutex::new(loaded_from),
        }
    }

    /// Loads with `options` (those the running rules were loaded with).
    pub fn with_options(mut self, options: LoadOptions) -> Self {
        self.options = options;
        self
    }

    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }

    /// The rules this reloader swaps.
    pub fn rules(&self) -> &Arc<ArcSwap<Rules>> {
        &self.rules
    }

    /// The current fingerprint, when it differs from the last one tried.
    pub fn changed(&self) -> Option<Fingerprint> {
        let now = fingerprint(&self.paths);
        (now != *self.last.lock()).then_some(now)
    }

    /// Loads and validates the configuration and swaps it in when valid, whatever the
    /// fingerprint says (SIGHUP). Blocking (file I/O).
    pub fn reload(&self) -> ReloadOutcome {
        let before = fingerprint(&self.paths);
        *self.last.lock() = before;
        match load_with(&self.paths, self.options) {
            Ok(rules) => {
                let domains = rules.domains.len();
                let limits = rules.limits().len();
                let changed = **self.rules.load() != rules;
                if changed {
                    self.rules.store(Arc::new(rules));
                }
                ReloadOutcome::Applied {
                    domains,
                    limits,
                    changed,
                }
            }
            Err(errors) => ReloadOutcome::Rejected(errors),
        }
    }

    /// [`Reloader::reload`] if the files changed since the last attempt; `None` otherwise.
    /// Blocking (file I/O).
    pub fn reload_if_changed(&self) -> Option<ReloadOutcome> {
        self.changed()?;
        Some(self.reload())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
    const OTHER: &str = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 2}\n";

    #[test]
    fn content_changes_are_noticed_and_broken_files_rejected_once() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("d.yaml");
        fs::write(&file, GOOD).unwrap();
        let paths = vec![dir.path().to_path_buf()];
        let print = fingerprint(&paths);
        let rules = Arc::new(ArcSwap::from_pointee(crate::config::load(&paths).unwrap()));
        let reloader = Reloader::new(paths.clone(), rules.clone(), print);
        assert!(reloader.reload_if_changed().is_none());

        fs::write(&file, OTHER).unwrap();
        match reloader.reload_if_changed() {
            Some(ReloadOutcome::Applied { changed: true, .. }) => {}
            other => panic!("{other:?}"),
        }
        assert!(reloader.reload_if_changed().is_none());

        fs::write(&file, "domain: d\nbogus: 1\n").unwrap();
        match reloader.reload_if_changed() {
            Some(ReloadOutcome::Rejected(errors)) => {
                assert!(errors.to_string().contains("d.yaml:2:1"), "{errors}")
            }
            other => panic!("{other:?}"),
        }
        assert!(reloader.reload_if_changed().is_none(), "reported once");
        assert_eq!(
            rules.load().limits()[0].path,
            "d.k",
            "the running rules stay"
        );

        // The same content as before is valid again but unchanged.
        fs::write(&file, OTHER).unwrap();
        match reloader.reload_if_changed() {
            Some(ReloadOutcome::Applied { changed: false, .. }) => {}
            other => panic!("{other:?}"),
        }
        // A new file is a change.
        fs::write(
            dir.path().join("e.yml"),
            GOOD.replace("domain: d", "domain: e"),
        )
        .unwrap();
        assert!(reloader.changed().is_some());
    }
}
