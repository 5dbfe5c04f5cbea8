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
//! ratelimit-bench redis-cpu [--duration 5s] [--warmup 1s] [--connections 4] [--concurrency 16]
//!                           [--keys 10000] [--algorithms fixed_window,gcra,...] [--descriptors 1,3]
//!                           [--calls fcall,evalsha] [--baseline-requests 1000000]
//!                           [--baseline-clients 50] [--open-loop-rate 5000] [--no-profile]
//!                           [--profile-requests 4000] [--profile-warmup 1000]
//!                           [--redis-server PATH] [--keep] [-- SERVE-ARGS...]
//! ratelimit-bench callgrind [--repeat 1] [--requests 20000] [--warmup-requests 3000]
//!                           [--connections 2] [--concurrency 16] [--keys 100000] [--descriptors 1]
//!                           [--variants no-otel,off,on-0.01,on-1] [--ratelimitd PATH]
//!                           [--no-otel-ratelimitd PATH] [-- SERVE-ARGS...]
//! ratelimit-bench scrape-callgrind [--rules 5000] [--scrapes 10] [--ratelimitd PATH] [--save FILE]
//! ratelimit-bench matrix [--duration 3s] [--warmup 1s] [--connections 2] [--concurrency 16]
//!                        [--stores memory,redis] [--algorithms fixed_window,...,gcra]
//!                        [--keys 1,100000] [--descriptors 1,3] [--repeat 1] [--redis-threads 1]
//!                        [--no-ceilings] [--no-half-peak] [--no-cluster] [--cluster-masters 1,3]
//!                        [--footprint-keys 1000000] [--results FILE]
//! ratelimit-bench tracing-cost [--rounds 5] [--duration 4s] [--warmup 1s] [--connections 2]
//!                              [--concurrency 16] [--keys 100000] [--descriptors 1]
//!                              [--no-otel-bin PATH]
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
//! buckets reporting on a schedule and times the assignments (see rlqs.rs). `swl-redis-cost` times sliding-window-log calls
//! inside a redis-server of its own (see swl_redis_cost.rs); `redis-memory-per-key` runs this load
//! through ratelimitd (the binary beside this one) on a redis-server of its own and reports the Redis
//! memory per key of each algorithm (see redis_memory_per_key.rs); `lease` compares exact and leased
//! consistency of several replicas on one hot key with the memory store (see lease.rs); `soak` keeps
//! a memory and a Redis server under load for minutes while their configuration is rewritten and
//! redis-server restarts, and checks that no window admitted more than its limit (see soak/mod.rs).
//! `redis-cpu` measures redis-server's CPU and instructions per decision of ratelimitd beside envoyproxy/ratelimit's
//! INCRBY + EXPIRE pipeline (see redis_cpu.rs); `callgrind` counts ratelimitd's instructions per
//! decision under valgrind's callgrind, with tracing off, on or compiled out (see
//! callgrind_variants.rs); `scrape-callgrind` counts the instructions of a `/metrics` scrape (see
//! scrape_callgrind.rs); `transport-profile` counts ratelimitd's and the null server's
//! (`rls-ceiling`) instructions per request grouped by crate (see transport_profile.rs). They run
//! the `ratelimitd` beside this executable by default; the machinery is callgrind.rs.
//! `matrix` runs the benchmark matrix (store x algorithm x keys x descriptors), its ceilings, the
//! other load shapes, the memory store's footprint and Redis Cluster runs, starting ratelimitd,
//! redis-server and rls-ceiling itself, and prints the tables (see matrix/mod.rs); `report`
//! renders them again from the JSON lines it kept. `tracing-cost` compares ratelimitd's CPU per
//! decision without the `otel` feature, with tracing off and with two sampling ratios (see
//! tracing_cost.rs); both run the load as a child process pinned to a CPU (see load_child.rs).

// The crate root lives in src/bin/, its modules beside it in src/bin/ratelimit-bench/.
#[path = "ratelimit-bench/callgrind.rs"]
mod callgrind;
#[path = "ratelimit-bench/callgrind_variants.rs"]
mod callgrind_variants;
#[path = "ratelimit-bench/footprint.rs"]
mod footprint;
#[path = "ratelimit-bench/hold.rs"]
mod hold;
#[path = "ratelimit-bench/lease.rs"]
mod lease;
#[path = "ratelimit-bench/load/mod.rs"]
mod load;
#[path = "ratelimit-bench/load_child.rs"]
mod load_child;
#[path = "ratelimit-bench/load_process.rs"]
mod load_process;
#[path = "ratelimit-bench/matrix/mod.rs"]
mod matrix;
#[path = "ratelimit-bench/procstat.rs"]
mod procstat;
#[path = "ratelimit-bench/redis_cpu.rs"]
mod redis_cpu;
#[path = "ratelimit-bench/redis_memory_per_key.rs"]
mod redis_memory_per_key;
#[path = "ratelimit-bench/report.rs"]
mod report;
#[path = "ratelimit-bench/rlqs.rs"]
mod rlqs;
#[path = "ratelimit-bench/run_header.rs"]
mod run_header;
#[path = "ratelimit-bench/scrape_callgrind.rs"]
mod scrape_callgrind;
#[path = "ratelimit-bench/servers.rs"]
mod servers;
#[path = "ratelimit-bench/soak/mod.rs"]
mod soak;
#[path = "ratelimit-bench/swl_redis_cost.rs"]
mod swl_redis_cost;
#[path = "ratelimit-bench/tracing_cost.rs"]
mod tracing_cost;
#[path = "ratelimit-bench/transport_profile.rs"]
mod transport_profile;

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
    /// Render the markdown tables of a `matrix` run from its JSON lines.
    Report(report::ReportArgs),
    /// Time, in redis-server's own statistics, sliding-window-log calls on a full key and a key of one hit.
    SwlRedisCost(swl_redis_cost::SwlRedisCostArgs),
    /// Measure the Redis memory per tracked key of each algorithm, through ratelimitd on a redis-server of its own.
    RedisMemoryPerKey(redis_memory_per_key::RedisMemoryPerKeyArgs),
    /// Exact and leased consistency of several replicas on one hot key, against the memory store.
    Lease(lease::LeaseArgs),
    /// A memory and a Redis server under load with reloads and redis-server restarts; over-admission fails it.
    Soak(soak::SoakArgs),
    /// Measure redis-server's CPU and instructions per decision of ratelimitd, beside an INCRBY + EXPIRE pipeline.
    RedisCpu(redis_cpu::RedisCpuArgs),
    /// Count ratelimitd's instructions per decision under callgrind, with tracing compiled out, off or on.
    Callgrind(callgrind_variants::CallgrindArgs),
    /// Count the instructions of a /metrics scrape of ratelimitd under callgrind.
    ScrapeCallgrind(scrape_callgrind::ScrapeCallgrindArgs),
    /// Run the benchmark matrix, its ceilings, load shapes, footprint and Redis Cluster runs; print the tables.
    Matrix(matrix::MatrixArgs),
    /// Compare ratelimitd's CPU per decision without the otel feature, tracing off, and sampling 0.01 and 1.
    TracingCost(tracing_cost::TracingCostArgs),
    /// Count the instructions per request of ratelimitd and of the null server under callgrind, grouped by crate.
    TransportProfile(transport_profile::TransportProfileArgs),
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
        Some(Command::RedisCpu(args)) => redis_cpu::run(&args),
        Some(Command::Callgrind(args)) => callgrind_variants::run(&args),
        Some(Command::ScrapeCallgrind(args)) => scrape_callgrind::run(&args),
        Some(Command::Matrix(args)) => matrix::run(&args),
        Some(Command::TracingCost(args)) => tracing_cost::run(&args),
        Some(Command::TransportProfile(args)) => transport_profile::run(&args),
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
