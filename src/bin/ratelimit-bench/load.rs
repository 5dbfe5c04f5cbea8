//! The load generator: N HTTP/2 connections x M RPCs in flight, closed or open loop.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use hdrhistogram::Histogram;
use ratelimitd::proto::common::{rate_limit_descriptor::Entry, RateLimitDescriptor};
use ratelimitd::proto::rls::rate_limit_response::Code;
use ratelimitd::proto::rls::rate_limit_service_client::RateLimitServiceClient;
use ratelimitd::proto::rls::{RateLimitRequest, RateLimitResponse};
use serde_json::json;
use tokio::time::error::Elapsed;
use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint};

use crate::procstat;

#[derive(Args, Clone, Debug)]
pub struct LoadArgs {
    /// Server address: `IP:PORT` or `http://HOST:PORT`.
    #[arg(long, default_value = "127.0.0.1:8081")]
    pub addr: String,
    /// HTTP/2 connections (one tonic Channel each).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    pub connections: u32,
    /// RPCs in flight per connection.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    pub concurrency: u32,
    /// Request domain.
    #[arg(long, default_value = "bench")]
    pub domain: String,
    /// Descriptor key of the default template `KEY=d{i}-{r}` (the bench config has one rule per
    /// algorithm, keyed by the algorithm's name).
    #[arg(long, default_value = "gcra")]
    pub key: String,
    /// Key cardinality: `{r}` is uniform in 0..keys; 1 = one hot counter per descriptor.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub keys: u64,
    /// Descriptors per request (default template only).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub descriptors: u32,
    /// A descriptor template, repeatable (replaces --key/--descriptors): `key=value` entries
    /// separated by `,`; in a value `{r}` is the descriptor's random key number and `{i}` its
    /// index in the request. Example: `--descriptor 'api_key=k{r},path=/v1/items'`.
    #[arg(long = "descriptor")]
    pub templates: Vec<String>,
    /// Request-level hits_addend (0: unset, 1 hit per descriptor).
    #[arg(long, default_value_t = 0)]
    pub hits_addend: u32,
    /// Measured duration (ignored with --requests).
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Measured request count instead of a duration.
    #[arg(long)]
    pub requests: Option<u64>,
    /// Load sent before measuring starts (connections warm, server caches and tables grown).
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub warmup: Duration,
    /// Open loop: this many requests per second in total, on a fixed schedule per slot.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Report this process's CPU time per request (`/proc/PID/stat`, utime + stime).
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// Also report a store process's CPU time per request (e.g. redis-server).
    #[arg(long)]
    pub store_pid: Option<u32>,
    /// Load generator runtime threads (default: the CPUs this process may run on).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Per-RPC deadline; a slower answer counts as an error.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Free text copied into the report.
    #[arg(long, default_value = "")]
    pub label: String,
    /// `NAME=VALUE` copied into the JSON report's `tags` (repeatable; `ratelimit-bench report`
    /// reads `kind`, `store` and `algorithm`).
    #[arg(long = "tag", value_parser = parse_tag)]
    pub tags: Vec<(String, String)>,
    /// Seed of the key generator.
    #[arg(long, default_value_t = 0x5eed)]
    pub seed: u64,
}

fn parse_tag(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("`{text}` is not NAME=VALUE"))
}

pub fn run(args: LoadArgs) -> Result<(), String> {
    if let Some(rate) = args.rate {
        if !(rate.is_finite() && rate > 0.0) {
            return Err("--rate must be a positive number".into());
        }
    }
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    if let Some(threads) = args.threads {
        builder.worker_threads(threads.max(1));
    }
    let runtime = builder
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let report = runtime.block_on(drive(&args))?;
    if args.json {
        println!("{}", report.to_json(&args));
    } else {
        print!("{}", report.to_text(&args));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Descriptor templates

#[derive(Debug, Clone)]
enum Piece {
    Text(String),
    Random,
    Index,
}

#[derive(Debug, Clone)]
struct EntryTemplate {
    key: String,
    value: Vec<Piece>,
}

/// The descriptors of every request; values are filled per request.
#[derive(Debug, Clone)]
pub struct Template {
    descriptors: Vec<Vec<EntryTemplate>>,
}

impl Template {
    pub fn from_args(args: &LoadArgs) -> Result<Template, String> {
        let texts: Vec<String> = if args.templates.is_empty() {
            (0..args.descriptors)
                .map(|_| format!("{}=d{{i}}-{{r}}", args.key))
                .collect()
        } else {
            args.templates.clone()
        };
        let descriptors = texts
            .iter()
            .map(|text| parse_descriptor(text))
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Template { descriptors })
    }

    fn build(
        &self,
        domain: &str,
        hits_addend: u32,
        keys: u64,
        rng: &mut SplitMix,
    ) -> RateLimitRequest {
        let descriptors = self
            .descriptors
            .iter()
            .enumerate()
            .map(|(index, entries)| {
                let random = if keys <= 1 { 0 } else { rng.below(keys) };
                RateLimitDescriptor {
                    entries: entries
                        .iter()
                        .map(|entry| {
                            let mut value = String::with_capacity(16);
                            for piece in &entry.value {
                                match piece {
                                    Piece::Text(text) => value.push_str(text),
                                    Piece::Random => {
                                        let _ = write!(value, "{random}");
                                    }
                                    Piece::Index => {
                                        let _ = write!(value, "{index}");
                                    }
                                }
                            }
                            Entry {
                                key: entry.key.clone(),
                                value,
                            }
                        })
                        .collect(),
                    ..RateLimitDescriptor::default()
                }
            })
            .collect();
        RateLimitRequest {
            domain: domain.to_owned(),
            descriptors,
            hits_addend,
        }
    }
}

fn parse_descriptor(text: &str) -> Result<Vec<EntryTemplate>, String> {
    text.split(',')
        .map(|entry| {
            let (key, value) = entry.split_once('=').ok_or_else(|| {
                format!("descriptor template `{text}`: `{entry}` is not key=value")
            })?;
            if key.is_empty() {
                return Err(format!("descriptor template `{text}`: empty key"));
            }
            Ok(EntryTemplate {
                key: key.to_owned(),
                value: parse_value(value),
            })
        })
        .collect()
}

fn parse_value(mut value: &str) -> Vec<Piece> {
    let mut pieces = Vec::new();
    while !value.is_empty() {
        let (next, piece, len) = [("{r}", Piece::Random), ("{i}", Piece::Index)]
            .into_iter()
            .filter_map(|(marker, piece)| value.find(marker).map(|at| (at, piece, marker.len())))
            .min_by_key(|(at, _, _)| *at)
            .unwrap_or((value.len(), Piece::Text(String::new()), 0));
        if next > 0 {
            pieces.push(Piece::Text(value[..next].to_owned()));
        }
        if len > 0 {
            pieces.push(piece);
        }
        value = &value[next + len..];
    }
    pieces
}

/// SplitMix64: small, fast, reproducible.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in 0..n (Lemire's multiply-shift; the bias is below 2^-40 for n < 2^24).
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }
}

// ---------------------------------------------------------------------------------------------
// Running

/// Open loop: the pacer sleeps at least this long between releases.
const PACER_TICK: Duration = Duration::from_micros(200);

/// Phases shared by every slot.
struct Plan {
    /// Measurement starts (warmup ends).
    measure_start: Instant,
    /// No request starts at or after this instant.
    end: Instant,
    /// Measured requests still to send (`--requests`).
    budget: Option<AtomicI64>,
    stop: AtomicBool,
}

impl Plan {
    /// Whether a request due at `start` may go, and whether it is measured.
    fn admit(&self, start: Instant) -> Option<bool> {
        if start >= self.end || self.stop.load(Ordering::Relaxed) {
            return None;
        }
        let measured = start >= self.measure_start;
        if measured {
            if let Some(budget) = &self.budget {
                if budget.fetch_sub(1, Ordering::Relaxed) <= 0 {
                    self.stop.store(true, Ordering::Relaxed);
                    return None;
                }
            }
        }
        Some(measured)
    }
}

/// What one slot saw.
struct Tally {
    latency_ns: Histogram<u64>,
    ok: u64,
    over_limit: u64,
    unknown: u64,
    /// Responses whose status count differs from the descriptor count.
    malformed: u64,
    errors: BTreeMap<String, u64>,
    /// Open loop: requests that found every slot busy at their scheduled time.
    late: u64,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            // 1 ns .. 100 s, 3 significant digits.
            latency_ns: Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("histogram"),
            ok: 0,
            over_limit: 0,
            unknown: 0,
            malformed: 0,
            errors: BTreeMap::new(),
            late: 0,
        }
    }

    fn merge(&mut self, other: Tally) {
        let _ = self.latency_ns.add(&other.latency_ns);
        self.ok += other.ok;
        self.over_limit += other.over_limit;
        self.unknown += other.unknown;
        self.malformed += other.malformed;
        self.late += other.late;
        for (error, count) in other.errors {
            *self.errors.entry(error).or_default() += count;
        }
    }

    fn errors(&self) -> u64 {
        self.errors.values().sum::<u64>() + self.malformed
    }

    fn requests(&self) -> u64 {
        self.ok + self.over_limit + self.unknown + self.errors()
    }

    /// Records one measured RPC: its latency and its outcome.
    fn record(
        &mut self,
        latency: Duration,
        result: Result<Result<tonic::Response<RateLimitResponse>, tonic::Status>, Elapsed>,
        expected: usize,
    ) {
        self.latency_ns
            .saturating_record(latency.as_nanos().min(u128::from(u64::MAX)) as u64);
        match result {
            Err(_) => *self.errors.entry("client timeout".into()).or_default() += 1,
            Ok(Err(status)) => {
                *self
                    .errors
                    .entry(format!("{:?}: {}", status.code(), status.message()))
                    .or_default() += 1
            }
            Ok(Ok(response)) => {
                let response = response.into_inner();
                if response.statuses.len() != expected {
                    self.malformed += 1;
                    return;
                }
                match Code::try_from(response.overall_code) {
                    Ok(Code::Ok) => self.ok += 1,
                    Ok(Code::OverLimit) => self.over_limit += 1,
                    _ => self.unknown += 1,
                }
            }
        }
    }
}

/// CPU counters at one instant.
#[derive(Debug, Clone, Copy)]
struct Snapshot {
    at: Instant,
    server_us: Option<u64>,
    store_us: Option<u64>,
    client_us: Option<u64>,
}

impl Snapshot {
    fn take(args: &LoadArgs) -> Snapshot {
        Snapshot {
            at: Instant::now(),
            server_us: args.server_pid.and_then(procstat::cpu_us),
            store_us: args.store_pid.and_then(procstat::cpu_us),
            client_us: procstat::self_cpu_us(),
        }
    }
}

pub struct Report {
    tally: Tally,
    elapsed: Duration,
    before: Snapshot,
    after: Snapshot,
    target: String,
}

async fn drive(args: &LoadArgs) -> Result<Report, String> {
    let template = Arc::new(Template::from_args(args)?);
    let target = if args.addr.contains("://") {
        args.addr.clone()
    } else {
        format!("http://{}", args.addr)
    };
    let endpoint = Endpoint::from_shared(target.clone())
        .map_err(|e| format!("bad address {target}: {e}"))?
        .tcp_nodelay(true);
    let mut channels: Vec<Channel> = Vec::new();
    for _ in 0..args.connections {
        channels.push(
            endpoint
                .connect()
                .await
                .map_err(|e| format!("cannot connect to {target}: {e}"))?,
        );
    }

    let slots = (args.connections * args.concurrency) as usize;
    let origin = Instant::now();
    let measure_start = origin + args.warmup;
    let end = match args.requests {
        Some(_) => origin + Duration::from_secs(365 * 86_400),
        None => measure_start + args.duration,
    };
    let plan = Arc::new(Plan {
        measure_start,
        end,
        budget: args.requests.map(|n| AtomicI64::new(n as i64)),
        stop: AtomicBool::new(false),
    });

    let load = match args.rate {
        None => {
            let mut workers = Vec::with_capacity(slots);
            for (index, channel) in channels
                .iter()
                .flat_map(|channel| std::iter::repeat_n(channel, args.concurrency as usize))
                .enumerate()
            {
                let client = RateLimitServiceClient::new(channel.clone());
                let plan = plan.clone();
                let template = template.clone();
                let args = args.clone();
                workers.push(tokio::spawn(async move {
                    closed_slot(index, client, &plan, &template, &args).await
                }));
            }
            tokio::spawn(async move {
                let mut tally = Tally::new();
                for worker in workers {
                    tally.merge(worker.await.map_err(|e| format!("load task failed: {e}"))?);
                }
                Ok::<Tally, String>(tally)
            })
        }
        Some(rate) => {
            let clients = channels
                .iter()
                .map(|channel| RateLimitServiceClient::new(channel.clone()))
                .collect();
            let interval = Duration::from_secs_f64(1.0 / rate);
            tokio::spawn(open_loop(
                clients,
                slots,
                interval,
                origin,
                plan.clone(),
                template.clone(),
                args.clone(),
            ))
        }
    };

    tokio::time::sleep_until(measure_start).await;
    let before = Snapshot::take(args);
    let (tally, after) = if args.requests.is_none() {
        tokio::time::sleep_until(end).await;
        let after = Snapshot::take(args);
        let tally = load.await.map_err(|e| format!("load task failed: {e}"))??;
        (tally, after)
    } else {
        let tally = load.await.map_err(|e| format!("load task failed: {e}"))??;
        (tally, Snapshot::take(args))
    };
    Ok(Report {
        tally,
        elapsed: after.at.saturating_duration_since(before.at),
        before,
        after,
        target,
    })
}

/// Closed loop: each slot sends its next RPC as soon as the previous one is answered.
async fn closed_slot(
    index: usize,
    mut client: RateLimitServiceClient<Channel>,
    plan: &Plan,
    template: &Template,
    args: &LoadArgs,
) -> Tally {
    let mut rng = SplitMix(args.seed ^ (index as u64).wrapping_mul(0xA076_1D64_78BD_642F));
    let mut tally = Tally::new();
    let expected = template.descriptors.len();
    loop {
        let start = Instant::now();
        let Some(measured) = plan.admit(start) else {
            break;
        };
        let request = template.build(&args.domain, args.hits_addend, args.keys, &mut rng);
        let result = tokio::time::timeout(args.timeout, client.should_rate_limit(request)).await;
        if measured {
            tally.record(start.elapsed(), result, expected);
        }
    }
    tally
}

/// Open loop: a pacer thread releases the requests as they fall due (std sleeps, about 0.1 ms
/// precise, unlike the runtime's 1 ms timer wheel; at high rates it wakes every
/// [`PACER_TICK`] and releases what fell due meanwhile, so the load generator does not spend a
/// thread wakeup per request). Each request runs on one of `slots` permits, round robin over
/// the connections. A request that finds a free permit is timed from its send; one that has to
/// wait for a permit (every slot busy: the server is behind) is timed from its scheduled instant,
/// so queueing behind a slow server counts as latency (no coordinated omission).
async fn open_loop(
    clients: Vec<RateLimitServiceClient<Channel>>,
    slots: usize,
    interval: Duration,
    origin: Instant,
    plan: Arc<Plan>,
    template: Arc<Template>,
    args: LoadArgs,
) -> Result<Tally, String> {
    let (due_tx, mut due_rx) = tokio::sync::mpsc::unbounded_channel::<Vec<Instant>>();
    let pacer_end = plan.end;
    let pacer = std::thread::spawn(move || {
        let origin = origin.into_std();
        let end = pacer_end.into_std();
        let mut k: u32 = 0;
        loop {
            let now = std::time::Instant::now();
            let mut batch = Vec::new();
            while origin + interval * k <= now && origin + interval * k < end {
                batch.push(Instant::from_std(origin + interval * k));
                k = k.saturating_add(1);
            }
            if !batch.is_empty() && due_tx.send(batch).is_err() {
                break;
            }
            let next = origin + interval * k;
            if next >= end {
                break;
            }
            std::thread::sleep(next.saturating_duration_since(now).max(PACER_TICK));
        }
    });

    let permits = Arc::new(tokio::sync::Semaphore::new(slots));
    let tally = Arc::new(std::sync::Mutex::new(Tally::new()));
    let mut rng = SplitMix(args.seed);
    let expected = template.descriptors.len();
    let mut next_client = 0usize;
    'load: while let Some(batch) = due_rx.recv().await {
        for due in batch {
            let Some(measured) = plan.admit(due) else {
                break 'load;
            };
            let (permit, from) = match permits.clone().try_acquire_owned() {
                Ok(permit) => (permit, Instant::now()),
                Err(_) => {
                    if measured {
                        tally.lock().expect("tally").late += 1;
                    }
                    let permit = permits
                        .clone()
                        .acquire_owned()
                        .await
                        .map_err(|e| e.to_string())?;
                    (permit, due)
                }
            };
            let mut client = clients[next_client % clients.len()].clone();
            next_client += 1;
            let request = template.build(&args.domain, args.hits_addend, args.keys, &mut rng);
            let tally = tally.clone();
            let timeout = args.timeout;
            tokio::spawn(async move {
                let result = tokio::time::timeout(timeout, client.should_rate_limit(request)).await;
                if measured {
                    let latency = from.elapsed();
                    tally
                        .lock()
                        .expect("tally")
                        .record(latency, result, expected);
                }
                drop(permit);
            });
        }
    }
    drop(due_rx);
    // Every request in flight is back once all permits are.
    let _all = permits
        .acquire_many(slots as u32)
        .await
        .map_err(|e| e.to_string())?;
    let _ = pacer.join();
    let mut done = Tally::new();
    done.merge(std::mem::replace(
        &mut *tally.lock().expect("tally"),
        Tally::new(),
    ));
    Ok(done)
}

// ---------------------------------------------------------------------------------------------
// Reporting

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

    fn percentile_us(&self, q: f64) -> f64 {
        us(self.tally.latency_ns.value_at_quantile(q))
    }

    fn to_json(&self, args: &LoadArgs) -> String {
        let h = &self.tally.latency_ns;
        let (server, store, client) = self.cpu();
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
            "server_cpu_us": elapsed_cpu(self.before.server_us, self.after.server_us),
            "store_cpu_us": elapsed_cpu(self.before.store_us, self.after.store_us),
            "client_cpu_us": elapsed_cpu(self.before.client_us, self.after.client_us),
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

    fn to_text(&self, args: &LoadArgs) -> String {
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
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_expand_placeholders() {
        let entries = parse_descriptor("a=x{r}y{i},b=plain").unwrap();
        let template = Template {
            descriptors: vec![entries],
        };
        let mut rng = SplitMix(1);
        let request = template.build("d", 0, 1, &mut rng);
        let entries = &request.descriptors[0].entries;
        assert_eq!(entries[0].key, "a");
        assert_eq!(entries[0].value, "x0y0");
        assert_eq!(entries[1].value, "plain");
        assert!(parse_descriptor("novalue").is_err());
    }
}
