//! The server's background tasks, as one set that shutdown stops.

use std::future::Future;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// Tasks that run until shutdown (probes, watchers, sweepers, clients), and the token that
/// tells them it has started. Each watches the token and ends by itself; [`Tasks::stop`] ends
/// whatever has not, so nothing a server started outlives [`run`](super::run).
pub struct Tasks {
    set: JoinSet<()>,
    stopping: CancellationToken,
}

impl Tasks {
    /// A set whose token is cancelled once `shutdown` completes (or [`Tasks::stop`] runs).
    pub fn until(shutdown: impl Future<Output = ()> + Send + 'static) -> Tasks {
        let stopping = CancellationToken::new();
        let mut set = JoinSet::new();
        let cancel = stopping.clone();
        set.spawn(async move {
            tokio::select! {
                () = shutdown => cancel.cancel(),
                () = cancel.cancelled() => {}
            }
        });
        Tasks { set, stopping }
    }

    /// Cancelled when shutdown starts.
    pub fn stopping(&self) -> CancellationToken {
        self.stopping.clone()
    }

    pub fn spawn(&mut self, task: impl Future<Output = ()> + Send + 'static) {
        self.set.spawn(task);
    }

    /// Cancels the token and ends every task still running.
    pub async fn stop(mut self) {
        self.stopping.cancel();
        self.set.shutdown().await;
    }
}
