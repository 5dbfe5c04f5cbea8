//! Sentinel: where the master is, asked of the sentinels whenever a connection is opened, and
//! followed across failovers.
//!
//! A connection is opened to whatever the sentinels name as master, after the master itself
//! confirmed its role (`ROLE`, by the `redis` crate's [`SentinelClient`]), so the store never
//! writes to a replica it connected to. A master that is demoted later shows in three ways, each
//! of which drops the connections to it, so the next ones are opened to the new master:
//! - the sentinels announce `+switch-master` (a task subscribed to them bumps
//!   [`MasterLocator::generation`]; connections of an older generation fail their check-out);
//! - Sentinel kills the demoted master's client connections (`CLIENT KILL TYPE normal`);
//! - a command answers `READONLY` (the connection is dropped at once and the generation bumped).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::StreamExt;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{ConnectionAddr, RedisError, TlsMode};

use crate::store::redis::settings::topology::{HostPort, ServerAuth};
use crate::store::redis::tls::RedisTls;
use crate::store::StoreError;

/// Pause between attempts to (re)subscribe to the sentinels' announcements.
const WATCH_RETRY: Duration = Duration::from_secs(1);

/// Finds the current master of one Sentinel-managed group.
pub struct MasterLocator {
    master_name: String,
    client: tokio::sync::Mutex<SentinelClient>,
    generation: AtomicU64,
}

impl MasterLocator {
    /// The name the sentinels know the master by.
    pub fn master_name(&self) -> &str {
        &self.master_name
    }

    /// A locator asking `sentinels` (with `sentinel_auth`) for `master_name`, whose servers take
    /// `auth`. TLS (`auth.tls`) applies to the sentinels and the servers alike, with the
    /// deployment's trust and client certificate (`tls`, given with TLS). The sentinels and the
    /// master's role check are reached by the redis crate's own TLS (see
    /// [`RedisTls::crate_certificates`]).
    pub fn new(
        master_name: &str,
        sentinels: &[HostPort],
        auth: &ServerAuth,
        sentinel_auth: &ServerAuth,
        tls: Option<&RedisTls>,
    ) -> Result<MasterLocator, StoreError> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let invalid =
            |e: RedisError| StoreError::Unavailable(format!("invalid sentinel setup: {e}"));
        let addresses = sentinels.iter().map(|sentinel| {
            if auth.tls {
                ConnectionAddr::TcpTls {
                    host: sentinel.host.clone(),
                    port: sentinel.port,
                    insecure: false,
                    tls_params: None,
                }
            } else {
                ConnectionAddr::Tcp(sentinel.host.clone(), sentinel.port)
            }
        });
        let mut builder =
            SentinelClientBuilder::new(addresses, master_name, SentinelServerType::Master)
                .map_err(invalid)?;
        if let Some(user) = &auth.user {
            builder = builder.set_client_to_redis_username(user);
        }
        if let Some(password) = &auth.password {
            builder = builder.set_client_to_redis_password(password);
        }
        if let Some(user) = &sentinel_auth.user {
            builder = builder.set_client_to_sentinel_username(user);
        }
        if let Some(password) = &sentinel_auth.password {
            builder = builder.set_client_to_sentinel_password(password);
        }
        if auth.tls {
            builder = builder
                .set_client_to_redis_tls_mode(TlsMode::Secure)
                .set_client_to_sentinel_tls_mode(TlsMode::Secure);
            if let Some(tls) = tls {
                builder = builder
                    .set_client_to_redis_certificates(tls.crate_certificates())
                    .set_client_to_sentinel_certificates(tls.crate_certificates());
            }
        }
        Ok(MasterLocator {
            master_name: master_name.to_owned(),
            client: tokio::sync::Mutex::new(builder.build().map_err(invalid)?),
            generation: AtomicU64::new(0),
        })
    }

    /// A client for the current master, as the sentinels name it and as it confirms itself.
    pub async fn master_client(&self) -> Result<redis::Client, RedisError> {
        self.client.lock().await.async_get_client().await
    }

    /// Changes whenever the master may have moved: connections opened in an older generation
    /// are dropped at their next check-out.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }

    /// Records that the master moved (a `+switch-master`, or a `READONLY` answer).
    pub fn master_moved(&self) {
        self.generation.fetch_add(1, Ordering::Relaxed);
    }

    /// Subscribes to the sentinels' `+switch-master` announcements on the current runtime, for as
    /// long as the locator lives; resubscribes after a lost connection.
    pub fn spawn_watch(self: &Arc<MasterLocator>) {
        let locator = Arc::downgrade(self);
        tokio::spawn(watch(locator));
    }
}

async fn watch(locator: Weak<MasterLocator>) {
    loop {
        let Some(strong) = locator.upgrade() else {
            return;
        };
        let subscribed = async {
            let client = strong
                .client
                .lock()
                .await
                .async_get_sentinel_client()
                .await?;
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe("+switch-master").await?;
            Ok::<_, RedisError>(pubsub)
        }
        .await;
        let master_name = strong.master_name.clone();
        drop(strong);
        match subscribed {
            Ok(pubsub) => {
                let mut messages = pubsub.into_on_message();
                while let Some(message) = messages.next().await {
                    let Some(strong) = locator.upgrade() else {
                        return;
                    };
                    // "<master name> <old ip> <old port> <new ip> <new port>"
                    let payload: String = message.get_payload().unwrap_or_default();
                    if payload.split_whitespace().next() == Some(master_name.as_str()) {
                        tracing::info!(%payload, "sentinel announced a new redis master");
                        strong.master_moved();
                    }
                }
                tracing::debug!("lost the subscription to the sentinels; resubscribing");
            }
            Err(error) => tracing::debug!(%error, "cannot subscribe to the sentinels"),
        }
        tokio::time::sleep(WATCH_RETRY).await;
    }
}
