//! A test client of the RLQS service, as an Envoy's rate_limit_quota filter speaks it: one
//! bidirectional stream, reports sent, actions read and kept per bucket.

use std::collections::HashMap;
use std::time::Duration;

use ratelimitd::proto::envoy::r#type::v3::{rate_limit_strategy, RateLimitStrategy};
use ratelimitd::proto::rlqs::rate_limit_quota_response::{bucket_action, BucketAction};
use ratelimitd::proto::rlqs::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use ratelimitd::proto::rlqs::rate_limit_quota_usage_reports::BucketQuotaUsage;
use ratelimitd::proto::rlqs::{BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::{Status, Streaming};

use super::ratelimitd::Ratelimitd;

pub fn bucket(entries: &[(&str, &str)]) -> BucketId {
    BucketId {
        bucket: entries
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

pub fn usage(bucket: BucketId, allowed: u64, denied: u64, elapsed_s: i64) -> BucketQuotaUsage {
    BucketQuotaUsage {
        bucket_id: Some(bucket),
        time_elapsed: Some(prost_types::Duration {
            seconds: elapsed_s,
            nanos: 0,
        }),
        num_requests_allowed: allowed,
        num_requests_denied: denied,
    }
}

/// A bucket id as a sortable, hashable key.
pub fn key(id: &BucketId) -> String {
    let sorted: std::collections::BTreeMap<_, _> = id.bucket.iter().collect();
    format!("{sorted:?}")
}

/// What a bucket was told, simplified.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Told {
    Allow,
    Deny,
    /// tokens_per_fill per fill_interval seconds, and max_tokens.
    Tokens {
        per_fill: u32,
        interval_s: i64,
        max: u32,
    },
    Abandon,
}

impl Told {
    pub fn rate(&self) -> f64 {
        match self {
            Told::Tokens {
                per_fill,
                interval_s,
                ..
            } => f64::from(*per_fill) / *interval_s as f64,
            other => panic!("not a token bucket: {other:?}"),
        }
    }
}

pub fn told(action: &BucketAction) -> Told {
    match action.bucket_action.as_ref().expect("an action") {
        bucket_action::BucketAction::AbandonAction(_) => Told::Abandon,
        bucket_action::BucketAction::QuotaAssignmentAction(assignment) => {
            let ttl = assignment.assignment_time_to_live.expect("a ttl");
            assert_eq!(ttl.seconds, 15, "three report periods");
            match assignment.rate_limit_strategy.as_ref() {
                Some(RateLimitStrategy {
                    strategy: Some(rate_limit_strategy::Strategy::BlanketRule(rule)),
                }) if *rule == rate_limit_strategy::BlanketRule::AllowAll as i32 => Told::Allow,
                Some(RateLimitStrategy {
                    strategy: Some(rate_limit_strategy::Strategy::BlanketRule(_)),
                }) => Told::Deny,
                Some(RateLimitStrategy {
                    strategy: Some(rate_limit_strategy::Strategy::TokenBucket(tb)),
                }) => {
                    let interval = tb.fill_interval.expect("a fill interval");
                    assert_eq!(interval.nanos, 0, "whole seconds");
                    assert!(interval.seconds >= 1);
                    Told::Tokens {
                        per_fill: tb.tokens_per_fill.expect("tokens per fill"),
                        interval_s: interval.seconds,
                        max: tb.max_tokens,
                    }
                }
                other => panic!("unexpected strategy {other:?}"),
            }
        }
    }
}

/// One Envoy's stream.
pub struct Envoy {
    reports: mpsc::Sender<RateLimitQuotaUsageReports>,
    answers: Streaming<RateLimitQuotaResponse>,
    /// The latest action per bucket seen so far.
    pub latest: HashMap<String, Told>,
}

impl Envoy {
    pub async fn connect(server: &Ratelimitd) -> Envoy {
        Envoy::connect_on(server.channel().await)
            .await
            .expect("the stream opens")
    }

    /// A stream on `channel` (streams on one channel share its connection), or the status that
    /// refused it.
    pub async fn connect_on(channel: Channel) -> Result<Envoy, Status> {
        let mut client = RateLimitQuotaServiceClient::new(channel);
        let (reports, rx) = mpsc::channel(16);
        let answers = client
            .stream_rate_limit_quotas(ReceiverStream::new(rx))
            .await?
            .into_inner();
        Ok(Envoy {
            reports,
            answers,
            latest: HashMap::new(),
        })
    }

    pub async fn report(&self, domain: &str, usages: Vec<BucketQuotaUsage>) {
        self.reports
            .send(RateLimitQuotaUsageReports {
                domain: domain.into(),
                bucket_quota_usages: usages,
            })
            .await
            .expect("the stream is open");
    }

    /// The next response, or the stream's end status.
    pub async fn next(
        &mut self,
        within: Duration,
    ) -> Result<Option<RateLimitQuotaResponse>, Status> {
        match tokio::time::timeout(within, self.answers.message()).await {
            Err(_) => Ok(None),
            Ok(Ok(Some(response))) => {
                for action in &response.bucket_action {
                    let id = action.bucket_id.clone().expect("a bucket id");
                    self.latest.insert(key(&id), told(action));
                }
                Ok(Some(response))
            }
            Ok(Ok(None)) => Err(Status::ok("the stream ended")),
            Ok(Err(status)) => Err(status),
        }
    }

    /// Reads answers until one names `id`; returns what it was told.
    pub async fn told(&mut self, id: &BucketId, within: Duration) -> Told {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            assert!(!left.is_zero(), "no action for {id:?} within {within:?}");
            if let Some(response) = self.next(left).await.expect("the stream stays open") {
                if let Some(action) = response
                    .bucket_action
                    .iter()
                    .rev()
                    .find(|action| action.bucket_id.as_ref() == Some(id))
                {
                    return told(action);
                }
            }
        }
    }

    /// Reads whatever arrives within `within`, keeping the latest per bucket.
    pub async fn drain(&mut self, within: Duration) {
        while self
            .next(within)
            .await
            .expect("the stream stays open")
            .is_some()
        {}
    }

    /// Reads until the stream ends; its status (OK for a clean end).
    pub async fn ended(&mut self, within: Duration) -> Status {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            assert!(!left.is_zero(), "the stream did not end within {within:?}");
            match self.next(left).await {
                Ok(_) => continue,
                Err(status) => return status,
            }
        }
    }
}
