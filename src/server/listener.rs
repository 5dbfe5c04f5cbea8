//! Where the gRPC port listens: a TCP address, or a unix domain socket (`--grpc-uds`, as
//! envoyproxy/ratelimit's GRPC_UDS) for a client on the same host (a sidecar Envoy).
//!
//! A unix socket's file outlives a process that was killed, and binding fails while it exists,
//! so a leftover socket nobody serves on is removed before binding; a path that is not a socket,
//! or a socket another process still listens on, is refused. Whether a process listens is asked
//! with a non-blocking connect bounded by [`LIVENESS_PROBE_TIMEOUT`]: a listener that does not
//! accept (a stopped process whose backlog is full) would block a plain `connect` forever. The
//! socket file gets its mode ([`UdsMode`]) before it listens, so no connection is ever accepted
//! under the umask's mode. The file is removed again when the listener closes, unless another
//! process has replaced it meanwhile.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use socket2::{Domain, SockAddr, Socket, Type};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};

use super::uds_mode::UdsMode;

/// How long the connect that asks whether a process still listens on an existing socket may
/// take: a live process answers within microseconds, so one that has not by then is stuck.
pub const LIVENESS_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Connections the unix socket queues before they are accepted.
const UNIX_BACKLOG: i32 = 1024;

/// The gRPC port's listening socket.
pub enum GrpcListener {
    Tcp(TcpListener),
    Unix(UnixSocket),
}

/// A bound unix socket and the file it was bound at, removed when this is dropped.
pub struct UnixSocket {
    listener: UnixListener,
    path: PathBuf,
    /// Device and inode of the socket file this listener created.
    file: (u64, u64),
}

/// Where the gRPC port listens, for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GrpcAddress {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl fmt::Display for GrpcAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GrpcAddress::Tcp(addr) => addr.fmt(f),
            GrpcAddress::Unix(path) => path.display().fmt(f),
        }
    }
}

/// A connection just accepted, before it is handed to a serving lane.
pub enum Incoming {
    Tcp(TcpStream),
    Unix(UnixStream),
}

/// A connection on its way to a serving lane, detached from the accepting runtime.
pub enum AcceptedStream {
    Tcp(std::net::TcpStream),
    Unix(std::os::unix::net::UnixStream),
}

impl From<TcpListener> for GrpcListener {
    fn from(listener: TcpListener) -> GrpcListener {
        GrpcListener::Tcp(listener)
    }
}

impl GrpcListener {
    /// Binds a unix socket at `path` with permission bits `mode`, first removing a leftover
    /// socket file there that no process listens on. Refused, leaving the file as it is: a path
    /// that is not a socket, and a socket a process listens on (serving, or not accepting: a
    /// stopped process's full backlog). Must be called within a tokio runtime.
    pub async fn bind_unix(path: &Path, mode: UdsMode) -> io::Result<GrpcListener> {
        match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.file_type().is_socket() => match liveness(path).await? {
                Liveness::Serves => {
                    return Err(io::Error::new(
                        io::ErrorKind::AddrInUse,
                        "another process serves on this socket",
                    ))
                }
                Liveness::Stuck(how) => {
                    return Err(io::Error::new(
                        io::ErrorKind::AddrInUse,
                        format!(
                            "a process listens on this socket but does not accept connections \
                             ({how}; stopped or hung?); not removed"
                        ),
                    ))
                }
                Liveness::Stale => std::fs::remove_file(path)?,
            },
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    "exists and is not a socket (not removed)",
                ))
            }
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => return Err(error),
        }
        let listener = listen_unix(path, mode)?;
        let meta = std::fs::symlink_metadata(path)?;
        Ok(GrpcListener::Unix(UnixSocket {
            listener,
            path: path.to_owned(),
            file: (meta.dev(), meta.ino()),
        }))
    }

    /// The address or socket path listened on.
    pub fn address(&self) -> io::Result<GrpcAddress> {
        match self {
            GrpcListener::Tcp(listener) => listener.local_addr().map(GrpcAddress::Tcp),
            GrpcListener::Unix(socket) => Ok(GrpcAddress::Unix(socket.path.clone())),
        }
    }

    /// The next connection.
    pub async fn accept(&self) -> io::Result<Incoming> {
        match self {
            GrpcListener::Tcp(listener) => listener.accept().await.map(|(s, _)| Incoming::Tcp(s)),
            GrpcListener::Unix(socket) => socket
                .listener
                .accept()
                .await
                .map(|(s, _)| Incoming::Unix(s)),
        }
    }
}

/// Whether a process listens on an existing socket file.
enum Liveness {
    /// It accepted a connection.
    Serves,
    /// It listens but does not take connections (how the connect failed).
    Stuck(&'static str),
    /// Nobody listens: a leftover of a process that is gone.
    Stale,
}

/// Asks with a non-blocking connect, bounded by [`LIVENESS_PROBE_TIMEOUT`]; an error that
/// says neither (permission denied) is returned as it is.
async fn liveness(path: &Path) -> io::Result<Liveness> {
    match tokio::time::timeout(LIVENESS_PROBE_TIMEOUT, UnixStream::connect(path)).await {
        Ok(Ok(_)) => Ok(Liveness::Serves),
        Ok(Err(error)) if error.kind() == io::ErrorKind::ConnectionRefused => Ok(Liveness::Stale),
        Ok(Err(error)) if error.kind() == io::ErrorKind::WouldBlock => {
            Ok(Liveness::Stuck("its backlog is full"))
        }
        Ok(Err(error)) => Err(error),
        Err(_) => Ok(Liveness::Stuck("connect timed out")),
    }
}

/// A listening socket at `path` whose file has `mode`: bound, given its mode, and only then
/// listening, so nobody connects while the file has the umask's mode. The file is removed when
/// any step fails after it was created.
fn listen_unix(path: &Path, mode: UdsMode) -> io::Result<UnixListener> {
    let socket = Socket::new(Domain::UNIX, Type::STREAM, None)?;
    socket.bind(&SockAddr::unix(path)?)?;
    let listening = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode.bits()))
        .and_then(|()| socket.listen(UNIX_BACKLOG))
        .and_then(|()| socket.set_nonblocking(true))
        .and_then(|()| UnixListener::from_std(socket.into()));
    if listening.is_err() {
        let _ = std::fs::remove_file(path);
    }
    listening
}

impl Incoming {
    /// Detaches the connection from this runtime for a lane to take over; TCP connections get
    /// Nagle's algorithm off (answers are small frames that must leave at once, not wait for the
    /// client's delayed ACK).
    pub fn into_std(self) -> io::Result<AcceptedStream> {
        match self {
            Incoming::Tcp(stream) => {
                let _ = stream.set_nodelay(true);
                stream.into_std().map(AcceptedStream::Tcp)
            }
            Incoming::Unix(stream) => stream.into_std().map(AcceptedStream::Unix),
        }
    }
}

impl Drop for UnixSocket {
    fn drop(&mut self) {
        let ours = std::fs::symlink_metadata(&self.path)
            .is_ok_and(|meta| (meta.dev(), meta.ino()) == self.file);
        if ours {
            if let Err(error) = std::fs::remove_file(&self.path) {
                tracing::warn!(path = %self.path.display(), %error, "cannot remove the gRPC unix socket");
            }
        }
    }
}
