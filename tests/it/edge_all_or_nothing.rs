//! All or nothing through the whole request path (proto request -> plan -> store -> response),
//! on both stores: a denied request consumes nothing at any descriptor, including when what
//! denies it never reaches the store (`requests_per_unit: 0`, a ban).
//!
//! The fuzz target `rls_request` found the ban case: a request carrying a ban and a shadow check
//! was answered OVER_LIMIT twice in a row with different statuses, because the store, which sees
//! only the counted checks, committed them.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use arc_swap::ArcSwap;
use ratelimitd::config::parse_domain;
use ratelimitd::limiter::{Clock, ManualClock, Rules};
use ratelimitd::proto::common::{rate_limit_descriptor, RateLimitDescriptor};
use ratelimitd::proto::rls::rate_limit_response::Code;
use ratelimitd::proto::rls::{RateLimitRequest, RateLimitResponse};
use ratelimitd::service::RateLimitEdge;
use ratelimitd::store::redis::RedisSettings;
use ratelimitd::store::{MemoryStore, RedisStore, Store};
use testkit::redis_server::RedisServer;

const T0: u64 = 1_700_000_040_000_000;

const CONFIG: &str = "
domain: d
descriptors:
  - key: fw
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: log
    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: sliding_window_log}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1, algorithm: gcra}
  - key: ban
    rate_limit: {unit: second, requests_per_unit: 0}
";

fn rules() -> Arc<ArcSwap<Rules>> {
    let domain = parse_domain(Path::new("d.yaml"), CONFIG).expect("valid config");
    Arc::new(ArcSwap::from_pointee(Rules {
        domains: HashMap::from([(domain.domain.clone(), domain)]),
    }))
}

fn request(descriptors: &[(&str, &str)]) -> RateLimitRequest {
    RateLimitRequest {
        domain: "d".into(),
        descriptors: descriptors
            .iter()
            .map(|(key, value)| RateLimitDescriptor {
                entries: vec![rate_limit_descriptor::Entry {
                    key: key.to_string(),
                    value: value.to_string(),
                }],
                ..RateLimitDescriptor::default()
            })
            .collect(),
        hits_addend: 0,
    }
}

async fn decide<S: Store>(
    edge: &RateLimitEdge<S>,
    descriptors: &[(&str, &str)],
) -> RateLimitResponse {
    edge.decide(request(descriptors)).await.expect("decided")
}

async fn a_ban_keeps_the_other_descriptors_untouched<S: Store>(store: S) {
    let edge = RateLimitEdge::new(rules(), Arc::new(store));
    let first = decide(&edge, &[("shadow", "s"), ("ban", "b")]).await;
    assert_eq!(first.overall_code, Code::OverLimit as i32);
    let again = decide(&edge, &[("shadow", "s"), ("ban", "b")]).await;
    assert_eq!(again, first, "a denied request changed a counter");

    for _ in 0..5 {
        let denied = decide(&edge, &[("fw", "a"), ("log", "a"), ("ban", "b")]).await;
        assert_eq!(denied.overall_code, Code::OverLimit as i32);
        assert_eq!(denied.statuses[0].code, Code::Ok as i32);
        assert_eq!(denied.statuses[0].limit_remaining, 3, "nothing consumed");
        assert_eq!(denied.statuses[2].code, Code::OverLimit as i32);
    }
    for remaining in [2, 1, 0] {
        let admitted = decide(&edge, &[("fw", "a"), ("log", "a"), ("shadow", "s")]).await;
        assert_eq!(admitted.overall_code, Code::Ok as i32, "{admitted:?}");
        assert_eq!(admitted.statuses[0].limit_remaining, remaining);
        assert_eq!(admitted.statuses[1].limit_remaining, remaining);
    }
    let full = decide(&edge, &[("fw", "a")]).await;
    assert_eq!(full.overall_code, Code::OverLimit as i32);
}

#[tokio::test]
async fn memory_a_ban_keeps_the_other_descriptors_untouched() {
    let clock = Arc::new(ManualClock::new(T0));
    let store = MemoryStore::with_clock(clock as Arc<dyn Clock>);
    a_ban_keeps_the_other_descriptors_untouched(store).await;
}

#[tokio::test]
async fn redis_a_ban_keeps_the_other_descriptors_untouched() {
    let server = RedisServer::start();
    let clock = Arc::new(ManualClock::new(T0));
    let store = RedisStore::connect(RedisSettings::new(server.url()))
        .await
        .expect("connect to the test redis-server")
        .with_pinned_clock(clock as Arc<dyn Clock>);
    a_ban_keeps_the_other_descriptors_untouched(store).await;
}
