//! A fair share as the token bucket Envoy enforces for it.
//!
//! Envoy's rate_limit_quota filter reads a token bucket's `fill_interval` in whole seconds (a
//! 500 ms interval is unlimited, 1.5 s is 1 s), and ignores a new assignment that changes only
//! `fill_interval`. So intervals here are whole seconds, at least 1, and an assignment that
//! would differ from the previous one only in its interval changes `max_tokens` too
//! ([`TokenBucketAssignment::distinct_from`]).

use std::time::Duration;

/// The default longest fill interval tried for shares of 1 request per second or more: one
/// Envoy report period. Longer intervals approach a fractional share more closely, but admit
/// their requests in larger lumps.
pub const DEFAULT_MAX_FILL_INTERVAL: Duration = Duration::from_secs(5);

/// The longest fill interval ever assigned (about 31 million years); a share needing a longer
/// one for a single token is no share at all.
const LONGEST_FILL_SECONDS: f64 = 1e15;

/// A token bucket for one Envoy: `tokens_per_fill` tokens every `fill_interval` (whole seconds,
/// at least 1), holding at most `max_tokens` (at least 1; the bucket starts full).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBucketAssignment {
    pub max_tokens: u32,
    pub tokens_per_fill: u32,
    pub fill_interval: Duration,
}

impl TokenBucketAssignment {
    /// The long-run rate it admits, in requests per second: tokens_per_fill / fill_interval.
    pub fn rate(&self) -> f64 {
        f64::from(self.tokens_per_fill) / self.fill_interval.as_secs_f64()
    }

    /// `self`, changed so that Envoy applies it after `previous`: when the two differ only in
    /// `fill_interval`, `max_tokens` is one more than `tokens_per_fill` (one less at `u32::MAX`),
    /// which leaves the rate as it is and the burst one token larger.
    pub fn distinct_from(self, previous: &TokenBucketAssignment) -> TokenBucketAssignment {
        let only_interval = self.fill_interval != previous.fill_interval
            && self.tokens_per_fill == previous.tokens_per_fill
            && self.max_tokens == previous.max_tokens;
        if !only_interval {
            return self;
        }
        let max_tokens = match self.max_tokens.checked_add(1) {
            Some(more) => more,
            None => self.max_tokens - 1,
        };
        TokenBucketAssignment { max_tokens, ..self }
    }
}

/// The token bucket for a share of `share_per_second`: the whole-second fill interval F and
/// integer tokens_per_fill T ≥ 1 whose rate T/F is the largest not above the share, trying
/// every F from about the shortest that fits one token (⌊1/share⌋, at least 1 s) up to
/// `max_fill` (or one more than that shortest, if longer), preferring the shorter F on ties. `max_tokens` = T: the
/// bucket's burst is one fill.
///
/// So a share of 1 request per second or more gets F ≤ `max_fill` (F = 1 s when it is a whole
/// number), and a share below 1/s gets one token every ⌈1/share⌉ seconds. `None` when the
/// share is not positive and finite, or needs an interval beyond any real one: the caller
/// assigns DENY_ALL.
pub fn token_bucket(share_per_second: f64, max_fill: Duration) -> Option<TokenBucketAssignment> {
    if !share_per_second.is_finite() || share_per_second <= 0.0 {
        return None;
    }
    let share = share_per_second;
    let shortest = (1.0 / share).floor().max(1.0);
    if shortest > LONGEST_FILL_SECONDS {
        return None;
    }
    let shortest = shortest as u64;
    let longest = (shortest + 1).max(max_fill.as_secs());
    let mut best: Option<(u64, u64)> = None;
    for interval in shortest..=longest {
        let seconds = interval as f64;
        let mut tokens = (share * seconds).floor().min(f64::from(u32::MAX)) as u64;
        // `share × interval` may round up to a whole number the exact product is just under.
        while tokens > 0 && tokens as f64 / seconds > share {
            tokens -= 1;
        }
        if tokens == 0 {
            continue;
        }
        let better = match best {
            None => true,
            Some((best_tokens, best_interval)) => {
                u128::from(tokens) * u128::from(best_interval)
                    > u128::from(best_tokens) * u128::from(interval)
            }
        };
        if better {
            best = Some((tokens, interval));
        }
    }
    let (tokens, interval) = best?;
    let tokens = u32::try_from(tokens).ok()?;
    Some(TokenBucketAssignment {
        max_tokens: tokens,
        tokens_per_fill: tokens,
        fill_interval: Duration::from_secs(interval),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(share: f64) -> TokenBucketAssignment {
        token_bucket(share, DEFAULT_MAX_FILL_INTERVAL)
            .unwrap_or_else(|| panic!("a bucket for {share}"))
    }

    fn shape(share: f64) -> (u32, u64) {
        let b = bucket(share);
        (b.tokens_per_fill, b.fill_interval.as_secs())
    }

    #[test]
    fn whole_shares_fill_every_second() {
        assert_eq!(shape(1.0), (1, 1));
        assert_eq!(shape(50.0), (50, 1));
        assert_eq!(shape(4_000_000_000.0), (4_000_000_000, 1));
        assert_eq!(shape(1e12), (u32::MAX, 1), "at most u32::MAX tokens");
    }

    #[test]
    fn fractional_shares_use_the_interval_that_comes_closest_from_below() {
        assert_eq!(shape(2.5), (5, 2));
        assert_eq!(shape(1.99), (9, 5), "9/5 = 1.8, closer than 1/1");
        assert_eq!(shape(10.4), (52, 5));
        assert_eq!(shape(10.25), (41, 4));
    }

    #[test]
    fn shares_below_one_per_second_use_a_longer_interval() {
        assert_eq!(shape(0.5), (1, 2));
        assert_eq!(shape(0.3), (1, 4), "1/3 s would exceed 0.3");
        assert_eq!(shape(0.01), (1, 100));
        assert_eq!(shape(1.0 / 86_400.0), (1, 86_400));
    }

    #[test]
    fn the_rate_never_exceeds_the_share_and_tokens_are_whole() {
        let mut share = 1e-6;
        while share < 1e7 {
            let b = bucket(share);
            assert!(b.rate() <= share, "{share}: {b:?}");
            assert!(b.fill_interval.as_secs() >= 1 && b.fill_interval.subsec_nanos() == 0);
            assert!(b.tokens_per_fill >= 1 && b.max_tokens >= b.tokens_per_fill);
            share *= 1.37;
        }
    }

    #[test]
    fn no_bucket_for_an_empty_or_broken_share() {
        for share in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e-300] {
            assert_eq!(
                token_bucket(share, DEFAULT_MAX_FILL_INTERVAL),
                None,
                "{share}"
            );
        }
    }

    #[test]
    fn a_change_of_interval_alone_also_changes_max_tokens() {
        let half = bucket(0.5);
        let quarter = bucket(0.25);
        assert_eq!((half.tokens_per_fill, half.max_tokens), (1, 1));
        let sent = quarter.distinct_from(&half);
        assert_eq!(
            (
                sent.tokens_per_fill,
                sent.max_tokens,
                sent.fill_interval.as_secs()
            ),
            (1, 2, 4)
        );
        let back = half.distinct_from(&sent);
        assert_eq!(back, half, "max_tokens already differs");
        assert_eq!(half.distinct_from(&half), half, "unchanged stays unchanged");
        assert_eq!(bucket(3.0).distinct_from(&half), bucket(3.0));
        let full = TokenBucketAssignment {
            max_tokens: u32::MAX,
            tokens_per_fill: u32::MAX,
            fill_interval: Duration::from_secs(1),
        };
        let slower = TokenBucketAssignment {
            fill_interval: Duration::from_secs(2),
            ..full
        };
        assert_eq!(slower.distinct_from(&full).max_tokens, u32::MAX - 1);
    }
}
