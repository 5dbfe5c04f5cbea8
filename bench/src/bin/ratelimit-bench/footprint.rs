//! Memory-store footprint: RSS growth per tracked key, and what an expiry sweep gives back.
//!
//! Runs in this process only (no server): a `MemoryStore` on a manual clock, `keys` distinct
//! counters of one algorithm created with one admitted hit each, RSS (`VmRSS`) read before and
//! after. Then the clock jumps past every key's expiry, `sweep_expired` runs, and RSS is read
//! again. Run one algorithm per process: RSS is process-wide.

use std::sync::Arc;
use std::time::Instant;

use clap::Args;
use ratelimitd::limiter::counter_key::CounterKey;
use ratelimitd::limiter::{Algorithm, Entry, ManualClock, Rate, Unit};
use ratelimitd::store::{Check, MemoryStore};
use serde_json::json;

use crate::procstat::self_rss_bytes;

#[derive(Args, Clone, Debug)]
pub struct FootprintArgs {
    /// Distinct counters to create.
    #[arg(long, default_value_t = 1_000_000)]
    pub keys: u64,
    /// fixed_window, sliding_window_log, sliding_window_counter, token_bucket or gcra.
    #[arg(long, default_value = "gcra")]
    pub algorithm: String,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

const T0_US: u64 = 1_700_000_000_000_000;

pub fn run(args: &FootprintArgs) -> Result<(), String> {
    let algorithm = Algorithm::parse(&args.algorithm)
        .ok_or_else(|| format!("unknown algorithm `{}`", args.algorithm))?;
    // 100 per minute: every key's state lives at most a minute (+ the window before it).
    let rate = Rate::new(algorithm, 100, Unit::Minute, 1, None).map_err(|e| e.to_string())?;
    let clock = Arc::new(ManualClock::new(T0_US));
    let store = MemoryStore::with_clock(clock.clone());
    // One decision first, so the store's lazily allocated pieces are not counted per key.
    store.decide_now(&[check(&rate, &args.algorithm, u64::MAX)]);

    let rss_before = self_rss_bytes().ok_or("cannot read VmRSS")?;
    let started = Instant::now();
    for i in 0..args.keys {
        let verdicts = store.decide_now(&[check(&rate, &args.algorithm, i)]);
        if !verdicts.first().is_some_and(|v| v.admitted) {
            return Err(format!("key {i} was not admitted"));
        }
    }
    let insert_time = started.elapsed();
    let rss_full = self_rss_bytes().ok_or("cannot read VmRSS")?;
    let tracked = store.len() as u64;

    clock.advance_us(3 * rate.window_us());
    let started = Instant::now();
    let swept = store.sweep_expired() as u64;
    let sweep_time = started.elapsed();
    let tracked_after_sweep = store.len() as u64;
    let rss_swept = self_rss_bytes().ok_or("cannot read VmRSS")?;

    let growth = rss_full.saturating_sub(rss_before);
    let per_key = growth as f64 / args.keys.max(1) as f64;
    let released = rss_full.saturating_sub(rss_swept);
    if args.json {
        println!(
            "{}",
            json!({
                "kind": "footprint",
                "algorithm": algorithm.as_str(),
                "keys": args.keys,
                "tracked": tracked,
                "rss_before_bytes": rss_before,
                "rss_full_bytes": rss_full,
                "rss_after_sweep_bytes": rss_swept,
                "bytes_per_key": per_key,
                "swept": swept,
                "tracked_after_sweep": tracked_after_sweep,
                "released_bytes": released,
                "insert_ns_per_key": insert_time.as_nanos() as f64 / args.keys.max(1) as f64,
                "sweep_ms": sweep_time.as_secs_f64() * 1_000.0,
            })
        );
    } else {
        println!(
            "footprint {}: {} keys ({} tracked): RSS {:.1} MiB -> {:.1} MiB = {:.1} bytes/key \
             ({:.0} ns/insert); sweep removed {} in {:.0} ms ({} left), RSS -> {:.1} MiB \
             ({:.1} MiB released)",
            algorithm.as_str(),
            args.keys,
            tracked,
            mib(rss_before),
            mib(rss_full),
            per_key,
            insert_time.as_nanos() as f64 / args.keys.max(1) as f64,
            swept,
            sweep_time.as_secs_f64() * 1_000.0,
            tracked_after_sweep,
            mib(rss_swept),
            mib(released),
        );
    }
    Ok(())
}

fn check(rate: &Rate, key: &str, i: u64) -> Check {
    let entries = [Entry {
        key: key.to_owned(),
        value: format!("user-{i}"),
    }];
    Check {
        key: CounterKey::new("bench", &entries),
        rate: *rate,
        hits: 1,
        shadow: false,
        consistency: ratelimitd::limiter::Consistency::Exact,
        rule: None,
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}
