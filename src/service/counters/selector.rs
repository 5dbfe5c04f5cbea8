//! The selector of `/counters` and `/counters/reset`: `domain=D&descriptor=k=v,k2=v2`, one
//! `descriptor` per descriptor (at least one), read into the request RLS would get for them, so
//! it goes through the same validation and [`RequestBounds`] and reaches only the counters those
//! descriptors' rules count in.
//!
//! Each key and value is percent-decoded on its own after the descriptor is split at `,` (between
//! entries) and at an entry's first `=`, so `%2C` and `%3D` put a comma or an equals sign in a
//! value; `+` is a space.

use super::super::convert::{request_from_proto, Refused};
use crate::limiter::{Request, RequestBounds};
use crate::proto::common::{rate_limit_descriptor::Entry as ProtoEntry, RateLimitDescriptor};
use crate::proto::rls::RateLimitRequest;
use crate::service::query_text::{decode, pairs};

/// Reads `query` (the URI's part after `?`) into the request of its descriptors, refused with a
/// message naming what is wrong. Counts are checked against `bounds` as they are read, so a query
/// of a million commas is refused at the first entry beyond the bound.
pub fn parse(query: Option<&str>, bounds: &RequestBounds) -> Result<Request, String> {
    let mut domain: Option<String> = None;
    let mut descriptors: Vec<RateLimitDescriptor> = Vec::new();
    for (name, value) in pairs(query) {
        match name {
            "domain" => {
                if domain.is_some() {
                    return Err("`domain` is given more than once".to_owned());
                }
                let value =
                    decode(value).ok_or("`domain` is not percent-encoded UTF-8".to_owned())?;
                if value.is_empty() {
                    return Err("`domain` is empty".to_owned());
                }
                domain = Some(value);
            }
            "descriptor" => {
                bounds
                    .check_descriptors(descriptors.len() + 1)
                    .map_err(|exceeded| exceeded.to_string())?;
                descriptors.push(descriptor(descriptors.len(), value, bounds)?);
            }
            _ => {
                return Err(format!(
                    "the selector takes `domain` and `descriptor` only, not `{}`",
                    name.escape_debug()
                ))
            }
        }
    }
    let domain = domain
        .ok_or("`domain` is missing: the selector is `domain=D&descriptor=k=v,k2=v2`".to_owned())?;
    if descriptors.is_empty() {
        return Err(
            "`descriptor` is missing: the selector is `domain=D&descriptor=k=v,k2=v2`".to_owned(),
        );
    }
    let request = RateLimitRequest {
        domain,
        descriptors,
        hits_addend: 0,
    };
    request_from_proto(request, bounds).map_err(|refused| match refused {
        Refused::Bound(exceeded) => exceeded.to_string(),
        Refused::Invalid(message) => message,
    })
}

/// Descriptor `index` from its raw `k=v,k2=v2`.
fn descriptor(
    index: usize,
    raw: &str,
    bounds: &RequestBounds,
) -> Result<RateLimitDescriptor, String> {
    if raw.is_empty() {
        return Err(format!(
            "descriptor {index} is empty: write it as k=v,k2=v2"
        ));
    }
    let mut entries = Vec::new();
    for (position, entry) in raw.split(',').enumerate() {
        bounds
            .check_entries(index, position + 1)
            .map_err(|exceeded| exceeded.to_string())?;
        let Some((key, value)) = entry.split_once('=') else {
            return Err(format!(
                "descriptor {index}: entry {position} (`{}`) is not key=value",
                entry.escape_debug()
            ));
        };
        let text = |part: &str, raw: &str| {
            decode(raw).ok_or_else(|| {
                format!(
                    "descriptor {index}: entry {position}: the {part} is not percent-encoded UTF-8"
                )
            })
        };
        let key = text("key", key)?;
        let value = text("value", value)?;
        bounds
            .check_entry(index, position, &key, &value)
            .map_err(|exceeded| exceeded.to_string())?;
        entries.push(ProtoEntry { key, value });
    }
    Ok(RateLimitDescriptor {
        entries,
        ..RateLimitDescriptor::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::Entry;

    fn bounds() -> RequestBounds {
        RequestBounds::default()
    }

    fn entries(request: &Request, index: usize) -> Vec<(String, String)> {
        request.descriptors[index]
            .entries
            .iter()
            .map(|Entry { key, value }| (key.clone(), value.clone()))
            .collect()
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn reads_the_domain_and_each_descriptor() {
        let request = parse(
            Some(
                "domain=edge&descriptor=api_key=free,path=%2Fv1&descriptor=remote_address=10.0.0.1",
            ),
            &bounds(),
        )
        .unwrap();
        assert_eq!(request.domain, "edge");
        assert_eq!(request.descriptors.len(), 2);
        assert_eq!(
            entries(&request, 0),
            pairs(&[("api_key", "free"), ("path", "/v1")])
        );
        assert_eq!(
            entries(&request, 1),
            pairs(&[("remote_address", "10.0.0.1")])
        );
        assert!(request.descriptors[0].limit_override.is_none());
    }

    #[test]
    fn separators_inside_values_are_escaped_and_empty_values_are_values() {
        let request = parse(
            Some("descriptor=k=a%2Cb%3Dc+d,empty=&domain=d%20x"),
            &bounds(),
        )
        .unwrap();
        assert_eq!(request.domain, "d x");
        assert_eq!(
            entries(&request, 0),
            pairs(&[("k", "a,b=c d"), ("empty", "")])
        );
        let request = parse(Some("domain=d&descriptor=k=v=w"), &bounds()).unwrap();
        assert_eq!(entries(&request, 0), pairs(&[("k", "v=w")]));
    }

    fn refused(query: &str) -> String {
        parse(Some(query), &bounds()).unwrap_err()
    }

    #[test]
    fn malformed_selectors_are_refused_naming_what_is_wrong() {
        assert!(parse(None, &bounds())
            .unwrap_err()
            .contains("`domain` is missing"));
        assert!(refused("descriptor=k=v").contains("`domain` is missing"));
        assert!(refused("domain=d").contains("`descriptor` is missing"));
        assert!(refused("domain=&descriptor=k=v").contains("`domain` is empty"));
        assert!(refused("domain=a&domain=b&descriptor=k=v").contains("more than once"));
        assert!(refused("domain=d&descriptor=").contains("descriptor 0 is empty"));
        let no_value = refused("domain=d&descriptor=k=v,path");
        assert!(
            no_value.contains("descriptor 0: entry 1 (`path`) is not key=value"),
            "{no_value}"
        );
        let empty_key = refused("domain=d&descriptor=k=v&descriptor==v");
        assert!(
            empty_key.contains("descriptor 1") && empty_key.contains("empty key"),
            "{empty_key}"
        );
        let escape = refused("domain=d&descriptor=k=%zz");
        assert!(
            escape.contains("descriptor 0: entry 0: the value"),
            "{escape}"
        );
        assert!(refused("domain=%ff&descriptor=k=v").contains("`domain`"));
        let unknown = refused("domain=d&descriptor=k=v&hits=5");
        assert!(unknown.contains("not `hits`"), "{unknown}");
    }

    #[test]
    fn the_request_bounds_apply_as_they_are_read() {
        let bounds = RequestBounds {
            max_descriptors: 2,
            max_entries: 3,
            max_entry_bytes: 8,
        };
        let query = |descriptors: usize, entries: usize, bytes: usize| {
            let descriptor = vec![format!("k={}", "v".repeat(bytes)); entries].join(",");
            let mut query = "domain=d".to_owned();
            for _ in 0..descriptors {
                query.push_str("&descriptor=");
                query.push_str(&descriptor);
            }
            parse(Some(&query), &bounds)
        };
        assert!(query(2, 3, 8).is_ok());
        let descriptors = query(3, 1, 1).unwrap_err();
        assert!(
            descriptors.contains('3') && descriptors.contains('2'),
            "{descriptors}"
        );
        let entries = query(1, 4, 1).unwrap_err();
        assert!(entries.contains("descriptor 0"), "{entries}");
        let bytes = query(1, 1, 9).unwrap_err();
        assert!(bytes.contains('9') && bytes.contains('8'), "{bytes}");
        let flood = format!("domain=d&descriptor={}", "k=v,".repeat(1_000_000));
        assert!(parse(Some(&flood), &bounds).is_err());
    }
}
