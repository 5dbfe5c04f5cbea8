//! Stat lines packed into UDP datagrams, as gostats' UDP sink writes them: each line
//! `name:value|type` ends with `\n`, and a datagram holds as many whole lines as fit in
//! [`MAX_DATAGRAM_BYTES`].

use std::fmt::Write as _;

/// gostats' UDP buffer: fits a 1500-byte MTU with the IP and UDP headers, so no datagram is
/// fragmented.
pub const MAX_DATAGRAM_BYTES: usize = 1432;

/// The largest UDP payload over IPv4; a longer line cannot be sent at all.
const MAX_UDP_PAYLOAD: usize = 65_507;

/// The datagrams of one flush.
#[derive(Debug, Default)]
pub struct Datagrams {
    full: Vec<Vec<u8>>,
    current: Vec<u8>,
    line: String,
    dropped: u64,
}

impl Datagrams {
    /// A counter's delta: `name:value|c`.
    pub fn counter(&mut self, name: &str, value: u64) {
        self.line.clear();
        let _ = writeln!(self.line, "{name}:{value}|c");
        self.push_line();
    }

    /// One timing in milliseconds: `name:ms|ms`, with `|@rate` when it stands for `1/rate`
    /// timings (statsd's sample rate).
    pub fn timer(&mut self, name: &str, ms: u64, sample_rate: Option<f64>) {
        self.line.clear();
        let _ = match sample_rate {
            Some(rate) => writeln!(self.line, "{name}:{ms}|ms|@{rate}"),
            None => writeln!(self.line, "{name}:{ms}|ms"),
        };
        self.push_line();
    }

    /// A line of any format, written by `write` (without its ending `\n`).
    pub fn line(&mut self, write: impl FnOnce(&mut String)) {
        self.line.clear();
        write(&mut self.line);
        self.line.push('\n');
        self.push_line();
    }

    /// A line longer than a datagram goes alone in a larger one (gostats writes it through);
    /// one beyond the largest UDP payload is dropped and counted.
    fn push_line(&mut self) {
        let line = self.line.as_bytes();
        if line.len() > MAX_UDP_PAYLOAD {
            self.dropped += 1;
            return;
        }
        if self.current.len() + line.len() > MAX_DATAGRAM_BYTES && !self.current.is_empty() {
            self.full.push(std::mem::take(&mut self.current));
        }
        self.current.extend_from_slice(line);
    }

    /// The datagrams, and how many lines were too long to send.
    pub fn finish(mut self) -> (Vec<Vec<u8>>, u64) {
        if !self.current.is_empty() {
            self.full.push(self.current);
        }
        (self.full, self.dropped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_lines_up_to_the_datagram_size() {
        let mut datagrams = Datagrams::default();
        let name = "x".repeat(40);
        for value in 0..100 {
            datagrams.counter(&name, value);
        }
        datagrams.timer("t", 3, None);
        datagrams.timer("t", 4, Some(0.5));
        let (sent, dropped) = datagrams.finish();
        assert_eq!(dropped, 0);
        assert!(sent.len() > 1);
        let text: String = sent
            .iter()
            .map(|d| {
                assert!(d.len() <= MAX_DATAGRAM_BYTES);
                assert_eq!(d.last(), Some(&b'\n'));
                String::from_utf8(d.clone()).unwrap()
            })
            .collect();
        assert_eq!(text.lines().count(), 102);
        assert!(text.starts_with(&format!("{name}:0|c\n{name}:1|c\n")));
        assert!(text.ends_with("t:3|ms\nt:4|ms|@0.5\n"));
    }

    #[test]
    fn long_lines_go_alone_or_are_dropped() {
        let mut datagrams = Datagrams::default();
        datagrams.counter("a", 1);
        datagrams.counter(&"l".repeat(2000), 1);
        datagrams.counter(&"h".repeat(70_000), 1);
        datagrams.counter("b", 1);
        let (sent, dropped) = datagrams.finish();
        assert_eq!(dropped, 1);
        let sizes: Vec<usize> = sent.iter().map(Vec::len).collect();
        assert_eq!(sizes, [6, 2005, 6]);
    }
}
