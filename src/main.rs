//! `ratelimitd`: command line only. Parses flags, sets up logging, calls into the library.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use ratelimitd::limiter::{Modes, RequestLimits};
use ratelimitd::server::connection_age::ConnectionAge;
use ratelimitd::server::limits::{self, Limits};
use ratelimitd::server::open_files;
use ratelimitd::server::tls::{ClientAuth, TlsSettings};
use ratelimitd::server::{GrpcListener, GrpcOptions};
use ratelimitd::service::headers::LimitHeaderNames;
use ratelimitd::service::metrics::DEFAULT_NEAR_LIMIT_RATIO;
use ratelimitd::service::probe_transport::{ProbeAddress, ProbeTarget, ProbeTls};
use ratelimitd::service::rls::StoreErrorPolicy;
use ratelimitd::service::statsd::{ExtraTags, StatsdAddr, StatsdSettings};
use ratelimitd::service::ResponseHeaders;
use ratelimitd::store::redis::{HostPort, KeyFormat, KeyLayout, ServerAuth, Topology};
use ratelimitd::store::{DenyCacheSettings, RedisSettings};
use ratelimitd::{config, envoyproxy_env, otel, server};
use tokio::net::TcpListener;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

#[derive(Parser)]
#[command(
    name = "ratelimitd",
    version,
    about = "gRPC rate-limit decision service (Envoy RLS v3)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve RLS v3, gRPC health and reflection, and the HTTP endpoints.
    Serve(Box<ServeArgs>),
    /// Validate configuration: print every error with file:line, exit 1 if there is any.
    Check(CheckArgs),
    /// Ask a running ratelimitd's gRPC health service; exit 0 when SERVING (for container probes).
    Health(HealthArgs),
}

#[derive(clap::Args)]
struct HealthArgs {
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

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn parse_ratio(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(ratio) if ratio > 0.0 && ratio <= 1.0 => Ok(ratio),
        _ => Err(format!("`{text}` is not a ratio in (0, 1]")),
    }
}

/// How a configuration directory is read.
#[derive(Clone, Copy, ValueEnum)]
enum ConfigLayout {
    /// The directory's own *.yaml / *.yml files.
    Files,
    /// envoyproxy/ratelimit's runtime directory: every file, subdirectories included.
    Runtime,
}

/// Where the configuration is and how its directories are read, for `serve` and `check`.
#[derive(clap::Args)]
struct ConfigSourceArgs {
    /// Configuration file, or directory of *.yaml / *.yml files (repeatable). Without it (and
    /// RATELIMITD_CONFIG), envoyproxy/ratelimit's RUNTIME_ROOT layout is read (see docs/migration.md).
    #[arg(
        long = "config",
        env = "RATELIMITD_CONFIG",
        required = true,
        value_delimiter = ','
    )]
    config: Vec<PathBuf>,
    /// How configuration directories are read: files (their own *.yaml / *.yml files, names
    /// starting with `.` skipped) or runtime (every file, in subdirectories too, as
    /// envoyproxy/ratelimit reads $RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/$RUNTIME_APPDIRECTORY).
    #[arg(
        long,
        env = "RATELIMITD_CONFIG_LAYOUT",
        value_enum,
        default_value = "files"
    )]
    config_layout: ConfigLayout,
    /// With --config-layout runtime: skip files and directories whose names start with `.`
    /// (envoyproxy/ratelimit's RUNTIME_IGNOREDOTFILES).
    #[arg(long, env = "RATELIMITD_CONFIG_IGNORE_DOTFILES")]
    config_ignore_dotfiles: bool,
    /// Merge configuration files that name the same domain (a top-level descriptor defined in
    /// two of them is an error); without it, a domain in two files is an error.
    #[arg(long, env = "RATELIMITD_MERGE_DOMAIN_CONFIG")]
    merge_domain_config: bool,
    #[command(flatten)]
    limits: ConfigLimitArgs,
}

impl ConfigSourceArgs {
    fn load_options(&self) -> config::LoadOptions {
        config::LoadOptions {
            merge_domains: self.merge_domain_config,
            layout: match self.config_layout {
                ConfigLayout::Files => config::DirectoryLayout::YamlFiles,
                ConfigLayout::Runtime => config::DirectoryLayout::RuntimeTree {
                    ignore_dotfiles: self.config_ignore_dotfiles,
                },
            },
        }
    }
}

#[derive(clap::Args)]
struct ServeArgs {
    #[command(flatten)]
    config: ConfigSourceArgs,
    /// Address of the gRPC port (RLS, health, reflection).
    #[arg(long, env = "RATELIMITD_GRPC_ADDR", default_value = "0.0.0.0:8081")]
    grpc_addr: SocketAddr,
    /// Address of the HTTP port (/healthcheck, /metrics, /json, /rlconfig).
    #[arg(long, env = "RATELIMITD_HTTP_ADDR", default_value = "0.0.0.0:8080")]
    http_addr: SocketAddr,
    /// Redis URL of a single server (`redis://[user:password@]host:port[/db]`, `rediss://` for
    /// TLS). Without it (or --redis-cluster, --redis-sentinel), counters live in this process only.
    #[arg(long, env = "RATELIMITD_REDIS_URL", group = "redis_topology")]
    redis_url: Option<String>,
    /// Redis Cluster seed nodes (any of its nodes; the others are discovered).
    #[arg(long, env = "RATELIMITD_REDIS_CLUSTER", value_name = "HOST:PORT[,HOST:PORT...]", group = "redis_topology", value_delimiter = ',', value_parser = HostPort::parse)]
    redis_cluster: Vec<HostPort>,
    /// Sentinels watching the Redis master named MASTER_NAME.
    #[arg(long, env = "RATELIMITD_REDIS_SENTINEL", value_name = "MASTER_NAME@HOST:PORT[,HOST:PORT...]", group = "redis_topology", value_parser = parse_sentinel)]
    redis_sentinel: Option<(String, Vec<HostPort>)>,
    /// ACL user of the cluster's or the Sentinel-managed servers (a --redis-url carries its own).
    #[arg(long, env = "RATELIMITD_REDIS_USER")]
    redis_user: Option<String>,
    /// Password of the cluster's or the Sentinel-managed servers (a --redis-url carries its own).
    #[arg(long, env = "RATELIMITD_REDIS_PASSWORD", hide_env_values = true)]
    redis_password: Option<String>,
    /// TLS to the cluster's or the Sentinel setup's servers and sentinels (a --redis-url says
    /// `rediss://`).
    #[arg(long, env = "RATELIMITD_REDIS_TLS")]
    redis_tls: bool,
    /// ACL user of the sentinels themselves.
    #[arg(long, env = "RATELIMITD_REDIS_SENTINEL_USER")]
    redis_sentinel_user: Option<String>,
    /// Password of the sentinels themselves (their own requirepass).
    #[arg(
        long,
        env = "RATELIMITD_REDIS_SENTINEL_PASSWORD",
        hide_env_values = true
    )]
    redis_sentinel_password: Option<String>,
    /// Replicas that must acknowledge each Redis call's writes (WAIT) before its requests are
    /// answered, so admitted hits survive a failover; a call they do not acknowledge within
    /// --redis-timeout is a store failure. 0: do not wait.
    #[arg(long, env = "RATELIMITD_REDIS_WAIT_REPLICAS", default_value_t = 0)]
    redis_wait_replicas: u32,
    /// Bound on every Redis call; a slower answer is a store failure (UNAVAILABLE).
    #[arg(long, env = "RATELIMITD_REDIS_TIMEOUT", default_value = "100ms", value_parser = humantime::parse_duration)]
    redis_timeout: Duration,
    /// Redis connections kept open (each one multiplexes concurrent requests).
    #[arg(long, env = "RATELIMITD_REDIS_POOL_SIZE", default_value_t = RedisSettings::DEFAULT_POOL_SIZE, value_parser = clap::value_parser!(u32).range(1..))]
    redis_pool_size: u32,
    /// PEM file of the CA certificate(s) that signed the Redis server's certificate, for
    /// `rediss://` URLs of self-signed or private-CA deployments (instead of the public roots).
    #[arg(long, env = "RATELIMITD_REDIS_TLS_CA", value_name = "PATH")]
    redis_tls_ca: Option<PathBuf>,
    /// Rate-limit headers to return in `response_headers_to_add` (Envoy adds them to the
    /// client's response): none, draft03 (X-RateLimit-*), ietf (RateLimit, RateLimit-Policy) or
    /// envoyproxy (envoyproxy/ratelimit's RateLimit-Limit, -Remaining, -Reset).
    #[arg(long, env = "RATELIMITD_RESPONSE_HEADERS", default_value = "none")]
    response_headers: ResponseHeaders,
    /// With --response-headers envoyproxy: the name of the limit header.
    #[arg(long, env = "RATELIMITD_RESPONSE_HEADER_LIMIT", default_value = LimitHeaderNames::DEFAULT_LIMIT, value_parser = parse_header_name)]
    response_header_limit: String,
    /// With --response-headers envoyproxy: the name of the remaining header.
    #[arg(long, env = "RATELIMITD_RESPONSE_HEADER_REMAINING", default_value = LimitHeaderNames::DEFAULT_REMAINING, value_parser = parse_header_name)]
    response_header_remaining: String,
    /// With --response-headers envoyproxy: the name of the reset header (seconds).
    #[arg(long, env = "RATELIMITD_RESPONSE_HEADER_RESET", default_value = LimitHeaderNames::DEFAULT_RESET, value_parser = parse_header_name)]
    response_header_reset: String,
    /// How often to check the configuration files for changes and reload them (`0s`: only on
    /// SIGHUP). A configuration with errors is rejected and the running one stays.
    #[arg(long, env = "RATELIMITD_RELOAD_INTERVAL", default_value = "1s", value_parser = humantime::parse_duration)]
    reload_interval: Duration,
    /// What to answer when the store fails or times out: unavailable (gRPC UNAVAILABLE, so
    /// Envoy's failure_mode_deny decides), allow (OK) or deny (OVER_LIMIT).
    #[arg(long, env = "RATELIMITD_ON_STORE_ERROR", default_value = "unavailable")]
    on_store_error: StoreErrorPolicy,
    /// Local deny cache in front of Redis: counters found exhausted are answered OVER_LIMIT
    /// without a Redis round trip until they can admit again (`--deny-cache=false` or
    /// `--no-deny-cache` turns it off). Unused with the in-memory store.
    #[arg(
        long,
        env = "RATELIMITD_DENY_CACHE",
        default_value_t = true,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        overrides_with = "no_deny_cache"
    )]
    deny_cache: bool,
    /// Turns the local deny cache off (same as `--deny-cache=false`).
    #[arg(long, overrides_with = "deny_cache")]
    no_deny_cache: bool,
    /// Most counters the deny cache holds.
    #[arg(long, env = "RATELIMITD_DENY_CACHE_SIZE", default_value_t = DenyCacheSettings::DEFAULT_MAX_ENTRIES as u32, value_parser = clap::value_parser!(u32).range(1..))]
    deny_cache_size: u32,
    /// Share of a limit's capacity above which admitted hits count as near the limit in the
    /// `ratelimitd_near_limit_total` metric (envoyproxy/ratelimit's NEAR_LIMIT_RATIO).
    #[arg(long, env = "RATELIMITD_NEAR_LIMIT_RATIO", default_value_t = DEFAULT_NEAR_LIMIT_RATIO, value_parser = parse_ratio)]
    near_limit_ratio: f64,
    /// Global shadow mode: every limit is decided and counted but none denies; `overall_code` is
    /// always OK while each status keeps what its limit decided.
    #[arg(long, env = "RATELIMITD_SHADOW_MODE")]
    shadow_mode: bool,
    /// Global quota mode: every limit is in quota mode (over the limit its status stays OK and
    /// the descriptor is listed in the dynamic metadata's `quotaModeViolations`).
    #[arg(long, env = "RATELIMITD_QUOTA_MODE")]
    quota_mode: bool,
    /// Fill every response's `dynamic_metadata` (domain, descriptors, quota-mode violations and
    /// the matched rules' `metadata`), as envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA.
    #[arg(long, env = "RATELIMITD_RESPONSE_DYNAMIC_METADATA")]
    response_dynamic_metadata: bool,
    /// Threads serving gRPC connections, each with its own single-threaded runtime (connections
    /// are dealt out in turn). Default: the CPUs this process may run on.
    #[arg(long, env = "RATELIMITD_THREADS", value_parser = clap::value_parser!(u16).range(1..))]
    threads: Option<u16>,
    /// Log format.
    #[arg(
        long,
        env = "RATELIMITD_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    log_format: LogFormat,
    /// Log filter (tracing-subscriber syntax, e.g. `info` or `ratelimitd=debug`).
    #[arg(long, env = "RATELIMITD_LOG_LEVEL", default_value = "info")]
    log_level: String,
    #[command(flatten)]
    request_limits: RequestLimitArgs,
    #[command(flatten)]
    limits: LimitArgs,
    #[command(flatten)]
    ports: ExtraPortArgs,
    #[command(flatten)]
    initial_config: InitialConfigArgs,
    #[command(flatten)]
    statsd: StatsdArgs,
    #[command(flatten)]
    grpc_transport: GrpcTransportArgs,
    #[command(flatten)]
    redis_keys: RedisKeyArgs,
    #[command(flatten)]
    tracing: otel::TracingArgs,
}

/// The keys the Redis store writes: a prefix, and envoyproxy/ratelimit's format for fixed
/// windows, so a fleet rolling from envoyproxy/ratelimit to ratelimitd shares its counts.
#[derive(clap::Args)]
#[command(next_help_heading = "Redis keys")]
struct RedisKeyArgs {
    /// Key format of `fixed_window` counters in Redis: ratelimitd (its own injective keys,
    /// decided all or nothing) or envoyproxy (exactly the keys, increments and expiry
    /// envoyproxy/ratelimit writes, so both share one count; needs Redis). Other algorithms
    /// always keep ratelimitd's keys.
    #[arg(long, env = "RATELIMITD_KEY_FORMAT", default_value = "ratelimitd")]
    key_format: KeyFormat,
    /// Prepended to every Redis key ratelimitd writes, in both formats (envoyproxy/ratelimit's
    /// CACHE_KEY_PREFIX); at most 128 bytes, without `{` or `}`.
    #[arg(long, env = "RATELIMITD_REDIS_KEY_PREFIX", default_value = "", value_parser = parse_key_prefix)]
    redis_key_prefix: String,
    /// envoyproxy-format keys: each write sets the TTL to the window plus a random number of
    /// seconds in [0, N) (envoyproxy/ratelimit's EXPIRATION_JITTER_MAX_SECONDS; 0: none).
    #[arg(
        long,
        env = "RATELIMITD_EXPIRATION_JITTER_MAX_SECONDS",
        default_value_t = 0
    )]
    expiration_jitter_max_seconds: u32,
    /// envoyproxy-format keys: a denied request counts its hits only at the descriptors it is
    /// over the limit of, instead of at every descriptor (envoyproxy/ratelimit's
    /// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT).
    #[arg(long, env = "RATELIMITD_STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT")]
    stop_cache_key_increment_when_overlimit: bool,
}

impl RedisKeyArgs {
    fn layout(&self) -> Result<KeyLayout, String> {
        KeyLayout::new(
            self.key_format,
            &self.redis_key_prefix,
            self.expiration_jitter_max_seconds,
            self.stop_cache_key_increment_when_overlimit,
        )
        .map_err(|error| format!("--redis-key-prefix: {error}"))
    }

    /// Settings that do nothing in this deployment are reported rather than refused: they are
    /// envoyproxy/ratelimit's own variables, often left in a shared environment.
    fn warn_unused(&self, layout: &KeyLayout, redis: bool) {
        if layout.format() != KeyFormat::Envoyproxy
            && (self.expiration_jitter_max_seconds > 0
                || self.stop_cache_key_increment_when_overlimit)
        {
            tracing::warn!(
                "--expiration-jitter-max-seconds and --stop-cache-key-increment-when-overlimit \
                 apply to --key-format envoyproxy only; ignored"
            );
        }
        if !redis && !layout.prefix().is_empty() {
            tracing::warn!("--redis-key-prefix applies to Redis keys only; ignored");
        }
    }
}

fn parse_key_prefix(text: &str) -> Result<String, String> {
    KeyLayout::check_prefix(text)
        .map(|()| text.to_owned())
        .map_err(|error| error.to_string())
}

/// What the gRPC port speaks and how long its connections live.
#[derive(clap::Args)]
#[command(next_help_heading = "gRPC transport")]
struct GrpcTransportArgs {
    /// PEM certificate chain of the gRPC port (with --grpc-tls-key): the port speaks TLS only,
    /// ALPN h2. Reloaded when the file changes: new handshakes use the new certificate.
    #[arg(long, env = "RATELIMITD_GRPC_TLS_CERT", value_name = "PATH")]
    grpc_tls_cert: Option<PathBuf>,
    /// PEM private key of --grpc-tls-cert (PKCS#8, PKCS#1 or SEC1, unencrypted).
    #[arg(long, env = "RATELIMITD_GRPC_TLS_KEY", value_name = "PATH")]
    grpc_tls_key: Option<PathBuf>,
    /// PEM CA certificate(s): every client must present a certificate they signed (mutual TLS),
    /// or its handshake is refused. Reloaded like the certificate.
    #[arg(long, env = "RATELIMITD_GRPC_TLS_CLIENT_CA", value_name = "PATH")]
    grpc_tls_client_ca: Option<PathBuf>,
    /// A Subject Alternative Name client certificates must also carry: a DNS name, an IP
    /// address or a URI (e.g. a SPIFFE ID).
    #[arg(long, env = "RATELIMITD_GRPC_TLS_CLIENT_SAN", value_name = "NAME")]
    grpc_tls_client_san: Option<String>,
    /// Serve gRPC on a unix domain socket at PATH instead of --grpc-addr. A leftover socket
    /// there is removed first (any other file is refused); the socket is removed on exit.
    #[arg(long, env = "RATELIMITD_GRPC_UDS", value_name = "PATH")]
    grpc_uds: Option<PathBuf>,
    /// Send each gRPC connection GOAWAY at this age (±10 % jitter), so clients reconnect and
    /// spread over replicas. Default: no age limit.
    #[arg(long, env = "RATELIMITD_GRPC_MAX_CONNECTION_AGE", value_name = "DURATION", value_parser = humantime::parse_duration)]
    grpc_max_connection_age: Option<Duration>,
    /// After the GOAWAY of --grpc-max-connection-age, how long calls may run before the
    /// connection is closed. Default: as long as they take.
    #[arg(long, env = "RATELIMITD_GRPC_MAX_CONNECTION_AGE_GRACE", value_name = "DURATION", value_parser = humantime::parse_duration)]
    grpc_max_connection_age_grace: Option<Duration>,
}

impl GrpcTransportArgs {
    /// The options these flags make, refusing combinations that cannot work (naming the flags).
    /// A duration of `0s` means the same as leaving the flag out.
    fn options(&self) -> Result<GrpcOptions, String> {
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

/// The statsd sink: envoyproxy/ratelimit's stats, under its names, over UDP.
#[derive(clap::Args)]
#[command(next_help_heading = "Statsd")]
struct StatsdArgs {
    /// Send envoyproxy/ratelimit's statsd stats over UDP to HOST:PORT (HOST may be a name,
    /// looked up at start and again after a failure). Without it, no statsd.
    #[arg(long, env = "RATELIMITD_STATSD_ADDR", value_name = "HOST:PORT", value_parser = StatsdAddr::parse)]
    statsd_addr: Option<StatsdAddr>,
    /// How often to send the stats (envoyproxy/ratelimit's STATS_FLUSH_INTERVAL).
    #[arg(long, env = "RATELIMITD_STATSD_FLUSH_INTERVAL", default_value = "10s", value_parser = parse_positive_duration, requires = "statsd_addr")]
    statsd_flush_interval: Duration,
    /// Tags added to every stat, as envoyproxy/ratelimit's EXTRA_TAGS (written into the stat
    /// names as `.__K=V`, as its statsd library does).
    #[arg(long, env = "RATELIMITD_STATSD_EXTRA_TAGS", value_name = "K:V[,K:V...]", value_parser = ExtraTags::parse, requires = "statsd_addr")]
    statsd_extra_tags: Option<ExtraTags>,
}

impl StatsdArgs {
    fn settings(&self) -> Option<StatsdSettings> {
        self.statsd_addr.clone().map(|addr| StatsdSettings {
            flush_interval: self.statsd_flush_interval,
            extra_tags: self.statsd_extra_tags.clone().unwrap_or_default(),
            ..StatsdSettings::new(addr)
        })
    }
}

/// The ports besides gRPC and HTTP, where envoyproxy/ratelimit has them.
#[derive(clap::Args)]
struct ExtraPortArgs {
    /// A port of its own for the Prometheus metrics (at --metrics-path), as envoyproxy/ratelimit's
    /// USE_PROMETHEUS opens one; /metrics on the HTTP port stays.
    #[arg(long, env = "RATELIMITD_METRICS_ADDR")]
    metrics_addr: Option<SocketAddr>,
    /// Path of the Prometheus metrics on the --metrics-addr port.
    #[arg(long, env = "RATELIMITD_METRICS_PATH", default_value = "/metrics", value_parser = parse_http_path)]
    metrics_path: String,
    /// A second port serving what the HTTP port serves (/rlconfig among it), where
    /// envoyproxy/ratelimit's debug port (DEBUG_HOST/DEBUG_PORT) is expected.
    #[arg(long, env = "RATELIMITD_DEBUG_ADDR")]
    debug_addr: Option<SocketAddr>,
}

/// What happens while no valid configuration has loaded.
#[derive(clap::Args)]
struct InitialConfigArgs {
    /// Start even when the configuration does not load (its errors are logged): no domain is
    /// configured until a valid one is loaded (envoyproxy/ratelimit's
    /// FORCE_START_WITHOUT_INITIAL_CONFIG).
    #[arg(long, env = "RATELIMITD_FORCE_START_WITHOUT_INITIAL_CONFIG")]
    force_start_without_initial_config: bool,
    /// Health is NOT_SERVING until a valid configuration has loaded (envoyproxy/ratelimit's
    /// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED; only differs with
    /// --force-start-without-initial-config).
    #[arg(long, env = "RATELIMITD_HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED")]
    healthy_with_at_least_one_config_loaded: bool,
}

fn parse_http_path(text: &str) -> Result<String, String> {
    if text.starts_with('/') && text.len() <= 256 && text.bytes().all(|b| b.is_ascii_graphic()) {
        Ok(text.to_owned())
    } else {
        Err(format!("`{text}` is not an HTTP path (it starts with `/`)"))
    }
}

fn parse_header_name(text: &str) -> Result<String, String> {
    LimitHeaderNames::check(text).map(|()| text.to_owned())
}

/// What one request may carry; a request beyond it is refused with INVALID_ARGUMENT.
#[derive(clap::Args)]
struct RequestLimitArgs {
    /// Most descriptors in one request (at most 1024, the checks of one Redis call).
    #[arg(long, env = "RATELIMITD_MAX_DESCRIPTORS", default_value_t = RequestLimits::DEFAULT_MAX_DESCRIPTORS as u32, value_parser = clap::value_parser!(u32).range(1..=RequestLimits::MAX_DESCRIPTORS_CEILING as i64))]
    max_descriptors: u32,
    /// Most entries in one descriptor.
    #[arg(long, env = "RATELIMITD_MAX_DESCRIPTOR_ENTRIES", default_value_t = RequestLimits::DEFAULT_MAX_ENTRIES as u32, value_parser = clap::value_parser!(u32).range(1..))]
    max_descriptor_entries: u32,
    /// Longest key, and longest value, of a descriptor entry, in bytes.
    #[arg(long, env = "RATELIMITD_MAX_ENTRY_BYTES", default_value_t = RequestLimits::DEFAULT_MAX_ENTRY_BYTES as u32, value_parser = clap::value_parser!(u32).range(1..))]
    max_entry_bytes: u32,
}

impl RequestLimitArgs {
    fn limits(&self) -> RequestLimits {
        RequestLimits {
            max_descriptors: self.max_descriptors as usize,
            max_entries: self.max_descriptor_entries as usize,
            max_entry_bytes: self.max_entry_bytes as usize,
        }
    }
}

/// Transport limits (README: "Limits and hardening").
#[derive(clap::Args)]
#[command(next_help_heading = "Limits")]
struct LimitArgs {
    /// Largest request accepted: a gRPC message (RESOURCE_EXHAUSTED above) or a /json body (413
    /// above). Sizes take B, KiB, MiB, GiB.
    #[arg(long, env = "RATELIMITD_MAX_REQUEST_SIZE", default_value = "64KiB", value_parser = parse_size)]
    max_request_size: usize,
    /// Concurrent streams per gRPC connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS).
    #[arg(long, env = "RATELIMITD_GRPC_MAX_CONCURRENT_STREAMS", default_value_t = Limits::DEFAULT_GRPC_MAX_CONCURRENT_STREAMS, value_parser = clap::value_parser!(u32).range(1..))]
    grpc_max_concurrent_streams: u32,
    /// HTTP/2 stream window: bytes a peer may send on one stream before the server reads them.
    #[arg(long, env = "RATELIMITD_GRPC_STREAM_WINDOW", default_value = "64KiB", value_parser = parse_window)]
    grpc_stream_window: u32,
    /// HTTP/2 connection window, and the most bytes of partly received messages one connection
    /// may hold (at least one message of --max-request-size).
    #[arg(long, env = "RATELIMITD_GRPC_CONNECTION_WINDOW", default_value = "256KiB", value_parser = parse_window)]
    grpc_connection_window: u32,
    /// Most bytes of partly received gRPC messages all connections together may hold.
    #[arg(long, env = "RATELIMITD_GRPC_MAX_BUFFERED_BYTES", default_value = "64MiB", value_parser = parse_size)]
    grpc_max_buffered_bytes: usize,
    /// Concurrent long-lived gRPC calls (health Watch, reflection), all connections.
    #[arg(long, env = "RATELIMITD_GRPC_MAX_STREAMING_CALLS", default_value_t = Limits::DEFAULT_GRPC_MAX_STREAMING_CALLS)]
    grpc_max_streaming_calls: usize,
    /// Concurrent long-lived gRPC calls on one connection.
    #[arg(long, env = "RATELIMITD_GRPC_MAX_STREAMING_CALLS_PER_CONNECTION", default_value_t = Limits::DEFAULT_GRPC_MAX_STREAMING_CALLS_PER_CONNECTION)]
    grpc_max_streaming_calls_per_connection: u32,
    /// Time a call has to send its request and end its request stream (DEADLINE_EXCEEDED after).
    #[arg(long, env = "RATELIMITD_GRPC_READ_TIMEOUT", default_value = "10s", value_parser = parse_positive_duration)]
    grpc_read_timeout: Duration,
    /// A gRPC connection without calls for this long is closed with GOAWAY (`0s`: never).
    #[arg(long, env = "RATELIMITD_GRPC_IDLE_TIMEOUT", default_value = "5m", value_parser = humantime::parse_duration)]
    grpc_idle_timeout: Duration,
    /// Most gRPC connections at once; lowered to fit the open-files limit. At the cap, the
    /// connection idle the longest is closed to take a new one.
    #[arg(long, env = "RATELIMITD_GRPC_MAX_CONNECTIONS", default_value_t = Limits::DEFAULT_GRPC_MAX_CONNECTIONS, value_parser = parse_count)]
    grpc_max_connections: usize,
    /// Most HTTP-port connections at once; lowered to fit the open-files limit. At the cap, the
    /// oldest is closed to take a new one.
    #[arg(long, env = "RATELIMITD_HTTP_MAX_CONNECTIONS", default_value_t = Limits::DEFAULT_HTTP_MAX_CONNECTIONS, value_parser = parse_count)]
    http_max_connections: usize,
    /// Time an HTTP client has to send a request's headers (the first and every next one).
    #[arg(long, env = "RATELIMITD_HTTP_HEADER_READ_TIMEOUT", default_value = "5s", value_parser = parse_positive_duration)]
    http_header_read_timeout: Duration,
    /// Longest an HTTP connection stays open.
    #[arg(long, env = "RATELIMITD_HTTP_CONNECTION_TIMEOUT", default_value = "60s", value_parser = parse_positive_duration)]
    http_connection_timeout: Duration,
    /// Open files kept for anything but client connections (listeners, Redis, runtime).
    #[arg(long, env = "RATELIMITD_FD_RESERVE", default_value_t = Limits::DEFAULT_FD_RESERVE)]
    fd_reserve: usize,
}

impl LimitArgs {
    fn limits(&self) -> Limits {
        Limits {
            max_request_size: self.max_request_size,
            grpc_max_concurrent_streams: self.grpc_max_concurrent_streams,
            grpc_stream_window: self.grpc_stream_window,
            grpc_connection_window: self.grpc_connection_window,
            grpc_max_buffered_bytes: self.grpc_max_buffered_bytes,
            grpc_max_streaming_calls: self.grpc_max_streaming_calls,
            grpc_max_streaming_calls_per_connection: self.grpc_max_streaming_calls_per_connection,
            grpc_read_timeout: self.grpc_read_timeout,
            grpc_idle_timeout: (!self.grpc_idle_timeout.is_zero())
                .then_some(self.grpc_idle_timeout),
            grpc_max_connections: self.grpc_max_connections,
            http_max_connections: self.http_max_connections,
            http_header_read_timeout: self.http_header_read_timeout,
            http_connection_timeout: self.http_connection_timeout,
            fd_reserve: self.fd_reserve,
        }
    }
}

/// Bounds on configuration files, for `serve` (at startup and every reload) and `check` alike.
#[derive(clap::Args)]
struct ConfigLimitArgs {
    /// Largest configuration file, in bytes (checked before the file is opened).
    #[arg(long, env = "RATELIMITD_MAX_CONFIG_FILE_BYTES", default_value_t = config::Limits::DEFAULT_MAX_FILE_BYTES, value_parser = clap::value_parser!(u64).range(1..))]
    max_config_file_bytes: u64,
    /// Most bytes of scalars the YAML aliases (`*name`) of one file may add when expanded.
    #[arg(long, env = "RATELIMITD_MAX_CONFIG_ALIAS_BYTES", default_value_t = config::Limits::DEFAULT_MAX_ALIAS_BYTES)]
    max_config_alias_bytes: u64,
}

impl ConfigLimitArgs {
    fn limits(&self) -> config::Limits {
        config::Limits {
            max_file_bytes: self.max_config_file_bytes,
            max_alias_bytes: self.max_config_alias_bytes,
        }
    }
}

fn parse_size(text: &str) -> Result<usize, String> {
    let size = limits::parse_size(text)?;
    match usize::try_from(size) {
        Ok(size) if size > 0 => Ok(size),
        _ => Err(format!("`{text}` is not a positive size")),
    }
}

/// An HTTP/2 window: 65535 bytes (the protocol's initial window) to 2^31 - 1.
fn parse_window(text: &str) -> Result<u32, String> {
    let size = limits::parse_size(text)?;
    match u32::try_from(size) {
        Ok(size) if (65_535..=0x7fff_ffff).contains(&size) => Ok(size),
        _ => Err(format!(
            "`{text}` is not an HTTP/2 window (64KiB to 2GiB - 1)"
        )),
    }
}

fn parse_count(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(count) if count > 0 => Ok(count),
        _ => Err(format!("`{text}` is not a positive count")),
    }
}

fn parse_positive_duration(text: &str) -> Result<Duration, String> {
    match humantime::parse_duration(text) {
        Ok(duration) if !duration.is_zero() => Ok(duration),
        Ok(_) => Err("must be more than 0s".into()),
        Err(error) => Err(error.to_string()),
    }
}

#[derive(clap::Args)]
struct CheckArgs {
    #[command(flatten)]
    config: ConfigSourceArgs,
}

/// How long exit waits for blocking work still running (a reload reading files) once serving
/// has stopped; such work must never keep the process alive.
const BLOCKING_WORK_GRACE: Duration = Duration::from_secs(1);

fn main() -> ExitCode {
    let mut arguments: Vec<OsString> = std::env::args_os().collect();
    // Bare, it serves: as envoyproxy/ratelimit's binary, configured by its environment alone.
    if arguments.len() == 1 {
        arguments.push("serve".into());
    }
    let upstream = match read_upstream_environment(&arguments) {
        Ok(translation) => translation,
        Err(errors) => {
            for error in errors {
                eprintln!("error: {error}");
            }
            return ExitCode::FAILURE;
        }
    };
    match Cli::parse_from(arguments).command {
        Command::Check(args) => check(&args),
        Command::Serve(args) => serve(*args, &upstream),
        Command::Health(args) => health(&args),
    }
}

/// Sets the `RATELIMITD_*` variables that envoyproxy/ratelimit's variables ask for (see
/// [`envoyproxy_env`]), before the command line is parsed, so flags and `RATELIMITD_*`
/// variables win and every value goes through the same parser. Drop-in mode: `serve` or
/// `check` without `--config` or `RATELIMITD_CONFIG`.
fn read_upstream_environment(
    arguments: &[OsString],
) -> Result<envoyproxy_env::Translation, Vec<String>> {
    let environment: BTreeMap<String, String> = std::env::vars_os()
        .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
        .collect();
    let subcommand = arguments.get(1).and_then(|a| a.to_str());
    let config_given = environment.contains_key("RATELIMITD_CONFIG")
        || arguments.iter().any(|argument| {
            argument
                .to_str()
                .is_some_and(|a| a == "--config" || a.starts_with("--config="))
        });
    let drop_in = matches!(subcommand, Some("serve" | "check")) && !config_given;
    let translation = envoyproxy_env::translate(&environment, drop_in)?;
    for assignment in &translation.assignments {
        // Still one thread: nothing reads the environment concurrently.
        std::env::set_var(assignment.variable, &assignment.value);
    }
    Ok(translation)
}

/// Logs what envoyproxy/ratelimit's variables did, once logging is set up.
fn log_upstream_environment(translation: &envoyproxy_env::Translation) {
    for assignment in &translation.assignments {
        let value = if assignment.secret {
            "***"
        } else {
            assignment.value.as_str()
        };
        tracing::info!(
            from = %assignment.from,
            "envoyproxy/ratelimit setting: {}={value}",
            assignment.variable
        );
    }
    for notice in &translation.notices {
        match notice.level {
            envoyproxy_env::Level::Info => tracing::info!("{}", notice.text),
            envoyproxy_env::Level::Warn => tracing::warn!("{}", notice.text),
        }
    }
}

fn health(args: &HealthArgs) -> ExitCode {
    let target = match args.transport.target(&args.grpc_addr) {
        Ok(target) => target,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::FAILURE;
        }
    };
    let probe = ratelimitd::service::health::probe(&target, &args.service, args.timeout);
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

fn check(args: &CheckArgs) -> ExitCode {
    let source = &args.config;
    match config::Loader::new(source.limits.limits())
        .with_options(source.load_options())
        .load(&source.config)
    {
        Ok(rules) => {
            let limits = rules.limits().len();
            println!(
                "configuration OK: {} domain(s), {limits} limit(s)",
                rules.domains.len()
            );
            ExitCode::SUCCESS
        }
        Err(errors) => {
            eprintln!("{errors}");
            ExitCode::FAILURE
        }
    }
}

/// Logs to stdout through `filter`; the request spans go to `traces` only (see [`otel`]).
fn init_logging(format: LogFormat, filter: &str, traces: Option<&otel::Pipeline>) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let output = tracing_subscriber::fmt::layer().with_ansi(std::io::stdout().is_terminal());
    let output = match format {
        LogFormat::Text => output.boxed(),
        LogFormat::Json => output.json().boxed(),
    };
    tracing_subscriber::registry()
        .with(output.with_filter(otel::without_spans(filter)))
        .with(traces.map(otel::Pipeline::layer))
        .init();
}

fn serve(args: ServeArgs, upstream: &envoyproxy_env::Translation) -> ExitCode {
    let traces = args.tracing.settings().and_then(otel::Pipeline::start);
    init_logging(
        args.log_format,
        &args.log_level,
        traces.as_ref().ok().and_then(Option::as_ref),
    );
    log_upstream_environment(upstream);
    let traces = match traces {
        Ok(traces) => traces,
        Err(error) => {
            tracing::error!("{error}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(traces) = &traces {
        tracing::info!("{}", traces.describe());
    }
    open_files::raise_to_hard_limit();
    let topology = match redis_topology(&args) {
        Ok(topology) => topology,
        Err(error) => {
            tracing::error!("{error}");
            return ExitCode::FAILURE;
        }
    };
    let grpc_options = match args.grpc_transport.options() {
        Ok(options) => options,
        Err(error) => {
            tracing::error!("{error}");
            return ExitCode::FAILURE;
        }
    };
    let redis_keys = match args.redis_keys.layout() {
        Ok(layout) if layout.format() == KeyFormat::Envoyproxy && topology.is_none() => {
            tracing::error!("{}", server::ENVOYPROXY_KEYS_NEED_REDIS);
            return ExitCode::FAILURE;
        }
        Ok(layout) => {
            args.redis_keys.warn_unused(&layout, topology.is_some());
            layout
        }
        Err(error) => {
            tracing::error!("{error}");
            return ExitCode::FAILURE;
        }
    };
    // Serving lane 0 and the housekeeping (HTTP, health probes, reload) share this thread; the
    // other lanes start their own (see `server::run`).
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            tracing::error!(%error, "cannot start the async runtime");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let grpc: GrpcListener = match &args.grpc_transport.grpc_uds {
            Some(path) => GrpcListener::bind_unix(path).map_err(|error| {
                std::io::Error::new(
                    error.kind(),
                    format!("--grpc-uds {}: {error}", path.display()),
                )
            })?,
            None => TcpListener::bind(args.grpc_addr).await?.into(),
        };
        let listeners = server::Listeners {
            grpc,
            http: TcpListener::bind(args.http_addr).await?,
            metrics: match args.ports.metrics_addr {
                Some(addr) => Some(TcpListener::bind(addr).await?),
                None => None,
            },
            debug: match args.ports.debug_addr {
                Some(addr) => Some(TcpListener::bind(addr).await?),
                None => None,
            },
        };
        let response_headers = match args.response_headers {
            ResponseHeaders::Envoyproxy(_) => ResponseHeaders::Envoyproxy(LimitHeaderNames {
                limit: args.response_header_limit.as_str().into(),
                remaining: args.response_header_remaining.as_str().into(),
                reset: args.response_header_reset.as_str().into(),
            }),
            other => other,
        };
        let settings = server::Settings {
            config_paths: args.config.config.clone(),
            redis: topology.map(|topology| RedisSettings {
                timeout: args.redis_timeout,
                pool_size: args.redis_pool_size,
                tls_ca: args.redis_tls_ca.clone(),
                wait_replicas: args.redis_wait_replicas,
                ..RedisSettings::for_topology(topology)
            }),
            redis_keys,
            response_headers,
            reload_interval: (!args.reload_interval.is_zero()).then_some(args.reload_interval),
            on_store_error: args.on_store_error,
            deny_cache: (args.deny_cache && !args.no_deny_cache).then_some(DenyCacheSettings {
                max_entries: args.deny_cache_size as usize,
                ..DenyCacheSettings::default()
            }),
            near_limit_ratio: args.near_limit_ratio,
            lanes: args.threads.map_or_else(server::default_lanes, usize::from),
            limits: args.limits.limits(),
            modes: Modes {
                shadow_mode: args.shadow_mode,
                quota_mode: args.quota_mode,
            },
            response_dynamic_metadata: args.response_dynamic_metadata,
            load: args.config.load_options(),
            request_limits: args.request_limits.limits(),
            config_limits: args.config.limits.limits(),
            initial_config: server::InitialConfig {
                force_start: args.initial_config.force_start_without_initial_config,
                healthy_only_when_loaded: args
                    .initial_config
                    .healthy_with_at_least_one_config_loaded,
            },
            metrics_path: args.ports.metrics_path.clone(),
            statsd: args.statsd.settings(),
            grpc: grpc_options,
        };
        server::run(settings, listeners, shutdown_signal()).await
    });
    runtime.shutdown_timeout(BLOCKING_WORK_GRACE);
    if let Some(traces) = traces {
        traces.shutdown();
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error}");
            ExitCode::FAILURE
        }
    }
}

/// The Redis deployment the flags name, if any. The credentials and TLS flags belong to clusters
/// and Sentinel setups: a single server's URL carries its own, and a flag that would be ignored
/// is refused instead.
fn redis_topology(args: &ServeArgs) -> Result<Option<Topology>, String> {
    let auth = ServerAuth {
        user: args.redis_user.clone(),
        password: args.redis_password.clone(),
        tls: args.redis_tls,
    };
    let sentinel_auth = ServerAuth {
        user: args.redis_sentinel_user.clone(),
        password: args.redis_sentinel_password.clone(),
        tls: args.redis_tls,
    };
    let refuse = |flags: &str, why: &str| Err(format!("{flags} {why}"));
    if args.redis_sentinel.is_none()
        && (sentinel_auth.user.is_some() || sentinel_auth.password.is_some())
    {
        return refuse(
            "--redis-sentinel-user/--redis-sentinel-password",
            "need --redis-sentinel",
        );
    }
    if let Some(url) = &args.redis_url {
        if auth != ServerAuth::default() {
            return refuse(
                "--redis-user/--redis-password/--redis-tls",
                "apply to --redis-cluster and --redis-sentinel: put a single server's credentials \
                 in its url (redis://user:password@host:port) and use rediss:// for TLS",
            );
        }
        return Ok(Some(Topology::Single { url: url.clone() }));
    }
    if !args.redis_cluster.is_empty() {
        return Ok(Some(Topology::Cluster {
            seeds: args.redis_cluster.clone(),
            auth,
        }));
    }
    if let Some((master_name, sentinels)) = &args.redis_sentinel {
        return Ok(Some(Topology::Sentinel {
            master_name: master_name.clone(),
            sentinels: sentinels.clone(),
            auth,
            sentinel_auth,
        }));
    }
    if auth != ServerAuth::default() || args.redis_wait_replicas > 0 {
        return refuse(
            "--redis-user/--redis-password/--redis-tls/--redis-wait-replicas",
            "need a Redis (--redis-url, --redis-cluster or --redis-sentinel)",
        );
    }
    Ok(None)
}

fn parse_sentinel(text: &str) -> Result<(String, Vec<HostPort>), String> {
    Topology::parse_sentinel(text)
}

/// Completes on SIGTERM or SIGINT.
async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate = match tokio::signal::unix::signal(
            tokio::signal::unix::SignalKind::terminate(),
        ) {
            Ok(signal) => signal,
            Err(error) => {
                tracing::error!(%error, "cannot listen for SIGTERM; only SIGINT stops the server");
                let _ = interrupt.await;
                return;
            }
        };
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
}
