//! The RESP2 codec of the script-call hot path: commands written straight into a connection's
//! output buffer, and replies delimited and read in place, without building a `redis::Value`
//! tree (see [`super::pipe`]). Everything else (connection set-up, `SCRIPT LOAD`, `CLUSTER
//! SLOTS`, `PING`, error replies) goes through the redis crate's own encoder and parser.
//!
//! Only RESP2 is understood: the five types `+ - : $ *`. A byte stream that is not RESP2 is a
//! [`RespError`], never a panic; lengths are bounded ([`MAX_BULK_LEN`], [`MAX_ARRAY_LEN`],
//! [`MAX_LINE_LEN`], [`MAX_DEPTH`]), so a broken or hostile server cannot make the reader
//! allocate or recurse without bound.

use std::fmt;

/// Longest bulk string accepted (the server's own `proto-max-bulk-len` default).
pub const MAX_BULK_LEN: usize = 512 * 1024 * 1024;

/// Most elements in one array (a script reply has 1 + 3 per check of at most
/// `MAX_BATCH_CHECKS` checks; `CLUSTER SLOTS` one per slot range).
pub const MAX_ARRAY_LEN: usize = 1 << 20;

/// Longest simple string, error or length line (error messages are short; the longest seen are
/// Lua errors naming a script line).
pub const MAX_LINE_LEN: usize = 64 * 1024;

/// Deepest nesting of arrays (`CLUSTER SLOTS` has 3 levels).
pub const MAX_DEPTH: usize = 8;

/// A reply that is not well-formed RESP2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RespError(String);

impl RespError {
    fn new(what: impl Into<String>) -> RespError {
        RespError(what.into())
    }
}

impl fmt::Display for RespError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed redis reply: {}", self.0)
    }
}

impl std::error::Error for RespError {}

/// Appends the header of a command of `args` arguments (`*<args>\r\n`).
pub fn push_command(out: &mut Vec<u8>, args: usize) {
    out.push(b'*');
    push_decimal(out, args as u64);
    out.extend_from_slice(b"\r\n");
}

/// Appends one argument, a bulk string (`$<len>\r\n<bytes>\r\n`).
pub fn push_bulk(out: &mut Vec<u8>, bytes: &[u8]) {
    let mut head = [0u8; 24];
    head[0] = b'$';
    let len = write_decimal(&mut head[1..], bytes.len() as u64);
    head[1 + len..3 + len].copy_from_slice(b"\r\n");
    out.reserve(3 + len + bytes.len() + 2);
    out.extend_from_slice(&head[..3 + len]);
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

/// Appends one argument, `n` in decimal digits as a bulk string (as the redis crate sends
/// integers), in one copy.
pub fn push_bulk_u64(out: &mut Vec<u8>, n: u64) {
    if n < 10 {
        // Most arguments of a script call: rate positions, hits, shadow flags.
        out.extend_from_slice(&[b'$', b'1', b'\r', b'\n', b'0' + n as u8, b'\r', b'\n']);
        return;
    }
    let mut digits = [0u8; 20];
    let text = decimal(&mut digits, n);
    let mut arg = [0u8; 32];
    arg[0] = b'$';
    let len = write_decimal(&mut arg[1..], text.len() as u64);
    let mut at = 1 + len;
    arg[at..at + 2].copy_from_slice(b"\r\n");
    at += 2;
    arg[at..at + text.len()].copy_from_slice(text);
    at += text.len();
    arg[at..at + 2].copy_from_slice(b"\r\n");
    out.extend_from_slice(&arg[..at + 2]);
}

/// Writes `n` in decimal at the start of `out` (at least 20 bytes); its length.
fn write_decimal(out: &mut [u8], n: u64) -> usize {
    let mut digits = [0u8; 20];
    let text = decimal(&mut digits, n);
    out[..text.len()].copy_from_slice(text);
    text.len()
}

/// Appends a whole command of `args`.
pub fn push_args(out: &mut Vec<u8>, args: &[&[u8]]) {
    push_command(out, args.len());
    for arg in args {
        push_bulk(out, arg);
    }
}

fn push_decimal(out: &mut Vec<u8>, n: u64) {
    let mut digits = [0u8; 20];
    out.extend_from_slice(decimal(&mut digits, n));
}

/// `n` in decimal, written at the end of `digits`.
fn decimal(digits: &mut [u8; 20], mut n: u64) -> &[u8] {
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &digits[start..];
        }
    }
}

/// The length of the complete reply at the start of `buf`, or `None` while it has not all
/// arrived.
pub fn frame_len(buf: &[u8]) -> Result<Option<usize>, RespError> {
    scan(buf, 0, 0)
}

/// Where the value starting at `at` ends (one past its last byte), `None` when incomplete.
fn scan(buf: &[u8], at: usize, depth: usize) -> Result<Option<usize>, RespError> {
    let Some(&kind) = buf.get(at) else {
        return Ok(None);
    };
    if kind == b':' {
        // Most values of a script reply.
        if let Some((_, next)) = short_integer(buf, at + 1) {
            return Ok(Some(next));
        }
    }
    let Some(line_end) = line_end(buf, at + 1)? else {
        return Ok(None);
    };
    let line = &buf[at + 1..line_end];
    let after_line = line_end + 2;
    match kind {
        b'+' | b'-' => Ok(Some(after_line)),
        b':' => {
            integer(line)?;
            Ok(Some(after_line))
        }
        b'$' => match length(line, MAX_BULK_LEN, "bulk string")? {
            None => Ok(Some(after_line)),
            Some(len) => {
                let end = after_line + len + 2;
                if buf.len() < end {
                    return Ok(None);
                }
                if &buf[end - 2..end] != b"\r\n" {
                    return Err(RespError::new("a bulk string not followed by CRLF"));
                }
                Ok(Some(end))
            }
        },
        b'*' => match length(line, MAX_ARRAY_LEN, "array")? {
            None => Ok(Some(after_line)),
            Some(count) => {
                if depth >= MAX_DEPTH {
                    return Err(RespError::new(format!(
                        "arrays nested deeper than {MAX_DEPTH}"
                    )));
                }
                let mut next = after_line;
                for _ in 0..count {
                    match scan(buf, next, depth + 1)? {
                        Some(end) => next = end,
                        None => return Ok(None),
                    }
                }
                Ok(Some(next))
            }
        },
        other => Err(RespError::new(format!(
            "unknown type byte 0x{other:02x} (only RESP2 is spoken)"
        ))),
    }
}

/// The position of the CR of the line starting at `from`, `None` when it has not all arrived.
fn line_end(buf: &[u8], from: usize) -> Result<Option<usize>, RespError> {
    let rest = buf.get(from..).unwrap_or_default();
    let window = &rest[..rest.len().min(MAX_LINE_LEN + 1)];
    match window.iter().position(|&b| b == b'\r') {
        Some(cr) => match rest.get(cr + 1) {
            None => Ok(None),
            Some(b'\n') => Ok(Some(from + cr)),
            Some(_) => Err(RespError::new("a CR not followed by LF")),
        },
        None if window.len() > MAX_LINE_LEN => Err(RespError::new(format!(
            "a line longer than {MAX_LINE_LEN} bytes"
        ))),
        None => Ok(None),
    }
}

/// A signed decimal integer, strictly: an optional `-`, then 1 to 19 digits, within i64.
fn integer(line: &[u8]) -> Result<i64, RespError> {
    let (negative, digits) = match line.split_first() {
        Some((b'-', digits)) => (true, digits),
        _ => (false, line),
    };
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return Err(RespError::new(format!(
            "not an integer: {:?}",
            String::from_utf8_lossy(line)
        )));
    }
    let magnitude = digits
        .iter()
        .fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'));
    let value = if negative {
        0i64.checked_sub_unsigned(magnitude)
    } else {
        i64::try_from(magnitude).ok()
    };
    value.ok_or_else(|| RespError::new("an integer out of range"))
}

/// The integer line at `at` when it is 1 to 18 digits (no overflow possible), with an optional
/// `-`, followed by CRLF, and where the next element starts; `None` otherwise (the general path
/// then reads it, or reports it).
fn short_integer(frame: &[u8], at: usize) -> Option<(i64, usize)> {
    let negative = frame.get(at) == Some(&b'-');
    let first = at + usize::from(negative);
    let mut n: i64 = 0;
    let mut next = first;
    while let Some(&byte) = frame.get(next) {
        if !byte.is_ascii_digit() {
            break;
        }
        if next - first == 18 {
            return None;
        }
        n = n * 10 + i64::from(byte - b'0');
        next += 1;
    }
    if next == first || frame.get(next..next + 2) != Some(b"\r\n") {
        return None;
    }
    Some((if negative { -n } else { n }, next + 2))
}

/// A length line: `-1` (null) or 0 to `max`.
fn length(line: &[u8], max: usize, what: &str) -> Result<Option<usize>, RespError> {
    match integer(line)? {
        -1 => Ok(None),
        n if n >= 0 && (n as u64) <= max as u64 => Ok(Some(n as usize)),
        n => Err(RespError::new(format!("{what} length {n}"))),
    }
}

/// One element of a reply array, borrowed from the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Element<'a> {
    /// `:<n>`
    Int(i64),
    /// `$<len>` and its bytes.
    Bulk(&'a [u8]),
    /// `+<text>`
    Simple(&'a [u8]),
    /// `-<text>`
    Error(&'a [u8]),
    /// `$-1` or `*-1`.
    Nil,
    /// A nested array of this many elements (skipped).
    Array(usize),
}

/// The elements of an array reply, in order (nested arrays are skipped whole).
#[derive(Debug, Clone)]
pub struct ArrayReader<'a> {
    frame: &'a [u8],
    at: usize,
    left: usize,
}

impl<'a> ArrayReader<'a> {
    /// The reader of `frame`, a complete reply (see [`frame_len`]); `None` when it is not an
    /// array (or a null one).
    pub fn new(frame: &'a [u8]) -> Result<Option<ArrayReader<'a>>, RespError> {
        if frame.first() != Some(&b'*') {
            return Ok(None);
        }
        let end = line_end(frame, 1)?.ok_or_else(|| RespError::new("a truncated array"))?;
        Ok(
            length(&frame[1..end], MAX_ARRAY_LEN, "array")?.map(|left| ArrayReader {
                frame,
                at: end + 2,
                left,
            }),
        )
    }

    /// Elements not read yet.
    pub fn len(&self) -> usize {
        self.left
    }

    /// Whether every element was read.
    pub fn is_empty(&self) -> bool {
        self.left == 0
    }

    /// The next element; an error when the frame is truncated or malformed.
    pub fn next_element(&mut self) -> Option<Result<Element<'a>, RespError>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        Some(self.read())
    }

    fn read(&mut self) -> Result<Element<'a>, RespError> {
        let truncated = || RespError::new("a truncated array element");
        let frame = self.frame;
        let kind = *frame.get(self.at).ok_or_else(truncated)?;
        if kind == b':' {
            if let Some((n, next)) = short_integer(frame, self.at + 1) {
                self.at = next;
                return Ok(Element::Int(n));
            }
        }
        let line_end = line_end(frame, self.at + 1)?.ok_or_else(truncated)?;
        let line = &frame[self.at + 1..line_end];
        let after_line = line_end + 2;
        let element = match kind {
            b':' => Element::Int(integer(line)?),
            b'+' => Element::Simple(line),
            b'-' => Element::Error(line),
            b'$' => match length(line, MAX_BULK_LEN, "bulk string")? {
                None => Element::Nil,
                Some(len) => {
                    let bytes = frame
                        .get(after_line..after_line + len)
                        .ok_or_else(truncated)?;
                    self.at = after_line + len + 2;
                    if frame.get(self.at - 2..self.at) != Some(b"\r\n") {
                        return Err(RespError::new("a bulk string not followed by CRLF"));
                    }
                    return Ok(Element::Bulk(bytes));
                }
            },
            b'*' => match length(line, MAX_ARRAY_LEN, "array")? {
                None => Element::Nil,
                Some(count) => {
                    self.at = scan(frame, self.at, 1)?.ok_or_else(truncated)?;
                    return Ok(Element::Array(count));
                }
            },
            other => {
                return Err(RespError::new(format!(
                    "unknown type byte 0x{other:02x} (only RESP2 is spoken)"
                )))
            }
        };
        self.at = after_line;
        Ok(element)
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;

    const REPLIES: [&[u8]; 9] = [
        b"+OK\r\n",
        b"-NOSCRIPT No matching script. Please use EVAL.\r\n",
        b":-42\r\n",
        b"$5\r\nhello\r\n",
        b"$0\r\n\r\n",
        b"$-1\r\n",
        b"*-1\r\n",
        b"*0\r\n",
        b"*4\r\n:1\r\n$2\r\nab\r\n*2\r\n+x\r\n:3\r\n-ERR no\r\n",
    ];

    #[test]
    fn commands_are_what_the_redis_crate_sends() {
        let mut ours = Vec::new();
        push_command(&mut ours, 4);
        push_bulk(&mut ours, b"EVALSHA");
        push_bulk(&mut ours, b"");
        push_bulk_u64(&mut ours, 0);
        push_bulk_u64(&mut ours, u64::MAX);
        let theirs = redis::cmd("EVALSHA")
            .arg("")
            .arg(0u64)
            .arg(u64::MAX)
            .get_packed_command();
        assert_eq!(ours, theirs);
        let mut asking = Vec::new();
        push_args(&mut asking, &[b"ASKING"]);
        assert_eq!(asking, redis::cmd("ASKING").get_packed_command());
    }

    #[test]
    fn every_prefix_of_a_reply_is_incomplete_and_the_whole_is_one_frame() {
        for reply in REPLIES {
            for cut in 0..reply.len() {
                assert_eq!(frame_len(&reply[..cut]), Ok(None), "{reply:?} cut at {cut}");
            }
            let mut followed = reply.to_vec();
            followed.extend_from_slice(b":7\r\n");
            assert_eq!(frame_len(&followed), Ok(Some(reply.len())), "{reply:?}");
        }
    }

    #[test]
    fn array_elements_read_in_order_with_nested_arrays_skipped() {
        let frame = REPLIES[8];
        let mut reader = ArrayReader::new(frame).unwrap().unwrap();
        assert_eq!(reader.len(), 4);
        let mut elements = Vec::new();
        while let Some(element) = reader.next_element() {
            elements.push(element.unwrap());
        }
        assert_eq!(
            elements,
            [
                Element::Int(1),
                Element::Bulk(b"ab"),
                Element::Array(2),
                Element::Error(b"ERR no")
            ]
        );
        assert!(ArrayReader::new(b"*-1\r\n").unwrap().is_none());
        assert!(ArrayReader::new(b":1\r\n").unwrap().is_none());
    }

    #[test]
    fn malformed_replies_are_errors() {
        let bad: [&[u8]; 12] = [
            b"?1\r\n",
            b":\r\n",
            b":12a\r\n",
            b":99999999999999999999\r\n",
            b"$-2\r\n",
            b"$3\r\nabcd\r\n",
            b"*-5\r\n",
            b"*1\r\n%1\r\n",
            b"+a\rb\r\n",
            b"$1\r\nx\n\r",
            b":--1\r\n",
            b"*2000000\r\n",
        ];
        for reply in bad {
            assert!(frame_len(reply).is_err(), "{reply:?}");
        }
        let deep = "*1\r\n".repeat(MAX_DEPTH + 1) + ":1\r\n";
        assert!(frame_len(deep.as_bytes()).is_err());
        let long = vec![b'+'; MAX_LINE_LEN + 2];
        assert!(frame_len(&long).is_err());
        assert_eq!(frame_len(&long[..MAX_LINE_LEN]), Ok(None));
    }

    #[test]
    fn integers_are_exact_at_the_edges() {
        for n in [0, 1, -1, i64::MAX, i64::MIN] {
            let reply = format!(":{n}\r\n");
            assert_eq!(frame_len(reply.as_bytes()), Ok(Some(reply.len())));
            let array = format!("*1\r\n{reply}");
            let mut reader = ArrayReader::new(array.as_bytes()).unwrap().unwrap();
            assert_eq!(reader.next_element(), Some(Ok(Element::Int(n))));
        }
        assert!(frame_len(b":9223372036854775808\r\n").is_err());
        assert!(frame_len(b":-9223372036854775809\r\n").is_err());
    }

    /// A random RESP2 value, with what `redis::parse_redis_value` must make of it.
    fn random_value(rng: &mut StdRng, depth: usize, out: &mut Vec<u8>) {
        match rng.random_range(0..if depth < 3 { 7 } else { 5 }) {
            0 => out.extend_from_slice(format!(":{}\r\n", rng.random::<i64>()).as_bytes()),
            1 => out.extend_from_slice(b"+PONG\r\n"),
            2 => out.extend_from_slice(b"-ERR something\r\n"),
            3 => {
                let len = rng.random_range(0..40);
                let bytes: Vec<u8> = (0..len).map(|_| rng.random()).collect();
                push_bulk(out, &bytes);
            }
            4 => out.extend_from_slice(b"$-1\r\n"),
            _ => {
                let count = rng.random_range(0..6);
                push_command(out, count);
                for _ in 0..count {
                    random_value(rng, depth + 1, out);
                }
            }
        }
    }

    #[test]
    fn random_streams_split_into_the_frames_the_redis_crate_parses() {
        let mut rng = StdRng::seed_from_u64(17);
        for _ in 0..500 {
            let mut stream = Vec::new();
            let mut ends = Vec::new();
            for _ in 0..rng.random_range(1..6) {
                random_value(&mut rng, 0, &mut stream);
                ends.push(stream.len());
            }
            let mut at = 0;
            for end in ends {
                let len = frame_len(&stream[at..]).unwrap().expect("complete");
                assert_eq!(at + len, end);
                redis::parse_redis_value(&stream[at..end]).expect("the redis crate agrees");
                for cut in at..end {
                    assert_eq!(frame_len(&stream[at..cut]), Ok(None));
                }
                at = end;
            }
        }
    }

    #[test]
    fn random_garbage_never_panics() {
        let mut rng = StdRng::seed_from_u64(71);
        let alphabet = b"*$:+-\r\n0123456789-1x";
        for _ in 0..20_000 {
            let len = rng.random_range(0..24);
            let bytes: Vec<u8> = (0..len)
                .map(|_| alphabet[rng.random_range(0..alphabet.len())])
                .collect();
            if let Ok(Some(len)) = frame_len(&bytes) {
                if let Ok(Some(mut reader)) = ArrayReader::new(&bytes[..len]) {
                    while let Some(element) = reader.next_element() {
                        element.expect("a complete frame reads whole");
                    }
                }
            }
        }
    }
}
