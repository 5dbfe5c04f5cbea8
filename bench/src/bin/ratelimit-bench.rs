//! `ratelimit-bench`: load generator and measurements for ratelimitd (and any RLS v3 server).
//!
//! ```text
//! ratelimit-bench --addr 127.0.0.1:8081 [--connections 2] [--concurrency 16]
//!                 [--domain bench] [--key gcra] [--keys 100000] [--descriptors 3]
//!                 [--descriptor 'k=v{r},k2=x{i}' ...] [--hits-addend N]
//!                 [--duration 5s | --requests N] [--warmup 1s] [--rate R]
//!                 [--server-pid PID] [--store-pid PID ...] [--threads N] [--json] [--label TEXT]
//! ratelimit-bench footprint [--keys 1000000] [--algorithm gcra] [--json]
//! ratelimit-bench report RESULTS.jsonl...
//! ratelimit-bench rlqs [--addr 127.0.0.1:8081] [--domain bench] [--streams 1000] [--buckets 100]
//!                      [--connections 10] [--interval 1s] [--warmup 5s] [--duration 30s]
//!                      [--server-pid PID]
//! ratelimit-bench hold [--addr 127.0.0.1:8081] [--connections 1000] [--streams 100]
//!                      [--declared 65000] [--hold 2s] [--rounds 4] [--server-pid PID]
//! ratelimit-bench swl-redis-cost [--hits 100000] [--calls 2000]
//! ratelimit-bench redis-memory-per-key [--keys 100000] [--algorithms fixed_window,gcra,...]
//! ratelimit-bench lease [--replicas 3] [--rate 4000] [--duration 5s] [--warmup 1s]
//!                       [--algorithms fixed_window,sliding_window_counter,...] [--loads under,10x]
//! ratelimit-bench soak [--duration 600s] [--reload-every 3s] [--rate 1500] [--check-rate 200]
//! ```
//!
//! The load: `connections` HTTP/2 connections, `concurrency` RPCs in flight on each (gRPC
//! framed by hand over `h2`, on one single-threaded runtime per load thread: the load generator's
//! own CPU per request caps what it can measure, see load/mod.rs). Closed loop by default (each RPC
//! starts when the previous one of its slot ends); with `--rate R` open loop: R requests per
//! second in total on a fixed schedule, round robin over the connections, at most `concurrency`
//! in flight on each; a request that finds every slot of its connection busy is timed from its
//! scheduled instant (so a stalled server shows as latency, not as fewer requests). Reported:
//! throughput, latency percentiles (HdrHistogram), OK / OVER_LIMIT / error counts, and the CPU
//! time per request of the server (`--server-pid`), of a store such as redis-server
//! (`--store-pid`, summed over every one given: the masters of a Redis Cluster) and of the load
//! generator itself, from `/proc/PID/stat`, and the CPUs of the whole machine busy meanwhile
//! (`/proc/stat`: on a shared machine other work takes cores too).
//!
//! `footprint` inserts keys into an in-process `MemoryStore` and reports the RSS growth per key,
//! then how much an expiry sweep gives back. `hold` opens many connections of half-sent calls, round
//! after round, and reports what the server keeps (see hold.rs). `rlqs` holds many RLQS streams of many
//! buckets reporting on a schedule and times the assignments (see rlqs.rs). `report` turns the JSON lines of a
//! `scripts/bench.sh` run into its markdown tables. `swl-redis-cost` times sliding-window-log calls
//! inside a redis-server of its own (see swl_redis_cost.rs); `redis-memory-per-key` runs this load
//! through ratelimitd (the binary beside this one) on a redis-server of its own and reports the Redis
//! memory per key of each algorithm (see redis_memory_per_key.rs); `lease` compares exact and leased
//! consistency of several replicas on one hot key with the memory store (see lease.rs); `soak` keeps
//! a memory and a Redis server under load for minutes while their configuration is rewritten and
//! redis-server restarts, and checks that no window admitted more than its limit (see soak/mod.rs).

// The crate root lives in src/bin/, its modules beside it in src/bin/ratelimit-bench/.
#[path = "ratelimit-bench/footprint.rs"]
mod footprint;
#[path = "ratelimit-bench/hold.rs"]
mod hold;
#[path = "ratelimit-bench/lease.rs"]
mod lease;
#[path = "ratelimit-bench/load/mod.rs"]
mod load;
#[path = "ratelimit-bench/load_process.rs"]
mod load_process;
#[path = "ratelimit-bench/procstat.rs"]
mod procstat;
#[path = "ratelimit-bench/redis_memory_per_key.rs"]
mod redis_memory_per_key;
#[path = "ratelimit-bench/report.rs"]
mod report;
#[path = "ratelimit-bench/rlqs.rs"]
mod rlqs;
#[path = "ratelimit-bench/run_header.rs"]
mod run_header;
#[path = "ratelimit-bench/soak/mod.rs"]
mod soak;
#[path = "ratelimit-bench/swl_redis_cost.rs"]
mod swl_redis_cost;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "ratelimit-bench",
    about = "Load generator for RLS v3 servers (ratelimitd, rls-ceiling) and memory-store footprint",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    load: load::LoadArgs,
}

#[derive(Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once
enum Command {
    /// Run the load (the default when no subcommand is given).
    Load(load::LoadArgs),
    /// Insert keys into an in-process MemoryStore and report RSS growth per key.
    Footprint(footprint::FootprintArgs),
    /// Hold many connections of half-sent calls, round after round, and read the server's RSS.
    Hold(hold::HoldArgs),
    /// Open many RLQS streams of many buckets, report on each, time the assignments.
    Rlqs(rlqs::RlqsArgs),
    /// Render the markdown tables of a scripts/bench.sh run from its JSON lines.
    Report(report::ReportArgs),
    /// Time, in redis-server's own statistics, sliding-window-log calls on a full key and a key of one hit.
    SwlRedisCost(swl_redis_cost::SwlRedisCostArgs),
    /// Measure the Redis memory per tracked key of each algorithm, through ratelimitd on a redis-server of its own.
    RedisMemoryPerKey(redis_memory_per_key::RedisMemoryPerKeyArgs),
    /// Exact and leased consistency of several replicas on one hot key, against the memory store.
    Lease(lease::LeaseArgs),
    /// A memory and a Redis server under load with reloads and redis-server restarts; over-admission fails it.
    Soak(soak::SoakArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::Footprint(args)) => footprint::run(&args),
        Some(Command::Report(args)) => report::run(&args),
        Some(Command::Hold(args)) => hold::run(&args),
        Some(Command::Rlqs(args)) => rlqs::run(&args),
        Some(Command::SwlRedisCost(args)) => swl_redis_cost::run(&args),
        Some(Command::RedisMemoryPerKey(args)) => redis_memory_per_key::run(&args),
        Some(Command::Lease(args)) => lease::run(&args),
        Some(Command::Soak(args)) => soak::run(&args),
        Some(Command::Load(args)) => load::run(args),
        None => load::run(cli.load),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("ratelimit-bench: {error}");
            ExitCode::FAILURE
        }
    }
}
