//! The load generator: N HTTP/2 connections x M RPCs in flight, closed or open loop.
//!
//! The load generator shares the machine's cores with the server it measures (one core each when
//! pinned), so its own CPU time per request caps the throughput it can show. Its hot path is
//! therefore kept lean. Against the tonic client it replaced (same run, transport ceiling, 2
//! vCPUs): about 12.5 → 8.5 µs of client CPU per request, user time 6.6 → 3.5 µs; the rest is
//! the kernel (loopback TCP, epoll, wakeups: one read, one write and one epoll_wait per ~2
//! responses), as much as before.
//!
//! - gRPC straight over [`h2`], framed by hand ([`client`], [`wire`]): no tonic `Channel`,
//!   whose tower buffer adds a task hop per RPC and whose codec boxes every body and decodes the
//!   whole response;
//! - request messages encoded from the templates into a reused buffer
//!   ([`template::Encoder`]), no per-request `String`s or message structs;
//! - of a response only `overall_code` and the number of `statuses` are read
//!   ([`wire::decode_response`]), which is all the counts need;
//! - worker threads each run a current-thread runtime with their connections' driver tasks and
//!   slots ([`drive`]): no work stealing, no cross-thread wakeups on the request path (a
//!   multi-thread runtime with one worker cost ~7 % more CPU per request);
//! - one latency histogram per thread rather than per slot (fewer cache lines touched).
//!
//! Tried and not kept: reusing one timer per slot for the per-RPC deadline instead of a
//! `timeout` per RPC made no measurable difference.
//!
//! The parts: [`template`] (descriptor templates, request encoding), [`rng`] (key numbers),
//! [`wire`] (protobuf and gRPC framing), [`client`] (connections, one RPC), [`drive`] (threads,
//! phases, closed loop), [`open_loop`] (`--rate`), [`tally`] (what is measured), [`output`]
//! (text and JSON).

mod client;
mod drive;
mod open_loop;
mod output;
mod rng;
mod tally;
mod template;
mod wire;

use std::sync::Arc;
use std::time::Duration;

use clap::Args;

#[derive(Args, Clone, Debug)]
pub struct LoadArgs {
    /// Server address: `IP:PORT` or `http://HOST:PORT`.
    #[arg(long, default_value = "127.0.0.1:8081")]
    pub addr: String,
    /// HTTP/2 connections.
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
    /// Open loop: this many requests per second in total, on a fixed schedule (request k on
    /// connection k mod N), at most --concurrency in flight per connection.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Report this process's CPU time per request (`/proc/PID/stat`, utime + stime).
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// Also report a store's CPU time per request (e.g. redis-server). Repeatable: the CPU
    /// time of every PID given is summed, so a store of several processes (the masters of a
    /// Redis Cluster) is measured as a whole.
    #[arg(long)]
    pub store_pid: Vec<u32>,
    /// Load generator threads, each a single-threaded runtime driving its share of the
    /// connections (default: the CPUs this process may run on, at most --connections).
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
    let report = drive::drive(Arc::new(args.clone()))?;
    if args.json {
        println!("{}", report.to_json(&args));
    } else {
        print!("{}", report.to_text(&args));
    }
    Ok(())
}
