//! `GET /status.json`: what the status page draws, from in-process state only, its size bounded
//! by `--status-page-max-rules` (rules listed, rule charts, top rules, RLQS streams) and the
//! ring's [`SAMPLES`](super::history::SAMPLES). Every text the configuration or the clients
//! chose (rule paths, descriptor values, versions) is a JSON string; the page shows it as text.

use std::sync::Arc;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::history::StoreProbe;
use super::{ConfigSource, StatusPage};
use crate::config::xds::XdsConfig;
use crate::limiter::{ConfiguredLimit, LimitKind, RuleSet, Rules, SystemClock};
use crate::service::rlconfig::rlconfig;
use crate::service::rlqs;
use crate::service::top_values::{TopQuery, Window};
use crate::service::version_info;
use crate::service::Metrics;

/// Values per top ranking the page shows.
const TOP_VALUES_SHOWN: usize = 5;

/// What the document is built from besides the page's own state.
pub struct Sources<'a> {
    pub rules: Arc<Rules>,
    pub metrics: &'a Metrics,
    pub rlqs: Option<&'a dyn rlqs::json::Pages>,
    pub xds: Option<&'a XdsConfig>,
    pub serving: bool,
}

/// The `/status.json` document.
pub fn render(page: &StatusPage, sources: &Sources<'_>) -> Value {
    let max = page.settings.max_rules;
    let interval = page.settings.sample_interval.as_secs().max(1);
    let (process, rule_charts, (tracked, untracked), max_tracked, store_now) = {
        let history = page.history.lock();
        (
            history.process(),
            history.busiest_rules(max),
            history.rule_counts(),
            history.max_rules(),
            history.store_now(),
        )
    };
    let charts: Vec<Value> = rule_charts
        .iter()
        .map(|rule| {
            json!({
                "domain": &*rule.domain,
                "rule": &*rule.rule,
                "hits": rule.hits,
                "over_limit": rule.over_limit,
            })
        })
        .collect();
    let (state, latency_us) = match store_now {
        None => ("unknown", None),
        Some(StoreProbe::Connecting) => ("connecting", None),
        Some(StoreProbe::Unhealthy) => ("unhealthy", None),
        Some(StoreProbe::Healthy { micros }) => ("healthy", Some(micros)),
    };
    let now = SystemClock::now_secs();
    json!({
        "build": {
            "version": env!("CARGO_PKG_VERSION"),
            "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
        },
        "now_unix": now,
        "started_unix": page.started_unix,
        "uptime_seconds": page.started.elapsed().as_secs(),
        "refresh_seconds": interval.clamp(1, 5),
        "serving": sources.serving,
        "samples": {
            "interval_seconds": interval,
            "kept": super::history::SAMPLES,
            "times": process.times,
            "requests": process.requests,
            "over_limit": process.over_limit,
            "mean_latency_us": process.mean_latency_us,
        },
        "rules": {
            "max_charts": max,
            "tracked": tracked,
            "untracked": untracked,
            "max_tracked": max_tracked,
            "charts": charts,
        },
        "store": {
            "kind": page.store.kind,
            "address": page.store.address,
            "state": state,
            "latency_us": latency_us,
            "latency_series": process.store_latency_us,
        },
        "config": config(page, sources),
        "top": top(sources.metrics, max),
        "rlqs": sources.rlqs.map(|pages| rlqs_section(pages, max)),
    })
}

/// The configuration section: the parts that depend on the rules only are built once per
/// configuration (listing and fingerprinting 100 000 rules takes a while), the reload counts
/// each time.
fn config(page: &StatusPage, sources: &Sources<'_>) -> Value {
    let cached = {
        let cache = page.config.lock();
        cache.as_ref().and_then(|(rules, section)| {
            std::ptr::eq(rules.as_ptr(), Arc::as_ptr(&sources.rules)).then(|| section.clone())
        })
    };
    let section = match cached {
        Some(section) => section,
        None => {
            let section = Arc::new(rules_section(&sources.rules, page.settings.max_rules));
            *page.config.lock() = Some((Arc::downgrade(&sources.rules), section.clone()));
            section
        }
    };
    let mut out = (*section).clone();
    let totals = sources.metrics.process_totals();
    match &page.source {
        ConfigSource::Files(paths) => {
            out["source"] = json!("files");
            out["paths"] = json!(paths);
        }
        ConfigSource::Xds(server) => {
            out["source"] = json!("xds");
            out["server"] = json!(server);
            out["xds_version"] = json!(sources
                .xds
                .and_then(|xds| xds.version())
                .map(|version| version_info::shown(&version)));
        }
    }
    out["loaded_unix"] = json!(totals.last_load_unix);
    out["reloads_ok"] = json!(totals.reloads_ok);
    out["reloads_failed"] = json!(totals.reloads_failed);
    out["last_reload_ok"] = json!(totals.last_reload_ok);
    out
}

fn rules_section(rules: &Rules, max: usize) -> Value {
    let mut domains: Vec<&String> = rules.domains.keys().collect();
    domains.sort();
    let mut listed = Vec::new();
    let mut total = 0usize;
    for name in &domains {
        let Some(domain) = rules.domains.get(*name) else {
            continue;
        };
        let mut limits = Vec::new();
        walk(&domain.root, &mut limits);
        total += limits.len();
        if listed.len() < max {
            limits.sort_by(|a, b| a.path.cmp(&b.path));
            for limit in limits.iter().take(max - listed.len()) {
                listed.push(rule(name, limit));
            }
        }
    }
    let fingerprint = Sha256::digest(rlconfig(rules).as_bytes());
    let fingerprint: String = fingerprint[..8]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    json!({
        "fingerprint": fingerprint,
        "domains": domains.len(),
        "rules_total": total,
        "rules": listed,
    })
}

fn walk<'a>(set: &'a RuleSet, out: &mut Vec<&'a Arc<ConfiguredLimit>>) {
    for node in set.nodes() {
        out.extend(node.limit.iter());
        walk(&node.children, out);
    }
}

fn rule(domain: &str, limit: &ConfiguredLimit) -> Value {
    let mut rule = json!({
        "domain": domain,
        "rule": limit.path,
        "name": limit.name,
        "shadow_mode": limit.shadow_mode,
        "quota_mode": limit.quota_mode,
        "detailed_metric": limit.detailed_metric,
        "algorithm": null,
        "burst": null,
        "consistency": null,
    });
    match &limit.kind {
        LimitKind::Unlimited => rule["kind"] = json!("unlimited"),
        LimitKind::Blocked {
            unit,
            unit_multiplier,
        } => {
            rule["kind"] = json!("blocked");
            rule["unit"] = json!(unit.as_str());
            rule["unit_multiplier"] = json!(unit_multiplier);
            rule["requests_per_unit"] = json!(0);
        }
        LimitKind::Limited(limited) => {
            let algorithm = limited.algorithm();
            rule["kind"] = json!("limited");
            rule["unit"] = json!(limited.unit.as_str());
            rule["unit_multiplier"] = json!(limited.unit_multiplier);
            rule["requests_per_unit"] = json!(limited.requests_per_unit);
            rule["algorithm"] = json!(algorithm.to_string());
            if algorithm.uses_burst() {
                rule["burst"] = json!(limited.rate.burst());
            }
            rule["consistency"] = json!(limited.consistency.to_string());
        }
    }
    rule
}

/// The most denied rules of `/top` over 15 minutes, or how to turn it on.
fn top(metrics: &Metrics, max: usize) -> Value {
    if !metrics.top_enabled() {
        return json!({"enabled": false});
    }
    let query = TopQuery {
        window: Window::FifteenMinutes,
        domain: None,
        rule: None,
    };
    let mut top = metrics.top_value(&query, max, TOP_VALUES_SHOWN);
    top["enabled"] = json!(true);
    top
}

fn rlqs_section(pages: &dyn rlqs::json::Pages, max: usize) -> Value {
    let shown: Vec<Value> = pages
        .page(None, max)
        .iter()
        .take(max)
        .map(|view| {
            let mut bucket = rlqs::json::bucket(view);
            bucket["streams"] = json!(view.streams.len());
            bucket
        })
        .collect();
    json!({
        "streams": pages.streams(),
        "buckets": pages.buckets(),
        "buckets_shown": shown,
    })
}
