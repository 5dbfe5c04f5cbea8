//! One server: its connections (the pooled connection manager, [`connection`], opened to the
//! address [`client`] makes of the settings, or to the master the sentinels name, [`sentinel`]),
//! the pool a thread calls through ([`pool`]), the round trip of one call ([`round_trip`]), the
//! script calls with their reload when the server lost them ([`calls`]), and the checks of a
//! fresh connection (version, [`version`]; how the server runs the scripts, `FCALL` or
//! `EVALSHA`, [`calling`]; scripts loaded, [`load`]).

mod calling;
mod calls;
pub(super) mod client;
pub mod connection;
pub(super) mod errors;
mod load;
pub(super) mod pool;
mod round_trip;
mod script_counters;
pub(super) mod sentinel;
pub(super) mod version;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::{timeout_at, Instant};

use self::calling::establish;
pub(in crate::store::redis) use self::calling::Calling;
use self::connection::{connect_error, Conn, Manager};
use self::pool::{PoolSettings, Shared};
use crate::store::redis::scripts::library::library;
use crate::store::redis::scripts::script::CallCommand;
use crate::store::StoreError;

/// A server the store has checked and loaded its scripts on: its connection manager and the
/// startup pool, driven by the runtime that connected (threads borrow from it, see
/// `store::redis::local`).
#[derive(Clone)]
pub(in crate::store::redis) struct Server {
    /// Opens each connection on the runtime that asks for it (see [`Server::thread_pool`]).
    pub(in crate::store::redis) manager: Manager,
    pub(in crate::store::redis) startup: Arc<Shared>,
    /// How the server runs the scripts, shared by every pool to it.
    pub(in crate::store::redis) calling: Arc<Calling>,
}

impl Server {
    /// Opens a first connection through `manager` by `deadline`, checks the version (a server
    /// older than the scripts need is refused by name) and chooses how the server runs the
    /// scripts, loading them there (see [`calling`]), so a wrong address, password or an
    /// unreachable or unfit server fails here.
    pub(in crate::store::redis) async fn start(
        manager: Manager,
        settings: &PoolSettings,
        connect_timeout: Duration,
    ) -> Result<Server, StoreError> {
        let deadline = Instant::now() + connect_timeout;
        let timed_out = |_| StoreError::Timeout(connect_timeout);
        let mut first = timeout_at(deadline, manager.open())
            .await
            .map_err(timed_out)?
            .map_err(|e| connect_error(&e))?;
        let server = timeout_at(deadline, version::check(&mut first))
            .await
            .map_err(timed_out)??;
        let command = timeout_at(deadline, establish(&mut first, &settings.scripts))
            .await
            .map_err(timed_out)??;
        let library = match command {
            CallCommand::Fcall => library().name(),
            CallCommand::Evalsha => "",
        };
        tracing::info!(
            server = server.as_deref().unwrap_or("unknown"),
            calls = command.name(),
            library,
            "redis scripts ready"
        );
        let calling = Arc::new(Calling::default());
        calling.set(command);
        let driven = manager.driven_on(tokio::runtime::Handle::current());
        let startup = Shared::new(driven.clone(), settings, calling.clone(), None);
        // The pool may already be filling itself; a full pool simply drops this connection.
        let _ = startup.pool.add(Conn::new(first, &driven));
        Ok(Server {
            manager: driven.driven_by_caller(),
            startup: Arc::new(startup),
            calling,
        })
    }

    /// A pool for the calling thread, borrowing the startup pool's connections until its own has
    /// one. Its connections are opened, and so driven, on the calling thread's runtime: a call
    /// never wakes another thread.
    pub(in crate::store::redis) fn thread_pool(&self, settings: &PoolSettings) -> Arc<Shared> {
        Arc::new(Shared::new(
            self.manager.clone(),
            settings,
            self.calling.clone(),
            Some(self.startup.pool.clone()),
        ))
    }
}
