//! A request's header block read into what the RLS port acts on, checked as RFC 9113 §8.2–8.3
//! requires of a request: lowercase names, no connection-specific fields, `te` only as
//! `trailers`, each pseudo-header once and before the other fields, `:method`, `:scheme` and
//! `:path` present, no NUL, CR or LF in a value. Fields the port does not act on are read and
//! dropped without being copied; the trace context (`traceparent`, `tracestate`, B3) is kept for
//! the call's span.

use std::time::Duration;

use super::hpack::{Decoder, HpackError};
use crate::server::call_gate::is_grpc_content_type_text;
use crate::server::grpc_timeout;
use crate::server::unary_rls;

/// `:path` of health `Check`.
pub const HEALTH_CHECK_PATH: &str = "/grpc.health.v1.Health/Check";

/// The methods the port answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    ShouldRateLimit,
    HealthCheck,
    /// Any other path, kept for the answer that says where to call it.
    Other(String),
}

/// What a request head says, once it has been found well formed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallHead {
    pub post: bool,
    pub route: Route,
    pub grpc_content_type: bool,
    /// The client's `grpc-timeout`.
    pub timeout: Option<Duration>,
    /// A `grpc-encoding` other than `identity`.
    pub encoding: Option<String>,
    /// Trace context fields, for the call's span.
    pub trace: Vec<(String, String)>,
    /// The header list's size as SETTINGS_MAX_HEADER_LIST_SIZE counts it (RFC 9113 §6.5.2).
    pub list_size: usize,
}

/// The largest request header list (and header block) the port takes, as
/// SETTINGS_MAX_HEADER_LIST_SIZE advertises it: hyper's default on the gRPC port too. Past it a
/// head's fields are counted but not read.
pub const MAX_HEADER_LIST: usize = 16 << 10;

/// Why a head is not a well-formed request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

/// Reads `block` through `decoder`. `Err(None)` when the block cannot be decoded at all (a
/// connection error: the decoder's table may now differ from the client's).
pub fn read(
    decoder: &mut Decoder,
    block: &[u8],
) -> Result<Result<CallHead, Malformed>, HpackError> {
    let mut reader = Reader::default();
    decoder.decode(block, |name, value| reader.field(name, value))?;
    Ok(reader.finish())
}

/// Reads and drops a trailer block (clients of unary calls send none), keeping the decoder in
/// step; pseudo-headers there make it malformed.
pub fn read_trailers(
    decoder: &mut Decoder,
    block: &[u8],
) -> Result<Result<(), Malformed>, HpackError> {
    let mut pseudo = false;
    decoder.decode(block, |name, _| pseudo |= name.first() == Some(&b':'))?;
    Ok(if pseudo {
        Err(Malformed("a pseudo-header in trailers"))
    } else {
        Ok(())
    })
}

#[derive(Default)]
struct Reader {
    method: Option<bool>,
    scheme: bool,
    path: Option<Route>,
    authority: bool,
    regular_seen: bool,
    grpc_content_type: bool,
    timeout: Option<Duration>,
    encoding: Option<String>,
    trace: Vec<(String, String)>,
    list_size: usize,
    malformed: Option<&'static str>,
}

impl Reader {
    fn field(&mut self, name: &[u8], value: &[u8]) {
        self.list_size = self.list_size.saturating_add(name.len() + value.len() + 32);
        // Past the bound the head is refused for its size: its fields need no more reading (a
        // block of one-byte references to a large table entry would be megabytes of them).
        if self.malformed.is_some() || self.list_size > MAX_HEADER_LIST {
            return;
        }
        if let Err(Malformed(why)) = self.check(name, value) {
            self.malformed = Some(why);
        }
    }

    fn check(&mut self, name: &[u8], value: &[u8]) -> Result<(), Malformed> {
        if value.iter().any(|b| matches!(b, 0 | b'\r' | b'\n')) {
            return Err(Malformed("NUL, CR or LF in a field value"));
        }
        if name.is_empty() || name.iter().any(u8::is_ascii_uppercase) {
            return Err(Malformed("a field name that is empty or not lowercase"));
        }
        if name[0] == b':' {
            if self.regular_seen {
                return Err(Malformed("a pseudo-header after a regular field"));
            }
            return self.pseudo(name, value);
        }
        self.regular_seen = true;
        match name {
            b"connection" | b"proxy-connection" | b"keep-alive" | b"transfer-encoding"
            | b"upgrade" => return Err(Malformed("a connection-specific field")),
            b"te" if value != b"trailers" => return Err(Malformed("te other than trailers")),
            b"content-type" => {
                self.grpc_content_type = std::str::from_utf8(value)
                    .map(is_grpc_content_type_text)
                    .unwrap_or(false);
            }
            b"grpc-timeout" => {
                self.timeout = std::str::from_utf8(value)
                    .ok()
                    .and_then(grpc_timeout::parse);
            }
            b"grpc-encoding" if value != b"identity" => {
                self.encoding = Some(String::from_utf8_lossy(value).into_owned());
            }
            b"traceparent" | b"tracestate" | b"b3" => self.keep_trace(name, value),
            _ if name.starts_with(b"x-b3-") => self.keep_trace(name, value),
            _ => {}
        }
        Ok(())
    }

    fn pseudo(&mut self, name: &[u8], value: &[u8]) -> Result<(), Malformed> {
        let twice = Malformed("a pseudo-header twice");
        match name {
            b":method" if self.method.is_none() => self.method = Some(value == b"POST"),
            b":scheme" if !self.scheme => self.scheme = true,
            b":authority" if !self.authority => self.authority = true,
            b":path" if self.path.is_none() => {
                self.path = Some(match value {
                    v if v == unary_rls::PATH.as_bytes() => Route::ShouldRateLimit,
                    v if v == HEALTH_CHECK_PATH.as_bytes() => Route::HealthCheck,
                    [] => return Err(Malformed("an empty :path")),
                    v => Route::Other(String::from_utf8_lossy(v).into_owned()),
                })
            }
            b":method" | b":scheme" | b":authority" | b":path" => return Err(twice),
            _ => return Err(Malformed("an unknown pseudo-header")),
        }
        Ok(())
    }

    fn keep_trace(&mut self, name: &[u8], value: &[u8]) {
        if let (Ok(name), Ok(value)) = (std::str::from_utf8(name), std::str::from_utf8(value)) {
            self.trace.push((name.to_owned(), value.to_owned()));
        }
    }

    fn finish(self) -> Result<CallHead, Malformed> {
        if let Some(why) = self.malformed {
            return Err(Malformed(why));
        }
        let (Some(post), true, Some(route)) = (self.method, self.scheme, self.path) else {
            return Err(Malformed("no :method, :scheme or :path"));
        };
        Ok(CallHead {
            post,
            route,
            grpc_content_type: self.grpc_content_type,
            timeout: self.timeout,
            encoding: self.encoding,
            trace: self.trace,
            list_size: self.list_size,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::rls_port::frame::{put_indexed_name, put_literal};
    use bytes::BytesMut;

    fn block(fields: &[(&str, &str)]) -> BytesMut {
        let mut out = BytesMut::new();
        for (name, value) in fields {
            put_literal(&mut out, name.as_bytes(), value.as_bytes());
        }
        out
    }

    fn request(extra: &[(&str, &str)]) -> Vec<(&'static str, String)> {
        let mut fields = vec![
            (":method", "POST".to_owned()),
            (":scheme", "http".to_owned()),
            (":path", unary_rls::PATH.to_owned()),
            (":authority", "ratelimit".to_owned()),
            ("content-type", "application/grpc".to_owned()),
        ];
        fields.extend(extra.iter().map(|(n, v)| {
            (
                Box::leak(n.to_string().into_boxed_str()) as &'static str,
                v.to_string(),
            )
        }));
        fields
    }

    fn read_fields(fields: &[(&'static str, String)]) -> Result<CallHead, Malformed> {
        let pairs: Vec<(&str, &str)> = fields.iter().map(|(n, v)| (*n, v.as_str())).collect();
        read(&mut Decoder::default(), &block(&pairs)).unwrap()
    }

    #[test]
    fn a_grpc_call_is_read() {
        let head = read_fields(&request(&[
            ("grpc-timeout", "20m"),
            ("te", "trailers"),
            ("traceparent", "00-abc-def-01"),
            ("user-agent", "envoy"),
        ]))
        .unwrap();
        assert!(head.post && head.grpc_content_type);
        assert_eq!(head.route, Route::ShouldRateLimit);
        assert_eq!(head.timeout, Some(Duration::from_millis(20)));
        assert_eq!(head.encoding, None);
        assert_eq!(
            head.trace,
            vec![("traceparent".to_owned(), "00-abc-def-01".to_owned())]
        );
    }

    #[test]
    fn identity_is_no_encoding_and_others_are_kept() {
        let identity = read_fields(&request(&[("grpc-encoding", "identity")])).unwrap();
        assert_eq!(identity.encoding, None);
        let gzip = read_fields(&request(&[("grpc-encoding", "gzip")])).unwrap();
        assert_eq!(gzip.encoding.as_deref(), Some("gzip"));
    }

    #[test]
    fn malformed_heads_are_refused() {
        let cases: Vec<Vec<(&'static str, String)>> = vec![
            request(&[("Upper", "x")]),
            request(&[("connection", "close")]),
            request(&[("te", "gzip")]),
            request(&[(":path", "/again")]),
            request(&[(":status", "200")]),
            request(&[("x", "a\nb")]),
            {
                let mut late = request(&[]);
                late.push((":method", "GET".to_owned()));
                late
            },
            request(&[])[1..].to_vec(),
        ];
        for case in cases {
            assert!(read_fields(&case).is_err(), "{case:?}");
        }
    }

    #[test]
    fn the_list_size_counts_32_bytes_per_field() {
        let head = read_fields(&request(&[])).unwrap();
        let expected: usize = request(&[])
            .iter()
            .map(|(n, v)| n.len() + v.len() + 32)
            .sum();
        assert_eq!(head.list_size, expected);
    }

    #[test]
    fn other_paths_and_health_check_are_routed() {
        let mut fields = request(&[]);
        fields[2].1 = HEALTH_CHECK_PATH.to_owned();
        assert_eq!(read_fields(&fields).unwrap().route, Route::HealthCheck);
        fields[2].1 = "/grpc.health.v1.Health/Watch".to_owned();
        assert_eq!(
            read_fields(&fields).unwrap().route,
            Route::Other("/grpc.health.v1.Health/Watch".to_owned())
        );
    }

    #[test]
    fn a_block_the_decoder_cannot_read_is_an_error() {
        let mut bad = BytesMut::new();
        put_indexed_name(&mut bad, 200, b"x");
        assert!(read(&mut Decoder::default(), &bad).is_err());
    }
}
