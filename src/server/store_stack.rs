//! The store the limiter decides through: the memory store, or Redis behind failure health,
//! the deny cache (unless turned off) and the lease layer.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;

use super::config_feed::OnRulesChanged;
use super::error::ServerError;
use super::health_probe::PROBE_INTERVAL;
use super::memory_leases;
use super::settings::{Settings, ENVOYPROXY_KEYS_NEED_REDIS};
use super::store_metrics::{
    register_deny_cache, register_failure_health, register_lease_metrics, register_redis_counters,
};
use super::store_startup::{self, RedisSlots, Startup};
use crate::limiter::Rules;
use crate::service::Metrics;
use crate::store::lease::{LeaseSettings, LeasedStore};
use crate::store::redis::KeyFormat;
use crate::store::{
    Connecting, Demands, DenyCache, FailureHealth, MemoryDemands, MemoryStore, RedisStore, Store,
};

/// Redis as the server reaches it: through the slot startup fills, counting failed calls.
type RedisBase = FailureHealth<Connecting<RedisStore>>;

/// Each store the server can decide through, as its own type (serving is compiled for each, so
/// a decision pays no dispatch).
pub enum Stacked {
    Memory(Arc<MemoryStore>),
    Redis(Arc<LeasedStore<RedisBase>>),
    RedisDenyCache(Arc<LeasedStore<DenyCache<RedisBase>>>),
}

/// The store, and what serving needs of it besides deciding.
pub struct StoreStack {
    pub store: Stacked,
    pub parts: StoreParts,
}

/// What serving needs of the store besides deciding.
pub struct StoreParts {
    /// Where startup stands with Redis (the memory store is always connected).
    pub startup: Startup,
    /// Where RLQS demands are shared: Redis when the store is Redis, else this process.
    pub quota_demands: Demands,
    /// What the store does after the rules changed (the deny cache is cleared).
    pub on_rules_changed: OnRulesChanged,
}

impl StoreStack {
    /// The store `settings` ask for, over `rules`, its families registered on `metrics`; with
    /// Redis, connected (or still connecting, as `--redis-startup-wait` lets it).
    pub async fn build(
        settings: &Settings,
        rules: &Arc<ArcSwap<Rules>>,
        metrics: &Metrics,
    ) -> Result<StoreStack, ServerError> {
        let domains = rules.load().domains.len();
        let Some(redis) = settings.redis.clone() else {
            if settings.redis_keys.format() == KeyFormat::Envoyproxy {
                return Err(ServerError::Settings(ENVOYPROXY_KEYS_NEED_REDIS.into()));
            }
            let note = memory_leases::note_exact_decisions(rules.clone());
            note();
            let store = Arc::new(MemoryStore::new());
            store.spawn_sweeper(PROBE_INTERVAL);
            tracing::info!(domains, store = "memory", "configuration loaded");
            return Ok(StoreStack {
                store: Stacked::Memory(store),
                parts: StoreParts {
                    startup: Startup::Connected,
                    quota_demands: Demands::Memory(MemoryDemands::new()),
                    on_rules_changed: Box::new(note),
                },
            });
        };
        let leases = LeaseSettings {
            period: settings.lease_period,
            wait: redis.timeout,
            max_counters: LeaseSettings::DEFAULT_MAX_COUNTERS,
        };
        let slots = RedisSlots::new(&redis.topology.address());
        let layout = settings.redis_keys.clone();
        let startup = store_startup::connect(redis, layout.clone(), slots.clone()).await?;
        tracing::info!(
            key_format = %layout.format(),
            key_prefix = layout.prefix(),
            key_format_until = layout.until_s().map(|until| {
                humantime::format_rfc3339(std::time::UNIX_EPOCH + Duration::from_secs(until))
                    .to_string()
            }),
            "redis keys"
        );
        register_redis_counters(metrics, &slots.store);
        let base = Arc::new(FailureHealth::new(
            slots.store.clone(),
            settings.failure_health,
        ));
        if settings.failure_health.is_on() {
            register_failure_health(metrics, &base);
        }
        let deny_cache = settings.deny_cache.is_some();
        tracing::info!(domains, store = "redis", deny_cache, "configuration loaded");
        let quota_demands = Demands::Redis(slots.demands.clone());
        let (store, on_rules_changed): (Stacked, OnRulesChanged) = match settings.deny_cache {
            None => (
                Stacked::Redis(with_leases(base, leases, metrics)),
                Box::new(|| {}),
            ),
            Some(cache_settings) => {
                let epoch = slots.store.clone();
                let cache = Arc::new(
                    DenyCache::new(base, cache_settings)
                        .with_epoch(move || epoch.get().map_or(0, RedisStore::epoch)),
                );
                register_deny_cache(metrics, &cache);
                let clear = cache.clone();
                (
                    Stacked::RedisDenyCache(with_leases(cache, leases, metrics)),
                    Box::new(move || clear.clear()),
                )
            }
        };
        Ok(StoreStack {
            store,
            parts: StoreParts {
                startup,
                quota_demands,
                on_rules_changed,
            },
        })
    }
}

/// `store` behind the lease layer: leased checks decided from leases (see `store::lease`), every
/// other check by `store`; its totals registered as metrics.
fn with_leases<S: Store>(
    store: Arc<S>,
    settings: LeaseSettings,
    metrics: &Metrics,
) -> Arc<LeasedStore<S>> {
    let leased = LeasedStore::start(store, settings);
    register_lease_metrics(metrics, &leased.stats());
    Arc::new(leased)
}
