//! `server::run` as a library: it serves the listeners it is given (bound to port 0 here), and
//! returns `Ok` once its shutdown future completes, with its ports closed.

use std::net::TcpStream;

use ratelimitd::proto::rls::rate_limit_response::Code;
use ratelimitd::server::Settings;
use testkit::in_process::InProcess;
use testkit::ratelimitd::{fixture, http_get, request, should};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_serves_the_listeners_it_is_given_and_returns_after_shutdown() {
    let server = InProcess::start(Settings::new(vec![fixture("serve/matching.yaml")]));
    let (grpc, http) = (server.grpc_addr(), server.http_addr());
    {
        let mut client = server.client().await;
        let response = should(&mut client, request("matching", &[&[("k", "v")]], 0)).await;
        assert_eq!(response.overall_code, Code::Ok as i32);
        let (status, body) = http_get(http, "/healthcheck").await;
        assert_eq!((status, body.trim()), (200, "OK"));
    }
    let stopped = tokio::task::spawn_blocking(move || server.stop())
        .await
        .expect("the stop did not panic");
    assert!(stopped.is_ok(), "run returned {stopped:?}");
    for addr in [grpc, http] {
        assert!(
            TcpStream::connect(addr).is_err(),
            "{addr} still accepts after run returned"
        );
    }
}
