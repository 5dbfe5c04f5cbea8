//! Concurrent requests share script calls, and the two batching counters say so: the calls
//! ratelimitd sent (equal to the script calls, `FCALL` or `EVALSHA`, that redis-server counted in
//! `INFO commandstats`) and the requests they carried (every request once).

use futures::future::join_all;
use testkit::ops_support::*;
use testkit::ratelimitd::*;
use testkit::redis_server::RedisServer;

#[tokio::test]
async fn concurrent_requests_share_calls_and_the_counters_count_calls_and_requests() {
    const CONNECTIONS: usize = 8;
    const PER_CONNECTION: usize = 50;
    let redis = RedisServer::start();
    let config = ops_fixture("redis.yaml");
    let url = redis.url();
    // One serving thread, no deny cache: every request goes to Redis through one dispatcher.
    let server = Ratelimitd::start(&[
        "--config",
        config.to_str().unwrap(),
        "--redis-url",
        &url,
        "--threads",
        "1",
        "--no-deny-cache",
    ]);
    let mut redis_connection = redis.connection();
    let before = script_calls(&mut redis_connection);

    let mut clients = Vec::new();
    for _ in 0..CONNECTIONS {
        clients.push(server.client().await);
    }
    let answers = join_all(
        clients
            .into_iter()
            .enumerate()
            .map(|(c, client)| async move {
                join_all((0..PER_CONNECTION).map(|i| {
                    let mut client = client.clone();
                    async move {
                        let value = format!("{c}-{i}");
                        should(&mut client, request("ops", &[&[("gcra", &value)]], 0)).await
                    }
                }))
                .await
            }),
    )
    .await;
    let answered = answers.iter().flatten().count();
    assert_eq!(answered, CONNECTIONS * PER_CONNECTION);
    assert!(
        answers
            .iter()
            .flatten()
            .all(|a| a.statuses[0].limit_remaining == 2),
        "every request had a counter of its own"
    );

    let text = metrics(server.http_addr()).await;
    let calls = value(&text, "ratelimitd_redis_script_calls_total", "");
    let carried = value(&text, "ratelimitd_redis_script_call_requests_total", "");
    eprintln!("{calls} script calls carried {carried} requests");
    assert_eq!(carried, answered as f64, "each request carried once");
    assert_eq!(
        calls,
        (script_calls(&mut redis_connection) - before) as f64,
        "the calls redis-server counted"
    );
    assert!(
        calls >= 1.0 && calls < carried,
        "{answered} requests in flight at once over at most --redis-pool-size calls: {calls} calls"
    );
}
