//! The store: Redis (one server, a Cluster or Sentinel) or, without one, this process's memory;
//! the keys written there, the deny cache in front, and what a store failure answers.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::failure_health::FailureHealthArgs;
use crate::envoyproxy_env::Translation;
use crate::server;
use crate::service::store_error_policy::StoreErrorPolicy;
use crate::store::redis::settings::tls::{CA_FLAG, CLIENT_CERT_FLAG, CLIENT_KEY_FLAG};
use crate::store::redis::{
    ClientIdentityFiles, HostPort, KeyFormat, KeyLayout, RedisTlsSettings, ServerAuth,
    StartupRetry, TlsFile, Topology,
};
use crate::store::{DenyCacheSettings, FailureHealthSettings, RedisSettings};

/// Which Redis, how it is reached, and how the limiter uses it.
#[derive(clap::Args)]
pub struct StoreArgs {
    #[arg(long, group = "redis_topology", value_parser = redis_url)]
    redis_url: Option<String>,
    #[arg(long, value_name = "HOST:PORT[,HOST:PORT...]", group = "redis_topology", value_delimiter = ',', value_parser = HostPort::parse)]
    redis_cluster: Vec<HostPort>,
    #[arg(long, value_name = "MASTER_NAME@HOST:PORT[,HOST:PORT...]", group = "redis_topology", value_parser = Topology::parse_sentinel)]
    redis_sentinel: Option<(String, Vec<HostPort>)>,
    #[arg(long)]
    redis_user: Option<String>,
    #[arg(long, hide_env_values = true)]
    redis_password: Option<String>,
    #[arg(long)]
    redis_tls: bool,
    #[arg(long)]
    redis_sentinel_user: Option<String>,
    #[arg(long, hide_env_values = true)]
    redis_sentinel_password: Option<String>,
    #[arg(long)]
    redis_wait_replicas: u32,
    #[arg(long, value_parser = humantime::parse_duration)]
    redis_timeout: Duration,
    #[arg(long, value_name = "DURATION|forever", value_parser = startup_wait)]
    redis_startup_wait: StartupWait,
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    redis_startup_initial_interval: Duration,
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    redis_startup_max_interval: Duration,
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    redis_pool_size: u32,
    #[arg(long, value_name = "PATH")]
    redis_tls_ca: Option<PathBuf>,
    #[arg(long)]
    redis_tls_system_roots: bool,
    #[arg(long, value_name = "PATH")]
    redis_tls_client_cert: Option<PathBuf>,
    #[arg(long, value_name = "PATH")]
    redis_tls_client_key: Option<PathBuf>,
    #[arg(long)]
    on_store_error: StoreErrorPolicy,
    #[arg(long, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", overrides_with = "no_deny_cache")]
    deny_cache: bool,
    /// Turns the local deny cache off (same as `--deny-cache=false`).
    #[arg(long, overrides_with = "deny_cache")]
    no_deny_cache: bool,
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    deny_cache_size: u32,
    #[command(flatten)]
    keys: RedisKeyArgs,
    #[command(flatten)]
    failure_health: FailureHealthArgs,
}

impl StoreArgs {
    /// The Redis settings, or `None` for the in-memory store, with the key layout; refuses flags
    /// that do not fit together or would be ignored. `upstream` names the envoyproxy/ratelimit
    /// variables files were read from, for errors about them.
    pub fn redis(
        &self,
        upstream: &Translation,
    ) -> Result<(Option<RedisSettings>, KeyLayout), String> {
        let topology = self.topology()?;
        let tls = self.tls(upstream)?;
        if topology.is_none() && tls != RedisTlsSettings::default() {
            return Err(
                "--redis-tls-ca/--redis-tls-client-cert/--redis-tls-client-key need a Redis \
                 (--redis-url, --redis-cluster or --redis-sentinel)"
                    .into(),
            );
        }
        let layout = self.keys.layout()?;
        if layout.format() == KeyFormat::Envoyproxy && topology.is_none() {
            return Err(server::ENVOYPROXY_KEYS_NEED_REDIS.into());
        }
        self.keys.warn_unused(&layout, topology.is_some());
        let redis = topology.map(|topology| RedisSettings {
            timeout: self.redis_timeout,
            pool_size: self.redis_pool_size,
            tls,
            wait_replicas: self.redis_wait_replicas,
            startup: StartupRetry {
                initial_interval: self.redis_startup_initial_interval,
                max_interval: self.redis_startup_max_interval,
                max_elapsed: self.redis_startup_wait.0,
            },
            ..RedisSettings::for_topology(topology)
        });
        Ok((redis, layout))
    }

    /// What TLS to Redis trusts and presents. A client certificate needs its key (and the key
    /// its certificate), and --redis-tls-system-roots adds to --redis-tls-ca only.
    fn tls(&self, upstream: &Translation) -> Result<RedisTlsSettings, String> {
        let file = |path: &PathBuf, flag: &str, variable: &str| {
            let given_as = upstream
                .source_of(variable)
                .filter(|assignment| Path::new(&assignment.value) == path)
                .map_or_else(|| flag.to_owned(), |assignment| assignment.from.clone());
            TlsFile::new(path.clone(), given_as)
        };
        let client_identity = match (&self.redis_tls_client_cert, &self.redis_tls_client_key) {
            (Some(cert), Some(key)) => Some(ClientIdentityFiles {
                cert: file(cert, CLIENT_CERT_FLAG, "RATELIMITD_REDIS_TLS_CLIENT_CERT"),
                key: file(key, CLIENT_KEY_FLAG, "RATELIMITD_REDIS_TLS_CLIENT_KEY"),
            }),
            (None, None) => None,
            (cert, _) => {
                let (given, missing, variable, why) = if cert.is_some() {
                    (
                        CLIENT_CERT_FLAG,
                        CLIENT_KEY_FLAG,
                        "RATELIMITD_REDIS_TLS_CLIENT_KEY",
                        "a client certificate is presented with its private key",
                    )
                } else {
                    (
                        CLIENT_KEY_FLAG,
                        CLIENT_CERT_FLAG,
                        "RATELIMITD_REDIS_TLS_CLIENT_CERT",
                        "a private key is presented with its client certificate",
                    )
                };
                return Err(format!("{given} needs {missing} ({variable}): {why}"));
            }
        };
        if self.redis_tls_system_roots && self.redis_tls_ca.is_none() {
            return Err(format!(
                "--redis-tls-system-roots adds the system's certificate store to {CA_FLAG}; \
                 without {CA_FLAG} the system's store is trusted already"
            ));
        }
        Ok(RedisTlsSettings {
            ca: self
                .redis_tls_ca
                .as_ref()
                .map(|ca| file(ca, CA_FLAG, "RATELIMITD_REDIS_TLS_CA")),
            ca_with_system_roots: self.redis_tls_system_roots,
            client_identity,
        })
    }

    /// What a store failure answers.
    pub fn on_store_error(&self) -> StoreErrorPolicy {
        self.on_store_error
    }

    /// Whether health follows the store at all.
    pub fn health_follows_store(&self) -> bool {
        self.failure_health.health_follows_store
    }

    /// When failed store calls turn health NOT_SERVING.
    pub fn failure_health(&self) -> FailureHealthSettings {
        self.failure_health.settings()
    }

    /// The deny cache, unless turned off.
    pub fn deny_cache(&self) -> Option<DenyCacheSettings> {
        (self.deny_cache && !self.no_deny_cache).then_some(DenyCacheSettings {
            max_entries: self.deny_cache_size as usize,
            ..DenyCacheSettings::default()
        })
    }

    /// The Redis deployment the flags name, if any. The credentials and TLS flags belong to clusters
    /// and Sentinel setups: a single server's URL carries its own, and a flag that would be ignored
    /// is refused instead.
    fn topology(&self) -> Result<Option<Topology>, String> {
        let auth = ServerAuth {
            user: self.redis_user.clone(),
            password: self.redis_password.clone(),
            tls: self.redis_tls,
        };
        let sentinel_auth = ServerAuth {
            user: self.redis_sentinel_user.clone(),
            password: self.redis_sentinel_password.clone(),
            tls: self.redis_tls,
        };
        let refuse = |flags: &str, why: &str| Err(format!("{flags} {why}"));
        if self.redis_sentinel.is_none()
            && (sentinel_auth.user.is_some() || sentinel_auth.password.is_some())
        {
            return refuse(
                "--redis-sentinel-user/--redis-sentinel-password",
                "need --redis-sentinel",
            );
        }
        if let Some(url) = &self.redis_url {
            if auth != ServerAuth::default() {
                return refuse(
                    "--redis-user/--redis-password/--redis-tls",
                    "apply to --redis-cluster and --redis-sentinel: put a single server's credentials \
                     in its url (redis://user:password@host:port) and use rediss:// for TLS",
                );
            }
            return Ok(Some(Topology::Single { url: url.clone() }));
        }
        if !self.redis_cluster.is_empty() {
            return Ok(Some(Topology::Cluster {
                seeds: self.redis_cluster.clone(),
                auth,
            }));
        }
        if let Some((master_name, sentinels)) = &self.redis_sentinel {
            return Ok(Some(Topology::Sentinel {
                master_name: master_name.clone(),
                sentinels: sentinels.clone(),
                auth,
                sentinel_auth,
            }));
        }
        if auth != ServerAuth::default() || self.redis_wait_replicas > 0 {
            return refuse(
                "--redis-user/--redis-password/--redis-tls/--redis-wait-replicas",
                "need a Redis (--redis-url, --redis-cluster or --redis-sentinel)",
            );
        }
        Ok(None)
    }
}

/// The keys the Redis store writes: a prefix, and envoyproxy/ratelimit's format for fixed
/// windows, so a fleet rolling from envoyproxy/ratelimit to ratelimitd shares its counts.
#[derive(clap::Args)]
struct RedisKeyArgs {
    #[arg(long)]
    key_format: KeyFormat,
    #[arg(long, value_name = "RFC3339", value_parser = rfc3339_seconds)]
    key_format_until: Option<u64>,
    #[arg(long, value_parser = key_prefix)]
    redis_key_prefix: String,
    #[arg(long)]
    expiration_jitter_max_seconds: u32,
    #[arg(long)]
    stop_cache_key_increment_when_overlimit: bool,
}

impl RedisKeyArgs {
    fn layout(&self) -> Result<KeyLayout, String> {
        let layout = KeyLayout::new(
            self.key_format,
            &self.redis_key_prefix,
            self.expiration_jitter_max_seconds,
            self.stop_cache_key_increment_when_overlimit,
        )
        .map_err(|error| format!("--redis-key-prefix: {error}"))?;
        match self.key_format_until {
            None => Ok(layout),
            Some(_) if self.key_format != KeyFormat::Envoyproxy => Err(
                "--key-format-until moves envoyproxy-format keys to ratelimitd's: it needs \
                 --key-format envoyproxy"
                    .into(),
            ),
            Some(until) => Ok(layout.until(until)),
        }
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

/// `--redis-startup-wait`: how long, `None` for ever.
#[derive(Debug, Clone, Copy)]
struct StartupWait(Option<Duration>);

/// A single server's URL, which names its scheme: envoyproxy/ratelimit's REDIS_URL form,
/// `host:port`, is the slip this catches, with the URL it means. The rest is checked when the
/// client is built (and never echoed: a URL may hold a password).
fn redis_url(text: &str) -> Result<String, String> {
    if text.contains("://") {
        return Ok(text.to_owned());
    }
    let shown = crate::store::redis::redacted_url(&format!("redis://{text}"));
    Err(format!(
        "a Redis URL starts with its scheme: `{shown}` (`rediss://` for TLS, \
         `redis+unix:///path` for a unix socket)"
    ))
}

fn startup_wait(text: &str) -> Result<StartupWait, String> {
    if text.eq_ignore_ascii_case("forever") {
        return Ok(StartupWait(None));
    }
    humantime::parse_duration(text)
        .map(|wait| StartupWait(Some(wait)))
        .map_err(|error| format!("`{text}` is neither a duration (30s, 5m) nor `forever`: {error}"))
}

fn positive_duration(text: &str) -> Result<Duration, String> {
    match humantime::parse_duration(text) {
        Ok(duration) if !duration.is_zero() => Ok(duration),
        Ok(_) => Err("must be longer than 0".into()),
        Err(error) => Err(error.to_string()),
    }
}

/// An RFC 3339 instant as Unix seconds.
fn rfc3339_seconds(text: &str) -> Result<u64, String> {
    let instant = humantime::parse_rfc3339_weak(text).map_err(|error| {
        format!("`{text}` is not an RFC 3339 time (2026-12-10T00:00:00Z): {error}")
    })?;
    instant
        .duration_since(std::time::UNIX_EPOCH)
        .map(|since| since.as_secs())
        .map_err(|_| format!("`{text}` is before 1970"))
}

fn key_prefix(text: &str) -> Result<String, String> {
    KeyLayout::check_prefix(text)
        .map(|()| text.to_owned())
        .map_err(|error| error.to_string())
}
