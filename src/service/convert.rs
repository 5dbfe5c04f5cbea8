//! Proto <-> domain conversion for RLS v3, and the validation that rejects bad requests with
//! `INVALID_ARGUMENT`.

use prost_types::Duration;
use tonic::Status;

use crate::limiter::{
    Code, CurrentLimit, Descriptor, Entry, LimitOverride, Outcome, Request, Unit,
};
use crate::proto::common::RateLimitDescriptor;
use crate::proto::envoy::r#type::v3::RateLimitUnit;
use crate::proto::rls::rate_limit_response::{
    rate_limit::Unit as ProtoUnit, Code as ProtoCode, DescriptorStatus, RateLimit,
};
use crate::proto::rls::{RateLimitRequest, RateLimitResponse};

/// Validates and converts a request. Rejects an empty domain, no descriptors, an entry with an
/// empty key, an override whose unit is UNKNOWN (or out of range) or whose multiplier is 0, and
/// negative hits (refunds are not supported).
pub fn request_from_proto(request: RateLimitRequest) -> Result<Request, Status> {
    if request.domain.is_empty() {
        return Err(Status::invalid_argument(
            "rate limit domain must not be empty",
        ));
    }
    if request.descriptors.is_empty() {
        return Err(Status::invalid_argument(
            "rate limit descriptor list must not be empty",
        ));
    }
    let descriptors = request
        .descriptors
        .into_iter()
        .enumerate()
        .map(|(index, descriptor)| descriptor_from_proto(index, descriptor))
        .collect::<Result<Vec<_>, Status>>()?;
    Ok(Request {
        domain: request.domain,
        descriptors,
        hits_addend: request.hits_addend,
    })
}

fn descriptor_from_proto(
    index: usize,
    descriptor: RateLimitDescriptor,
) -> Result<Descriptor, Status> {
    if descriptor.is_negative_hits {
        return Err(Status::invalid_argument(format!(
            "descriptor {index}: negative hits (is_negative_hits) are not supported"
        )));
    }
    let entries = descriptor
        .entries
        .into_iter()
        .enumerate()
        .map(|(position, entry)| {
            if entry.key.is_empty() {
                Err(Status::invalid_argument(format!(
                    "descriptor {index}: entry {position} has an empty key"
                )))
            } else {
                Ok(Entry {
                    key: entry.key,
                    value: entry.value,
                })
            }
        })
        .collect::<Result<Vec<_>, Status>>()?;
    let limit_override = descriptor
        .limit
        .map(|limit| {
            let unit = RateLimitUnit::try_from(limit.unit)
                .ok()
                .and_then(unit_from_proto)
                .ok_or_else(|| {
                    Status::invalid_argument(format!(
                        "descriptor {index}: limit override unit {} is not one of SECOND, MINUTE, HOUR, DAY, MONTH, YEAR",
                        limit.unit
                    ))
                })?;
            let unit_multiplier = match limit.unit_multiplier {
                None => 1,
                Some(0) => {
                    return Err(Status::invalid_argument(format!(
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
