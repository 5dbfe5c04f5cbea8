//! The request script's call (`lua/request.lua`, run as a function of the store's library or as a
//! script of its own, see [`super::library`]): its arguments, and the command that carries them
//! (the reply is read by [`super::reply`]).

use std::collections::HashMap;

use crate::limiter::algorithm::lease::LeaseTerms;
use crate::limiter::clock::{Clock, SystemClock};
use crate::limiter::counter_key::CounterKey;
use crate::limiter::rate::{Algorithm, Rate, MICROS_PER_SECOND};
use crate::store::Check;

use super::envoyproxy_key::envoyproxy_key;
use super::key_layout::{EnvoyproxyCounting, KeyLayout};
use super::keys::prefixed_redis_key;
use super::library::library;
pub use super::library::DECIDE;
pub use super::script::{CallCommand, Script};
use crate::store::redis::wire::resp;

/// Values per rate in the call's rate table (see the header of `lua/request.lua`).
pub const FIELDS_PER_RATE: usize = 5;

/// Values per check: its spec (see the header of `lua/request.lua`).
pub const FIELDS_PER_CHECK: usize = 1;

/// The `now` argument of the refund script that makes it read Redis's own clock (`TIME`).
pub const REDIS_TIME: &str = "-";

/// Longest spec text: a lease's (`L`, a position, then want, min, period and time with their
/// `:`s), longer than any check's.
const SPEC_MAX_LEN: usize = 1 + 20 + 4 * (1 + 20);

/// One check's spec as the request script reads it (see the header of `lua/request.lua`): the
/// short forms `<rate>` (a request's only check, 1 hit, not shadow, Redis's clock) and `+<rate>`
/// (a further check, 1 hit, not shadow), else every field written out. Built on the stack.
struct Spec {
    text: [u8; SPEC_MAX_LEN],
    len: usize,
}

impl Spec {
    /// The spec of a check at rate `position` with `hits` and `shadow`; `head` is, for a
    /// request's first check, its number of checks and pinned time.
    fn new(position: usize, hits: u64, shadow: bool, head: Option<(usize, Option<u64>)>) -> Spec {
        let mut spec = Spec {
            text: [0; SPEC_MAX_LEN],
            len: 0,
        };
        if head.is_none() {
            spec.push(b'+');
        }
        spec.number(position as u64);
        let short = hits == 1 && !shadow && matches!(head, None | Some((1, None)));
        if !short {
            spec.push(b':');
            spec.number(hits);
            spec.push(b':');
            spec.push(if shadow { b'1' } else { b'0' });
            if let Some((checks, pinned)) = head {
                spec.push(b':');
                spec.number(checks as u64);
                if let Some(now) = pinned {
                    spec.push(b':');
                    spec.number(now);
                }
            }
        }
        spec
    }

    /// A lease's spec: `L<rate>:<want>:<min>:<period>[:<now>]`.
    fn lease(position: usize, want: u64, min: u64, period_us: u64, pinned: Option<u64>) -> Spec {
        let mut spec = Spec {
            text: [0; SPEC_MAX_LEN],
            len: 0,
        };
        spec.push(b'L');
        spec.number(position as u64);
        for n in [want, min, period_us] {
            spec.push(b':');
            spec.number(n);
        }
        if let Some(now) = pinned {
            spec.push(b':');
            spec.number(now);
        }
        spec
    }

    fn push(&mut self, byte: u8) {
        self.text[self.len] = byte;
        self.len += 1;
    }

    fn number(&mut self, mut n: u64) {
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        loop {
            at -= 1;
            digits[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        for &digit in &digits[at..] {
            self.push(digit);
        }
    }

    fn as_bytes(&self) -> &[u8] {
        &self.text[..self.len]
    }
}

/// Hits sent to the script are clamped to this: above every rate's `burst + 1`, so each check
/// decides exactly as with `algorithm::clamp_hits`, while the script's cumulative sums (doubles)
/// stay exact. Clamping with each check's own rate instead would change the sum seen by a later
/// check of the same counter with a larger burst.
pub const MAX_HITS_SENT: u64 = u32::MAX as u64 + 1;

/// SHA1 of the request script's script form (hex).
pub fn sha1() -> &'static str {
    DECIDE.sha1()
}

/// The algorithm's code in the script's ARGV.
pub fn algorithm_code(algorithm: Algorithm) -> u8 {
    match algorithm {
        Algorithm::FixedWindow => 0,
        Algorithm::SlidingWindowLog => 1,
        Algorithm::SlidingWindowCounter => 2,
        Algorithm::TokenBucket => 3,
        Algorithm::Gcra => 4,
    }
}

/// How the script keeps a check's counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CounterKind {
    /// ratelimitd's own state under its own key (see [`super::keys`]), written only when the
    /// request is admitted.
    Native,
    /// A fixed window kept as envoyproxy/ratelimit keeps it: a plain count under its key (see
    /// [`super::envoyproxy_key`]), incremented with `INCRBY` and given a TTL with `EXPIRE` (see
    /// `lua/envoyproxy_fixed_window.lua`).
    Envoyproxy(EnvoyproxyCounting),
}

impl CounterKind {
    /// The counter's code in the script's rate table: the algorithm's, or for envoyproxy/ratelimit's
    /// fixed windows 5 (every hit counted) or 6 (`STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`).
    pub fn code(self, algorithm: Algorithm) -> u8 {
        match self {
            CounterKind::Native => algorithm_code(algorithm),
            CounterKind::Envoyproxy(counting) if counting.stop_increment_when_over_limit => 6,
            CounterKind::Envoyproxy(_) => 5,
        }
    }

    /// Whether the script counts an admitted check's hits even when another check denies the
    /// request (envoyproxy/ratelimit's default), so that a refund must not take them back.
    pub fn counts_admitted_of_denied_requests(self) -> bool {
        matches!(
            self,
            CounterKind::Envoyproxy(EnvoyproxyCounting {
                stop_increment_when_over_limit: false,
                ..
            })
        )
    }
}

/// What a script call needs of one check.
#[derive(Debug, Clone, Copy)]
struct CheckArgs {
    rate: Rate,
    hits: u64,
    shadow: bool,
    counter: CounterKind,
    /// A lease's `min` and `period_us` (its `want` is `hits`): the request is this one lease.
    lease: Option<(u64, u64)>,
}

/// One request's part of a script call: its keys (one per check), its time, and each check's
/// rate, hits, shadow flag and counter.
#[derive(Debug)]
pub struct Invocation {
    keys: Vec<String>,
    pinned_now_us: Option<u64>,
    checks: Vec<CheckArgs>,
}

impl Invocation {
    /// The part of `checks`, under ratelimitd's own keys without a prefix; `pinned_now_us`
    /// replaces Redis's clock (tests only).
    pub fn new(checks: &[Check], pinned_now_us: Option<u64>) -> Invocation {
        Invocation::build(checks, pinned_now_us, &KeyLayout::default())
    }

    /// The part of `checks` with the keys and counters `layout` says. An envoyproxy-format key
    /// names its window, taken from `pinned_now_us` when pinned, else from this host's clock (as
    /// envoyproxy/ratelimit takes it; the script still reads Redis's for everything else).
    pub fn laid_out(
        checks: &[Check],
        pinned_now_us: Option<u64>,
        layout: &KeyLayout,
    ) -> Invocation {
        Invocation::build(checks, pinned_now_us, layout)
    }

    fn build(checks: &[Check], pinned_now_us: Option<u64>, layout: &KeyLayout) -> Invocation {
        let prefix = layout.prefix();
        let envoyproxy = layout.envoyproxy_counting();
        let mut keys = Vec::with_capacity(checks.len());
        let mut args = Vec::with_capacity(checks.len());
        let mut now_s = None;
        let mut host_now_s = || {
            *now_s.get_or_insert_with(|| {
                pinned_now_us.unwrap_or_else(|| SystemClock.now_us()) / MICROS_PER_SECOND
            })
        };
        for check in checks {
            let counter = match envoyproxy {
                Some(counting)
                    if KeyLayout::counts_as_envoyproxy(check)
                        && layout.envoyproxy_at(check, host_now_s()) =>
                {
                    CounterKind::Envoyproxy(counting)
                }
                _ => CounterKind::Native,
            };
            keys.push(match counter {
                CounterKind::Native => prefixed_redis_key(prefix, &check.key, &check.rate),
                CounterKind::Envoyproxy(_) => {
                    envoyproxy_key(prefix, &check.key, &check.rate, host_now_s())
                }
            });
            args.push(CheckArgs {
                rate: check.rate,
                hits: check.hits.min(MAX_HITS_SENT),
                shadow: check.shadow,
                counter,
                lease: None,
            });
        }
        Invocation {
            keys,
            pinned_now_us,
            checks: args,
        }
    }

    /// The request that reserves a lease of `terms` on the counter `key` of `rate` (see
    /// `lua/lease.lua`), under ratelimitd's own key as `layout` prefixes it; `None` for a counter
    /// that `layout` keeps as envoyproxy/ratelimit's, which cannot be leased.
    pub fn lease(
        key: &CounterKey,
        rate: Rate,
        terms: LeaseTerms,
        pinned_now_us: Option<u64>,
        layout: &KeyLayout,
    ) -> Option<Invocation> {
        let probe = Check {
            key: key.clone(),
            rate,
            hits: 1,
            shadow: false,
            consistency: crate::limiter::Consistency::Leased,
            rule: None,
        };
        if layout.envoyproxy_counting().is_some() && KeyLayout::counts_as_envoyproxy(&probe) {
            return None;
        }
        Some(Invocation {
            keys: vec![prefixed_redis_key(layout.prefix(), key, &rate)],
            pinned_now_us,
            checks: vec![CheckArgs {
                rate,
                hits: terms.want.min(MAX_HITS_SENT),
                shadow: false,
                counter: CounterKind::Native,
                lease: Some((terms.min, terms.period_us)),
            }],
        })
    }

    /// Number of checks (and keys).
    pub fn checks(&self) -> usize {
        self.keys.len()
    }

    /// Each check's key, in order.
    pub fn keys(&self) -> &[String] {
        &self.keys
    }

    /// Check `index`: its rate, the hits sent and whether it is a shadow check.
    pub fn check(&self, index: usize) -> Option<(Rate, u64, bool)> {
        self.checks
            .get(index)
            .map(|check| (check.rate, check.hits, check.shadow))
    }

    /// How the script keeps check `index`'s counter.
    pub fn counter(&self, index: usize) -> Option<CounterKind> {
        self.checks.get(index).map(|check| check.counter)
    }

    /// For each check, whether the script counts its hits even when another check denies the
    /// request ([`CounterKind::counts_admitted_of_denied_requests`]); `None` when no check does
    /// (ratelimitd's format, or `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`).
    pub fn counted_when_vetoed(&self) -> Option<Vec<bool>> {
        let counted = |check: &CheckArgs| check.counter.counts_admitted_of_denied_requests();
        self.checks
            .iter()
            .any(counted)
            .then(|| self.checks.iter().map(counted).collect())
    }

    /// The pinned time, if any (tests only).
    pub fn pinned_now_us(&self) -> Option<u64> {
        self.pinned_now_us
    }

    /// The invocation of the checks at `indices` alone, in that order (a request's checks on one
    /// cluster node).
    pub fn part(&self, indices: &[usize]) -> Invocation {
        Invocation {
            keys: indices
                .iter()
                .filter_map(|&i| self.keys.get(i).cloned())
                .collect(),
            pinned_now_us: self.pinned_now_us,
            checks: indices
                .iter()
                .filter_map(|&i| self.checks.get(i).copied())
                .collect(),
        }
    }
}

/// Where a call's keys travel (see `keys_and_arguments` in `lua/common.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyPlacement {
    /// Declared, as `EVALSHA`'s keys: a single server.
    Declared,
    /// Leading ARGV, after their count, with no key declared: a Redis Cluster node, which refuses
    /// declared keys of several slots (CROSSSLOT) but lets the script access keys of every slot
    /// it owns.
    InArguments,
}

/// Where a command's arguments go, one after the other: a redis crate command, or a RESP output
/// buffer (`Vec<u8>`, after its [`resp::push_command`] header), so both carry the same bytes.
pub trait ArgSink {
    /// One argument, as bytes.
    fn bytes(&mut self, arg: &[u8]);
    /// One argument, `n` in decimal digits.
    fn uint(&mut self, n: u64);
}

impl ArgSink for redis::Cmd {
    fn bytes(&mut self, arg: &[u8]) {
        self.arg(arg);
    }

    fn uint(&mut self, n: u64) {
        self.arg(n);
    }
}

/// A RESP output buffer: each argument a bulk string.
impl ArgSink for Vec<u8> {
    fn bytes(&mut self, arg: &[u8]) {
        resp::push_bulk(self, arg);
    }

    fn uint(&mut self, n: u64) {
        resp::push_bulk_u64(self, n);
    }
}

/// Distinct rates a [`RateTable`] finds by a linear scan; past this many it keeps a hash map
/// (a call of 1024 checks may carry 1024 rates: descriptor overrides).
const LINEAR_RATES: usize = 8;

/// The distinct rates of one script call, in order of first use: each travels once, at the head
/// of ARGV (R, then [`FIELDS_PER_RATE`] values per rate; see `lua/request.lua`), and the checks or
/// refunds of the call point into it by position: fewer arguments for Redis to turn into Lua
/// strings and for the script to parse. The request and the refund script read the same table.
/// A rate kept as an envoyproxy/ratelimit counter is an entry of its own.
#[derive(Debug, Default)]
pub struct RateTable {
    /// Filled once there are more than [`LINEAR_RATES`] rates.
    positions: HashMap<(Rate, CounterKind), usize>,
    rates: Vec<(Rate, CounterKind)>,
}

impl RateTable {
    /// The position (1-based) of `rate` with a native counter, added at the end when new.
    pub fn position(&mut self, rate: Rate) -> usize {
        self.position_for(rate, CounterKind::Native)
    }

    /// The position (1-based) of `rate` kept by `counter`, added at the end when new.
    pub fn position_for(&mut self, rate: Rate, counter: CounterKind) -> usize {
        let entry = (rate, counter);
        if self.positions.is_empty() {
            if let Some(index) = self.rates.iter().position(|known| *known == entry) {
                return index + 1;
            }
        } else if let Some(&position) = self.positions.get(&entry) {
            return position;
        }
        self.rates.push(entry);
        let position = self.rates.len();
        if position > LINEAR_RATES {
            if self.positions.is_empty() {
                self.positions = self.rates.iter().zip(1..).map(|(r, p)| (*r, p)).collect();
            } else {
                self.positions.insert(entry, position);
            }
        }
        position
    }

    /// Number of distinct rates.
    pub fn len(&self) -> usize {
        self.rates.len()
    }

    /// Whether no rate was added yet.
    pub fn is_empty(&self) -> bool {
        self.rates.is_empty()
    }

    /// Arguments [`RateTable::write_to`] appends.
    pub fn arg_count(&self) -> usize {
        1 + FIELDS_PER_RATE * self.rates.len()
    }

    /// Appends the table to `sink`. An envoyproxy/ratelimit counter's entry carries, in place of
    /// GCRA's emission interval, the TTL its writes in this call set (see
    /// `lua/envoyproxy_fixed_window.lua`).
    pub fn write_to(&self, sink: &mut impl ArgSink) {
        sink.uint(self.rates.len() as u64);
        for (rate, counter) in &self.rates {
            sink.uint(u64::from(counter.code(rate.algorithm())));
            sink.uint(u64::from(rate.limit()));
            sink.uint(rate.window_us());
            sink.uint(u64::from(rate.burst()));
            match counter {
                CounterKind::Native => sink.uint(rate.emission_interval_us()),
                CounterKind::Envoyproxy(counting) => sink.uint(counting.ttl_s(rate)),
            }
        }
    }
}

/// One call of the request script deciding `requests` in order (`FCALL` of its function, or
/// `EVALSHA` of its script: the same arguments follow either): its rate table built, ready to be
/// written to a redis crate command or straight into a connection's output buffer.
pub struct ScriptCall<I> {
    requests: I,
    command: CallCommand,
    placement: KeyPlacement,
    table: RateTable,
    requests_count: usize,
    checks: usize,
}

impl<'a, I: Iterator<Item = &'a Invocation> + Clone> ScriptCall<I> {
    /// The call deciding `requests` by `command`, its keys placed as `placement` says.
    pub fn new(requests: I, command: CallCommand, placement: KeyPlacement) -> ScriptCall<I> {
        let mut table = RateTable::default();
        let mut requests_count = 0;
        let mut checks = 0;
        for request in requests.clone() {
            requests_count += 1;
            checks += request.checks.len();
            for check in &request.checks {
                table.position_for(check.rate, check.counter);
            }
        }
        ScriptCall {
            requests,
            command,
            placement,
            table,
            requests_count,
            checks,
        }
    }

    /// Requests the call decides.
    pub fn request_count(&self) -> usize {
        self.requests_count
    }

    /// The command that carries the call.
    pub fn call_command(&self) -> CallCommand {
        self.command
    }

    /// Carries the call by `command` from now on (the server lost its library or its scripts and
    /// answered the reload otherwise).
    pub fn set_call_command(&mut self, command: CallCommand) {
        self.command = command;
    }

    /// Arguments of the command, its name included.
    pub fn arg_count(&self) -> usize {
        let placement = match self.placement {
            KeyPlacement::Declared => 1,
            KeyPlacement::InArguments => 2,
        };
        2 + placement + self.checks + self.table.arg_count() + FIELDS_PER_CHECK * self.checks
    }

    /// `FCALL <function>` or `EVALSHA <sha>`, then `<keys> keys... rates... requests...`, every
    /// argument into `sink`.
    pub fn write_to(&mut self, sink: &mut impl ArgSink) {
        sink.bytes(self.command.name().as_bytes());
        sink.bytes(library().target(&DECIDE, self.command).as_bytes());
        match self.placement {
            KeyPlacement::Declared => sink.uint(self.checks as u64),
            KeyPlacement::InArguments => {
                sink.uint(0);
                sink.uint(self.checks as u64);
            }
        }
        for request in self.requests.clone() {
            for key in &request.keys {
                sink.bytes(key.as_bytes());
            }
        }
        self.table.write_to(sink);
        for request in self.requests.clone() {
            let mut head = Some((request.checks(), request.pinned_now_us));
            for check in &request.checks {
                let position = self.table.position_for(check.rate, check.counter);
                let spec = match check.lease {
                    Some((min, period_us)) => {
                        Spec::lease(position, check.hits, min, period_us, request.pinned_now_us)
                    }
                    None => Spec::new(position, check.hits, check.shadow, head.take()),
                };
                sink.bytes(spec.as_bytes());
            }
        }
    }

    /// The whole command, RESP-encoded, appended to `out`.
    pub fn encode(&mut self, out: &mut Vec<u8>) {
        resp::push_command(out, self.arg_count());
        self.write_to(out);
    }

    /// The command for the redis crate.
    pub fn command(&mut self) -> redis::Cmd {
        let mut cmd = redis::Cmd::new();
        self.write_to(&mut cmd);
        cmd
    }
}

/// `EVALSHA <sha> <keys> keys... rates... requests...` deciding `requests` in order, in one call.
pub fn evalsha<'a>(requests: impl Iterator<Item = &'a Invocation> + Clone) -> redis::Cmd {
    evalsha_placed(requests, KeyPlacement::Declared)
}

/// [`evalsha`] with the keys placed as `placement` says.
pub fn evalsha_placed<'a>(
    requests: impl Iterator<Item = &'a Invocation> + Clone,
    placement: KeyPlacement,
) -> redis::Cmd {
    ScriptCall::new(requests, CallCommand::Evalsha, placement).command()
}

/// `FCALL <function> <keys> keys... rates... requests...` deciding `requests` in order, in one
/// call of the library's request function, the keys placed as `placement` says.
pub fn fcall_placed<'a>(
    requests: impl Iterator<Item = &'a Invocation> + Clone,
    placement: KeyPlacement,
) -> redis::Cmd {
    ScriptCall::new(requests, CallCommand::Fcall, placement).command()
}

/// `SCRIPT LOAD <source>` of the request script.
pub fn script_load() -> redis::Cmd {
    DECIDE.load_command()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha1_is_stable_and_hex() {
        assert_eq!(sha1().len(), 40);
        assert!(sha1().bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(sha1(), redis::Script::new(DECIDE.source()).get_hash());
    }

    #[test]
    fn specs_are_short_for_the_common_check_and_complete_otherwise() {
        let text = |position, hits, shadow, head| {
            String::from_utf8(Spec::new(position, hits, shadow, head).as_bytes().to_vec()).unwrap()
        };
        assert_eq!(text(1, 1, false, Some((1, None))), "1");
        assert_eq!(text(12, 1, false, None), "+12");
        assert_eq!(text(3, 0, false, Some((1, None))), "3:0:0:1");
        assert_eq!(text(2, 1, true, Some((1, None))), "2:1:1:1");
        assert_eq!(text(1, 1, false, Some((3, None))), "1:1:0:3");
        assert_eq!(text(1, 1, false, Some((1, Some(17)))), "1:1:0:1:17");
        assert_eq!(text(4, 7, true, None), "+4:7:1");
        let longest = text(
            usize::MAX,
            u64::MAX,
            true,
            Some((usize::MAX, Some(u64::MAX))),
        );
        assert!(longest.len() < SPEC_MAX_LEN);
        assert_eq!(text(9, 1, true, None), "+9:1:1");
    }

    #[test]
    fn a_lease_spec_names_its_terms_and_fits_at_the_longest() {
        let lease = |position, want, min, period, pinned| {
            let spec = Spec::lease(position, want, min, period, pinned);
            String::from_utf8(spec.as_bytes().to_vec()).unwrap()
        };
        assert_eq!(lease(2, 75, 1, 100_000, None), "L2:75:1:100000");
        assert_eq!(lease(1, 4, 4, 9, Some(17)), "L1:4:4:9:17");
        let longest = lease(usize::MAX, u64::MAX, u64::MAX, u64::MAX, Some(u64::MAX));
        assert_eq!(longest.len(), SPEC_MAX_LEN);
    }
}
