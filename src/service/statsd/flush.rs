//! One flush: what the metrics gained since the previous flush, as the stat lines
//! envoyproxy/ratelimit would have sent for it.

use std::collections::BTreeMap;

use super::datagrams::Datagrams;
use super::dogstatsd::DogStatsd;
use super::names::{StatNames, RULE_STATS};
use crate::service::metrics::{Metrics, UpstreamCounts};

/// Most `response_time` lines per flush. Beyond, each millisecond value is sent on
/// proportionally fewer lines carrying a statsd sample rate (`|@rate`), which the server
/// scales back.
pub const MAX_TIMER_LINES: u64 = 10_000;

/// How the lines are written: plain statsd (gostats' UDP sink) or DogStatsD (upstream's
/// `godogstats` sink over datadog-go).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Dialect {
    #[default]
    Statsd,
    DogStatsd(DogStatsd),
}

/// Every counter stat of `counts` under its gostats name (extra tags appended), zero ones left
/// out, the values of names that sanitize alike added up: what one flush sends, or with totals,
/// what upstream's sinks have added up to.
pub fn counter_stats(counts: &UpstreamCounts, names: &StatNames) -> BTreeMap<String, u64> {
    let mut counters: BTreeMap<String, u64> = BTreeMap::new();
    let mut count = |name: String, delta: u64| {
        if delta > 0 {
            *counters.entry(name).or_default() += delta;
        }
    };
    for (key, values) in &counts.rules {
        for (stat, delta) in RULE_STATS.iter().zip(values) {
            if *delta > 0 {
                count(names.rule(key, stat), *delta);
            }
        }
    }
    for (domain, delta) in &counts.domains_not_found {
        count(names.domain_not_found(domain), *delta);
    }
    count(
        names.service("config_load_success"),
        counts.config_load_success,
    );
    count(names.service("config_load_error"), counts.config_load_error);
    count(
        names.service("call.should_rate_limit.redis_error"),
        counts.store_errors,
    );
    count(
        names.service("call.should_rate_limit.service_error"),
        counts.invalid_requests,
    );
    count(
        names.service("global_shadow_mode"),
        counts.global_shadow_mode,
    );
    count(names.should_rate_limit("total_requests"), counts.requests);
    counters
}

/// The gostats name of the response-time timer.
pub fn response_time_stat(names: &StatNames) -> String {
    names.should_rate_limit("response_time")
}

/// Takes the deltas from `metrics` and writes them as lines: counters as gostats flushes them
/// (the delta since the previous flush, nothing when it is zero; names that sanitize alike are
/// added up), then one `response_time` line per request.
pub fn compose(metrics: &Metrics, names: &StatNames, dialect: &Dialect) -> Datagrams {
    let counters = counter_stats(&metrics.take_upstream_deltas(), names);
    let mut datagrams = Datagrams::default();
    for (name, value) in &counters {
        match dialect {
            Dialect::Statsd => datagrams.counter(name, *value),
            Dialect::DogStatsd(dog) => dog.counter(&mut datagrams, name, *value),
        }
    }

    let mut times = Vec::new();
    metrics.take_response_times(|ms, requests| times.push((ms, requests)));
    let total: u64 = times.iter().map(|(_, requests)| requests).sum();
    let name = response_time_stat(names);
    let timer = match dialect {
        Dialect::Statsd => None,
        Dialect::DogStatsd(dog) => Some(dog.timer(&name)),
    };
    let mut line = |ms: u64, rate: Option<f64>| match &timer {
        None => datagrams.timer(&name, ms, rate),
        Some(timer) => timer.write(&mut datagrams, ms, rate),
    };
    for (ms, requests) in times {
        if total <= MAX_TIMER_LINES {
            for _ in 0..requests {
                line(ms, None);
            }
        } else {
            let lines = (u128::from(requests) * u128::from(MAX_TIMER_LINES))
                .div_ceil(u128::from(total)) as u64;
            let rate = lines as f64 / requests as f64;
            for _ in 0..lines {
                line(ms, Some(rate));
            }
        }
    }
    datagrams
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::service::metrics::RequestResult;
    use crate::service::statsd::tags::ExtraTags;

    fn lines(metrics: &Metrics) -> Vec<String> {
        let names = StatNames::new(&ExtraTags::default());
        let (datagrams, dropped) = compose(metrics, &names, &Dialect::Statsd).finish();
        assert_eq!(dropped, 0);
        datagrams
            .iter()
            .flat_map(|d| {
                String::from_utf8(d.clone())
                    .unwrap()
                    .lines()
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    #[test]
    fn counters_are_deltas_and_zero_ones_are_not_sent() {
        let metrics = Metrics::default();
        metrics.keep_response_times();
        metrics.record_request(RequestResult::Ok, Duration::from_micros(2_100));
        metrics.record_request(RequestResult::InvalidArgument, Duration::from_micros(10));
        // `a:b` and `a|b` sanitize alike: one line with both.
        metrics.record_domain_not_found("a:b", 1);
        metrics.record_domain_not_found("a|b", 2);
        assert_eq!(
            lines(&metrics),
            [
                "ratelimit.service.call.should_rate_limit.service_error:1|c",
                "ratelimit.service.config_load_success:1|c",
                "ratelimit.service.rate_limit.a_b.domain_not_found:3|c",
                "ratelimit_server.ShouldRateLimit.total_requests:2|c",
                "ratelimit_server.ShouldRateLimit.response_time:0|ms",
                "ratelimit_server.ShouldRateLimit.response_time:2|ms",
            ]
        );
        assert!(lines(&metrics).is_empty(), "nothing changed since");
    }

    #[test]
    fn beyond_the_timer_cap_lines_carry_a_sample_rate() {
        let metrics = Metrics::default();
        metrics.keep_response_times();
        let total = 4 * MAX_TIMER_LINES;
        for i in 0..total {
            let micros = if i % 4 == 0 { 3_000 } else { 200 };
            metrics.record_request(RequestResult::Ok, Duration::from_micros(micros));
        }
        let timers: Vec<String> = lines(&metrics)
            .into_iter()
            .filter(|l| l.contains("response_time"))
            .collect();
        assert_eq!(timers.len() as u64, MAX_TIMER_LINES);
        let at_3 = timers.iter().filter(|l| l.contains(":3|ms|@0.25")).count() as u64;
        let at_0 = timers.iter().filter(|l| l.contains(":0|ms|@0.25")).count() as u64;
        assert_eq!((at_0, at_3), (3 * MAX_TIMER_LINES / 4, MAX_TIMER_LINES / 4));
    }
}
