//! One server: its connections (the pooled connection manager, [`connection`], opened to the
//! address [`client`] makes of the settings, or to the master the sentinels name, [`sentinel`]),
//! the pool a thread calls through ([`pool`]), the round trip of one call ([`round_trip`]), the
//! script calls with their reload on `NOSCRIPT` ([`calls`]), and the checks of a fresh connection
//! (scripts loaded, [`load`]; version, [`version`]).

mod calls;
pub(super) mod client;
pub mod connection;
pub(super) mod errors;
mod load;
pub(super) mod pool;
mod round_trip;
pub(super) mod sentinel;
pub(super) mod version;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::{timeout_at, Instant};

use self::connection::{connect_error, Conn, Manager};
use self::load::load_script;
use self::pool::{PoolSettings, Shared};
use crate::store::redis::scripts::request::Script;
use crate::store::StoreError;

/// A server the store has checked and loaded its scripts on: its connection manager and the
/// startup pool, driven by the runtime that connected (threads borrow from it, see
/// `store::redis::local`).
#[derive(Clone)]
pub(in crate::store::redis) struct Server {
    /// Opens each connection on the runtime that asks for it (see [`Server::thread_pool`]).
    pub(in crate::store::redis) manager: Manager,
    pub(in crate::store::redis) startup: Arc<Shared>,
}

impl Server {
    /// Opens a first connection through `manager` by `deadline`, loads `scripts` and checks the
    /// version, so a wrong address, password or an unreachable server fails here.
    pub(in crate::store::redis) async fn start(
        manager: Manager,
        settings: &PoolSettings,
        scripts: &[&Script],
        connect_timeout: Duration,
    ) -> Result<Server, StoreError> {
        let deadline = Instant::now() + connect_timeout;
        let timed_out = |_| StoreError::Timeout(connect_timeout);
        let mut first = timeout_at(deadline, manager.open())
            .await
            .map_err(timed_out)?
            .map_err(|e| connect_error(&e))?;
        for script in scripts {
            let loaded = timeout_at(deadline, load_script(&mut first, script))
                .await
                .map_err(timed_out)??;
            tracing::debug!(sha1 = %loaded, "script loaded");
        }
        timeout_at(deadline, version::check(&mut first))
            .await
            .map_err(timed_out)??;
        let driven = manager.driven_on(tokio::runtime::Handle::current());
        let startup = Shared::new(driven.clone(), settings, None);
        // The pool may already be filling itself; a full pool simply drops this connection.
        let _ = startup.pool.add(Conn::new(first, &driven));
        Ok(Server {
            manager: driven.driven_by_caller(),
            startup: Arc::new(startup),
        })
    }

    /// A pool for the calling thread, borrowing the startup pool's connections until its own has
    /// one. Its connections are opened, and so driven, on the calling thread's runtime: a call
    /// never wakes another thread.
    pub(in crate::store::redis) fn thread_pool(&self, settings: &PoolSettings) -> Arc<Shared> {
        Arc::new(Shared::new(
            self.manager.clone(),
            settings,
            Some(self.startup.pool.clone()),
        ))
    }
}
