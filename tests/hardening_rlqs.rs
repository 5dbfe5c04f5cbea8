//! The RLQS surface against a hostile or oversized Envoy, the real binary spoken to by the tests'
//! own RLQS client: reports as large as the bucket cap allows are answered, larger buckets and
//! reports are refused by name.

mod common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use common::ratelimitd::{http_get, Ratelimitd};
use common::rlqs_client::{bucket, key, usage, Envoy};
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
