//! Where the server listens and what its gRPC port speaks: addresses, the unix socket, TLS,
//! connection age, the extra metrics and debug ports, the serving threads.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use tokio::net::TcpListener;

use super::parse;
use crate::server::connection_age::ConnectionAge;
use crate::server::tls::{ClientAuth, TlsSettings};
use crate::server::uds_mode::UdsMode;
use crate::server::{self, GrpcListener, GrpcOptions, Listeners};
use crate::service::statsd_exporter::MapperSource;

/// The listening addresses and the threads that serve them.
#[derive(clap::Args)]
pub struct ListenerArgs {
    #[arg(long, value_name = "HOST:PORT", value_parser = parse::listen_addr)]
    grpc_addr: SocketAddr,
    #[arg(long, value_name = "HOST:PORT", value_parser = parse::listen_addr)]
    http_addr: SocketAddr,
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    threads: Option<u16>,
    #[command(flatten)]
    pub ports: ExtraPortArgs,
}

impl ListenerArgs {
    /// Serving threads (lanes).
    pub fn lanes(&self) -> usize {
        self.threads.map_or_else(server::default_lanes, usize::from)
    }

    /// Binds every listener; an error names the address or socket path that failed.
    pub async fn bind(&self, transport: &GrpcTransportArgs) -> std::io::Result<Listeners> {
        let grpc: GrpcListener = match &transport.grpc_uds {
            Some(path) => GrpcListener::bind_unix(path, transport.grpc_uds_mode)
                .await
                .map_err(|error| {
                    std::io::Error::new(
                        error.kind(),
                        format!("--grpc-uds {}: {error}", path.display()),
                    )
                })?,
            None => bind(Port::Grpc, self.grpc_addr).await?.into(),
        };
        Ok(Listeners {
            grpc,
            http: bind(Port::Http, self.http_addr).await?,
            rls: match self.ports.rls_addr {
                Some(addr) => Some(bind(Port::Rls, addr).await?),
                None => None,
            },
            metrics: match self.ports.metrics_addr {
                Some(addr) => Some(bind(Port::Metrics, addr).await?),
                None => None,
            },
            debug: match self.ports.debug_addr {
                Some(addr) => Some(bind(Port::Debug, addr).await?),
                None => None,
            },
            envoyproxy_metrics: match self.ports.envoyproxy.envoyproxy_metrics_addr {
                Some(addr) => Some(bind(Port::EnvoyproxyMetrics, addr).await?),
                None => None,
            },
        })
    }
}

/// A TCP port of the server, named by the settings that choose its address.
#[derive(Clone, Copy)]
enum Port {
    Grpc,
    Rls,
    Http,
    Metrics,
    Debug,
    EnvoyproxyMetrics,
}

impl Port {
    /// The flag, its variable and envoyproxy/ratelimit's variables (drop-in mode) of the port.
    fn settings(self) -> (&'static str, &'static str, Option<&'static str>) {
        match self {
            Port::Grpc => (
                "--grpc-addr",
                "RATELIMITD_GRPC_ADDR",
                Some("GRPC_HOST/GRPC_PORT"),
            ),
            Port::Rls => ("--rls-addr", "RATELIMITD_RLS_ADDR", None),
            Port::Http => ("--http-addr", "RATELIMITD_HTTP_ADDR", Some("HOST/PORT")),
            Port::Metrics => ("--metrics-addr", "RATELIMITD_METRICS_ADDR", None),
            Port::Debug => (
                "--debug-addr",
                "RATELIMITD_DEBUG_ADDR",
                Some("DEBUG_HOST/DEBUG_PORT"),
            ),
            Port::EnvoyproxyMetrics => (
                "--envoyproxy-metrics-addr",
                "RATELIMITD_ENVOYPROXY_METRICS_ADDR",
                Some("PROMETHEUS_ADDR"),
            ),
        }
    }
}

/// Binds `port` at `addr`; an error names the setting that chose the address, so a busy port
/// says which flag or variable moves it.
async fn bind(port: Port, addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await.map_err(|error| {
        let (flag, variable, upstream) = port.settings();
        let advice = match error.kind() {
            std::io::ErrorKind::AddrInUse => {
                format!("; another process listens there: stop it, or choose another address with {flag}")
            }
            std::io::ErrorKind::AddrNotAvailable => {
                format!("; no interface of this host has that address: give one it has (0.0.0.0 for all) with {flag}")
            }
            _ => String::new(),
        };
        let upstream = upstream
            .map(|names| format!("; envoyproxy/ratelimit's {names}"))
            .unwrap_or_default();
        std::io::Error::new(
            error.kind(),
            format!("cannot listen on {addr} ({flag}, {variable}{upstream}): {error}{advice}"),
        )
    })
}

/// The ports besides gRPC and HTTP, where envoyproxy/ratelimit has them.
#[derive(clap::Args)]
pub struct ExtraPortArgs {
    #[arg(long, value_name = "HOST:PORT", value_parser = parse::listen_addr)]
    rls_addr: Option<SocketAddr>,
    #[arg(long, value_name = "HOST:PORT", value_parser = parse::listen_addr)]
    metrics_addr: Option<SocketAddr>,
    #[arg(long, value_parser = parse::http_path)]
    pub metrics_path: String,
    #[arg(long, value_name = "HOST:PORT", value_parser = parse::listen_addr)]
    debug_addr: Option<SocketAddr>,
    #[command(flatten)]
    pub envoyproxy: EnvoyproxyMetricsArgs,
}

/// envoyproxy/ratelimit's Prometheus port (its USE_PROMETHEUS): its metric names and labels.
#[derive(clap::Args)]
pub struct EnvoyproxyMetricsArgs {
    #[arg(long, value_name = "HOST:PORT", value_parser = parse::listen_addr)]
    pub envoyproxy_metrics_addr: Option<SocketAddr>,
    #[arg(long, value_parser = parse::http_path, requires = "envoyproxy_metrics_addr")]
    pub envoyproxy_metrics_path: String,
    #[arg(long, value_name = "PATH", requires = "envoyproxy_metrics_addr")]
    pub envoyproxy_metrics_mapper: Option<PathBuf>,
    #[arg(
        long,
        requires = "envoyproxy_metrics_addr",
        conflicts_with = "envoyproxy_metrics_mapper"
    )]
    pub envoyproxy_metrics_response_time_ms: bool,
}

/// What the gRPC port speaks and how long its connections live.
#[derive(clap::Args)]
pub struct GrpcTransportArgs {
    #[arg(long, value_name = "PATH")]
    grpc_tls_cert: Option<PathBuf>,
    #[arg(long, value_name = "PATH")]
    grpc_tls_key: Option<PathBuf>,
    #[arg(long, value_name = "PATH")]
    grpc_tls_client_ca: Option<PathBuf>,
    #[arg(long, value_name = "NAME")]
    grpc_tls_client_san: Option<String>,
    #[arg(long, value_name = "PATH")]
    grpc_uds: Option<PathBuf>,
    #[arg(long, value_name = "MODE", value_parser = UdsMode::parse)]
    grpc_uds_mode: UdsMode,
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    grpc_max_connection_age: Option<Duration>,
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    grpc_max_connection_age_grace: Option<Duration>,
}

impl EnvoyproxyMetricsArgs {
    /// The mapping the flags name, and the path; `None` without --envoyproxy-metrics-addr.
    pub fn source(&self) -> Option<(MapperSource, &str)> {
        self.envoyproxy_metrics_addr?;
        let source = match &self.envoyproxy_metrics_mapper {
            Some(path) => MapperSource::File(path.clone()),
            None => MapperSource::Builtin {
                response_time_ms: self.envoyproxy_metrics_response_time_ms,
            },
        };
        Some((source, &self.envoyproxy_metrics_path))
    }
}

impl GrpcTransportArgs {
    /// The options these flags make, refusing combinations that cannot work (naming the flags).
    /// A duration of `0s` means the same as leaving the flag out.
    pub fn options(&self) -> Result<GrpcOptions, String> {
        let client_auth = match (&self.grpc_tls_client_ca, &self.grpc_tls_client_san) {
            (_, Some(san)) if san.trim().is_empty() => {
                return Err("--grpc-tls-client-san is empty".into())
            }
            (None, Some(_)) => {
                return Err("--grpc-tls-client-san needs --grpc-tls-client-ca: the name is checked on client certificates the CA signed".into())
            }
            (Some(ca), san) => Some(ClientAuth {
                ca: ca.clone(),
                san: san.clone(),
            }),
            (None, None) => None,
        };
        let tls = match (&self.grpc_tls_cert, &self.grpc_tls_key) {
            (Some(cert), Some(key)) => Some(TlsSettings {
                cert: cert.clone(),
                key: key.clone(),
                client_auth,
            }),
            (None, None) if client_auth.is_some() => {
                return Err("--grpc-tls-client-ca needs --grpc-tls-cert and --grpc-tls-key: client certificates are checked in the TLS handshake".into())
            }
            (None, None) => None,
            (Some(_), None) => return Err("--grpc-tls-cert needs --grpc-tls-key (the certificate's private key)".into()),
            (None, Some(_)) => return Err("--grpc-tls-key needs --grpc-tls-cert (the key's certificate)".into()),
        };
        let nonzero = |d: Option<Duration>| d.filter(|d| !d.is_zero());
        let grace = nonzero(self.grpc_max_connection_age_grace);
        let connection_age = match nonzero(self.grpc_max_connection_age) {
            Some(max_age) => Some(ConnectionAge { max_age, grace }),
            None if grace.is_some() => {
                return Err(
                    "--grpc-max-connection-age-grace needs --grpc-max-connection-age".into(),
                )
            }
            None => None,
        };
        Ok(GrpcOptions {
            tls,
            connection_age,
        })
    }
}
