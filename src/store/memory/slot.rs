//! What the memory store keeps per counter: a 128-bit identity and a compact state.
//!
//! # Why a hash identity is enough
//! A counter is identified by (counter key, algorithm, window). Instead of storing the key
//! string, the map is keyed by two 64-bit SipHash values of that identity, computed with one
//! secret random key per process and two different domain-separation prefixes (`0` and `1`).
//! SipHash is a pseudo-random function, so for distinct identities the pair behaves like 128
//! independent random bits: two counters share a slot with probability 2^-128 per pair, about
//! n²/2^129 over n live counters (≈ 10^-21 for a billion). The key is secret and fresh per
//! process, so a client cannot search for colliding descriptor values offline, and it cannot
//! test candidates online either: a collision only shows as one counter silently sharing another's
//! state. The identity is encoded injectively before hashing (length-prefixed key, then fixed-size
//! algorithm code and window), so only a true hash collision can merge two identities.
//!
//! # Size
//! An entry is 48 bytes: 16 of identity, 8 of expiry and 24 of state (the largest O(1) state
//! is 16 bytes plus the enum tag). The sliding-window log, whose state grows with the limit,
//! lives behind a `Box`, as an [`IndexedLog`]: a decision on it reads O(log n) of its n entries
//! (a full log of 100 000 per hour costs what a small one does). With hashbrown's 1 control byte per bucket and a load factor between
//! 7/16 and 7/8, a table costs 56–112 bytes per live entry (≈ 85 on average over growth).

use std::borrow::Cow;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hash, Hasher};

use crate::limiter::algorithm::sliding_window_log::IndexedLog;
use crate::limiter::algorithm::{
    self, FixedWindowState, GcraState, SlidingWindowCounterState, State, TokenBucketState, Verdict,
};
use crate::limiter::counter_key::CounterKey;
use crate::limiter::rate::{Algorithm, Rate};
use crate::store::Check;

/// 128-bit hash of a counter's identity. `high` picks the shard; `low` is the hash the shard's
/// table uses, so the two never correlate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct CounterId {
    pub high: u64,
    pub low: u64,
}

impl Hash for CounterId {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // Already a keyed pseudo-random value: hand it to the table as is.
        state.write_u64(self.low);
    }
}

/// Hashes the identity of `check`'s counter with the process's secret key.
pub(super) fn counter_id(keys: &RandomState, check: &Check) -> CounterId {
    counter_id_of(keys, &check.key, &check.rate)
}

/// Hashes the identity of the counter `key` of `rate` with the process's secret key.
pub(super) fn counter_id_of(keys: &RandomState, key: &CounterKey, rate: &Rate) -> CounterId {
    let half = |domain: u8| {
        let mut hasher = keys.build_hasher();
        hasher.write_u8(domain);
        let key = key.as_str().as_bytes();
        hasher.write_usize(key.len());
        hasher.write(key);
        hasher.write_u8(algorithm_code(rate.algorithm()));
        hasher.write_u64(rate.window_us());
        hasher.finish()
    };
    CounterId {
        high: half(0),
        low: half(1),
    }
}

fn algorithm_code(algorithm: Algorithm) -> u8 {
    match algorithm {
        Algorithm::FixedWindow => 0,
        Algorithm::SlidingWindowLog => 1,
        Algorithm::SlidingWindowCounter => 2,
        Algorithm::TokenBucket => 3,
        Algorithm::Gcra => 4,
    }
}

/// Passes a [`CounterId`]'s `low` half through as the table hash.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }

    fn write(&mut self, bytes: &[u8]) {
        // Not used by `CounterId`; a plain FNV-1a keeps the hasher total.
        for &byte in bytes {
            self.0 = (self.0 ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01B3);
        }
    }
}

/// One stored counter.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Slot {
    /// From this instant on the state is equivalent to an absent one (`algorithm::expires_at_us`).
    pub expires_at_us: u64,
    pub state: Compact,
}

impl Slot {
    pub fn new(rate: &Rate, state: State) -> Slot {
        Slot {
            expires_at_us: algorithm::expires_at_us(rate, &state),
            state: Compact::from_state(state),
        }
    }

    pub fn is_expired(&self, now_us: u64) -> bool {
        self.expires_at_us <= now_us
    }

    /// Replaces the state with the one after admitting `hits` at `now_us` (as
    /// `algorithm::commit`).
    pub fn commit(&mut self, rate: &Rate, now_us: u64, hits: u64) {
        if let Compact::Log(log) = &mut self.state {
            if rate.algorithm() == Algorithm::SlidingWindowLog {
                log.commit(rate, now_us, algorithm::clamp_hits(rate, hits));
                self.expires_at_us = log.expires_at_us(rate);
                return;
            }
        }
        if let Compact::Boxed(boxed) = &mut self.state {
            // Commit in place: the log keeps its allocation.
            let old = std::mem::replace(&mut **boxed, PLACEHOLDER);
            **boxed = algorithm::commit(rate, Some(old), now_us, hits);
            self.expires_at_us = algorithm::expires_at_us(rate, boxed);
            return;
        }
        let old = std::mem::replace(&mut self.state, Compact::Gcra { tat_us: 0 }).into_state();
        *self = Slot::new(rate, algorithm::commit(rate, Some(old), now_us, hits));
    }
}

const PLACEHOLDER: State = State::Gcra(GcraState { tat_us: 0 });

/// [`State`] without its padding: counts are at most `u32::MAX` (a limit), so they are stored
/// as `u32`; anything that does not fit is boxed, and the O(limit) log is boxed as an
/// [`IndexedLog`].
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Compact {
    FixedWindow {
        window_start_us: u64,
        count: u32,
    },
    SlidingWindowCounter {
        window_start_us: u64,
        previous: u32,
        current: u32,
    },
    TokenBucket {
        tokens: f64,
        last_us: u64,
    },
    Gcra {
        tat_us: u64,
    },
    Log(Box<IndexedLog>),
    Boxed(Box<State>),
}

impl Compact {
    pub fn from_state(state: State) -> Compact {
        match state {
            State::FixedWindow(s) => match u32::try_from(s.count) {
                Ok(count) => Compact::FixedWindow {
                    window_start_us: s.window_start_us,
                    count,
                },
                Err(_) => Compact::Boxed(Box::new(State::FixedWindow(s))),
            },
            State::SlidingWindowCounter(s) => {
                match (u32::try_from(s.previous), u32::try_from(s.current)) {
                    (Ok(previous), Ok(current)) => Compact::SlidingWindowCounter {
                        window_start_us: s.window_start_us,
                        previous,
                        current,
                    },
                    _ => Compact::Boxed(Box::new(State::SlidingWindowCounter(s))),
                }
            }
            State::TokenBucket(s) => Compact::TokenBucket {
                tokens: s.tokens,
                last_us: s.last_us,
            },
            State::Gcra(s) => Compact::Gcra { tat_us: s.tat_us },
            State::SlidingWindowLog(s) => Compact::Log(Box::new(IndexedLog::from(s))),
        }
    }

    /// What `algorithm::evaluate` answers for this state; a log answers from its index, without
    /// reading every entry.
    pub fn evaluate(&self, rate: &Rate, now_us: u64, hits: u64) -> Verdict {
        match self {
            Compact::Log(log) if rate.algorithm() == Algorithm::SlidingWindowLog => {
                log.evaluate(rate, now_us, algorithm::clamp_hits(rate, hits))
            }
            Compact::Log(_) => algorithm::evaluate(rate, None, now_us, hits),
            compact => algorithm::evaluate(rate, Some(&compact.view()), now_us, hits),
        }
    }

    /// The state as the algorithms take it; borrowed when boxed, rebuilt otherwise (a copy of
    /// ≤ 24 bytes, or of every entry of a log).
    pub fn view(&self) -> Cow<'_, State> {
        match self {
            Compact::Boxed(state) => Cow::Borrowed(state),
            compact => Cow::Owned(compact.clone().into_state()),
        }
    }

    pub fn into_state(self) -> State {
        match self {
            Compact::FixedWindow {
                window_start_us,
                count,
            } => State::FixedWindow(FixedWindowState {
                window_start_us,
                count: u64::from(count),
            }),
            Compact::SlidingWindowCounter {
                window_start_us,
                previous,
                current,
            } => State::SlidingWindowCounter(SlidingWindowCounterState {
                window_start_us,
                previous: u64::from(previous),
                current: u64::from(current),
            }),
            Compact::TokenBucket { tokens, last_us } => {
                State::TokenBucket(TokenBucketState { tokens, last_us })
            }
            Compact::Gcra { tat_us } => State::Gcra(GcraState { tat_us }),
            Compact::Log(log) => State::SlidingWindowLog(log.to_state()),
            Compact::Boxed(state) => *state,
        }
    }
}
