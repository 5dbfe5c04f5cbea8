//! Serving lanes: accepted gRPC connections are spread over `n` lanes, each a current-thread tokio
//! runtime; lane 0 is the caller's runtime, lanes 1.. run on threads of their own.
//!
//! Why not one multi-thread runtime: there, every finished RPC wakes its connection task on the
//! spot (tokio's LIFO slot), so each response leaves in a `writev` of its own, and workers wake
//! each other through futexes. On a current-thread runtime the RPCs of one read run before their
//! connection task flushes, so their responses share one write. Measured on 2 cores, 32 RPCs in
//! flight, memory store: 0.25 instead of 1.3 writes per request, and 9.7 instead of 12.9 µs of
//! server CPU per request (a default tonic server: 12.0 µs).

use std::future::Future;
use std::io;
use std::net::TcpStream as StdTcpStream;

use futures::stream::{FuturesUnordered, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_util::sync::CancellationToken;

/// The connections handed to one lane, registered with that lane's reactor as it takes them.
pub type Connections = futures::stream::Map<
    UnboundedReceiverStream<StdTcpStream>,
    fn(StdTcpStream) -> io::Result<TcpStream>,
>;

/// The running lanes: where accepted connections go, and how each one ended.
pub struct Lanes {
    queues: Vec<mpsc::UnboundedSender<StdTcpStream>>,
    finished: Vec<oneshot::Receiver<Result<(), tonic::transport::Error>>>,
}

/// Starts `count` lanes (at least one), each serving the connections it is given with
/// `serve(connections)`: lane 0 as a task of the current runtime, the others on threads named
/// `ratelimitd-lane-N`, each with its own current-thread runtime.
pub fn start<F, Fut>(count: usize, serve: F) -> io::Result<Lanes>
where
    F: Fn(Connections) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<(), tonic::transport::Error>> + Send + 'static,
{
    let mut queues = Vec::new();
    let mut finished = Vec::new();
    for lane in 0..count.max(1) {
        let (queue, taken) = mpsc::unbounded_channel();
        let connections: Connections =
            UnboundedReceiverStream::new(taken).map(TcpStream::from_std as fn(_) -> _);
        let (done, ended) = oneshot::channel();
        let serve = serve.clone();
        if lane == 0 {
            tokio::spawn(async move {
                let _ = done.send(serve(connections).await);
            });
        } else {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            std::thread::Builder::new()
                .name(format!("ratelimitd-lane-{lane}"))
                .spawn(move || {
                    let _ = done.send(runtime.block_on(serve(connections)));
                })?;
        }
        queues.push(queue);
        finished.push(ended);
    }
    Ok(Lanes { queues, finished })
}

impl Lanes {
    /// Accepts connections until `stopping` is cancelled and deals them out in turn, with Nagle's
    /// algorithm off (answers are small frames that must leave at once, not wait for the
    /// client's delayed ACK). A lane that ends on its own (its server failed) cancels `stopping`,
    /// so the whole server shuts down rather than run on with fewer lanes. Then waits for every
    /// lane to finish and returns the first error.
    pub async fn accept(
        self,
        listener: TcpListener,
        stopping: CancellationToken,
    ) -> Result<(), tonic::transport::Error> {
        let Lanes { queues, finished } = self;
        let mut finished: FuturesUnordered<_> = finished.into_iter().collect();
        let mut result = Ok(());
        let mut next = 0;
        loop {
            let accepted = tokio::select! {
                _ = stopping.cancelled() => break,
                Some(ended) = finished.next() => {
                    tracing::error!("a serving lane stopped; shutting down");
                    if let Ok(Err(error)) = ended {
                        result = Err(error);
                    }
                    stopping.cancel();
                    break;
                }
                accepted = listener.accept() => accepted,
            };
            match accepted {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    match stream.into_std() {
                        Ok(stream) => {
                            let _ = queues[next].send(stream);
                            next = (next + 1) % queues.len();
                        }
                        Err(error) => tracing::warn!(%error, "cannot hand over a connection"),
                    }
                }
                Err(error) => {
                    // Out of file descriptors and the like: let connections close, then retry.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
            }
        }
        drop(listener);
        drop(queues);
        while let Some(ended) = finished.next().await {
            if let (Ok(()), Ok(Err(error))) = (&result, ended) {
                result = Err(error);
            }
        }
        result
    }
}
