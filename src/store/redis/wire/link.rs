//! One connection to a server, whichever transport carries it: the store's own pipelined
//! connection ([`Pipe`], plain TCP speaking RESP2: the script calls skip the redis crate's
//! command and value types) or the redis crate's multiplexed connection (TLS, on a stream the
//! store connects itself when it has the deployment's [`RedisTls`]; Unix sockets; RESP3). Both
//! run any redis crate command ([`ConnectionLike`]).

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Cmd, ConnectionAddr, RedisError, RedisFuture, Value};

use super::pipe::Pipe;
use crate::store::redis::tls::RedisTls;

/// A connection handle; clones share the connection.
#[derive(Clone)]
pub enum Link {
    /// The store's pipelined connection.
    Pipe(Pipe),
    /// The redis crate's multiplexed connection.
    Mux(MultiplexedConnection),
}

impl Link {
    /// Opens a connection to `client`'s server: a [`Pipe`] when it [`serves`](Pipe::serves) the
    /// address; over TLS, the redis crate's multiplexed connection on a stream `tls` connects;
    /// else the crate's multiplexed connection as the crate connects it.
    pub async fn open(
        client: &redis::Client,
        config: &AsyncConnectionConfig,
        tls: Option<&RedisTls>,
    ) -> Result<Link, RedisError> {
        let info = client.get_connection_info();
        if Pipe::serves(info) {
            return Pipe::connect(info, config).await.map(Link::Pipe);
        }
        if let (
            ConnectionAddr::TcpTls {
                host,
                port,
                insecure,
                ..
            },
            Some(tls),
        ) = (info.addr(), tls)
        {
            let stream = tls.connect(host, *port, *insecure).await?;
            let (connection, driver) = MultiplexedConnection::new_with_config(
                info.redis_settings(),
                stream,
                config.clone(),
            )
            .await?;
            // Ends once every clone of the connection is dropped, or the stream fails.
            tokio::spawn(driver);
            return Ok(Link::Mux(connection));
        }
        client
            .get_multiplexed_async_connection_with_config(config)
            .await
            .map(Link::Mux)
    }
}

impl ConnectionLike for Link {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Link::Pipe(pipe) => pipe.req_packed_command(cmd),
            Link::Mux(mux) => mux.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Link::Pipe(pipe) => pipe.req_packed_commands(pipeline, offset, count),
            Link::Mux(mux) => mux.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Link::Pipe(pipe) => pipe.get_db(),
            Link::Mux(mux) => mux.get_db(),
        }
    }
}
