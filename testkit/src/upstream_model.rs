//! A model of what an envoyproxy/ratelimit instance writes to Redis for a request (its keys,
//! `INCRBY` + `EXPIRE` pipeline and over-limit rule), so tests can run one beside ratelimitd on
//! one Redis, as a Deployment rolling from one to the other does.

use std::time::{SystemTime, UNIX_EPOCH};

pub const HOUR: u64 = 3_600;

pub fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
}

/// envoyproxy/ratelimit's key, as its `GenerateCacheKey` (src/limiter/cache_key.go) writes it:
/// `CACHE_KEY_PREFIX + domain + "_" + (key + "_" + value + "_")... + (now / W) * W`.
pub fn upstream_key(prefix: &str, domain: &str, entries: &[(&str, &str)], window_s: u64) -> String {
    upstream_key_at(prefix, domain, entries, window_s, now_s())
}

pub fn upstream_key_at(
    prefix: &str,
    domain: &str,
    entries: &[(&str, &str)],
    window_s: u64,
    now_s: u64,
) -> String {
    let mut key = format!("{prefix}{domain}_");
    for (name, value) in entries {
        key.push_str(name);
        key.push('_');
        key.push_str(value);
        key.push('_');
    }
    key.push_str(&(now_s / window_s * window_s).to_string());
    key
}

/// One descriptor of a request as an envoyproxy/ratelimit instance sees it.
#[derive(Clone)]
pub struct LimitedDescriptor {
    pub entries: Vec<(String, String)>,
    pub limit: u64,
    pub window_s: u64,
}

impl LimitedDescriptor {
    /// A descriptor of one entry, `limit` per hour.
    pub fn hourly(key: &str, value: &str, limit: u64) -> LimitedDescriptor {
        LimitedDescriptor {
            entries: vec![(key.to_owned(), value.to_owned())],
            limit,
            window_s: HOUR,
        }
    }

    pub fn entries(&self) -> Vec<(&str, &str)> {
        self.entries
            .iter()
            .map(|(key, value)| (key.as_str(), value.as_str()))
            .collect()
    }

    pub fn key(&self) -> String {
        upstream_key("", "domain", &self.entries(), self.window_s)
    }
}

/// What an envoyproxy/ratelimit instance does for one request of `descriptors` (domain
/// `domain`, `hits` each), with one Redis and no local cache, from src/redis/fixed_cache_impl.go
/// (`DoLimit`, `getHitsAddend`) and src/limiter/base_limiter.go (`IsOverLimitThresholdReached`,
/// `GetResponseDescriptorStatus`): with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT (`stop`), first
/// GET every key and mark those whose count plus the hits is above the limit; then pipeline, per
/// descriptor, `INCRBY key hits` (0 when `stop` found a marked key and this one is not marked)
/// and `EXPIRE key unit + rand[0, jitter)`. A descriptor is over the limit when the count after
/// its INCRBY is above the limit. Returns whether each descriptor was over the limit.
pub fn upstream_do_limit(
    connection: &mut redis::Connection,
    prefix: &str,
    descriptors: &[LimitedDescriptor],
    hits: u64,
    jitter_max_s: u64,
    stop: bool,
) -> Vec<bool> {
    upstream_statuses(connection, prefix, descriptors, hits, jitter_max_s, stop)
        .iter()
        .map(|status| status.over_limit)
        .collect()
}

/// What envoyproxy/ratelimit answers for one descriptor (`GetResponseDescriptorStatus`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UpstreamStatus {
    pub over_limit: bool,
    /// The limit less the count after the INCRBY; 0 when over the limit.
    pub remaining: u64,
}

/// [`upstream_do_limit`], with each descriptor's status as envoyproxy/ratelimit answers it.
pub fn upstream_statuses(
    connection: &mut redis::Connection,
    prefix: &str,
    descriptors: &[LimitedDescriptor],
    hits: u64,
    jitter_max_s: u64,
    stop: bool,
) -> Vec<UpstreamStatus> {
    let now = now_s();
    let keys: Vec<String> = descriptors
        .iter()
        .map(|d| upstream_key_at(prefix, "domain", &d.entries(), d.window_s, now))
        .collect();
    let mut near = vec![false; keys.len()];
    if stop {
        let mut gets = redis::pipe();
        for key in &keys {
            gets.cmd("GET").arg(key);
        }
        let counts: Vec<Option<u64>> = gets.query(connection).expect("GET pipeline");
        for (i, count) in counts.iter().enumerate() {
            near[i] = count.unwrap_or(0) + hits > descriptors[i].limit;
        }
    }
    let any_near = near.iter().any(|&n| n);
    let mut pipeline = redis::pipe();
    for (i, key) in keys.iter().enumerate() {
        let add = if !stop || !any_near || near[i] {
            hits
        } else {
            0
        };
        let jitter = if jitter_max_s > 0 {
            rand::random_range(0..jitter_max_s)
        } else {
            0
        };
        pipeline.cmd("INCRBY").arg(key).arg(add);
        pipeline
            .cmd("EXPIRE")
            .arg(key)
            .arg(descriptors[i].window_s + jitter)
            .ignore();
    }
    let afters: Vec<u64> = pipeline.query(connection).expect("INCRBY pipeline");
    afters
        .iter()
        .zip(descriptors)
        .map(|(&after, d)| UpstreamStatus {
            over_limit: after > d.limit,
            remaining: d.limit.saturating_sub(after),
        })
        .collect()
}
