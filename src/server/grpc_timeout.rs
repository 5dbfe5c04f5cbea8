//! The `grpc-timeout` request header: the client's deadline for a call (Envoy sends its filter
//! timeout, 20 ms by default). A call still running at its deadline is dropped and answered
//! DEADLINE_EXCEEDED, as the gRPC protocol specifies, so the server stops working on answers
//! nobody waits for.

use std::time::Duration;

use hyper::HeaderMap;

/// The header's name.
pub const GRPC_TIMEOUT: &str = "grpc-timeout";

/// The deadline `headers` ask for: `TimeoutValue TimeoutUnit`, at most 8 digits followed by one
/// of `H`, `M`, `S`, `m`, `u`, `n`. `None` when absent or malformed (the spec's "infinite").
pub fn requested(headers: &HeaderMap) -> Option<Duration> {
    parse(headers.get(GRPC_TIMEOUT)?.to_str().ok()?)
}

/// A `grpc-timeout` value read as [`requested`] reads it.
pub fn parse(text: &str) -> Option<Duration> {
    let digits = text.len().checked_sub(1)?;
    let (value, unit) = text.split_at(digits);
    if value.is_empty() || value.len() > 8 || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let value: u64 = value.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(value * 3600),
        "M" => Duration::from_secs(value * 60),
        "S" => Duration::from_secs(value),
        "m" => Duration::from_millis(value),
        "u" => Duration::from_micros(value),
        "n" => Duration::from_nanos(value),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(value: &str) -> Option<Duration> {
        let mut headers = HeaderMap::new();
        headers.insert(GRPC_TIMEOUT, value.parse().unwrap());
        requested(&headers)
    }

    #[test]
    fn every_unit_and_the_malformed() {
        assert_eq!(parse("20m"), Some(Duration::from_millis(20)));
        assert_eq!(parse("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse("2M"), Some(Duration::from_secs(120)));
        assert_eq!(parse("3S"), Some(Duration::from_secs(3)));
        assert_eq!(parse("99999999u"), Some(Duration::from_micros(99_999_999)));
        assert_eq!(parse("5n"), Some(Duration::from_nanos(5)));
        assert_eq!(parse("123456789S"), None);
        assert_eq!(parse("S"), None);
        assert_eq!(parse("-1S"), None);
        assert_eq!(parse("10x"), None);
        assert_eq!(requested(&HeaderMap::new()), None);
    }
}
