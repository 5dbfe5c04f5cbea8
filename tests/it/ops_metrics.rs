//! `/metrics`: exact counter values after a known sequence of requests, bounded cardinality of
//! `detailed_metric` rules, and `--near-limit-ratio`.

use std::time::Duration;

use ratelimitd::proto::common::rate_limit_descriptor::RateLimitOverride;
use ratelimitd::proto::envoy::r#type::v3::RateLimitUnit;
use ratelimitd::proto::rls::rate_limit_response::Code;
use ratelimitd::proto::rls::RateLimitRequest;
use testkit::ops_support::*;
use testkit::ratelimitd::*;

fn serve(extra: &[&str]) -> Ratelimitd {
    let config = ops_fixture("metrics.yaml");
    let mut args = vec!["--config", config.to_str().unwrap()];
    args.extend_from_slice(extra);
    Ratelimitd::start(&args)
}

async fn expect(c: &mut Client, req: RateLimitRequest, code: Code) {
    let resp = should(c, req.clone()).await;
    assert_eq!(overall(&resp), code, "{req:?} -> {resp:?}");
}

fn ops(entries: &[&[(&str, &str)]]) -> RateLimitRequest {
    request("ops", entries, 0)
}

/// The five rule counters of `rule` (and `descriptor`, when given).
fn rule_counters(text: &str, rule: &str, descriptor: Option<&str>) -> [f64; 5] {
    let labels = match descriptor {
        None => format!("domain=\"ops\",rule=\"{rule}\""),
        Some(d) => format!("domain=\"ops\",rule=\"{rule}\",descriptor=\"{d}\""),
    };
    [
        "ratelimitd_total_hits_total",
        "ratelimitd_within_limit_total",
        "ratelimitd_near_limit_total",
        "ratelimitd_over_limit_total",
        "ratelimitd_shadow_mode_total",
    ]
    .map(|name| value(text, name, &labels))
}

#[tokio::test]
async fn counters_after_a_known_sequence() {
    wait_for_window_room(3600, 30);
    let server = serve(&[]);
    let addr = server.http_addr();

    // Before any request every configured rule shows, at zero.
    let text = metrics(addr).await;
    assert_eq!(rule_counters(&text, "ops.plain", None), [0.0; 5]);
    assert_eq!(rule_counters(&text, "ops.tier_gold.path", None), [0.0; 5]);
    assert!(
        sample(
            &text,
            "ratelimitd_total_hits_total",
            "domain=\"ops\",rule=\"ops.detailed\""
        )
        .is_none(),
        "a detailed_metric rule has only per-descriptor series:\n{text}"
    );

    let mut c = server.client().await;
    // plain (5 per hour): 5 admitted, the 5th near the limit (above floor(5 x 0.8) = 4), 2 over.
    for i in 0..7 {
        let code = if i < 5 { Code::Ok } else { Code::OverLimit };
        expect(&mut c, ops(&[&[("plain", "a")]]), code).await;
    }
    // hits 0: decided, counts nothing.
    let mut zero = descriptor(&[("plain", "a")]);
    zero.hits_addend = Some(0);
    let req = RateLimitRequest {
        domain: "ops".into(),
        descriptors: vec![zero],
        hits_addend: 0,
    };
    expect(&mut c, req, Code::Ok).await;
    // 3 hits admitted (positions 1..=3: not near), then 3 more over.
    expect(&mut c, request("ops", &[&[("plain", "b")]], 3), Code::Ok).await;
    expect(
        &mut c,
        request("ops", &[&[("plain", "b")]], 3),
        Code::OverLimit,
    )
    .await;
    // shadow (2 per hour): the third would be denied: OK, but counted over and shadow.
    for _ in 0..3 {
        expect(&mut c, ops(&[&[("shadow", "x")]]), Code::Ok).await;
    }
    // detailed_metric: one series per descriptor.
    for value in ["v1", "v1", "v2"] {
        expect(&mut c, ops(&[&[("detailed", value)]]), Code::Ok).await;
    }
    // unlimited and banned (requests_per_unit: 0).
    for _ in 0..2 {
        expect(&mut c, ops(&[&[("free", "z")]]), Code::Ok).await;
    }
    expect(&mut c, ops(&[&[("banned", "q")]]), Code::OverLimit).await;
    // Denied by `banned`: plain=c is still answered OK (its hit is not consumed).
    let mixed = should(&mut c, ops(&[&[("plain", "c")], &[("banned", "q")]])).await;
    assert_eq!(overall(&mixed), Code::OverLimit);
    assert_eq!(code(&mixed.statuses[0]), Code::Ok);
    // gcra, burst 4: 4 admitted (the 4th above floor(4 x 0.8) = 3), 1 over.
    for i in 0..5 {
        let code = if i < 4 { Code::Ok } else { Code::OverLimit };
        expect(&mut c, ops(&[&[("tier", "gold"), ("path", "/x")]]), code).await;
    }
    // An override without a configured rule: rule="(override)".
    let mut overridden = descriptor(&[("nomatch", "1")]);
    overridden.limit = Some(RateLimitOverride {
        requests_per_unit: 1,
        unit: RateLimitUnit::Hour as i32,
        unit_multiplier: None,
    });
    for code in [Code::Ok, Code::OverLimit] {
        let req = RateLimitRequest {
            domain: "ops".into(),
            descriptors: vec![overridden.clone()],
            hits_addend: 0,
        };
        expect(&mut c, req, code).await;
    }
    // Unknown domain: OK, no rule. Empty domain: INVALID_ARGUMENT.
    expect(&mut c, request("nope", &[&[("plain", "a")]], 0), Code::Ok).await;
    let invalid = c
        .should_rate_limit(request("", &[&[("plain", "a")]], 0))
        .await
        .expect_err("empty domain");
    assert_eq!(invalid.code(), tonic::Code::InvalidArgument);

    let response = get(addr, "/metrics").await;
    assert_eq!(
        response.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let text = response.body;
    //                                        total within near over shadow
    assert_eq!(
        rule_counters(&text, "ops.plain", None),
        [14.0, 9.0, 1.0, 5.0, 0.0]
    );
    assert_eq!(
        rule_counters(&text, "ops.shadow", None),
        [3.0, 2.0, 1.0, 1.0, 1.0]
    );
    assert_eq!(
        rule_counters(&text, "ops.detailed", Some("detailed_v1")),
        [2.0, 2.0, 0.0, 0.0, 0.0]
    );
    assert_eq!(
        rule_counters(&text, "ops.detailed", Some("detailed_v2")),
        [1.0, 1.0, 0.0, 0.0, 0.0]
    );
    assert_eq!(
        rule_counters(&text, "ops.free", None),
        [2.0, 2.0, 0.0, 0.0, 0.0]
    );
    assert_eq!(
        rule_counters(&text, "ops.banned", None),
        [2.0, 0.0, 0.0, 2.0, 0.0]
    );
    assert_eq!(
        rule_counters(&text, "ops.tier_gold.path", None),
        [5.0, 4.0, 1.0, 1.0, 0.0]
    );
    assert_eq!(
        rule_counters(&text, "(override)", None),
        [2.0, 1.0, 1.0, 1.0, 0.0]
    );
    assert_eq!(
        value(
            &text,
            "ratelimitd_domain_not_found_total",
            "domain=\"nope\""
        ),
        1.0,
        "an unknown domain is counted under its name:\n{text}"
    );

    let requests = |result: &str| {
        value(
            &text,
            "ratelimitd_requests_total",
            &format!("result=\"{result}\""),
        )
    };
    assert_eq!(requests("ok"), 21.0);
    assert_eq!(requests("over_limit"), 7.0);
    assert_eq!(requests("invalid_argument"), 1.0);
    assert_eq!(requests("unavailable"), 0.0);
    assert_eq!(
        value(&text, "ratelimitd_request_duration_seconds_count", ""),
        29.0
    );
    assert_eq!(
        value(
            &text,
            "ratelimitd_request_duration_seconds_bucket",
            "le=\"+Inf\""
        ),
        29.0
    );
    let sum = value(&text, "ratelimitd_request_duration_seconds_sum", "");
    assert!(sum > 0.0 && sum < 29.0, "latency sum {sum}");
    // Buckets are cumulative.
    let buckets: Vec<f64> = samples(&text, "ratelimitd_request_duration_seconds_bucket")
        .iter()
        .map(|l| l.rsplit_once(' ').unwrap().1.parse().unwrap())
        .collect();
    assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "{buckets:?}");

    // The memory store: no store errors, no Redis or deny-cache series.
    for kind in ["timeout", "unavailable", "protocol"] {
        assert_eq!(
            value(
                &text,
                "ratelimitd_store_errors_total",
                &format!("kind=\"{kind}\"")
            ),
            0.0
        );
    }
    assert_eq!(
        value(
            &text,
            "ratelimitd_config_reloads_total",
            "result=\"success\""
        ),
        0.0
    );
    assert_eq!(
        value(&text, "ratelimitd_config_last_reload_successful", ""),
        1.0
    );
    assert!(!text.contains("ratelimitd_redis_script_reloads_total"));
    assert!(!text.contains("ratelimitd_deny_cache_hits_total"));

    // Every family is announced once, before its samples.
    for family in [
        "ratelimitd_total_hits_total",
        "ratelimitd_within_limit_total",
        "ratelimitd_near_limit_total",
        "ratelimitd_over_limit_total",
        "ratelimitd_shadow_mode_total",
        "ratelimitd_request_duration_seconds",
        "ratelimitd_requests_total",
        "ratelimitd_store_errors_total",
        "ratelimitd_store_error_answers_total",
        "ratelimitd_config_reloads_total",
    ] {
        assert_eq!(
            text.matches(&format!("# TYPE {family} ")).count(),
            1,
            "{family}"
        );
        assert_eq!(
            text.matches(&format!("# HELP {family} ")).count(),
            1,
            "{family}"
        );
    }
}

#[tokio::test]
async fn descriptor_values_are_labels_only_for_detailed_rules_and_capped() {
    let server = serve(&[]);
    let addrs = [server.grpc_addr()];
    // 1005 distinct values of a detailed_metric rule, and a plain rule with a secret value.
    let resps = hammer(&addrs, 4, 1005, |i| {
        request("ops", &[&[("detailed", &format!("value{i:04}"))]], 0)
    })
    .await;
    assert!(resps.iter().all(|r| r.overall_code == Code::Ok as i32));
    let mut c = server.client().await;
    expect(&mut c, ops(&[&[("plain", "secret-value")]]), Code::Ok).await;

    let text = metrics(server.http_addr()).await;
    assert!(!text.contains("secret-value"), "{text}");
    let detailed: Vec<&str> = samples(&text, "ratelimitd_total_hits_total")
        .into_iter()
        .filter(|l| l.contains("rule=\"ops.detailed\""))
        .collect();
    assert_eq!(detailed.len(), 1001, "1000 values and _other");
    let other = value(
        &text,
        "ratelimitd_total_hits_total",
        "domain=\"ops\",rule=\"ops.detailed\",descriptor=\"_other\"",
    );
    assert_eq!(other, 5.0);
    let total: f64 = detailed
        .iter()
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<f64>().unwrap())
        .sum();
    assert_eq!(total, 1005.0, "every hit is counted somewhere");
}

#[tokio::test]
async fn near_limit_ratio_is_configurable() {
    wait_for_window_room(3600, 30);
    let server = serve(&["--near-limit-ratio", "0.5"]);
    let mut c = server.client().await;
    for _ in 0..5 {
        expect(&mut c, ops(&[&[("plain", "a")]]), Code::Ok).await;
    }
    let text = metrics(server.http_addr()).await;
    // Capacity 5, threshold floor(2.5) = 2: positions 3, 4 and 5 are near.
    assert_eq!(
        rule_counters(&text, "ops.plain", None),
        [5.0, 5.0, 3.0, 0.0, 0.0]
    );

    let config = ops_fixture("metrics.yaml");
    for bad in ["0", "1.5", "x"] {
        let mut cmd = command();
        cmd.args([
            "serve",
            "--config",
            config.to_str().unwrap(),
            "--near-limit-ratio",
            bad,
        ]);
        let (status, _, stderr) = run_to_end(cmd, Duration::from_secs(10));
        assert!(!status.success(), "--near-limit-ratio {bad} accepted");
        assert!(stderr.contains("near-limit-ratio"), "{stderr}");
    }
}
