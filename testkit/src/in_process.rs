//! The server run in the test's own process through `ratelimitd::server::run`, on ports bound to
//! port 0, as the binary runs it (a thread of its own with a current-thread runtime): for tests
//! of what the server decides and answers, where no process boundary (flags, environment
//! variables, signals, exit codes, its log on stderr) is under test. It starts without spawning
//! a process and is told to stop when dropped.

use std::net::{SocketAddr, TcpListener as StdListener};
use std::thread::JoinHandle;

use ratelimitd::server::{self, GrpcListener, Listeners, ServerError, Settings};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tonic::transport::Channel;

use crate::ratelimitd::{channel, client, Client};

/// A server serving in this process; told to stop (as on SIGTERM) when dropped, without waiting
/// for its connections to drain (the test's clients may still hold theirs): [`InProcess::stop`]
/// waits.
pub struct InProcess {
    grpc: SocketAddr,
    http: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    served: Option<JoinHandle<Result<(), ServerError>>>,
}

impl InProcess {
    /// Serves `settings` on a gRPC and an HTTP port of 127.0.0.1 bound to port 0, with one
    /// serving lane (the runtime of the thread `run` is called on).
    pub fn start(mut settings: Settings) -> InProcess {
        settings.lanes = 1;
        let bound = |what| {
            let listener = StdListener::bind("127.0.0.1:0")
                .unwrap_or_else(|e| panic!("bind the {what} port: {e}"));
            listener
                .set_nonblocking(true)
                .expect("a non-blocking listener");
            listener
        };
        let (grpc, http) = (bound("gRPC"), bound("HTTP"));
        let addr = |listener: &StdListener| listener.local_addr().expect("a bound address");
        let (grpc_addr, http_addr) = (addr(&grpc), addr(&http));
        let (stop, stopped) = oneshot::channel::<()>();
        let served = std::thread::Builder::new()
            .name("ratelimitd-in-process".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime for the server");
                runtime.block_on(server::run(
                    settings,
                    async move {
                        Ok(Listeners {
                            grpc: GrpcListener::Tcp(TcpListener::from_std(grpc)?),
                            rls: None,
                            http: TcpListener::from_std(http)?,
                            metrics: None,
                            debug: None,
                            envoyproxy_metrics: None,
                        })
                    },
                    async move {
                        let _ = stopped.await;
                    },
                ))
            })
            .expect("spawn the server's thread");
        InProcess {
            grpc: grpc_addr,
            http: http_addr,
            stop: Some(stop),
            served: Some(served),
        }
    }

    pub fn grpc_addr(&self) -> SocketAddr {
        self.grpc
    }

    pub fn http_addr(&self) -> SocketAddr {
        self.http
    }

    /// An HTTP/2 channel to the gRPC port.
    pub async fn channel(&self) -> Channel {
        channel(self.grpc).await
    }

    /// An RLS client on its own connection.
    pub async fn client(&self) -> Client {
        client(self.grpc).await
    }

    /// Stops serving (as SIGTERM does) and returns what `run` returned.
    pub fn stop(mut self) -> Result<(), ServerError> {
        self.stopped()
    }

    fn stopped(&mut self) -> Result<(), ServerError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.served.take() {
            Some(served) => served.join().expect("the server's thread did not panic"),
            None => Ok(()),
        }
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
