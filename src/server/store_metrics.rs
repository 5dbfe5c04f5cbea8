//! The store's families on `/metrics`: Redis's calls and reloads, failure health, the deny
//! cache and the lease layer.

use std::sync::Arc;

use crate::service::Metrics;
use crate::store::lease::{LeaseStats, RuleLeaseCounts};
use crate::store::{Connecting, DenyCache, FailureHealth, RedisStore, Store};

/// The Redis store's counters, read through its slot (0 while startup still waits for it).
pub fn register_redis_counters(metrics: &Metrics, slot: &Arc<Connecting<RedisStore>>) {
    type StoreCounter = (&'static str, &'static str, fn(&RedisStore) -> u64);
    let counters: [StoreCounter; 6] = [
        (
            "ratelimitd_redis_script_reloads_total",
            "Times the Redis scripts were loaded again after Redis lost them (NOSCRIPT, or a Functions library found gone: a restart, a failover, SCRIPT FLUSH or FUNCTION FLUSH).",
            RedisStore::script_reloads,
        ),
        (
            "ratelimitd_redis_script_calls_total",
            "Calls of the request script (FCALL or EVALSHA) sent to Redis; concurrent requests share a call.",
            RedisStore::script_calls,
        ),
        (
            "ratelimitd_redis_script_call_requests_total",
            "Requests those calls carried: over ratelimitd_redis_script_calls_total, the mean batch.",
            RedisStore::script_call_requests,
        ),
        (
            "ratelimitd_redis_connections_lost_total",
            "Redis connections found dead (connection error or timeout) and replaced.",
            RedisStore::connections_lost,
        ),
        (
            "ratelimitd_redis_slot_map_refreshes_total",
            "Times the Redis Cluster slot map was read again (redirections, lost masters).",
            RedisStore::slot_map_refreshes,
        ),
        (
            "ratelimitd_redis_refunds_failed_total",
            "Refunds of a denied cross-node request that failed: the reservation stays until its window or refill takes it back.",
            RedisStore::refunds_failed,
        ),
    ];
    for (name, help, read) in counters {
        let slot = slot.clone();
        metrics.register_counter(name, help, move || slot.get().map_or(0, read));
    }
}

/// The deny cache's hits and entries.
pub fn register_deny_cache<S: Store>(metrics: &Metrics, cache: &Arc<DenyCache<S>>) {
    let (hits, entries) = (cache.clone(), cache.clone());
    metrics.register_counter(
        "ratelimitd_deny_cache_hits_total",
        "Requests answered OVER_LIMIT by the local deny cache, without a Redis round trip.",
        move || hits.hits(),
    );
    metrics.register_gauge(
        "ratelimitd_deny_cache_entries",
        "Counters held in the local deny cache (expired ones not yet dropped included).",
        move || entries.len() as u64,
    );
}

/// The lease layer's totals as metric families, per rule (domain, rule) where they have one.
pub fn register_lease_metrics(metrics: &Metrics, stats: &Arc<LeaseStats>) {
    type Pick = fn(&RuleLeaseCounts) -> u64;
    let per_rule = |kinds: &'static [(&'static str, Pick)]| {
        let stats = Arc::clone(stats);
        move || {
            let mut series = Vec::new();
            for (rule, counts) in stats.by_rule() {
                for (kind, pick) in kinds {
                    let labels = vec![
                        rule.domain.to_string(),
                        rule.rule.to_string(),
                        (*kind).to_owned(),
                    ];
                    series.push((labels, pick(&counts)));
                }
            }
            series
        }
    };
    metrics.register_counter_family(
        "ratelimitd_lease_decisions_total",
        "Checks of leased rules, by how this replica decided them: from hits it held (local), after waiting for a refill (after_refill), denied without a store call because the store had nothing to grant (denied_locally), or by the store exactly (store: a limit too small to lease, or the replica held leases on its most counters).",
        &["domain", "rule", "decided"],
        per_rule(&[
                ("local", |c| c.local),
                ("after_refill", |c| c.waited),
                ("denied_locally", |c| c.denied_locally),
                ("store", |c| c.exact),
            ],
        ),
    );
    metrics.register_counter_family(
        "ratelimitd_lease_hits_total",
        "Hits of leased counters: granted to this replica by the store, used by admitted requests, returned to the store unused, and expired unused when their lease ended.",
        &["domain", "rule", "hits"],
        per_rule(&[
                ("granted", |c| c.granted),
                ("used", |c| c.used),
                ("returned", |c| c.returned),
                ("expired", |c| c.expired),
            ],
        ),
    );
    let asks = Arc::clone(stats);
    metrics.register_counter_family(
        "ratelimitd_lease_asks_total",
        "Leases asked for (one per counter per store call), by rule.",
        &["domain", "rule"],
        move || {
            asks.by_rule()
                .into_iter()
                .map(|(rule, counts)| {
                    (
                        vec![rule.domain.to_string(), rule.rule.to_string()],
                        counts.asks,
                    )
                })
                .collect()
        },
    );
    let rounds = Arc::clone(stats);
    metrics.register_counter(
        "ratelimitd_lease_calls_total",
        "Store calls that asked for leases: each carries every counter due for a refill then, whatever its rule.",
        move || rounds.rounds(),
    );
    let refused = Arc::clone(stats);
    metrics.register_counter(
        "ratelimitd_lease_counters_refused_total",
        "Checks of leased rules decided exactly because the replica already held leases on as many counters as it may.",
        move || refused.counters_refused(),
    );
}

/// The failed calls in the health window, and the times they turned health NOT_SERVING.
pub fn register_failure_health<S: Store>(metrics: &Metrics, store: &Arc<FailureHealth<S>>) {
    let (calls, failures, trips) = (store.clone(), store.clone(), store.clone());
    metrics.register_gauge(
        "ratelimitd_health_store_calls",
        "Requests the store decided or failed in the health window (--health-failure-window).",
        move || calls.tally().calls,
    );
    metrics.register_gauge(
        "ratelimitd_health_store_failures",
        "Of those, the ones that failed (errors, timeouts, lost connections).",
        move || failures.tally().failures,
    );
    metrics.register_counter(
        "ratelimitd_health_store_failure_trips_total",
        "Times failed store calls turned health NOT_SERVING (--health-failure-ratio reached).",
        move || trips.trips(),
    );
}
