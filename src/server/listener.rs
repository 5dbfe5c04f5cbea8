//! Where the gRPC port listens: a TCP address, or a unix domain socket (`--grpc-uds`, as
//! envoyproxy/ratelimit's GRPC_UDS) for a client on the same host (a sidecar Envoy).
//!
//! A unix socket's file outlives a process that was killed, and binding fails while it exists,
//! so a leftover socket nobody serves on is removed before binding; a path that is not a socket,
//! or a socket another process still serves on, is refused. The file is removed again when the
//! listener closes, unless another process has replaced it meanwhile.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};

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
    /// Binds a unix socket at `path`, first removing a leftover socket file there that no
    /// process serves on. Must be called within a tokio runtime.
    pub fn bind_unix(path: &Path) -> io::Result<GrpcListener> {
        match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.file_type().is_socket() => {
                if std::os::unix::net::UnixStream::connect(path).is_ok() {
                    return Err(io::Error::new(
                        io::ErrorKind::AddrInUse,
                        "another process serves on this socket",
                    ));
                }
                std::fs::remove_file(path)?;
            }
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    "exists and is not a socket (not removed)",
                ))
            }
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => return Err(error),
        }
        let listener = UnixListener::bind(path)?;
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
