//! Micro-benchmarks of one decision's parts: matching, planning, each algorithm's math, the memory
//! store, and the whole edge (proto request -> proto response, no transport).
//!
//! `cargo bench --bench decision` (criterion options after `--`, e.g. `-- algorithm`). Before the
//! timings it prints the heap allocations per operation, counted by the global allocator below.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
use std::hint::black_box;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use criterion::{BatchSize, Criterion};
use ratelimitd::config::parse_domain;
use ratelimitd::limiter::algorithm::{self, State};
use ratelimitd::limiter::counter_key::CounterKey;
use ratelimitd::limiter::matcher::find_limit;
use ratelimitd::limiter::{plan, Algorithm, Descriptor, DomainRules, Entry, Rate, Request};
use ratelimitd::limiter::{ManualClock, Rules, Unit};
use ratelimitd::proto::common::{rate_limit_descriptor, RateLimitDescriptor};
use ratelimitd::proto::rls::RateLimitRequest;
use ratelimitd::service::RateLimitEdge;
use ratelimitd::store::{Check, MemoryStore};

// ---------------------------------------------------------------------------------------------
// Allocation counting

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static ALLOCATED_BYTES: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        ALLOCATED_BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        ALLOCATED_BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        ALLOCATED_BYTES.fetch_add(new_size as u64, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations and bytes per call of `op` over `inputs` (prepared before counting starts).
fn allocations<I, O>(inputs: Vec<I>, mut op: impl FnMut(I) -> O) -> (f64, f64) {
    let n = inputs.len() as f64;
    let mut outputs = Vec::with_capacity(inputs.len());
    let (count, bytes) = (
        ALLOCATIONS.load(Ordering::Relaxed),
        ALLOCATED_BYTES.load(Ordering::Relaxed),
    );
    for input in inputs {
        outputs.push(op(input));
    }
    let count = ALLOCATIONS.load(Ordering::Relaxed) - count;
    let bytes = ALLOCATED_BYTES.load(Ordering::Relaxed) - bytes;
    // Pushing into `outputs` never reallocates (capacity reserved), so it is not counted.
    drop(outputs);
    (count as f64 / n, bytes as f64 / n)
}

// ---------------------------------------------------------------------------------------------
// Fixtures

/// A realistic edge configuration: per-address and per-key limits, nested paths, wildcards,
/// whitelists, and 200 named API keys (exact values) so the maps are not trivially small.
fn config_text() -> String {
    let mut text = String::from(
        r#"domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 1000, algorithm: sliding_window_counter}
  - key: remote_address
    value: 10.0.0.10
  - key: generic_key
    value: default
    rate_limit: {unit: second, requests_per_unit: 500}
  - key: user_agent
    value: "curl*"
    rate_limit: {unit: minute, requests_per_unit: 5, name: curl}
  - key: user_agent
    value: "python-requests*"
    rate_limit: {unit: minute, requests_per_unit: 50, name: python}
  - key: user_agent
    rate_limit: {unit: second, requests_per_unit: 100, replaces: [{name: curl}]}
  - key: api_key
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 50}
    descriptors:
      - key: path
        value: login
        rate_limit: {unit: minute, requests_per_unit: 5, algorithm: sliding_window_log}
      - key: path
        value: search
        rate_limit: {unit: second, requests_per_unit: 20, algorithm: gcra, burst: 40}
      - key: path
        rate_limit: {unit: second, requests_per_unit: 100}
  - key: tenant
    descriptors:
      - key: method
        value: GET
        rate_limit: {unit: second, requests_per_unit: 1000, algorithm: gcra}
      - key: method
        value: POST
        rate_limit: {unit: second, requests_per_unit: 100, algorithm: gcra}
      - key: method
        rate_limit: {unit: second, requests_per_unit: 10}
"#,
    );
    for i in 0..200 {
        text.push_str(&format!(
            "  - key: api_key\n    value: customer-{i}\n    rate_limit: {{unit: hour, requests_per_unit: {}}}\n    descriptors:\n      - key: path\n        rate_limit: {{unit: second, requests_per_unit: 50, algorithm: gcra}}\n",
            1000 + i
        ));
    }
    text
}

fn domain_rules() -> DomainRules {
    parse_domain(Path::new("bench.yaml"), &config_text()).expect("bench configuration is valid")
}

fn rules() -> Rules {
    let domain = domain_rules();
    Rules {
        domains: HashMap::from([(domain.domain.clone(), domain)]),
    }
}

fn entry(key: &str, value: &str) -> Entry {
    Entry {
        key: key.into(),
        value: value.into(),
    }
}

fn descriptor(entries: &[(&str, &str)]) -> Descriptor {
    Descriptor {
        entries: entries.iter().map(|(k, v)| entry(k, v)).collect(),
        limit_override: None,
        hits_addend: None,
    }
}

fn request(descriptors: Vec<Descriptor>) -> Request {
    Request {
        domain: "edge".into(),
        descriptors,
        hits_addend: 0,
    }
}

/// Three typical descriptors of one Envoy request.
fn three_descriptors(i: u64) -> Vec<Descriptor> {
    let address = format!("10.1.{}.{}", (i / 256) % 256, i % 256);
    let key = format!("customer-{}", i % 200);
    vec![
        descriptor(&[("remote_address", &address)]),
        descriptor(&[("api_key", &key), ("path", "/v1/items")]),
        descriptor(&[("tenant", "acme"), ("method", "GET")]),
    ]
}

fn proto_request(descriptors: &[Descriptor]) -> RateLimitRequest {
    RateLimitRequest {
        domain: "edge".into(),
        descriptors: descriptors
            .iter()
            .map(|d| RateLimitDescriptor {
                entries: d
                    .entries
                    .iter()
                    .map(|e| rate_limit_descriptor::Entry {
                        key: e.key.clone(),
                        value: e.value.clone(),
                    })
                    .collect(),
                ..RateLimitDescriptor::default()
            })
            .collect(),
        hits_addend: 0,
    }
}

const T0: u64 = 1_700_000_000_000_000;

/// Per algorithm: a rate and a time step that keeps every decision admitted (steady state).
/// The log's state grows with the limit (one entry per admitted request): at 100/s with one
/// request every 20 ms it holds 50 entries.
fn algorithm_case(algorithm: Algorithm) -> (Rate, u64) {
    match algorithm {
        Algorithm::SlidingWindowLog => (
            Rate::new(algorithm, 100, Unit::Second, 1, None).unwrap(),
            20_000,
        ),
        _ => (
            Rate::new(algorithm, 1000, Unit::Second, 1, None).unwrap(),
            2_000,
        ),
    }
}

const ALGORITHMS: [Algorithm; 5] = [
    Algorithm::FixedWindow,
    Algorithm::SlidingWindowLog,
    Algorithm::SlidingWindowCounter,
    Algorithm::TokenBucket,
    Algorithm::Gcra,
];

/// One store decision as the service makes it: evaluate, commit only when admitted.
fn decide(rate: &Rate, state: &mut Option<State>, now: u64) -> bool {
    let verdict = algorithm::evaluate(rate, state.as_ref(), now, 1);
    if verdict.admitted {
        *state = Some(algorithm::commit(rate, state.take(), now, 1));
    }
    verdict.admitted
}

fn checks_for(algorithm: Algorithm, keys: u64) -> Vec<Check> {
    let rate = Rate::new(algorithm, 1_000_000, Unit::Second, 1, None).unwrap();
    (0..keys)
        .map(|i| Check {
            key: CounterKey::new("bench", &[entry(algorithm.as_str(), &format!("d0-{i}"))]),
            rate,
            hits: 1,
            shadow: false,
            consistency: ratelimitd::limiter::Consistency::Exact,
            rule: None,
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Allocations per operation

fn print_allocations() {
    const N: usize = 10_000;
    let mut rows: Vec<(String, (f64, f64))> = Vec::new();
    let domain = domain_rules();
    let rules = rules();

    for (name, entries) in match_cases() {
        rows.push((
            format!("match/{name}"),
            allocations(vec![(); N], |_| find_limit(&domain, &entries).is_some()),
        ));
    }
    let one: Vec<Request> = (0..N as u64)
        .map(|i| {
            request(vec![descriptor(&[(
                "remote_address",
                &format!("10.0.{}.{}", i / 256 % 256, i % 256),
            )])])
        })
        .collect();
    rows.push((
        "plan/1_descriptor".into(),
        allocations(one.iter().collect(), |r| plan(&rules, r).unwrap()),
    ));
    let three: Vec<Request> = (0..N as u64)
        .map(|i| request(three_descriptors(i)))
        .collect();
    rows.push((
        "plan/3_descriptors".into(),
        allocations(three.iter().collect(), |r| plan(&rules, r).unwrap()),
    ));
    for algorithm in ALGORITHMS {
        let (rate, step) = algorithm_case(algorithm);
        let mut state = None;
        let mut now = T0;
        for _ in 0..1_000 {
            now += step;
            decide(&rate, &mut state, now);
        }
        rows.push((
            format!("algorithm/{}", algorithm.as_str()),
            allocations(vec![(); N], |_| {
                now += step;
                decide(&rate, &mut state, now)
            }),
        ));
    }
    for (name, algorithm, keys, width) in store_cases() {
        let store = MemoryStore::new();
        let checks = checks_for(algorithm, keys.max(width as u64));
        for chunk in checks.chunks(width) {
            store.decide_now(chunk);
        }
        let mut i = 0usize;
        rows.push((
            format!("memory_store/{name}"),
            allocations(vec![(); N], |_| {
                let at = (i * width) % (checks.len() - width + 1);
                i += 1;
                store.decide_now(&checks[at..at + width])
            }),
        ));
    }
    for (name, descriptors) in edge_cases() {
        let edge = edge();
        let inputs: Vec<RateLimitRequest> = (0..N).map(|i| descriptors(i as u64)).collect();
        rows.push((
            format!("edge/{name}"),
            allocations(inputs, |r| {
                futures::executor::block_on(edge.decide(r)).unwrap()
            }),
        ));
    }

    println!("allocations per operation (counting global allocator, {N} operations each):");
    println!("| operation | allocations | bytes allocated |");
    println!("|---|---:|---:|");
    for (name, (count, bytes)) in rows {
        println!("| {name} | {count:.2} | {bytes:.0} |");
    }
    println!();
}

fn match_cases() -> Vec<(&'static str, Vec<Entry>)> {
    vec![
        ("key_only", vec![entry("remote_address", "192.0.2.7")]),
        (
            "nested_exact_of_200",
            vec![entry("api_key", "customer-117"), entry("path", "/v1/items")],
        ),
        (
            "wildcard",
            vec![entry("user_agent", "python-requests/2.31")],
        ),
        ("miss", vec![entry("country", "NL")]),
    ]
}

fn store_cases() -> Vec<(&'static str, Algorithm, u64, usize)> {
    vec![
        ("gcra_1_hot", Algorithm::Gcra, 1, 1),
        ("gcra_1_of_100k", Algorithm::Gcra, 100_000, 1),
        ("gcra_3_of_100k", Algorithm::Gcra, 100_000, 3),
        ("fixed_window_1_of_100k", Algorithm::FixedWindow, 100_000, 1),
    ]
}

type EdgeCase = (&'static str, fn(u64) -> RateLimitRequest);

fn edge_cases() -> Vec<EdgeCase> {
    fn one(i: u64) -> RateLimitRequest {
        proto_request(&[descriptor(&[(
            "remote_address",
            &format!("10.2.{}.{}", i / 256 % 256, i % 256),
        )])])
    }
    fn three(i: u64) -> RateLimitRequest {
        proto_request(&three_descriptors(i))
    }
    vec![("1_descriptor", one), ("3_descriptors", three)]
}

fn edge() -> RateLimitEdge<MemoryStore> {
    RateLimitEdge::new(
        Arc::new(ArcSwap::from_pointee(rules())),
        Arc::new(MemoryStore::new()),
    )
}

// ---------------------------------------------------------------------------------------------
// Timings

fn bench_matching(c: &mut Criterion) {
    let domain = domain_rules();
    let mut group = c.benchmark_group("match");
    for (name, entries) in match_cases() {
        group.bench_function(name, |b| {
            b.iter(|| find_limit(black_box(&domain), black_box(&entries)).is_some())
        });
    }
    group.finish();
}

fn bench_planning(c: &mut Criterion) {
    let rules = rules();
    let mut group = c.benchmark_group("plan");
    let one = request(vec![descriptor(&[("remote_address", "192.0.2.7")])]);
    group.bench_function("1_descriptor", |b| {
        b.iter(|| plan(black_box(&rules), black_box(&one)).unwrap())
    });
    let three = request(three_descriptors(7));
    group.bench_function("3_descriptors", |b| {
        b.iter(|| plan(black_box(&rules), black_box(&three)).unwrap())
    });
    group.finish();
}

fn bench_algorithms(c: &mut Criterion) {
    let mut group = c.benchmark_group("algorithm");
    for algorithm in ALGORITHMS {
        let (rate, step) = algorithm_case(algorithm);
        group.bench_function(algorithm.as_str(), |b| {
            let mut state = None;
            let mut now = T0;
            b.iter(|| {
                now += step;
                decide(black_box(&rate), &mut state, now)
            })
        });
    }
    group.finish();
}

fn bench_memory_store(c: &mut Criterion) {
    let mut group = c.benchmark_group("memory_store");
    for (name, algorithm, keys, width) in store_cases() {
        let store = MemoryStore::new();
        let checks = checks_for(algorithm, keys.max(width as u64));
        for chunk in checks.chunks(width) {
            store.decide_now(chunk);
        }
        let mut i = 0usize;
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        group.bench_function(name, |b| {
            b.iter(|| {
                // Uniform random counters (xorshift), as in the 100k-keys load.
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let at = if checks.len() == width {
                    0
                } else {
                    (rng % (checks.len() - width) as u64) as usize
                };
                i = i.wrapping_add(1);
                store.decide_now(black_box(&checks[at..at + width]))
            })
        });
    }
    group.finish();
}

/// Entries of the full sliding-window-log counter: a limit of 100 000 per hour, used up.
const FULL_LOG: u32 = 100_000;

/// Spacing of the full log's entries: `FULL_LOG` of them fill the hour exactly.
const FULL_LOG_STEP_US: u64 = 3_600_000_000 / FULL_LOG as u64;

/// A memory store holding one sliding-window-log counter of `FULL_LOG` per hour that is full,
/// one entry per admitted hit, `FULL_LOG_STEP_US` apart, and the check that it now denies.
fn full_log_store() -> (Arc<ManualClock>, MemoryStore, Vec<Check>) {
    let clock = Arc::new(ManualClock::new(T0));
    let store = MemoryStore::with_clock(clock.clone());
    let rate = Rate::new(Algorithm::SlidingWindowLog, FULL_LOG, Unit::Hour, 1, None).unwrap();
    let check = vec![Check {
        key: CounterKey::new("bench", &[entry("sliding_window_log", "full")]),
        rate,
        hits: 1,
        shadow: false,
        consistency: ratelimitd::limiter::Consistency::Exact,
        rule: None,
    }];
    for _ in 0..FULL_LOG {
        clock.advance_us(FULL_LOG_STEP_US);
        assert!(store.decide_now(&check)[0].admitted);
    }
    clock.advance_us(1);
    assert!(!store.decide_now(&check)[0].admitted);
    (clock, store, check)
}

/// Denied decisions on a full 100 000-entry log, and the steady state of traffic at exactly the
/// limit: each decision comes when the oldest hit leaves, trims it and appends one.
fn bench_full_log(c: &mut Criterion) {
    let mut group = c.benchmark_group("memory_store_full_log");
    let (_clock, store, check) = full_log_store();
    group.bench_function("sliding_window_log_100k_denied", |b| {
        b.iter(|| store.decide_now(black_box(&check)))
    });
    let (clock, store, check) = full_log_store();
    group.bench_function("sliding_window_log_100k_at_limit", |b| {
        b.iter(|| {
            clock.advance_us(FULL_LOG_STEP_US);
            store.decide_now(black_box(&check))
        })
    });
    group.finish();
}

fn bench_edge(c: &mut Criterion) {
    let mut group = c.benchmark_group("edge");
    for (name, make) in edge_cases() {
        let edge = edge();
        let mut i = 0u64;
        group.bench_function(name, |b| {
            b.iter_batched(
                || {
                    i += 1;
                    make(i % 100_000)
                },
                |r| futures::executor::block_on(edge.decide(r)).unwrap(),
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

fn main() {
    // `cargo test --benches` runs bench targets with `--test`: skip the slow allocation table.
    if !std::env::args().any(|a| a == "--test" || a == "--list") {
        print_allocations();
    }
    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    bench_matching(&mut criterion);
    bench_planning(&mut criterion);
    bench_algorithms(&mut criterion);
    bench_memory_store(&mut criterion);
    bench_full_log(&mut criterion);
    bench_edge(&mut criterion);
    criterion.final_summary();
}
