//! Proto3 JSON (the canonical JSON mapping that Go's `protojson` implements, and that
//! envoyproxy/ratelimit's `/json` endpoint speaks) for the few RLS messages the HTTP port needs.
//!
//! Written by hand because prost types carry no serde support and two messages do not justify a
//! code generator. Follows the mapping:
//!
//! - Input: fields by their JSON name (`hitsAddend`) or their proto name (`hits_addend`), not
//!   both; unknown fields are errors; `null` is the default value; integers as JSON numbers or
//!   decimal strings; enums by name or number; wrappers (`UInt32Value`, `UInt64Value`) as their
//!   bare value.
//! - Output: JSON names, fields in declaration order, default values (0, "", false, empty lists,
//!   absent messages) omitted; enums by name; 64-bit integers as strings; `Duration` as a string
//!   of seconds with 0, 3, 6 or 9 fractional digits (`"1.500s"`); bytes as base64.
use std::fmt::Write as _;

use prost_types::value::Kind;
use prost_types::{Duration, ListValue, Struct, Value};
use serde_json::{Map, Value as Json};

use crate::proto::common::rate_limit_descriptor::{Entry, RateLimitOverride};
use crate::proto::common::RateLimitDescriptor;
use crate::proto::envoy::config::core::v3::HeaderValue;
use crate::proto::envoy::r#type::v3::RateLimitUnit;
use crate::proto::rls::rate_limit_response::quota::ExpirationSpecifier;
use crate::proto::rls::rate_limit_response::rate_limit::Unit;
use crate::proto::rls::rate_limit_response::{Code, DescriptorStatus, Quota, RateLimit};
use crate::proto::rls::{RateLimitRequest, RateLimitResponse};

/// Parses a proto3-JSON `RateLimitRequest`. The error says what is wrong and where.
pub fn request_from_json(body: &[u8]) -> Result<RateLimitRequest, String> {
    let json: Json = serde_json::from_slice(body).map_err(|e| format!("invalid JSON: {e}"))?;
    let mut fields = Fields::of(&json, "RateLimitRequest")?;
    let request = RateLimitRequest {
        domain: fields.string("domain", "domain")?,
        descriptors: fields
            .list("descriptors", "descriptors")?
            .iter()
            .enumerate()
            .map(|(i, d)| descriptor(d, &format!("descriptors[{i}]")))
            .collect::<Result<_, _>>()?,
        hits_addend: fields.u32("hitsAddend", "hits_addend")?.unwrap_or(0),
    };
    fields.finish()?;
    Ok(request)
}

fn descriptor(json: &Json, at: &str) -> Result<RateLimitDescriptor, String> {
    let mut fields = Fields::of(json, at)?;
    let entries = fields
        .list("entries", "entries")?
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let at = format!("{at}.entries[{i}]");
            let mut fields = Fields::of(e, &at)?;
            let entry = Entry {
                key: fields.string("key", "key")?,
                value: fields.string("value", "value")?,
            };
            fields.finish()?;
            Ok(entry)
        })
        .collect::<Result<_, String>>()?;
    let limit = match fields.take("limit", "limit")? {
        None => None,
        Some(json) => {
            let at = format!("{at}.limit");
            let mut fields = Fields::of(&json, &at)?;
            let limit = RateLimitOverride {
                requests_per_unit: fields
                    .u32("requestsPerUnit", "requests_per_unit")?
                    .unwrap_or(0),
                unit: fields.unit("unit", "unit")?,
                unit_multiplier: fields.u32("unitMultiplier", "unit_multiplier")?,
            };
            fields.finish()?;
            Some(limit)
        }
    };
    let hits_addend = fields.u64("hitsAddend", "hits_addend")?;
    let is_negative_hits = fields.bool("isNegativeHits", "is_negative_hits")?;
    fields.finish()?;
    Ok(RateLimitDescriptor {
        entries,
        limit,
        hits_addend,
        is_negative_hits,
    })
}

/// The fields of one JSON object, taken one by one; what is left at the end is unknown.
struct Fields {
    at: String,
    map: Map<String, Json>,
}

impl Fields {
    fn of(json: &Json, at: &str) -> Result<Fields, String> {
        match json {
            Json::Object(map) => Ok(Fields {
                at: at.to_string(),
                map: map.clone(),
            }),
            other => Err(format!("{at}: expected an object, got {}", kind(other))),
        }
    }

    fn path(&self, name: &str) -> String {
        if self.at.is_empty() || self.at == "RateLimitRequest" {
            name.to_string()
        } else {
            format!("{}.{name}", self.at)
        }
    }

    /// The value under the JSON name or the proto name; `None` when absent or null.
    fn take(
        &mut self,
        json_name: &'static str,
        proto_name: &'static str,
    ) -> Result<Option<Json>, String> {
        let by_json = self.map.remove(json_name);
        let by_proto = if proto_name != json_name {
            self.map.remove(proto_name)
        } else {
            None
        };
        let value = match (by_json, by_proto) {
            (Some(_), Some(_)) => {
                return Err(format!(
                    "{}: given twice (as `{json_name}` and `{proto_name}`)",
                    self.path(proto_name)
                ))
            }
            (Some(v), None) | (None, Some(v)) => v,
            (None, None) => return Ok(None),
        };
        Ok((!value.is_null()).then_some(value))
    }

    fn string(
        &mut self,
        json_name: &'static str,
        proto_name: &'static str,
    ) -> Result<String, String> {
        let path = self.path(proto_name);
        match self.take(json_name, proto_name)? {
            None => Ok(String::new()),
            Some(Json::String(s)) => Ok(s),
            Some(other) => Err(format!("{path}: expected a string, got {}", kind(&other))),
        }
    }

    fn bool(&mut self, json_name: &'static str, proto_name: &'static str) -> Result<bool, String> {
        let path = self.path(proto_name);
        match self.take(json_name, proto_name)? {
            None => Ok(false),
            Some(Json::Bool(b)) => Ok(b),
            Some(other) => Err(format!(
                "{path}: expected true or false, got {}",
                kind(&other)
            )),
        }
    }

    fn list(
        &mut self,
        json_name: &'static str,
        proto_name: &'static str,
    ) -> Result<Vec<Json>, String> {
        let path = self.path(proto_name);
        match self.take(json_name, proto_name)? {
            None => Ok(Vec::new()),
            Some(Json::Array(items)) => Ok(items),
            Some(other) => Err(format!("{path}: expected an array, got {}", kind(&other))),
        }
    }

    fn u64(
        &mut self,
        json_name: &'static str,
        proto_name: &'static str,
    ) -> Result<Option<u64>, String> {
        let path = self.path(proto_name);
        self.take(json_name, proto_name)?
            .map(|json| {
                unsigned(&json, u64::MAX).ok_or_else(|| {
                    format!("{path}: expected an unsigned 64-bit integer, got {json}")
                })
            })
            .transpose()
    }

    fn u32(
        &mut self,
        json_name: &'static str,
        proto_name: &'static str,
    ) -> Result<Option<u32>, String> {
        let path = self.path(proto_name);
        self.take(json_name, proto_name)?
            .map(|json| {
                unsigned(&json, u64::from(u32::MAX))
                    .map(|n| n as u32)
                    .ok_or_else(|| {
                        format!("{path}: expected an unsigned 32-bit integer, got {json}")
                    })
            })
            .transpose()
    }

    fn unit(&mut self, json_name: &'static str, proto_name: &'static str) -> Result<i32, String> {
        let path = self.path(proto_name);
        match self.take(json_name, proto_name)? {
            None => Ok(0),
            Some(Json::String(name)) => RateLimitUnit::from_str_name(&name)
                .map(|unit| unit as i32)
                .ok_or_else(|| format!("{path}: unknown unit `{name}`")),
            Some(json) => json
                .as_i64()
                .and_then(|n| i32::try_from(n).ok())
                .ok_or_else(|| format!("{path}: expected a unit name or number, got {json}")),
        }
    }

    /// Fails on any field not taken.
    fn finish(self) -> Result<(), String> {
        match self.map.keys().next() {
            None => Ok(()),
            Some(name) => Err(format!("{}: unknown field", self.path(name))),
        }
    }
}

/// An unsigned integer up to `max`: a JSON number (integral) or a decimal string.
fn unsigned(json: &Json, max: u64) -> Option<u64> {
    let n = match json {
        Json::Number(n) => match n.as_u64() {
            Some(n) => n,
            None => {
                let f = n.as_f64()?;
                if f < 0.0 || f.fract() != 0.0 || f > max as f64 {
                    return None;
                }
                f as u64
            }
        },
        Json::String(s) => s.trim().parse::<u64>().ok()?,
        _ => return None,
    };
    (n <= max).then_some(n)
}

fn kind(json: &Json) -> &'static str {
    match json {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "an array",
        Json::Object(_) => "an object",
    }
}

// ---------------------------------------------------------------------------------------------
// Output

/// A JSON object under construction: fields in the order written, defaults skipped by callers.
struct Object {
    out: String,
    empty: bool,
}

impl Object {
    fn new() -> Object {
        Object {
            out: String::from("{"),
            empty: true,
        }
    }

    fn raw(&mut self, name: &str, value: &str) {
        if !self.empty {
            self.out.push(',');
        }
        self.empty = false;
        self.out.push_str(&quote(name));
        self.out.push(':');
        self.out.push_str(value);
    }

    fn string(&mut self, name: &str, value: &str) {
        if !value.is_empty() {
            self.raw(name, &quote(value));
        }
    }

    fn number(&mut self, name: &str, value: u64) {
        if value != 0 {
            self.raw(name, &value.to_string());
        }
    }

    fn bytes(&mut self, name: &str, value: &[u8]) {
        if !value.is_empty() {
            self.raw(name, &quote(&base64(value)));
        }
    }

    fn list(&mut self, name: &str, items: Vec<String>) {
        if !items.is_empty() {
            self.raw(name, &format!("[{}]", items.join(",")));
        }
    }

    fn end(mut self) -> String {
        self.out.push('}');
        self.out
    }
}

fn quote(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_else(|_| String::from("\"\""))
}

/// The proto3-JSON form of a `RateLimitResponse`.
pub fn response_to_json(response: &RateLimitResponse) -> String {
    let mut o = Object::new();
    if response.overall_code != 0 {
        o.raw("overallCode", &code(response.overall_code));
    }
    o.list(
        "statuses",
        response.statuses.iter().map(descriptor_status).collect(),
    );
    o.list(
        "responseHeadersToAdd",
        response
            .response_headers_to_add
            .iter()
            .map(header)
            .collect(),
    );
    o.list(
        "requestHeadersToAdd",
        response.request_headers_to_add.iter().map(header).collect(),
    );
    o.bytes("rawBody", &response.raw_body);
    if let Some(metadata) = &response.dynamic_metadata {
        o.raw("dynamicMetadata", &structure(metadata));
    }
    if let Some(q) = &response.quota {
        o.raw("quota", &quota(q));
    }
    o.end()
}

fn code(value: i32) -> String {
    match Code::try_from(value) {
        Ok(code) => quote(code.as_str_name()),
        Err(_) => value.to_string(),
    }
}

fn descriptor_status(status: &DescriptorStatus) -> String {
    let mut o = Object::new();
    if status.code != 0 {
        o.raw("code", &code(status.code));
    }
    if let Some(limit) = &status.current_limit {
        o.raw("currentLimit", &rate_limit(limit));
    }
    o.number("limitRemaining", u64::from(status.limit_remaining));
    if let Some(d) = &status.duration_until_reset {
        o.raw("durationUntilReset", &quote(&duration(d)));
    }
    if let Some(q) = &status.quota {
        o.raw("quota", &quota(q));
    }
    o.end()
}

fn rate_limit(limit: &RateLimit) -> String {
    let mut o = Object::new();
    o.string("name", &limit.name);
    o.number("requestsPerUnit", u64::from(limit.requests_per_unit));
    if limit.unit != 0 {
        let unit = match Unit::try_from(limit.unit) {
            Ok(unit) => quote(unit.as_str_name()),
            Err(_) => limit.unit.to_string(),
        };
        o.raw("unit", &unit);
    }
    if let Some(multiplier) = limit.unit_multiplier {
        // A wrapper is written even when it holds the default value.
        o.raw("unitMultiplier", &multiplier.to_string());
    }
    o.end()
}

fn quota(quota: &Quota) -> String {
    let mut o = Object::new();
    o.number("requests", u64::from(quota.requests));
    if let Some(ExpirationSpecifier::ValidUntil(d)) = &quota.expiration_specifier {
        o.raw("validUntil", &quote(&duration(d)));
    }
    o.string("id", &quota.id);
    o.end()
}

fn header(header: &HeaderValue) -> String {
    let mut o = Object::new();
    o.string("key", &header.key);
    o.string("value", &header.value);
    o.bytes("rawValue", &header.raw_value);
    o.end()
}

/// `google.protobuf.Duration` as proto3 JSON: `"1s"`, `"1.500s"`, `"0.000001s"`, `"-2.5s"`
/// (0, 3, 6 or 9 fractional digits).
pub fn duration(d: &Duration) -> String {
    let negative = d.seconds < 0 || d.nanos < 0;
    let seconds = d.seconds.unsigned_abs();
    let nanos = d.nanos.unsigned_abs();
    let mut out = String::new();
    if negative {
        out.push('-');
    }
    let _ = write!(out, "{seconds}");
    if nanos != 0 {
        if nanos % 1_000_000 == 0 {
            let _ = write!(out, ".{:03}", nanos / 1_000_000);
        } else if nanos % 1_000 == 0 {
            let _ = write!(out, ".{:06}", nanos / 1_000);
        } else {
            let _ = write!(out, ".{nanos:09}");
        }
    }
    out.push('s');
    out
}

fn structure(s: &Struct) -> String {
    let fields: Vec<String> = s
        .fields
        .iter()
        .map(|(name, value)| format!("{}:{}", quote(name), json_value(value)))
        .collect();
    format!("{{{}}}", fields.join(","))
}

fn json_value(value: &Value) -> String {
    match &value.kind {
        None | Some(Kind::NullValue(_)) => "null".into(),
        Some(Kind::NumberValue(n)) if n.is_finite() => {
            serde_json::to_string(n).unwrap_or_else(|_| "null".into())
        }
        Some(Kind::NumberValue(n)) => quote(&n.to_string()),
        Some(Kind::StringValue(s)) => quote(s),
        Some(Kind::BoolValue(b)) => b.to_string(),
        Some(Kind::StructValue(s)) => structure(s),
        Some(Kind::ListValue(ListValue { values })) => format!(
            "[{}]",
            values.iter().map(json_value).collect::<Vec<_>>().join(",")
        ),
    }
}

/// Standard base64 with padding (what proto3 JSON writes for bytes).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_json_and_proto_names() {
        let request = request_from_json(
            br#"{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"},{"key":"only"}],
                 "limit":{"requests_per_unit":"5","unit":"MINUTE","unitMultiplier":2},
                 "hits_addend":"3"}],"hitsAddend":7}"#,
        )
        .unwrap();
        assert_eq!(request.domain, "d");
        assert_eq!(request.hits_addend, 7);
        let d = &request.descriptors[0];
        assert_eq!(d.entries[1].value, "");
        assert_eq!(d.hits_addend, Some(3));
        let limit = d.limit.unwrap();
        assert_eq!(
            (limit.requests_per_unit, limit.unit, limit.unit_multiplier),
            (5, RateLimitUnit::Minute as i32, Some(2))
        );
    }

    #[test]
    fn rejects_what_protojson_rejects() {
        for (body, message) in [
            (&b"not json"[..], "invalid JSON"),
            (b"[]", "expected an object"),
            (br#"{"domain":1}"#, "domain: expected a string"),
            (br#"{"bogus":1}"#, "bogus: unknown field"),
            (br#"{"hitsAddend":-1}"#, "hits_addend"),
            (br#"{"hitsAddend":4294967296}"#, "hits_addend"),
            (br#"{"hitsAddend":1,"hits_addend":1}"#, "given twice"),
            (
                br#"{"descriptors":[{"entries":[{"key":"k","x":1}]}]}"#,
                "descriptors[0].entries[0].x: unknown field",
            ),
            (
                br#"{"descriptors":[{"limit":{"unit":"FORTNIGHT"}}]}"#,
                "descriptors[0].limit.unit: unknown unit",
            ),
        ] {
            let error = request_from_json(body).unwrap_err();
            assert!(error.contains(message), "{error} should contain {message}");
        }
        assert!(request_from_json(br#"{"domain":null,"hitsAddend":2.0}"#).is_ok());
    }

    #[test]
    fn writes_proto3_json() {
        let response = RateLimitResponse {
            overall_code: Code::OverLimit as i32,
            statuses: vec![
                DescriptorStatus {
                    code: Code::OverLimit as i32,
                    current_limit: Some(RateLimit {
                        name: String::new(),
                        requests_per_unit: 2,
                        unit: Unit::Minute as i32,
                        unit_multiplier: None,
                    }),
                    limit_remaining: 0,
                    duration_until_reset: Some(Duration {
                        seconds: 1,
                        nanos: 500_000_000,
                    }),
                    quota: None,
                },
                DescriptorStatus {
                    code: Code::Ok as i32,
                    ..Default::default()
                },
            ],
            response_headers_to_add: vec![HeaderValue {
                key: "a".into(),
                value: "b\"".into(),
                raw_value: b"hi!".to_vec(),
            }],
            ..Default::default()
        };
        assert_eq!(
            response_to_json(&response),
            r#"{"overallCode":"OVER_LIMIT","statuses":[{"code":"OVER_LIMIT","currentLimit":{"requestsPerUnit":2,"unit":"MINUTE"},"durationUntilReset":"1.500s"},{"code":"OK"}],"responseHeadersToAdd":[{"key":"a","value":"b\"","rawValue":"aGkh"}]}"#
        );
        assert_eq!(response_to_json(&RateLimitResponse::default()), "{}");
        assert_eq!(
            duration(&Duration {
                seconds: 0,
                nanos: 1_000
            }),
            "0.000001s"
        );
        assert_eq!(
            duration(&Duration {
                seconds: 60,
                nanos: 0
            }),
            "60s"
        );
        assert_eq!(base64(b"a"), "YQ==");
        assert_eq!(base64(b"ab"), "YWI=");
    }
}
