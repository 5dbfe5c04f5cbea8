//! The RLQS surface against a hostile or oversized Envoy, the real binary spoken to by the tests'
//! own RLQS client: reports as large as the bucket cap allows are answered, larger buckets and
//! reports are refused by name, the streams' state is bounded in bytes and given back, and
//! `/rlqs` is read a bounded page at a time while RLS calls go on, silent streams are ended and
//! RLS calls keep their pace beside rule changes and steady reporting.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use testkit::control_plane::{domain_config, ControlPlane};
use testkit::ratelimitd::{http_get, request, should, Ratelimitd};
use testkit::rlqs_client::{bucket, key, usage, Envoy};
use tonic::Code;

const DOMAIN: &str = "rlqs";

/// Time for the server to answer one report, however many buckets it names.
const ANSWER_WITHIN: Duration = Duration::from_secs(20);

fn write_config(dir: &std::path::Path) -> String {
    let path = dir.join("rlqs.yaml");
    std::fs::write(
        &path,
        format!(
            "domain: {DOMAIN}\ndescriptors:\n  - key: name\n    rate_limit: {{unit: second, requests_per_unit: 100}}\n"
        ),
    )
    .unwrap();
    path.display().to_string()
}

/// The value of the sample `series` (its full name with labels) on `/metrics`.
async fn sample(server: &Ratelimitd, series: &str) -> Option<u64> {
    let (_, metrics) = http_get(server.http_addr(), "/metrics").await;
    metrics.lines().find_map(|line| {
        line.strip_prefix(series)
            .and_then(|rest| rest.strip_prefix(' '))
            .and_then(|value| value.parse().ok())
    })
}

/// An Envoy holding the default bucket cap's 10 000 buckets reports them all in one message, as
/// Envoy does (350 KB of short ids here, five times the 64 KiB RLS request cap): every bucket is
/// answered. A bucket above `--rlqs-max-bucket-id-bytes` ends its stream with INVALID_ARGUMENT
/// naming the flag, and a report above the cap the bucket caps make is refused at its length
/// prefix, naming the flags it derives from.
#[tokio::test]
async fn reports_are_sized_by_the_bucket_caps() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let server = Ratelimitd::start(&["--config", &config]);

    let mut envoy = Envoy::connect(&server).await;
    let ids: Vec<_> = (0..10_000)
        .map(|i| bucket(&[("name", &format!("b{i:05}"))]))
        .collect();
    let started = Instant::now();
    envoy
        .report(
            DOMAIN,
            ids.iter().map(|id| usage(id.clone(), 1, 0, 0)).collect(),
        )
        .await;
    let wanted: HashSet<String> = ids.iter().map(key).collect();
    while !wanted.iter().all(|id| envoy.latest.contains_key(id)) {
        assert!(
            started.elapsed() < ANSWER_WITHIN,
            "{} of 10000 buckets answered within {ANSWER_WITHIN:?}",
            envoy.latest.len()
        );
        match envoy.next(ANSWER_WITHIN).await {
            Ok(_) => {}
            Err(status) => panic!("the stream ended: {status:?}"),
        }
    }
    eprintln!(
        "a report of 10000 buckets answered whole in {:?}",
        started.elapsed()
    );

    let oversized = bucket(&[("name", &"x".repeat(2000))]);
    envoy.report(DOMAIN, vec![usage(oversized, 1, 0, 0)]).await;
    let status = envoy.ended(ANSWER_WITHIN).await;
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(
        status.message().contains("--rlqs-max-bucket-id-bytes"),
        "{status:?}"
    );
    assert_eq!(
        sample(
            &server,
            "ratelimitd_rlqs_limited_total{limit=\"bucket_id_bytes\"}"
        )
        .await,
        Some(1)
    );

    let small = Ratelimitd::start(&[
        "--config",
        &config,
        "--rlqs-max-buckets-per-stream",
        "10",
        "--rlqs-max-bucket-id-bytes",
        "100",
    ]);
    let mut envoy = Envoy::connect(&small).await;
    envoy
        .report(
            DOMAIN,
            (0..40)
                .map(|i| usage(bucket(&[("name", &format!("{i:060}"))]), 1, 0, 0))
                .collect(),
        )
        .await;
    let status = envoy.ended(ANSWER_WITHIN).await;
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().contains("--rlqs-max-buckets-per-stream")
            && status.message().contains("--rlqs-max-bucket-id-bytes"),
        "{status:?}"
    );
}

/// VmRSS of the server, in MiB.
fn rss_mib(server: &Ratelimitd) -> u64 {
    testkit::hostile_config::memory_kib(server.pid()).0 / 1024
}

/// Subscribes `buckets` buckets of ids of about 1 000 bytes (within the default size cap), in
/// reports of 50 (within the RLS request cap, as a hostile client would send them); the status
/// that ended the stream, or `None` when every bucket was answered.
async fn subscribe(envoy: &mut Envoy, stream: usize, buckets: usize) -> Option<tonic::Status> {
    let ids: Vec<_> = (0..buckets)
        .map(|i| bucket(&[("name", &format!("s{stream}b{i:05}{}", "x".repeat(960)))]))
        .collect();
    for chunk in ids.chunks(50) {
        envoy
            .report(
                DOMAIN,
                chunk.iter().map(|id| usage(id.clone(), 1, 0, 0)).collect(),
            )
            .await;
    }
    let wanted: HashSet<String> = ids.iter().map(key).collect();
    let started = Instant::now();
    while !wanted.iter().all(|id| envoy.latest.contains_key(id)) {
        assert!(
            started.elapsed() < ANSWER_WITHIN,
            "stream {stream} answered in part"
        );
        if let Err(status) = envoy.next(ANSWER_WITHIN).await {
            return Some(status);
        }
    }
    None
}

/// Streams of 10 000 buckets with 1 000-byte ids each (about 17 MB of state each as the budget
/// counts it) against `--rlqs-memory-budget 64MiB`: the streams that fit are answered whole,
/// the next is ended with RESOURCE_EXHAUSTED naming the flag, resident memory stays within the
/// budget's reach, and when the streams end the budget and the memory are given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rlqs_state_is_bounded_in_bytes_and_given_back() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let server = Ratelimitd::start(&["--config", &config, "--rlqs-memory-budget", "64MiB"]);
    let idle = rss_mib(&server);

    let mut envoys = Vec::new();
    let mut refused = None;
    for stream in 0..6 {
        let mut envoy = Envoy::connect(&server).await;
        let ended = subscribe(&mut envoy, stream, 10_000).await;
        envoys.push(envoy);
        if let Some(status) = ended {
            refused = Some((stream, status));
            break;
        }
    }
    let held = sample(&server, "ratelimitd_rlqs_memory_held_bytes").await;
    let full = rss_mib(&server);
    let (stream, status) = refused.expect("a stream past the budget is ended");
    eprintln!(
        "{stream} streams of 10000 1 KB buckets fit a 64 MiB budget; VmRSS {idle} -> {full} MiB, {held:?} bytes held"
    );
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().contains("--rlqs-memory-budget"),
        "{status:?}"
    );
    assert!((3..=4).contains(&stream), "{stream} streams fit");
    assert!(held.is_some_and(|held| held <= 64 << 20), "{held:?}");
    assert!(
        sample(
            &server,
            "ratelimitd_rlqs_limited_total{limit=\"memory_budget\"}"
        )
        .await
            >= Some(1)
    );
    assert!(full < idle + 160, "VmRSS {idle} -> {full} MiB");

    drop(envoys);
    let started = Instant::now();
    let released = loop {
        let held = sample(&server, "ratelimitd_rlqs_memory_held_bytes").await;
        let rss = rss_mib(&server);
        if held == Some(0) && rss < idle + 24 {
            break rss;
        }
        assert!(
            started.elapsed() < ANSWER_WITHIN,
            "held {held:?} bytes, VmRSS {rss} MiB (idle {idle} MiB) after the streams ended"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    eprintln!(
        "streams ended: VmRSS {released} MiB after {:?}",
        started.elapsed()
    );

    let mut envoy = Envoy::connect(&server).await;
    assert_eq!(subscribe(&mut envoy, 9, 100).await.map(|s| s.code()), None);
}

/// Waits until 100 streams' reports of the 1 000 buckets `b0000`.. of the domain are applied:
/// the RLQS memory budget then holds, as `--rlqs-memory-budget` counts them, 100 streams of
/// 2 KiB, 100 000 stream buckets of 400 B and 1 000 buckets of 256 B plus their 4-byte domain,
/// 48 B and their 4-byte key and 5-byte value.
async fn wait_applied(server: &Ratelimitd) {
    let applied = 100 * 2048 + 100_000 * 400 + 1000 * (256 + 4 + 48 + 4 + 5);
    let started = Instant::now();
    while sample(server, "ratelimitd_rlqs_memory_held_bytes").await != Some(applied) {
        assert!(
            started.elapsed() < 3 * ANSWER_WITHIN,
            "the reports were not applied"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// RLS calls made back to back on `connections` connections of their own until stopped, each
/// call's time kept.
struct RlsProbe {
    stop: Arc<AtomicBool>,
    times: Arc<Mutex<Vec<Duration>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl RlsProbe {
    async fn start(server: &Ratelimitd, connections: usize) -> RlsProbe {
        let stop = Arc::new(AtomicBool::new(false));
        let times = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for _ in 0..connections {
            let mut client = server.client().await;
            let (stop, times) = (stop.clone(), times.clone());
            tasks.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    should(&mut client, request(DOMAIN, &[&[("other", "x")]], 1)).await;
                    times.lock().unwrap().push(started.elapsed());
                }
            }));
        }
        RlsProbe { stop, times, tasks }
    }

    /// Stops the calls; their count, p99 and longest time.
    async fn finish(self) -> (usize, Duration, Duration) {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            task.await.expect("the probe ran");
        }
        let mut times = self.times.lock().unwrap().clone();
        times.sort();
        let p99 = times[times.len() * 99 / 100];
        (times.len(), p99, *times.last().unwrap())
    }
}

/// 100 streams reporting the same 1 000 buckets (100 000 stream entries): `/rlqs` answers a
/// page of at most 1 000 stream entries, whose `next` cursors lead through every bucket once,
/// without the server's memory growing with the registry, while RLS calls on other connections
/// keep their pace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rlqs_is_read_a_bounded_page_at_a_time_beside_rls() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let server = Ratelimitd::start(&["--config", &config]);
    let ids: Vec<_> = (0..1000)
        .map(|i| bucket(&[("name", &format!("b{i:04}"))]))
        .collect();
    let mut envoys = Vec::new();
    for _ in 0..100 {
        let envoy = Envoy::connect(&server).await;
        envoy
            .report(
                DOMAIN,
                ids.iter().map(|id| usage(id.clone(), 1, 0, 0)).collect(),
            )
            .await;
        envoys.push(envoy);
    }
    wait_applied(&server).await;
    let rss_before = rss_mib(&server);

    let probe = RlsProbe::start(&server, 4).await;
    let walk = Instant::now();
    let (mut pages, mut entries, mut largest) = (0, 0, 0);
    let mut seen = HashSet::new();
    let mut path = "/rlqs".to_owned();
    loop {
        let (code, body) = http_get(server.http_addr(), &path).await;
        assert_eq!(code, 200, "{body:.200}");
        pages += 1;
        largest = largest.max(body.len());
        let page: serde_json::Value = serde_json::from_str(&body).expect("JSON");
        let mut on_page = 0;
        for bucket in page["buckets"].as_array().expect("buckets") {
            assert!(
                seen.insert(bucket["bucket"]["name"].to_string()),
                "twice: {bucket}"
            );
            on_page += bucket["streams"].as_array().map_or(0, Vec::len);
        }
        assert!(on_page <= 1000, "{on_page} stream entries on a page");
        entries += on_page;
        match page["next"].as_str() {
            Some(next) => path = format!("/rlqs?after={next}"),
            None => break,
        }
    }
    let walked = walk.elapsed();
    let rss_after = rss_mib(&server);
    let (calls, p99, longest) = probe.finish().await;
    eprintln!(
        "/rlqs of 100 streams x 1000 buckets: {pages} pages, largest {largest} bytes, all read in {walked:?}; VmRSS {rss_before} -> {rss_after} MiB; meanwhile {calls} RLS calls, p99 {p99:?}, longest {longest:?}"
    );
    assert_eq!((seen.len(), entries), (1000, 100_000));
    assert!(largest < 256 << 10, "a page of {largest} bytes");
    assert!(
        rss_after < rss_before + 32,
        "VmRSS {rss_before} -> {rss_after} MiB"
    );
    assert!(
        longest < Duration::from_secs(1),
        "an RLS call took {longest:?}"
    );

    let (code, body) = http_get(server.http_addr(), "/rlqs?limit=0").await;
    assert_eq!(code, 400, "{body}");
    let (code, body) = http_get(server.http_addr(), "/rlqs?after=zz").await;
    assert_eq!(code, 400, "{body}");
}

/// 100 streams reporting the same 1 000 buckets, and a control plane changing their rule's limit
/// ten times a second for two and a half seconds: the share recomputations those versions call
/// for are coalesced and run off the serving threads, so RLS calls meanwhile keep their pace,
/// and a stream joining afterwards is told its share of the last version's limit. (The streams
/// do not read their assignments: a stream's pending ones are one per bucket whatever the
/// number of versions.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_changes_meeting_rlqs_state_do_not_stall_rls() {
    let plane = ControlPlane::start(None).await;
    let server_addr = plane.addr().to_string();
    let push = |version: u32| {
        let per_minute = 6000 + 60 * version;
        plane.push(
            &version.to_string(),
            vec![domain_config(DOMAIN, DOMAIN, &[("name", per_minute)])],
        );
    };
    push(0);
    let server = Ratelimitd::start(&["--config-source", "xds", "--xds-server", &server_addr]);
    plane
        .wait_for("the ACK of 0", ANSWER_WITHIN, |r| r.is_ack_of("0"))
        .await;
    let ids: Vec<_> = (0..1000)
        .map(|i| bucket(&[("name", &format!("b{i:04}"))]))
        .collect();
    let mut envoys = Vec::new();
    for _ in 0..100 {
        let envoy = Envoy::connect(&server).await;
        envoy
            .report(
                DOMAIN,
                ids.iter().map(|id| usage(id.clone(), 1, 0, 0)).collect(),
            )
            .await;
        envoys.push(envoy);
    }
    wait_applied(&server).await;

    let before = sample(&server, "ratelimitd_rlqs_share_computations_total").await;
    let probe = RlsProbe::start(&server, 4).await;
    let pushing = Instant::now();
    for version in 1..=25 {
        push(version);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    plane
        .wait_for("the ACK of 25", ANSWER_WITHIN, |r| r.is_ack_of("25"))
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (calls, p99, longest) = probe.finish().await;
    let after = sample(&server, "ratelimitd_rlqs_share_computations_total").await;
    let computations = after.zip(before).map(|(after, before)| after - before);
    eprintln!(
        "25 versions in {:?} over 100 streams x 1000 buckets: {calls} RLS calls, p99 {p99:?}, longest {longest:?}; {computations:?} share computations",
        pushing.elapsed()
    );
    assert!(p99 < Duration::from_millis(250), "RLS p99 {p99:?}");
    assert!(
        longest < Duration::from_secs(1),
        "an RLS call took {longest:?}"
    );

    // The last version's limit, 7 500 per minute, shared with the 100 streams: at most
    // 125 / 101 per second for a newcomer.
    let mut envoy = Envoy::connect(&server).await;
    envoy
        .report(DOMAIN, vec![usage(ids[999].clone(), 1, 0, 0)])
        .await;
    let told = envoy.told(&ids[999], ANSWER_WITHIN).await;
    let rate = told.rate();
    assert!(rate > 0.0 && rate <= 125.0 / 101.0 + 0.01, "{told:?}");
    drop(envoys);
}

/// `--rlqs-idle-timeout 1s --rlqs-max-streams-per-connection 2`: a third stream on one connection
/// is refused naming the flag; streams that send no report are ended after the idle timeout and
/// a report period (6 s) with DEADLINE_EXCEEDED naming the flag, which frees their places; a
/// stream that keeps reporting stays.
#[tokio::test]
async fn idle_streams_are_ended_and_a_connection_holds_few() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let server = Ratelimitd::start(&[
        "--config",
        &config,
        "--rlqs-idle-timeout",
        "1s",
        "--rlqs-max-streams-per-connection",
        "2",
    ]);
    let channel = server.channel().await;
    let mut silent = Envoy::connect_on(channel.clone()).await.expect("a stream");
    let mut reporting = Envoy::connect_on(channel.clone()).await.expect("a stream");
    let refused = Envoy::connect_on(channel.clone())
        .await
        .err()
        .expect("a third stream on the connection is refused");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(
        refused
            .message()
            .contains("--rlqs-max-streams-per-connection"),
        "{refused:?}"
    );
    let mut elsewhere = Envoy::connect(&server).await;

    let started = Instant::now();
    let id = bucket(&[("name", "kept")]);
    let keep_reporting = tokio::spawn(async move {
        for _ in 0..25 {
            reporting
                .report(DOMAIN, vec![usage(id.clone(), 1, 0, 0)])
                .await;
            reporting.drain(Duration::from_millis(300)).await;
        }
        reporting
    });
    let status = silent.ended(Duration::from_secs(10)).await;
    let ended_after = started.elapsed();
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(
        status.message().contains("--rlqs-idle-timeout"),
        "{status:?}"
    );
    assert!(
        (Duration::from_millis(5900)..Duration::from_secs(9)).contains(&ended_after),
        "ended after {ended_after:?}"
    );
    let status = elsewhere.ended(Duration::from_secs(10)).await;
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    let again = Envoy::connect_on(channel.clone()).await;
    assert!(again.is_ok(), "the place of the ended stream is free");
    drop(again);

    let mut reporting = keep_reporting.await.expect("the reports were sent");
    assert!(started.elapsed() > Duration::from_secs(7));
    reporting
        .report(DOMAIN, vec![usage(bucket(&[("name", "kept")]), 1, 0, 0)])
        .await;
    reporting.drain(Duration::from_millis(300)).await;
    assert_eq!(
        sample(
            &server,
            "ratelimitd_rlqs_limited_total{limit=\"idle_streams\"}"
        )
        .await,
        Some(2),
        "the silent stream and the one opened elsewhere"
    );
    assert_eq!(
        sample(
            &server,
            "ratelimitd_rlqs_limited_total{limit=\"streams_per_connection\"}"
        )
        .await,
        Some(1)
    );
}

/// 100 streams reporting the same 1 000 buckets every second, as Envoys do (five times Envoy's
/// rate): the reports are applied off the serving threads, so RLS calls on connections of their
/// own keep their pace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steady_reporting_does_not_slow_rls() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let server = Ratelimitd::start(&["--config", &config]);
    let ids: Vec<_> = (0..1000)
        .map(|i| bucket(&[("name", &format!("b{i:04}"))]))
        .collect();
    let mut envoys = Vec::new();
    for _ in 0..100 {
        let envoy = Envoy::connect(&server).await;
        envoy
            .report(
                DOMAIN,
                ids.iter().map(|id| usage(id.clone(), 1, 0, 0)).collect(),
            )
            .await;
        envoys.push(envoy);
    }
    wait_applied(&server).await;

    let probe = RlsProbe::start(&server, 4).await;
    let started = Instant::now();
    for _ in 0..5 {
        let second = Instant::now();
        for envoy in &envoys {
            envoy
                .report(
                    DOMAIN,
                    ids.iter().map(|id| usage(id.clone(), 10, 0, 1)).collect(),
                )
                .await;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_secs(1).saturating_sub(second.elapsed())).await;
    }
    let (calls, p99, longest) = probe.finish().await;
    eprintln!(
        "100 streams x 1000 buckets reporting every second for {:?}: {calls} RLS calls, p99 {p99:?}, longest {longest:?}",
        started.elapsed()
    );
    assert!(p99 < Duration::from_millis(250), "RLS p99 {p99:?}");
    assert!(
        longest < Duration::from_secs(1),
        "an RLS call took {longest:?}"
    );
    drop(envoys);
}
