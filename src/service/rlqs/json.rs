//! `GET /rlqs`: the current RLQS assignments as JSON, per bucket and stream.

use serde_json::{json, Map, Value};

use super::convert::Assignment;
use super::registry::BucketView;
use crate::limiter::quota::{BlanketRule, QuotaStrategy};

fn blanket(rule: BlanketRule) -> &'static str {
    match rule {
        BlanketRule::AllowAll => "ALLOW_ALL",
        BlanketRule::DenyAll => "DENY_ALL",
    }
}

fn assignment(assignment: &Assignment) -> Value {
    match assignment {
        Assignment::Blanket(rule) => json!({"blanket_rule": blanket(*rule)}),
        Assignment::TokenBucket(bucket) => json!({"token_bucket": {
            "max_tokens": bucket.max_tokens,
            "tokens_per_fill": bucket.tokens_per_fill,
            "fill_interval": format!("{}s", bucket.fill_interval.as_secs()),
        }}),
    }
}

/// `{"buckets": [{"domain", "bucket": {key: value}, "rule", "limit_per_second" | "blanket_rule",
/// "streams": [{"stream", "demand", "share", "assignment"}]}]}`; a demand is `null` until a
/// report covered time, a share `null` for a blanket rule, an assignment `null` until sent.
pub fn assignments(views: &[BucketView]) -> String {
    let buckets: Vec<Value> = views
        .iter()
        .map(|view| {
            let mut bucket = Map::new();
            bucket.insert("domain".into(), json!(view.key.domain));
            let entries: Map<String, Value> = view
                .key
                .bucket
                .entries()
                .iter()
                .map(|(k, v)| (k.clone(), json!(v)))
                .collect();
            bucket.insert("bucket".into(), Value::Object(entries));
            bucket.insert("rule".into(), json!(view.rule));
            match view.strategy {
                QuotaStrategy::Blanket(rule) => {
                    bucket.insert("blanket_rule".into(), json!(blanket(rule)));
                }
                QuotaStrategy::Limited(rate) => {
                    bucket.insert("limit_per_second".into(), json!(rate.per_second()));
                }
            }
            let streams: Vec<Value> = view
                .streams
                .iter()
                .map(|member| {
                    json!({
                        "stream": member.stream,
                        "demand": member.demand,
                        "share": member.share,
                        "assignment": member.assignment.as_ref().map(assignment),
                    })
                })
                .collect();
            bucket.insert("streams".into(), Value::Array(streams));
            Value::Object(bucket)
        })
        .collect();
    let mut text = json!({ "buckets": buckets }).to_string();
    text.push('\n');
    text
}
