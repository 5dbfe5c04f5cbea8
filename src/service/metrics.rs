//! Prometheus metrics, kept at the edge and served as text (exposition format 0.0.4) at
//! `/metrics` on the HTTP port.
//!
//! Per configured rule (labels `domain` and `rule`, the rule's path such as
//! `edge.api_key_free.path`), counters of hits as envoyproxy/ratelimit counts them, each
//! envoyproxy stat `X` becoming `ratelimitd_X_total`:
//!
//! | metric | counts the hits of a descriptor that ... |
//! |---|---|
//! | `ratelimitd_total_hits_total` | matched the rule (every hit) |
//! | `ratelimitd_within_limit_total` | was answered OK (near-limit hits included) |
//! | `ratelimitd_near_limit_total` | was admitted and left less than `1 − near_limit_ratio` of the capacity: hits whose position in the capacity is above `floor(capacity × ratio)` |
//! | `ratelimitd_over_limit_total` | was over the limit (shadow- and quota-mode ones included) |
//! | `ratelimitd_shadow_mode_total` | was over a shadow-mode limit (answered OK) |
//!
//! A descriptor with a client override and no configured rule counts under `rule="(override)"`.
//!
//! Cardinality is bounded by the configuration: descriptor values never become label values,
//! except for rules with `detailed_metric: true`, whose series carry a `descriptor` label
//! (`key_value.key2_value2`, as envoyproxy/ratelimit names detailed stats, cut at
//! [`DETAILED_LABEL_MAX_BYTES`]). At most [`DETAILED_METRIC_CAP`] distinct descriptor labels are
//! kept per rule; the hits of any further descriptor count under `descriptor="_other"`. However
//! many rules are configured, `/metrics` shows at most [`Metrics::with_max_rule_series`] of these
//! series, those with hits first (see [`rule_series`]).
//!
//! The same counters also feed the statsd sink (`super::statsd`), which reads them off the
//! request path: [`Metrics::take_upstream_deltas`] hands it what changed since it last asked,
//! keyed as envoyproxy/ratelimit names its stats. For that, overridden descriptors keep their
//! hits apart per descriptor (envoyproxy/ratelimit names their stats after the request's values,
//! `domain.key_value.key2_value2`, at most [`DETAILED_METRIC_CAP`] per rule), which `/metrics`
//! adds back into the rule's series; and requests naming an unknown domain are counted per
//! domain (at most [`UNKNOWN_DOMAIN_CAP`] domains), which `/metrics` shows only as a total.
//!
//! Also: the request latency histogram, requests by result, requests refused by a request bound,
//! store errors by kind, answers given by the store-failure policy, configuration reloads, what
//! loading configurations did (files read and parsed, files refused by a configuration bound),
//! what the transport bounds refused or closed (by [`TransportRefusal`]), accept errors by port, requests
//! in an unknown domain, requests global shadow mode let through, and the counters other
//! components expose (Redis script reloads, deny-cache hits, open connections, the statsd
//! sink's datagrams), read when scraped; `ratelimitd_build_info`; and on Linux the process
//! families (`process_cpu_seconds_total`, `process_resident_memory_bytes`, `process_open_fds`
//! and the others of the `prometheus` crate's process collector).
//!
//! The exposition is the `prometheus` crate's (tikv/rust-prometheus): every family group is a
//! [`prometheus::core::Collector`] registered in one [`prometheus::Registry`], reading the
//! counters when scraped, and the registry's families are written by its
//! [`prometheus::TextEncoder`] in the text format 0.0.4. Recording stays on this module's own
//! atomics, so the request path costs what it did; the families are built at scrape time only.
//! Not `prometheus-client`: it writes OpenMetrics, which appends `.` to every help text, names a
//! counter family without its `_total` suffix and ends with `# EOF`, so the help and `# TYPE`
//! lines users and dashboards read would change. As the crate does, the registry orders the
//! families by name and each family's series by label values, and leaves out a family with no
//! series (one labelled per value seen shows from its first value on).
mod build_info;
mod config_families;
mod family;
mod overflow_label;
mod request_families;
mod rule_families;
mod rule_series;
mod state;
mod store_families;
mod totals;
mod transport_families;
mod xds_families;

pub use build_info::VERSION as BUILD_VERSION;
pub use overflow_label::OVERFLOW_LABEL;
pub use state::{
    CounterReset, Metrics, RequestResult, UpstreamCounts, DETAILED_METRIC_CAP, RESPONSE_TIME_MAX_MS,
};
use state::{
    Counters, Histogram, Latched, ResponseTimes, RuleStats, RulesByDomain, Slot, Taken,
    UpstreamTaken, STORE_ERROR_KINDS,
};
pub use totals::{ProcessTotals, RuleTotals};

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use prometheus::{Registry, TextEncoder};

use self::family::{FamilyGroup, Spec};
use super::descriptor_label::{cut, detailed_label, override_label};
use super::top_values::{RuleView, TopQuery, TopSettings, TopValues};
use super::transport_refusal::{Port, TransportRefusal};
use crate::config::xds::XdsConfig;
use crate::config::Loader;
use crate::limiter::algorithm::Verdict;
use crate::limiter::{
    Code, ConfiguredLimit, Outcome, Plan, Request, RequestBound, Resolution, RuleSet, Rules,
    SystemClock,
};
use crate::store::StoreError;

pub use super::descriptor_label::DETAILED_LABEL_MAX_BYTES;
/// The `rule` label of descriptors limited by a client override without a configured rule.
pub const OVERRIDE_RULE: &str = "(override)";
/// envoyproxy/ratelimit's default `NEAR_LIMIT_RATIO`.
pub const DEFAULT_NEAR_LIMIT_RATIO: f64 = 0.8;
/// Most unknown domains counted one by one; requests naming any further one count under
/// [`OVERFLOW_LABEL`].
pub const UNKNOWN_DOMAIN_CAP: usize = 100;
/// Most series of the per-rule families shown by default (`--metrics-max-rule-series`).
pub const DEFAULT_MAX_RULE_SERIES: usize = 5000;

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new(DEFAULT_NEAR_LIMIT_RATIO)
    }
}

impl Metrics {
    /// `near_limit_ratio` in (0, 1]: hits above this share of a limit's capacity are near the
    /// limit (envoyproxy/ratelimit's `NEAR_LIMIT_RATIO`, 0.8 by default).
    pub fn new(near_limit_ratio: f64) -> Metrics {
        let ratio = if near_limit_ratio.is_finite() && near_limit_ratio > 0.0 {
            near_limit_ratio.min(1.0)
        } else {
            DEFAULT_NEAR_LIMIT_RATIO
        };
        Metrics {
            near_limit_ratio: ratio,
            max_rule_series: DEFAULT_MAX_RULE_SERIES,
            rules: RwLock::new(HashMap::new()),
            latency: Histogram::new(),
            requests: Default::default(),
            request_bounds: Default::default(),
            store_errors: Default::default(),
            policy: Mutex::new("unavailable"),
            policy_answers: AtomicU64::new(0),
            counter_resets: Default::default(),
            reloads_ok: AtomicU64::new(0),
            reloads_failed: AtomicU64::new(0),
            last_reload_ok: AtomicBool::new(true),
            last_success_unix: AtomicU64::new(SystemClock::now_secs()),
            transport_refusals: Default::default(),
            accept_errors: Default::default(),
            registry: process_registry(),
            own_families: OnceLock::new(),
            domains_not_found: RwLock::new(HashMap::new()),
            domains_not_found_overflow: Latched::default(),
            global_shadow_mode: AtomicU64::new(0),
            response_ms: OnceLock::new(),
            upstream_taken: UpstreamTaken::default(),
            top: TopValues::new(&TopSettings::default()),
        }
    }

    /// Keeps `/top`'s summaries as `settings` say (default: [`TopSettings::default`]).
    pub fn with_top(mut self, settings: &TopSettings) -> Metrics {
        self.top = TopValues::new(settings);
        self
    }

    /// The `GET /top` JSON: the rules `query` selects that were hit, tracked or not, each
    /// tracked one with its rankings over the query's window (see [`super::top_values`]).
    pub fn top_json(&self, query: &TopQuery) -> String {
        self.top_value(query, usize::MAX, usize::MAX).to_string()
    }

    /// The `/top` document of [`Metrics::top_json`] with at most `max_rules` rules (the most
    /// denied first) and `max_values` values per ranking.
    pub fn top_value(
        &self,
        query: &TopQuery,
        max_rules: usize,
        max_values: usize,
    ) -> serde_json::Value {
        let rules: Vec<(Arc<str>, Arc<str>, Arc<RuleStats>)> = self
            .rules
            .read()
            .iter()
            .filter(|(domain, _)| query.domain.as_deref().is_none_or(|d| d == domain.as_ref()))
            .flat_map(|(domain, by_path)| {
                by_path
                    .iter()
                    .filter(|(path, stats)| {
                        query.rule.as_deref().is_none_or(|r| r == path.as_ref())
                            && stats.top.get().is_some()
                    })
                    .map(|(path, stats)| (domain.clone(), path.clone(), stats.clone()))
            })
            .collect();
        let views: Vec<RuleView<'_>> = rules
            .iter()
            .filter_map(|(domain, path, stats)| {
                Some(RuleView {
                    domain,
                    path,
                    top: stats.top.get()?.as_ref(),
                    detailed_metric: stats.is_detailed.load(Ordering::Relaxed),
                })
            })
            .collect();
        self.top.render_value(query, &views, max_rules, max_values)
    }

    /// Most series of the per-rule families `/metrics` shows (`--metrics-max-rule-series`).
    pub fn max_rule_series(&self) -> usize {
        self.max_rule_series
    }

    pub fn near_limit_ratio(&self) -> f64 {
        self.near_limit_ratio
    }

    /// Shows at most `max` series of the per-rule families on `/metrics` (at least one): those
    /// with hits first, the hits of the others under `domain="_other",rule="_other"` (see
    /// [`rule_series`]). The counters behind them, and the statsd sink, are not bounded by it.
    pub fn with_max_rule_series(mut self, max: usize) -> Metrics {
        self.max_rule_series = max.max(1);
        self
    }

    /// Makes the rule series those of `rules`: each configured rule keeps its series (its
    /// counts go on), a new one gets a zero series so that it shows before its first hit, and
    /// the series of rules and domains no longer configured are dropped, so that a configuration
    /// that renames its rules again and again cannot grow `/metrics` (a rule configured again
    /// starts from zero, which Prometheus reads as a counter reset). A domain keeps the counts
    /// of its overridden descriptors (`rule="(override)"`) while it is configured. Hits of a
    /// dropped rule not yet taken by [`Metrics::take_upstream_deltas`] are not sent.
    pub fn register_rules(&self, rules: &Rules) {
        let mut map = self.rules.write();
        let mut configured: RulesByDomain = HashMap::with_capacity(rules.domains.len());
        for (name, domain) in &rules.domains {
            let mut limits = Vec::new();
            walk_limits(&domain.root, &mut limits);
            let (name, mut previous) = map
                .remove_entry(name.as_str())
                .unwrap_or_else(|| (Arc::from(name.as_str()), HashMap::new()));
            let mut by_path = HashMap::with_capacity(limits.len());
            if let Some(overridden) = previous.remove_entry(OVERRIDE_RULE) {
                by_path.insert(overridden.0, overridden.1);
            }
            for limit in limits {
                let (path, stats) = previous
                    .remove_entry(limit.path.as_str())
                    .unwrap_or_else(|| (Arc::from(limit.path.as_str()), Arc::default()));
                stats.configure(&limit);
                if !limit.detailed_metric {
                    stats.plain_used.store(true, Ordering::Relaxed);
                }
                by_path.insert(path, stats);
            }
            configured.insert(name, by_path);
        }
        *map = configured;
    }

    fn rule(&self, domain: &str, path: &str, limit: Option<&ConfiguredLimit>) -> Arc<RuleStats> {
        if let Some(stats) = self.rules.read().get(domain).and_then(|d| d.get(path)) {
            return stats.clone();
        }
        self.rules
            .write()
            .entry(Arc::from(domain))
            .or_default()
            .entry(Arc::from(path))
            .or_insert_with(|| {
                let stats = RuleStats::default();
                if let Some(limit) = limit {
                    stats.configure(limit);
                }
                Arc::new(stats)
            })
            .clone()
    }

    /// Counts the hits of every descriptor of a decided request. `verdicts` are the store's (one
    /// per check); `None` when the answer came from the store-failure policy.
    pub fn record_decision(
        &self,
        request: &Request,
        plan: &Plan,
        verdicts: Option<&[Verdict]>,
        outcome: &Outcome,
    ) {
        let count = plan
            .resolutions
            .iter()
            .zip(&outcome.statuses)
            .zip(&request.descriptors);
        for (index, ((resolution, status), descriptor)) in count.enumerate() {
            let matched = plan.matched.get(index).and_then(Option::as_ref);
            let (hits, near) = match resolution {
                Resolution::NoLimit => continue,
                Resolution::Unlimited | Resolution::Blocked { .. } => {
                    (request.hits_for(descriptor), 0)
                }
                Resolution::Counted { check, .. } => {
                    let Some(c) = plan.checks.get(*check) else {
                        continue;
                    };
                    let verdict = verdicts.and_then(|v| v.get(*check));
                    let near = match verdict {
                        Some(v) if v.admitted => {
                            self.near_hits(c.rate.burst(), v.remaining, c.hits)
                        }
                        _ => 0,
                    };
                    (c.hits, near)
                }
            };
            let overridden = matches!(
                resolution,
                Resolution::Counted {
                    overridden: true,
                    ..
                } | Resolution::Blocked {
                    overridden: true,
                    ..
                }
            );
            let path = matched.map_or(OVERRIDE_RULE, |limit| limit.path.as_str());
            let stats = self.rule(&request.domain, path, matched.map(Arc::as_ref));
            let counters = if overridden {
                Slot::Labelled(stats.overridden.counters(override_label(descriptor)))
            } else if matched.is_some_and(|limit| limit.detailed_metric) {
                Slot::Labelled(stats.detailed.counters(detailed_label(descriptor)))
            } else {
                stats.plain_used.store(true, Ordering::Relaxed);
                Slot::Plain(&stats.plain)
            };
            Counters::add(&counters.total, hits);
            let over =
                status.code == Code::OverLimit || status.shadow_denied || status.quota_violated;
            if let Some(top) = stats.top.get_or_init(|| self.top.admit()) {
                let detailed = matched.is_some_and(|limit| limit.detailed_metric);
                self.top.record(top, descriptor, hits, over, detailed);
            }
            if over {
                Counters::add(&counters.over, hits);
                if status.shadow_denied {
                    Counters::add(&counters.shadow, hits);
                }
            } else {
                Counters::add(&counters.within, hits);
                Counters::add(&counters.near, near);
            }
        }
        if plan.modes.shadow_mode
            && outcome
                .statuses
                .iter()
                .any(|status| status.code == Code::OverLimit)
        {
            self.global_shadow_mode.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A request in `domain`, which no configuration defines, with `descriptors` descriptors
    /// (envoyproxy/ratelimit counts each descriptor).
    pub fn record_domain_not_found(&self, domain: &str, descriptors: usize) {
        let descriptors = descriptors as u64;
        let domain = cut(domain, DETAILED_LABEL_MAX_BYTES);
        if let Some(counter) = self.domains_not_found.read().get(domain) {
            counter.value.fetch_add(descriptors, Ordering::Relaxed);
            return;
        }
        let mut domains = self.domains_not_found.write();
        let counter = match domains.get(domain) {
            Some(counter) => counter,
            None if domains.len() < UNKNOWN_DOMAIN_CAP => domains
                .entry(domain.to_string())
                .or_insert_with(|| Arc::new(Latched::default())),
            None => &self.domains_not_found_overflow,
        };
        counter.value.fetch_add(descriptors, Ordering::Relaxed);
    }

    /// Of `hits` admitted leaving `remaining` of `capacity`, those above the near-limit
    /// threshold `floor(capacity × ratio)`.
    fn near_hits(&self, capacity: u32, remaining: u32, hits: u64) -> u64 {
        let capacity = u64::from(capacity);
        let used_after = capacity - u64::from(remaining).min(capacity);
        let threshold = (capacity as f64 * self.near_limit_ratio).floor() as u64;
        used_after.saturating_sub(threshold).min(hits)
    }

    /// Records how long a request took and how it ended.
    pub fn record_request(&self, result: RequestResult, elapsed: Duration) {
        self.latency.observe(elapsed);
        if let Some(times) = self.response_ms.get() {
            let ms = (elapsed.as_millis() as u64).min(RESPONSE_TIME_MAX_MS) as usize;
            if let Some(count) = times.counts.get(ms) {
                count.fetch_add(1, Ordering::Relaxed);
            }
        }
        let index = RequestResult::ALL
            .iter()
            .position(|r| *r == result)
            .unwrap_or(0);
        self.requests[index].fetch_add(1, Ordering::Relaxed);
    }

    /// A request refused because it exceeded `bound`.
    pub fn record_request_bound(&self, bound: RequestBound) {
        let index = RequestBound::ALL
            .iter()
            .position(|b| *b == bound)
            .unwrap_or(0);
        self.request_bounds[index].fetch_add(1, Ordering::Relaxed);
    }

    /// Exports the counters of `loader` (files read, parsed, refused by a configuration bound),
    /// instead of those of the loader registered before.
    pub fn register_config_loader(&self, loader: Arc<Loader>) {
        self.register_group(config_families::loader(loader));
    }

    /// The xDS client's configuration, whose version in force is exported
    /// (`ratelimitd_config_xds_version_info`), with the state of its stream
    /// (`ratelimitd_xds_stream_up` and the others).
    pub fn register_xds_config(&self, config: Arc<XdsConfig>) {
        self.register_group(xds_families::group(config));
    }

    pub fn record_store_error(&self, error: &StoreError) {
        let index = STORE_ERROR_KINDS
            .iter()
            .position(|k| *k == error.kind())
            .unwrap_or(1);
        self.store_errors[index].fetch_add(1, Ordering::Relaxed);
    }

    /// Names the store-failure policy in use (the `policy` label).
    pub fn set_store_error_policy(&self, policy: &'static str) {
        *self.policy.lock() = policy;
    }

    /// A request answered by the store-failure policy.
    pub fn record_policy_answer(&self) {
        self.policy_answers.fetch_add(1, Ordering::Relaxed);
    }

    /// A `POST /counters/reset` call and how it ended.
    pub fn record_counter_reset(&self, outcome: CounterReset) {
        let index = CounterReset::ALL
            .iter()
            .position(|o| *o == outcome)
            .unwrap_or(0);
        self.counter_resets[index].fetch_add(1, Ordering::Relaxed);
    }

    /// A configuration reload attempt.
    pub fn record_reload(&self, success: bool) {
        if success {
            self.reloads_ok.fetch_add(1, Ordering::Relaxed);
            self.last_success_unix
                .store(SystemClock::now_secs(), Ordering::Relaxed);
        } else {
            self.reloads_failed.fetch_add(1, Ordering::Relaxed);
        }
        self.last_reload_ok.store(success, Ordering::Relaxed);
    }

    /// A transport bound stepped in.
    pub fn record_transport_refusal(&self, refusal: TransportRefusal) {
        self.transport_refusals[refusal.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// How often `refusal` happened so far.
    pub fn transport_refusals(&self, refusal: TransportRefusal) -> u64 {
        self.transport_refusals[refusal.index()].load(Ordering::Relaxed)
    }

    /// Accepting a connection on `port` failed (out of descriptors, and the like).
    pub fn record_accept_error(&self, port: Port) {
        let index = Port::ALL.iter().position(|p| *p == port).unwrap_or(0);
        self.accept_errors[index].fetch_add(1, Ordering::Relaxed);
    }

    /// Adds a counter read from `read` when scraped (`name` should end in `_total`), instead of
    /// the family registered under `name` before.
    pub fn register_counter(
        &self,
        name: &'static str,
        help: &'static str,
        read: impl Fn() -> u64 + Send + Sync + 'static,
    ) {
        let spec = Spec::counter(name, help, &[]);
        self.register_group(FamilyGroup::new(&[spec], move || vec![spec.single(read())]));
    }

    /// Adds a gauge read from `read` when scraped, instead of the family registered under
    /// `name` before.
    pub fn register_gauge(
        &self,
        name: &'static str,
        help: &'static str,
        read: impl Fn() -> u64 + Send + Sync + 'static,
    ) {
        let spec = Spec::gauge(name, help, &[]);
        self.register_group(FamilyGroup::new(&[spec], move || vec![spec.single(read())]));
    }

    /// Adds a counter family read from `read` when scraped: one series per `(label value,
    /// count)` it returns, labelled `label` (no family while it returns none).
    pub fn register_labelled_counter(
        &self,
        name: &'static str,
        help: &'static str,
        label: &'static str,
        read: impl Fn() -> Vec<(String, u64)> + Send + Sync + 'static,
    ) {
        self.register_counter_family(name, help, &[label], move || {
            read()
                .into_iter()
                .map(|(value, count)| (vec![value], count))
                .collect()
        });
    }

    /// Adds a counter family read from `read` when scraped: one series per `(label values,
    /// count)` it returns, the values in the order of `labels` (no family while it returns
    /// none), instead of the family registered under `name` before. The caller bounds how many
    /// it returns.
    pub fn register_counter_family(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[&'static str],
        read: impl Fn() -> Vec<(Vec<String>, u64)> + Send + Sync + 'static,
    ) {
        let group = FamilyGroup::new(&[Spec::counter(name, help, labels)], {
            let labels: Box<[&'static str]> = labels.into();
            move || {
                let mut family = Spec::counter(name, help, &labels).family();
                for (values, count) in read() {
                    let values: Vec<&str> = values.iter().map(String::as_str).collect();
                    family.sample(&values, count);
                }
                vec![family.done()]
            }
        });
        self.register_group(group);
    }

    /// Registers `group`, taking the place of the group registered before with the same
    /// families. A group the registry refuses (a name or label Prometheus does not accept, a
    /// family another group has) is a programming error: it is logged and not exported.
    fn register_group(&self, group: prometheus::Result<FamilyGroup>) {
        let registered = group.and_then(|group| {
            let _ = self.registry.unregister(Box::new(group.stand_in()));
            let names: Vec<String> = group.names().map(str::to_owned).collect();
            self.registry
                .register(Box::new(group))
                .map_err(|error| prometheus::Error::Msg(format!("{names:?}: {error}")))
        });
        if let Err(error) = registered {
            tracing::error!(%error, "a metric family group was not registered");
        }
    }

    /// The Prometheus text exposition (format 0.0.4) of every registered family, and of this
    /// module's own families, whose collectors read `self` through a weak reference (so they
    /// are registered here, the first time, rather than at construction).
    pub fn render(self: &Arc<Self>) -> String {
        self.own_families.get_or_init(|| {
            let own = Arc::downgrade(self);
            self.register_group(rule_families::group(own.clone()));
            self.register_group(request_families::group(own.clone()));
            self.register_group(store_families::group(own.clone()));
            self.register_group(config_families::reloads(own.clone()));
            self.register_group(transport_families::group(own));
        });
        let families = self.registry.gather();
        let mut text = String::with_capacity(4096);
        if let Err(error) = TextEncoder::new().encode_utf8(&families, &mut text) {
            tracing::error!(%error, "metrics not encoded");
        }
        text
    }

    /// Keeps each request's time per whole millisecond from now on, for
    /// [`Metrics::take_response_times`] (the statsd sink's timer) and
    /// [`Metrics::response_time_totals`].
    pub fn keep_response_times(&self) {
        let _ = self.response_ms.set(ResponseTimes::new());
    }

    /// Calls `each(milliseconds, requests)` for every whole-millisecond response time seen since
    /// the previous call (nothing unless [`Metrics::keep_response_times`] was called), in
    /// increasing order; `RESPONSE_TIME_MAX_MS` stands for that or more. Meant for one reader.
    pub fn take_response_times(&self, mut each: impl FnMut(u64, u64)) {
        let Some(times) = self.response_ms.get() else {
            return;
        };
        for (ms, (count, taken)) in times.counts.iter().zip(times.taken.iter()).enumerate() {
            let now = count.load(Ordering::Relaxed);
            let requests = now.saturating_sub(taken.swap(now, Ordering::Relaxed));
            if requests > 0 {
                each(ms as u64, requests);
            }
        }
    }

    /// Calls `each(milliseconds, requests)` for every whole-millisecond response time seen since
    /// [`Metrics::keep_response_times`], in increasing order, as
    /// [`Metrics::take_response_times`] does but with totals, leaving its deltas alone.
    pub fn response_time_totals(&self, mut each: impl FnMut(u64, u64)) {
        let Some(times) = self.response_ms.get() else {
            return;
        };
        for (ms, count) in times.counts.iter().enumerate() {
            let requests = count.load(Ordering::Relaxed);
            if requests > 0 {
                each(ms as u64, requests);
            }
        }
    }

    /// What every counter envoyproxy/ratelimit's stats are made of gained since the previous
    /// call. Meant for one reader (the statsd sink): each call takes what it returns, so two
    /// readers would each see part of the hits.
    pub fn take_upstream_deltas(&self) -> UpstreamCounts {
        self.upstream_counts(true)
    }

    /// Every counter envoyproxy/ratelimit's stats are made of, as totals since start (what
    /// [`Metrics::take_upstream_deltas`] would add up to); reading them takes nothing.
    pub fn upstream_totals(&self) -> UpstreamCounts {
        self.upstream_counts(false)
    }

    /// The totals, or with `take` what they gained since the previous take.
    fn upstream_counts(&self, take: bool) -> UpstreamCounts {
        fn changed(delta: &[u64; 5]) -> bool {
            delta.iter().any(|d| *d > 0)
        }
        let read = |counters: &Counters| {
            if take {
                counters.take()
            } else {
                counters.read()
            }
        };
        let since = |taken: &Taken, now: u64| if take { taken.delta(now) } else { now };
        let mut counts = UpstreamCounts::default();
        let mut push = |key: &dyn Fn() -> String, delta: [u64; 5], counted: bool| {
            if counted && changed(&delta) {
                counts.rules.push((key(), delta));
            }
        };
        for (domain, rules) in self.rules.read().iter() {
            for (path, stats) in rules {
                let counted = !stats.is_unlimited.load(Ordering::Relaxed);
                push(
                    &|| path.to_string(),
                    read(&stats.plain),
                    counted && &**path != OVERRIDE_RULE,
                );
                for (label, counters) in stats.detailed.by_label.read().iter() {
                    push(&|| format!("{domain}.{label}"), read(counters), counted);
                }
                push(
                    &|| format!("{path}.{OVERFLOW_LABEL}"),
                    read(&stats.detailed.overflow),
                    counted,
                );
                for (label, counters) in stats.overridden.by_label.read().iter() {
                    push(&|| format!("{domain}.{label}"), read(counters), true);
                }
                push(
                    &|| format!("{domain}.{OVERFLOW_LABEL}"),
                    read(&stats.overridden.overflow),
                    true,
                );
            }
        }
        let mut count_domain = |domain: &str, counter: &Latched| {
            let count = since(&counter.taken, counter.value.load(Ordering::Relaxed));
            if count > 0 {
                counts.domains_not_found.push((domain.to_string(), count));
            }
        };
        for (domain, counter) in self.domains_not_found.read().iter() {
            count_domain(domain, counter);
        }
        count_domain(OVERFLOW_LABEL, &self.domains_not_found_overflow);

        let taken = &self.upstream_taken;
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let sum = |counters: &[AtomicU64]| counters.iter().map(load).sum::<u64>();
        counts.config_load_success = since(&taken.config_load_success, 1 + load(&self.reloads_ok));
        counts.config_load_error = since(&taken.config_load_error, load(&self.reloads_failed));
        counts.store_errors = since(&taken.store_errors, sum(&self.store_errors));
        let invalid = RequestResult::ALL
            .iter()
            .position(|r| *r == RequestResult::InvalidArgument)
            .map_or(0, |i| load(&self.requests[i]));
        counts.invalid_requests = since(&taken.invalid_requests, invalid);
        counts.global_shadow_mode =
            since(&taken.global_shadow_mode, load(&self.global_shadow_mode));
        counts.requests = since(&taken.requests, sum(&self.requests));
        counts
    }
}

/// Every limit of `set` and of the sets below it.
fn walk_limits(set: &RuleSet, out: &mut Vec<Arc<ConfiguredLimit>>) {
    for node in set.nodes() {
        out.extend(node.limit.iter().cloned());
        walk_limits(&node.children, out);
    }
}

/// A registry holding the process collector on Linux (CPU, memory, file descriptors, threads,
/// start time) and `ratelimitd_build_info`.
fn process_registry() -> Registry {
    let registry = Registry::new();
    #[cfg(target_os = "linux")]
    if let Err(error) = registry.register(Box::new(
        prometheus::process_collector::ProcessCollector::for_self(),
    )) {
        tracing::error!(%error, "the process families were not registered");
    }
    match build_info::group() {
        Ok(group) => {
            if let Err(error) = registry.register(Box::new(group)) {
                tracing::error!(%error, "ratelimitd_build_info was not registered");
            }
        }
        Err(error) => tracing::error!(%error, "ratelimitd_build_info was not registered"),
    }
    registry
}

/// What the status page's sampler reads (see [`totals`]).
impl Metrics {
    /// Every rule with counters, in no particular order, its labels added up. Takes the rule
    /// map's read lock while it copies the counts out.
    pub fn rule_totals(&self) -> Vec<RuleTotals> {
        let mut totals = Vec::new();
        for (domain, rules) in self.rules.read().iter() {
            for (path, stats) in rules {
                let mut sum = [0u64; 5];
                let mut add = |counters: &Counters| {
                    for (sum, value) in sum.iter_mut().zip(counters.read()) {
                        *sum = sum.saturating_add(value);
                    }
                };
                add(&stats.plain);
                for series in [&stats.detailed, &stats.overridden] {
                    for counters in series.by_label.read().values() {
                        add(counters);
                    }
                    add(&series.overflow);
                }
                totals.push(RuleTotals {
                    domain: domain.clone(),
                    rule: path.clone(),
                    hits: sum[0],
                    over_limit: sum[3],
                });
            }
        }
        totals
    }

    /// The process's totals since start.
    pub fn process_totals(&self) -> ProcessTotals {
        let requests = |result: RequestResult| {
            let index = RequestResult::ALL
                .iter()
                .position(|r| *r == result)
                .unwrap_or(0);
            self.requests[index].load(Ordering::Relaxed)
        };
        ProcessTotals {
            requests: self
                .requests
                .iter()
                .map(|counter| counter.load(Ordering::Relaxed))
                .sum(),
            over_limit: requests(RequestResult::OverLimit),
            latency_sum_ns: self.latency.sum_ns.load(Ordering::Relaxed),
            reloads_ok: self.reloads_ok.load(Ordering::Relaxed),
            reloads_failed: self.reloads_failed.load(Ordering::Relaxed),
            last_reload_ok: self.last_reload_ok.load(Ordering::Relaxed),
            last_load_unix: self.last_success_unix.load(Ordering::Relaxed),
        }
    }

    /// Whether `/top` tracks any rule (`--top-max-rules` above 0).
    pub fn top_enabled(&self) -> bool {
        self.top.max_rules() > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_limit_counts_hits_above_the_threshold() {
        let m = Metrics::new(0.8);
        // Capacity 10: threshold 8; positions 9 and 10 are near.
        assert_eq!(m.near_hits(10, 2, 1), 0); // position 8
        assert_eq!(m.near_hits(10, 1, 1), 1); // position 9
        assert_eq!(m.near_hits(10, 0, 1), 1); // position 10
        assert_eq!(m.near_hits(10, 0, 5), 2); // positions 6..=10
        assert_eq!(m.near_hits(10, 7, 3), 0);
        assert_eq!(m.near_hits(3, 0, 1), 1); // floor(2.4) = 2: position 3 is near
    }

    #[test]
    fn label_values_are_escaped_and_cut() {
        let metrics = Arc::new(Metrics::default());
        metrics.record_domain_not_found("a\"b\\c\nd", 1);
        let text = metrics.render();
        assert!(
            text.contains("ratelimitd_domain_not_found_total{domain=\"a\\\"b\\\\c\\nd\"} 1\n"),
            "{text}"
        );
        let long = crate::limiter::Descriptor {
            entries: vec![crate::limiter::Entry {
                key: "k".into(),
                value: "é".repeat(300),
            }],
            limit_override: None,
            hits_addend: None,
        };
        let label = detailed_label(&long);
        assert!(label.len() <= DETAILED_LABEL_MAX_BYTES);
        assert!(label.starts_with("k_é"));
    }

    #[test]
    fn the_histogram_build_info_and_process_families_are_exported() {
        let metrics = Arc::new(Metrics::default());
        metrics.record_request(RequestResult::Ok, Duration::from_micros(70));
        let text = metrics.render();
        for line in [
            "# HELP ratelimitd_request_duration_seconds Time to decide a rate-limit request (gRPC or /json): validation, matching, store.\n",
            "# TYPE ratelimitd_request_duration_seconds histogram\n",
            "ratelimitd_request_duration_seconds_bucket{le=\"0.00005\"} 0\n",
            "ratelimitd_request_duration_seconds_bucket{le=\"0.0001\"} 1\n",
            "ratelimitd_request_duration_seconds_bucket{le=\"1\"} 1\n",
            "ratelimitd_request_duration_seconds_bucket{le=\"+Inf\"} 1\n",
            "ratelimitd_request_duration_seconds_sum 0.00007\n",
            "ratelimitd_request_duration_seconds_count 1\n",
            "ratelimitd_requests_total{result=\"ok\"} 1\n",
            "# TYPE ratelimitd_build_info gauge\n",
        ] {
            assert!(text.contains(line), "no {line:?} in:\n{text}");
        }
        assert!(
            text.contains(&format!(
                "ratelimitd_build_info{{version=\"{BUILD_VERSION}\"}} 1\n"
            )),
            "{text}"
        );
        if cfg!(target_os = "linux") {
            for family in [
                "process_cpu_seconds_total counter",
                "process_resident_memory_bytes gauge",
                "process_virtual_memory_bytes gauge",
                "process_open_fds gauge",
                "process_max_fds gauge",
                "process_start_time_seconds gauge",
            ] {
                assert!(
                    text.contains(&format!("# TYPE {family}\n")),
                    "{family}:\n{text}"
                );
            }
        }
    }

    #[test]
    fn a_family_registered_again_takes_the_place_of_the_first() {
        let metrics = Arc::new(Metrics::default());
        metrics.register_counter("ratelimitd_test_total", "A test counter.", || 1);
        metrics.register_counter("ratelimitd_test_total", "A test counter.", || 2);
        let text = metrics.render();
        assert!(text.contains("\nratelimitd_test_total 2\n"), "{text}");
        assert_eq!(
            text.matches("# TYPE ratelimitd_test_total counter").count(),
            1
        );
    }

    fn entries(pairs: &[(&str, &str)]) -> Vec<crate::limiter::Entry> {
        pairs
            .iter()
            .map(|(key, value)| crate::limiter::Entry {
                key: key.to_string(),
                value: value.to_string(),
            })
            .collect()
    }

    fn descriptor(pairs: &[(&str, &str)]) -> crate::limiter::Descriptor {
        crate::limiter::Descriptor {
            entries: entries(pairs),
            limit_override: None,
            hits_addend: None,
        }
    }

    #[test]
    fn detailed_and_override_suffixes_differ_on_empty_values_as_upstream() {
        let d = descriptor(&[("route", "api"), ("user", "")]);
        assert_eq!(detailed_label(&d), "route_api.user_");
        assert_eq!(override_label(&d), "route_api.user");
    }

    /// Decides `request` as a store that admits (or denies) every check would, and records it.
    fn record(metrics: &Metrics, rules: &Rules, request: &Request, admit: bool) {
        let plan = crate::limiter::plan(rules, request).expect("a plan");
        let verdicts: Vec<Verdict> = plan
            .checks
            .iter()
            .map(|check| Verdict {
                admitted: admit,
                remaining: if admit { check.rate.burst() - 1 } else { 0 },
                reset_after_us: 0,
                counted_when_vetoed: false,
            })
            .collect();
        let outcome = crate::limiter::outcome(&plan, &verdicts);
        metrics.record_decision(request, &plan, Some(&verdicts), &outcome);
    }

    #[test]
    fn upstream_deltas_are_keyed_as_upstream_and_taken_once() {
        let yaml = "domain: d\ndescriptors:\n  - key: plain\n    rate_limit: {unit: hour, requests_per_unit: 100}\n  - key: wide\n    detailed_metric: true\n    rate_limit: {unit: hour, requests_per_unit: 100}\n  - key: free\n    rate_limit: {unlimited: true}\n";
        let domain = crate::config::parse_domain(std::path::Path::new("d.yaml"), yaml)
            .expect("valid configuration");
        let mut rules = Rules::default();
        rules.domains.insert("d".into(), domain);
        let metrics = Arc::new(Metrics::default());
        metrics.register_rules(&rules);
        let request = |descriptors: Vec<crate::limiter::Descriptor>| Request {
            domain: "d".into(),
            descriptors,
            hits_addend: 0,
        };
        let mut overridden = descriptor(&[("nomatch", "1")]);
        overridden.limit_override = Some(crate::limiter::LimitOverride {
            requests_per_unit: 5,
            unit: crate::limiter::Unit::Hour,
            unit_multiplier: 1,
        });
        record(
            &metrics,
            &rules,
            &request(vec![descriptor(&[("plain", "a")])]),
            true,
        );
        record(
            &metrics,
            &rules,
            &request(vec![descriptor(&[("plain", "b")])]),
            false,
        );
        record(
            &metrics,
            &rules,
            &request(vec![descriptor(&[("wide", "x")])]),
            true,
        );
        record(
            &metrics,
            &rules,
            &request(vec![descriptor(&[("free", "z")])]),
            true,
        );
        record(&metrics, &rules, &request(vec![overridden.clone()]), true);
        metrics.record_domain_not_found("nope", 2);

        let mut deltas = metrics.take_upstream_deltas();
        deltas.rules.sort();
        assert_eq!(
            deltas.rules,
            [
                ("d.nomatch_1".to_string(), [1, 1, 0, 0, 0]),
                ("d.plain".to_string(), [2, 1, 0, 1, 0]),
                ("d.wide_x".to_string(), [1, 1, 0, 0, 0]),
            ],
            "the unlimited rule counts nothing, as upstream"
        );
        assert_eq!(deltas.domains_not_found, [("nope".to_string(), 2)]);
        assert_eq!(deltas.config_load_success, 1, "the load at startup");
        assert_eq!(deltas.requests, 0, "record_request was not called");

        record(&metrics, &rules, &request(vec![overridden]), true);
        let again = metrics.take_upstream_deltas();
        assert_eq!(again.rules, [("d.nomatch_1".to_string(), [1, 1, 0, 0, 0])]);
        assert_eq!(again.config_load_success, 0);
        assert!(again.domains_not_found.is_empty());

        // Totals add every take up, and reading them takes nothing.
        for _ in 0..2 {
            let mut totals = metrics.upstream_totals();
            totals.rules.sort();
            assert_eq!(
                totals.rules[0],
                ("d.nomatch_1".to_string(), [2, 2, 0, 0, 0])
            );
            assert_eq!(totals.domains_not_found, [("nope".to_string(), 2)]);
            assert_eq!(totals.config_load_success, 1);
        }

        // /metrics keeps showing overrides under the rule they matched, here `(override)`.
        let text = metrics.render();
        assert!(
            text.contains("ratelimitd_total_hits_total{domain=\"d\",rule=\"(override)\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("ratelimitd_domain_not_found_total{domain=\"nope\"} 2\n"),
            "{text}"
        );
    }

    fn rules_of(domain: &str, keys: &[&str]) -> Rules {
        let yaml = keys
            .iter()
            .fold(format!("domain: {domain}\ndescriptors:\n"), |yaml, key| {
                yaml + &format!(
                    "  - key: {key}\n    rate_limit: {{unit: hour, requests_per_unit: 100}}\n"
                )
            });
        let parsed = crate::config::parse_domain(std::path::Path::new("d.yaml"), &yaml)
            .expect("valid configuration");
        let mut rules = Rules::default();
        rules.domains.insert(domain.into(), parsed);
        rules
    }

    #[test]
    fn series_of_rules_no_longer_configured_are_dropped() {
        let metrics = Arc::new(Metrics::default());
        let first = rules_of("d", &["kept", "renamed_1"]);
        metrics.register_rules(&first);
        let request = Request {
            domain: "d".into(),
            descriptors: vec![
                descriptor(&[("kept", "a")]),
                descriptor(&[("renamed_1", "a")]),
            ],
            hits_addend: 0,
        };
        record(&metrics, &first, &request, true);
        for version in 2..100 {
            metrics.register_rules(&rules_of("d", &["kept", &format!("renamed_{version}")]));
        }
        let text = metrics.render();
        let series: Vec<&str> = text
            .lines()
            .filter(|line| line.starts_with("ratelimitd_total_hits_total{"))
            .collect();
        assert_eq!(
            series,
            [
                "ratelimitd_total_hits_total{domain=\"d\",rule=\"d.kept\"} 1",
                "ratelimitd_total_hits_total{domain=\"d\",rule=\"d.renamed_99\"} 0",
            ]
        );
        metrics.register_rules(&rules_of("other", &["kept"]));
        assert!(
            !metrics.render().contains("domain=\"d\""),
            "a domain no longer configured has no series"
        );
    }

    #[test]
    fn response_times_are_kept_per_millisecond_once_asked_for() {
        let metrics = Metrics::default();
        metrics.record_request(RequestResult::Ok, Duration::from_micros(300));
        metrics.keep_response_times();
        for micros in [300, 900, 2_500, 20_000_000] {
            metrics.record_request(RequestResult::Ok, Duration::from_micros(micros));
        }
        let mut seen = Vec::new();
        metrics.take_response_times(|ms, n| seen.push((ms, n)));
        assert_eq!(seen, [(0, 2), (2, 1), (RESPONSE_TIME_MAX_MS, 1)]);
        seen.clear();
        metrics.take_response_times(|ms, n| seen.push((ms, n)));
        assert!(seen.is_empty());
        metrics.response_time_totals(|ms, n| seen.push((ms, n)));
        assert_eq!(
            seen,
            [(0, 2), (2, 1), (RESPONSE_TIME_MAX_MS, 1)],
            "totals stay"
        );
    }
}
