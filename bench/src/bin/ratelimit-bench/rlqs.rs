//! `ratelimit-bench rlqs`: how many RLQS streams and buckets one server holds, and how fast it
//! answers their reports.
//!
//! Opens `--streams` bidirectional `StreamRateLimitQuotas` calls, spread over `--connections`
//! HTTP/2 connections, each standing for one Envoy reporting the same `--buckets` buckets
//! `{<bucket-key>: b0 .. b<B-1>}` of `--domain` every `--interval` (a bucket's first report with
//! `time_elapsed` 0 and 1 allowed, as Envoy sends it; then `--allowed` allowed and `--denied`
//! denied per bucket per interval). The reports of the streams are spread evenly over the
//! interval. Measured for `--duration` after `--warmup`:
//!
//! - assignment latency: from a report sent to the first assignment (or abandon) received for
//!   each of its buckets after it; p50, p99, p99.9, max;
//! - reports sent, bucket actions received, buckets a report left unanswered by the next one;
//! - the server's CPU time per report and per bucket report, and its VmRSS per bucket
//!   (`--server-pid`), from `/proc`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use parking_lot::Mutex;
use ratelimitd::proto::rlqs::rate_limit_quota_response::{bucket_action, BucketAction};
use ratelimitd::proto::rlqs::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use ratelimitd::proto::rlqs::rate_limit_quota_usage_reports::BucketQuotaUsage;
use ratelimitd::proto::rlqs::{BucketId, RateLimitQuotaUsageReports};
use tokio::sync::mpsc;
use tonic::transport::{Channel, Endpoint};

#[derive(clap::Args, Debug)]
pub struct RlqsArgs {
    /// Server address: `IP:PORT` of the gRPC port (plaintext HTTP/2).
    #[arg(long, default_value = "127.0.0.1:8081")]
    pub addr: SocketAddr,
    /// The reports' configuration domain.
    #[arg(long, default_value = "bench")]
    pub domain: String,
    /// Streams (simulated Envoys).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    pub streams: u32,
    /// Buckets each stream reports.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    pub buckets: u32,
    /// HTTP/2 connections the streams are spread over.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    pub connections: u32,
    /// The bucket id's key; bucket i is `{KEY: b<i>}`.
    #[arg(long, default_value = "name")]
    pub bucket_key: String,
    /// Time between two reports of a stream.
    #[arg(long, default_value = "1s", value_parser = parse_positive_duration)]
    pub interval: Duration,
    /// Requests allowed per bucket per report.
    #[arg(long, default_value_t = 10)]
    pub allowed: u64,
    /// Requests denied per bucket per report.
    #[arg(long, default_value_t = 0)]
    pub denied: u64,
    /// Time before measuring: every stream subscribed and its first assignments in.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub warmup: Duration,
    /// Time measured.
    #[arg(long, default_value = "30s", value_parser = parse_positive_duration)]
    pub duration: Duration,
    /// The server's process id, for its CPU time and VmRSS.
    #[arg(long)]
    pub server_pid: Option<u32>,
}

/// A duration above zero.
fn parse_positive_duration(text: &str) -> Result<Duration, String> {
    let duration = humantime::parse_duration(text).map_err(|e| e.to_string())?;
    if duration.is_zero() {
        return Err(format!(
            "{text:?} is zero; give a positive duration such as 1s"
        ));
    }
    Ok(duration)
}

/// How long after the last report the streams still get to finish.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// What every stream adds to while measuring.
struct Measured {
    latency_ns: Histogram<u64>,
    reports: u64,
    actions: u64,
    unanswered: u64,
    /// Streams the server ended, by the error's text.
    ended: Vec<String>,
}

/// Runs the mode: prints the figures, or an error naming what failed.
pub fn run(args: &RlqsArgs) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    runtime.block_on(drive(args))
}

async fn drive(args: &RlqsArgs) -> Result<(), String> {
    let mut channels = Vec::new();
    for _ in 0..args.connections {
        let channel = Endpoint::from_shared(format!("http://{}", args.addr))
            .map_err(|e| format!("--addr {}: {e}", args.addr))?
            .connect()
            .await
            .map_err(|e| format!("connect to --addr {}: {e}", args.addr))?;
        channels.push(channel);
    }
    let measured = Arc::new(Mutex::new(Measured {
        latency_ns: Histogram::new_with_bounds(1, 600_000_000_000, 3)
            .map_err(|e| format!("histogram: {e}"))?,
        reports: 0,
        actions: 0,
        unanswered: 0,
        ended: Vec::new(),
    }));
    let rss_before = args.server_pid.and_then(crate::procstat::vm_rss_kib);
    let start = Instant::now();
    let measure_from = start + args.warmup;
    let end = measure_from + args.duration;
    let mut tasks = Vec::new();
    for stream in 0..args.streams {
        let channel = channels[(stream % args.connections) as usize].clone();
        let offset = args
            .interval
            .mul_f64(f64::from(stream) / f64::from(args.streams));
        tasks.push(tokio::spawn(one_stream(
            channel,
            args.domain.clone(),
            args.bucket_key.clone(),
            args.buckets,
            args.interval,
            (args.allowed, args.denied),
            start + offset,
            (measure_from, end),
            measured.clone(),
        )));
    }
    let cpu_at_start = wait_and_read_cpu(measure_from, args.server_pid).await;
    let rss_at_start = args.server_pid.and_then(crate::procstat::vm_rss_kib);
    let cpu_at_end = wait_and_read_cpu(end, args.server_pid).await;
    let rss_at_end = args.server_pid.and_then(crate::procstat::vm_rss_kib);
    // A saturated server may hold a stream's sends back past the end: the figures are taken,
    // so such streams are stopped rather than waited for.
    let stop_by = tokio::time::Instant::from_std(end + args.interval + STOP_GRACE);
    for task in tasks {
        let abort = task.abort_handle();
        if tokio::time::timeout_at(stop_by, task).await.is_err() {
            abort.abort();
        }
    }
    let measured = measured.lock();
    print_figures(
        args,
        &measured,
        cpu_at_start
            .zip(cpu_at_end)
            .map(|(a, b)| b.saturating_sub(a)),
        (rss_before, rss_at_start.or(rss_at_end)),
    );
    if measured.ended.len() as u64 >= u64::from(args.streams) {
        return Err(format!(
            "the server at --addr {} ended every stream: {}",
            args.addr, measured.ended[0]
        ));
    }
    Ok(())
}

/// The server's CPU time (µs) at `at`.
async fn wait_and_read_cpu(at: Instant, pid: Option<u32>) -> Option<u64> {
    tokio::time::sleep_until(at.into()).await;
    pid.and_then(crate::procstat::cpu_us)
}

/// One simulated Envoy: reports every bucket every `interval` from `first` on, until `end`,
/// and times the assignments that follow each report.
#[allow(clippy::too_many_arguments)]
async fn one_stream(
    channel: Channel,
    domain: String,
    key: String,
    buckets: u32,
    interval: Duration,
    (allowed, denied): (u64, u64),
    first: Instant,
    (measure_from, end): (Instant, Instant),
    measured: Arc<Mutex<Measured>>,
) {
    let ids: Vec<BucketId> = (0..buckets)
        .map(|i| BucketId {
            bucket: [(key.clone(), format!("b{i}"))].into_iter().collect(),
        })
        .collect();
    // Per bucket: when the report that awaits its assignment was sent.
    let pending: Arc<Mutex<Vec<Option<Instant>>>> =
        Arc::new(Mutex::new(vec![None; buckets as usize]));
    let (tx, rx) = mpsc::channel::<RateLimitQuotaUsageReports>(4);
    let mut client = RateLimitQuotaServiceClient::new(channel);
    tokio::time::sleep_until(first.into()).await;
    let report = |first_report: bool| RateLimitQuotaUsageReports {
        domain: domain.clone(),
        bucket_quota_usages: ids
            .iter()
            .map(|id| BucketQuotaUsage {
                bucket_id: Some(id.clone()),
                time_elapsed: Some(prost_types::Duration {
                    seconds: if first_report {
                        0
                    } else {
                        interval.as_secs() as i64
                    },
                    nanos: if first_report {
                        0
                    } else {
                        interval.subsec_nanos() as i32
                    },
                }),
                num_requests_allowed: if first_report { 1 } else { allowed },
                num_requests_denied: if first_report { 0 } else { denied },
            })
            .collect(),
    };
    mark(&pending, Instant::now());
    if tx.send(report(true)).await.is_err() {
        return;
    }
    let responses = tokio::time::timeout_at(
        end.into(),
        client.stream_rate_limit_quotas(tokio_stream::wrappers::ReceiverStream::new(rx)),
    )
    .await;
    let mut responses = match responses {
        Ok(Ok(responses)) => responses.into_inner(),
        Ok(Err(status)) => {
            measured.lock().ended.push(status.to_string());
            return;
        }
        Err(_) => {
            measured
                .lock()
                .ended
                .push("the stream was not opened before the end".to_owned());
            return;
        }
    };
    let receiver = {
        let pending = pending.clone();
        let measured = measured.clone();
        let key = key.clone();
        tokio::spawn(async move {
            loop {
                match responses.message().await {
                    Ok(Some(response)) => {
                        let now = Instant::now();
                        for action in &response.bucket_action {
                            take(&pending, &measured, &key, action, now, measure_from, end);
                        }
                    }
                    Ok(None) => return,
                    Err(status) => {
                        if Instant::now() < end {
                            measured.lock().ended.push(status.to_string());
                        }
                        return;
                    }
                }
            }
        })
    };
    let mut next = first + interval;
    while next < end {
        tokio::time::sleep_until(next.into()).await;
        let now = Instant::now();
        let left = mark(&pending, now);
        if now >= measure_from {
            let mut m = measured.lock();
            m.reports += 1;
            m.unanswered += left;
        }
        match tokio::time::timeout_at(end.into(), tx.send(report(false))).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) | Err(_) => break,
        }
        next += interval;
    }
    tokio::time::sleep(interval).await;
    drop(tx);
    receiver.abort();
}

/// Marks every bucket as awaiting an assignment since `now`; returns how many were still
/// awaiting one from the report before.
fn mark(pending: &Mutex<Vec<Option<Instant>>>, now: Instant) -> u64 {
    let mut pending = pending.lock();
    let left = pending.iter().filter(|p| p.is_some()).count() as u64;
    pending.iter_mut().for_each(|p| *p = Some(now));
    left
}

/// Records the latency of `action` when its bucket awaits an assignment.
fn take(
    pending: &Mutex<Vec<Option<Instant>>>,
    measured: &Mutex<Measured>,
    key: &str,
    action: &BucketAction,
    now: Instant,
    measure_from: Instant,
    end: Instant,
) {
    let answered = matches!(
        action.bucket_action,
        Some(bucket_action::BucketAction::QuotaAssignmentAction(_))
            | Some(bucket_action::BucketAction::AbandonAction(_))
    );
    let index = action
        .bucket_id
        .as_ref()
        .and_then(|id| id.bucket.get(key))
        .and_then(|value| value.strip_prefix('b'))
        .and_then(|n| n.parse::<usize>().ok());
    let sent = match index {
        Some(i) if answered => pending.lock().get_mut(i).and_then(Option::take),
        _ => None,
    };
    if now < measure_from || now >= end {
        return;
    }
    let mut m = measured.lock();
    m.actions += 1;
    if let Some(sent) = sent {
        let ns = now.duration_since(sent).as_nanos().max(1) as u64;
        let high = m.latency_ns.high();
        let _ = m.latency_ns.record(ns.min(high));
    }
}

fn print_figures(
    args: &RlqsArgs,
    m: &Measured,
    cpu_us: Option<u64>,
    (rss_before_kib, rss_kib): (Option<u64>, Option<u64>),
) {
    let ms = |q: f64| m.latency_ns.value_at_quantile(q) as f64 / 1e6;
    let bucket_reports = m.reports * u64::from(args.buckets);
    println!(
        "rlqs: {} streams x {} buckets every {:?}, {} connections, measured {:?}",
        args.streams, args.buckets, args.interval, args.connections, args.duration
    );
    println!(
        "reports {} (bucket reports {}), bucket actions {}, buckets unanswered by the next report {}",
        m.reports, bucket_reports, m.actions, m.unanswered
    );
    println!(
        "assignment latency ms: p50 {:.2} p99 {:.2} p99.9 {:.2} max {:.2} (n {})",
        ms(0.5),
        ms(0.99),
        ms(0.999),
        m.latency_ns.max() as f64 / 1e6,
        m.latency_ns.len()
    );
    if let Some(cpu_us) = cpu_us {
        println!(
            "server CPU: {:.1} µs per report, {:.2} µs per bucket report",
            cpu_us as f64 / m.reports.max(1) as f64,
            cpu_us as f64 / bucket_reports.max(1) as f64
        );
    }
    if let Some(rss_kib) = rss_kib {
        let held = u64::from(args.streams) * u64::from(args.buckets);
        let before = rss_before_kib.unwrap_or(0);
        println!(
            "server VmRSS {} MiB ({} MiB before the streams), {:.0} bytes of growth per stream bucket held ({held})",
            rss_kib / 1024,
            before / 1024,
            rss_kib.saturating_sub(before) as f64 * 1024.0 / held as f64
        );
    }
    if !m.ended.is_empty() {
        println!(
            "streams ended by the server: {} (first: {})",
            m.ended.len(),
            m.ended[0]
        );
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        rlqs: RlqsArgs,
    }

    #[test]
    fn defaults_are_the_planned_measurement() {
        let cli = Cli::try_parse_from(["rlqs"]).expect("defaults parse");
        assert_eq!(
            (cli.rlqs.streams, cli.rlqs.buckets, cli.rlqs.interval),
            (1000, 100, Duration::from_secs(1))
        );
    }

    #[test]
    fn parameters_parse_and_zero_is_refused() {
        let cli = Cli::try_parse_from([
            "rlqs",
            "--streams",
            "10",
            "--buckets",
            "3",
            "--interval",
            "500ms",
            "--duration",
            "2s",
            "--server-pid",
            "42",
        ])
        .expect("parameters parse");
        assert_eq!((cli.rlqs.streams, cli.rlqs.buckets), (10, 3));
        assert_eq!(cli.rlqs.interval, Duration::from_millis(500));
        assert_eq!(cli.rlqs.server_pid, Some(42));
        for bad in [
            &["rlqs", "--streams", "0"][..],
            &["rlqs", "--buckets", "0"],
            &["rlqs", "--interval", "0s"],
        ] {
            assert!(Cli::try_parse_from(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn a_report_awaits_every_bucket_and_counts_what_the_last_left() {
        let pending = Mutex::new(vec![None; 3]);
        let t0 = Instant::now();
        assert_eq!(mark(&pending, t0), 0);
        pending.lock()[1] = None;
        assert_eq!(mark(&pending, t0 + Duration::from_secs(1)), 2);
    }
}
