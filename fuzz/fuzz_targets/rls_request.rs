//! The RLS request path, from protobuf bytes to a response: decode, convert, plan, decide on a
//! memory store, build the response, its headers, metrics and JSON form. Nothing a client sends
//! may panic it, a decided request has one status per descriptor and a definite code, and a
//! denied one changes nothing (deciding it again at the same instant answers the same).
//!
//! Input: one byte choosing the response-header style, then up to 32 frames, each
//! `[clock step][length: u16 LE][RateLimitRequest bytes]`, decided in order on one store whose
//! clock moves by the step before each (see [`advance`]), so that later requests meet the state
//! earlier ones left.
#![no_main]

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwap;
use futures::executor::block_on;
use libfuzzer_sys::fuzz_target;
use prost::Message;
use ratelimitd::config::parse_domain;
use ratelimitd::limiter::{ManualClock, Rules};
use ratelimitd::proto::rls::rate_limit_response::Code;
use ratelimitd::proto::rls::RateLimitRequest;
use ratelimitd::service::json::response_to_json;
use ratelimitd::service::{Metrics, RateLimitEdge, ResponseHeaders};
use ratelimitd::store::MemoryStore;

const CONFIG: &str = include_str!("../config/fuzz.yaml");
const T0: u64 = 1_700_000_000_000_000;
const MAX_REQUESTS: usize = 32;

fn rules() -> &'static Arc<ArcSwap<Rules>> {
    static RULES: OnceLock<Arc<ArcSwap<Rules>>> = OnceLock::new();
    RULES.get_or_init(|| {
        let domain = parse_domain(Path::new("fuzz.yaml"), CONFIG).expect("the fuzz config loads");
        let rules = Rules {
            domains: HashMap::from([(domain.domain.clone(), domain)]),
        };
        Arc::new(ArcSwap::from_pointee(rules))
    })
}

/// The clock after a step: the low 3 bits pick a duration (0, 1 µs, ~1 ms, 250 ms, 1 s, ~1 min,
/// 1 h, 1 day), the high bit steps back instead of forward; 0x7f jumps to the Unix epoch.
fn advance(now: u64, step: u8) -> u64 {
    if step == 0x7f {
        return 0;
    }
    const BY: [u64; 8] = [
        0,
        1,
        999,
        250_000,
        1_000_000,
        59_999_999,
        3_600_000_000,
        86_400_000_000,
    ];
    let by = BY[usize::from(step & 7)];
    if step & 0x80 != 0 {
        now.saturating_sub(by)
    } else {
        now.saturating_add(by)
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&style, mut rest)) = data.split_first() else {
        return;
    };
    let headers = match style % 3 {
        0 => ResponseHeaders::None,
        1 => ResponseHeaders::Draft03,
        _ => ResponseHeaders::Ietf,
    };
    let clock = Arc::new(ManualClock::new(T0));
    let store = Arc::new(MemoryStore::with_clock(clock.clone()));
    let metrics = Arc::new(Metrics::new(0.8));
    metrics.register_rules(&rules().load());
    let edge = RateLimitEdge::new(rules().clone(), store)
        .with_response_headers(headers)
        .with_metrics(metrics.clone());
    let mut now = T0;
    for _ in 0..MAX_REQUESTS {
        let [step, low, high, tail @ ..] = rest else {
            break;
        };
        let length = usize::from(u16::from_le_bytes([*low, *high])).min(tail.len());
        let (message, after) = tail.split_at(length);
        rest = after;
        now = advance(now, *step);
        clock.set_us(now);
        let Ok(request) = RateLimitRequest::decode(message) else {
            continue;
        };
        let descriptors = request.descriptors.len();
        match block_on(edge.decide(request.clone())) {
            Ok(response) => {
                assert_eq!(response.statuses.len(), descriptors, "{response:?}");
                assert!(
                    response.overall_code == Code::Ok as i32
                        || response.overall_code == Code::OverLimit as i32,
                    "{response:?}"
                );
                if response.overall_code == Code::OverLimit as i32 {
                    // A denied request consumed nothing anywhere: the same request at the same
                    // instant meets the same state and gets the same answer.
                    let again = block_on(edge.decide(request));
                    assert_eq!(
                        again.as_ref().ok(),
                        Some(&response),
                        "denied twice differently"
                    );
                }
                let _ = response.encode_to_vec();
                let _ = response_to_json(&response);
            }
            Err(status) => {
                assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
                assert!(!status.message().is_empty());
            }
        }
    }
    let _ = metrics.render();
});
