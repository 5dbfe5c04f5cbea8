//! The report of a run: throughput, latency percentiles, counts and CPU time per request, as
//! text or as one JSON object (the lines `ratelimit-bench report` reads).

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::json;

use super::tally::{Snapshot, Tally};
use super::LoadArgs;

/// What one run measured.
pub(super) struct Report {
    pub(super) tally: Tally,
    /// From the `before` snapshot to the `after` one.
    pub(super) elapsed: Duration,
    pub(super) before: Snapshot,
    pub(super) after: Snapshot,
    /// The server's URL.
    pub(super) target: String,
}

fn per_request(before: Option<u64>, after: Option<u64>, requests: u64) -> Option<f64> {
    match (before, after) {
        (Some(b), Some(a)) if requests > 0 => Some(a.saturating_sub(b) as f64 / requests as f64),
        _ => None,
    }
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1_000.0
}

impl Report {
    fn throughput(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.tally.requests() as f64 / secs
        } else {
            0.0
        }
    }

    fn cpu(&self) -> (Option<f64>, Option<f64>, Option<f64>) {
        let n = self.tally.requests();
        (
            per_request(self.before.server_us, self.after.server_us, n),
            per_request(self.before.store_us, self.after.store_us, n),
            per_request(self.before.client_us, self.after.client_us, n),
        )
    }

    /// The machine's CPUs, and how many of them were busy on average during the measurement
    /// (every process's work, the measured ones' and any other's).
    fn machine_cpus(&self) -> (Option<u32>, Option<f64>) {
        match (self.before.machine, self.after.machine) {
            (Some(b), Some(a)) => {
                let total = a.total_ticks.saturating_sub(b.total_ticks);
                let busy = a.busy_ticks.saturating_sub(b.busy_ticks);
                let busy_cpus = (total > 0).then(|| f64::from(a.cpus) * busy as f64 / total as f64);
                (Some(a.cpus), busy_cpus)
            }
            _ => (None, None),
        }
    }

    fn percentile_us(&self, q: f64) -> f64 {
        us(self.tally.latency_ns.value_at_quantile(q))
    }

    pub(super) fn to_json(&self, args: &LoadArgs) -> String {
        let h = &self.tally.latency_ns;
        let (server, store, client) = self.cpu();
        let (machine_cpus, machine_cpus_busy) = self.machine_cpus();
        let elapsed_cpu = |b: Option<u64>, a: Option<u64>| match (b, a) {
            (Some(b), Some(a)) => Some(a.saturating_sub(b)),
            _ => None,
        };
        let tags: serde_json::Map<String, serde_json::Value> = args
            .tags
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::from(v.as_str())))
            .collect();
        json!({
            "label": args.label,
            "tags": tags,
            "target": self.target,
            "mode": if args.rate.is_some() { "open" } else { "closed" },
            "rate": args.rate,
            "connections": args.connections,
            "concurrency": args.concurrency,
            "in_flight": args.connections * args.concurrency,
            "domain": args.domain,
            "descriptors": self.descriptor_count(args),
            "keys": args.keys,
            "warmup_s": args.warmup.as_secs_f64(),
            "elapsed_s": self.elapsed.as_secs_f64(),
            "requests": self.tally.requests(),
            "warmup_requests": self.tally.warmup,
            "throughput_rps": self.throughput(),
            "ok": self.tally.ok,
            "over_limit": self.tally.over_limit,
            "unknown": self.tally.unknown,
            "errors": self.tally.errors(),
            "error_kinds": self.tally.errors,
            "late_starts": self.tally.late,
            "latency_us": {
                "p50": self.percentile_us(0.50),
                "p90": self.percentile_us(0.90),
                "p99": self.percentile_us(0.99),
                "p999": self.percentile_us(0.999),
                "max": us(h.max()),
                "mean": h.mean() / 1_000.0,
            },
            "server_cpu_us_per_request": server,
            "store_cpu_us_per_request": store,
            "client_cpu_us_per_request": client,
            "server_context_switches_per_request": per_request(
                self.before.server_switches,
                self.after.server_switches,
                self.tally.requests()
            ),
            "server_cpu_us": elapsed_cpu(self.before.server_us, self.after.server_us),
            "store_cpu_us": elapsed_cpu(self.before.store_us, self.after.store_us),
            "client_cpu_us": elapsed_cpu(self.before.client_us, self.after.client_us),
            "machine_cpus": machine_cpus,
            "machine_cpus_busy": machine_cpus_busy,
        })
        .to_string()
    }

    fn descriptor_count(&self, args: &LoadArgs) -> usize {
        if args.templates.is_empty() {
            args.descriptors as usize
        } else {
            args.templates.len()
        }
    }

    pub(super) fn to_text(&self, args: &LoadArgs) -> String {
        let h = &self.tally.latency_ns;
        let (server, store, client) = self.cpu();
        let mode = match args.rate {
            Some(rate) => format!("open loop at {rate:.0} req/s"),
            None => "closed loop".to_string(),
        };
        let mut out = String::new();
        let _ = writeln!(
            out,
            "ratelimit-bench {}{}: {mode}, {} connection(s) x {} in flight, {} descriptor(s)/request, keys={}",
            self.target,
            if args.label.is_empty() { String::new() } else { format!(" [{}]", args.label) },
            args.connections,
            args.concurrency,
            self.descriptor_count(args),
            args.keys,
        );
        let _ = writeln!(
            out,
            "  requests     {} in {:.2} s = {:.0} req/s",
            self.tally.requests(),
            self.elapsed.as_secs_f64(),
            self.throughput()
        );
        let _ = writeln!(
            out,
            "  latency µs   p50 {:.1}  p90 {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1}  mean {:.1}",
            self.percentile_us(0.50),
            self.percentile_us(0.90),
            self.percentile_us(0.99),
            self.percentile_us(0.999),
            us(h.max()),
            h.mean() / 1_000.0
        );
        let _ = writeln!(
            out,
            "  codes        OK {}  OVER_LIMIT {}  UNKNOWN {}  errors {}",
            self.tally.ok,
            self.tally.over_limit,
            self.tally.unknown,
            self.tally.errors()
        );
        for (error, count) in &self.tally.errors {
            let _ = writeln!(out, "    {count} x {error}");
        }
        if self.tally.malformed > 0 {
            let _ = writeln!(
                out,
                "    {} x wrong number of statuses",
                self.tally.malformed
            );
        }
        if args.rate.is_some() {
            let _ = writeln!(
                out,
                "  late starts  {} (every slot busy at the scheduled time)",
                self.tally.late
            );
        }
        let show = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
        let _ = writeln!(
            out,
            "  cpu µs/req   server {}  store {}  load generator {}",
            show(server),
            show(store),
            show(client)
        );
        if let (Some(cpus), Some(busy)) = self.machine_cpus() {
            let _ = writeln!(
                out,
                "  machine      {busy:.2} of {cpus} CPUs busy (every process)"
            );
        }
        out
    }
}
