//! The TLS configuration in use, and its reload when the files change.
//!
//! Certificates are replaced on disk by tools that write the certificate and the key one after
//! the other (cert-manager, Vault agents, a Kubernetes secret's symlink swap), so a change seen
//! once is read again [`SETTLE`] later and used only when both reads agree. A replacement that
//! cannot be used is logged once (until the files change again) and the configuration in use
//! stays.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use rustls::ServerConfig;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use super::files::{server_config, TlsError, TlsFileContents};
use super::settings::TlsSettings;

/// How often the TLS files are read to see whether they changed.
pub const TLS_RELOAD_INTERVAL: Duration = Duration::from_secs(1);

/// After a change is seen, how long to let the writer finish before reading again.
const SETTLE: Duration = Duration::from_millis(100);

/// The gRPC port's TLS configuration: the one new handshakes use, and what it was made from.
pub struct ServerTls {
    settings: TlsSettings,
    current: ArcSwap<ServerConfig>,
    state: Mutex<FileState>,
    reloads: AtomicU64,
    rejected: AtomicU64,
}

/// What the files held when last looked at.
struct FileState {
    /// The contents the configuration in use was made from.
    loaded: TlsFileContents,
    /// The contents last refused, so a bad replacement is reported once, not every second.
    refused: Option<TlsFileContents>,
}

/// What one look at the files found.
#[derive(Debug)]
pub enum TlsReload {
    /// The files are as the configuration in use was made from (or still being written).
    Unchanged,
    /// They changed and the new configuration is in use.
    Applied,
    /// They changed into something unusable; the configuration in use stays.
    Refused(TlsError),
    /// Refused before: not reported again.
    StillRefused,
}

impl ServerTls {
    /// Reads the files and makes the first configuration; an error names the flag and file.
    pub fn load(settings: TlsSettings) -> Result<ServerTls, TlsError> {
        let loaded = TlsFileContents::read(&settings)?;
        let config = server_config(&settings, &loaded)?;
        Ok(ServerTls {
            settings,
            current: ArcSwap::from_pointee(config),
            state: Mutex::new(FileState {
                loaded,
                refused: None,
            }),
            reloads: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
        })
    }

    /// The files this configuration is read from.
    pub fn settings(&self) -> &TlsSettings {
        &self.settings
    }

    /// An acceptor for one handshake, with the configuration in use now.
    pub fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.current.load_full())
    }

    /// Configurations replaced since startup.
    pub fn reloads(&self) -> u64 {
        self.reloads.load(Ordering::Relaxed)
    }

    /// Changed files that could not be used.
    pub fn rejected(&self) -> u64 {
        self.rejected.load(Ordering::Relaxed)
    }

    /// Reads the files and, when they changed (and read the same [`SETTLE`] later), puts the
    /// configuration they make in use. Blocking: reads files and sleeps.
    pub fn reload_if_changed(&self) -> TlsReload {
        let first = TlsFileContents::read(&self.settings);
        if let Ok(contents) = &first {
            let mut state = self.state.lock();
            if state.loaded == *contents {
                state.refused = None;
                return TlsReload::Unchanged;
            }
        }
        std::thread::sleep(SETTLE);
        let second = TlsFileContents::read(&self.settings);
        let contents = match (first, second) {
            (Ok(first), Ok(second)) if first != second => return TlsReload::Unchanged,
            (_, Ok(second)) => second,
            (_, Err(error)) => return self.refuse(None, error),
        };
        if self.state.lock().loaded == contents {
            return TlsReload::Unchanged;
        }
        match server_config(&self.settings, &contents) {
            Ok(config) => {
                self.current.store(Arc::new(config));
                let mut state = self.state.lock();
                state.loaded = contents;
                state.refused = None;
                self.reloads.fetch_add(1, Ordering::Relaxed);
                TlsReload::Applied
            }
            Err(error) => self.refuse(Some(contents), error),
        }
    }

    /// Records a refused replacement; reported only when it differs from the last one refused
    /// (an unreadable file is reported again only after the files were usable in between).
    fn refuse(&self, contents: Option<TlsFileContents>, error: TlsError) -> TlsReload {
        let mut state = self.state.lock();
        let key = contents.unwrap_or_else(|| state.loaded.clone());
        if state.refused.as_ref() == Some(&key) {
            return TlsReload::StillRefused;
        }
        state.refused = Some(key);
        self.rejected.fetch_add(1, Ordering::Relaxed);
        TlsReload::Refused(error)
    }
}

/// Looks at the TLS files every `interval` until `stopping` is cancelled, off the serving
/// threads, and logs what changed.
pub async fn watch(tls: Arc<ServerTls>, interval: Duration, stopping: CancellationToken) {
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stopping.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let worker = tls.clone();
        let outcome = match tokio::task::spawn_blocking(move || worker.reload_if_changed()).await {
            Ok(outcome) => outcome,
            Err(error) => {
                tracing::error!(%error, "gRPC TLS reload task failed");
                continue;
            }
        };
        let settings = tls.settings();
        match outcome {
            TlsReload::Unchanged | TlsReload::StillRefused => {}
            TlsReload::Applied => tracing::info!(
                cert = %settings.cert.display(),
                key = %settings.key.display(),
                "gRPC TLS files changed: new handshakes use the new certificate"
            ),
            TlsReload::Refused(error) => tracing::error!(
                "gRPC TLS files changed but cannot be used, the certificate in use stays: {error}"
            ),
        }
    }
}
