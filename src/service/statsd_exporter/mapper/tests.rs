use super::*;

fn builtin(response_time_ms: bool) -> Mapper {
    let (mapper, unknown) = crate::service::statsd_exporter::load_mapper(
        &crate::service::statsd_exporter::MapperSource::Builtin { response_time_ms },
    )
    .expect("the built-in mapping reads");
    assert!(unknown.is_empty(), "{unknown:?}");
    mapper
}

fn mapper(yaml: &str) -> Mapper {
    let mut unknown = Vec::new();
    let mapper = Mapper::parse(yaml, &mut unknown).unwrap_or_else(|e| panic!("{e}"));
    assert!(unknown.is_empty(), "{unknown:?}");
    mapper
}

/// Name and labels of a mapped stat, `None` when dropped.
fn series(
    mapper: &Mapper,
    stat: &str,
    stat_type: StatType,
) -> Option<(String, Vec<(&'static str, String)>)> {
    match mapper.map(stat, stat_type) {
        Mapped::Dropped => None,
        Mapped::Series(target) => Some((
            target.name,
            target
                .labels
                .into_iter()
                .map(|(k, v)| (&*Box::leak(k.into_boxed_str()), v))
                .collect(),
        )),
    }
}

fn labels(pairs: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    pairs.iter().map(|(k, v)| (*k, v.to_string())).collect()
}

#[test]
fn the_builtin_mapping_names_upstreams_stats_as_its_tests_expect() {
    let m = builtin(false);
    let counter = StatType::Counter;
    // envoyproxy/ratelimit src/stats/prom/prometheus_sink_test.go.
    assert_eq!(
        series(
            &m,
            "ratelimit_server.ShouldRateLimit.total_requests",
            counter
        ),
        Some((
            "ratelimit_service_total_requests".into(),
            labels(&[("grpc_method", "ShouldRateLimit")])
        ))
    );
    assert_eq!(
        series(
            &m,
            "ratelimit.service.rate_limit.domain1.key1_val1.over_limit",
            counter
        ),
        Some((
            "ratelimit_service_rate_limit_over_limit".into(),
            labels(&[("domain", "domain1"), ("key1", "key1_val1")])
        ))
    );
    assert_eq!(
        series(
            &m,
            "ratelimit.service.rate_limit.domain1.key1_val1.key2_val2.over_limit",
            counter
        ),
        Some((
            "ratelimit_service_rate_limit_over_limit".into(),
            labels(&[
                ("domain", "domain1"),
                ("key1", "key1_val1"),
                ("key2", "key2_val2")
            ])
        ))
    );
    assert_eq!(
        series(
            &m,
            "ratelimit.service.rate_limit.domain1.key3_val3.key4_val4.key5_val5.over_limit",
            counter
        ),
        Some((
            "ratelimit_service_rate_limit_over_limit".into(),
            labels(&[
                ("domain", "domain1"),
                ("key1", "key3_val3"),
                ("key2", "key4_val4")
            ])
        ))
    );
    assert_eq!(
        series(
            &m,
            "ratelimit.service.rate_limit.domain1.key1.test_gauge",
            StatType::Gauge
        ),
        Some((
            "ratelimit_service_rate_limit_domain1_key1_test_gauge".into(),
            vec![]
        ))
    );
    assert_eq!(
        series(
            &m,
            "ratelimit.service.call.should_rate_limit.redis_error",
            counter
        ),
        Some((
            "ratelimit_service_should_rate_limit_error".into(),
            labels(&[("err_type", "redis_error")])
        ))
    );
    assert_eq!(
        series(&m, "ratelimit.service.config_load_success", counter),
        Some(("ratelimit_service_config_load_success".into(), vec![]))
    );
    // No mapping: the name escaped.
    assert_eq!(
        series(&m, "ratelimit.service.global_shadow_mode", counter),
        Some(("ratelimit_service_global_shadow_mode".into(), vec![]))
    );
    assert_eq!(
        series(
            &m,
            "ratelimit.service.rate_limit.edeg.domain_not_found",
            counter
        ),
        Some((
            "ratelimit_service_rate_limit_edeg_domain_not_found".into(),
            vec![]
        ))
    );
    // Extra tags in the name: a glob no longer has as many fields; the regex, searched anywhere,
    // still finds a key of two fields and more.
    assert_eq!(
        series(
            &m,
            "ratelimit.service.rate_limit.edge.client.total_hits.__env=prod",
            counter
        ),
        Some((
            "ratelimit_service_rate_limit_edge_client_total_hits___env_prod".into(),
            vec![]
        ))
    );
    assert_eq!(
        series(
            &m,
            "ratelimit.service.rate_limit.edge.a_1.b_2.total_hits.__env=prod",
            counter
        ),
        Some((
            "ratelimit_service_rate_limit_total_hits".into(),
            labels(&[("domain", "edge"), ("key1", "a_1"), ("key2", "b_2")])
        ))
    );
}

#[test]
fn the_builtin_timer_is_a_histogram_in_seconds_or_milliseconds() {
    for (ms, scale) in [(false, Some(0.001)), (true, None)] {
        let Mapped::Series(target) = builtin(ms).map(
            "ratelimit_server.ShouldRateLimit.response_time",
            StatType::Observer,
        ) else {
            panic!("dropped");
        };
        assert_eq!(target.name, "ratelimit_service_response_time_seconds");
        assert_eq!(
            target.labels,
            vec![("grpc_method".to_string(), "ShouldRateLimit".to_string())]
        );
        assert_eq!(target.scale, scale);
        assert_eq!(
            target.observer,
            Observer::Histogram {
                buckets: DEFAULT_BUCKETS.to_vec()
            }
        );
    }
    // Unmapped timers are summaries by default.
    let Mapped::Series(target) = builtin(false).map(
        "ratelimit_server.ShouldRateLimit.response_time.__env=prod",
        StatType::Observer,
    ) else {
        panic!("dropped");
    };
    assert!(
        matches!(target.observer, Observer::Summary { .. }),
        "{target:?}"
    );
}

#[test]
fn the_first_glob_in_the_file_wins_whatever_the_path() {
    let m = mapper(
        "mappings:\n\
         - match: a.*.c\n  name: first_$1\n\
         - match: a.b.*\n  name: second_$1\n\
         - match: '*.b.c'\n  name: third\n\
         - match: x.*.*\n  name: x\n  labels: {one: $1, two: '${2}', bad: $1_suffix, zero: $0, far: $3, both: '${1}-${2}'}\n",
    );
    assert_eq!(series(&m, "a.b.c", StatType::Counter).unwrap().0, "first_b");
    assert_eq!(
        series(&m, "a.b.d", StatType::Counter).unwrap().0,
        "second_d"
    );
    assert_eq!(series(&m, "z.b.c", StatType::Counter).unwrap().0, "third");
    assert_eq!(
        series(&m, "a.b", StatType::Counter).unwrap().0,
        "a_b",
        "no glob of two fields"
    );
    assert_eq!(
        series(&m, "x.p.q", StatType::Counter).unwrap().1,
        labels(&[
            ("bad", ""),
            ("both", "p-q"),
            ("far", ""),
            ("one", "p"),
            ("two", "q"),
            ("zero", "")
        ])
    );
}

#[test]
fn statsd_exporters_tree_quirks_are_kept() {
    // A glob that ends where a longer, earlier glob passes never matches (statsd_exporter only
    // marks a state as final when it creates it).
    let m = mapper("mappings:\n- match: a.b.c\n  name: long\n- match: a.b\n  name: short\n");
    assert_eq!(series(&m, "a.b", StatType::Counter).unwrap().0, "a_b");
    assert_eq!(series(&m, "a.b.c", StatType::Counter).unwrap().0, "long");
}

#[test]
fn types_actions_and_regexes() {
    let m = mapper(
        "defaults:\n  observer_type: histogram\n  buckets: [1, 2]\n\
         mappings:\n\
         - match: t.*\n  name: counted_$1\n  match_metric_type: counter\n\
         - match: t.*\n  name: observed_$1\n  match_metric_type: observer\n\
         - match: drop.*\n  name: x\n  action: drop\n\
         - match: 'r\\.(\\w+)\\.(?P<rest>.*)'\n  match_type: regex\n  name: 'r_${1}x'\n  labels: {rest: $rest, nn: '$1', odd: '$1x'}\n  help: Regexed.\n",
    );
    assert_eq!(series(&m, "t.a", StatType::Counter).unwrap().0, "counted_a");
    assert_eq!(
        series(&m, "t.a", StatType::Observer).unwrap().0,
        "observed_a"
    );
    assert_eq!(series(&m, "t.a", StatType::Gauge).unwrap().0, "t_a");
    assert_eq!(m.map("drop.it", StatType::Counter), Mapped::Dropped);
    let Mapped::Series(target) = m.map("pre.r.abc.d.e", StatType::Observer) else {
        panic!()
    };
    assert_eq!(target.name, "r_abcx");
    assert_eq!(
        target.labels,
        vec![
            ("nn".into(), "abc".into()),
            ("odd".into(), "".into()),
            ("rest".into(), "d.e".into())
        ],
        "`$1x` names group `1x`, which does not exist"
    );
    assert_eq!(target.help, "Regexed.");
    assert_eq!(
        target.observer,
        Observer::Histogram {
            buckets: vec![1.0, 2.0]
        }
    );
}

#[test]
fn what_cannot_be_honoured_is_refused_with_its_place() {
    for (yaml, expected) in [
        ("mappings:\n- match: a.*\n  name: x\n  labels: {a: $1}\n", "2:3: invalid label key: a"),
        ("mappings:\n- match: a.*\n  name: x\n  ttl: 1m\n", "4:8: ttl is not supported"),
        ("mappings:\n- match: a.*\n  name: x\n  ttl: 0s\n", ""),
        ("defaults:\n  glob_disable_ordering: true\nmappings: []\n", "2:26: glob_disable_ordering: true is not supported"),
        ("mappings:\n- match: a.b*\n  name: x\n", "2:10: invalid match: a.b*"),
        ("mappings:\n- match: a\n", "2:3: metric mapping didn't set a metric name"),
        ("mappings:\n- match: a\n  name: 1x\n", "metric name '1x'"),
        ("mappings:\n- match: a\n  name: x\n  buckets: [2, 1]\n", "histogram buckets must be in increasing order"),
        ("mappings:\n- match: '('\n  match_type: regex\n  name: x\n", "2:10: invalid regex ("),
        ("mappings:\n- match: a\n  name: x\n  action: keep\n", "invalid action type \"keep\""),
        ("mappings:\n- match: a\n  name: x\n  observer_type: histogram\n  summary_options: {max_age: 1m}\n", "cannot use histogram observer and summary options"),
        ("mappings: [\n", "2:1:"),
    ] {
        let result = Mapper::parse(yaml, &mut Vec::new());
        match (result, expected) {
            (Ok(_), "") => {}
            (Ok(_), _) => panic!("{yaml:?} was accepted"),
            (Err(error), expected) => assert!(
                !expected.is_empty() && error.0.contains(expected),
                "{yaml:?}: {error}"
            ),
        }
    }
    let mut unknown = Vec::new();
    Mapper::parse(
        "mapping: []\nmappings:\n- match: a\n  name: x\n  lables: {}\n",
        &mut unknown,
    )
    .unwrap();
    assert_eq!(unknown, ["1:1: mapping", "5:3: lables"]);
}

#[test]
fn names_are_escaped_as_statsd_exporter_does() {
    assert_eq!(escape_metric_name("a.b-c--d/é"), "a_b_c_d__");
    assert_eq!(escape_metric_name("1abc"), "_1abc");
    assert_eq!(glob_template("$1$2", &["a", "b"], 2), "");
    assert_eq!(glob_template("${2}${1}", &["a", "b"], 2), "ba");
    assert_eq!(glob_template("x${", &["a"], 1), "x${");
}

#[test]
fn statsd_exporters_own_glob_cases() {
    // statsd_exporter v0.26.1 pkg/mapper/mapper_test.go: "Config with backtracking, the
    // non-matched rule has star(s)", "Config with super sets, keeps ordering", "Config with bad
    // regex reference".
    let m = mapper(
        "mappings:\n\
         - match: '*.dummy.*'\n  name: metric_one\n  labels: {system: $1, attribute: $2}\n\
         - match: 'full.name.*'\n  name: metric_two\n  labels: {system: static, attribute: $1}\n\
         - match: order.*.*\n  name: testa\n  labels: {label: '${1}_foo'}\n\
         - match: order.*.bbb\n  name: testb\n  labels: {label: '${1}_foo'}\n\
         - match: test.*\n  name: name\n  labels: {label: $1_foo}\n",
    );
    let counter = StatType::Counter;
    assert_eq!(
        series(&m, "whatever.dummy.test", counter),
        Some((
            "metric_one".into(),
            labels(&[("attribute", "test"), ("system", "whatever")])
        ))
    );
    assert_eq!(
        series(&m, "full.name.anothertest", counter),
        Some((
            "metric_two".into(),
            labels(&[("attribute", "anothertest"), ("system", "static")])
        ))
    );
    assert_eq!(
        series(&m, "order.good.bbb", counter),
        Some(("testa".into(), labels(&[("label", "good_foo")])))
    );
    assert_eq!(
        series(&m, "test.a", counter),
        Some(("name".into(), labels(&[("label", "")])))
    );
}
