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
//! kept per rule; the hits of any further descriptor count under `descriptor="_other"`.
//!
//! Also: the request latency histogram, requests by result, requests refused by a request limit,
//! store errors by kind, answers given by the store-failure policy, configuration reloads, what
//! loading configurations did (files read and parsed, files refused by a configuration limit),
//! what the transport limits refused or closed (by [`Limited`]), accept errors by port, and the
//! counters other components expose (Redis script reloads, deny-cache hits, open connections),
//! read when scraped.
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::{Mutex, RwLock};

use super::limited::{Limited, Port};
use crate::config::{ConfigLimit, Loader};
use crate::limiter::algorithm::Verdict;
use crate::limiter::{
    Code, ConfiguredLimit, Outcome, Plan, Request, RequestLimit, Resolution, RuleSet, Rules,
};
use crate::store::StoreError;

/// Most distinct `descriptor` label values kept per `detailed_metric` rule.
pub const DETAILED_METRIC_CAP: usize = 1000;
/// Longest `descriptor` label value, in bytes; longer ones are cut (at a character boundary).
pub const DETAILED_LABEL_MAX_BYTES: usize = 256;
/// The `descriptor` label of the hits beyond [`DETAILED_METRIC_CAP`].
pub const OVERFLOW_LABEL: &str = "_other";
/// The `rule` label of descriptors limited by a client override without a configured rule.
pub const OVERRIDE_RULE: &str = "(override)";
/// envoyproxy/ratelimit's default `NEAR_LIMIT_RATIO`.
pub const DEFAULT_NEAR_LIMIT_RATIO: f64 = 0.8;

/// Upper bounds of the latency histogram buckets, in µs.
const LATENCY_BUCKETS_US: [u64; 14] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000,
];

/// How a request ended, for `ratelimitd_requests_total{result}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestResult {
    Ok,
    OverLimit,
    InvalidArgument,
    Unavailable,
}

impl RequestResult {
    const ALL: [RequestResult; 4] = [
        RequestResult::Ok,
        RequestResult::OverLimit,
        RequestResult::InvalidArgument,
        RequestResult::Unavailable,
    ];

    fn label(self) -> &'static str {
        match self {
            RequestResult::Ok => "ok",
            RequestResult::OverLimit => "over_limit",
            RequestResult::InvalidArgument => "invalid_argument",
            RequestResult::Unavailable => "unavailable",
        }
    }
}

const STORE_ERROR_KINDS: [&str; 3] = ["timeout", "unavailable", "protocol"];

#[derive(Debug, Default)]
struct Counters {
    total: AtomicU64,
    within: AtomicU64,
    near: AtomicU64,
    over: AtomicU64,
    shadow: AtomicU64,
}

impl Counters {
    fn add(counter: &AtomicU64, n: u64) {
        if n > 0 {
            counter.fetch_add(n, Ordering::Relaxed);
        }
    }
}

#[derive(Debug, Default)]
struct RuleStats {
    /// Hits counted without a descriptor label (rules without `detailed_metric`).
    plain: Counters,
    plain_used: AtomicBool,
    /// `detailed_metric` rules: per descriptor label, at most `DETAILED_METRIC_CAP`.
    detailed: RwLock<HashMap<String, Arc<Counters>>>,
    overflow: Counters,
    overflow_used: AtomicBool,
}

#[derive(Debug)]
struct Histogram {
    buckets: [AtomicU64; LATENCY_BUCKETS_US.len()],
    count: AtomicU64,
    sum_ns: AtomicU64,
}

impl Histogram {
    fn new() -> Histogram {
        Histogram {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            count: AtomicU64::new(0),
            sum_ns: AtomicU64::new(0),
        }
    }

    fn observe(&self, elapsed: Duration) {
        let us = elapsed.as_micros() as u64;
        if let Some(i) = LATENCY_BUCKETS_US.iter().position(|&bound| us <= bound) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_ns
            .fetch_add(elapsed.as_nanos() as u64, Ordering::Relaxed);
    }
}

type Source = Box<dyn Fn() -> u64 + Send + Sync>;

/// A value read from another component when scraped.
struct External {
    name: &'static str,
    help: &'static str,
    kind: &'static str,
    read: Source,
}

/// Every metric of the process. Cheap to share (`Arc<Metrics>`); recording is lock-free except
/// for the first hit of a rule and detailed-metric lookups.
pub struct Metrics {
    near_limit_ratio: f64,
    /// domain -> rule path -> counters.
    rules: RwLock<HashMap<String, HashMap<String, Arc<RuleStats>>>>,
    latency: Histogram,
    requests: [AtomicU64; 4],
    /// Requests refused by each of [`RequestLimit::ALL`].
    request_limits: [AtomicU64; 3],
    store_errors: [AtomicU64; 3],
    policy: Mutex<&'static str>,
    policy_answers: AtomicU64,
    reloads_ok: AtomicU64,
    reloads_failed: AtomicU64,
    last_reload_ok: AtomicBool,
    last_success_unix: AtomicU64,
    /// The loader of the running configuration, whose counters are rendered.
    config_loader: Mutex<Option<Arc<Loader>>>,
    limited: [AtomicU64; Limited::ALL.len()],
    accept_errors: [AtomicU64; Port::ALL.len()],
    externals: Mutex<Vec<External>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("near_limit_ratio", &self.near_limit_ratio)
            .finish_non_exhaustive()
    }
}

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
            rules: RwLock::new(HashMap::new()),
            latency: Histogram::new(),
            requests: Default::default(),
            request_limits: Default::default(),
            store_errors: Default::default(),
            policy: Mutex::new("unavailable"),
            policy_answers: AtomicU64::new(0),
            reloads_ok: AtomicU64::new(0),
            reloads_failed: AtomicU64::new(0),
            last_reload_ok: AtomicBool::new(true),
            last_success_unix: AtomicU64::new(unix_now()),
            config_loader: Mutex::new(None),
            limited: Default::default(),
            accept_errors: Default::default(),
            externals: Mutex::new(Vec::new()),
        }
    }

    pub fn near_limit_ratio(&self) -> f64 {
        self.near_limit_ratio
    }

    /// Creates the (zero) series of every rule of `rules` that has none yet, so that they show
    /// before their first hit. Series of rules that disappear are kept (counters never go back).
    pub fn register_rules(&self, rules: &Rules) {
        fn walk(set: &RuleSet, out: &mut Vec<Arc<ConfiguredLimit>>) {
            let nodes = set
                .exact
                .values()
                .flat_map(|values| values.values())
                .chain(set.wildcards.iter().map(|w| &w.node))
                .chain(set.key_only.values());
            for node in nodes {
                out.extend(node.limit.iter().cloned());
                walk(&node.children, out);
            }
        }
        let mut map = self.rules.write();
        for (name, domain) in &rules.domains {
            let mut limits = Vec::new();
            walk(&domain.root, &mut limits);
            let by_path = map.entry(name.clone()).or_default();
            for limit in limits {
                let stats = by_path.entry(limit.path.clone()).or_default();
                if !limit.detailed_metric {
                    stats.plain_used.store(true, Ordering::Relaxed);
                }
            }
        }
    }

    fn rule(&self, domain: &str, path: &str) -> Arc<RuleStats> {
        if let Some(stats) = self.rules.read().get(domain).and_then(|d| d.get(path)) {
            return stats.clone();
        }
        self.rules
            .write()
            .entry(domain.to_string())
            .or_default()
            .entry(path.to_string())
            .or_default()
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
            let path = matched.map_or(OVERRIDE_RULE, |limit| limit.path.as_str());
            let stats = self.rule(&request.domain, path);
            let counters: &Counters;
            let detailed_arc;
            if matched.is_some_and(|limit| limit.detailed_metric) {
                let label = detailed_label(descriptor);
                let known = stats.detailed.read().get(&label).cloned();
                detailed_arc = known.or_else(|| {
                    let mut detailed = stats.detailed.write();
                    if let Some(c) = detailed.get(&label) {
                        return Some(c.clone());
                    }
                    (detailed.len() < DETAILED_METRIC_CAP).then(|| {
                        let c = Arc::new(Counters::default());
                        detailed.insert(label, c.clone());
                        c
                    })
                });
                counters = match &detailed_arc {
                    Some(c) => c,
                    None => {
                        stats.overflow_used.store(true, Ordering::Relaxed);
                        &stats.overflow
                    }
                };
            } else {
                stats.plain_used.store(true, Ordering::Relaxed);
                counters = &stats.plain;
            }
            Counters::add(&counters.total, hits);
            let over =
                status.code == Code::OverLimit || status.shadow_denied || status.quota_violated;
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
        let index = RequestResult::ALL
            .iter()
            .position(|r| *r == result)
            .unwrap_or(0);
        self.requests[index].fetch_add(1, Ordering::Relaxed);
    }

    /// A request refused because it exceeded `limit`.
    pub fn record_request_limit(&self, limit: RequestLimit) {
        let index = RequestLimit::ALL
            .iter()
            .position(|l| *l == limit)
            .unwrap_or(0);
        self.request_limits[index].fetch_add(1, Ordering::Relaxed);
    }

    /// Renders the counters of `loader` (files read, parsed, refused by a configuration limit).
    pub fn register_config_loader(&self, loader: Arc<Loader>) {
        *self.config_loader.lock() = Some(loader);
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

    /// A configuration reload attempt.
    pub fn record_reload(&self, success: bool) {
        if success {
            self.reloads_ok.fetch_add(1, Ordering::Relaxed);
            self.last_success_unix.store(unix_now(), Ordering::Relaxed);
        } else {
            self.reloads_failed.fetch_add(1, Ordering::Relaxed);
        }
        self.last_reload_ok.store(success, Ordering::Relaxed);
    }

    /// A transport limit stepped in.
    pub fn record_limited(&self, limited: Limited) {
        self.limited[limited.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// How often `limited` stepped in so far.
    pub fn limited(&self, limited: Limited) -> u64 {
        self.limited[limited.index()].load(Ordering::Relaxed)
    }

    /// Accepting a connection on `port` failed (out of descriptors, and the like).
    pub fn record_accept_error(&self, port: Port) {
        let index = Port::ALL.iter().position(|p| *p == port).unwrap_or(0);
        self.accept_errors[index].fetch_add(1, Ordering::Relaxed);
    }

    /// Adds a counter read from `read` when scraped (`name` should end in `_total`).
    pub fn register_counter(
        &self,
        name: &'static str,
        help: &'static str,
        read: impl Fn() -> u64 + Send + Sync + 'static,
    ) {
        self.register(name, help, "counter", Box::new(read));
    }

    /// Adds a gauge read from `read` when scraped.
    pub fn register_gauge(
        &self,
        name: &'static str,
        help: &'static str,
        read: impl Fn() -> u64 + Send + Sync + 'static,
    ) {
        self.register(name, help, "gauge", Box::new(read));
    }

    fn register(&self, name: &'static str, help: &'static str, kind: &'static str, read: Source) {
        let mut externals = self.externals.lock();
        externals.retain(|e| e.name != name);
        externals.push(External {
            name,
            help,
            kind,
            read,
        });
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(4096);
        self.render_rules(&mut out);

        family(
            &mut out,
            "ratelimitd_request_duration_seconds",
            "Time to decide a rate-limit request (gRPC or /json): validation, matching, store.",
            "histogram",
        );
        let mut cumulative = 0;
        for (bound, bucket) in LATENCY_BUCKETS_US.iter().zip(&self.latency.buckets) {
            cumulative += bucket.load(Ordering::Relaxed);
            let le = *bound as f64 / 1e6;
            let _ = writeln!(
                out,
                "ratelimitd_request_duration_seconds_bucket{{le=\"{le}\"}} {cumulative}"
            );
        }
        let count = self.latency.count.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "ratelimitd_request_duration_seconds_bucket{{le=\"+Inf\"}} {count}"
        );
        let sum = self.latency.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(out, "ratelimitd_request_duration_seconds_sum {sum}");
        let _ = writeln!(out, "ratelimitd_request_duration_seconds_count {count}");

        family(
            &mut out,
            "ratelimitd_requests_total",
            "Rate-limit requests by result (ok, over_limit, invalid_argument, unavailable).",
            "counter",
        );
        for (result, counter) in RequestResult::ALL.iter().zip(&self.requests) {
            let _ = writeln!(
                out,
                "ratelimitd_requests_total{{result=\"{}\"}} {}",
                result.label(),
                counter.load(Ordering::Relaxed)
            );
        }

        family(
            &mut out,
            "ratelimitd_request_limit_rejections_total",
            "Requests refused with INVALID_ARGUMENT for exceeding a request limit (descriptors, entries, entry_bytes).",
            "counter",
        );
        for (limit, counter) in RequestLimit::ALL.iter().zip(&self.request_limits) {
            let _ = writeln!(
                out,
                "ratelimitd_request_limit_rejections_total{{limit=\"{}\"}} {}",
                limit.label(),
                counter.load(Ordering::Relaxed)
            );
        }

        family(
            &mut out,
            "ratelimitd_store_errors_total",
            "Store calls that failed, by kind (timeout, unavailable, protocol).",
            "counter",
        );
        for (kind, counter) in STORE_ERROR_KINDS.iter().zip(&self.store_errors) {
            let _ = writeln!(
                out,
                "ratelimitd_store_errors_total{{kind=\"{kind}\"}} {}",
                counter.load(Ordering::Relaxed)
            );
        }

        family(
            &mut out,
            "ratelimitd_store_error_answers_total",
            "Requests answered by the store-failure policy (--on-store-error) because the store failed.",
            "counter",
        );
        let _ = writeln!(
            out,
            "ratelimitd_store_error_answers_total{{policy=\"{}\"}} {}",
            *self.policy.lock(),
            self.policy_answers.load(Ordering::Relaxed)
        );

        family(
            &mut out,
            "ratelimitd_config_reloads_total",
            "Configuration reloads (file change or SIGHUP), by result.",
            "counter",
        );
        let _ = writeln!(
            out,
            "ratelimitd_config_reloads_total{{result=\"success\"}} {}",
            self.reloads_ok.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "ratelimitd_config_reloads_total{{result=\"failure\"}} {}",
            self.reloads_failed.load(Ordering::Relaxed)
        );
        family(
            &mut out,
            "ratelimitd_config_last_reload_successful",
            "1 if the last configuration reload succeeded (or none was tried), 0 if it was rejected.",
            "gauge",
        );
        let _ = writeln!(
            out,
            "ratelimitd_config_last_reload_successful {}",
            u8::from(self.last_reload_ok.load(Ordering::Relaxed))
        );
        family(
            &mut out,
            "ratelimitd_config_last_reload_success_timestamp_seconds",
            "Unix time of the last configuration load that succeeded.",
            "gauge",
        );
        let _ = writeln!(
            out,
            "ratelimitd_config_last_reload_success_timestamp_seconds {}",
            self.last_success_unix.load(Ordering::Relaxed)
        );

        if let Some(loader) = self.config_loader.lock().as_ref() {
            render_config_loader(&mut out, loader);
        }
        family(
            &mut out,
            "ratelimitd_transport_limited_total",
            "Calls, messages and connections a transport limit refused or closed, by limit (see the README's Limits and hardening).",
            "counter",
        );
        for (limited, counter) in Limited::ALL.iter().zip(&self.limited) {
            let _ = writeln!(
                out,
                "ratelimitd_transport_limited_total{{limit=\"{}\"}} {}",
                limited.label(),
                counter.load(Ordering::Relaxed)
            );
        }
        family(
            &mut out,
            "ratelimitd_accept_errors_total",
            "Failed accepts (e.g. out of file descriptors), by port; each is followed by a backoff.",
            "counter",
        );
        for (port, counter) in Port::ALL.iter().zip(&self.accept_errors) {
            let _ = writeln!(
                out,
                "ratelimitd_accept_errors_total{{port=\"{}\"}} {}",
                port.label(),
                counter.load(Ordering::Relaxed)
            );
        }

        for external in self.externals.lock().iter() {
            family(&mut out, external.name, external.help, external.kind);
            let _ = writeln!(out, "{} {}", external.name, (external.read)());
        }
        out
    }

    fn render_rules(&self, out: &mut String) {
        // Snapshot the series, sorted, so every family lists them in the same order.
        type Series = (String, String, Option<String>, [u64; 5]);
        let mut series: Vec<Series> = Vec::new();
        let read = |c: &Counters| {
            [
                c.total.load(Ordering::Relaxed),
                c.within.load(Ordering::Relaxed),
                c.near.load(Ordering::Relaxed),
                c.over.load(Ordering::Relaxed),
                c.shadow.load(Ordering::Relaxed),
            ]
        };
        for (domain, rules) in self.rules.read().iter() {
            for (path, stats) in rules {
                if stats.plain_used.load(Ordering::Relaxed) {
                    series.push((domain.clone(), path.clone(), None, read(&stats.plain)));
                }
                for (label, counters) in stats.detailed.read().iter() {
                    series.push((
                        domain.clone(),
                        path.clone(),
                        Some(label.clone()),
                        read(counters),
                    ));
                }
                if stats.overflow_used.load(Ordering::Relaxed) {
                    series.push((
                        domain.clone(),
                        path.clone(),
                        Some(OVERFLOW_LABEL.to_string()),
                        read(&stats.overflow),
                    ));
                }
            }
        }
        series.sort_by(|a, b| (&a.0, &a.1, &a.2).cmp(&(&b.0, &b.1, &b.2)));
        let families = [
            (
                "ratelimitd_total_hits_total",
                "Hits of descriptors that matched the rule.",
            ),
            (
                "ratelimitd_within_limit_total",
                "Hits answered OK (near-limit hits included).",
            ),
            (
                "ratelimitd_near_limit_total",
                "Admitted hits that left less than (1 - near_limit_ratio) of the limit's capacity.",
            ),
            (
                "ratelimitd_over_limit_total",
                "Hits over the limit (shadow- and quota-mode ones included).",
            ),
            (
                "ratelimitd_shadow_mode_total",
                "Hits over a shadow-mode limit (answered OK).",
            ),
        ];
        for (i, (name, help)) in families.iter().enumerate() {
            family(out, name, help, "counter");
            for (domain, path, descriptor, values) in &series {
                let _ = write!(
                    out,
                    "{name}{{domain=\"{}\",rule=\"{}\"",
                    escape(domain),
                    escape(path)
                );
                if let Some(descriptor) = descriptor {
                    let _ = write!(out, ",descriptor=\"{}\"", escape(descriptor));
                }
                let _ = writeln!(out, "}} {}", values[i]);
            }
        }
    }
}

fn render_config_loader(out: &mut String, loader: &Loader) {
    let stats = loader.stats();
    family(
        out,
        "ratelimitd_config_file_reads_total",
        "Configuration files read, to load them or to see whether they changed (unchanged files are not read).",
        "counter",
    );
    let _ = writeln!(
        out,
        "ratelimitd_config_file_reads_total {}",
        stats.files_read()
    );
    family(
        out,
        "ratelimitd_config_file_parses_total",
        "Configuration files parsed (each load, at startup, on a change or SIGHUP, parses the files it reads).",
        "counter",
    );
    let _ = writeln!(
        out,
        "ratelimitd_config_file_parses_total {}",
        stats.files_parsed()
    );
    family(
        out,
        "ratelimitd_config_limit_rejections_total",
        "Configuration files refused by a configuration limit (file_bytes, file_type, alias_bytes), at each load that met them.",
        "counter",
    );
    for limit in ConfigLimit::ALL {
        let _ = writeln!(
            out,
            "ratelimitd_config_limit_rejections_total{{limit=\"{}\"}} {}",
            limit.label(),
            stats.rejected(limit)
        );
    }
}

fn family(out: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// Escapes a label value: backslash, double quote and newline.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// envoyproxy/ratelimit's detailed stat suffix: `key_value` per entry (`key` when the value is
/// empty), joined by `.`, cut at [`DETAILED_LABEL_MAX_BYTES`].
fn detailed_label(descriptor: &crate::limiter::Descriptor) -> String {
    let mut label = String::new();
    for (i, entry) in descriptor.entries.iter().enumerate() {
        if i > 0 {
            label.push('.');
        }
        label.push_str(&entry.key);
        if !entry.value.is_empty() {
            label.push('_');
            label.push_str(&entry.value);
        }
        if label.len() > DETAILED_LABEL_MAX_BYTES {
            break;
        }
    }
    if label.len() > DETAILED_LABEL_MAX_BYTES {
        let mut end = DETAILED_LABEL_MAX_BYTES;
        while !label.is_char_boundary(end) {
            end -= 1;
        }
        label.truncate(end);
    }
    label
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
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
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
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
}
