//! `ratelimitd health`: the gRPC health probe for container checks.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::service::probe_transport::{ProbeAddress, ProbeTarget, ProbeTls};

/// What `health` asks, and where.
#[derive(clap::Args)]
pub struct HealthArgs {
    /// gRPC address of the server to ask.
    #[arg(long, env = "RATELIMITD_GRPC_ADDR", default_value = "127.0.0.1:8081")]
    grpc_addr: String,
    /// Health service name to ask about (`""` is the whole server).
    #[arg(long, default_value = "")]
    service: String,
    /// Give up after this long.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    timeout: Duration,
    #[command(flatten)]
    transport: HealthTransportArgs,
}

/// How `health` reaches a server started with --grpc-uds or --grpc-tls-*.
#[derive(clap::Args)]
struct HealthTransportArgs {
    /// Ask over the unix domain socket at PATH (a server started with --grpc-uds) instead of
    /// --grpc-addr.
    #[arg(long, env = "RATELIMITD_GRPC_UDS", value_name = "PATH")]
    grpc_uds: Option<PathBuf>,
    /// Speak TLS, checking the server's certificate against --tls-ca (the public roots without
    /// it). Implied by --tls-ca and --tls-cert.
    #[arg(long, env = "RATELIMITD_HEALTH_TLS")]
    tls: bool,
    /// PEM CA certificate(s) the server's certificate must chain to.
    #[arg(long, env = "RATELIMITD_HEALTH_TLS_CA", value_name = "PATH")]
    tls_ca: Option<PathBuf>,
    /// PEM client certificate chain, for a server started with --grpc-tls-client-ca (with
    /// --tls-key).
    #[arg(long, env = "RATELIMITD_HEALTH_TLS_CERT", value_name = "PATH")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "RATELIMITD_HEALTH_TLS_KEY", value_name = "PATH")]
    tls_key: Option<PathBuf>,
    /// Name the server's certificate must carry, sent as SNI (default: the host of --grpc-addr,
    /// `localhost` with --grpc-uds).
    #[arg(long, env = "RATELIMITD_HEALTH_TLS_SERVER_NAME", value_name = "NAME")]
    tls_server_name: Option<String>,
}

impl HealthTransportArgs {
    /// The server to probe at `grpc_addr` (unless --grpc-uds), refusing TLS flags that do not go
    /// together.
    fn target(&self, grpc_addr: &str) -> Result<ProbeTarget, String> {
        let identity = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some((cert.clone(), key.clone())),
            (None, None) => None,
            _ => {
                return Err(
                    "--tls-cert and --tls-key go together (a client certificate and its key)"
                        .into(),
                )
            }
        };
        let tls = self.tls || self.tls_ca.is_some() || identity.is_some();
        if !tls && self.tls_server_name.is_some() {
            return Err("--tls-server-name needs --tls or --tls-ca".into());
        }
        Ok(ProbeTarget {
            address: match &self.grpc_uds {
                Some(path) => ProbeAddress::Unix(path.clone()),
                None => ProbeAddress::Tcp(grpc_addr.to_owned()),
            },
            tls: tls.then(|| ProbeTls {
                ca: self.tls_ca.clone(),
                identity,
                server_name: self.tls_server_name.clone(),
            }),
        })
    }
}

/// Asks the server; SERVING exits 0, NOT_SERVING or no answer 1.
pub fn health(args: &HealthArgs) -> ExitCode {
    let target = match args.transport.target(&args.grpc_addr) {
        Ok(target) => target,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::FAILURE;
        }
    };
    let probe = crate::service::health::probe(&target, &args.service, args.timeout);
    let result = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime.block_on(probe),
        Err(error) => Err(format!("cannot start the async runtime: {error}")),
    };
    match result {
        Ok(true) => {
            println!("SERVING");
            ExitCode::SUCCESS
        }
        Ok(false) => {
            println!("NOT_SERVING");
            ExitCode::FAILURE
        }
        Err(error) => {
            eprintln!("{error}");
            ExitCode::FAILURE
        }
    }
}
