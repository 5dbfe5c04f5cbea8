//! The RLQS messages against bytes built by hand from Envoy 1.40's field numbers: a wrong number
//! or type in `proto/` decodes to the wrong field (or none) and fails here.

use prost::Message;
use prost_types::Duration;

use super::envoy::r#type::v3::{rate_limit_strategy, RateLimitStrategy, TokenBucket};
use super::rlqs::rate_limit_quota_response::{bucket_action, BucketAction};
use super::rlqs::rate_limit_quota_usage_reports::BucketQuotaUsage;
use super::rlqs::{BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports};

/// `BucketId {bucket: {k: v}}` as one map entry: field 1, entry {key = 1, value = 2}.
const BUCKET_ID_K_V: [u8; 8] = [0x0a, 0x06, 0x0a, 0x01, b'k', 0x12, 0x01, b'v'];

fn bucket_k_v() -> BucketId {
    BucketId {
        bucket: [("k".to_string(), "v".to_string())].into(),
    }
}

fn seconds(seconds: i64) -> Duration {
    Duration { seconds, nanos: 0 }
}

fn with_len(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![tag, u8::try_from(body.len()).expect("a short test message")];
    out.extend_from_slice(body);
    out
}

#[test]
fn a_usage_report_decodes_from_envoys_field_numbers() {
    let mut usage = with_len(0x0a, &BUCKET_ID_K_V); // bucket_id = 1
    usage.extend(with_len(0x12, &[0x08, 0x05])); // time_elapsed = 2 {seconds = 1: 5}
    usage.extend([0x18, 0x07]); // num_requests_allowed = 3: 7
    usage.extend([0x20, 0x03]); // num_requests_denied = 4: 3
    let mut wire = with_len(0x0a, b"edge"); // domain = 1
    wire.extend(with_len(0x12, &usage)); // bucket_quota_usages = 2 (repeated)
    wire.extend(with_len(0x12, &[])); // a second, empty usage

    let reports = RateLimitQuotaUsageReports::decode(wire.as_slice()).expect("decodes");
    assert_eq!(
        reports,
        RateLimitQuotaUsageReports {
            domain: "edge".into(),
            bucket_quota_usages: vec![
                BucketQuotaUsage {
                    bucket_id: Some(bucket_k_v()),
                    time_elapsed: Some(seconds(5)),
                    num_requests_allowed: 7,
                    num_requests_denied: 3,
                },
                BucketQuotaUsage::default(),
            ],
        }
    );
    assert_eq!(
        reports.encode_to_vec(),
        wire,
        "re-encodes to the same bytes"
    );
}

#[test]
fn a_token_bucket_assignment_encodes_to_envoys_field_numbers() {
    let response = RateLimitQuotaResponse {
        bucket_action: vec![BucketAction {
            bucket_id: Some(bucket_k_v()),
            bucket_action: Some(bucket_action::BucketAction::QuotaAssignmentAction(
                bucket_action::QuotaAssignmentAction {
                    assignment_time_to_live: Some(seconds(15)),
                    rate_limit_strategy: Some(RateLimitStrategy {
                        strategy: Some(rate_limit_strategy::Strategy::TokenBucket(TokenBucket {
                            max_tokens: 10,
                            tokens_per_fill: Some(5),
                            fill_interval: Some(seconds(2)),
                        })),
                    }),
                },
            )),
        }],
    };
    let mut bucket = vec![0x08, 0x0a]; // max_tokens = 1: 10
    bucket.extend(with_len(0x12, &[0x08, 0x05])); // tokens_per_fill = 2 {value = 1: 5}
    bucket.extend(with_len(0x1a, &[0x08, 0x02])); // fill_interval = 3 {seconds: 2}
    let strategy = with_len(0x1a, &bucket); // token_bucket = 3
    let mut assignment = with_len(0x12, &[0x08, 0x0f]); // assignment_time_to_live = 2: 15 s
    assignment.extend(with_len(0x1a, &strategy)); // rate_limit_strategy = 3
    let mut action = with_len(0x0a, &BUCKET_ID_K_V); // bucket_id = 1
    action.extend(with_len(0x12, &assignment)); // quota_assignment_action = 2
    let wire = with_len(0x0a, &action); // bucket_action = 1 (repeated)

    assert_eq!(response.encode_to_vec(), wire);
    assert_eq!(
        RateLimitQuotaResponse::decode(wire.as_slice()).expect("decodes"),
        response
    );
}

#[test]
fn blanket_rules_abandon_and_a_zero_ttl_are_on_the_wire() {
    let blanket = |rule: rate_limit_strategy::BlanketRule, ttl: i64| BucketAction {
        bucket_id: Some(bucket_k_v()),
        bucket_action: Some(bucket_action::BucketAction::QuotaAssignmentAction(
            bucket_action::QuotaAssignmentAction {
                assignment_time_to_live: Some(seconds(ttl)),
                rate_limit_strategy: Some(RateLimitStrategy {
                    strategy: Some(rate_limit_strategy::Strategy::BlanketRule(rule as i32)),
                }),
            },
        )),
    };
    let response = RateLimitQuotaResponse {
        bucket_action: vec![
            blanket(rate_limit_strategy::BlanketRule::DenyAll, 0),
            blanket(rate_limit_strategy::BlanketRule::AllowAll, 30),
            BucketAction {
                bucket_id: Some(bucket_k_v()),
                bucket_action: Some(bucket_action::BucketAction::AbandonAction(
                    bucket_action::AbandonAction {},
                )),
            },
        ],
    };
    let action = |tail: Vec<u8>| {
        let mut action = with_len(0x0a, &BUCKET_ID_K_V);
        action.extend(tail);
        with_len(0x0a, &action)
    };
    // A zero TTL is present (expire now), not absent (never expire).
    let mut deny = with_len(0x12, &[]);
    deny.extend(with_len(0x1a, &[0x08, 0x01])); // blanket_rule = 1: DENY_ALL
    let mut allow = with_len(0x12, &[0x08, 0x1e]);
    allow.extend(with_len(0x1a, &[0x08, 0x00])); // ALLOW_ALL = 0, written: the oneof is set

    let mut wire = action(with_len(0x12, &deny));
    wire.extend(action(with_len(0x12, &allow)));
    wire.extend(action(with_len(0x1a, &[]))); // abandon_action = 3

    assert_eq!(response.encode_to_vec(), wire);
    assert_eq!(
        RateLimitQuotaResponse::decode(wire.as_slice()).expect("decodes"),
        response
    );
}

#[test]
fn the_service_trait_is_generated_under_envoys_name() {
    fn is_service<S: super::rlqs::rate_limit_quota_service_server::RateLimitQuotaService>() {}
    let _ = is_service::<Unserved>;
    assert_eq!(
        super::rlqs::rate_limit_quota_service_server::SERVICE_NAME,
        "envoy.service.rate_limit_quota.v3.RateLimitQuotaService"
    );
}

/// A service that ends every stream: enough to prove the generated trait can be implemented.
struct Unserved;

#[tonic::async_trait]
impl super::rlqs::rate_limit_quota_service_server::RateLimitQuotaService for Unserved {
    type StreamRateLimitQuotasStream =
        futures::stream::Empty<Result<RateLimitQuotaResponse, tonic::Status>>;

    async fn stream_rate_limit_quotas(
        &self,
        _request: tonic::Request<tonic::Streaming<RateLimitQuotaUsageReports>>,
    ) -> Result<tonic::Response<Self::StreamRateLimitQuotasStream>, tonic::Status> {
        Err(tonic::Status::unimplemented("not served"))
    }
}
