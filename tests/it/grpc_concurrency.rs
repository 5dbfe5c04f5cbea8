//! Exactness under concurrency (memory store, then Redis): for every algorithm, 300 concurrent
//! requests from as many tasks over six HTTP/2 connections on one key limited to 50 per hour admit
//! exactly 50; with three descriptors per request, exactly 50 too, and the denied requests charge
//! nothing at the other two limits.
//!
//! The scenarios live in `testkit::ratelimitd` (`assert_exact_admission*`) and take a list of
//! server addresses; `redis_two_processes` runs the same bodies through two ratelimitd processes
//! sharing one real redis-server.
//!
//! `both_ports` splits the connections between one server's gRPC port and its RLS port
//! (`--rls-addr`), and the Redis pair runs the scenarios once more with one process's connections
//! on its RLS port.
//!
//! The servers run several serving lanes (`--threads`), so the six connections land on different
//! threads sharing one store, as on any multi-core host.

use testkit::ratelimitd::*;

fn serve() -> Ratelimitd {
    let config = fixture("serve/concurrency.yaml");
    Ratelimitd::start(&["--config", config.to_str().unwrap(), "--threads", "4"])
}

macro_rules! algorithm_tests {
    ($($name:ident: $algorithm:literal,)*) => {
        mod single_descriptor {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 8)]
                async fn $name() {
                    let server = serve();
                    assert_exact_admission(&[server.grpc_addr()], $algorithm, "one-key").await;
                }
            )*
        }
        mod three_descriptors {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 8)]
                async fn $name() {
                    let server = serve();
                    assert_exact_admission_three_descriptors(
                        &[server.grpc_addr()],
                        $algorithm,
                        "three",
                    )
                    .await;
                }
            )*
        }
    };
}

algorithm_tests! {
    fixed_window: "fixed_window",
    sliding_window_log: "sliding_window_log",
    sliding_window_counter: "sliding_window_counter",
    token_bucket: "token_bucket",
    gcra: "gcra",
}

/// The same scenarios with the connections split between the gRPC port and the RLS port
/// (`--rls-addr`, ratelimitd's own HTTP/2 server) of one server.
mod both_ports {
    use super::*;

    macro_rules! both_port_tests {
        ($($name:ident: $algorithm:literal,)*) => {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 8)]
                async fn $name() {
                    let config = fixture("serve/concurrency.yaml");
                    let server = Ratelimitd::start(&[
                        "--config",
                        config.to_str().unwrap(),
                        "--threads",
                        "4",
                        "--rls-addr",
                        "127.0.0.1:0",
                    ]);
                    let addrs = [server.grpc_addr(), server.rls_addr()];
                    assert_exact_admission(&addrs, $algorithm, "one-key").await;
                    assert_exact_admission_three_descriptors(&addrs, $algorithm, "three").await;
                }
            )*
        };
    }

    both_port_tests! {
        fixed_window: "fixed_window",
        sliding_window_log: "sliding_window_log",
        sliding_window_counter: "sliding_window_counter",
        token_bucket: "token_bucket",
        gcra: "gcra",
    }
}

/// The same scenarios through two ratelimitd processes sharing one real redis-server.
mod redis_two_processes {
    use super::*;
    use testkit::redis_server::RedisServer;

    fn serve_pair(redis: &RedisServer) -> (Ratelimitd, Ratelimitd) {
        let config = fixture("serve/concurrency.yaml");
        let config = config.to_str().unwrap();
        let url = redis.url();
        // These tests are about exactness, not latency: a debug build on a small machine answering
        // 300 simultaneous calls can exceed the default 100 ms store timeout.
        let a = Ratelimitd::start(&[
            "--config",
            config,
            "--redis-url",
            &url,
            "--redis-timeout",
            "5s",
            "--threads",
            "1",
        ]);
        let b = Ratelimitd::start(&[
            "--config",
            config,
            "--redis-url",
            &url,
            "--redis-timeout",
            "5s",
            "--threads",
            "3",
            "--rls-addr",
            "127.0.0.1:0",
        ]);
        (a, b)
    }

    macro_rules! redis_tests {
        ($($name:ident: $algorithm:literal,)*) => {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 8)]
                async fn $name() {
                    let redis = RedisServer::start();
                    let (a, b) = serve_pair(&redis);
                    let addrs = [a.grpc_addr(), b.grpc_addr()];
                    assert_exact_admission(&addrs, $algorithm, "one-key").await;
                    assert_exact_admission_three_descriptors(&addrs, $algorithm, "three").await;
                    // And with b's connections on its RLS port.
                    let addrs = [a.grpc_addr(), b.rls_addr()];
                    assert_exact_admission(&addrs, $algorithm, "one-key-rls").await;
                    assert_exact_admission_three_descriptors(&addrs, $algorithm, "three-rls").await;
                }
            )*
        };
    }

    redis_tests! {
        fixed_window: "fixed_window",
        sliding_window_log: "sliding_window_log",
        sliding_window_counter: "sliding_window_counter",
        token_bucket: "token_bucket",
        gcra: "gcra",
    }
}
