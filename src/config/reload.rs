//! Hot reload: notice that the configuration files changed, validate them, and swap the rules
//! atomically.
//!
//! Change detection polls a [`Fingerprint`] of the configuration (see [`super::fingerprint`]):
//! one `stat` per file, and a read only of the files whose stamp changed.
//!
//! A reload validates everything first ([`Loader::load`]); only a configuration without errors
//! replaces the running one, by one atomic pointer swap: requests in flight keep the rules they
//! started with. A broken configuration leaves the running one in place; its fingerprint is
//! remembered so the same broken content is neither parsed nor reported again until it changes.
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use parking_lot::Mutex;

pub use super::fingerprint::Fingerprint;
use super::fingerprint::Fingerprinter;
use super::{ConfigErrors, Loader};
use crate::limiter::Rules;

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

/// Reloads `paths` into `rules` on demand or when their fingerprint changes. Every method does
/// blocking file I/O (`stat`, bounded reads) but never blocks indefinitely: FIFOs and devices
/// are refused before they are opened.
pub struct Reloader {
    paths: Vec<PathBuf>,
    loader: Arc<Loader>,
    rules: Arc<ArcSwap<Rules>>,
    fingerprints: Fingerprinter,
    /// Fingerprint of the last configuration tried (applied or rejected).
    last: Mutex<Fingerprint>,
    /// Whether a configuration has been applied (only [`Reloader::start_forced`] starts without).
    loaded: AtomicBool,
}

impl Reloader {
    /// Loads `paths` for the first time. The fingerprint is taken *before* loading, so a change
    /// made while they load is noticed at the first poll.
    pub fn start(paths: Vec<PathBuf>, loader: Arc<Loader>) -> Result<Reloader, ConfigErrors> {
        let fingerprints = Fingerprinter::default();
        let loaded_from = fingerprints.take(&paths, &loader);
        let rules = loader.load(&paths)?;
        Ok(Reloader {
            paths,
            loader,
            rules: Arc::new(ArcSwap::from_pointee(rules)),
            fingerprints,
            last: Mutex::new(loaded_from),
            loaded: AtomicBool::new(true),
        })
    }

    /// [`Reloader::start`] that starts even when `paths` do not load (envoyproxy/ratelimit's
    /// `FORCE_START_WITHOUT_INITIAL_CONFIG`): then it holds no domains, has not loaded
    /// ([`Reloader::has_loaded`]), and the errors are returned beside it. The first valid
    /// configuration after a change of the files, or a SIGHUP, is applied as any reload is.
    pub fn start_forced(
        paths: Vec<PathBuf>,
        loader: Arc<Loader>,
    ) -> (Reloader, Option<ConfigErrors>) {
        let fingerprints = Fingerprinter::default();
        let loaded_from = fingerprints.take(&paths, &loader);
        let (rules, errors) = match loader.load(&paths) {
            Ok(rules) => (rules, None),
            Err(errors) => (Rules::default(), Some(errors)),
        };
        let reloader = Reloader {
            paths,
            loader,
            rules: Arc::new(ArcSwap::from_pointee(rules)),
            fingerprints,
            last: Mutex::new(loaded_from),
            loaded: AtomicBool::new(errors.is_none()),
        };
        (reloader, errors)
    }

    /// Whether a valid configuration has been loaded (at the start or by a reload).
    pub fn has_loaded(&self) -> bool {
        self.loaded.load(Ordering::Acquire)
    }

    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }

    /// The rules this reloader swaps.
    pub fn rules(&self) -> &Arc<ArcSwap<Rules>> {
        &self.rules
    }

    /// The loader, with its bounds and counters.
    pub fn loader(&self) -> &Arc<Loader> {
        &self.loader
    }

    /// The current fingerprint, when it differs from the last one tried.
    pub fn changed(&self) -> Option<Fingerprint> {
        let now = self.fingerprints.take(&self.paths, &self.loader);
        (now != *self.last.lock()).then_some(now)
    }

    /// Loads and validates the configuration and swaps it in when valid, whatever the
    /// fingerprint says (SIGHUP).
    pub fn reload(&self) -> ReloadOutcome {
        let before = self.fingerprints.take(&self.paths, &self.loader);
        *self.last.lock() = before;
        match self.loader.load(&self.paths) {
            Ok(rules) => {
                let domains = rules.domains.len();
                let limits = rules.limits().len();
                let changed = **self.rules.load() != rules || !self.has_loaded();
                if changed {
                    self.rules.store(Arc::new(rules));
                }
                self.loaded.store(true, Ordering::Release);
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
    pub fn reload_if_changed(&self) -> Option<ReloadOutcome> {
        self.changed()?;
        Some(self.reload())
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;
    use crate::config::ConfigBounds;

    const GOOD: &str = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
    const OTHER: &str = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 2}\n";

    fn start(paths: &[PathBuf], bounds: ConfigBounds) -> Reloader {
        Reloader::start(paths.to_vec(), Arc::new(Loader::new(bounds))).unwrap()
    }

    #[test]
    fn a_forced_start_holds_no_domains_until_a_valid_configuration_arrives() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("d.yaml");
        fs::write(&file, "domain: d\nbogus: 1\n").unwrap();
        let loader = Arc::new(Loader::new(ConfigBounds::default()));
        let (reloader, errors) = Reloader::start_forced(vec![dir.path().to_path_buf()], loader);
        assert!(errors.is_some_and(|errors| errors.to_string().contains("d.yaml:2:1")));
        assert!(!reloader.has_loaded());
        assert!(reloader.rules().load().domains.is_empty());
        assert!(reloader.reload_if_changed().is_none());

        fs::write(&file, GOOD).unwrap();
        match reloader.reload_if_changed() {
            Some(ReloadOutcome::Applied {
                domains: 1,
                changed: true,
                ..
            }) => {}
            other => panic!("{other:?}"),
        }
        assert!(reloader.has_loaded());
    }

    #[test]
    fn content_changes_are_noticed_and_broken_files_rejected_once() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("d.yaml");
        fs::write(&file, GOOD).unwrap();
        let reloader = start(&[dir.path().to_path_buf()], ConfigBounds::default());
        let rules = reloader.rules().clone();
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
        let parsed = reloader.loader().stats().files_parsed();
        assert!(reloader.reload_if_changed().is_none(), "reported once");
        assert_eq!(
            reloader.loader().stats().files_parsed(),
            parsed,
            "and not parsed again"
        );
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

    #[test]
    fn a_file_above_the_size_cap_is_never_read_and_its_growth_is_a_change() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("d.yaml");
        fs::write(&file, GOOD).unwrap();
        let bounds = ConfigBounds {
            max_file_bytes: GOOD.len() as u64,
            ..ConfigBounds::default()
        };
        let reloader = start(&[dir.path().to_path_buf()], bounds);
        let big = format!("{GOOD}# padding\n");
        fs::write(&file, &big).unwrap();
        let reads = reloader.loader().stats().files_read();
        match reloader.reload_if_changed() {
            Some(ReloadOutcome::Rejected(errors)) => assert_eq!(
                errors.to_string(),
                format!(
                    "{}:0:0: file: file has {} bytes; at most {} are accepted (--max-config-file-bytes)",
                    file.display(),
                    big.len(),
                    GOOD.len()
                )
            ),
            other => panic!("{other:?}"),
        }
        for _ in 0..3 {
            assert!(reloader.reload_if_changed().is_none());
        }
        assert_eq!(reloader.loader().stats().files_read(), reads, "never read");
        assert_eq!(
            reloader
                .loader()
                .stats()
                .rejected(crate::config::ConfigBound::FileBytes),
            1
        );

        fs::write(&file, format!("{big}# more\n")).unwrap();
        assert!(reloader.changed().is_some(), "a change of its stamp");
        fs::write(&file, OTHER).unwrap();
        assert!(matches!(
            reloader.reload_if_changed(),
            Some(ReloadOutcome::Applied { changed: true, .. })
        ));
    }

    #[test]
    fn an_unchanged_settled_file_is_not_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("d.yaml");
        fs::write(&file, GOOD).unwrap();
        // Settled: last changed long ago.
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
        fs::File::options()
            .write(true)
            .open(&file)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let reloader = start(std::slice::from_ref(&file), ConfigBounds::default());
        // ctime moved with set_modified; wait until it too is older than the granularity.
        std::thread::sleep(std::time::Duration::from_millis(2100));
        assert!(reloader.changed().is_none());
        let reads = reloader.loader().stats().files_read();
        for _ in 0..3 {
            assert!(reloader.changed().is_none());
        }
        assert_eq!(reloader.loader().stats().files_read(), reads);
        // A write is seen (its ctime moves) and read.
        fs::write(&file, OTHER).unwrap();
        assert!(reloader.changed().is_some());
        assert_eq!(reloader.loader().stats().files_read(), reads + 1);
    }
}
