//! DESIGN.md "Matching" and "Request and response", over real sockets against the server
//! (memory store; run in this process through `server::run` where no flag or environment
//! variable is under test, else the real binary): precedence, depth, whitelist, unknown domain, unlimited, replaces, shadow mode,
//! overrides, hits, statuses, current_limit, duration_until_reset per algorithm, all or nothing,
//! and files in envoyproxy/ratelimit's schema (tests/fixtures/compat/) served as they are.
//!
//! Every call goes through `should`, which also checks that `overall_code` is never UNKNOWN and
//! that there is one status per descriptor.

use ratelimitd::proto::common::rate_limit_descriptor::RateLimitOverride;
use ratelimitd::proto::envoy::r#type::v3::RateLimitUnit;
use ratelimitd::proto::rls::rate_limit_response::rate_limit::Unit;
use ratelimitd::proto::rls::rate_limit_response::{Code, DescriptorStatus};
use ratelimitd::proto::rls::RateLimitRequest;
use ratelimitd::server::Settings;
use testkit::in_process::InProcess;
use testkit::ratelimitd::*;

const MAX: u32 = u32::MAX;

fn path(p: std::path::PathBuf) -> String {
    p.to_str().expect("utf-8 path").to_string()
}

/// A server with the matching and algorithm fixtures (two configuration files).
fn serve() -> InProcess {
    let matching = fixture("serve/matching.yaml");
    let algorithms = fixture("serve/algorithms.yaml");
    InProcess::start(Settings::new(vec![matching, algorithms]))
}

fn serve_compat(file: &str) -> InProcess {
    InProcess::start(Settings::new(vec![compat(file)]))
}

/// One descriptor in domain `matching`; returns its status.
async fn one(client: &mut Client, entries: &[(&str, &str)]) -> DescriptorStatus {
    one_in(client, "matching", entries).await
}

async fn one_in(client: &mut Client, domain: &str, entries: &[(&str, &str)]) -> DescriptorStatus {
    let resp = should(client, request(domain, &[entries], 0)).await;
    resp.statuses.into_iter().next().unwrap()
}

#[track_caller]
fn assert_no_limit(status: &DescriptorStatus, what: &str) {
    assert_eq!(code(status), Code::Ok, "{what}: {status:?}");
    assert!(
        status.current_limit.is_none(),
        "{what}: expected no current_limit: {status:?}"
    );
}

#[track_caller]
fn assert_limit(status: &DescriptorStatus, rpu: u32, unit: Unit, what: &str) {
    assert_eq!(limit(status), Some((rpu, unit)), "{what}: {status:?}");
}

fn name(status: &DescriptorStatus) -> &str {
    status
        .current_limit
        .as_ref()
        .map(|l| l.name.as_str())
        .unwrap_or("<no current_limit>")
}

fn with_override(
    entries: &[(&str, &str)],
    rpu: u32,
    unit: RateLimitUnit,
    multiplier: Option<u32>,
) -> ratelimitd::proto::common::RateLimitDescriptor {
    let mut d = descriptor(entries);
    d.limit = Some(RateLimitOverride {
        requests_per_unit: rpu,
        unit: unit as i32,
        unit_multiplier: multiplier,
    });
    d
}

fn with_hits(
    entries: &[(&str, &str)],
    hits: u64,
) -> ratelimitd::proto::common::RateLimitDescriptor {
    let mut d = descriptor(entries);
    d.hits_addend = Some(hits);
    d
}

fn req(
    domain: &str,
    descriptors: Vec<ratelimitd::proto::common::RateLimitDescriptor>,
    hits_addend: u32,
) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_string(),
        descriptors,
        hits_addend,
    }
}

// ---------------------------------------------------------------------------------------------
// Matching
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn exact_value_beats_wildcards_beat_key_only() {
    let server = serve();
    let mut c = server.client().await;

    let s = one(&mut c, &[("user", "alice")]).await;
    assert_limit(&s, 1, Unit::Hour, "exact value");
    assert_eq!(name(&s), "exact");

    // Both `a*` and `al*` match `alfred`: the first wildcard in config order wins.
    let s = one(&mut c, &[("user", "alfred")]).await;
    assert_limit(&s, 2, Unit::Hour, "first wildcard in config order");
    assert_eq!(name(&s), "wildcard_a");

    let s = one(&mut c, &[("user", "anna")]).await;
    assert_eq!(name(&s), "wildcard_a", "{s:?}");

    // A wildcard is a prefix match: `xalice` is no `a*`.
    let s = one(&mut c, &[("user", "xalice")]).await;
    assert_limit(&s, 4, Unit::Hour, "key-only");
    assert_eq!(name(&s), "key_only");

    let s = one(&mut c, &[("user", "bob")]).await;
    assert_eq!(name(&s), "key_only", "{s:?}");

    // An empty value matches the key-only node.
    let s = one(&mut c, &[("user", "")]).await;
    assert_eq!(name(&s), "key_only", "{s:?}");

    // Other order in the config, other winner.
    let s = one(&mut c, &[("order", "alfred")]).await;
    assert_limit(&s, 3, Unit::Hour, "config order");
    assert_eq!(name(&s), "order_al");
    let s = one(&mut c, &[("order", "anna")]).await;
    assert_eq!(name(&s), "order_a", "{s:?}");

    // No node for the key at all.
    let s = one(&mut c, &[("nobody", "alice")]).await;
    assert_no_limit(&s, "unknown key");
}

#[tokio::test]
async fn exact_value_keeps_its_own_counter() {
    let server = serve();
    let mut c = server.client().await;
    // `user=alice` (1/hour) is exhausted; `user=alfred` (wildcard, 2/hour) is not affected.
    assert_eq!(code(&one(&mut c, &[("user", "alice")]).await), Code::Ok);
    assert_eq!(
        code(&one(&mut c, &[("user", "alice")]).await),
        Code::OverLimit
    );
    let s = one(&mut c, &[("user", "alfred")]).await;
    assert_eq!((code(&s), s.limit_remaining), (Code::Ok, 1), "{s:?}");
    // Each value matched by a wildcard has its own counter.
    let s = one(&mut c, &[("user", "anna")]).await;
    assert_eq!((code(&s), s.limit_remaining), (Code::Ok, 1), "{s:?}");
}

#[tokio::test]
async fn wildcard_node_leads_to_its_children() {
    let server = serve();
    let mut c = server.client().await;
    let s = one(&mut c, &[("host", "api.example.com"), ("method", "POST")]).await;
    assert_limit(&s, 11, Unit::Hour, "child of wildcard");
    assert_eq!(name(&s), "api_post");
    let s = one(&mut c, &[("host", "web.example.com"), ("method", "POST")]).await;
    assert_no_limit(&s, "wildcard does not match");
    let s = one(&mut c, &[("host", "api.example.com")]).await;
    assert_no_limit(&s, "walk ends on the wildcard node, which has no limit");
    let s = one(&mut c, &[("host", "api.example.com"), ("method", "GET")]).await;
    assert_no_limit(&s, "no child for the value");
}

#[tokio::test]
async fn limit_applies_only_when_the_walk_ends_at_the_last_entry() {
    let server = serve();
    let mut c = server.client().await;

    let s = one(&mut c, &[("tier", "gold"), ("path", "/a")]).await;
    assert_limit(&s, 5, Unit::Hour, "full depth");
    assert_eq!(s.limit_remaining, 4);

    let s = one(&mut c, &[("tier", "gold")]).await;
    assert_no_limit(&s, "shorter descriptor: ends on a node without limit");
    assert_eq!(s.limit_remaining, 0, "no limit: nothing remaining reported");

    let s = one(&mut c, &[("tier", "gold"), ("path", "/a"), ("extra", "1")]).await;
    assert_no_limit(&s, "longer descriptor than the tree");

    let s = one(&mut c, &[("tier", "gold"), ("other", "1")]).await;
    assert_no_limit(&s, "second entry has no node");

    let s = one(&mut c, &[("tier", "silver"), ("path", "/a")]).await;
    assert_no_limit(&s, "first entry has no node");

    let s = one(&mut c, &[("flat", "v")]).await;
    assert_limit(&s, 6, Unit::Hour, "flat");

    let s = one(&mut c, &[("flat", "v"), ("sub", "1")]).await;
    assert_no_limit(&s, "limit on the first level, descriptor goes deeper");

    // The limited node above was not charged by the longer descriptor.
    let s = one(&mut c, &[("flat", "v")]).await;
    assert_eq!(s.limit_remaining, 4, "{s:?}");

    // All of it in one request: statuses in request order.
    let resp = should(
        &mut c,
        request(
            "matching",
            &[
                &[("tier", "gold")],
                &[("tier", "gold"), ("path", "/b")],
                &[("flat", "w"), ("sub", "1")],
                &[("flat", "w")],
            ],
            0,
        ),
    )
    .await;
    assert_no_limit(&resp.statuses[0], "status 0");
    assert_limit(&resp.statuses[1], 5, Unit::Hour, "status 1");
    assert_no_limit(&resp.statuses[2], "status 2");
    assert_limit(&resp.statuses[3], 6, Unit::Hour, "status 3");
}

#[tokio::test]
async fn whitelisted_value_is_never_limited() {
    let server = serve();
    let mut c = server.client().await;
    for _ in 0..20 {
        let s = one(&mut c, &[("api_key", "internal")]).await;
        assert_no_limit(&s, "whitelisted value");
    }
    let s = one(&mut c, &[("api_key", "other")]).await;
    assert_limit(
        &s,
        7,
        Unit::Hour,
        "key-only sibling still applies to other values",
    );
}

#[tokio::test]
async fn unknown_domain_is_ok_without_limit() {
    let server = serve();
    let mut c = server.client().await;
    for _ in 0..5 {
        let resp = should(
            &mut c,
            request("no-such-domain", &[&[("user", "alice")], &[("x", "y")]], 0),
        )
        .await;
        assert_eq!(overall(&resp), Code::Ok);
        for s in &resp.statuses {
            assert_no_limit(s, "unknown domain");
        }
    }
}

#[tokio::test]
async fn unlimited_reports_max_remaining() {
    let server = serve();
    let mut c = server.client().await;
    for _ in 0..10 {
        let s = one(&mut c, &[("debug", "on")]).await;
        assert_eq!(code(&s), Code::Ok, "{s:?}");
        assert_eq!(s.limit_remaining, MAX, "{s:?}");
    }
    // Even with huge hits.
    let resp = should(
        &mut c,
        req("matching", vec![with_hits(&[("debug", "on")], u64::MAX)], 0),
    )
    .await;
    assert_eq!(overall(&resp), Code::Ok);
    assert_eq!(resp.statuses[0].limit_remaining, MAX);
}

#[tokio::test]
async fn replaces_ignores_the_replaced_limit() {
    let server = serve();
    let mut c = server.client().await;

    let resp = should(
        &mut c,
        request(
            "matching",
            &[&[("account", "a1")], &[("plan", "premium")]],
            0,
        ),
    )
    .await;
    assert_no_limit(&resp.statuses[0], "replaced by premium");
    assert_limit(&resp.statuses[1], 100, Unit::Hour, "premium");
    assert_eq!(name(&resp.statuses[1]), "premium");

    // Same in the other order.
    let resp = should(
        &mut c,
        request(
            "matching",
            &[&[("plan", "premium")], &[("account", "a1")]],
            0,
        ),
    )
    .await;
    assert_limit(&resp.statuses[0], 100, Unit::Hour, "premium");
    assert_no_limit(&resp.statuses[1], "replaced by premium");

    // The replaced limit is not charged: five requests pass although `standard` allows two.
    for i in 0..5 {
        let resp = should(
            &mut c,
            request(
                "matching",
                &[&[("account", "a2")], &[("plan", "premium")]],
                0,
            ),
        )
        .await;
        assert_eq!(overall(&resp), Code::Ok, "request {i}: {resp:?}");
    }
    let s = one(&mut c, &[("account", "a2")]).await;
    assert_limit(&s, 2, Unit::Hour, "standard alone");
    assert_eq!(name(&s), "standard");
    assert_eq!(s.limit_remaining, 1, "standard was never charged: {s:?}");

    // Without premium, standard limits.
    assert_eq!(code(&one(&mut c, &[("account", "a3")]).await), Code::Ok);
    assert_eq!(code(&one(&mut c, &[("account", "a3")]).await), Code::Ok);
    assert_eq!(
        code(&one(&mut c, &[("account", "a3")]).await),
        Code::OverLimit
    );
}

/// Shadow mode as envoyproxy/ratelimit does it (base_limiter.go: "If the limit is in ShadowMode,
/// it should be always return OK"): the limit is decided and counted, an over-limit decision shows
/// as `limit_remaining` 0 with the `current_limit`, but the status code stays OK and the request
/// is admitted, so the request's other descriptors are charged.
#[tokio::test]
async fn shadow_mode_counts_but_never_denies() {
    let server = serve();
    let mut c = server.client().await;
    let pair: &[&[(&str, &str)]] = &[&[("tenant", "t1")], &[("region", "r1")]];

    let resp = should(&mut c, request("matching", pair, 0)).await;
    assert_eq!(overall(&resp), Code::Ok);
    assert_eq!(code(&resp.statuses[0]), Code::Ok);
    assert_eq!(resp.statuses[0].limit_remaining, 0);
    assert_eq!(resp.statuses[1].limit_remaining, 9);

    for round in 0..3u32 {
        let resp = should(&mut c, request("matching", pair, 0)).await;
        assert_eq!(
            overall(&resp),
            Code::Ok,
            "shadow never denies (round {round}): {resp:?}"
        );
        assert_eq!(
            code(&resp.statuses[0]),
            Code::Ok,
            "a shadow status is OK, as in envoyproxy/ratelimit: {resp:?}"
        );
        assert_limit(&resp.statuses[0], 1, Unit::Hour, "shadow limit");
        assert_eq!(resp.statuses[0].limit_remaining, 0, "{resp:?}");
        assert_eq!(code(&resp.statuses[1]), Code::Ok);
        // The request was admitted, so the other descriptor was charged.
        assert_eq!(resp.statuses[1].limit_remaining, 8 - round, "{resp:?}");
    }

    // Alone.
    assert_eq!(code(&one(&mut c, &[("tenant", "t2")]).await), Code::Ok);
    let resp = should(&mut c, request("matching", &[&[("tenant", "t2")]], 0)).await;
    assert_eq!(overall(&resp), Code::Ok);
    assert_eq!(code(&resp.statuses[0]), Code::Ok);
    assert_eq!(resp.statuses[0].limit_remaining, 0);

    // Without shadow mode, the same shape denies: `region` alone, exhausted.
    let resp = should(&mut c, request("matching", &[&[("region", "r2")]], 10)).await;
    assert_eq!(overall(&resp), Code::Ok);
    let resp = should(
        &mut c,
        request("matching", &[&[("tenant", "t3")], &[("region", "r2")]], 0),
    )
    .await;
    assert_eq!(overall(&resp), Code::OverLimit, "{resp:?}");
    assert_eq!(code(&resp.statuses[1]), Code::OverLimit, "{resp:?}");
}

#[tokio::test]
async fn statuses_follow_request_order() {
    let server = serve();
    let mut c = server.client().await;
    let resp = should(
        &mut c,
        request(
            "matching",
            &[
                &[("user", "bob")],
                &[("debug", "1")],
                &[("nomatch", "z")],
                &[("flat", "v")],
                &[("api_key", "zz")],
                &[("user", "alice")],
                &[("window", "week")],
            ],
            0,
        ),
    )
    .await;
    assert_eq!(overall(&resp), Code::Ok);
    let s = &resp.statuses;
    assert_limit(&s[0], 4, Unit::Hour, "0");
    assert_eq!(s[1].limit_remaining, MAX, "1: {:?}", s[1]);
    assert_no_limit(&s[2], "2");
    assert_limit(&s[3], 6, Unit::Hour, "3");
    assert_limit(&s[4], 7, Unit::Hour, "4");
    assert_limit(&s[5], 1, Unit::Hour, "5");
    assert_limit(&s[6], 9, Unit::Week, "6");
    assert_eq!(
        s.iter().map(|s| s.limit_remaining).collect::<Vec<_>>(),
        vec![3, MAX, 0, 5, 6, 0, 8]
    );
}

#[tokio::test]
async fn current_limit_carries_name_unit_and_multiplier() {
    let server = serve();
    let mut c = server.client().await;
    wait_for_window_room(300, 5);

    let s = one(&mut c, &[("window", "five_minutes")]).await;
    let l = s.current_limit.clone().expect("current_limit");
    assert_eq!(l.requests_per_unit, 8);
    assert_eq!(l.unit, Unit::Minute as i32);
    assert_eq!(l.name, "five_minutes");
    assert_eq!(l.unit_multiplier, Some(5), "multiplier 5 is reported");
    assert_eq!(s.limit_remaining, 7);
    // Fixed window of 5 minutes aligned to the epoch.
    assert_secs(
        reset_secs(&s),
        to_window_end(300),
        2.0,
        "five-minute window",
    );

    let s = one(&mut c, &[("window", "one_minute")]).await;
    let l = s.current_limit.clone().expect("current_limit");
    assert_eq!(l.unit, Unit::Minute as i32);
    assert_eq!(l.unit_multiplier, None, "multiplier 1 is not reported");
    assert_eq!(l.name, "", "no name configured");

    let s = one(&mut c, &[("window", "week")]).await;
    assert_limit(&s, 9, Unit::Week, "week");
    assert_eq!(s.current_limit.as_ref().unwrap().unit_multiplier, None);
    assert_secs(
        reset_secs(&s),
        to_window_end(7 * 86_400),
        2.0,
        "week window aligned to the epoch",
    );
}

// ---------------------------------------------------------------------------------------------
// Hits
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn hits_default_to_one_then_request_then_descriptor() {
    let server = serve();
    let mut c = server.client().await;
    wait_for_window_room(3600, 10);

    // Default 1.
    let s = one(&mut c, &[("hits", "default")]).await;
    assert_eq!(s.limit_remaining, 9, "{s:?}");

    // Request hits_addend.
    let resp = should(&mut c, request("matching", &[&[("hits", "request")]], 3)).await;
    assert_eq!(resp.statuses[0].limit_remaining, 7);
    let resp = should(&mut c, request("matching", &[&[("hits", "request")]], 3)).await;
    assert_eq!(resp.statuses[0].limit_remaining, 4);

    // The descriptor's own hits_addend wins over the request's; others use the request's.
    let resp = should(
        &mut c,
        req(
            "matching",
            vec![
                with_hits(&[("hits", "descriptor")], 4),
                descriptor(&[("hits", "request_level")]),
            ],
            3,
        ),
    )
    .await;
    assert_eq!(resp.statuses[0].limit_remaining, 6, "{resp:?}");
    assert_eq!(resp.statuses[1].limit_remaining, 7, "{resp:?}");

    // Descriptor hits_addend 1 with a request hits_addend 5: 1.
    let resp = should(
        &mut c,
        req("matching", vec![with_hits(&[("hits", "one")], 1)], 5),
    )
    .await;
    assert_eq!(resp.statuses[0].limit_remaining, 9, "{resp:?}");
}

#[tokio::test]
async fn descriptor_hits_addend_zero_checks_without_consuming() {
    let server = serve();
    let mut c = server.client().await;
    wait_for_window_room(3600, 10);
    let key: &[(&str, &str)] = &[("hits", "check")];

    let resp = should(&mut c, request("matching", &[key], 3)).await;
    assert_eq!(resp.statuses[0].limit_remaining, 7);
    for _ in 0..3 {
        // hits_addend 0 on the descriptor, even with a request-level hits_addend.
        let resp = should(&mut c, req("matching", vec![with_hits(key, 0)], 5)).await;
        assert_eq!(overall(&resp), Code::Ok, "{resp:?}");
        assert_eq!(resp.statuses[0].limit_remaining, 7, "check only: {resp:?}");
        assert_limit(&resp.statuses[0], 10, Unit::Hour, "check only");
    }
    let s = one(&mut c, key).await;
    assert_eq!(s.limit_remaining, 6, "checks consumed nothing: {s:?}");

    // Exhaust, then check: c + 0 <= L admits, nothing remains.
    let resp = should(&mut c, req("matching", vec![with_hits(key, 6)], 0)).await;
    assert_eq!(
        (overall(&resp), resp.statuses[0].limit_remaining),
        (Code::Ok, 0)
    );
    let resp = should(&mut c, req("matching", vec![with_hits(key, 0)], 0)).await;
    assert_eq!(resp.statuses[0].limit_remaining, 0, "{resp:?}");
    assert_eq!(code(&one(&mut c, key).await), Code::OverLimit);
}

#[tokio::test]
async fn hits_beyond_capacity_are_denied_without_charge() {
    let server = serve();
    let mut c = server.client().await;
    wait_for_window_room(3600, 10);
    let key: &[(&str, &str)] = &[("hits", "huge")];

    for hits in [
        11,
        1_000,
        u64::from(u32::MAX),
        u64::from(u32::MAX) + 1,
        u64::MAX,
    ] {
        let resp = should(&mut c, req("matching", vec![with_hits(key, hits)], 0)).await;
        assert_eq!(overall(&resp), Code::OverLimit, "hits {hits}: {resp:?}");
        assert_eq!(code(&resp.statuses[0]), Code::OverLimit);
        assert_eq!(
            resp.statuses[0].limit_remaining, 10,
            "hits {hits}: {resp:?}"
        );
    }
    let resp = should(&mut c, request("matching", &[key], u32::MAX)).await;
    assert_eq!(overall(&resp), Code::OverLimit, "{resp:?}");

    // Denied requests charged nothing: the full capacity is still there.
    let resp = should(&mut c, req("matching", vec![with_hits(key, 10)], 0)).await;
    assert_eq!(
        (overall(&resp), resp.statuses[0].limit_remaining),
        (Code::Ok, 0),
        "{resp:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// All or nothing
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn denied_request_consumes_nothing_at_any_descriptor() {
    let server = serve();
    let mut c = server.client().await;
    wait_for_window_room(3600, 10);
    let pair: &[&[(&str, &str)]] = &[&[("small", "s")], &[("big", "b")]];

    for expect_big in [9, 8] {
        let resp = should(&mut c, request("matching", pair, 0)).await;
        assert_eq!(overall(&resp), Code::Ok);
        assert_eq!(resp.statuses[1].limit_remaining, expect_big);
    }
    for _ in 0..5 {
        let resp = should(&mut c, request("matching", pair, 0)).await;
        assert_eq!(overall(&resp), Code::OverLimit, "{resp:?}");
        assert_eq!(code(&resp.statuses[0]), Code::OverLimit, "{resp:?}");
        // The denying descriptor in second position too.
        let resp = should(
            &mut c,
            request("matching", &[&[("big", "b")], &[("small", "s")]], 0),
        )
        .await;
        assert_eq!(overall(&resp), Code::OverLimit, "{resp:?}");
        assert_eq!(code(&resp.statuses[1]), Code::OverLimit, "{resp:?}");
    }
    let s = one(&mut c, &[("big", "b")]).await;
    assert_eq!(
        s.limit_remaining, 7,
        "ten denied requests charged nothing at `big`: {s:?}"
    );

    // Denied by hits at the second descriptor: the first is not charged.
    let resp = should(
        &mut c,
        req(
            "matching",
            vec![
                with_hits(&[("small", "s2")], 1),
                with_hits(&[("big", "b2")], 11),
            ],
            0,
        ),
    )
    .await;
    assert_eq!(overall(&resp), Code::OverLimit);
    assert_eq!(code(&resp.statuses[1]), Code::OverLimit);
    let s = one(&mut c, &[("small", "s2")]).await;
    assert_eq!(s.limit_remaining, 1, "{s:?}");

    // Two descriptors of one request on the same counter count together.
    let resp = should(
        &mut c,
        request("matching", &[&[("small", "s3")], &[("small", "s3")]], 0),
    )
    .await;
    assert_eq!(overall(&resp), Code::Ok, "{resp:?}");
    assert_eq!(
        code(&one(&mut c, &[("small", "s3")]).await),
        Code::OverLimit
    );
    let resp = should(
        &mut c,
        request(
            "matching",
            &[&[("small", "s4")], &[("small", "s4")], &[("small", "s4")]],
            0,
        ),
    )
    .await;
    assert_eq!(overall(&resp), Code::OverLimit, "{resp:?}");
    let s = one(&mut c, &[("small", "s4")]).await;
    assert_eq!(
        (code(&s), s.limit_remaining),
        (Code::Ok, 1),
        "denied triple charged nothing: {s:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Request `limit` overrides
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn override_on_matched_descriptor_keeps_its_algorithm() {
    let server = serve();
    let mut c = server.client().await;
    let d = || with_override(&[("override", "o1")], 2, RateLimitUnit::Day, None);

    // gcra with 2 per day: T = 43 200 s.
    let resp = should(&mut c, req("matching", vec![d()], 0)).await;
    let s = &resp.statuses[0];
    assert_eq!(code(s), Code::Ok);
    assert_limit(s, 2, Unit::Day, "override");
    assert_eq!(s.limit_remaining, 1);
    assert_secs(reset_secs(s), 43_200.0, 3.0, "gcra T after one hit");

    let resp = should(&mut c, req("matching", vec![d()], 0)).await;
    let s = &resp.statuses[0];
    assert_eq!((code(s), s.limit_remaining), (Code::Ok, 0));
    assert_secs(reset_secs(s), 86_400.0, 3.0, "gcra 2T after two hits");

    let resp = should(&mut c, req("matching", vec![d()], 0)).await;
    let s = &resp.statuses[0];
    assert_eq!(code(s), Code::OverLimit);
    assert_secs(reset_secs(s), 43_200.0, 3.0, "gcra: next admission after T");
}

#[tokio::test]
async fn override_on_unmatched_descriptor_is_a_fixed_window() {
    let server = serve();
    let mut c = server.client().await;
    wait_for_window_room(120, 10);
    let d = || with_override(&[("nomatch", "z")], 3, RateLimitUnit::Minute, Some(2));
    for expected in [2, 1, 0] {
        let resp = should(&mut c, req("matching", vec![d()], 0)).await;
        let s = &resp.statuses[0];
        assert_eq!(code(s), Code::Ok, "{s:?}");
        assert_eq!(s.limit_remaining, expected);
        let l = s.current_limit.as_ref().expect("current_limit");
        assert_eq!(
            (l.requests_per_unit, l.unit, l.unit_multiplier),
            (3, Unit::Minute as i32, Some(2))
        );
        assert_secs(reset_secs(s), to_window_end(120), 2.0, "2-minute window");
    }
    let resp = should(&mut c, req("matching", vec![d()], 0)).await;
    assert_eq!(overall(&resp), Code::OverLimit, "{resp:?}");
    assert_secs(
        reset_secs(&resp.statuses[0]),
        to_window_end(120),
        2.0,
        "denied: window end",
    );

    // The same descriptor without override has no limit.
    let s = one(&mut c, &[("nomatch", "z")]).await;
    assert_no_limit(&s, "no override");

    // Override on a whitelisted value limits too.
    let resp = should(
        &mut c,
        req(
            "matching",
            vec![with_override(
                &[("api_key", "internal")],
                1,
                RateLimitUnit::Hour,
                None,
            )],
            0,
        ),
    )
    .await;
    assert_limit(&resp.statuses[0], 1, Unit::Hour, "override on whitelisted");
}

#[tokio::test]
async fn override_on_unknown_domain_has_no_limit() {
    let server = serve();
    let mut c = server.client().await;
    for _ in 0..3 {
        let resp = should(
            &mut c,
            req(
                "no-such-domain",
                vec![with_override(&[("k", "v")], 1, RateLimitUnit::Hour, None)],
                0,
            ),
        )
        .await;
        assert_eq!(overall(&resp), Code::Ok);
        assert_no_limit(&resp.statuses[0], "unknown domain");
    }
}

// ---------------------------------------------------------------------------------------------
// Algorithms through configuration, with DESIGN's remaining and duration_until_reset
// ---------------------------------------------------------------------------------------------

/// Sends `n` single-descriptor requests and returns their statuses.
async fn run(c: &mut Client, key: &str, value: &str, n: usize) -> Vec<DescriptorStatus> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(one_in(c, "algorithms", &[(key, value)]).await);
    }
    out
}

fn codes(statuses: &[DescriptorStatus]) -> Vec<Code> {
    statuses.iter().map(code).collect()
}

fn remaining(statuses: &[DescriptorStatus]) -> Vec<u32> {
    statuses.iter().map(|s| s.limit_remaining).collect()
}

const OK3_DENY: [Code; 4] = [Code::Ok, Code::Ok, Code::Ok, Code::OverLimit];

#[tokio::test]
async fn fixed_window_is_the_default_and_resets_at_window_end() {
    let server = serve();
    let mut c = server.client().await;
    wait_for_window_room(3600, 10);
    for key in ["default", "fixed_window"] {
        let s = run(&mut c, key, "x", 4).await;
        assert_eq!(codes(&s), OK3_DENY, "{key}");
        assert_eq!(remaining(&s), [2, 1, 0, 0], "{key}");
        for (i, st) in s.iter().enumerate() {
            assert_limit(st, 3, Unit::Hour, key);
            assert_secs(
                reset_secs(st),
                to_window_end(3600),
                2.0,
                &format!("{key} #{i}"),
            );
        }
    }
}

#[tokio::test]
async fn sliding_window_log_resets_when_entries_leave() {
    let server = serve();
    let mut c = server.client().await;
    let s = run(&mut c, "sliding_window_log", "x", 4).await;
    assert_eq!(codes(&s), OK3_DENY);
    assert_eq!(remaining(&s), [2, 1, 0, 0]);
    // OK: the oldest entry leaves one window after it came; denied: the same, since one hit
    // must leave for one more to enter.
    for (i, st) in s.iter().enumerate() {
        assert_secs(
            reset_secs(st),
            3600.0,
            3.0,
            &format!("sliding_window_log #{i}"),
        );
    }
}

#[tokio::test]
async fn sliding_window_counter_resets_at_window_end_and_waits_when_denied() {
    let server = serve();
    let mut c = server.client().await;
    wait_for_window_room(3600, 10);
    let s = run(&mut c, "sliding_window_counter", "x", 4).await;
    assert_eq!(codes(&s), OK3_DENY);
    assert_eq!(remaining(&s), [2, 1, 0, 0]);
    for (i, st) in s[..3].iter().enumerate() {
        assert_secs(
            reset_secs(st),
            to_window_end(3600),
            2.0,
            &format!("OK #{i}"),
        );
    }
    // Denied with p = 0, c = 3: in the next window est = 3·(1 − e/W) ≤ 2 once e ≥ W/3.
    assert_secs(
        reset_secs(&s[3]),
        to_window_end(3600) + 1200.0,
        2.0,
        "denied: next window + W/3",
    );
}

#[tokio::test]
async fn token_bucket_refills_continuously() {
    let server = serve();
    let mut c = server.client().await;
    let s = run(&mut c, "token_bucket", "x", 4).await;
    assert_eq!(codes(&s), OK3_DENY);
    assert_eq!(remaining(&s), [2, 1, 0, 0]);
    // One token per 1200 s: until full after 1, 2, 3 taken; denied: until one token.
    for (st, expected) in s.iter().zip([1200.0, 2400.0, 3600.0, 1200.0]) {
        assert_secs(reset_secs(st), expected, 3.0, "token_bucket");
    }
}

#[tokio::test]
async fn gcra_spaces_requests_by_emission_interval() {
    let server = serve();
    let mut c = server.client().await;
    let s = run(&mut c, "gcra", "x", 4).await;
    assert_eq!(codes(&s), OK3_DENY);
    assert_eq!(remaining(&s), [2, 1, 0, 0]);
    for (st, expected) in s.iter().zip([1200.0, 2400.0, 3600.0, 1200.0]) {
        assert_secs(reset_secs(st), expected, 3.0, "gcra");
    }
}

#[tokio::test]
async fn token_bucket_and_gcra_admit_exactly_burst_from_idle() {
    let server = serve();
    let mut c = server.client().await;
    for key in ["token_bucket_burst", "gcra_burst"] {
        let s = run(&mut c, key, "x", 7).await;
        assert_eq!(
            codes(&s),
            [
                Code::Ok,
                Code::Ok,
                Code::Ok,
                Code::Ok,
                Code::Ok,
                Code::OverLimit,
                Code::OverLimit
            ],
            "{key}: burst 5 at 1 per hour"
        );
        assert_eq!(remaining(&s), [4, 3, 2, 1, 0, 0, 0], "{key}");
        for (i, st) in s[..5].iter().enumerate() {
            assert_limit(st, 1, Unit::Hour, key);
            assert_secs(
                reset_secs(st),
                3600.0 * (i as f64 + 1.0),
                3.0,
                &format!("{key}: until full after {} hits", i + 1),
            );
        }
        assert_secs(reset_secs(&s[5]), 3600.0, 3.0, &format!("{key}: denied"));
    }
}

#[tokio::test]
async fn every_algorithm_keeps_separate_counters_per_value() {
    let server = serve();
    let mut c = server.client().await;
    for key in [
        "fixed_window",
        "sliding_window_log",
        "sliding_window_counter",
        "token_bucket",
        "gcra",
    ] {
        wait_for_window_room(3600, 5);
        let a = run(&mut c, key, "a", 4).await;
        assert_eq!(codes(&a), OK3_DENY, "{key}");
        let b = run(&mut c, key, "b", 1).await;
        assert_eq!(
            (code(&b[0]), b[0].limit_remaining),
            (Code::Ok, 2),
            "{key}: b is independent of a"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Configuration loading
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn config_directory_loads_every_domain() {
    let dir = path(fixture("serve"));
    let server = Ratelimitd::start(&["--config", &dir]);
    let mut c = server.client().await;
    let s = one_in(&mut c, "matching", &[("user", "alice")]).await;
    assert_limit(&s, 1, Unit::Hour, "matching");
    let s = one_in(&mut c, "algorithms", &[("gcra", "x")]).await;
    assert_limit(&s, 3, Unit::Hour, "algorithms");
    let s = one_in(&mut c, "concurrency", &[("gcra", "x")]).await;
    assert_limit(&s, 50, Unit::Hour, "concurrency");
}

// ---------------------------------------------------------------------------------------------
// Files in envoyproxy/ratelimit's schema (tests/fixtures/compat/valid/), served as they are
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn compat_nested_limits_give_envoyproxy_limits() {
    let server = serve_compat("valid/nested_limits.yaml");
    let mut c = server.client().await;
    let d = "storefront";

    let s = one_in(&mut c, d, &[("region", "eu"), ("shop", "x")]).await;
    assert_limit(&s, 8, Unit::Second, "region=eu,shop=x");
    assert_eq!(s.limit_remaining, 7);
    let s = one_in(&mut c, d, &[("region", "eu"), ("shop", "flagship")]).await;
    assert_limit(&s, 12, Unit::Second, "region=eu,shop=flagship");
    assert_eq!(s.limit_remaining, 11);
    let s = one_in(&mut c, d, &[("region", "eu")]).await;
    assert_no_limit(&s, "region=eu has no limit of its own");
    let s = one_in(&mut c, d, &[("region", "us"), ("shop", "x")]).await;
    assert_no_limit(&s, "region=us");

    let s = one_in(&mut c, d, &[("client", "anything")]).await;
    assert_limit(&s, 40, Unit::Minute, "client default");
    let s = one_in(&mut c, d, &[("client", "partner")]).await;
    assert_limit(&s, 90, Unit::Minute, "client=partner");
    for _ in 0..3 {
        let s = one_in(&mut c, d, &[("client", "monitoring")]).await;
        assert_no_limit(&s, "client=monitoring is whitelisted");
    }

    for i in 0..2 {
        let s = one_in(&mut c, d, &[("login", "x")]).await;
        assert_limit(&s, 2, Unit::Hour, "login");
        assert_eq!(code(&s), Code::Ok, "login #{i}");
    }
    let s = one_in(&mut c, d, &[("login", "x")]).await;
    assert_eq!(code(&s), Code::OverLimit, "login is 2 per hour");

    let s = one_in(&mut c, d, &[("export", "x")]).await;
    assert_limit(&s, 3, Unit::Day, "export");
    assert_eq!(name(&s), "nightly_export");

    let s = one_in(&mut c, d, &[("coupon", "spring")]).await;
    assert_limit(&s, 40, Unit::Day, "coupon=spring");
    let s = one_in(&mut c, d, &[("coupon", "spring"), ("customer", "vip")]).await;
    assert_limit(&s, 60, Unit::Day, "coupon=spring,customer=vip");
    let s = one_in(&mut c, d, &[("coupon", "other")]).await;
    assert_no_limit(&s, "coupon=other");

    for _ in 0..3 {
        let s = one_in(&mut c, d, &[("healthcheck", "x")]).await;
        assert_eq!(
            (code(&s), s.limit_remaining),
            (Code::Ok, MAX),
            "healthcheck unlimited"
        );
    }

    let s = one_in(&mut c, d, &[("search", "x")]).await;
    assert_limit(&s, 45, Unit::Minute, "search (detailed_metric)");
}

#[tokio::test]
async fn compat_wildcards_match_stars_anywhere() {
    let server = serve_compat("valid/wildcards.yaml");
    let mut c = server.client().await;
    let d = "assets";
    let limited = [
        (&[("object", "img_logo")][..], 30, "trailing *"),
        (
            &[("object", "img")],
            30,
            "trailing * matches the prefix alone",
        ),
        (&[("plain", "img")], 32, "exact"),
        (&[("anyvalue", "anything")], 34, "key only"),
        (&[("infix", "img_v2")], 36, "* in the middle"),
        (&[("multi", "a1b2c")], 38, "several *"),
        (&[("host", "img.cdn.example")], 42, "leading *"),
        (
            &[("host", "edge.cdn.example")],
            44,
            "exact beats a matching wildcard",
        ),
        (
            &[("tenant", "acme"), ("object", "thumb_small")],
            40,
            "nested wildcard",
        ),
    ];
    for (entries, rpu, what) in limited {
        let s = one_in(&mut c, d, entries).await;
        assert_limit(&s, rpu, Unit::Minute, what);
    }
    let unlimited = [
        (&[("object", "im")][..], "object=im"),
        (&[("plain", "img1")], "plain=img1: no wildcard"),
        (&[("infix", "img_v2_beta")], "infix: v2 must end the value"),
        (&[("multi", "acb")], "multi: pieces in order"),
        (
            &[("host", "cdn.example")],
            "host: the dot belongs to the suffix",
        ),
        (
            &[("tenant", "acme"), ("object", "img")],
            "nested: img is no thumb*small",
        ),
    ];
    for (entries, what) in unlimited {
        let s = one_in(&mut c, d, entries).await;
        assert_no_limit(&s, what);
    }
}

#[tokio::test]
async fn compat_replaces_and_shadow() {
    let server = serve_compat("valid/replaces_and_shadow.yaml");
    let mut c = server.client().await;
    wait_for_window_room(60, 10);
    let d = "gateway";

    let s = one_in(&mut c, d, &[("client", "c1"), ("user", "guest")]).await;
    assert_limit(&s, 2, Unit::Minute, "user=guest alone");
    assert_eq!(name(&s), "guest");

    let resp = should(
        &mut c,
        request(
            d,
            &[
                &[("client", "c2"), ("user", "guest")],
                &[("auth", "signed_in")],
            ],
            0,
        ),
    )
    .await;
    assert_no_limit(&resp.statuses[0], "guest replaced by auth=signed_in");
    assert_limit(&resp.statuses[1], 6, Unit::Minute, "auth=signed_in");

    // requests_per_unit 0: always over the limit, unless replaced.
    let s = one_in(&mut c, d, &[("client", "c3"), ("user", "mallory")]).await;
    assert_eq!(code(&s), Code::OverLimit, "requests_per_unit 0: {s:?}");
    assert_limit(&s, 0, Unit::Minute, "mallory");
    let resp = should(
        &mut c,
        request(
            d,
            &[
                &[("client", "c3"), ("user", "mallory")],
                &[("upstream", "mesh"), ("route", "unblock")],
            ],
            0,
        ),
    )
    .await;
    assert_eq!(overall(&resp), Code::Ok, "blocked replaced: {resp:?}");
    assert_no_limit(&resp.statuses[0], "mallory replaced");
    assert_limit(&resp.statuses[1], 4, Unit::Minute, "unblock");

    // Shadow mode on client,probe=trial (4/minute): the 5th is over the limit but admitted (OK).
    for i in 0..5 {
        let resp = should(
            &mut c,
            request(d, &[&[("client", "c4"), ("probe", "trial")]], 0),
        )
        .await;
        assert_eq!(overall(&resp), Code::Ok, "shadow #{i}");
        assert_eq!(code(&resp.statuses[0]), Code::Ok, "shadow #{i}");
        assert_limit(&resp.statuses[0], 4, Unit::Minute, "trial");
        let expected = [3, 2, 1, 0, 0][i];
        assert_eq!(resp.statuses[0].limit_remaining, expected, "shadow #{i}");
    }
    // Same shape without shadow mode denies.
    for i in 0..5 {
        let resp = should(
            &mut c,
            request(d, &[&[("client", "c4"), ("probe", "enforced")]], 0),
        )
        .await;
        let expected = if i < 4 { Code::Ok } else { Code::OverLimit };
        assert_eq!(overall(&resp), expected, "enforced #{i}");
    }

    let s = one_in(&mut c, d, &[("client", "c5"), ("internal", "x")]).await;
    assert_eq!(s.limit_remaining, MAX, "internal unlimited");
    let s = one_in(&mut c, d, &[("client", "c5")]).await;
    assert_limit(&s, 3, Unit::Minute, "client alone");
    let s = one_in(&mut c, d, &[("client", "c5"), ("user", "anything")]).await;
    assert_limit(&s, 5, Unit::Minute, "client,user key-only");
    let s = one_in(&mut c, d, &[("tenant", "t1")]).await;
    assert_limit(&s, 2, Unit::Minute, "quota_mode parses");
}

#[tokio::test]
async fn compat_shadow_mode() {
    let server = serve_compat("valid/shadow_mode.yaml");
    let mut c = server.client().await;
    wait_for_window_room(60, 10);
    let d = "dryrun";
    for i in 0..16 {
        let resp = should(&mut c, request(d, &[&[("endpoint", "x")]], 0)).await;
        assert_eq!(overall(&resp), Code::Ok, "endpoint is shadow mode (#{i})");
        assert_eq!(code(&resp.statuses[0]), Code::Ok, "#{i}");
        let expected = 14u32.saturating_sub(i);
        assert_eq!(resp.statuses[0].limit_remaining, expected, "#{i}");
    }
    // endpoint=upload is not in shadow mode: 25 per minute, with hits 26 denied.
    let resp = should(&mut c, request(d, &[&[("endpoint", "upload")]], 26)).await;
    assert_eq!(overall(&resp), Code::OverLimit);
}

#[tokio::test]
async fn compat_two_values() {
    let server = serve_compat("valid/two_values.yaml");
    let mut c = server.client().await;
    let s = one_in(&mut c, "sql_qps", &[("table", "orders")]).await;
    assert_limit(&s, 250, Unit::Second, "table=orders");
    let s = one_in(&mut c, "sql_qps", &[("table", "invoices")]).await;
    assert_limit(&s, 250, Unit::Second, "table=invoices");
    let s = one_in(&mut c, "sql_qps", &[("table", "other")]).await;
    assert_no_limit(&s, "table=other");
}

// ---------------------------------------------------------------------------------------------
// envoyproxy/ratelimit's share_threshold, quota_mode, global modes, dynamic metadata, merging
// ---------------------------------------------------------------------------------------------

/// A `google.protobuf.Struct` as JSON, to compare whole dynamic metadata at once.
fn json(s: &prost_types::Struct) -> serde_json::Value {
    use prost_types::value::Kind;
    fn value(v: &prost_types::Value) -> serde_json::Value {
        match &v.kind {
            None | Some(Kind::NullValue(_)) => serde_json::Value::Null,
            Some(Kind::BoolValue(b)) => serde_json::json!(b),
            Some(Kind::NumberValue(n)) => serde_json::json!(n),
            Some(Kind::StringValue(s)) => serde_json::json!(s),
            Some(Kind::ListValue(l)) => l.values.iter().map(value).collect(),
            Some(Kind::StructValue(s)) => json(s),
        }
    }
    s.fields
        .iter()
        .map(|(k, v)| (k.clone(), value(v)))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

fn metadata_of(resp: &ratelimitd::proto::rls::RateLimitResponse) -> serde_json::Value {
    json(
        resp.dynamic_metadata
            .as_ref()
            .unwrap_or_else(|| panic!("no dynamic_metadata: {resp:?}")),
    )
}

#[tokio::test]
async fn share_threshold_wildcards_share_one_counter() {
    let server = serve_compat("later/share_threshold.yaml");
    let mut c = server.client().await;
    let d = "uploads";
    // logs-* (3 per hour) is shared: three different values use it up.
    for (value, remaining) in [("logs-a", 2), ("logs-b", 1), ("logs-zz", 0)] {
        let s = one_in(&mut c, d, &[("bucket", value)]).await;
        assert_eq!(
            (code(&s), s.limit_remaining),
            (Code::Ok, remaining),
            "{value}"
        );
    }
    let s = one_in(&mut c, d, &[("bucket", "logs-new")]).await;
    assert_eq!(
        code(&s),
        Code::OverLimit,
        "a fourth value shares the spent counter"
    );
    // The exact value logs-audit keeps its own counter.
    let s = one_in(&mut c, d, &[("bucket", "logs-audit")]).await;
    assert_eq!((code(&s), s.limit_remaining), (Code::Ok, 1), "logs-audit");

    // tmp-* (2 per hour) is not shared: each value has its own counter.
    for _ in 0..2 {
        let s = one_in(&mut c, d, &[("bucket", "tmp-a")]).await;
        assert_eq!(code(&s), Code::Ok);
    }
    let s = one_in(&mut c, d, &[("bucket", "tmp-a")]).await;
    assert_eq!(code(&s), Code::OverLimit, "tmp-a spent");
    let s = one_in(&mut c, d, &[("bucket", "tmp-b")]).await;
    assert_eq!(
        (code(&s), s.limit_remaining),
        (Code::Ok, 1),
        "tmp-b is its own"
    );

    // One level down, and with a `*` in the middle of the value.
    let alpha = |bucket: &'static str| [("project", "alpha"), ("bucket", bucket)];
    let resp = should(&mut c, request(d, &[&alpha("cache-1")], 3)).await;
    assert_eq!(resp.statuses[0].limit_remaining, 1);
    let s = one_in(&mut c, d, &alpha("cache-2")).await;
    assert_eq!(
        (code(&s), s.limit_remaining),
        (Code::Ok, 0),
        "cache-* shared"
    );
    let resp = should(&mut c, request(d, &[&[("archive", "2030-full")]], 5)).await;
    assert_eq!(overall(&resp), Code::Ok);
    let s = one_in(&mut c, d, &[("archive", "2031-full")]).await;
    assert_eq!(code(&s), Code::OverLimit, "20*-full shared");

    // Shared at both levels: other regions and other buckets, still one counter.
    let s = one_in(&mut c, d, &[("region", "eu-west"), ("bucket", "a-raw")]).await;
    assert_eq!(s.limit_remaining, 1);
    let s = one_in(&mut c, d, &[("region", "eu-north"), ("bucket", "b-raw")]).await;
    assert_eq!((code(&s), s.limit_remaining), (Code::Ok, 0));
    let s = one_in(&mut c, d, &[("region", "eu-south"), ("bucket", "c-raw")]).await;
    assert_eq!(code(&s), Code::OverLimit, "both entries shared");
}

#[tokio::test]
async fn quota_mode_reports_violations_instead_of_denying() {
    let file = path(compat("later/quota_mode.yaml"));
    let server = Ratelimitd::start(&["--config", &file, "--response-dynamic-metadata"]);
    let mut c = server.client().await;
    let d = "billing";
    let both: [&[(&str, &str)]; 2] = [&[("plan", "free")], &[("plan", "paid")]];

    let resp = should(&mut c, request(d, &both, 0)).await;
    assert_eq!(overall(&resp), Code::Ok);
    assert_eq!(
        metadata_of(&resp),
        serde_json::json!({
            "domain": "billing",
            "descriptors": [{"entries": ["plan=free"]}, {"entries": ["plan=paid"]}],
            "quotaModeEnabled": true,
            // Both admitted: merged in request order, the first value of a key wins.
            "metadata": {"quota": {"tier": "free", "burst": true}, "owner": "sales"},
        })
    );

    // plan=free is at 1 of 2 and paid too; two more hits of free go over its quota.
    let resp = should(&mut c, request(d, &[&[("plan", "free")]], 2)).await;
    assert_eq!(
        overall(&resp),
        Code::Ok,
        "quota mode never denies: {resp:?}"
    );
    assert_eq!(code(&resp.statuses[0]), Code::Ok);
    assert_eq!(resp.statuses[0].limit_remaining, 0);
    assert_limit(&resp.statuses[0], 2, Unit::Hour, "plan=free");
    let m = metadata_of(&resp);
    assert_eq!(m["quotaModeViolations"], serde_json::json!([0.0]), "{m}");
    assert_eq!(m["hitsAddend"], serde_json::json!(2.0), "{m}");
    assert!(
        m.get("metadata").is_none(),
        "a violation brings no metadata: {m}"
    );

    // The request over the quota was not counted (it consumed nothing), so both fit once more.
    let resp = should(&mut c, request(d, &both, 0)).await;
    assert_eq!(overall(&resp), Code::Ok, "{resp:?}");
    assert!(metadata_of(&resp).get("quotaModeViolations").is_none());
    // Both spent: the quota violation is reported, the enforced limit decides.
    let resp = should(&mut c, request(d, &both, 0)).await;
    assert_eq!(
        overall(&resp),
        Code::OverLimit,
        "plan=paid is enforced: {resp:?}"
    );
    assert_eq!(code(&resp.statuses[0]), Code::Ok);
    assert_eq!(code(&resp.statuses[1]), Code::OverLimit);
    let m = metadata_of(&resp);
    assert_eq!(m["quotaModeViolations"], serde_json::json!([0.0]), "{m}");
    assert!(
        m.get("metadata").is_none(),
        "nothing admitted, no metadata: {m}"
    );
    let resp = should(&mut c, request(d, &[&[("plan", "free")]], 0)).await;
    assert_eq!(overall(&resp), Code::Ok, "{resp:?}");

    // Shadow and quota mode at once: a shadow limit, never a quota violation.
    for _ in 0..2 {
        let resp = should(&mut c, request(d, &[&[("trial", "t")]], 0)).await;
        assert_eq!(overall(&resp), Code::Ok);
        let m = metadata_of(&resp);
        assert!(m.get("quotaModeViolations").is_none(), "{m}");
        assert_eq!(m["quotaModeEnabled"], serde_json::json!(true));
    }
}

#[tokio::test]
async fn dynamic_metadata_is_only_sent_when_asked_for() {
    let file = path(compat("later/metadata.yaml"));
    let server = Ratelimitd::start(&["--config", &file]);
    let mut c = server.client().await;
    let resp = should(&mut c, request("catalog", &[&[("listing", "x")]], 0)).await;
    assert_eq!(resp.dynamic_metadata, None);

    let server = Ratelimitd::start_with_env(
        &["--config", &file],
        &[("RATELIMITD_RESPONSE_DYNAMIC_METADATA", "true")],
    );
    let mut c = server.client().await;
    let mut over = with_override(
        &[("brand", "acme"), ("sku", "1")],
        9,
        RateLimitUnit::Minute,
        None,
    );
    over.hits_addend = Some(1);
    let req = req(
        "catalog",
        vec![
            descriptor(&[("listing", "x")]),
            descriptor(&[("brand", "acme"), ("sku", "1")]),
            over,
        ],
        0,
    );
    let resp = should(&mut c, req.clone()).await;
    assert_eq!(
        metadata_of(&resp),
        serde_json::json!({
            "domain": "catalog",
            "descriptors": [
                {"entries": ["listing=x"]},
                {"entries": ["brand=acme", "sku=1"]},
                {
                    "entries": ["brand=acme", "sku=1"],
                    "limit": "requests_per_unit:9 unit:MINUTE",
                    "hitsAddend": 1.0,
                },
            ],
            "quotaModeEnabled": false,
            "metadata": {
                "quota": {"tier": "bronze", "region": "eu"},
                "weight": 2.5,
                "tags": ["new", "featured"],
                "owner": "merchandising",
            },
        })
    );
    // listing (1 per hour) is now over the limit: only the sku's metadata comes back.
    let resp = should(&mut c, req).await;
    assert_eq!(overall(&resp), Code::OverLimit);
    assert_eq!(
        metadata_of(&resp)["metadata"],
        serde_json::json!({"owner": "merchandising", "quota": {"tier": "gold"}})
    );
}

#[tokio::test]
async fn global_shadow_mode_answers_ok_and_keeps_each_status() {
    let matching = path(fixture("serve/matching.yaml"));
    for server in [
        Ratelimitd::start(&["--config", &matching, "--shadow-mode"]),
        Ratelimitd::start_with_env(
            &["--config", &matching],
            &[("RATELIMITD_SHADOW_MODE", "true")],
        ),
    ] {
        let mut c = server.client().await;
        // user=alice: 1 per hour; flat: 6 per hour.
        let both: [&[(&str, &str)]; 2] = [&[("user", "alice")], &[("flat", "f")]];
        let resp = should(&mut c, request("matching", &both, 0)).await;
        assert_eq!(overall(&resp), Code::Ok);
        let resp = should(&mut c, request("matching", &both, 0)).await;
        assert_eq!(overall(&resp), Code::Ok, "global shadow mode: {resp:?}");
        assert_eq!(
            code(&resp.statuses[0]),
            Code::OverLimit,
            "the status still tells"
        );
        assert_eq!(code(&resp.statuses[1]), Code::Ok);
        assert_eq!(
            resp.statuses[1].limit_remaining, 4,
            "nothing vetoes: the admitted descriptor is counted"
        );
    }
}

#[tokio::test]
async fn global_quota_mode_puts_every_limit_in_quota_mode() {
    let matching = path(fixture("serve/matching.yaml"));
    let server = Ratelimitd::start_with_env(
        &["--config", &matching, "--quota-mode"],
        &[("RATELIMITD_RESPONSE_DYNAMIC_METADATA", "true")],
    );
    let mut c = server.client().await;
    let over = with_override(&[("nothing", "x")], 1, RateLimitUnit::Hour, None);
    let req = req("matching", vec![descriptor(&[("user", "alice")]), over], 0);
    let resp = should(&mut c, req.clone()).await;
    assert!(metadata_of(&resp).get("quotaModeViolations").is_none());
    let resp = should(&mut c, req).await;
    assert_eq!(overall(&resp), Code::Ok, "{resp:?}");
    assert!(resp.statuses.iter().all(|s| code(s) == Code::Ok));
    let m = metadata_of(&resp);
    assert_eq!(m["quotaModeEnabled"], serde_json::json!(true));
    assert_eq!(
        m["quotaModeViolations"],
        serde_json::json!([0.0, 1.0]),
        "{m}"
    );
}

#[tokio::test]
async fn merge_domain_config_merges_one_domain_across_files() {
    let later = path(compat("later"));
    let (status, out, err) = run_to_end(
        {
            let mut cmd = command();
            cmd.args([
                "serve",
                "--grpc-addr",
                "127.0.0.1:0",
                "--http-addr",
                "127.0.0.1:0",
            ])
            .args(["--config", &later]);
            cmd
        },
        std::time::Duration::from_secs(30),
    );
    let output = format!("{out}{err}");
    assert!(!status.success(), "same domain in three files: {output}");
    assert!(
        output.contains("merge_part_one.yaml:4:")
            && output.contains("domain_without_descriptors.yaml:3"),
        "names both files: {output}"
    );

    let server = Ratelimitd::start(&["--config", &later, "--merge-domain-config"]);
    let mut c = server.client().await;
    let s = one_in(&mut c, "warehouse", &[("dock", "north")]).await;
    assert_limit(&s, 14, Unit::Minute, "dock=north from merge_part_one.yaml");
    let s = one_in(&mut c, "warehouse", &[("dock", "south")]).await;
    assert_limit(&s, 16, Unit::Minute, "dock=south from merge_part_two.yaml");
    let s = one_in(&mut c, "warehouse", &[("gate", "g12")]).await;
    assert_limit(
        &s,
        18,
        Unit::Minute,
        "g* of the first file before g1* of the second",
    );
    let s = one_in(&mut c, "uploads", &[("bucket", "tmp-x")]).await;
    assert_limit(&s, 2, Unit::Hour, "the directory's other domains load too");

    let clash = path(compat("merge_clash"));
    let mut cmd = command();
    cmd.args(["check", "--config", &clash])
        .env("RATELIMITD_MERGE_DOMAIN_CONFIG", "true");
    let (status, _, err) = run_to_end(cmd, std::time::Duration::from_secs(30));
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        err.contains("two.yaml:4:") && err.contains("one.yaml:10"),
        "names both files and lines: {err}"
    );
}
