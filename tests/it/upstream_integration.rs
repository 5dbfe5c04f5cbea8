//! envoyproxy/ratelimit's own integration suite (its `test/integration`, build tag
//! `integration`) expressed against the real binary in drop-in mode: each upstream test's
//! settings become the environment an upstream Deployment would set (`REDIS_URL`,
//! `REDIS_PERSECOND`, `LOCAL_CACHE_SIZE_IN_BYTES`, `CACHE_KEY_PREFIX`,
//! `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`, `CONFIG_TYPE=GRPC_XDS_SOTW`, ...), its runtime tree
//! holds configurations of the same domains, and the same requests get the same answers: whole
//! responses compared, `limit_remaining` sequences, over-limit codes, durations that tick down,
//! reloads of files and of xDS snapshots, the gRPC port's TLS.
//!
//! Each test names the upstream test it expresses. Set aside: assertions on upstream's
//! in-process stats store (hit and local-cache counters), memcached (refused by design), and
//! Redis over TLS. Upstream's per-second Redis is named as upstream names it; ratelimitd keeps
//! per-second limits in the main Redis (docs/migration.md), and upstream's second cluster and
//! second Sentinel set are therefore the same servers here. The processes listen on ports the
//! kernel picks (`LOG_LEVEL=info` lets the harness read them).
//!
//! Subtests that upstream runs on one Redis each get their own here and run concurrently, so
//! the file stays short; those that share a cluster or a Sentinel set run one after the other,
//! as upstream runs them.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures::future::join_all;
use ratelimitd::proto::rls::rate_limit_response::rate_limit::Unit;
use ratelimitd::proto::rls::rate_limit_response::{Code, DescriptorStatus, RateLimit};
use ratelimitd::proto::rls::RateLimitResponse;
use ratelimitd::proto::rls_config::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit,
};
use testkit::control_plane::ControlPlane;
use testkit::grpc_transport::{rls, tls_channel};
use testkit::pki::Pki;
use testkit::ratelimitd::{command, request, should, to_window_end, Client, Ratelimitd};
use testkit::redis_cluster::{ClusterOptions, RedisCluster};
use testkit::redis_sentinel::{RedisSentinel, SentinelOptions};
use testkit::redis_server::RedisServer;

/// The Redis password of upstream's authenticated servers, clusters and Sentinel sets.
const PASSWORD: &str = "password123";

/// Bound of every wait for a reload or a certificate swap.
const WAIT: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------------------------
// The configurations: the domains of upstream's runtime tree and xDS snapshots
// ---------------------------------------------------------------------------------------------

/// A limit's unit, as YAML, xDS and the response name it.
#[derive(Clone, Copy)]
enum Per {
    Second,
    Minute,
    Hour,
    Day,
}

impl Per {
    fn yaml(self) -> &'static str {
        match self {
            Per::Second => "second",
            Per::Minute => "minute",
            Per::Hour => "hour",
            Per::Day => "day",
        }
    }

    fn xds(self) -> RateLimitUnit {
        match self {
            Per::Second => RateLimitUnit::Second,
            Per::Minute => RateLimitUnit::Minute,
            Per::Hour => RateLimitUnit::Hour,
            Per::Day => RateLimitUnit::Day,
        }
    }
}

/// A domain of key-only limits: `(key, requests per unit, unit)`.
struct Domain {
    name: &'static str,
    limits: &'static [(&'static str, u32, Per)],
}

/// One per-second limit for the basic request (and its local-cache twin), and one per minute.
const BASIC: Domain = Domain {
    name: "basic",
    limits: &[
        ("key1", 50, Per::Second),
        ("key1_local", 50, Per::Second),
        ("one_per_minute", 1, Per::Minute),
    ],
};

/// Minute, hour and day limits for the `limit_remaining` sequences and the durations.
const ANOTHER: Domain = Domain {
    name: "another",
    limits: &[
        ("key2", 20, Per::Minute),
        ("key3", 10, Per::Hour),
        ("key2_local", 20, Per::Minute),
        ("key3_local", 10, Per::Hour),
        ("key4", 20, Per::Day),
        ("key4_local", 20, Per::Day),
    ],
};

/// The domain a reload adds: a limit, a ban (0 per second), and one per minute.
const RELOAD: Domain = Domain {
    name: "reload",
    limits: &[
        ("key1", 50, Per::Second),
        ("block", 0, Per::Second),
        ("one_per_minute", 1, Per::Minute),
    ],
};

/// `files/*` values share one count; `files_no_share/*` values count apart.
const SHARE_THRESHOLD_YAML: &str = "\
domain: share-threshold-test
descriptors:
  - {key: files, value: files/*, share_threshold: true, rate_limit: {unit: hour, requests_per_unit: 10}}
  - {key: files_no_share, value: files_no_share/*, rate_limit: {unit: hour, requests_per_unit: 10}}
";

impl Domain {
    /// The domain as a configuration file, one flow mapping per descriptor.
    fn yaml(&self) -> String {
        let mut yaml = format!("domain: {}\ndescriptors:\n", self.name);
        for (key, requests, per) in self.limits {
            yaml.push_str(&format!(
                "  - {{key: {key}, rate_limit: {{unit: {}, requests_per_unit: {requests}}}}}\n",
                per.yaml()
            ));
        }
        yaml
    }

    /// The domain as an xDS resource of the same name.
    fn resource(&self) -> RateLimitConfig {
        RateLimitConfig {
            name: self.name.into(),
            domain: self.name.into(),
            descriptors: self
                .limits
                .iter()
                .map(|(key, requests, per)| RateLimitDescriptor {
                    key: (*key).into(),
                    rate_limit: Some(RateLimitPolicy {
                        unit: per.xds() as i32,
                        requests_per_unit: *requests,
                        ..RateLimitPolicy::default()
                    }),
                    ..RateLimitDescriptor::default()
                })
                .collect(),
        }
    }
}

/// Upstream's initial xDS snapshot: `basic` and `another`.
fn initial_snapshot() -> Vec<RateLimitConfig> {
    vec![BASIC.resource(), ANOTHER.resource()]
}

/// An upstream runtime tree: `<root>/current/ratelimit/config/` holding `basic`, `another` and
/// the share-threshold domain.
struct Runtime {
    root: tempfile::TempDir,
}

impl Runtime {
    fn new() -> Runtime {
        let runtime = Runtime {
            root: tempfile::tempdir().expect("a runtime directory"),
        };
        std::fs::create_dir_all(runtime.config_dir()).expect("the config directory");
        runtime.write("basic.yaml", &BASIC.yaml());
        runtime.write("another.yaml", &ANOTHER.yaml());
        runtime.write("share_threshold.yaml", SHARE_THRESHOLD_YAML);
        runtime
    }

    fn current(&self) -> PathBuf {
        self.root.path().join("current")
    }

    fn config_dir(&self) -> PathBuf {
        self.current().join("ratelimit/config")
    }

    fn write(&self, name: &str, yaml: &str) {
        std::fs::write(self.config_dir().join(name), yaml).expect("write a configuration file");
    }

    fn remove(&self, name: &str) {
        std::fs::remove_file(self.config_dir().join(name)).expect("remove a configuration file");
    }
}

// ---------------------------------------------------------------------------------------------
// Settings: upstream's settings struct, as the environment of the binary
// ---------------------------------------------------------------------------------------------

/// The environment of one run, built as upstream's tests build their settings.
#[derive(Clone)]
struct Settings {
    env: Vec<(String, String)>,
}

impl Settings {
    /// Upstream's `defaultSettings`: its runtime tree, TCP to Redis, statsd off; the ports the
    /// kernel picks, on loopback.
    fn defaults(runtime: &Runtime) -> Settings {
        Settings { env: Vec::new() }
            .set("RUNTIME_ROOT", runtime.current().display())
            .set("RUNTIME_SUBDIRECTORY", "ratelimit")
            .set("RUNTIME_APPDIRECTORY", "config")
            .set("REDIS_SOCKET_TYPE", "tcp")
            .set("REDIS_PERSECOND_SOCKET_TYPE", "tcp")
            .set("USE_STATSD", "false")
            .set("GRPC_HOST", "127.0.0.1")
            .set("GRPC_PORT", 0)
            .set("HOST", "127.0.0.1")
            .set("PORT", 0)
            .set("DEBUG_HOST", "127.0.0.1")
            .set("DEBUG_PORT", 0)
            .set("LOG_LEVEL", "info")
    }

    /// Upstream's `makeSimpleRedisSettings`: one Redis and a per-second one, a local cache of
    /// `local_cache_bytes`.
    fn simple_redis(
        runtime: &Runtime,
        redis: u16,
        per_second_redis: u16,
        per_second: bool,
        local_cache_bytes: u32,
    ) -> Settings {
        Settings::defaults(runtime)
            .set("BACKEND_TYPE", "redis")
            .set("REDIS_URL", format!("localhost:{redis}"))
            .set(
                "REDIS_PERSECOND_URL",
                format!("localhost:{per_second_redis}"),
            )
            .set("REDIS_PERSECOND", per_second)
            .set("LOCAL_CACHE_SIZE_IN_BYTES", local_cache_bytes)
    }

    /// Upstream's `configXdsProvider`: the configuration from the control plane at `plane`.
    fn xds(self, plane: &ControlPlane) -> Settings {
        self.set("CONFIG_TYPE", "GRPC_XDS_SOTW")
            .set("CONFIG_GRPC_XDS_NODE_ID", "init-test-node")
            .set(
                "CONFIG_GRPC_XDS_SERVER_URL",
                format!("localhost:{}", plane.addr().port()),
            )
    }

    /// Both Redis connections authenticated with upstream's password.
    fn auth(self) -> Settings {
        self.set("REDIS_AUTH", PASSWORD)
            .set("REDIS_PERSECOND_AUTH", PASSWORD)
    }

    fn set(mut self, name: &str, value: impl std::fmt::Display) -> Settings {
        self.env.retain(|(set, _)| set != name);
        self.env.push((name.to_owned(), value.to_string()));
        self
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.env
            .iter()
            .find(|(set, _)| set == name)
            .map(|(_, value)| value.as_str())
    }

    /// Upstream's tests name keys `<key>_local` when a local cache is on.
    fn local_cache(&self) -> bool {
        self.get("LOCAL_CACHE_SIZE_IN_BYTES")
            .is_some_and(|bytes| bytes != "0")
    }

    fn stops_increment_when_over_limit(&self) -> bool {
        self.get("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT") == Some("true")
    }

    /// `key`, or `key_local` with a local cache (upstream's `getCacheKey`).
    fn key(&self, key: &str) -> String {
        if self.local_cache() {
            format!("{key}_local")
        } else {
            key.to_owned()
        }
    }
}

/// The binary with no arguments and `settings` as its environment, once it listens.
async fn start(settings: &Settings) -> Ratelimitd {
    let mut cmd = command();
    for (name, value) in &settings.env {
        cmd.env(name, value);
    }
    tokio::task::spawn_blocking(move || Ratelimitd::spawn(cmd))
        .await
        .expect("start ratelimitd")
}

/// A Redis and a per-second Redis of their own, with upstream's password when `auth`.
fn redis_pair(auth: bool) -> (RedisServer, RedisServer) {
    let start = || {
        if auth {
            RedisServer::start_with(&["--requirepass", PASSWORD])
        } else {
            RedisServer::start()
        }
    };
    (start(), start())
}

// ---------------------------------------------------------------------------------------------
// Expected answers
// ---------------------------------------------------------------------------------------------

/// A status with a limit of `requests` per `unit`, the duration until reset taken from
/// `actual` in whole seconds (upstream's `newDescriptorStatus`).
fn limited(
    code: Code,
    requests: u32,
    unit: Unit,
    remaining: u32,
    actual: &DescriptorStatus,
) -> DescriptorStatus {
    DescriptorStatus {
        code: code as i32,
        current_limit: Some(RateLimit {
            name: String::new(),
            requests_per_unit: requests,
            unit: unit as i32,
            unit_multiplier: None,
        }),
        limit_remaining: remaining,
        duration_until_reset: Some(prost_types::Duration {
            seconds: actual
                .duration_until_reset
                .as_ref()
                .map_or(0, |duration| duration.seconds),
            nanos: 0,
        }),
        quota: None,
    }
}

/// A status without a limit: OK, nothing remaining, no duration.
fn unlimited() -> DescriptorStatus {
    DescriptorStatus {
        code: Code::Ok as i32,
        ..DescriptorStatus::default()
    }
}

fn response(overall: Code, statuses: Vec<DescriptorStatus>) -> RateLimitResponse {
    RateLimitResponse {
        overall_code: overall as i32,
        statuses,
        ..RateLimitResponse::default()
    }
}

/// Sleeps, if needed, until `room` seconds are left in the current window of `window`
/// seconds, so a sequence that upstream expects within one window is not split by a boundary.
async fn room_in_window(window: u64, room: f64) {
    let left = to_window_end(window);
    if left < room {
        tokio::time::sleep(Duration::from_secs_f64(left + 0.05)).await;
    }
}

/// Polls `holds` every 100 ms until it is true, for at most [`WAIT`].
async fn eventually<F, Fut>(what: &str, mut holds: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + WAIT;
    while !holds().await {
        assert!(Instant::now() < deadline, "not within {WAIT:?}: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// The scenarios upstream's tests share
// ---------------------------------------------------------------------------------------------

/// Upstream's `testBasicBaseConfig`: an unknown domain, a per-second limit, 25 requests on a
/// minute limit, 15 on a minute and an hour limit together, and a duration that ticks down.
async fn basic_base_config(name: &str, settings: &Settings) {
    let server = start(settings).await;
    let mut client = server.client().await;
    let key = |key: &str| settings.key(key);

    let answer = should(
        &mut client,
        request("foo", &[&[(&key("hello"), "world")]], 1),
    )
    .await;
    assert_eq!(
        answer,
        response(Code::Ok, vec![unlimited()]),
        "{name}: unknown domain"
    );

    let answer = should(
        &mut client,
        request("basic", &[&[(&key("key1"), "foo")]], 1),
    )
    .await;
    let expected = response(
        Code::Ok,
        vec![limited(Code::Ok, 50, Unit::Second, 49, &answer.statuses[0])],
    );
    assert_eq!(answer, expected, "{name}: basic key1");

    // Over a minute limit with a value no other run used.
    room_in_window(60, 3.0).await;
    let value = rand::random::<u64>().to_string();
    for i in 0..25u32 {
        let answer = should(
            &mut client,
            request("another", &[&[(&key("key2"), &value)]], 1),
        )
        .await;
        let (code, remaining) = if i >= 20 {
            (Code::OverLimit, 0)
        } else {
            (Code::Ok, 20 - (i + 1))
        };
        let expected = response(
            code,
            vec![limited(
                code,
                20,
                Unit::Minute,
                remaining,
                &answer.statuses[0],
            )],
        );
        assert_eq!(answer, expected, "{name}: key2 alone, request {}", i + 1);
    }

    // Two limits of one domain in each request: from the 11th on, the hour limit denies.
    room_in_window(60, 3.0).await;
    room_in_window(3600, 3.0).await;
    let value = rand::random::<u64>().to_string();
    for i in 0..15u32 {
        let answer = should(
            &mut client,
            request(
                "another",
                &[&[(&key("key2"), &value)], &[(&key("key3"), &value)]],
                1,
            ),
        )
        .await;
        let mut overall = Code::Ok;
        let mut remaining_key2 = 20 - (i + 1);
        let mut remaining_key3 = 10 - (i + 1).min(10);
        if i >= 10 {
            overall = Code::OverLimit;
            remaining_key3 = 0;
            if settings.stops_increment_when_over_limit() {
                remaining_key2 = 10;
            }
        }
        let expected = response(
            overall,
            vec![
                limited(
                    Code::Ok,
                    20,
                    Unit::Minute,
                    remaining_key2,
                    &answer.statuses[0],
                ),
                limited(overall, 10, Unit::Hour, remaining_key3, &answer.statuses[1]),
            ],
        );
        assert_eq!(answer, expected, "{name}: key2 and key3, request {}", i + 1);
    }

    // The same key twice, two seconds apart: less time until the reset.
    let first = should(
        &mut client,
        request("another", &[&[(&key("key4"), "durTest")]], 1),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let second = should(
        &mut client,
        request("another", &[&[(&key("key4"), "durTest")]], 1),
    )
    .await;
    let seconds = |answer: &RateLimitResponse| {
        answer.statuses[0]
            .duration_until_reset
            .as_ref()
            .map_or(0, |duration| duration.seconds)
    };
    assert!(
        seconds(&second) < seconds(&first),
        "{name}: duration until reset {} s, then {} s two seconds later",
        seconds(&first),
        seconds(&second)
    );
}

/// `reload/block=foo`: OVER_LIMIT while the `reload` domain is in force (0 per second), OK
/// without a limit while it is not. It consumes nothing either way.
async fn reload_domain_in_force(client: &mut Client) -> bool {
    let answer = should(client, request("reload", &[&[("block", "foo")]], 1)).await;
    answer.overall_code == Code::OverLimit as i32
}

/// Upstream's `testConfigReload`: `reload` is unknown, `add_reload` brings it in (its 50 per
/// second limit then answers), `remove_reload` takes it out again.
async fn config_reload(
    name: &str,
    settings: &Settings,
    add_reload: impl FnOnce(),
    remove_reload: impl FnOnce(),
) {
    let server = start(settings).await;
    let mut client = server.client().await;
    let key = |key: &str| settings.key(key);

    let answer = should(
        &mut client,
        request("reload", &[&[(&key("block"), "foo")]], 1),
    )
    .await;
    assert_eq!(
        answer,
        response(Code::Ok, vec![unlimited()]),
        "{name}: before the reload"
    );

    add_reload();
    eventually(&format!("{name}: the reload domain loads"), || {
        let mut client = client.clone();
        async move { reload_domain_in_force(&mut client).await }
    })
    .await;
    let answer = should(
        &mut client,
        request("reload", &[&[(&key("key1"), "foo")]], 1),
    )
    .await;
    let expected = response(
        Code::Ok,
        vec![limited(Code::Ok, 50, Unit::Second, 49, &answer.statuses[0])],
    );
    assert_eq!(answer, expected, "{name}: after the reload");

    remove_reload();
    eventually(&format!("{name}: the reload domain goes"), || {
        let mut client = client.clone();
        async move { !reload_domain_in_force(&mut client).await }
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// The tests, one per upstream test function
// ---------------------------------------------------------------------------------------------

/// Upstream's `TestBasicConfig`: nine subtests, with and without the per-second Redis, the
/// local cache, a key prefix and `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_config() {
    let runtime = Runtime::new();
    // (subtest, per-second Redis, local cache bytes, CACHE_KEY_PREFIX, stop increments)
    let subtests: [(&str, bool, u32, Option<&str>, bool); 9] = [
        ("WithoutPerSecondRedis", false, 0, None, false),
        ("WithPerSecondRedis", true, 0, None, false),
        (
            "WithoutPerSecondRedisWithLocalCache",
            false,
            1000,
            None,
            false,
        ),
        ("WithPerSecondRedisWithLocalCache", true, 1000, None, false),
        (
            "WithoutPerSecondRedisWithCachePrefix",
            false,
            0,
            Some("prefix:"),
            false,
        ),
        (
            "WithoutPerSecondRedisWithstopCacheKeyIncrementWhenOverlimitConfig",
            false,
            0,
            None,
            true,
        ),
        (
            "WithPerSecondRedisWithstopCacheKeyIncrementWhenOverlimitConfig",
            true,
            0,
            None,
            true,
        ),
        (
            "WithoutPerSecondRedisWithLocalCacheAndstopCacheKeyIncrementWhenOverlimitConfig",
            false,
            1000,
            None,
            true,
        ),
        (
            "WithPerSecondRedisWithLocalCacheAndstopCacheKeyIncrementWhenOverlimitConfig",
            true,
            1000,
            None,
            true,
        ),
    ];
    let servers: Vec<_> = subtests.iter().map(|_| redis_pair(false)).collect();
    join_all(subtests.iter().zip(&servers).map(
        |(&(name, per_second, local_cache, prefix, stop), (redis, per_second_redis))| {
            let mut settings = Settings::simple_redis(
                &runtime,
                redis.port(),
                per_second_redis.port(),
                per_second,
                local_cache,
            );
            if let Some(prefix) = prefix {
                settings = settings.set("CACHE_KEY_PREFIX", prefix);
            }
            if stop {
                settings = settings.set("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", true);
            }
            async move { basic_base_config(name, &settings).await }
        },
    ))
    .await;
}

/// Upstream's `TestXdsProviderBasicConfig`: the same scenario with the configuration from an
/// xDS control plane, with and without the per-second Redis and the local cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xds_provider_basic_config() {
    let runtime = Runtime::new();
    let plane = ControlPlane::start(None).await;
    plane.push("1", initial_snapshot());
    let subtests: [(&str, bool, u32); 4] = [
        ("WithoutPerSecondRedis", false, 0),
        ("WithPerSecondRedis", true, 0),
        ("WithoutPerSecondRedisWithLocalCache", false, 1000),
        ("WithPerSecondRedisWithLocalCache", true, 1000),
    ];
    let servers: Vec<_> = subtests.iter().map(|_| redis_pair(false)).collect();
    join_all(subtests.iter().zip(&servers).map(
        |(&(name, per_second, local_cache), (redis, per_second_redis))| {
            let settings = Settings::simple_redis(
                &runtime,
                redis.port(),
                per_second_redis.port(),
                per_second,
                local_cache,
            )
            .xds(&plane);
            async move { basic_base_config(name, &settings).await }
        },
    ))
    .await;
}

/// Upstream's `TestBasicConfig_ExtraTags`: `EXTRA_TAGS` set, a request answered. (Its other
/// assertions read the tags back from upstream's in-process stats store.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_config_extra_tags() {
    let runtime = Runtime::new();
    let (redis, per_second_redis) = redis_pair(false);
    let settings =
        Settings::simple_redis(&runtime, redis.port(), per_second_redis.port(), false, 0)
            .set("EXTRA_TAGS", "foo:bar,a:b");
    let server = start(&settings).await;
    let mut client = server.client().await;
    let answer = should(&mut client, request("basic", &[&[("key1", "foo")]], 1)).await;
    assert_eq!(answer.overall_code, Code::Ok as i32);
}

/// Upstream's `TestBasicAuthConfig`: both Redis connections with a password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_auth_config() {
    let runtime = Runtime::new();
    let subtests: [(&str, bool, u32); 4] = [
        ("WithoutPerSecondRedisAuth", false, 0),
        ("WithPerSecondRedisAuth", true, 0),
        ("WithoutPerSecondRedisAuthWithLocalCache", false, 1000),
        ("WithPerSecondRedisAuthWithLocalCache", true, 1000),
    ];
    let servers: Vec<_> = subtests.iter().map(|_| redis_pair(true)).collect();
    join_all(subtests.iter().zip(&servers).map(
        |(&(name, per_second, local_cache), (redis, per_second_redis))| {
            let settings = Settings::simple_redis(
                &runtime,
                redis.port(),
                per_second_redis.port(),
                per_second,
                local_cache,
            )
            .auth();
            async move { basic_base_config(name, &settings).await }
        },
    ))
    .await;
}

/// Upstream's `TestBasicAuthConfigWithRedisCluster`: a three-master cluster with a password,
/// named by `REDIS_TYPE=cluster` and a seed list; the subtests share it, one after the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_auth_config_with_redis_cluster() {
    let runtime = Runtime::new();
    let cluster = RedisCluster::start_with(
        3,
        0,
        &ClusterOptions {
            password: Some(PASSWORD.into()),
            ..ClusterOptions::default()
        },
    );
    let seeds = cluster
        .ports()
        .iter()
        .map(|port| format!("localhost:{port}"))
        .collect::<Vec<_>>()
        .join(",");
    for (name, per_second, local_cache) in [
        ("WithoutPerSecondRedisAuth", false, 0),
        ("WithPerSecondRedisAuth", true, 0),
        ("WithoutPerSecondRedisAuthWithLocalCache", false, 1000),
        ("WithPerSecondRedisAuthWithLocalCache", true, 1000),
    ] {
        let settings = Settings::defaults(&runtime)
            .set("BACKEND_TYPE", "redis")
            .set("REDIS_PERSECOND", per_second)
            .set("LOCAL_CACHE_SIZE_IN_BYTES", local_cache)
            .set("REDIS_TYPE", "cluster")
            .set("REDIS_URL", &seeds)
            .set("REDIS_PERSECOND_TYPE", "cluster")
            .set("REDIS_PERSECOND_URL", &seeds)
            .set("REDIS_PIPELINE_WINDOW", "150us")
            .set("REDIS_PERSECOND_PIPELINE_WINDOW", "150us")
            .auth();
        basic_base_config(name, &settings).await;
    }
}

/// Upstream's `TestBasicAuthConfigWithRedisSentinel`: a master, its replica and three
/// Sentinels, the data nodes with a password, named by `REDIS_TYPE=sentinel`; the subtests
/// share them, one after the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_auth_config_with_redis_sentinel() {
    let runtime = Runtime::new();
    let sentinel = RedisSentinel::start_with(
        "mymaster",
        &SentinelOptions {
            password: Some(PASSWORD.into()),
            ..SentinelOptions::default()
        },
    );
    let url = std::iter::once(sentinel.master_name().to_owned())
        .chain(
            sentinel
                .sentinel_ports()
                .iter()
                .map(|port| format!("localhost:{port}")),
        )
        .collect::<Vec<_>>()
        .join(",");
    for (name, per_second, local_cache) in [
        ("WithoutPerSecondRedisAuth", false, 0),
        ("WithPerSecondRedisAuth", true, 0),
        ("WithoutPerSecondRedisAuthWithLocalCache", false, 1000),
        ("WithPerSecondRedisAuthWithLocalCache", true, 1000),
    ] {
        let settings = Settings::defaults(&runtime)
            .set("BACKEND_TYPE", "redis")
            .set("REDIS_PERSECOND", per_second)
            .set("LOCAL_CACHE_SIZE_IN_BYTES", local_cache)
            .set("REDIS_TYPE", "sentinel")
            .set("REDIS_URL", &url)
            .set("REDIS_PERSECOND_TYPE", "sentinel")
            .set("REDIS_PERSECOND_URL", &url)
            .auth();
        basic_base_config(name, &settings).await;
    }
}

/// Upstream's `TestBasicReloadConfig`: the basic scenario with `RUNTIME_WATCH_ROOT=false`, and
/// a file added to and removed from the configuration directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_reload_config() {
    let basic_runtime = Runtime::new();
    let reload_runtime = Runtime::new();
    let (basic_redis, basic_per_second) = redis_pair(false);
    let (reload_redis, reload_per_second) = redis_pair(false);
    let without_watch_root = |runtime: &Runtime, redis: &RedisServer, per_second: &RedisServer| {
        Settings::simple_redis(runtime, redis.port(), per_second.port(), false, 0)
            .set("RUNTIME_WATCH_ROOT", false)
    };
    let basic = without_watch_root(&basic_runtime, &basic_redis, &basic_per_second);
    let reload = without_watch_root(&reload_runtime, &reload_redis, &reload_per_second);
    let runtime = &reload_runtime;
    tokio::join!(
        basic_base_config("BasicWithoutWatchRoot", &basic),
        config_reload(
            "ReloadWithoutWatchRoot",
            &reload,
            || runtime.write("reload.yaml", &RELOAD.yaml()),
            || runtime.remove("reload.yaml"),
        ),
    );
}

/// Upstream's `TestXdsProviderBasicConfigReload`: the control plane pushes a snapshot with the
/// `reload` domain, then the initial one again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xds_provider_basic_config_reload() {
    let runtime = Runtime::new();
    let plane = ControlPlane::start(None).await;
    plane.push("1", initial_snapshot());
    let (redis, per_second_redis) = redis_pair(false);
    let settings =
        Settings::simple_redis(&runtime, redis.port(), per_second_redis.port(), false, 0)
            .xds(&plane);
    config_reload(
        "ReloadConfigWithXdsServer",
        &settings,
        || {
            let mut snapshot = initial_snapshot();
            snapshot.push(RELOAD.resource());
            plane.push("2", snapshot);
        },
        || plane.push("3", initial_snapshot()),
    )
    .await;
}

/// Upstream's `Test_mTLS`: the gRPC port speaks TLS with a server certificate and requires a
/// client certificate of the client CA naming `localhost`. (Upstream also reaches Redis over
/// TLS there; Redis here is plain.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn m_tls() {
    let runtime = Runtime::new();
    let pki = Pki::new();
    let server_ca = pki.ca("server");
    let server_cert = server_ca.server("server", "localhost", 2021);
    let client_ca = pki.ca("client");
    let client_cert = client_ca.client("client", "DNS:localhost");
    let (redis, per_second_redis) = redis_pair(false);
    let settings =
        Settings::simple_redis(&runtime, redis.port(), per_second_redis.port(), false, 0)
            .set("GRPC_SERVER_USE_TLS", true)
            .set("GRPC_SERVER_TLS_CERT", server_cert.cert.display())
            .set("GRPC_SERVER_TLS_KEY", server_cert.key.display())
            .set("GRPC_CLIENT_TLS_CACERT", client_ca.cert.display())
            .set("GRPC_CLIENT_TLS_SAN", "localhost");
    let server = start(&settings).await;
    let channel = tls_channel(server.grpc_addr(), &server_ca.cert, Some(&client_cert))
        .await
        .expect("a client certificate of the client CA is accepted");
    let mut client = rls(channel);
    let answer = should(&mut client, request("basic", &[&[("key1", "foo")]], 1)).await;
    assert_eq!(answer.overall_code, Code::Ok as i32);
}

/// Whether a TLS handshake with the gRPC port succeeds when only `ca` is trusted.
async fn handshake(server: &Ratelimitd, ca: &Path) -> bool {
    tls_channel(server.grpc_addr(), ca, None).await.is_ok()
}

/// Upstream's `TestReloadGRPCServerCerts`: a certificate of a new CA renamed over the served
/// one is served without a restart (within 10 s), and the old CA no longer verifies it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_grpc_server_certs() {
    let runtime = Runtime::new();
    let pki = Pki::new();
    let initial_ca = pki.ca("initial");
    let initial = initial_ca.server("initial", "localhost", 2021);
    let new_ca = pki.ca("new");
    let new = new_ca.server("new", "localhost", 2021);
    let (redis, per_second_redis) = redis_pair(false);
    let settings =
        Settings::simple_redis(&runtime, redis.port(), per_second_redis.port(), false, 0)
            .set("GRPC_SERVER_USE_TLS", true)
            .set("GRPC_SERVER_TLS_CERT", initial.cert.display())
            .set("GRPC_SERVER_TLS_KEY", initial.key.display());
    let server = start(&settings).await;

    assert!(
        handshake(&server, &initial_ca.cert).await,
        "WithInitialCert: the initial CA verifies the server"
    );
    assert!(
        !handshake(&server, &new_ca.cert).await,
        "WithNewCertFail: the new CA does not, yet"
    );
    std::fs::rename(&new.cert, &initial.cert).expect("rename the new certificate");
    std::fs::rename(&new.key, &initial.key).expect("rename the new key");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !handshake(&server, &new_ca.cert).await {
        assert!(
            Instant::now() < deadline,
            "WithNewCertOK: the new certificate is not served within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        !handshake(&server, &initial_ca.cert).await,
        "WithInitialCertFail: the initial CA no longer verifies the server"
    );
}

/// Upstream's `TestShareThreshold`: every `files/*` value counts against one limit, while each
/// `files_no_share/*` value has its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_threshold() {
    let runtime = Runtime::new();
    let (redis, per_second_redis) = redis_pair(false);
    let settings =
        Settings::simple_redis(&runtime, redis.port(), per_second_redis.port(), false, 0);
    let server = start(&settings).await;
    let mut client = server.client().await;
    let domain = "share-threshold-test";
    room_in_window(3600, 5.0).await;

    for _ in 0..10 {
        should(
            &mut client,
            request(domain, &[&[("files", "files/a.pdf")]], 1),
        )
        .await;
    }
    let answer = should(
        &mut client,
        request(domain, &[&[("files", "files/b.csv")]], 1),
    )
    .await;
    let expected = response(
        Code::OverLimit,
        vec![limited(
            Code::OverLimit,
            10,
            Unit::Hour,
            0,
            &answer.statuses[0],
        )],
    );
    assert_eq!(answer, expected, "files/b.csv shares files/a.pdf's count");

    let base = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    for _ in 0..10 {
        let value = format!("files_no_share/{base}-{}", rand::random::<u64>());
        let answer = should(
            &mut client,
            request(domain, &[&[("files_no_share", &value)]], 1),
        )
        .await;
        let expected = response(
            Code::Ok,
            vec![limited(Code::Ok, 10, Unit::Hour, 9, &answer.statuses[0])],
        );
        assert_eq!(answer, expected, "{value} counts alone");
    }
}
