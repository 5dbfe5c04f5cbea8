//! RLQS protos to the quota domain and back: the one place their shapes meet.

use std::time::Duration;

use crate::limiter::quota::{BlanketRule, BucketId, BucketIdError, TokenBucketAssignment};
use crate::proto::envoy::r#type::v3::{rate_limit_strategy, RateLimitStrategy, TokenBucket};
use crate::proto::rlqs;
use crate::proto::rlqs::rate_limit_quota_response::{bucket_action, BucketAction};

/// What one Envoy is told to enforce for one bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assignment {
    Blanket(BlanketRule),
    TokenBucket(TokenBucketAssignment),
}

/// What the server sends for one bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Enforce `assignment` for `ttl`.
    Assign {
        assignment: Assignment,
        ttl: Duration,
    },
    /// Forget the bucket (it was idle for too long).
    Abandon,
}

/// Why a reported bucket id is ignored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MalformedBucket {
    #[error(transparent)]
    Id(#[from] BucketIdError),
    #[error("the bucket id has an empty key")]
    EmptyKey,
}

/// The domain's bucket id of a reported `bucket_id`: absent and an empty map are both
/// [`BucketIdError::Empty`]; an empty key is refused (no rule can name it).
pub fn bucket_id(proto: Option<&rlqs::BucketId>) -> Result<BucketId, MalformedBucket> {
    let Some(proto) = proto else {
        return Err(BucketIdError::Empty.into());
    };
    if proto.bucket.keys().any(|key| key.is_empty()) {
        return Err(MalformedBucket::EmptyKey);
    }
    Ok(BucketId::new(
        proto.bucket.iter().map(|(k, v)| (k.as_str(), v.as_str())),
    )?)
}

/// A bucket id back on the wire.
pub fn bucket_id_proto(bucket: &BucketId) -> rlqs::BucketId {
    rlqs::BucketId {
        bucket: bucket.entries().iter().cloned().collect(),
    }
}

/// A report's `time_elapsed` as a duration: absent or negative is zero (a first report).
pub fn elapsed(proto: Option<&prost_types::Duration>) -> Duration {
    let Some(proto) = proto else {
        return Duration::ZERO;
    };
    if proto.seconds < 0 || (proto.seconds == 0 && proto.nanos <= 0) {
        return Duration::ZERO;
    }
    Duration::new(
        proto.seconds as u64,
        proto.nanos.clamp(0, 999_999_999) as u32,
    )
}

fn duration_proto(duration: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(duration.as_secs()).unwrap_or(i64::MAX),
        nanos: duration.subsec_nanos() as i32,
    }
}

/// One bucket's action on the wire.
pub fn bucket_action(bucket: &BucketId, action: &Action) -> BucketAction {
    let bucket_action = match action {
        Action::Abandon => {
            bucket_action::BucketAction::AbandonAction(bucket_action::AbandonAction {})
        }
        Action::Assign { assignment, ttl } => {
            let strategy = match assignment {
                Assignment::Blanket(rule) => {
                    let rule = match rule {
                        BlanketRule::AllowAll => rate_limit_strategy::BlanketRule::AllowAll,
                        BlanketRule::DenyAll => rate_limit_strategy::BlanketRule::DenyAll,
                    };
                    rate_limit_strategy::Strategy::BlanketRule(rule as i32)
                }
                Assignment::TokenBucket(bucket) => {
                    rate_limit_strategy::Strategy::TokenBucket(TokenBucket {
                        max_tokens: bucket.max_tokens,
                        tokens_per_fill: Some(bucket.tokens_per_fill),
                        fill_interval: Some(duration_proto(bucket.fill_interval)),
                    })
                }
            };
            bucket_action::BucketAction::QuotaAssignmentAction(
                bucket_action::QuotaAssignmentAction {
                    assignment_time_to_live: Some(duration_proto(*ttl)),
                    rate_limit_strategy: Some(RateLimitStrategy {
                        strategy: Some(strategy),
                    }),
                },
            )
        }
    };
    BucketAction {
        bucket_id: Some(bucket_id_proto(bucket)),
        bucket_action: Some(bucket_action),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proto(entries: &[(&str, &str)]) -> rlqs::BucketId {
        rlqs::BucketId {
            bucket: entries
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn an_absent_empty_or_empty_key_bucket_is_refused() {
        let empty = Err(MalformedBucket::Id(BucketIdError::Empty));
        assert_eq!(bucket_id(None), empty);
        assert_eq!(bucket_id(Some(&proto(&[]))), empty);
        assert_eq!(
            bucket_id(Some(&proto(&[("a", "1"), ("", "x")]))),
            Err(MalformedBucket::EmptyKey)
        );
        let bucket = bucket_id(Some(&proto(&[("b", "2"), ("a", "1")]))).expect("a bucket");
        assert_eq!(bucket_id_proto(&bucket), proto(&[("a", "1"), ("b", "2")]));
    }

    #[test]
    fn elapsed_time_absent_or_negative_is_zero() {
        assert_eq!(elapsed(None), Duration::ZERO);
        let d = |seconds, nanos| prost_types::Duration { seconds, nanos };
        assert_eq!(elapsed(Some(&d(-1, 0))), Duration::ZERO);
        assert_eq!(elapsed(Some(&d(0, 0))), Duration::ZERO);
        assert_eq!(elapsed(Some(&d(5, 0))), Duration::from_secs(5));
    }

    #[test]
    fn a_token_bucket_goes_on_the_wire_with_its_ttl() {
        let bucket = BucketId::new([("k", "v")]).expect("a bucket");
        let action = Action::Assign {
            assignment: Assignment::TokenBucket(TokenBucketAssignment {
                max_tokens: 6,
                tokens_per_fill: 5,
                fill_interval: Duration::from_secs(1),
            }),
            ttl: Duration::from_secs(15),
        };
        let wire = bucket_action(&bucket, &action);
        let Some(bucket_action::BucketAction::QuotaAssignmentAction(assignment)) =
            wire.bucket_action
        else {
            panic!("an assignment: {wire:?}");
        };
        assert_eq!(
            assignment.assignment_time_to_live.map(|d| d.seconds),
            Some(15)
        );
        let Some(RateLimitStrategy {
            strategy: Some(rate_limit_strategy::Strategy::TokenBucket(tb)),
        }) = assignment.rate_limit_strategy
        else {
            panic!("a token bucket");
        };
        assert_eq!((tb.max_tokens, tb.tokens_per_fill), (6, Some(5)));
    }
}
