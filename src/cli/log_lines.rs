//! One log record per line, whatever a message holds.

use std::io::{self, Write};

use tracing_subscriber::fmt::MakeWriter;

/// A log output that keeps every record on one line: a line break inside a record (a message or
/// field value that holds one, from ratelimitd or from a library's error text) is written as
/// `\n`, so log collectors that split on lines never cut a record in two.
///
/// tracing-subscriber's fmt layer formats a whole record, ending in its one line break, and
/// hands it over in one `write_all`; only the break at the end of what is written is kept. JSON
/// records never hold a raw line break (JSON escapes it), so they pass unchanged.
pub struct OneLine<M>(pub M);

impl<'a, M: MakeWriter<'a>> MakeWriter<'a> for OneLine<M> {
    type Writer = OneLineWriter<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        OneLineWriter(self.0.make_writer())
    }
}

/// The writer of [`OneLine`].
pub struct OneLineWriter<W>(W);

impl<W: Write> Write for OneLineWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let (body, end) = match buf.strip_suffix(b"\n") {
            Some(body) => (body, &b"\n"[..]),
            None => (buf, &b""[..]),
        };
        if !body.iter().any(|&b| b == b'\n' || b == b'\r') {
            self.0.write_all(buf)?;
            return Ok(buf.len());
        }
        let mut line = Vec::with_capacity(buf.len() + 16);
        for &byte in body {
            match byte {
                b'\n' => line.extend_from_slice(b"\\n"),
                b'\r' => line.extend_from_slice(b"\\r"),
                _ => line.push(byte),
            }
        }
        line.extend_from_slice(end);
        self.0.write_all(&line)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(record: &str) -> String {
        let mut out = OneLineWriter(Vec::new());
        out.write_all(record.as_bytes()).unwrap();
        String::from_utf8(out.0).unwrap()
    }

    #[test]
    fn a_record_keeps_only_its_last_line_break() {
        assert_eq!(
            written("ERROR rejected: a.yaml:1:1: x\nb.yaml:2:1: y\r\n"),
            "ERROR rejected: a.yaml:1:1: x\\nb.yaml:2:1: y\\r\n"
        );
    }

    #[test]
    fn a_one_line_record_passes_unchanged() {
        assert_eq!(written("INFO serving\n"), "INFO serving\n");
        assert_eq!(written("no break"), "no break");
    }
}
