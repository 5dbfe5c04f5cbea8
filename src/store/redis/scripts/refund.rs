//! The refund script's call (`lua/refund.lua`, a function of the store's library or a script of its
//! own, see [`super::library`]): its argument encoding.
//!
//! A request whose checks live on several Redis Cluster nodes is decided on each node in parallel
//! (one call of the request script per node). When any node denies, each node that admitted gets
//! one call of this script, taking back what it committed for the request, so a denied request
//! consumes nothing anywhere; `algorithm::refund` is the math, and why it never over-admits.

use super::library::library;
pub use super::library::REFUND;
use super::request::{CallCommand, CounterKind, KeyPlacement, RateTable, REDIS_TIME};
use crate::limiter::rate::Rate;

/// The refund script's script form (the library files, then `lua/refund.lua`).
pub fn refund_source() -> &'static str {
    REFUND.source()
}

/// SHA1 of [`refund_source`] (hex).
pub fn refund_sha1() -> &'static str {
    REFUND.sha1()
}

/// `SCRIPT LOAD <refund source>`
pub fn refund_script_load() -> redis::Cmd {
    REFUND.load_command()
}

/// What one call of the request script committed to one key for a request that is now to be
/// refunded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refund {
    /// The Redis key (`keys::redis_key` of the counter and rate).
    pub key: String,
    /// The rate the key was committed with: that of the request's last admitted check of it.
    pub rate: Rate,
    /// How the script keeps the key's counter (never an envoyproxy/ratelimit counter that counts
    /// the hits of denied requests: see [`CounterKind::counts_admitted_of_denied_requests`]).
    pub counter: CounterKind,
    /// The hits committed: the total of the request's admitted checks of the key, at most the
    /// rate's burst (the script refuses more).
    pub hits: u64,
    /// The `now` of the call that committed them, µs.
    pub committed_at_us: u64,
    /// For token_bucket and gcra, how far (µs) from full the counter was just before that commit
    /// (`algorithm::debt_before_us` of its verdict; 0 is always safe); ignored by the others.
    pub debt_before_us: u64,
}

/// `EVALSHA <sha> <n> keys... rates... now (rate, hits, committed_at, debt_before)...`: one call refunding every
/// key of `refunds` (at least one, all on one node, each once); its reply is the number of keys
/// changed.
/// `pinned_now_us` replaces Redis's clock (tests only). Never retry it on an error other than
/// `NOSCRIPT`: a refund applied twice gives back hits the request never took.
pub fn evalsha_refund(refunds: &[Refund], pinned_now_us: Option<u64>) -> redis::Cmd {
    evalsha_refund_placed(refunds, pinned_now_us, KeyPlacement::Declared)
}

/// [`evalsha_refund`] with the keys placed as `placement` says (in ARGV for a cluster node).
pub fn evalsha_refund_placed(
    refunds: &[Refund],
    pinned_now_us: Option<u64>,
    placement: KeyPlacement,
) -> redis::Cmd {
    refund_command(refunds, pinned_now_us, placement, CallCommand::Evalsha)
}

/// [`evalsha_refund_placed`] carried by `command`: `FCALL` of the library's refund function, or
/// `EVALSHA` of the refund script, with the same arguments.
pub fn refund_command(
    refunds: &[Refund],
    pinned_now_us: Option<u64>,
    placement: KeyPlacement,
    command: CallCommand,
) -> redis::Cmd {
    let mut table = RateTable::default();
    let positions: Vec<usize> = refunds
        .iter()
        .map(|refund| table.position_for(refund.rate, refund.counter))
        .collect();
    let mut cmd = redis::cmd(command.name());
    cmd.arg(library().target(&REFUND, command));
    match placement {
        KeyPlacement::Declared => cmd.arg(refunds.len()),
        KeyPlacement::InArguments => cmd.arg(0).arg(refunds.len()),
    };
    for refund in refunds {
        cmd.arg(refund.key.as_str());
    }
    table.write_to(&mut cmd);
    match pinned_now_us {
        Some(now) => cmd.arg(now),
        None => cmd.arg(REDIS_TIME),
    };
    for (refund, position) in refunds.iter().zip(positions) {
        cmd.arg(position)
            .arg(refund.hits)
            .arg(refund.committed_at_us)
            .arg(refund.debt_before_us);
    }
    cmd
}

#[cfg(test)]
mod tests {
    use redis::Arg;

    use super::*;
    use crate::limiter::rate::{Algorithm, Unit};
    use crate::store::redis::scripts::request::{sha1, FIELDS_PER_RATE};

    fn args(cmd: &redis::Cmd) -> Vec<String> {
        cmd.args_iter()
            .map(|arg| match arg {
                Arg::Simple(bytes) => String::from_utf8(bytes.to_vec()).unwrap(),
                other => panic!("unexpected argument {other:?}"),
            })
            .collect()
    }

    fn refund(key: &str, rate: Rate, hits: u64, committed_at_us: u64) -> Refund {
        Refund {
            key: key.into(),
            rate,
            counter: CounterKind::Native,
            hits,
            committed_at_us,
            debt_before_us: committed_at_us % 1000,
        }
    }

    #[test]
    fn sha1_is_of_the_refund_source_and_differs_from_the_request_script() {
        assert_eq!(refund_sha1().len(), 40);
        assert_eq!(
            refund_sha1(),
            redis::Script::new(refund_source()).get_hash()
        );
        assert_ne!(refund_sha1(), sha1());
        assert!(refund_source().contains("function fixed_window.refund("));
        assert!(refund_source().contains("\nreturn refund_call\n"));
        assert!(refund_source().trim_end().ends_with("\nend)()(KEYS, ARGV)"));
        assert_eq!(
            args(&refund_script_load()),
            ["SCRIPT", "LOAD", refund_source()]
        );
    }

    #[test]
    fn each_rate_travels_once_and_each_key_points_into_the_table() {
        let gcra = Rate::new(Algorithm::Gcra, 10, Unit::Second, 1, Some(4)).unwrap();
        let fixed = Rate::new(Algorithm::FixedWindow, 3, Unit::Minute, 2, None).unwrap();
        let refunds = [
            refund("k1", gcra, 2, 1_700_000_000_000_001),
            refund("k2", fixed, 3, 1_700_000_000_000_002),
            refund("k3", gcra, 4, 1_700_000_000_000_003),
        ];
        let expected = [
            "EVALSHA",
            refund_sha1(),
            "3",
            "k1",
            "k2",
            "k3",
            "2",
            "4",
            "10",
            "1000000",
            "4",
            "100000",
            "0",
            "3",
            "120000000",
            "3",
            "40000000",
            "1700000000123456",
            "1",
            "2",
            "1700000000000001",
            "1",
            "2",
            "3",
            "1700000000000002",
            "2",
            "1",
            "4",
            "1700000000000003",
            "3",
        ];
        assert_eq!(
            args(&evalsha_refund(&refunds, Some(1_700_000_000_123_456))),
            expected
        );
        let table = 1 + 2 * FIELDS_PER_RATE;
        assert_eq!(
            expected.len(),
            3 + refunds.len() + table + 1 + 4 * refunds.len()
        );
    }

    #[test]
    fn redis_time_unless_pinned_and_hits_are_sent_as_they_are() {
        let rate = Rate::new(Algorithm::SlidingWindowLog, 5, Unit::Second, 1, None).unwrap();
        let cmd = evalsha_refund(&[refund("k", rate, u64::MAX, 7)], None);
        let args = args(&cmd);
        assert_eq!(args[2], "1");
        assert_eq!(args[4 + 1 + FIELDS_PER_RATE], REDIS_TIME);
        assert_eq!(
            args[args.len() - 4..],
            ["1", "18446744073709551615", "7", "7"]
        );
    }
}
