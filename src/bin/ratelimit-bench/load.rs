//! The load generator: N HTTP/2 connections x M RPCs in flight, closed or open loop.
//!
//! The load generator shares the machine's cores with the server it measures (one core each when
//! pinned), so its own CPU time per request caps the throughput it can show. Its hot path is
//! therefore kept lean. Against the tonic client it replaced (same run, transport ceiling, 2
//! vCPUs): about 12.5 → 8.5 µs of client CPU per request, user time 6.6 → 3.5 µs; the rest is
//! the kernel (loopback TCP, epoll, wakeups: one read, one write and one epoll_wait per ~2
//! responses), as much as before.
//!
//! - gRPC straight over [`h2`], framed by hand ([`Encoder`], [`unframe`]): no tonic `Channel`,
//!   whose tower buffer adds a task hop per RPC and whose codec boxes every body and decodes the
//!   whole response;
//! - request messages encoded from the templates into a reused buffer, no per-request
//!   `String`s or message structs;
//! - of a response only `overall_code` and the number of `statuses` are read
//!   ([`decode_response`]), which is all the counts need;
//! - worker threads each run a current-thread runtime with their connections' driver tasks and
//!   slots: no work stealing, no cross-thread wakeups on the request path (a multi-thread
//!   runtime with one worker cost ~7 % more CPU per request);
//! - one latency histogram per thread rather than per slot (fewer cache lines touched).
//!
//! Tried and not kept: reusing one timer per slot for the per-RPC deadline instead of a
//! `timeout` per RPC made no measurable difference.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::future::poll_fn;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use clap::Args;
use h2::client::SendRequest;
use hdrhistogram::Histogram;
use parking_lot::Mutex;
use ratelimitd::proto::rls::rate_limit_response::Code;
use serde_json::json;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tonic::codegen::http::header::{CONTENT_TYPE, TE};
use tonic::codegen::http::{HeaderMap, HeaderValue, Method, Request, StatusCode, Uri};

use crate::procstat;

#[derive(Args, Clone, Debug)]
pub struct LoadArgs {
    /// Server address: `IP:PORT` or `http://HOST:PORT`.
    #[arg(long, default_value = "127.0.0.1:8081")]
    pub addr: String,
    /// HTTP/2 connections.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    pub connections: u32,
    /// RPCs in flight per connection.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    pub concurrency: u32,
    /// Request domain.
    #[arg(long, default_value = "bench")]
    pub domain: String,
    /// Descriptor key of the default template `KEY=d{i}-{r}` (the bench config has one rule per
    /// algorithm, keyed by the algorithm's name).
    #[arg(long, default_value = "gcra")]
    pub key: String,
    /// Key cardinality: `{r}` is uniform in 0..keys; 1 = one hot counter per descriptor.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub keys: u64,
    /// Descriptors per request (default template only).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub descriptors: u32,
    /// A descriptor template, repeatable (replaces --key/--descriptors): `key=value` entries
    /// separated by `,`; in a value `{r}` is the descriptor's random key number and `{i}` its
    /// index in the request. Example: `--descriptor 'api_key=k{r},path=/v1/items'`.
    #[arg(long = "descriptor")]
    pub templates: Vec<String>,
    /// Request-level hits_addend (0: unset, 1 hit per descriptor).
    #[arg(long, default_value_t = 0)]
    pub hits_addend: u32,
    /// Measured duration (ignored with --requests).
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Measured request count instead of a duration.
    #[arg(long)]
    pub requests: Option<u64>,
    /// Load sent before measuring starts (connections warm, server caches and tables grown).
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub warmup: Duration,
    /// Open loop: this many requests per second in total, on a fixed schedule (request k on
    /// connection k mod N), at most --concurrency in flight per connection.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Report this process's CPU time per request (`/proc/PID/stat`, utime + stime).
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// Also report a store process's CPU time per request (e.g. redis-server).
    #[arg(long)]
    pub store_pid: Option<u32>,
    /// Load generator threads, each a single-threaded runtime driving its share of the
    /// connections (default: the CPUs this process may run on, at most --connections).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Per-RPC deadline; a slower answer counts as an error.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Free text copied into the report.
    #[arg(long, default_value = "")]
    pub label: String,
    /// `NAME=VALUE` copied into the JSON report's `tags` (repeatable; `ratelimit-bench report`
    /// reads `kind`, `store` and `algorithm`).
    #[arg(long = "tag", value_parser = parse_tag)]
    pub tags: Vec<(String, String)>,
    /// Seed of the key generator.
    #[arg(long, default_value_t = 0x5eed)]
    pub seed: u64,
}

fn parse_tag(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("`{text}` is not NAME=VALUE"))
}

pub fn run(args: LoadArgs) -> Result<(), String> {
    if let Some(rate) = args.rate {
        if !(rate.is_finite() && rate > 0.0) {
            return Err("--rate must be a positive number".into());
        }
    }
    let report = drive(Arc::new(args.clone()))?;
    if args.json {
        println!("{}", report.to_json(&args));
    } else {
        print!("{}", report.to_text(&args));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Descriptor templates

#[derive(Debug, Clone)]
enum Piece {
    Text(String),
    Random,
    Index,
}

#[derive(Debug, Clone)]
struct EntryTemplate {
    key: String,
    value: Vec<Piece>,
}

/// The descriptors of every request; values are filled per request.
#[derive(Debug, Clone)]
pub struct Template {
    descriptors: Vec<Vec<EntryTemplate>>,
}

impl Template {
    pub fn from_args(args: &LoadArgs) -> Result<Template, String> {
        let texts: Vec<String> = if args.templates.is_empty() {
            (0..args.descriptors)
                .map(|_| format!("{}=d{{i}}-{{r}}", args.key))
                .collect()
        } else {
            args.templates.clone()
        };
        let descriptors = texts
            .iter()
            .map(|text| parse_descriptor(text))
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Template { descriptors })
    }
}

fn parse_descriptor(text: &str) -> Result<Vec<EntryTemplate>, String> {
    text.split(',')
        .map(|entry| {
            let (key, value) = entry.split_once('=').ok_or_else(|| {
                format!("descriptor template `{text}`: `{entry}` is not key=value")
            })?;
            if key.is_empty() {
                return Err(format!("descriptor template `{text}`: empty key"));
            }
            Ok(EntryTemplate {
                key: key.to_owned(),
                value: parse_value(value),
            })
        })
        .collect()
}

fn parse_value(mut value: &str) -> Vec<Piece> {
    let mut pieces = Vec::new();
    while !value.is_empty() {
        let (next, piece, len) = [("{r}", Piece::Random), ("{i}", Piece::Index)]
            .into_iter()
            .filter_map(|(marker, piece)| value.find(marker).map(|at| (at, piece, marker.len())))
            .min_by_key(|(at, _, _)| *at)
            .unwrap_or((value.len(), Piece::Text(String::new()), 0));
        if next > 0 {
            pieces.push(Piece::Text(value[..next].to_owned()));
        }
        if len > 0 {
            pieces.push(piece);
        }
        value = &value[next + len..];
    }
    pieces
}

/// SplitMix64: small, fast, reproducible.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in 0..n (Lemire's multiply-shift; the bias is below 2^-40 for n < 2^24).
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }
}

// ---------------------------------------------------------------------------------------------
// Protobuf and gRPC framing, by hand
//
// The request is written field by field as prost would encode it (field order, defaults
// omitted: the tests check the bytes against prost's), the response is walked for two fields.

/// `RateLimitRequest.domain` (1), `.descriptors` (2), `RateLimitDescriptor.entries` (1),
/// `Entry.key` (1) and `Entry.value` (2): length-delimited fields.
const TAG_1_LEN: u8 = 1 << 3 | 2;
const TAG_2_LEN: u8 = 2 << 3 | 2;
/// `RateLimitRequest.hits_addend` (3): varint.
const TAG_3_VARINT: u8 = 3 << 3;
/// The gRPC message prefix: compressed flag (1 byte), message length (4 bytes, big endian).
const GRPC_PREFIX: usize = 5;

fn varint_len(value: u64) -> usize {
    // 7 bits per byte; 0 still takes one.
    (64 - (value | 1).leading_zeros() as usize).div_ceil(7)
}

fn put_varint(buf: &mut BytesMut, mut value: u64) {
    while value >= 0x80 {
        buf.put_u8(value as u8 | 0x80);
        value >>= 7;
    }
    buf.put_u8(value as u8);
}

/// A length-delimited field's size on the wire: tag, length, content.
fn field_len(content: usize) -> usize {
    1 + varint_len(content as u64) + content
}

fn decimal_len(value: u64) -> usize {
    value
        .checked_ilog10()
        .map_or(1, |digits| digits as usize + 1)
}

fn put_decimal(buf: &mut BytesMut, mut value: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    buf.put_slice(&digits[at..]);
}

/// One entry of a descriptor template, ready to encode.
#[derive(Debug)]
struct EntryCode {
    /// The `key` field, encoded once.
    key: Vec<u8>,
    value: Vec<Piece>,
}

impl EntryCode {
    fn value_len(&self, index: u64, random: u64) -> usize {
        self.value
            .iter()
            .map(|piece| match piece {
                Piece::Text(text) => text.len(),
                Piece::Random => decimal_len(random),
                Piece::Index => decimal_len(index),
            })
            .sum()
    }

    /// The `Entry` message's size (without its own tag and length).
    fn len(&self, value_len: usize) -> usize {
        // An empty value is the default: omitted, as prost does.
        self.key.len()
            + if value_len > 0 {
                field_len(value_len)
            } else {
                0
            }
    }

    fn encode(&self, index: u64, random: u64, buf: &mut BytesMut) {
        let value_len = self.value_len(index, random);
        buf.put_u8(TAG_1_LEN);
        put_varint(buf, self.len(value_len) as u64);
        buf.put_slice(&self.key);
        if value_len == 0 {
            return;
        }
        buf.put_u8(TAG_2_LEN);
        put_varint(buf, value_len as u64);
        for piece in &self.value {
            match piece {
                Piece::Text(text) => buf.put_slice(text.as_bytes()),
                Piece::Random => put_decimal(buf, random),
                Piece::Index => put_decimal(buf, index),
            }
        }
    }
}

/// Writes each request, gRPC prefix included, straight from the templates: the constant parts
/// (domain, entry keys, hits_addend) are encoded once; per request only the values' numbers are
/// drawn and printed.
#[derive(Debug)]
pub struct Encoder {
    /// The `domain` field, encoded once (empty for an empty domain).
    domain: Vec<u8>,
    descriptors: Vec<Vec<EntryCode>>,
    /// The `hits_addend` field, encoded once (empty when 0).
    hits_addend: Vec<u8>,
    keys: u64,
    /// An upper bound of one encoded request, prefix included.
    max_len: usize,
}

impl Encoder {
    pub fn new(template: &Template, domain: &str, hits_addend: u32, keys: u64) -> Encoder {
        let mut field = BytesMut::new();
        if !domain.is_empty() {
            field.put_u8(TAG_1_LEN);
            put_varint(&mut field, domain.len() as u64);
            field.put_slice(domain.as_bytes());
        }
        let domain = field.split().to_vec();
        if hits_addend != 0 {
            field.put_u8(TAG_3_VARINT);
            put_varint(&mut field, u64::from(hits_addend));
        }
        let hits_addend = field.split().to_vec();
        let descriptors: Vec<Vec<EntryCode>> = template
            .descriptors
            .iter()
            .map(|entries| {
                entries
                    .iter()
                    .map(|entry| {
                        field.put_u8(TAG_1_LEN);
                        put_varint(&mut field, entry.key.len() as u64);
                        field.put_slice(entry.key.as_bytes());
                        EntryCode {
                            key: field.split().to_vec(),
                            value: entry.value.clone(),
                        }
                    })
                    .collect()
            })
            .collect();
        // Each number at most 20 digits, each length at most 10 bytes.
        let max_len = GRPC_PREFIX
            + domain.len()
            + hits_addend.len()
            + descriptors
                .iter()
                .map(|entries| {
                    11 + entries
                        .iter()
                        .map(|entry| {
                            let value: usize = entry
                                .value
                                .iter()
                                .map(|piece| match piece {
                                    Piece::Text(text) => text.len(),
                                    Piece::Random | Piece::Index => 20,
                                })
                                .sum();
                            11 + entry.key.len() + 11 + value
                        })
                        .sum::<usize>()
                })
                .sum::<usize>();
        Encoder {
            domain,
            descriptors,
            hits_addend,
            keys,
            max_len,
        }
    }

    /// Encodes the next request: a random key number per descriptor (`{r}`, uniform in
    /// 0..keys), drawn in descriptor order. `buf` is a scratch buffer kept by the caller: the
    /// request is split off it, so the same memory serves again once the connection has
    /// written the requests split off before (no allocation per request).
    fn encode(&self, rng: &mut SplitMix, buf: &mut BytesMut) -> Bytes {
        buf.clear();
        buf.reserve(self.max_len);
        buf.put_slice(&[0; GRPC_PREFIX]);
        buf.put_slice(&self.domain);
        for (index, entries) in self.descriptors.iter().enumerate() {
            let index = index as u64;
            let random = if self.keys <= 1 {
                0
            } else {
                rng.below(self.keys)
            };
            let len: usize = entries
                .iter()
                .map(|entry| field_len(entry.len(entry.value_len(index, random))))
                .sum();
            buf.put_u8(TAG_2_LEN);
            put_varint(buf, len as u64);
            for entry in entries {
                entry.encode(index, random, buf);
            }
        }
        buf.put_slice(&self.hits_addend);
        // Requests are far below 4 GiB (max_len bounds them).
        let len = (buf.len() - GRPC_PREFIX) as u32;
        buf[1..GRPC_PREFIX].copy_from_slice(&len.to_be_bytes());
        buf.split().freeze()
    }

    fn descriptor_count(&self) -> usize {
        self.descriptors.len()
    }
}

/// The single message of a unary response body: uncompressed (none was negotiated) and exactly
/// as long as its prefix says.
fn unframe(body: &[u8]) -> Result<&[u8], &'static str> {
    let Some((prefix, message)) = body.split_first_chunk::<GRPC_PREFIX>() else {
        return Err(if body.is_empty() {
            "no response message"
        } else {
            "truncated gRPC message prefix"
        });
    };
    if prefix[0] != 0 {
        return Err("compressed response (no compression was negotiated)");
    }
    let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
    match message.len().cmp(&len) {
        std::cmp::Ordering::Equal => Ok(message),
        std::cmp::Ordering::Less => Err("truncated response message"),
        std::cmp::Ordering::Greater => Err("more than one response message"),
    }
}

fn read_varint(input: &mut &[u8]) -> Result<u64, &'static str> {
    let mut value = 0u64;
    for (at, &byte) in input.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * at);
        if byte < 0x80 {
            *input = &input[at + 1..];
            return Ok(value);
        }
    }
    Err("bad varint")
}

fn skip(input: &mut &[u8], len: u64) -> Result<(), &'static str> {
    let len = usize::try_from(len).map_err(|_| "field too long")?;
    *input = input.get(len..).ok_or("truncated field")?;
    Ok(())
}

/// What the counts need of a `RateLimitResponse`: `overall_code` (field 1) and how many
/// `statuses` (field 2) it has. Every other field is skipped by its wire type, unparsed.
fn decode_response(mut message: &[u8]) -> Result<Answer, &'static str> {
    let mut answer = Answer {
        overall_code: 0,
        statuses: 0,
    };
    while !message.is_empty() {
        let key = read_varint(&mut message)?;
        let (field, wire_type) = (key >> 3, key & 7);
        match (field, wire_type) {
            (0, _) => return Err("field number 0"),
            // An enum is an int32: the low 32 bits, as prost reads it; the last one wins.
            (1, 0) => answer.overall_code = read_varint(&mut message)? as i32,
            (1, _) => return Err("overall_code is not a varint"),
            (2, 2) => {
                let len = read_varint(&mut message)?;
                skip(&mut message, len)?;
                answer.statuses += 1;
            }
            (2, _) => return Err("statuses is not length-delimited"),
            (_, 0) => {
                read_varint(&mut message)?;
            }
            (_, 1) => skip(&mut message, 8)?,
            (_, 2) => {
                let len = read_varint(&mut message)?;
                skip(&mut message, len)?;
            }
            (_, 5) => skip(&mut message, 4)?,
            _ => return Err("unsupported wire type"),
        }
    }
    Ok(answer)
}

/// The part of a response the counts need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Answer {
    overall_code: i32,
    statuses: usize,
}

/// Why an RPC brought no answer.
#[derive(Debug)]
enum Failure {
    /// No answer before the deadline (`--timeout`).
    Timeout,
    /// A non-OK `grpc-status`, with its `grpc-message`.
    Status(tonic::Code, String),
    /// The connection was gone and a new one could not be opened.
    Connect(String),
    /// HTTP/2 failed: the stream was reset, or the connection broke under it.
    Transport(h2::Error),
    /// An HTTP status other than 200.
    Http(StatusCode),
    /// A body or status gRPC or protobuf cannot read.
    Malformed(&'static str),
}

impl Failure {
    /// The error kind it is counted under (tonic's `Code: message` for statuses, as before).
    fn kind(&self) -> String {
        match self {
            Failure::Timeout => "client timeout".into(),
            Failure::Status(code, message) => format!("{code:?}: {message}"),
            Failure::Connect(why) => why.clone(),
            Failure::Transport(error) => format!("transport: {error}"),
            Failure::Http(status) => format!("HTTP status {status}"),
            Failure::Malformed(why) => format!("malformed response: {why}"),
        }
    }
}

/// The `grpc-status` in `headers`: `None` without one, `Some(Ok)` for 0, else the failure.
fn grpc_status(headers: &HeaderMap) -> Option<Result<(), Failure>> {
    let status = headers.get("grpc-status")?;
    if status.as_bytes() == b"0" {
        return Some(Ok(()));
    }
    let message = headers
        .get("grpc-message")
        .map(|message| percent_decode(message.as_bytes()))
        .unwrap_or_default();
    Some(Err(Failure::Status(
        tonic::Code::from_bytes(status.as_bytes()),
        message,
    )))
}

/// `grpc-message` is percent-encoded (gRPC over HTTP/2 spec); errors only, not the hot path.
fn percent_decode(text: &[u8]) -> String {
    let mut bytes = Vec::with_capacity(text.len());
    let mut at = 0;
    while at < text.len() {
        let hex = text
            .get(at + 1..at + 3)
            .filter(|hex| hex.iter().all(u8::is_ascii_hexdigit))
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match (text[at], hex) {
            (b'%', Some(byte)) => {
                bytes.push(byte);
                at += 3;
            }
            (byte, _) => {
                bytes.push(byte);
                at += 1;
            }
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// A response body as it arrives: usually one DATA frame, kept as is; copied only when the
/// message is split over several.
#[derive(Default)]
struct Body {
    first: Option<Bytes>,
    joined: Vec<u8>,
}

impl Body {
    fn push(&mut self, chunk: Bytes) {
        if self.first.is_none() && self.joined.is_empty() {
            self.first = Some(chunk);
            return;
        }
        if let Some(first) = self.first.take() {
            self.joined.extend_from_slice(&first);
        }
        self.joined.extend_from_slice(&chunk);
    }

    fn as_slice(&self) -> &[u8] {
        match &self.first {
            Some(first) => first,
            None => &self.joined,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Connections

/// The full method name, `:path` of every request.
const METHOD_PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
/// HTTP/2 flow-control windows, hyper's (thus tonic's) client defaults: responses never wait for
/// a WINDOW_UPDATE, and few are sent.
const STREAM_WINDOW: u32 = 2 * 1024 * 1024;
const CONNECTION_WINDOW: u32 = 5 * 1024 * 1024;
/// Cancelled streams (timeouts) h2 remembers, so that their late response frames are dropped
/// quietly; with h2's default (10) a burst of timeouts makes late frames protocol errors, and
/// after 1024 of those h2 closes the connection (`too_many_internal_resets`).
const RESET_STREAMS: usize = 4096;
/// After a failed reconnect, requests fail without trying again for this long, and a
/// closed-loop slot pauses as long (no busy loop against a server that is down).
const RECONNECT_BACKOFF: Duration = Duration::from_millis(10);

/// Where to connect and what every request's head is.
#[derive(Debug)]
struct Target {
    /// As given and reported: `http://HOST:PORT`.
    url: String,
    /// `HOST:PORT` to connect to.
    socket: String,
    /// `:scheme`, `:authority` and `:path` of the requests.
    uri: Uri,
    /// `content-type: application/grpc`, `te: trailers`.
    headers: HeaderMap,
}

impl Target {
    fn parse(addr: &str) -> Result<Target, String> {
        let url = if addr.contains("://") {
            addr.to_owned()
        } else {
            format!("http://{addr}")
        };
        let bad = |why: String| format!("bad address {url}: {why}");
        let parsed: Uri = url.parse().map_err(|e| bad(format!("{e}")))?;
        if parsed.scheme_str() != Some("http") {
            return Err(bad("only http:// (HTTP/2 without TLS) is supported".into()));
        }
        let authority = parsed.authority().ok_or_else(|| bad("no host".into()))?;
        let socket = format!(
            "{}:{}",
            authority.host(),
            authority.port_u16().unwrap_or(80)
        );
        let uri = Uri::builder()
            .scheme("http")
            .authority(authority.clone())
            .path_and_query(METHOD_PATH)
            .build()
            .map_err(|e| bad(format!("{e}")))?;
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
        headers.insert(TE, HeaderValue::from_static("trailers"));
        Ok(Target {
            url,
            socket,
            uri,
            headers,
        })
    }

    /// The head of one ShouldRateLimit request (h2 takes one by value per stream).
    fn request(&self) -> Request<()> {
        let mut request = Request::new(());
        *request.method_mut() = Method::POST;
        *request.uri_mut() = self.uri.clone();
        *request.headers_mut() = self.headers.clone();
        request
    }
}

/// Opens an HTTP/2 connection (prior knowledge, TCP_NODELAY as tonic sets it) and spawns its
/// driver task on the current runtime.
async fn connect(target: &Target) -> Result<SendRequest<Bytes>, String> {
    let cannot = |e: &dyn std::fmt::Display| format!("cannot connect to {}: {e}", target.url);
    let tcp = TcpStream::connect(&target.socket)
        .await
        .map_err(|e| cannot(&e))?;
    tcp.set_nodelay(true).map_err(|e| cannot(&e))?;
    let (send, connection) = h2::client::Builder::new()
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_concurrent_reset_streams(RESET_STREAMS)
        .enable_push(false)
        .handshake::<_, Bytes>(tcp)
        .await
        .map_err(|e| cannot(&e))?;
    tokio::spawn(async move {
        // Runs until the connection closes or fails; its streams then fail, and the next
        // request finds it gone and reconnects ([`Link::ready`]).
        let _ = connection.await;
    });
    Ok(send)
}

/// One of the N connections, shared by its M slots. Its driver task and its slots run on one
/// worker thread: the locks are never contended, they only make it shareable between tasks.
struct Link {
    target: Arc<Target>,
    current: Mutex<Current>,
    /// Held while reconnecting, so that the slots finding the connection gone open one, not M.
    reconnecting: tokio::sync::Mutex<()>,
    /// Open loop: the connection's M slots.
    slots: Arc<Semaphore>,
}

/// A link's connection, replaced when found gone (as a tonic `Channel` reconnects).
struct Current {
    /// Bumped by each reconnect.
    generation: u64,
    send: SendRequest<Bytes>,
    /// The last failed reconnect, when and why: within [`RECONNECT_BACKOFF`] of it, requests
    /// fail with the same error instead of each trying again.
    failed: Option<(Instant, String)>,
}

/// The connection a slot uses: its generation and its handle.
type Sender = (u64, SendRequest<Bytes>);

impl Link {
    fn new(target: Arc<Target>, send: SendRequest<Bytes>, concurrency: usize) -> Link {
        Link {
            target,
            current: Mutex::new(Current {
                generation: 0,
                send,
                failed: None,
            }),
            reconnecting: tokio::sync::Mutex::new(()),
            slots: Arc::new(Semaphore::new(concurrency)),
        }
    }

    fn sender(&self) -> Sender {
        let current = self.current.lock();
        (current.generation, current.send.clone())
    }

    /// Replaces the connection of `generation`, found gone, unless another slot already has
    /// (or failed to, moments ago); returns the connection to use from now on.
    async fn reconnect(&self, generation: u64) -> Result<Sender, String> {
        let _one_at_a_time = self.reconnecting.lock().await;
        {
            let current = self.current.lock();
            if current.generation != generation {
                return Ok((current.generation, current.send.clone()));
            }
            if let Some((at, why)) = &current.failed {
                if at.elapsed() < RECONNECT_BACKOFF {
                    return Err(why.clone());
                }
            }
        }
        let connected = connect(&self.target).await;
        let mut current = self.current.lock();
        match connected {
            Ok(send) => {
                current.generation += 1;
                current.send = send;
                current.failed = None;
                Ok((current.generation, current.send.clone()))
            }
            Err(why) => {
                current.failed = Some((Instant::now(), why.clone()));
                Err(why)
            }
        }
    }

    /// Waits until `sender` may open a stream; if its connection is gone (closed by the
    /// server, or broken), switches it to a new one first.
    async fn ready(&self, sender: &mut Sender) -> Result<(), Failure> {
        if poll_fn(|cx| sender.1.poll_ready(cx)).await.is_ok() {
            return Ok(());
        }
        *sender = self.reconnect(sender.0).await.map_err(Failure::Connect)?;
        poll_fn(|cx| sender.1.poll_ready(cx))
            .await
            .map_err(Failure::Transport)
    }
}

/// One ShouldRateLimit call on `link`, with `sender` (a slot's, reconnected if need be): the
/// request head, `body` (a framed request) and then the response's head, body and trailers.
async fn exchange(link: &Link, sender: &mut Sender, body: Bytes) -> Result<Answer, Failure> {
    link.ready(sender).await?;
    let (response, mut stream) = sender
        .1
        .send_request(link.target.request(), false)
        .map_err(Failure::Transport)?;
    stream.send_data(body, true).map_err(Failure::Transport)?;
    let (head, mut recv) = response.await.map_err(Failure::Transport)?.into_parts();
    if head.status != StatusCode::OK {
        return Err(Failure::Http(head.status));
    }
    // A trailers-only response (errors) has its grpc-status in the head.
    if let Some(Err(failure)) = grpc_status(&head.headers) {
        return Err(failure);
    }
    let mut body = Body::default();
    while let Some(chunk) = recv.data().await {
        let chunk = chunk.map_err(Failure::Transport)?;
        // Give the window back, or the connection stalls once 5 MiB have been received.
        let _ = recv.flow_control().release_capacity(chunk.len());
        body.push(chunk);
    }
    let trailers = recv.trailers().await.map_err(Failure::Transport)?;
    let status = trailers
        .as_ref()
        .and_then(grpc_status)
        .or_else(|| grpc_status(&head.headers));
    match status {
        Some(Ok(())) => decode_response(unframe(body.as_slice()).map_err(Failure::Malformed)?)
            .map_err(Failure::Malformed),
        Some(Err(failure)) => Err(failure),
        None => Err(Failure::Malformed("no grpc-status")),
    }
}

/// A timer deadline `timeout` after `start`; a huge `--timeout` (no deadline, in effect) is
/// capped at 30 years so that the addition cannot overflow.
fn deadline(start: Instant, timeout: Duration) -> tokio::time::Instant {
    const FAR: Duration = Duration::from_secs(30 * 365 * 86_400);
    tokio::time::Instant::from_std(start + timeout.min(FAR))
}

// ---------------------------------------------------------------------------------------------
// Running

/// Open loop: the pacer sleeps at least this long between releases.
const PACER_TICK: Duration = Duration::from_micros(200);
/// Open loop: and at most this long, so that it notices the end of a `--requests` run.
const PACER_MAX_SLEEP: Duration = Duration::from_millis(50);

/// Phases shared by every slot.
struct Plan {
    /// Open loop: the schedule's time 0.
    origin: Instant,
    /// Measurement starts (warmup ends).
    measure_start: Instant,
    /// No request starts at or after this instant.
    end: Instant,
    /// Measured requests still to send (`--requests`).
    budget: Option<AtomicI64>,
    stop: AtomicBool,
}

impl Plan {
    /// Whether a request due at `start` may go, and whether it is measured.
    fn admit(&self, start: Instant) -> Option<bool> {
        if start >= self.end || self.stop.load(Ordering::Relaxed) {
            return None;
        }
        let measured = start >= self.measure_start;
        if measured {
            if let Some(budget) = &self.budget {
                if budget.fetch_sub(1, Ordering::Relaxed) <= 0 {
                    self.stop.store(true, Ordering::Relaxed);
                    return None;
                }
            }
        }
        Some(measured)
    }
}

/// What the slots of one thread saw.
struct Tally {
    latency_ns: Histogram<u64>,
    ok: u64,
    over_limit: u64,
    unknown: u64,
    /// Responses whose status count differs from the descriptor count.
    malformed: u64,
    errors: BTreeMap<String, u64>,
    /// Open loop: requests that found every slot of their connection busy at their scheduled
    /// time.
    late: u64,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            // 1 ns .. 100 s, 3 significant digits.
            latency_ns: Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("histogram"),
            ok: 0,
            over_limit: 0,
            unknown: 0,
            malformed: 0,
            errors: BTreeMap::new(),
            late: 0,
        }
    }

    fn merge(&mut self, other: Tally) {
        let _ = self.latency_ns.add(&other.latency_ns);
        self.ok += other.ok;
        self.over_limit += other.over_limit;
        self.unknown += other.unknown;
        self.malformed += other.malformed;
        self.late += other.late;
        for (error, count) in other.errors {
            *self.errors.entry(error).or_default() += count;
        }
    }

    fn errors(&self) -> u64 {
        self.errors.values().sum::<u64>() + self.malformed
    }

    fn requests(&self) -> u64 {
        self.ok + self.over_limit + self.unknown + self.errors()
    }

    /// Records one measured RPC: its latency and its outcome.
    fn record(&mut self, latency: Duration, outcome: &Result<Answer, Failure>, expected: usize) {
        self.latency_ns
            .saturating_record(latency.as_nanos().min(u128::from(u64::MAX)) as u64);
        match outcome {
            Err(failure) => *self.errors.entry(failure.kind()).or_default() += 1,
            Ok(answer) if answer.statuses != expected => self.malformed += 1,
            Ok(answer) => match Code::try_from(answer.overall_code) {
                Ok(Code::Ok) => self.ok += 1,
                Ok(Code::OverLimit) => self.over_limit += 1,
                _ => self.unknown += 1,
            },
        }
    }
}

/// CPU counters at one instant.
#[derive(Debug, Clone, Copy)]
struct Snapshot {
    at: Instant,
    server_us: Option<u64>,
    store_us: Option<u64>,
    client_us: Option<u64>,
}

impl Snapshot {
    fn take(args: &LoadArgs) -> Snapshot {
        Snapshot {
            at: Instant::now(),
            server_us: args.server_pid.and_then(procstat::cpu_us),
            store_us: args.store_pid.and_then(procstat::cpu_us),
            client_us: procstat::self_cpu_us(),
        }
    }
}

pub struct Report {
    tally: Tally,
    elapsed: Duration,
    before: Snapshot,
    after: Snapshot,
    target: String,
}

/// Runs the load: worker threads connect, the clock starts once every connection is up, this
/// thread takes the CPU snapshots at the start and the end of the measurement.
fn drive(args: Arc<LoadArgs>) -> Result<Report, String> {
    let template = Template::from_args(&args)?;
    let encoder = Arc::new(Encoder::new(
        &template,
        &args.domain,
        args.hits_addend,
        args.keys,
    ));
    let target = Arc::new(Target::parse(&args.addr)?);
    let interval = match args.rate {
        Some(rate) => Some(
            Duration::try_from_secs_f64(1.0 / rate).map_err(|e| format!("--rate {rate}: {e}"))?,
        ),
        None => None,
    };
    let connections = args.connections as usize;
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .clamp(1, connections);

    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let mut workers = Vec::with_capacity(threads);
    let mut starts = Vec::with_capacity(threads);
    let mut dues = Vec::with_capacity(threads);
    for thread in 0..threads {
        let (start_tx, start) = oneshot::channel();
        let (due_tx, due_rx) = match interval {
            Some(_) => {
                let (tx, rx) = mpsc::unbounded_channel();
                (Some(tx), Some(rx))
            }
            None => (None, None),
        };
        let worker = Worker {
            thread,
            connections: (thread..connections).step_by(threads).collect(),
            target: target.clone(),
            encoder: encoder.clone(),
            args: args.clone(),
            ready: ready_tx.clone(),
            start,
            dues: due_rx,
        };
        let handle = std::thread::Builder::new()
            .name(format!("load-{thread}"))
            .spawn(move || worker.run())
            .map_err(|e| format!("cannot start a load thread: {e}"))?;
        workers.push(handle);
        starts.push(start_tx);
        dues.extend(due_tx);
    }
    drop(ready_tx);

    // Every connection up (or the first failure) before the clock starts.
    let mut failure = None;
    for _ in 0..threads {
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                failure.get_or_insert(error);
            }
            Err(_) => {
                failure.get_or_insert_with(|| "a load thread ended early".into());
            }
        }
    }
    if let Some(error) = failure {
        drop(starts); // the other threads stop without sending anything
        for worker in workers {
            let _ = worker.join();
        }
        return Err(error);
    }

    let origin = Instant::now();
    let measure_start = origin + args.warmup;
    let end = match args.requests {
        Some(_) => origin + Duration::from_secs(365 * 86_400),
        None => measure_start + args.duration,
    };
    let plan = Arc::new(Plan {
        origin,
        measure_start,
        end,
        budget: args.requests.map(|n| n as i64).map(AtomicI64::new),
        stop: AtomicBool::new(false),
    });
    for start in starts {
        let _ = start.send(plan.clone());
    }
    let pacer = match interval {
        Some(interval) => {
            let plan = plan.clone();
            Some(
                std::thread::Builder::new()
                    .name("pacer".into())
                    .spawn(move || pace(interval, &plan, &dues, connections))
                    .map_err(|e| format!("cannot start the pacer thread: {e}"))?,
            )
        }
        None => None,
    };

    std::thread::sleep(measure_start.saturating_duration_since(Instant::now()));
    let before = Snapshot::take(&args);
    let join = |workers: Vec<std::thread::JoinHandle<Result<Tally, String>>>| {
        let mut tally = Tally::new();
        let mut failure = None;
        for worker in workers {
            match worker.join() {
                Ok(Ok(part)) => tally.merge(part),
                Ok(Err(error)) => failure = Some(error),
                Err(_) => failure = Some("load thread panicked".into()),
            }
        }
        failure.map_or(Ok(tally), Err)
    };
    let (tally, after) = if args.requests.is_none() {
        std::thread::sleep(end.saturating_duration_since(Instant::now()));
        let after = Snapshot::take(&args);
        (join(workers), after)
    } else {
        let tally = join(workers);
        (tally, Snapshot::take(&args))
    };
    plan.stop.store(true, Ordering::Relaxed);
    if let Some(pacer) = pacer {
        let _ = pacer.join();
    }
    Ok(Report {
        tally: tally?,
        elapsed: after.at.saturating_duration_since(before.at),
        before,
        after,
        target: target.url.clone(),
    })
}

/// One worker thread: a current-thread runtime running some of the connections and their slots.
struct Worker {
    thread: usize,
    /// Indices of its connections among all N (`thread`, `thread + threads`, ...).
    connections: Vec<usize>,
    target: Arc<Target>,
    encoder: Arc<Encoder>,
    args: Arc<LoadArgs>,
    /// Tells the main thread that the connections are up, or why not.
    ready: std::sync::mpsc::Sender<Result<(), String>>,
    /// The plan, once every thread is ready; dropped unsent if another thread failed.
    start: oneshot::Receiver<Arc<Plan>>,
    /// Open loop: the pacer's due requests for this thread's connections.
    dues: Option<mpsc::UnboundedReceiver<Vec<Due>>>,
}

impl Worker {
    fn run(self) -> Result<Tally, String> {
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime,
            Err(e) => {
                let error = format!("cannot start the runtime: {e}");
                let _ = self.ready.send(Err(error.clone()));
                return Err(error);
            }
        };
        runtime.block_on(self.load())
    }

    async fn load(self) -> Result<Tally, String> {
        let concurrency = self.args.concurrency as usize;
        let mut links = Vec::with_capacity(self.connections.len());
        for _ in &self.connections {
            match connect(&self.target).await {
                Ok(send) => links.push(Arc::new(Link::new(self.target.clone(), send, concurrency))),
                Err(error) => {
                    let _ = self.ready.send(Err(error.clone()));
                    return Err(error);
                }
            }
        }
        // Sent and dropped now: the main thread counts on every sender being gone once each
        // thread has reported (or died).
        let _ = self.ready.send(Ok(()));
        drop(self.ready);
        let Ok(plan) = self.start.await else {
            return Ok(Tally::new());
        };
        let tally = Arc::new(Mutex::new(Tally::new()));
        match self.dues {
            None => {
                let mut slots = Vec::with_capacity(links.len() * concurrency);
                for (link, &connection) in links.iter().zip(&self.connections) {
                    for slot in 0..concurrency {
                        slots.push(tokio::spawn(closed_slot(
                            connection * concurrency + slot,
                            link.clone(),
                            plan.clone(),
                            self.encoder.clone(),
                            tally.clone(),
                            self.args.clone(),
                        )));
                    }
                }
                for slot in slots {
                    slot.await.map_err(|e| format!("load task failed: {e}"))?;
                }
            }
            Some(dues) => {
                open_loop(
                    self.thread,
                    &links,
                    dues,
                    &plan,
                    &self.encoder,
                    &tally,
                    &self.args,
                )
                .await?;
            }
        }
        let tally = std::mem::replace(&mut *tally.lock(), Tally::new());
        Ok(tally)
    }
}

/// Closed loop: each slot sends its next RPC as soon as the previous one is answered.
async fn closed_slot(
    index: usize,
    link: Arc<Link>,
    plan: Arc<Plan>,
    encoder: Arc<Encoder>,
    tally: Arc<Mutex<Tally>>,
    args: Arc<LoadArgs>,
) {
    let mut rng = SplitMix(args.seed ^ (index as u64).wrapping_mul(0xA076_1D64_78BD_642F));
    let mut buf = BytesMut::new();
    let mut sender = link.sender();
    loop {
        let start = Instant::now();
        let Some(measured) = plan.admit(start) else {
            break;
        };
        let body = encoder.encode(&mut rng, &mut buf);
        let exchange = exchange(&link, &mut sender, body);
        let outcome = tokio::time::timeout_at(deadline(start, args.timeout), exchange)
            .await
            .unwrap_or(Err(Failure::Timeout));
        if measured {
            tally
                .lock()
                .record(start.elapsed(), &outcome, encoder.descriptor_count());
        }
        if let Err(Failure::Connect(_)) = outcome {
            tokio::time::sleep(RECONNECT_BACKOFF).await;
        }
    }
}

/// Open loop: one request due at `at` on the thread's `link`-th connection.
struct Due {
    at: Instant,
    link: usize,
}

/// Open loop: the pacer releases the requests as they fall due (std sleeps, about 0.1 ms
/// precise, unlike the runtime's 1 ms timer wheel; at high rates it wakes every
/// [`PACER_TICK`] and releases what fell due meanwhile, so the load generator does not spend a
/// thread wakeup per request). Request k goes to connection k mod N, so each connection gets its
/// share of the schedule, as evenly spaced.
fn pace(
    interval: Duration,
    plan: &Plan,
    threads: &[mpsc::UnboundedSender<Vec<Due>>],
    connections: usize,
) {
    let due = |k: u32| {
        interval
            .checked_mul(k)
            .and_then(|offset| plan.origin.checked_add(offset))
            .filter(|&at| at < plan.end)
    };
    let mut k: u32 = 0;
    loop {
        let now = Instant::now();
        let mut batches: Vec<Vec<Due>> = threads.iter().map(|_| Vec::new()).collect();
        let mut next = due(k);
        while let Some(at) = next.filter(|&at| at <= now) {
            let connection = k as usize % connections;
            batches[connection % threads.len()].push(Due {
                at,
                link: connection / threads.len(),
            });
            k = k.saturating_add(1);
            next = due(k);
        }
        for (thread, batch) in threads.iter().zip(batches) {
            if !batch.is_empty() && thread.send(batch).is_err() {
                return;
            }
        }
        let Some(next) = next else {
            return;
        };
        if plan.stop.load(Ordering::Relaxed) {
            return;
        }
        std::thread::sleep(
            next.saturating_duration_since(now)
                .clamp(PACER_TICK, PACER_MAX_SLEEP),
        );
    }
}

/// Open loop on one thread: each due request runs on one of its connection's M slots. A request
/// that finds a free slot is timed from its send; one that has to wait for a slot (every slot
/// busy: the server is behind) is timed from its scheduled instant, so queueing behind a slow
/// server counts as latency (no coordinated omission).
async fn open_loop(
    thread: usize,
    links: &[Arc<Link>],
    mut dues: mpsc::UnboundedReceiver<Vec<Due>>,
    plan: &Plan,
    encoder: &Arc<Encoder>,
    tally: &Arc<Mutex<Tally>>,
    args: &LoadArgs,
) -> Result<(), String> {
    let mut rng = SplitMix(args.seed ^ (thread as u64).wrapping_mul(0xA076_1D64_78BD_642F));
    // Requests in flight keep their part of it: a large buffer takes one allocation per
    // ~1000 requests, not one each.
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let timeout = args.timeout;
    'load: while let Some(batch) = dues.recv().await {
        for due in batch {
            let Some(measured) = plan.admit(due.at) else {
                break 'load;
            };
            let Some(link) = links.get(due.link) else {
                continue;
            };
            let (slot, from) = match link.slots.clone().try_acquire_owned() {
                Ok(slot) => (slot, Instant::now()),
                Err(_) => {
                    if measured {
                        tally.lock().late += 1;
                    }
                    let slot = link
                        .slots
                        .clone()
                        .acquire_owned()
                        .await
                        .map_err(|e| e.to_string())?;
                    (slot, due.at)
                }
            };
            let body = encoder.encode(&mut rng, &mut buf);
            let link = link.clone();
            let tally = tally.clone();
            let expected = encoder.descriptor_count();
            tokio::spawn(async move {
                let mut sender = link.sender();
                let exchange = exchange(&link, &mut sender, body);
                let outcome = tokio::time::timeout_at(deadline(Instant::now(), timeout), exchange)
                    .await
                    .unwrap_or(Err(Failure::Timeout));
                if measured {
                    tally.lock().record(from.elapsed(), &outcome, expected);
                }
                drop(slot);
            });
        }
    }
    drop(dues);
    // Every request in flight is back once all slots are.
    for link in links {
        let _all = link
            .slots
            .acquire_many(args.concurrency)
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Reporting

fn per_request(before: Option<u64>, after: Option<u64>, requests: u64) -> Option<f64> {
    match (before, after) {
        (Some(b), Some(a)) if requests > 0 => Some(a.saturating_sub(b) as f64 / requests as f64),
        _ => None,
    }
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1_000.0
}

impl Report {
    fn throughput(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.tally.requests() as f64 / secs
        } else {
            0.0
        }
    }

    fn cpu(&self) -> (Option<f64>, Option<f64>, Option<f64>) {
        let n = self.tally.requests();
        (
            per_request(self.before.server_us, self.after.server_us, n),
            per_request(self.before.store_us, self.after.store_us, n),
            per_request(self.before.client_us, self.after.client_us, n),
        )
    }

    fn percentile_us(&self, q: f64) -> f64 {
        us(self.tally.latency_ns.value_at_quantile(q))
    }

    fn to_json(&self, args: &LoadArgs) -> String {
        let h = &self.tally.latency_ns;
        let (server, store, client) = self.cpu();
        let elapsed_cpu = |b: Option<u64>, a: Option<u64>| match (b, a) {
            (Some(b), Some(a)) => Some(a.saturating_sub(b)),
            _ => None,
        };
        let tags: serde_json::Map<String, serde_json::Value> = args
            .tags
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::from(v.as_str())))
            .collect();
        json!({
            "label": args.label,
            "tags": tags,
            "target": self.target,
            "mode": if args.rate.is_some() { "open" } else { "closed" },
            "rate": args.rate,
            "connections": args.connections,
            "concurrency": args.concurrency,
            "in_flight": args.connections * args.concurrency,
            "domain": args.domain,
            "descriptors": self.descriptor_count(args),
            "keys": args.keys,
            "warmup_s": args.warmup.as_secs_f64(),
            "elapsed_s": self.elapsed.as_secs_f64(),
            "requests": self.tally.requests(),
            "throughput_rps": self.throughput(),
            "ok": self.tally.ok,
            "over_limit": self.tally.over_limit,
            "unknown": self.tally.unknown,
            "errors": self.tally.errors(),
            "error_kinds": self.tally.errors,
            "late_starts": self.tally.late,
            "latency_us": {
                "p50": self.percentile_us(0.50),
                "p90": self.percentile_us(0.90),
                "p99": self.percentile_us(0.99),
                "p999": self.percentile_us(0.999),
                "max": us(h.max()),
                "mean": h.mean() / 1_000.0,
            },
            "server_cpu_us_per_request": server,
            "store_cpu_us_per_request": store,
            "client_cpu_us_per_request": client,
            "server_cpu_us": elapsed_cpu(self.before.server_us, self.after.server_us),
            "store_cpu_us": elapsed_cpu(self.before.store_us, self.after.store_us),
            "client_cpu_us": elapsed_cpu(self.before.client_us, self.after.client_us),
        })
        .to_string()
    }

    fn descriptor_count(&self, args: &LoadArgs) -> usize {
        if args.templates.is_empty() {
            args.descriptors as usize
        } else {
            args.templates.len()
        }
    }

    fn to_text(&self, args: &LoadArgs) -> String {
        let h = &self.tally.latency_ns;
        let (server, store, client) = self.cpu();
        let mode = match args.rate {
            Some(rate) => format!("open loop at {rate:.0} req/s"),
            None => "closed loop".to_string(),
        };
        let mut out = String::new();
        let _ = writeln!(
            out,
            "ratelimit-bench {}{}: {mode}, {} connection(s) x {} in flight, {} descriptor(s)/request, keys={}",
            self.target,
            if args.label.is_empty() { String::new() } else { format!(" [{}]", args.label) },
            args.connections,
            args.concurrency,
            self.descriptor_count(args),
            args.keys,
        );
        let _ = writeln!(
            out,
            "  requests     {} in {:.2} s = {:.0} req/s",
            self.tally.requests(),
            self.elapsed.as_secs_f64(),
            self.throughput()
        );
        let _ = writeln!(
            out,
            "  latency µs   p50 {:.1}  p90 {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1}  mean {:.1}",
            self.percentile_us(0.50),
            self.percentile_us(0.90),
            self.percentile_us(0.99),
            self.percentile_us(0.999),
            us(h.max()),
            h.mean() / 1_000.0
        );
        let _ = writeln!(
            out,
            "  codes        OK {}  OVER_LIMIT {}  UNKNOWN {}  errors {}",
            self.tally.ok,
            self.tally.over_limit,
            self.tally.unknown,
            self.tally.errors()
        );
        for (error, count) in &self.tally.errors {
            let _ = writeln!(out, "    {count} x {error}");
        }
        if self.tally.malformed > 0 {
            let _ = writeln!(
                out,
                "    {} x wrong number of statuses",
                self.tally.malformed
            );
        }
        if args.rate.is_some() {
            let _ = writeln!(
                out,
                "  late starts  {} (every slot busy at the scheduled time)",
                self.tally.late
            );
        }
        let show = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
        let _ = writeln!(
            out,
            "  cpu µs/req   server {}  store {}  load generator {}",
            show(server),
            show(store),
            show(client)
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message as _;
    use ratelimitd::proto::common::{rate_limit_descriptor::Entry, RateLimitDescriptor};
    use ratelimitd::proto::rls::rate_limit_response::DescriptorStatus;
    use ratelimitd::proto::rls::{RateLimitRequest, RateLimitResponse};

    fn encoder(templates: &[&str], domain: &str, hits_addend: u32, keys: u64) -> Encoder {
        let descriptors = templates
            .iter()
            .map(|text| parse_descriptor(text))
            .collect::<Result<Vec<_>, String>>()
            .unwrap();
        Encoder::new(&Template { descriptors }, domain, hits_addend, keys)
    }

    /// Encodes one request and returns it decoded by prost, checking the gRPC prefix and that
    /// the bytes are exactly prost's own encoding of it.
    fn encode_and_decode(encoder: &Encoder, rng: &mut SplitMix) -> RateLimitRequest {
        let mut buf = BytesMut::new();
        let framed = encoder.encode(rng, &mut buf);
        assert!(framed.len() <= encoder.max_len);
        let message = unframe(&framed).unwrap();
        let request = RateLimitRequest::decode(message).unwrap();
        assert_eq!(request.encode_to_vec(), message, "not prost's encoding");
        request
    }

    fn entry(key: &str, value: &str) -> Entry {
        Entry {
            key: key.into(),
            value: value.into(),
        }
    }

    #[test]
    fn templates_expand_placeholders() {
        let encoder = encoder(&["a=x{r}y{i},b=plain", "c={i}"], "d", 0, 1);
        let request = encode_and_decode(&encoder, &mut SplitMix(1));
        assert_eq!(request.domain, "d");
        assert_eq!(request.hits_addend, 0);
        assert_eq!(
            request.descriptors,
            vec![
                RateLimitDescriptor {
                    entries: vec![entry("a", "x0y0"), entry("b", "plain")],
                    ..RateLimitDescriptor::default()
                },
                RateLimitDescriptor {
                    entries: vec![entry("c", "1")],
                    ..RateLimitDescriptor::default()
                },
            ]
        );
        assert!(parse_descriptor("novalue").is_err());
        assert!(parse_descriptor("=v").is_err());
    }

    #[test]
    fn random_keys_follow_the_generator_in_descriptor_order() {
        let keys = 100_000;
        let encoder = encoder(&["gcra=d{i}-{r}"; 3], "bench", 7, keys);
        let mut rng = SplitMix(42);
        let mut expected = SplitMix(42);
        for _ in 0..1000 {
            let request = encode_and_decode(&encoder, &mut rng);
            assert_eq!(request.domain, "bench");
            assert_eq!(request.hits_addend, 7);
            for (index, descriptor) in request.descriptors.iter().enumerate() {
                let value = format!("d{index}-{}", expected.below(keys));
                assert_eq!(descriptor.entries, vec![entry("gcra", &value)]);
            }
        }
    }

    #[test]
    fn long_and_empty_fields_are_encoded_like_prost() {
        let long = "v".repeat(300);
        let template = format!("k={long}{{r}},e=,{}={{i}}", "K".repeat(200));
        let encoder = encoder(&[template.as_str()], "", 0, u64::MAX);
        let mut rng = SplitMix(3);
        for _ in 0..100 {
            let request = encode_and_decode(&encoder, &mut rng);
            assert_eq!(request.domain, "");
            let entries = &request.descriptors[0].entries;
            assert!(entries[0].value.starts_with(&long));
            assert_eq!(entries[1], entry("e", ""));
            assert_eq!(entries[2].value, "0");
        }
    }

    #[test]
    fn varints_and_decimals() {
        for value in [
            0,
            1,
            9,
            10,
            127,
            128,
            16_383,
            16_384,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            let mut buf = BytesMut::new();
            put_varint(&mut buf, value);
            assert_eq!(buf.len(), varint_len(value), "{value}");
            let mut input = &buf[..];
            assert_eq!(read_varint(&mut input), Ok(value));
            assert!(input.is_empty());
            buf.clear();
            put_decimal(&mut buf, value);
            assert_eq!(&buf[..], value.to_string().as_bytes());
            assert_eq!(decimal_len(value), buf.len());
        }
    }

    #[test]
    fn responses_yield_overall_code_and_status_count() {
        let status = |code: Code| DescriptorStatus {
            code: code as i32,
            limit_remaining: 12,
            ..DescriptorStatus::default()
        };
        let cases = [
            (Code::Ok, vec![status(Code::Ok)]),
            (
                Code::OverLimit,
                vec![status(Code::Ok), status(Code::OverLimit)],
            ),
            (Code::Unknown, vec![]),
        ];
        for (code, statuses) in cases {
            let response = RateLimitResponse {
                overall_code: code as i32,
                statuses: statuses.clone(),
                raw_body: vec![1, 2, 3],
                ..RateLimitResponse::default()
            };
            let mut framed = vec![0, 0, 0, 0, 0];
            response.encode(&mut framed).unwrap();
            let len = (framed.len() - 5) as u32;
            framed[1..5].copy_from_slice(&len.to_be_bytes());
            let answer = decode_response(unframe(&framed).unwrap()).unwrap();
            assert_eq!(answer.overall_code, code as i32);
            assert_eq!(answer.statuses, statuses.len());
            // Cut anywhere, the frame or the message is refused.
            for cut in 0..framed.len() {
                assert!(unframe(&framed[..cut]).is_err(), "cut at {cut}");
            }
            let message = &framed[5..];
            if message.len() > 2 {
                assert!(decode_response(&message[..message.len() - 1]).is_err());
            }
        }
        assert_eq!(
            unframe(&[1, 0, 0, 0, 0]),
            Err("compressed response (no compression was negotiated)")
        );
        assert_eq!(
            unframe(&[0, 0, 0, 0, 0, 0]),
            Err("more than one response message")
        );
        // Out-of-range codes count as UNKNOWN later; they still decode.
        assert_eq!(decode_response(&[8, 7]).map(|a| a.overall_code), Ok(7));
        assert!(decode_response(&[0x0a, 0]).is_err()); // overall_code with the wrong wire type
    }

    #[test]
    fn grpc_messages_are_percent_decoded() {
        assert_eq!(
            percent_decode(b"a%20b%ZZ%+1%e2%82%ac%"),
            "a b%ZZ%+1\u{20ac}%"
        );
    }

    #[test]
    fn targets() {
        let target = Target::parse("127.0.0.1:8081").unwrap();
        assert_eq!(target.url, "http://127.0.0.1:8081");
        assert_eq!(target.socket, "127.0.0.1:8081");
        assert_eq!(
            target.request().uri().to_string(),
            format!("http://127.0.0.1:8081{METHOD_PATH}")
        );
        assert_eq!(Target::parse("http://[::1]").unwrap().socket, "[::1]:80");
        assert!(Target::parse("https://localhost:443").is_err());
    }

    /// A server answering OK, OVER_LIMIT, a gRPC error status, or nothing (a hang), by the
    /// request's first descriptor value.
    struct Scripted;

    #[tonic::async_trait]
    impl ratelimitd::proto::rls::rate_limit_service_server::RateLimitService for Scripted {
        async fn should_rate_limit(
            &self,
            request: tonic::Request<RateLimitRequest>,
        ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
            let request = request.into_inner();
            let value = request.descriptors[0].entries[0].value.clone();
            let code = match value.as_str() {
                "ok" => Code::Ok,
                "over" => Code::OverLimit,
                "hang" => std::future::pending().await,
                _ => return Err(tonic::Status::invalid_argument("bad value: é")),
            };
            Ok(tonic::Response::new(RateLimitResponse {
                overall_code: code as i32,
                statuses: vec![DescriptorStatus::default(); request.descriptors.len()],
                ..RateLimitResponse::default()
            }))
        }
    }

    /// Serves [`Scripted`] on `listener` until `stop` fires.
    fn serve(listener: tokio::net::TcpListener, stop: oneshot::Receiver<()>) {
        use ratelimitd::proto::rls::rate_limit_service_server::RateLimitServiceServer;
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(RateLimitServiceServer::new(Scripted))
                .serve_with_incoming_shutdown(
                    tonic::transport::server::TcpIncoming::from(listener),
                    async {
                        let _ = stop.await;
                    },
                ),
        );
    }

    /// One call of `value` (see [`Scripted`]) with a second, constant descriptor.
    async fn call(link: &Link, value: &str) -> Result<Answer, Failure> {
        let encoder = encoder(&[&format!("k={value}"), "k2=x"], "d", 0, 1);
        let body = encoder.encode(&mut SplitMix(0), &mut BytesMut::new());
        let mut sender = link.sender();
        let exchange = exchange(link, &mut sender, body);
        tokio::time::timeout(Duration::from_millis(300), exchange)
            .await
            .unwrap_or(Err(Failure::Timeout))
    }

    #[tokio::test]
    async fn exchanges_with_a_tonic_server() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel();
        serve(listener, stopped);
        let target = Arc::new(Target::parse(&addr.to_string()).unwrap());
        let link = Link::new(target.clone(), connect(&target).await.unwrap(), 1);
        let ok = Answer {
            overall_code: Code::Ok as i32,
            statuses: 2,
        };
        assert_eq!(call(&link, "ok").await.unwrap(), ok);
        let over = call(&link, "over").await.unwrap();
        assert_eq!(over.overall_code, Code::OverLimit as i32);
        let failure = call(&link, "bad").await.unwrap_err();
        assert_eq!(failure.kind(), "InvalidArgument: bad value: é");
        assert_eq!(
            call(&link, "hang").await.unwrap_err().kind(),
            "client timeout"
        );
        // The connection still works after a cancelled stream.
        assert_eq!(call(&link, "ok").await.unwrap(), ok);

        let mut tally = Tally::new();
        for value in ["ok", "over", "bad"] {
            tally.record(Duration::from_micros(100), &call(&link, value).await, 2);
        }
        tally.record(Duration::from_micros(100), &Ok(ok), 3);
        assert_eq!((tally.ok, tally.over_limit, tally.unknown), (1, 1, 0));
        assert_eq!((tally.malformed, tally.errors()), (1, 2));
        assert_eq!(tally.requests(), 4);

        // The server goes away: requests fail to reconnect, then reconnect once it is back.
        let _ = stop.send(());
        let mut refused = None;
        for _ in 0..100 {
            match call(&link, "ok").await {
                Err(Failure::Connect(why)) => {
                    refused = Some(why);
                    break;
                }
                _ => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
        let refused = refused.expect("a failed reconnect");
        assert!(
            refused.starts_with("cannot connect to http://127.0.0.1:"),
            "{refused}"
        );
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        let (_stop, stopped) = oneshot::channel();
        serve(listener, stopped);
        tokio::time::sleep(RECONNECT_BACKOFF).await;
        assert_eq!(call(&link, "ok").await.unwrap(), ok);
        assert_eq!(link.sender().0, 1, "one new connection");
    }
}
