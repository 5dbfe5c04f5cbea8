//! A bounded load against a running ratelimitd while a test breaks its Redis (a killed master,
//! a failover, a flushed script cache), and the checks every such test makes afterwards: every
//! answer was a decision or the store-error policy, none came past its bound, service resumed by
//! itself, and a fresh window admits exactly its limit. Requests use the `concurrency` domain of
//! `tests/fixtures/serve/concurrency.yaml` (fixed window, 50 per hour).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ratelimitd::proto::rls::rate_limit_response::Code;

use super::ratelimitd::*;

/// What one call of the load got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Ok,
    OverLimit,
    /// The store-error policy's answer (UNAVAILABLE by default).
    Unavailable,
}

/// Sends requests on 200 keys (fixed window, 50 per hour) from 4 tasks until `stop`, each call
/// bounded by `bound`; returns every answer with the instant it came. Any other outcome (another
/// gRPC code, a call past the bound) fails the test.
pub async fn load(
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    bound: Duration,
) -> Vec<(Instant, Answer)> {
    let mut tasks = Vec::new();
    for task in 0..4 {
        let stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            let mut c = client(addr).await;
            let mut answers = Vec::new();
            let mut i = task;
            while !stop.load(Ordering::Relaxed) {
                i += 4;
                let value = format!("load-{}", i % 200);
                let req = request("concurrency", &[&[("fixed_window", &value)]], 0);
                let started = Instant::now();
                let result = tokio::time::timeout(bound, c.should_rate_limit(req)).await;
                let answer = match result {
                    Err(_) => panic!("a call took longer than {bound:?}"),
                    Ok(Ok(resp)) => {
                        let resp = resp.into_inner();
                        check_invariants(&resp, 1);
                        if resp.overall_code == Code::Ok as i32 {
                            Answer::Ok
                        } else {
                            Answer::OverLimit
                        }
                    }
                    Ok(Err(status)) if status.code() == tonic::Code::Unavailable => {
                        Answer::Unavailable
                    }
                    Ok(Err(status)) => panic!("unexpected answer {status:?}"),
                };
                assert!(started.elapsed() < bound);
                answers.push((Instant::now(), answer));
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            answers
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.expect("load task"));
    }
    all
}

/// 60 calls on a fresh key of 50 per hour: exactly 50 admitted.
pub async fn assert_window_exact(addr: SocketAddr, value: &str) {
    let mut c = client(addr).await;
    let mut ok = 0;
    for _ in 0..60 {
        let resp = should(
            &mut c,
            request("concurrency", &[&[("fixed_window", value)]], 0),
        )
        .await;
        ok += usize::from(resp.overall_code == Code::Ok as i32);
    }
    assert_eq!(ok, 50, "{value}: admitted of 60 at a limit of 50");
}

/// Runs `fault` (a blocking closure) while the load runs (1 s before, `settle` after), then checks
/// every answer, that answers after `resumed_within` of the fault's end are never errors, and
/// that a fresh window admits exactly its limit. Returns the answers.
pub async fn fault_under_load(
    server: &Ratelimitd,
    fault: impl FnOnce(),
    resumed_within: Duration,
    settle: Duration,
) -> Vec<(Instant, Answer)> {
    let stop = Arc::new(AtomicBool::new(false));
    let running = tokio::spawn(load(
        server.grpc_addr(),
        stop.clone(),
        Duration::from_secs(3),
    ));
    tokio::time::sleep(Duration::from_secs(1)).await;
    tokio::task::block_in_place(fault);
    let recovered = Instant::now();
    tokio::time::sleep(settle).await;
    stop.store(true, Ordering::Relaxed);
    let answers = running.await.expect("load");
    assert!(
        answers.iter().filter(|(_, a)| *a == Answer::Ok).count() > 50,
        "the load ran: {} answers",
        answers.len()
    );
    let late_errors: Vec<_> = answers
        .iter()
        .filter(|(at, a)| *at > recovered + resumed_within && *a == Answer::Unavailable)
        .collect();
    assert!(
        late_errors.is_empty(),
        "{} errors more than {resumed_within:?} after recovery; output:\n{}",
        late_errors.len(),
        server.output()
    );
    assert_window_exact(server.grpc_addr(), &format!("after-{}", answers.len())).await;
    answers
}
