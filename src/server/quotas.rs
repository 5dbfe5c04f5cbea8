//! The rate limit quota service (RLQS): its registry of streams and buckets, the thread that
//! computes shares and sweeps idle buckets, and its families on `/metrics`.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;

use super::config_feed::OnRulesChanged;
use super::rlqs_thread;
use crate::limiter::Rules;
use crate::proto::rlqs::rate_limit_quota_service_server::RateLimitQuotaServiceServer;
use crate::service::rlqs::{QuotaRegistry, RlqsService, RlqsSettings};
use crate::service::Metrics;
use crate::store::Demands;

/// The RLQS registry and the thread its work runs on.
pub struct Quotas {
    registry: Arc<QuotaRegistry<Demands>>,
    work: Handle,
}

impl Quotas {
    /// The registry over `rules`, sharing demands through `demands`, with its thread started
    /// (it stops once `stopping` is cancelled) and its families registered on `metrics`.
    pub fn start(
        rules: Arc<ArcSwap<Rules>>,
        settings: RlqsSettings,
        demands: Demands,
        metrics: &Metrics,
        stopping: CancellationToken,
    ) -> std::io::Result<Quotas> {
        let registry = Arc::new(QuotaRegistry::new(rules, settings, demands));
        register_rlqs_metrics(metrics, &registry);
        let work = rlqs_thread::start(stopping.clone())?;
        work.spawn(sweep_quotas(registry.clone(), stopping));
        Ok(Quotas { registry, work })
    }

    pub fn registry(&self) -> &Arc<QuotaRegistry<Demands>> {
        &self.registry
    }

    /// `previous`, then the registry told that the rules changed.
    pub fn on_rules_changed(&self, previous: OnRulesChanged) -> OnRulesChanged {
        let registry = self.registry.clone();
        Box::new(move || {
            previous();
            registry.rules_changed();
        })
    }

    /// The gRPC service, and the largest report message it decodes.
    pub fn service(&self) -> (RateLimitQuotaServiceServer<RlqsService<Demands>>, usize) {
        let max_report = self.registry.settings().max_report_bytes();
        let service = RlqsService::new(self.registry.clone(), self.work.clone());
        (
            RateLimitQuotaServiceServer::new(service).max_decoding_message_size(max_report),
            max_report,
        )
    }
}

/// How often idle RLQS buckets are looked for: a tenth of the idle timeout, between 50 ms and 1 s.
fn sweep_interval(idle_timeout: Duration) -> Duration {
    (idle_timeout / 10).clamp(Duration::from_millis(50), Duration::from_secs(1))
}

/// Until shutdown, on the RLQS thread: computes the shares of RLQS buckets that wait for it,
/// abandons idle buckets and applies rule changes.
async fn sweep_quotas(quotas: Arc<QuotaRegistry<Demands>>, stopping: CancellationToken) {
    let mut sweeps = tokio::time::interval(sweep_interval(quotas.settings().idle_timeout));
    sweeps.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut rebalances = tokio::time::interval(quotas.settings().rebalance_gap);
    rebalances.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let rule_changes = quotas.follow_rule_changes();
    tokio::pin!(rule_changes);
    loop {
        tokio::select! {
            _ = stopping.cancelled() => return,
            _ = sweeps.tick() => quotas.sweep().await,
            _ = rebalances.tick() => quotas.rebalance_due().await,
            () = &mut rule_changes => {}
        }
    }
}

/// The RLQS families of `/metrics`.
fn register_rlqs_metrics(metrics: &Metrics, quotas: &Arc<QuotaRegistry<Demands>>) {
    let streams = quotas.clone();
    metrics.register_gauge(
        "ratelimitd_rlqs_streams",
        "Open RLQS streams (one per Envoy).",
        move || streams.streams() as u64,
    );
    let buckets = quotas.clone();
    metrics.register_gauge(
        "ratelimitd_rlqs_buckets",
        "RLQS buckets subscribed by at least one stream (per domain and bucket id).",
        move || buckets.buckets() as u64,
    );
    let budget = quotas.clone();
    metrics.register_gauge(
        "ratelimitd_rlqs_memory_budget_bytes",
        "The memory budget of the RLQS streams' state (--rlqs-memory-budget).",
        move || budget.budget().limit() as u64,
    );
    let held = quotas.clone();
    metrics.register_gauge(
        "ratelimitd_rlqs_memory_held_bytes",
        "Bytes held against it: streams, their buckets and the buckets' ids.",
        move || held.budget().held() as u64,
    );
    let sent = quotas.clone();
    metrics.register_counter(
        "ratelimitd_rlqs_assignments_sent_total",
        "RLQS bucket assignments sent to Envoys (new, changed and renewed).",
        move || sent.assignments_sent(),
    );
    let computations = quotas.clone();
    metrics.register_counter(
        "ratelimitd_rlqs_share_computations_total",
        "Computations of an RLQS bucket's fair shares (at most ten per bucket per second).",
        move || computations.computations(),
    );
    let allowed = quotas.clone();
    metrics.register_labelled_counter(
        "ratelimitd_rlqs_reported_allowed_total",
        "Requests Envoys reported allowed in RLQS buckets, by the bucket's rule (`unmatched`: none).",
        "rule",
        move || {
            allowed
                .reported()
                .into_iter()
                .map(|(rule, allowed, _)| (rule, allowed))
                .collect()
        },
    );
    let refused = quotas.clone();
    metrics.register_labelled_counter(
        "ratelimitd_rlqs_limited_total",
        "RLQS streams refused or ended by an RLQS cap, by limit (docs/rlqs.md, Bounds and errors).",
        "limit",
        move || refused.refusals().counts(),
    );
    let denied = quotas.clone();
    metrics.register_labelled_counter(
        "ratelimitd_rlqs_reported_denied_total",
        "Requests Envoys reported denied in RLQS buckets, by the bucket's rule (`unmatched`: none).",
        "rule",
        move || {
            denied
                .reported()
                .into_iter()
                .map(|(rule, _, denied)| (rule, denied))
                .collect()
        },
    );
}
