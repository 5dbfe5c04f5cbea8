//! Whether the xDS stream is up, for how long the configuration in force may have been stale,
//! and why the last stream ended: what `/metrics`, `/healthcheck` and the logs say of it.
//!
//! While a stream is open, the control plane pushes every change, so the configuration in force
//! is the control plane's. Once it is down (never opened yet, ended, or dropped for stalling),
//! changes made on the control plane do not arrive: the configuration in force keeps serving,
//! and its staleness is the time since the stream went down.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use tokio::time::Instant;

/// Longest end reason kept, in bytes (a server's status message may be long).
const REASON_MAX_BYTES: usize = 256;

/// The xDS stream's state, updated by the client.
#[derive(Debug)]
pub struct XdsStream {
    state: Mutex<State>,
    stalls: AtomicU64,
}

#[derive(Debug)]
struct State {
    up: bool,
    /// When the stream opened (while up) or went down (while down; the start before the first).
    since: Instant,
    /// Unix time of the last response received.
    last_response: Option<SystemTime>,
    /// Why the last stream ended (or could not open).
    last_end: Option<String>,
}

impl Default for XdsStream {
    fn default() -> XdsStream {
        XdsStream {
            state: Mutex::new(State {
                up: false,
                since: Instant::now(),
                last_response: None,
                last_end: None,
            }),
            stalls: AtomicU64::new(0),
        }
    }
}

impl XdsStream {
    /// A stream opened. Returns how long the stream had been down.
    pub fn opened(&self) -> Duration {
        let mut state = self.state.lock();
        let down_for = state.since.elapsed();
        state.up = true;
        state.since = Instant::now();
        down_for
    }

    /// A response arrived.
    pub fn responded(&self) {
        self.state.lock().last_response = Some(SystemTime::now());
    }

    /// The stream ended, or could not be opened, for `reason` (kept cut to a bounded length);
    /// `stalled`: it was dropped for the response deadline.
    pub fn ended(&self, reason: &str, stalled: bool) {
        if stalled {
            self.stalls.fetch_add(1, Ordering::Relaxed);
        }
        let mut state = self.state.lock();
        if state.up {
            state.up = false;
            state.since = Instant::now();
        }
        state.last_end = Some(cut(reason, REASON_MAX_BYTES).to_owned());
    }

    /// Whether a stream is open.
    pub fn is_up(&self) -> bool {
        self.state.lock().up
    }

    /// How long the configuration in force may have been stale: zero while a stream is open,
    /// else the time since the stream went down (since the start, before the first stream).
    pub fn stale_for(&self) -> Duration {
        let state = self.state.lock();
        if state.up {
            Duration::ZERO
        } else {
            state.since.elapsed()
        }
    }

    /// Unix time, in seconds, of the last response received; `None` before the first.
    pub fn last_response_unix(&self) -> Option<u64> {
        let at = self.state.lock().last_response?;
        Some(
            at.duration_since(UNIX_EPOCH)
                .map_or(0, |since| since.as_secs()),
        )
    }

    /// Streams dropped for the response deadline.
    pub fn stalls(&self) -> u64 {
        self.stalls.load(Ordering::Relaxed)
    }

    /// Why the last stream ended (or could not open); `None` while none has.
    pub fn last_end(&self) -> Option<String> {
        self.state.lock().last_end.clone()
    }
}

/// `text` cut to at most `max` bytes, at a character boundary.
fn cut(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn staleness_runs_while_the_stream_is_down() {
        let stream = XdsStream::default();
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(!stream.is_up());
        assert_eq!(stream.stale_for(), Duration::from_secs(5));
        assert_eq!(stream.opened(), Duration::from_secs(5));
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(stream.stale_for(), Duration::ZERO);
        stream.ended(&"x".repeat(10_000), true);
        tokio::time::advance(Duration::from_secs(7)).await;
        assert_eq!(stream.stale_for(), Duration::from_secs(7));
        assert_eq!(stream.stalls(), 1);
        assert_eq!(
            stream.last_end().map(|end| end.len()),
            Some(REASON_MAX_BYTES)
        );
        stream.ended("refused", false);
        assert_eq!(stream.stale_for(), Duration::from_secs(7), "still down");
    }
}
