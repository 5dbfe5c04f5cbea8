use std::collections::BTreeSet;

use super::*;

fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect()
}

fn assigned(translation: &Translation) -> BTreeMap<&'static str, String> {
    translation
        .assignments
        .iter()
        .map(|a| (a.variable, a.value.clone()))
        .collect()
}

fn names_in(text: &str) -> Vec<&str> {
    text.split(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
        .filter(|word| !word.is_empty())
        .collect()
}

#[test]
fn an_environment_without_upstream_variables_changes_nothing() {
    let translation = translate(&env(&[("PATH", "/bin"), ("HOME", "/root")]), false).unwrap();
    assert_eq!(translation, Translation::default());
}

#[test]
fn every_upstream_variable_is_answered_by_name() {
    for name in VARIABLES {
        let said = match translate(&env(&[(name, "true")]), false) {
            Ok(translation) => {
                let mut said: Vec<String> = translation
                    .assignments
                    .iter()
                    .map(|a| a.from.clone())
                    .collect();
                said.extend(translation.notices.iter().map(|n| n.text.clone()));
                said
            }
            Err(errors) => errors,
        };
        assert!(
            said.iter().any(|text| names_in(text).contains(&name)),
            "{name}=true got no word: {said:?}"
        );
    }
}

#[test]
fn the_variable_list_has_no_duplicates() {
    let unique: std::collections::BTreeSet<_> = VARIABLES.iter().collect();
    assert_eq!(unique.len(), VARIABLES.len());
    for name in PER_SECOND_REDIS {
        assert!(VARIABLES.contains(&name), "{name}");
    }
}

#[test]
fn drop_in_mode_takes_upstreams_defaults() {
    let translation = translate(&env(&[]), true).unwrap();
    let set = assigned(&translation);
    assert_eq!(set["RATELIMITD_CONFIG"], "/srv/runtime_data/current/config");
    assert_eq!(set["RATELIMITD_CONFIG_LAYOUT"], "runtime");
    assert_eq!(set["RATELIMITD_CONFIG_IGNORE_DOTFILES"], "false");
    assert_eq!(set["RATELIMITD_STATSD_ADDR"], "localhost:8125");
    assert_eq!(
        set["RATELIMITD_REDIS_URL"],
        "unix:///var/run/nutcracker/ratelimit.sock"
    );
    assert_eq!(set["RATELIMITD_DEBUG_ADDR"], "0.0.0.0:6070");
    assert_eq!(set["RATELIMITD_LOG_LEVEL"], "warn");
    assert_eq!(
        humantime::parse_duration(&set["RATELIMITD_GRPC_MAX_CONNECTION_AGE"]),
        Ok(std::time::Duration::from_secs(86_400))
    );
    assert_eq!(
        humantime::parse_duration(&set["RATELIMITD_GRPC_MAX_CONNECTION_AGE_GRACE"]),
        Ok(std::time::Duration::from_secs(3_600))
    );
    // What a rolling swap would notice: upstream's keys and jitter, health that ignores Redis,
    // a startup that waits for it, upstream's timeout and pool size.
    assert_eq!(set["RATELIMITD_KEY_FORMAT"], "envoyproxy");
    assert_eq!(set["RATELIMITD_EXPIRATION_JITTER_MAX_SECONDS"], "300");
    assert_eq!(set["RATELIMITD_HEALTH_FOLLOWS_STORE"], "false");
    assert_eq!(set["RATELIMITD_REDIS_STARTUP_WAIT"], "forever");
    assert_eq!(set["RATELIMITD_REDIS_TIMEOUT"], "10s");
    assert_eq!(set["RATELIMITD_REDIS_POOL_SIZE"], "10");
    assert_eq!(set["RATELIMITD_GRPC_MAX_CONNECTION_AGE"], "24h");
    let defaulted = |variable: &str| {
        translation
            .assignments
            .iter()
            .find(|a| a.variable == variable)
            .is_some_and(|a| a.defaulted)
    };
    for variable in [
        "RATELIMITD_KEY_FORMAT",
        "RATELIMITD_EXPIRATION_JITTER_MAX_SECONDS",
        "RATELIMITD_GRPC_MAX_CONNECTION_AGE",
        "RATELIMITD_REDIS_TIMEOUT",
    ] {
        assert!(defaulted(variable), "{variable} is upstream's default");
    }
    assert!(translation.drop_in);
    assert_eq!(translation.variables_read(), Vec::<&str>::new());
    assert!(!set.contains_key("RATELIMITD_GRPC_ADDR"));
    assert!(!set.contains_key("RATELIMITD_HTTP_ADDR"));
}

#[test]
fn a_typical_kubernetes_deployment() {
    let translation = translate(
        &env(&[
            ("LOG_LEVEL", "debug"),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "redis.default.svc:6379"),
            ("USE_STATSD", "false"),
            ("RUNTIME_ROOT", "/data"),
            ("RUNTIME_SUBDIRECTORY", "ratelimit"),
            ("RUNTIME_WATCH_ROOT", "false"),
            ("RUNTIME_IGNOREDOTFILES", "true"),
            ("GRPC_PORT", "9081"),
        ]),
        true,
    )
    .unwrap();
    let set = assigned(&translation);
    assert_eq!(set["RATELIMITD_CONFIG"], "/data/ratelimit/config");
    assert_eq!(set["RATELIMITD_CONFIG_IGNORE_DOTFILES"], "true");
    assert_eq!(
        set["RATELIMITD_REDIS_URL"],
        "redis://redis.default.svc:6379"
    );
    assert_eq!(set["RATELIMITD_LOG_LEVEL"], "debug");
    assert_eq!(set["RATELIMITD_GRPC_ADDR"], "0.0.0.0:9081");
    assert!(!set.contains_key("RATELIMITD_STATSD_ADDR"));
    assert!(translation
        .notices
        .iter()
        .any(|n| n.text.starts_with("RUNTIME_WATCH_ROOT=false")));
}

#[test]
fn ratelimitd_variables_win() {
    let translation = translate(
        &env(&[
            ("GRPC_PORT", "9081"),
            ("RATELIMITD_GRPC_ADDR", "127.0.0.1:7000"),
            ("REDIS_URL", "h:1"),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("RATELIMITD_REDIS_CLUSTER", "h:2"),
        ]),
        false,
    )
    .unwrap();
    let set = assigned(&translation);
    assert!(!set.contains_key("RATELIMITD_GRPC_ADDR"));
    assert!(!set.contains_key("RATELIMITD_REDIS_URL"));
    let notices: Vec<&str> = translation
        .notices
        .iter()
        .map(|n| n.text.as_str())
        .collect();
    assert!(
        notices.contains(&"GRPC_HOST/GRPC_PORT is not used: RATELIMITD_GRPC_ADDR is set and wins")
    );
    assert!(notices.contains(&"REDIS_URL is not used: RATELIMITD_REDIS_CLUSTER is set and wins"));
}

#[test]
fn redis_topologies_and_credentials() {
    let single = translate(
        &env(&[
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "10.0.0.1:6380"),
            ("REDIS_AUTH", "app:p@ss:w/rd"),
            ("REDIS_TLS", "true"),
            ("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "1"),
            ("REDIS_TLS_CACERT", "/ca.pem"),
        ]),
        false,
    )
    .unwrap();
    let set = assigned(&single);
    assert_eq!(
        set["RATELIMITD_REDIS_URL"],
        "rediss://app:p%40ss%3Aw%2Frd@10.0.0.1:6380#insecure"
    );
    assert_eq!(set["RATELIMITD_REDIS_TLS_CA"], "/ca.pem");
    assert_eq!(set["RATELIMITD_REDIS_TLS_SYSTEM_ROOTS"], "true");
    assert!(single
        .assignments
        .iter()
        .any(|a| a.variable == "RATELIMITD_REDIS_URL" && a.secret));

    let unix = assigned(
        &translate(
            &env(&[("REDIS_URL", "/run/redis.sock"), ("REDIS_AUTH", "pw")]),
            false,
        )
        .unwrap(),
    );
    assert_eq!(
        unix["RATELIMITD_REDIS_URL"],
        "unix:///run/redis.sock?pass=pw"
    );

    let cluster = assigned(
        &translate(
            &env(&[
                ("REDIS_SOCKET_TYPE", "tcp"),
                ("REDIS_TYPE", "CLUSTER"),
                ("REDIS_URL", "a:7000,b:7001"),
                ("REDIS_AUTH", "secret"),
                ("REDIS_TLS", "t"),
            ]),
            false,
        )
        .unwrap(),
    );
    assert_eq!(cluster["RATELIMITD_REDIS_CLUSTER"], "a:7000,b:7001");
    assert_eq!(cluster["RATELIMITD_REDIS_PASSWORD"], "secret");
    assert_eq!(cluster["RATELIMITD_REDIS_TLS"], "true");
    assert!(!cluster.contains_key("RATELIMITD_REDIS_USER"));
    assert!(!cluster.contains_key("RATELIMITD_REDIS_TLS_SYSTEM_ROOTS"));

    let sentinel = assigned(
        &translate(
            &env(&[
                ("REDIS_SOCKET_TYPE", "tcp"),
                ("REDIS_TYPE", "sentinel"),
                ("REDIS_URL", "mymaster,s1:26379,s2:26379"),
                ("REDIS_SENTINEL_AUTH", "watcher:spw"),
            ]),
            false,
        )
        .unwrap(),
    );
    assert_eq!(
        sentinel["RATELIMITD_REDIS_SENTINEL"],
        "mymaster@s1:26379,s2:26379"
    );
    assert_eq!(sentinel["RATELIMITD_REDIS_SENTINEL_USER"], "watcher");
    assert_eq!(sentinel["RATELIMITD_REDIS_SENTINEL_PASSWORD"], "spw");
}

#[test]
fn redis_client_certificates_and_a_ca_beside_the_system_store() {
    let tls = [
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "redis:6380"),
        ("REDIS_TLS", "true"),
        ("REDIS_TLS_CLIENT_CERT", "/certs/client.crt"),
        ("REDIS_TLS_CLIENT_KEY", "/certs/client.key"),
        ("REDIS_TLS_CACERT", "/certs/ca.crt"),
    ];
    let translation = translate(&env(&tls), true).unwrap();
    let set = assigned(&translation);
    assert_eq!(set["RATELIMITD_REDIS_URL"], "rediss://redis:6380");
    assert_eq!(set["RATELIMITD_REDIS_TLS_CLIENT_CERT"], "/certs/client.crt");
    assert_eq!(set["RATELIMITD_REDIS_TLS_CLIENT_KEY"], "/certs/client.key");
    assert_eq!(set["RATELIMITD_REDIS_TLS_CA"], "/certs/ca.crt");
    assert_eq!(set["RATELIMITD_REDIS_TLS_SYSTEM_ROOTS"], "true");
    assert_eq!(
        translation
            .source_of("RATELIMITD_REDIS_TLS_CLIENT_KEY")
            .map(|assignment| assignment.from.as_str()),
        Some("REDIS_TLS_CLIENT_KEY")
    );

    // A CA of ratelimitd's own keeps its meaning: only that CA.
    let own_ca = [&tls[..], &[("RATELIMITD_REDIS_TLS_CA", "/own/ca.crt")]].concat();
    let set = assigned(&translate(&env(&own_ca), true).unwrap());
    assert!(!set.contains_key("RATELIMITD_REDIS_TLS_CA"));
    assert!(!set.contains_key("RATELIMITD_REDIS_TLS_SYSTEM_ROOTS"));

    // Without REDIS_TLS, as upstream, the files are not used.
    let plain = translate(&env(&tls[..2]), true).unwrap();
    let plain_with_files = translate(&env(&[&tls[..2], &tls[3..]].concat()), true).unwrap();
    assert_eq!(assigned(&plain), assigned(&plain_with_files));
    assert!(plain_with_files.notices.iter().any(|notice| notice.text
        == "REDIS_TLS_CLIENT_CERT is not used: REDIS_TLS is not true (as upstream)"));
}

#[test]
fn what_cannot_be_honoured_is_refused_by_name() {
    for (pairs, expected) in [
        (vec![("BACKEND_TYPE", "memcache")], "BACKEND_TYPE=memcache"),
        (
            vec![("USE_DOG_STATSD", "true"), ("USE_PROMETHEUS", "true")],
            "USE_DOG_STATSD=true and USE_PROMETHEUS=true: one stats sink at a time",
        ),
        (
            vec![("USE_STATSD", "true"), ("USE_PROMETHEUS", "true")],
            "USE_STATSD=true and USE_PROMETHEUS=true: one stats sink at a time",
        ),
        (
            vec![
                ("USE_DOG_STATSD", "true"),
                ("USE_DOG_STATSD_MOGRIFIERS", "HITS"),
            ],
            "USE_DOG_STATSD_MOGRIFIERS: DOG_STATSD_MOGRIFIER_HITS_PATTERN is not set",
        ),
        (vec![("CONFIG_TYPE", "REST")], "CONFIG_TYPE: `REST`"),
        (
            vec![("GRPC_SERVER_USE_TLS", "true")],
            "GRPC_SERVER_USE_TLS=true needs",
        ),
        (
            vec![("SHADOW_MODE", "yes")],
            "SHADOW_MODE: `yes` is not a Go boolean",
        ),
        (
            vec![("GRPC_PORT", "80800")],
            "GRPC_PORT: `80800` is not a port number",
        ),
        (
            vec![("GRPC_HOST", "example.com")],
            "GRPC_HOST: `example.com` is not an IP address",
        ),
        (
            vec![("REDIS_URL", "h:1"), ("REDIS_TIMEOUT", "10")],
            "REDIS_TIMEOUT: `10` is not a Go duration",
        ),
        (
            vec![("REDIS_URL", "h:1"), ("REDIS_TYPE", "cluster")],
            "REDIS_TYPE=cluster needs REDIS_SOCKET_TYPE=tcp",
        ),
        (
            vec![
                ("REDIS_URL", "h:1"),
                ("REDIS_SOCKET_TYPE", "tcp"),
                ("REDIS_TLS", "true"),
                ("REDIS_TLS_CLIENT_CERT", "/c.pem"),
            ],
            "REDIS_TLS_CLIENT_CERT is set without REDIS_TLS_CLIENT_KEY",
        ),
        (
            vec![
                ("REDIS_URL", "h:1"),
                ("REDIS_SOCKET_TYPE", "tcp"),
                ("REDIS_TLS", "true"),
                ("REDIS_TLS_CLIENT_KEY", "/k.pem"),
            ],
            "REDIS_TLS_CLIENT_KEY is set without REDIS_TLS_CLIENT_CERT",
        ),
    ] {
        let errors = translate(&env(&pairs), false).unwrap_err();
        assert!(
            errors.iter().any(|e| e.starts_with(expected)),
            "{pairs:?}: {errors:?}"
        );
    }
}

#[test]
fn statsd_follows_use_statsd_and_its_default() {
    let set = assigned(
        &translate(
            &env(&[
                ("STATSD_HOST", "statsd.local"),
                ("STATSD_PORT", "9125"),
                ("EXTRA_TAGS", "a:1,b:2"),
                ("STATS_FLUSH_INTERVAL", "1s"),
            ]),
            false,
        )
        .unwrap(),
    );
    assert_eq!(set["RATELIMITD_STATSD_ADDR"], "statsd.local:9125");
    assert_eq!(set["RATELIMITD_STATSD_EXTRA_TAGS"], "a:1,b:2");
    let off = assigned(&translate(&env(&[("USE_STATSD", "false")]), true).unwrap());
    assert!(!off.contains_key("RATELIMITD_STATSD_ADDR"));
    let disabled = assigned(&translate(&env(&[("DISABLE_STATS", "true")]), true).unwrap());
    assert!(!disabled.contains_key("RATELIMITD_STATSD_ADDR"));
}

#[test]
fn prometheus_and_headers() {
    let set = assigned(
        &translate(
            &env(&[
                ("USE_PROMETHEUS", "true"),
                ("PROMETHEUS_ADDR", ":19090"),
                ("PROMETHEUS_PATH", "/stats/prometheus"),
                ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
                ("LIMIT_REMAINING_HEADER", "X-Left"),
            ]),
            false,
        )
        .unwrap(),
    );
    assert_eq!(set["RATELIMITD_ENVOYPROXY_METRICS_ADDR"], "0.0.0.0:19090");
    assert_eq!(
        set["RATELIMITD_ENVOYPROXY_METRICS_PATH"],
        "/stats/prometheus"
    );
    assert!(
        !set.contains_key("RATELIMITD_METRICS_ADDR"),
        "ratelimitd's port stays its own"
    );
    assert_eq!(set["RATELIMITD_RESPONSE_HEADERS"], "envoyproxy");
    assert_eq!(set["RATELIMITD_RESPONSE_HEADER_REMAINING"], "X-Left");
    assert!(!set.contains_key("RATELIMITD_RESPONSE_HEADER_LIMIT"));
}

#[test]
fn one_stats_sink_as_upstream_with_statsd_off_when_another_is_asked_for() {
    // Drop-in: USE_STATSD defaults to true, which upstream refuses beside another sink; here
    // the other sink wins, and the log says so.
    let prometheus = translate(
        &env(&[
            ("USE_PROMETHEUS", "true"),
            ("EXTRA_TAGS", "env:prod"),
            ("STATS_FLUSH_INTERVAL", "1s"),
            ("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", "true"),
        ]),
        true,
    )
    .unwrap();
    let set = assigned(&prometheus);
    assert_eq!(set["RATELIMITD_ENVOYPROXY_METRICS_ADDR"], "0.0.0.0:9090");
    assert!(prometheus
        .source_of("RATELIMITD_ENVOYPROXY_METRICS_ADDR")
        .is_some_and(|a| a.defaulted));
    assert_eq!(set["RATELIMITD_STATSD_EXTRA_TAGS"], "env:prod");
    assert_eq!(
        set["RATELIMITD_ENVOYPROXY_METRICS_RESPONSE_TIME_MS"],
        "true"
    );
    assert!(!set.contains_key("RATELIMITD_STATSD_ADDR"));
    assert!(!set.contains_key("RATELIMITD_ENVOYPROXY_METRICS_PATH"));
    let notes: Vec<&str> = prometheus.notices.iter().map(|n| n.text.as_str()).collect();
    assert!(notes.contains(&"USE_STATSD is unset: statsd is off, USE_PROMETHEUS=true is the stats sink (envoyproxy/ratelimit refuses to start unless USE_STATSD=false)"), "{notes:?}");
    assert!(
        notes.contains(
            &"STATS_FLUSH_INTERVAL is not used: the Prometheus metrics are current at each scrape"
        ),
        "{notes:?}"
    );
    assert!(
        prometheus
            .differences()
            .iter()
            .any(|d| d.starts_with("USE_PROMETHEUS=true: upstream's families are current")),
        "{:?}",
        prometheus.differences()
    );

    let mapper = assigned(
        &translate(
            &env(&[
                ("USE_PROMETHEUS", "true"),
                ("USE_STATSD", "false"),
                ("PROMETHEUS_MAPPER_YAML", "/etc/mapper.yaml"),
                ("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", "true"),
            ]),
            true,
        )
        .unwrap(),
    );
    assert_eq!(
        set_or_none(&mapper, "RATELIMITD_ENVOYPROXY_METRICS_MAPPER"),
        Some("/etc/mapper.yaml")
    );
    assert_eq!(
        set_or_none(&mapper, "RATELIMITD_ENVOYPROXY_METRICS_RESPONSE_TIME_MS"),
        None,
        "ignored with a mapper, as upstream"
    );

    let dog = assigned(
        &translate(
            &env(&[
                ("USE_DOG_STATSD", "true"),
                ("STATSD_PORT", "9125"),
                ("EXTRA_TAGS", "env:prod"),
                ("USE_DOG_STATSD_MOGRIFIERS", "HITS"),
                ("DOG_STATSD_MOGRIFIER_HITS_PATTERN", "^a\\.(.*)$"),
                ("DOG_STATSD_MOGRIFIER_HITS_NAME", "a"),
            ]),
            true,
        )
        .unwrap(),
    );
    assert_eq!(dog["RATELIMITD_STATSD_ADDR"], "localhost:9125");
    assert_eq!(dog["RATELIMITD_STATSD_FORMAT"], "dogstatsd");
    assert_eq!(dog["RATELIMITD_STATSD_EXTRA_TAGS"], "env:prod");
    assert_eq!(dog["RATELIMITD_STATSD_MOGRIFIERS"], "HITS");
    assert!(!dog.contains_key("RATELIMITD_ENVOYPROXY_METRICS_ADDR"));

    let disabled = assigned(
        &translate(
            &env(&[("USE_PROMETHEUS", "true"), ("DISABLE_STATS", "true")]),
            true,
        )
        .unwrap(),
    );
    assert!(!disabled.contains_key("RATELIMITD_ENVOYPROXY_METRICS_ADDR"));
    assert!(!disabled.contains_key("RATELIMITD_STATSD_ADDR"));
}

fn set_or_none<'a>(set: &'a BTreeMap<&'static str, String>, name: &str) -> Option<&'a str> {
    set.get(name).map(String::as_str)
}

#[test]
fn empty_values_count_as_unset() {
    let translation = translate(&env(&[("GRPC_PORT", ""), ("SHADOW_MODE", "")]), false).unwrap();
    assert_eq!(translation, Translation::default());
}

#[test]
fn a_connection_age_grace_alone_takes_upstreams_default_age() {
    let set =
        assigned(&translate(&env(&[("GRPC_MAX_CONNECTION_AGE_GRACE", "30s")]), false).unwrap());
    assert_eq!(
        humantime::parse_duration(&set["RATELIMITD_GRPC_MAX_CONNECTION_AGE"]),
        Ok(std::time::Duration::from_secs(86_400))
    );
    assert_eq!(
        humantime::parse_duration(&set["RATELIMITD_GRPC_MAX_CONNECTION_AGE_GRACE"]),
        Ok(std::time::Duration::from_secs(30))
    );
}

#[test]
fn grpc_xds_sotw_sets_the_xds_flags_with_upstream_defaults() {
    let env = env(&[
        ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
        ("CONFIG_GRPC_XDS_NODE_ID", "rl-0"),
        ("CONFIG_GRPC_XDS_NODE_METADATA", "zone=a"),
        (
            "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
            "authorization:Bearer t",
        ),
        ("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "1s"),
        ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
        ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/certs/ca.crt"),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/certs/tls.crt"),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "/certs/tls.key"),
        ("CONFIG_GRPC_XDS_SERVER_TLS_SAN", "envoy-gateway"),
        ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "500ms"),
        ("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "1m"),
        ("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "0.2"),
        ("XDS_CLIENT_BACKOFF_JITTER", "false"),
        ("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "1048576"),
        ("RUNTIME_ROOT", "/data"),
    ]);
    let translation = translate(&env, true).expect("translates");
    let set = assigned(&translation);
    assert_eq!(set["RATELIMITD_CONFIG_SOURCE"], "xds");
    assert_eq!(set["RATELIMITD_XDS_SERVER"], "localhost:18000");
    assert_eq!(set["RATELIMITD_XDS_NODE_ID"], "rl-0");
    assert_eq!(set["RATELIMITD_XDS_NODE_METADATA"], "zone=a");
    assert_eq!(set["RATELIMITD_XDS_HEADERS"], "authorization:Bearer t");
    assert_eq!(set["RATELIMITD_XDS_TLS"], "true");
    assert_eq!(set["RATELIMITD_XDS_TLS_CA"], "/certs/ca.crt");
    assert_eq!(set["RATELIMITD_XDS_TLS_CERT"], "/certs/tls.crt");
    assert_eq!(set["RATELIMITD_XDS_TLS_KEY"], "/certs/tls.key");
    assert_eq!(set["RATELIMITD_XDS_TLS_SAN"], "envoy-gateway");
    assert_eq!(set["RATELIMITD_XDS_BACKOFF_RANDOM_FACTOR"], "0.2");
    assert_eq!(set["RATELIMITD_XDS_BACKOFF_JITTER"], "false");
    assert_eq!(set["RATELIMITD_XDS_MAX_MESSAGE_BYTES"], "1048576");
    for variable in [
        "RATELIMITD_XDS_CONNECT_RETRY_INTERVAL",
        "RATELIMITD_XDS_BACKOFF_INITIAL",
        "RATELIMITD_XDS_BACKOFF_MAX",
    ] {
        assert!(set.contains_key(variable), "{variable}");
    }
    assert!(
        !set.contains_key("RATELIMITD_CONFIG"),
        "no runtime directory"
    );
    assert!(translation
        .assignments
        .iter()
        .any(|a| a.variable == "RATELIMITD_XDS_HEADERS" && a.secret));

    let with_config = translate(&env, false).expect("translates");
    assert!(!assigned(&with_config).contains_key("RATELIMITD_CONFIG_SOURCE"));
}

#[test]
fn redis_health_check_active_connection_decides_whether_health_follows_redis() {
    const FOLLOWS: &str = "RATELIMITD_HEALTH_FOLLOWS_STORE";
    let follows = |pairs: &[(&str, &str)], drop_in: bool| {
        assigned(&translate(&env(pairs), drop_in).unwrap())
            .get(FOLLOWS)
            .cloned()
    };
    // Upstream's default (false) in drop-in mode; ratelimitd's (true) with --config.
    assert_eq!(follows(&[], true).as_deref(), Some("false"));
    assert_eq!(follows(&[], false), None);
    for drop_in in [true, false] {
        let on = [("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "true")];
        let off = [("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "false")];
        assert_eq!(follows(&on, drop_in).as_deref(), Some("true"), "{drop_in}");
        assert_eq!(
            follows(&off, drop_in).as_deref(),
            Some("false"),
            "{drop_in}"
        );
    }
    // The ratelimitd variable, set, wins without a word about an upstream variable left unset.
    let translation = translate(&env(&[(FOLLOWS, "true")]), true).unwrap();
    assert_eq!(assigned(&translation).get(FOLLOWS), None);
    assert!(
        !translation
            .notices
            .iter()
            .any(|n| n.text.contains("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION")),
        "{:?}",
        translation.notices
    );
}

#[test]
fn startup_waits_for_redis_as_upstream_says() {
    let set =
        |pairs: &[(&str, &str)], drop_in: bool| assigned(&translate(&env(pairs), drop_in).unwrap());
    let drop_in = set(&[], true);
    assert_eq!(drop_in["RATELIMITD_REDIS_STARTUP_WAIT"], "forever");
    assert!(!drop_in.contains_key("RATELIMITD_REDIS_STARTUP_INITIAL_INTERVAL"));
    let given = set(
        &[
            ("REDIS_STARTUP_INITIAL_INTERVAL", "250ms"),
            ("REDIS_STARTUP_MAX_INTERVAL", "2s"),
            ("REDIS_STARTUP_MAX_ELAPSED_TIME", "1m"),
        ],
        true,
    );
    assert_eq!(given["RATELIMITD_REDIS_STARTUP_WAIT"], "1m");
    assert_eq!(given["RATELIMITD_REDIS_STARTUP_INITIAL_INTERVAL"], "250ms");
    assert_eq!(given["RATELIMITD_REDIS_STARTUP_MAX_INTERVAL"], "2s");
    // With --config, ratelimitd's default (exit at the first failure) unless they are set.
    let native = set(&[("REDIS_URL", "redis://r:6379")], false);
    assert!(!native.contains_key("RATELIMITD_REDIS_STARTUP_WAIT"));
    let zero = set(
        &[
            ("REDIS_URL", "redis://r:6379"),
            ("REDIS_STARTUP_MAX_ELAPSED_TIME", "0"),
        ],
        false,
    );
    assert_eq!(
        zero["RATELIMITD_REDIS_STARTUP_WAIT"], "forever",
        "0 is upstream's forever"
    );
}

#[test]
fn refused_values_name_the_variable_and_what_is_accepted() {
    let errors = |pairs: &[(&str, &str)]| translate(&env(pairs), true).unwrap_err().join("\n");
    let pool = errors(&[("REDIS_POOL_SIZE", "ten")]);
    assert!(
        pool.contains("REDIS_POOL_SIZE: `ten`") && pool.contains("from 1"),
        "{pool}"
    );
    assert!(errors(&[("REDIS_POOL_SIZE", "0")]).contains("REDIS_POOL_SIZE"));
    let mismatch = errors(&[("REDIS_URL", "127.0.0.1:6379")]);
    assert!(
        mismatch.contains("REDIS_URL: `127.0.0.1:6379`")
            && mismatch.contains("REDIS_SOCKET_TYPE is unset")
            && mismatch.contains("REDIS_SOCKET_TYPE=tcp"),
        "{mismatch}"
    );
    let said_unix = errors(&[("REDIS_URL", "redis:6379"), ("REDIS_SOCKET_TYPE", "unix")]);
    assert!(
        said_unix.contains("REDIS_SOCKET_TYPE is unix"),
        "{said_unix}"
    );
    // A socket path stays a socket path.
    assert!(translate(&env(&[("REDIS_URL", "/run/redis.sock")]), true).is_ok());
}

#[test]
fn a_password_is_hidden_but_the_host_is_shown() {
    let translation = translate(
        &env(&[
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "redis.prod:6379"),
            ("REDIS_AUTH", "limiter:s3cret"),
        ]),
        true,
    )
    .unwrap();
    let url = translation.source_of("RATELIMITD_REDIS_URL").unwrap();
    assert_eq!(url.shown_value(), "redis://limiter:***@redis.prod:6379");
    let socket = translate(
        &env(&[("REDIS_URL", "/run/r.sock"), ("REDIS_AUTH", "s3cret")]),
        true,
    )
    .unwrap();
    let shown = socket
        .source_of("RATELIMITD_REDIS_URL")
        .unwrap()
        .shown_value();
    assert_eq!(shown, "unix:///run/r.sock?pass=***");
}

#[test]
fn tracing_enabled_maps_every_tracing_variable() {
    let translation = translate(
        &env(&[
            ("TRACING_ENABLED", "true"),
            ("TRACING_SERVICE_NAMESPACE", "gateway"),
            ("TRACING_SERVICE_INSTANCE_ID", "ratelimit-0"),
            ("TRACING_EXPORTER_PROTOCOL", "grpc"),
            ("TRACING_SAMPLING_RATE", "0.25"),
        ]),
        false,
    )
    .unwrap();
    let set = assigned(&translation);
    assert_eq!(set["RATELIMITD_TRACING"], "true");
    assert_eq!(set["RATELIMITD_TRACING_SERVICE_NAME"], "RateLimit");
    assert_eq!(
        set["RATELIMITD_TRACING_RESOURCE_ATTRIBUTES"],
        "service.namespace=gateway,service.instance.id=ratelimit-0"
    );
    assert_eq!(set["RATELIMITD_TRACING_PROTOCOL"], "grpc");
    assert_eq!(set["RATELIMITD_TRACING_SAMPLING_RATIO"], "0.25");
}

#[test]
fn tracing_takes_upstreams_defaults_when_enabled_alone() {
    let translation = translate(&env(&[("TRACING_ENABLED", "true")]), false).unwrap();
    let set = assigned(&translation);
    assert_eq!(set["RATELIMITD_TRACING_PROTOCOL"], "http/protobuf");
    assert_eq!(set["RATELIMITD_TRACING_SAMPLING_RATIO"], "1");
    assert_eq!(set["RATELIMITD_TRACING_SERVICE_NAME"], "RateLimit");
    assert!(!set.contains_key("RATELIMITD_TRACING_RESOURCE_ATTRIBUTES"));
}

#[test]
fn tracing_settings_without_tracing_enabled_are_unused() {
    let translation = translate(&env(&[("TRACING_SAMPLING_RATE", "0.5")]), false).unwrap();
    assert!(assigned(&translation).is_empty());
    assert!(translation
        .notices
        .iter()
        .any(|n| n.text.starts_with("TRACING_SAMPLING_RATE is not used")));
}

#[test]
fn bad_tracing_values_are_refused_by_name() {
    for (name, value) in [
        ("TRACING_EXPORTER_PROTOCOL", "zipkin"),
        ("TRACING_SAMPLING_RATE", "2"),
        ("TRACING_SERVICE_NAMESPACE", "a,b"),
    ] {
        let errors =
            translate(&env(&[("TRACING_ENABLED", "true"), (name, value)]), false).unwrap_err();
        assert!(
            errors.iter().any(|e| e.starts_with(name)),
            "{name}={value}: {errors:?}"
        );
    }
}

#[test]
fn every_upstream_variable_feeds_a_setting_or_is_answered_when_set() {
    let fed: BTreeSet<&str> = settings::all()
        .flat_map(|setting| setting.upstream.variables().iter().copied())
        .collect();
    for name in &fed {
        assert!(VARIABLES.contains(name), "{name} is no upstream variable");
    }
    // A variable that feeds no setting is a switch of others or something ratelimitd does
    // otherwise: set alone, a notice or an error names it.
    for name in VARIABLES.iter().filter(|name| !fed.contains(*name)) {
        let value = if *name == "BACKEND_TYPE" {
            "memcache"
        } else {
            "true"
        };
        let said = match translate(&env(&[(name, value)]), false) {
            Ok(translation) => translation
                .notices
                .iter()
                .any(|notice| names_in(&notice.text).contains(name)),
            Err(errors) => errors.iter().any(|error| names_in(error).contains(name)),
        };
        assert!(said, "{name}={value} feeds no setting and is not answered");
    }
}

#[test]
fn drop_in_mode_assigns_the_drop_in_default_of_every_setting_that_has_one() {
    let translation = translate(&env(&[]), true).unwrap();
    let assigned = assigned(&translation);
    for setting in settings::all() {
        assert_eq!(
            assigned.get(setting.variable).map(String::as_str),
            setting.drop_in_default,
            "--{}",
            setting.flag
        );
    }
    for variable in assigned.keys() {
        let setting = settings::by_variable(variable).expect("a setting");
        assert!(setting.drop_in_default.is_some(), "--{}", setting.flag);
    }
}

#[test]
fn a_copied_variable_reaches_its_setting_converted() {
    let translation = translate(
        &env(&[
            ("SHADOW_MODE", "T"),
            ("REDIS_TIMEOUT", "1m30s"),
            ("NEAR_LIMIT_RATIO", "0.9"),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "127.0.0.1:6379"),
        ]),
        false,
    )
    .unwrap();
    let assigned = assigned(&translation);
    assert_eq!(assigned[settings::responses::SHADOW_MODE.variable], "true");
    assert_eq!(
        assigned[settings::telemetry::NEAR_LIMIT_RATIO.variable],
        "0.9"
    );
    assert_eq!(
        assigned[settings::store::REDIS_TIMEOUT.variable],
        duration_flag(std::time::Duration::from_secs(90))
    );
}
