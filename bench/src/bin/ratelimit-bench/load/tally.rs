//! What a run measures: the latency and outcome of each measured RPC ([`Tally`]), and the CPU
//! counters at the start and end of the measurement ([`Snapshot`]).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use ratelimitd::proto::rls::rate_limit_response::Code;

use super::client::Failure;
use super::wire::Answer;
use super::LoadArgs;
use crate::procstat;

/// What the slots of one thread saw.
pub(super) struct Tally {
    pub(super) latency_ns: Histogram<u64>,
    pub(super) ok: u64,
    pub(super) over_limit: u64,
    pub(super) unknown: u64,
    /// Responses whose status count differs from the descriptor count.
    pub(super) malformed: u64,
    pub(super) errors: BTreeMap<String, u64>,
    /// Open loop: requests that found every slot of their connection busy at their scheduled
    /// time.
    pub(super) late: u64,
    /// Requests sent during the warmup (not measured). The server's side counters (e.g. calls
    /// to Redis) can only be read around the whole run, so they are divided by this plus the
    /// measured requests.
    pub(super) warmup: u64,
}

impl Tally {
    pub(super) fn new() -> Tally {
        Tally {
            // 1 ns .. 100 s, 3 significant digits.
            latency_ns: Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("histogram"),
            ok: 0,
            over_limit: 0,
            unknown: 0,
            malformed: 0,
            errors: BTreeMap::new(),
            late: 0,
            warmup: 0,
        }
    }

    pub(super) fn merge(&mut self, other: Tally) {
        let _ = self.latency_ns.add(&other.latency_ns);
        self.ok += other.ok;
        self.over_limit += other.over_limit;
        self.unknown += other.unknown;
        self.malformed += other.malformed;
        self.late += other.late;
        self.warmup += other.warmup;
        for (error, count) in other.errors {
            *self.errors.entry(error).or_default() += count;
        }
    }

    pub(super) fn errors(&self) -> u64 {
        self.errors.values().sum::<u64>() + self.malformed
    }

    pub(super) fn requests(&self) -> u64 {
        self.ok + self.over_limit + self.unknown + self.errors()
    }

    /// Records one measured RPC: its latency and its outcome.
    pub(super) fn record(
        &mut self,
        latency: Duration,
        outcome: &Result<Answer, Failure>,
        expected: usize,
    ) {
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
pub(super) struct Snapshot {
    pub(super) at: Instant,
    pub(super) server_us: Option<u64>,
    pub(super) server_switches: Option<u64>,
    pub(super) store_us: Option<u64>,
    pub(super) client_us: Option<u64>,
    pub(super) machine: Option<procstat::MachineCpu>,
}

impl Snapshot {
    pub(super) fn take(args: &LoadArgs) -> Snapshot {
        Snapshot {
            at: Instant::now(),
            server_us: args.server_pid.and_then(procstat::cpu_us),
            server_switches: args.server_pid.and_then(procstat::context_switches),
            store_us: store_cpu_us(&args.store_pid),
            client_us: procstat::self_cpu_us(),
            machine: procstat::machine_cpu(),
        }
    }
}

/// The CPU time of every store process, summed; none without a PID or when one of them cannot
/// be read (a partial sum would pass for the whole store's).
fn store_cpu_us(pids: &[u32]) -> Option<u64> {
    if pids.is_empty() {
        return None;
    }
    pids.iter()
        .map(|&pid| procstat::cpu_us(pid))
        .sum::<Option<u64>>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_are_counted_by_code() {
        let answer = |code: i32, statuses| {
            Ok(Answer {
                overall_code: code,
                statuses,
            })
        };
        let latency = Duration::from_micros(100);
        let mut tally = Tally::new();
        tally.record(latency, &answer(Code::Ok as i32, 2), 2);
        tally.record(latency, &answer(Code::OverLimit as i32, 2), 2);
        tally.record(latency, &answer(7, 2), 2);
        let status = Failure::Status(tonic::Code::InvalidArgument, "bad value: é".into());
        tally.record(latency, &Err(status), 2);
        tally.record(latency, &answer(Code::Ok as i32, 2), 3);
        assert_eq!((tally.ok, tally.over_limit, tally.unknown), (1, 1, 1));
        assert_eq!((tally.malformed, tally.errors()), (1, 2));
        assert_eq!(
            tally.errors,
            BTreeMap::from([("InvalidArgument: bad value: é".to_owned(), 1)])
        );
        assert_eq!(tally.requests(), 5);
        assert_eq!(tally.latency_ns.len(), 5);
    }

    #[test]
    fn store_cpu_is_summed_over_every_pid() {
        let me = std::process::id();
        assert_eq!(store_cpu_us(&[]), None);
        let one = store_cpu_us(&[me]).expect("this process's CPU time");
        let two = store_cpu_us(&[me, me]).expect("this process's CPU time, twice");
        // The second read of each pair may be a tick later than the first.
        assert!(two >= 2 * one, "{two} < 2 x {one}");
        assert_eq!(store_cpu_us(&[me, u32::MAX]), None);
    }
}
