//! Proto <-> domain conversion for RLS v3, and the validation that rejects bad requests with
//! `INVALID_ARGUMENT`.

use prost_types::Duration;
use tonic::Status;

use crate::limiter::{
    BoundExceeded, Code, CurrentLimit, Descriptor, Entry, LimitOverride, Outcome, Request,
    RequestBounds, Unit,
};
use crate::proto::common::RateLimitDescriptor;
use crate::proto::envoy::r#type::v3::RateLimitUnit;
use crate::proto::rls::rate_limit_response::{
    rate_limit::Unit as ProtoUnit, Code as ProtoCode, DescriptorStatus, RateLimit,
};
use crate::proto::rls::{RateLimitRequest, RateLimitResponse};

/// Why a request is refused with `INVALID_ARGUMENT`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// Beyond one of the [`RequestBounds`].
    #[error(transparent)]
    Bound(#[from] BoundExceeded),
    /// Not a valid request.
    #[error("{0}")]
    Invalid(String),
}

impl From<Refused> for Status {
    fn from(refused: Refused) -> Status {
        Status::invalid_argument(refused.to_string())
    }
}

/// Validates and converts a request. Rejects an empty domain, no descriptors, more descriptors,
/// entries or entry bytes than `bounds` accept (counted before anything is converted), an entry
/// with an empty key, an override whose unit is UNKNOWN (or out of range) or whose multiplier is
/// 0, and negative hits (refunds are not supported).
pub fn request_from_proto(
    request: RateLimitRequest,
    bounds: &RequestBounds,
) -> Result<Request, Refused> {
    if request.domain.is_empty() {
        return Err(Refused::Invalid(
            "rate limit domain must not be empty".to_string(),
        ));
    }
    if request.descriptors.is_empty() {
        return Err(Refused::Invalid(
            "rate limit descriptor list must not be empty".to_string(),
        ));
    }
    check_bounds(&request, bounds)?;
    let descriptors = request
        .descriptors
        .into_iter()
        .enumerate()
        .map(|(index, descriptor)| descriptor_from_proto(index, descriptor))
        .collect::<Result<Vec<_>, Refused>>()?;
    Ok(Request {
        domain: request.domain,
        descriptors,
        hits_addend: request.hits_addend,
    })
}

/// Every count and length `bounds` caps, in request order, the first one exceeded reported.
fn check_bounds(request: &RateLimitRequest, bounds: &RequestBounds) -> Result<(), BoundExceeded> {
    bounds.check_descriptors(request.descriptors.len())?;
    for (index, descriptor) in request.descriptors.iter().enumerate() {
        bounds.check_entries(index, descriptor.entries.len())?;
        for (position, entry) in descriptor.entries.iter().enumerate() {
            bounds.check_entry(index, position, &entry.key, &entry.value)?;
        }
    }
    Ok(())
}

fn descriptor_from_proto(
    index: usize,
    descriptor: RateLimitDescriptor,
) -> Result<Descriptor, Refused> {
    if descriptor.is_negative_hits {
        return Err(Refused::Invalid(format!(
            "descriptor {index}: negative hits (is_negative_hits) are not supported"
        )));
    }
    let entries = descriptor
        .entries
        .into_iter()
        .enumerate()
        .map(|(position, entry)| {
            if entry.key.is_empty() {
                Err(Refused::Invalid(format!(
                    "descriptor {index}: entry {position} has an empty key"
                )))
            } else {
                Ok(Entry {
                    key: entry.key,
                    value: entry.value,
                })
            }
        })
        .collect::<Result<Vec<_>, Refused>>()?;
    let limit_override = descriptor
        .limit
        .map(|limit| {
            let unit = RateLimitUnit::try_from(limit.unit)
                .ok()
                .and_then(unit_from_proto)
                .ok_or_else(|| {
                    Refused::Invalid(format!(
                        "descriptor {index}: limit override unit {} is not one of SECOND, MINUTE, HOUR, DAY, MONTH, YEAR",
                        limit.unit
                    ))
                })?;
            let unit_multiplier = match limit.unit_multiplier {
                None => 1,
                Some(0) => {
                    return Err(Refused::Invalid(format!(
                        "descriptor {index}: limit override unit_multiplier must be positive"
                    )))
                }
                Some(multiplier) => multiplier,
            };
            Ok(LimitOverride {
                requests_per_unit: limit.requests_per_unit,
                unit,
                unit_multiplier,
            })
        })
        .transpose()?;
    Ok(Descriptor {
        entries,
        limit_override,
        hits_addend: descriptor.hits_addend,
    })
}

fn unit_from_proto(unit: RateLimitUnit) -> Option<Unit> {
    match unit {
        RateLimitUnit::Unknown => None,
        RateLimitUnit::Second => Some(Unit::Second),
        RateLimitUnit::Minute => Some(Unit::Minute),
        RateLimitUnit::Hour => Some(Unit::Hour),
        RateLimitUnit::Day => Some(Unit::Day),
        RateLimitUnit::Month => Some(Unit::Month),
        RateLimitUnit::Year => Some(Unit::Year),
    }
}

fn unit_to_proto(unit: Unit) -> ProtoUnit {
    match unit {
        Unit::Second => ProtoUnit::Second,
        Unit::Minute => ProtoUnit::Minute,
        Unit::Hour => ProtoUnit::Hour,
        Unit::Day => ProtoUnit::Day,
        Unit::Week => ProtoUnit::Week,
        Unit::Month => ProtoUnit::Month,
        Unit::Year => ProtoUnit::Year,
    }
}

fn code_to_proto(code: Code) -> ProtoCode {
    match code {
        Code::Ok => ProtoCode::Ok,
        Code::OverLimit => ProtoCode::OverLimit,
    }
}

fn limit_to_proto(limit: &CurrentLimit) -> RateLimit {
    RateLimit {
        name: limit.name.clone().unwrap_or_default(),
        requests_per_unit: limit.requests_per_unit,
        unit: unit_to_proto(limit.unit) as i32,
        unit_multiplier: (limit.unit_multiplier != 1).then_some(limit.unit_multiplier),
    }
}

/// Microseconds as a protobuf `Duration` of whole seconds, rounded up.
///
/// Envoy truncates `duration_until_reset` to whole seconds for `Retry-After` and
/// `x-ratelimit-reset`; an exact sub-second value would tell clients to come back too early
/// (0.4 s would become `x-ratelimit-reset: 0`). Rounding up keeps every answer a time after which
/// the request can be admitted, and matches envoyproxy/ratelimit's whole-second answers.
pub fn duration_from_us(us: u64) -> Duration {
    Duration {
        seconds: us.div_ceil(1_000_000) as i64,
        nanos: 0,
    }
}

/// Converts an outcome; one status per request descriptor, in request order.
pub fn response_to_proto(outcome: &Outcome) -> RateLimitResponse {
    RateLimitResponse {
        overall_code: code_to_proto(outcome.overall) as i32,
        statuses: outcome
            .statuses
            .iter()
            .map(|status| DescriptorStatus {
                code: code_to_proto(status.code) as i32,
                current_limit: status.current_limit.as_ref().map(limit_to_proto),
                limit_remaining: status.limit_remaining,
                duration_until_reset: status.duration_until_reset_us.map(duration_from_us),
                quota: None,
            })
            .collect(),
        ..RateLimitResponse::default()
    }
}

/// The response's `dynamic_metadata` as envoyproxy/ratelimit fills it when
/// `RESPONSE_DYNAMIC_METADATA` is on (Envoy stores it under the filter's namespace,
/// `envoy.filters.http.ratelimit`, for access logs and later filters):
///
/// - `domain`: the request's domain;
/// - `descriptors`: per request descriptor, `entries` as `"key=value"` strings, and when set its
///   `limit` override (in protobuf text form, `requests_per_unit:N unit:UNIT`) and `hitsAddend`;
/// - `hitsAddend`: the request's, when not 0;
/// - `quotaModeEnabled`: always; `quotaModeViolations`: the indices of the descriptors over a
///   quota-mode limit, when there are any;
/// - `metadata`: the merged `metadata` of the rules of the admitted descriptors, when any.
///
/// Numbers are doubles, as `google.protobuf.Value` has no integers.
pub fn dynamic_metadata(
    request: &Request,
    facts: &crate::limiter::ResponseMetadata,
) -> prost_types::Struct {
    use prost_types::value::Kind;
    use prost_types::{ListValue, Struct, Value};

    fn value(kind: Kind) -> Value {
        Value { kind: Some(kind) }
    }
    fn text(text: String) -> Value {
        value(Kind::StringValue(text))
    }
    fn list(values: Vec<Value>) -> Value {
        value(Kind::ListValue(ListValue { values }))
    }

    let descriptors = request
        .descriptors
        .iter()
        .map(|descriptor| {
            let mut fields = std::collections::BTreeMap::new();
            let entries = descriptor
                .entries
                .iter()
                .map(|entry| text(format!("{}={}", entry.key, entry.value)))
                .collect();
            fields.insert("entries".to_string(), list(entries));
            if let Some(over) = &descriptor.limit_override {
                let mut limit = format!(
                    "requests_per_unit:{} unit:{}",
                    over.requests_per_unit,
                    over.unit.as_str().to_ascii_uppercase()
                );
                if over.unit_multiplier != 1 {
                    limit.push_str(&format!(
                        " unit_multiplier:{{value:{}}}",
                        over.unit_multiplier
                    ));
                }
                fields.insert("limit".to_string(), text(limit));
            }
            if let Some(hits) = descriptor.hits_addend {
                fields.insert(
                    "hitsAddend".to_string(),
                    value(Kind::NumberValue(hits as f64)),
                );
            }
            value(Kind::StructValue(Struct { fields }))
        })
        .collect();

    let mut fields = std::collections::BTreeMap::new();
    fields.insert("domain".to_string(), text(request.domain.clone()));
    fields.insert("descriptors".to_string(), list(descriptors));
    if request.hits_addend != 0 {
        fields.insert(
            "hitsAddend".to_string(),
            value(Kind::NumberValue(f64::from(request.hits_addend))),
        );
    }
    fields.insert(
        "quotaModeEnabled".to_string(),
        value(Kind::BoolValue(facts.quota_mode_enabled)),
    );
    if !facts.quota_violations.is_empty() {
        let indices = facts
            .quota_violations
            .iter()
            .map(|&index| value(Kind::NumberValue(index as f64)))
            .collect();
        fields.insert("quotaModeViolations".to_string(), list(indices));
    }
    if !facts.metadata.is_empty() {
        fields.insert(
            "metadata".to_string(),
            value(Kind::StructValue(metadata_struct(&facts.metadata))),
        );
    }
    Struct { fields }
}

/// Domain metadata as a `google.protobuf.Struct`.
fn metadata_struct(metadata: &crate::limiter::Metadata) -> prost_types::Struct {
    use crate::limiter::MetadataValue;
    use prost_types::value::Kind;
    use prost_types::{ListValue, Struct, Value};

    fn convert(item: &MetadataValue) -> Value {
        let kind = match item {
            MetadataValue::Null => Kind::NullValue(0),
            MetadataValue::Bool(flag) => Kind::BoolValue(*flag),
            MetadataValue::Number(number) => Kind::NumberValue(number.0),
            MetadataValue::String(text) => Kind::StringValue(text.clone()),
            MetadataValue::List(items) => Kind::ListValue(ListValue {
                values: items.iter().map(convert).collect(),
            }),
            MetadataValue::Map(map) => Kind::StructValue(metadata_struct(map)),
        };
        Value { kind: Some(kind) }
    }
    Struct {
        fields: metadata
            .iter()
            .map(|(key, item)| (key.clone(), convert(item)))
            .collect(),
    }
}

#[cfg(test)]
mod dynamic_metadata_tests {
    use prost_types::value::Kind;

    use super::*;
    use crate::limiter::metadata::Number;
    use crate::limiter::{Metadata, MetadataValue, ResponseMetadata};

    fn kind(value: Option<&prost_types::Value>) -> Option<&Kind> {
        value.and_then(|v| v.kind.as_ref())
    }

    #[test]
    fn layout_follows_envoyproxy_ratelimit() {
        let request = Request {
            domain: "d".into(),
            descriptors: vec![
                Descriptor {
                    entries: vec![
                        Entry {
                            key: "a".into(),
                            value: "1".into(),
                        },
                        Entry {
                            key: "b".into(),
                            value: "".into(),
                        },
                    ],
                    limit_override: Some(LimitOverride {
                        requests_per_unit: 10,
                        unit: Unit::Second,
                        unit_multiplier: 1,
                    }),
                    hits_addend: Some(3),
                },
                Descriptor {
                    entries: vec![Entry {
                        key: "q".into(),
                        value: "x".into(),
                    }],
                    limit_override: None,
                    hits_addend: None,
                },
            ],
            hits_addend: 5,
        };
        let facts = ResponseMetadata {
            quota_mode_enabled: true,
            quota_violations: vec![1],
            metadata: Metadata::from([
                ("name".to_string(), MetadataValue::String("svc".into())),
                (
                    "nested".to_string(),
                    MetadataValue::Map(Metadata::from([(
                        "n".to_string(),
                        MetadataValue::Number(Number(2.0)),
                    )])),
                ),
            ]),
        };
        let s = dynamic_metadata(&request, &facts);
        assert_eq!(
            kind(s.fields.get("domain")),
            Some(&Kind::StringValue("d".into()))
        );
        assert_eq!(
            kind(s.fields.get("hitsAddend")),
            Some(&Kind::NumberValue(5.0))
        );
        assert_eq!(
            kind(s.fields.get("quotaModeEnabled")),
            Some(&Kind::BoolValue(true))
        );
        let Some(Kind::ListValue(violations)) = kind(s.fields.get("quotaModeViolations")) else {
            panic!("quotaModeViolations: {s:?}");
        };
        assert_eq!(
            kind(violations.values.first()),
            Some(&Kind::NumberValue(1.0))
        );
        let Some(Kind::ListValue(descriptors)) = kind(s.fields.get("descriptors")) else {
            panic!("descriptors: {s:?}");
        };
        let Some(Kind::StructValue(first)) = kind(descriptors.values.first()) else {
            panic!("descriptor 0: {s:?}");
        };
        let Some(Kind::ListValue(entries)) = kind(first.fields.get("entries")) else {
            panic!("entries: {first:?}");
        };
        let entries: Vec<_> = entries.values.iter().map(|v| v.kind.clone()).collect();
        assert_eq!(
            entries,
            [
                Some(Kind::StringValue("a=1".into())),
                Some(Kind::StringValue("b=".into()))
            ]
        );
        assert_eq!(
            kind(first.fields.get("limit")),
            Some(&Kind::StringValue(
                "requests_per_unit:10 unit:SECOND".into()
            ))
        );
        assert_eq!(
            kind(first.fields.get("hitsAddend")),
            Some(&Kind::NumberValue(3.0))
        );
        let Some(Kind::StructValue(second)) = kind(descriptors.values.get(1)) else {
            panic!("descriptor 1: {s:?}");
        };
        assert_eq!(second.fields.len(), 1, "entries only: {second:?}");
        let Some(Kind::StructValue(metadata)) = kind(s.fields.get("metadata")) else {
            panic!("metadata: {s:?}");
        };
        assert_eq!(
            kind(metadata.fields.get("name")),
            Some(&Kind::StringValue("svc".into()))
        );
        let Some(Kind::StructValue(nested)) = kind(metadata.fields.get("nested")) else {
            panic!("nested: {metadata:?}");
        };
        assert_eq!(kind(nested.fields.get("n")), Some(&Kind::NumberValue(2.0)));
    }

    #[test]
    fn empty_facts_leave_out_violations_and_metadata() {
        let request = Request {
            domain: "d".into(),
            descriptors: vec![],
            hits_addend: 0,
        };
        let s = dynamic_metadata(&request, &ResponseMetadata::default());
        let mut keys: Vec<&str> = s.fields.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["descriptors", "domain", "quotaModeEnabled"]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::RequestBound;
    use crate::proto::common::rate_limit_descriptor::Entry as ProtoEntry;

    fn descriptor(entries: usize, value: &str) -> RateLimitDescriptor {
        RateLimitDescriptor {
            entries: (0..entries)
                .map(|i| ProtoEntry {
                    key: format!("k{i}"),
                    value: value.to_string(),
                })
                .collect(),
            ..RateLimitDescriptor::default()
        }
    }

    fn request(descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
        RateLimitRequest {
            domain: "d".to_string(),
            descriptors,
            hits_addend: 0,
        }
    }

    fn refused_bound(result: Result<Request, Refused>) -> (RequestBound, String) {
        match result {
            Err(Refused::Bound(exceeded)) => (exceeded.bound(), exceeded.to_string()),
            other => panic!("expected a bound refusal, got {other:?}"),
        }
    }

    #[test]
    fn requests_at_every_bound_are_converted() {
        let bounds = RequestBounds {
            max_descriptors: 3,
            max_entries: 2,
            max_entry_bytes: 4,
        };
        let converted =
            request_from_proto(request(vec![descriptor(2, "vvvv"); 3]), &bounds).unwrap();
        assert_eq!(converted.descriptors.len(), 3);
    }

    #[test]
    fn requests_beyond_a_bound_are_refused_with_the_numbers() {
        let bounds = RequestBounds::default();
        let (bound, message) = refused_bound(request_from_proto(
            request(vec![descriptor(1, "v"); 100_000]),
            &bounds,
        ));
        assert_eq!(bound, RequestBound::Descriptors);
        assert_eq!(
            message,
            "request has 100000 descriptors; at most 64 are accepted (--max-descriptors)"
        );

        let (bound, message) = refused_bound(request_from_proto(
            request(vec![descriptor(1, "v"), descriptor(33, "v")]),
            &bounds,
        ));
        assert_eq!(bound, RequestBound::Entries);
        assert_eq!(
            message,
            "descriptor 1 has 33 entries; at most 32 are accepted (--max-descriptor-entries)"
        );

        let (bound, message) = refused_bound(request_from_proto(
            request(vec![descriptor(1, &"v".repeat(8193))]),
            &bounds,
        ));
        assert_eq!(bound, RequestBound::EntryBytes);
        assert_eq!(
            message,
            "descriptor 0: entry 0 has a value of 8193 bytes; at most 8192 are accepted (--max-entry-bytes)"
        );
    }

    #[test]
    fn refusals_are_invalid_argument() {
        let status = Status::from(Refused::Invalid("no".to_string()));
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        let refused = request_from_proto(request(Vec::new()), &RequestBounds::default());
        assert!(matches!(refused, Err(Refused::Invalid(_))));
    }
}
