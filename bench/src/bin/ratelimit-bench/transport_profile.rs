//! Where a decision's instructions go: ratelimitd and the transport ceiling `rls-ceiling` (a
//! default tonic server answering a constant OK: the null server) under callgrind
//! ([`crate::callgrind`]) with the same load, every function's own instructions grouped by the
//! crate its symbol names.
//!
//! Cells: for each `--descriptors` count, the null server, ratelimitd on the memory store and,
//! with `--redis`, ratelimitd on a redis-server of its own (testkit's). ratelimitd serves domain
//! `bench` with one gcra rule that never denies. Each cell: the server starts under
//! `valgrind --tool=callgrind --instr-atstart=no`, the warm-up requests are sent, counting is
//! switched on, the measured requests are sent, the server is stopped with SIGTERM; instructions
//! per request = every thread's instructions from the switch to the exit / requests answered.
//!
//! A function's group is the crate its symbol names: `<h2::proto::X as Y>::poll` is h2's,
//! `core::ptr::drop_in_place<hyper::Z>` hyper's (the type dropped), a generic of the standard
//! library (`alloc::vec::Vec<T>::push`) the standard library's wherever it was instantiated, the
//! generated protobuf messages (`ratelimitd::proto::...`) prost's; glibc's malloc family is the
//! allocator, the rest of libc (memcpy, the syscall wrappers) libc. Kernel time is not counted.
//! valgrind hides the CPU's SHA extensions, so SHA-256 (the Redis keys' hash tags) is counted in
//! its software form, several times what it costs on a CPU that has them.
//! Markdown on stdout, progress on stderr. Arguments after `--` go to ratelimitd's `serve`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::Args;
use testkit::redis_server::RedisServer;

use crate::callgrind::{
    gcra_load, per_decision, require_tools, Attribution, Counts, Profiled, GCRA_CONFIG,
};
use crate::run_header::callgrind_header;

#[derive(Args, Clone, Debug)]
pub struct TransportProfileArgs {
    /// Measured requests per cell.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub requests: u64,
    /// Requests sent before counting starts.
    #[arg(long, default_value_t = 3_000)]
    pub warmup_requests: u64,
    /// HTTP/2 connections of the load.
    #[arg(long, default_value_t = 4)]
    pub connections: u32,
    /// RPCs in flight per connection.
    #[arg(long, default_value_t = 16)]
    pub concurrency: u32,
    /// Key cardinality of the load.
    #[arg(long, default_value_t = 10_000)]
    pub keys: u64,
    /// Descriptors per request, a set of cells each.
    #[arg(long, value_delimiter = ',', default_value = "1,3")]
    pub descriptors: Vec<u32>,
    /// Add ratelimitd on a redis-server of its own to every set of cells.
    #[arg(long)]
    pub redis: bool,
    /// Load ratelimitd's RLS port (`--rls-addr`, its own HTTP/2 server) instead of its gRPC port.
    #[arg(long)]
    pub rls_port: bool,
    /// The ratelimitd build (default: the one beside this executable).
    #[arg(long)]
    pub ratelimitd: Option<PathBuf>,
    /// Arguments for ratelimitd's `serve` (after `--`).
    #[arg(last = true)]
    pub server_args: Vec<String>,
}

/// The groups, in the order the table lists them.
const GROUPS: [&str; 13] = [
    "h2",
    "hyper",
    "tonic",
    "tower",
    "http",
    "prost",
    "bytes",
    "tokio",
    "allocator",
    "std",
    "libc",
    "service",
    "other",
];

/// What each group holds, printed under the table.
const GROUP_NOTES: &str =
    "h2: the HTTP/2 framing, HPACK and streams; hyper: hyper and hyper-util; \
tonic: tonic, tonic-prost, tonic-health, tonic-reflection; tower: tower, tower-layer, \
tower-service; http: http, http-body, http-body-util; prost: prost and the generated messages \
(`ratelimitd::proto`); tokio: tokio, tokio-util, tokio-stream and mio; allocator: glibc's malloc, \
free and realloc with `__rust_alloc` and the like; std: core, alloc and std, generics included; \
libc: the rest of glibc (memcpy, memmove, the syscall wrappers); service: ratelimitd's own code \
(the null server's: its constant answer); other: every other crate.";

/// A server of a cell.
#[derive(Clone, Copy, PartialEq)]
enum Target {
    Null,
    Memory,
    Redis,
}

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::Null => "null server",
            Target::Memory => "memory",
            Target::Redis => "redis",
        }
    }
}

/// What one cell measured: instructions per request by group, and by crate within `other`.
struct Cell {
    target: Target,
    descriptors: u32,
    total: f64,
    groups: BTreeMap<&'static str, f64>,
    other_crates: BTreeMap<String, f64>,
}

pub fn run(args: &TransportProfileArgs) -> Result<(), String> {
    require_tools()?;
    let binary = match &args.ratelimitd {
        Some(path) => path.clone(),
        None => testkit::ratelimitd::bin().to_path_buf(),
    };
    let dir = tempfile::tempdir().map_err(|e| format!("a temporary directory: {e}"))?;
    let config = dir.path().join("bench.yaml");
    std::fs::write(&config, GCRA_CONFIG).map_err(|e| format!("{}: {e}", config.display()))?;
    let redis = args.redis.then(RedisServer::start);

    let mut targets = vec![Target::Null, Target::Memory];
    if args.redis {
        targets.push(Target::Redis);
    }
    let mut cells = Vec::new();
    for &descriptors in &args.descriptors {
        // A decision under valgrind on the Redis path can take longer than the load's default.
        let load = gcra_load(
            args.connections,
            args.concurrency,
            args.keys,
            descriptors,
            "60s",
        );
        for &target in &targets {
            let server = match (target, &redis) {
                (Target::Null, _) => Profiled::rls_ceiling()?,
                (_, redis) => {
                    let mut serve = vec!["--config".to_string(), config.display().to_string()];
                    if let (Target::Redis, Some(redis)) = (target, redis) {
                        serve.extend(["--redis-url".to_string(), redis.url()]);
                        // Under valgrind a Redis call takes many times its usual 100 ms bound.
                        serve.extend(["--redis-timeout".to_string(), "10s".to_string()]);
                    }
                    if args.rls_port {
                        serve.extend(["--rls-addr".to_string(), "127.0.0.1:0".to_string()]);
                    }
                    serve.extend(args.server_args.iter().cloned());
                    Profiled::ratelimitd(&binary, &serve)?
                }
            };
            let measured = per_decision(
                server,
                &load,
                args.warmup_requests,
                args.requests,
                Attribution::Exclusive,
            )?;
            let cell = Cell::of(target, descriptors, &measured.counts, measured.requests);
            eprintln!(
                "[transport-profile] {} {descriptors} desc: {:.0} instructions per request",
                target.name(),
                cell.total
            );
            cells.push(cell);
        }
    }
    println!("{}", render(&cells, args.requests));
    Ok(())
}

impl Cell {
    fn of(target: Target, descriptors: u32, counts: &Counts, requests: u64) -> Cell {
        let per_request = |count: u64| count as f64 / requests as f64;
        let mut groups = BTreeMap::new();
        let mut other_crates = BTreeMap::new();
        for (count, symbol, object) in counts.exclusive() {
            let owner = owner_of(symbol, object);
            let group = group_of(&owner);
            *groups.entry(group).or_insert(0.0) += per_request(count);
            if group == "other" {
                *other_crates.entry(owner).or_insert(0.0) += per_request(count);
            }
        }
        Cell {
            target,
            descriptors,
            total: per_request(counts.total),
            groups,
            other_crates,
        }
    }
}

/// The table: a row per cell, a column per group, then the total and the total divided by the
/// null server's with as many descriptors; the largest crates of `other` below it.
fn render(cells: &[Cell], requests: u64) -> String {
    let mut out = format!("{}\n\n", callgrind_header());
    out.push_str(&format!(
        "Instructions per request, {requests} requests per cell, by group\n\n| server | desc |"
    ));
    for group in GROUPS {
        out.push_str(&format!(" {group} |"));
    }
    out.push_str(" total | ÷ null |\n|---|---:|");
    out.push_str(&"---:|".repeat(GROUPS.len() + 2));
    out.push('\n');
    for cell in cells {
        out.push_str(&format!(
            "| {} | {} |",
            cell.target.name(),
            cell.descriptors
        ));
        for group in GROUPS {
            let value = cell.groups.get(group).copied().unwrap_or(0.0);
            out.push_str(&format!(" {} |", thousands(value)));
        }
        let null = cells
            .iter()
            .find(|other| other.target == Target::Null && other.descriptors == cell.descriptors);
        let ratio = match null {
            Some(null) => format!("{:.2}x", cell.total / null.total),
            None => "–".into(),
        };
        out.push_str(&format!(" **{}** | {ratio} |\n", thousands(cell.total)));
    }
    out.push_str(&format!("\n{GROUP_NOTES}\n"));
    for cell in cells {
        let mut crates: Vec<(&String, &f64)> = cell.other_crates.iter().collect();
        crates.sort_by(|a, b| b.1.total_cmp(a.1));
        let listed: Vec<String> = crates
            .iter()
            .take(6)
            .map(|(name, value)| format!("{name} {}", thousands(**value)))
            .collect();
        out.push_str(&format!(
            "\nother, {} {} desc: {}",
            cell.target.name(),
            cell.descriptors,
            listed.join(", ")
        ));
    }
    out.push('\n');
    out
}

/// `12 345`: a count rounded, its thousands apart.
fn thousands(value: f64) -> String {
    let digits = format!("{:.0}", value.max(0.0));
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(' ');
        }
        out.push(digit);
    }
    out
}

/// glibc's allocator functions, as callgrind names them.
const GLIBC_ALLOCATOR: [&str; 17] = [
    "malloc",
    "free",
    "realloc",
    "calloc",
    "cfree",
    "_int_malloc",
    "_int_free",
    "_int_realloc",
    "_int_free_merge_chunk",
    "_int_free_create_chunk",
    "_int_free_maybe_consolidate",
    "malloc_consolidate",
    "unlink_chunk",
    "sysmalloc",
    "tcache_get",
    "tcache_put",
    "malloc_trim",
];

/// The crate a function belongs to (`allocator` and `libc` for glibc's), as the module
/// documentation says.
fn owner_of(symbol: &str, object: &str) -> String {
    let object_name = object.rsplit('/').next().unwrap_or(object);
    let shared_library = object_name.contains(".so");
    let name = symbol.split('\'').next().unwrap_or(symbol);
    let name = name.strip_prefix("__rustc::").unwrap_or(name);
    if GLIBC_ALLOCATOR.contains(&name)
        || name.starts_with("__libc_")
            && ["malloc", "free", "realloc", "calloc"]
                .iter()
                .any(|f| name.ends_with(f))
        || ["__rust_alloc", "__rust_dealloc", "__rust_realloc", "__rdl_"]
            .iter()
            .any(|prefix| name.starts_with(prefix))
    {
        return "allocator".into();
    }
    if shared_library {
        return "libc".into();
    }
    let mut rest = symbol;
    loop {
        rest = rest.trim_start_matches(['<', '&', '*', '(', '[', ' ']);
        if let Some(inner) = ["mut ", "const ", "dyn "]
            .iter()
            .find_map(|prefix| rest.strip_prefix(prefix))
        {
            rest = inner;
            continue;
        }
        if let Some(dropped) = rest.strip_prefix("core::ptr::drop_in_place<") {
            rest = dropped;
            continue;
        }
        // `<D as digest::Digest>::digest`: a generic parameter's method is its trait's crate's.
        if let Some((parameter, trait_path)) = rest.split_once(" as ") {
            if !parameter.contains("::") && !parameter.contains('<') {
                rest = trait_path;
                continue;
            }
        }
        break;
    }
    if rest.starts_with("ratelimitd::proto::") {
        return "prost".into();
    }
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    match &rest[..end] {
        "" => "?".into(),
        name => name.into(),
    }
}

/// The group of a crate [`owner_of`] named.
fn group_of(owner: &str) -> &'static str {
    match owner {
        "h2" => "h2",
        "hyper" | "hyper_util" => "hyper",
        "tonic" | "tonic_prost" | "tonic_health" | "tonic_reflection" => "tonic",
        "tower" | "tower_layer" | "tower_service" => "tower",
        "http" | "http_body" | "http_body_util" => "http",
        "prost" => "prost",
        "bytes" => "bytes",
        "tokio" | "tokio_util" | "tokio_stream" | "mio" => "tokio",
        "allocator" => "allocator",
        "core" | "alloc" | "std" => "std",
        "libc" => "libc",
        "ratelimitd" | "rls_ceiling" => "service",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn functions_belong_to_the_crate_their_symbol_names() {
        let binary = "/x/target/release/ratelimitd";
        let libc = "/usr/lib/x86_64-linux-gnu/libc.so.6";
        let cases = [
            ("h2::proto::streams::recv::Recv::recv_data", binary, "h2"),
            (
                "<hyper::proto::h2::server::H2Stream<F,B> as core::future::future::Future>::poll",
                binary,
                "hyper",
            ),
            ("core::ptr::drop_in_place<h2::frame::headers::Headers>", binary, "h2"),
            ("core::ptr::drop_in_place<&mut tonic::Status>", binary, "tonic"),
            ("alloc::raw_vec::finish_grow", binary, "alloc"),
            (
                "<ratelimitd::proto::rls::RateLimitRequest as prost::message::Message>::merge_field",
                binary,
                "prost",
            ),
            ("ratelimitd::limiter::gcra::decide", binary, "ratelimitd"),
            ("_int_malloc", libc, "allocator"),
            ("__rust_dealloc", binary, "allocator"),
            ("__rustc::__rust_alloc", binary, "allocator"),
            ("<D as digest::digest::Digest>::digest", binary, "digest"),
            ("sha2::sha256::compress256", binary, "sha2"),
            ("__memcpy_avx_unaligned_erms", libc, "libc"),
            ("epoll_wait", libc, "libc"),
        ];
        for (symbol, object, owner) in cases {
            assert_eq!(owner_of(symbol, object), owner, "{symbol}");
        }
        assert_eq!(group_of("hyper_util"), "hyper");
        assert_eq!(group_of("mio"), "tokio");
        assert_eq!(group_of("hashbrown"), "other");
        assert_eq!(group_of("rls_ceiling"), "service");
    }

    #[test]
    fn counts_are_printed_with_their_thousands_apart() {
        assert_eq!(thousands(0.4), "0");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(66_771.2), "66 771");
        assert_eq!(thousands(1_234_567.0), "1 234 567");
    }
}
