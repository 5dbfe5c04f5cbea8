//! envoyproxy/ratelimit's environment variables, read so that a Deployment of that service runs
//! ratelimitd unchanged.
//!
//! That service is configured by its environment alone (its `settings.go`). [`translate`] turns
//! each of its variables into the `RATELIMITD_*` variable of the flag that does the same thing,
//! so one parser (the command line's) validates both and a value means the same whichever way
//! it came. Precedence: a flag, then a `RATELIMITD_*` variable, then the upstream variable, then
//! the default. A variable ratelimitd cannot honour is never ignored in silence: it becomes a
//! [`Notice`] saying what happens instead, or an error where running on would change
//! behaviour.
//!
//! **Drop-in mode.** When the configuration is not given to ratelimitd itself (`--config` or
//! `RATELIMITD_CONFIG`), it is read as upstream reads it (`RUNTIME_ROOT` ...) and upstream's
//! defaults apply wherever a rolling swap from it would notice a difference: statsd to
//! `localhost:8125`, Redis at `/var/run/nutcracker/ratelimit.sock`, the debug port 6070, log
//! level `warn`, connection age 24 h with 1 h of grace, its key format and counting (so old and
//! new pods share counters) with 300 s of expiration jitter, health that ignores Redis unless
//! `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=true`, a startup that waits for Redis
//! (`REDIS_STARTUP_*`), a Redis timeout of 10 s and 10 connections. What still differs is said
//! in [`Translation::differences`]. With `--config`, upstream variables that are set are still
//! read, but unset ones keep ratelimitd's defaults.

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::go_values::{duration_flag, parse_bool, parse_duration, parse_unsigned};
use crate::service::statsd::Mogrifiers;
use crate::settings::{self, Convert, Setting, Upstream};

/// Every variable envoyproxy/ratelimit reads (its `settings.go`), in its order.
pub const VARIABLES: [&str; 114] = [
    "HOST",
    "PORT",
    "DEBUG_HOST",
    "DEBUG_PORT",
    "GRPC_UDS",
    "GRPC_HOST",
    "GRPC_PORT",
    "GRPC_MAX_CONNECTION_AGE",
    "GRPC_MAX_CONNECTION_AGE_GRACE",
    "GRPC_SERVER_USE_TLS",
    "GRPC_SERVER_TLS_CERT",
    "GRPC_SERVER_TLS_KEY",
    "GRPC_CLIENT_TLS_CACERT",
    "GRPC_CLIENT_TLS_SAN",
    "LOG_LEVEL",
    "LOG_FORMAT",
    "CONFIG_TYPE",
    "FORCE_START_WITHOUT_INITIAL_CONFIG",
    "CONFIG_GRPC_XDS_NODE_ID",
    "CONFIG_GRPC_XDS_NODE_METADATA",
    "CONFIG_GRPC_XDS_SERVER_URL",
    "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
    "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
    "CONFIG_GRPC_XDS_SERVER_USE_TLS",
    "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
    "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
    "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
    "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
    "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
    "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
    "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
    "XDS_CLIENT_BACKOFF_JITTER",
    "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
    "USE_DOG_STATSD",
    "USE_DOG_STATSD_MOGRIFIERS",
    "USE_STATSD",
    "STATSD_HOST",
    "STATSD_PORT",
    "EXTRA_TAGS",
    "STATS_FLUSH_INTERVAL",
    "DISABLE_STATS",
    "USE_PROMETHEUS",
    "PROMETHEUS_ADDR",
    "PROMETHEUS_PATH",
    "PROMETHEUS_MAPPER_YAML",
    "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
    "RUNTIME_ROOT",
    "RUNTIME_SUBDIRECTORY",
    "RUNTIME_APPDIRECTORY",
    "RUNTIME_IGNOREDOTFILES",
    "RUNTIME_WATCH_ROOT",
    "EXPIRATION_JITTER_MAX_SECONDS",
    "LOCAL_CACHE_SIZE_IN_BYTES",
    "NEAR_LIMIT_RATIO",
    "CACHE_KEY_PREFIX",
    "BACKEND_TYPE",
    "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
    "LIMIT_RESPONSE_HEADERS_ENABLED",
    "LIMIT_LIMIT_HEADER",
    "LIMIT_REMAINING_HEADER",
    "LIMIT_RESET_HEADER",
    "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
    "REDIS_SOCKET_TYPE",
    "REDIS_TYPE",
    "REDIS_URL",
    "REDIS_POOL_SIZE",
    "REDIS_AUTH",
    "REDIS_TLS",
    "REDIS_TLS_CLIENT_CERT",
    "REDIS_TLS_CLIENT_KEY",
    "REDIS_TLS_CACERT",
    "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
    "REDIS_PIPELINE_WINDOW",
    "REDIS_PIPELINE_LIMIT",
    "REDIS_CLUSTER_PIPELINE_PARALLELISM",
    "REDIS_PERSECOND",
    "REDIS_PERSECOND_SOCKET_TYPE",
    "REDIS_PERSECOND_TYPE",
    "REDIS_PERSECOND_URL",
    "REDIS_PERSECOND_POOL_SIZE",
    "REDIS_PERSECOND_AUTH",
    "REDIS_PERSECOND_TLS",
    "REDIS_SENTINEL_AUTH",
    "REDIS_PERSECOND_SENTINEL_AUTH",
    "REDIS_PERSECOND_PIPELINE_WINDOW",
    "REDIS_PERSECOND_PIPELINE_LIMIT",
    "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM",
    "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION",
    "REDIS_TIMEOUT",
    "REDIS_PERSECOND_TIMEOUT",
    "REDIS_POOL_ON_EMPTY_BEHAVIOR",
    "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR",
    "REDIS_STARTUP_INITIAL_INTERVAL",
    "REDIS_STARTUP_MAX_INTERVAL",
    "REDIS_STARTUP_MAX_ELAPSED_TIME",
    "MEMCACHE_HOST_PORT",
    "MEMCACHE_MAX_IDLE_CONNS",
    "MEMCACHE_SRV",
    "MEMCACHE_SRV_REFRESH",
    "MEMCACHE_TLS",
    "MEMCACHE_TLS_CLIENT_CERT",
    "MEMCACHE_TLS_CLIENT_KEY",
    "MEMCACHE_TLS_CACERT",
    "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION",
    "SHADOW_MODE",
    "QUOTA_MODE",
    "RESPONSE_DYNAMIC_METADATA",
    "MERGE_DOMAIN_CONFIG",
    "TRACING_ENABLED",
    "TRACING_SERVICE_NAME",
    "TRACING_SERVICE_NAMESPACE",
    "TRACING_SERVICE_INSTANCE_ID",
    "TRACING_EXPORTER_PROTOCOL",
    "TRACING_SAMPLING_RATE",
];

/// The variables of envoyproxy/ratelimit's per-second Redis (`REDIS_PERSECOND=true`).
const PER_SECOND_REDIS: [&str; 12] = [
    "REDIS_PERSECOND_SOCKET_TYPE",
    "REDIS_PERSECOND_TYPE",
    "REDIS_PERSECOND_URL",
    "REDIS_PERSECOND_POOL_SIZE",
    "REDIS_PERSECOND_AUTH",
    "REDIS_PERSECOND_TLS",
    "REDIS_PERSECOND_SENTINEL_AUTH",
    "REDIS_PERSECOND_PIPELINE_WINDOW",
    "REDIS_PERSECOND_PIPELINE_LIMIT",
    "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM",
    "REDIS_PERSECOND_TIMEOUT",
    "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR",
];

/// The `RATELIMITD_*` variables that name a Redis; any of them set, the `REDIS_*` ones are not
/// read.
const RATELIMITD_REDIS: [&Setting; 3] = [
    &settings::store::REDIS_URL,
    &settings::store::REDIS_CLUSTER,
    &settings::store::REDIS_SENTINEL,
];

/// Bytes of `LOCAL_CACHE_SIZE_IN_BYTES` counted per deny-cache entry (a key of a few dozen bytes
/// and its deadline, as upstream's freecache holds them).
pub const LOCAL_CACHE_BYTES_PER_ENTRY: u64 = 128;

/// Whether `from`, the upstream variables an assignment names (`A/B`, `A=value`), are among
/// those `setting` is read from ([`Setting::upstream`]); `drop-in mode` names the mode itself.
fn reads(setting: &Setting, from: &str) -> bool {
    from == "drop-in mode"
        || from.split('/').all(|name| {
            let name = name.split_once('=').map_or(name, |(name, _)| name);
            setting.upstream.variables().contains(&name)
        })
}

/// A `RATELIMITD_*` variable to set, and the upstream variables it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    pub variable: &'static str,
    pub value: String,
    pub from: String,
    /// The value holds a password: log it redacted.
    pub secret: bool,
    /// The value is envoyproxy/ratelimit's default: `from` is unset.
    pub defaulted: bool,
}

impl Assignment {
    /// The value as it may be logged: a secret's password as `***` (a URL keeps its host).
    pub fn shown_value(&self) -> String {
        if !self.secret {
            return self.value.clone();
        }
        if self.value.contains("://") {
            crate::store::redis::redacted_url(&self.value)
        } else {
            "***".into()
        }
    }
}

/// How loud a [`Notice`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Upstream does the same, or nothing a user relies on differs.
    Info,
    /// Something the user may rely on differs from upstream.
    Warn,
}

/// Something said at startup about an upstream variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub level: Level,
    pub text: String,
}

/// What the upstream environment asks for.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Translation {
    /// Drop-in mode: the configuration is not given to ratelimitd itself.
    pub drop_in: bool,
    /// The upstream variables set (see [`Translation::variables_read`]).
    read: Vec<String>,
    pub assignments: Vec<Assignment>,
    pub notices: Vec<Notice>,
}

impl Translation {
    /// What still differs from envoyproxy/ratelimit in this deployment, one line each (the
    /// [`Level::Warn`] notices).
    pub fn differences(&self) -> Vec<String> {
        self.notices
            .iter()
            .filter(|notice| notice.level == Level::Warn)
            .map(|notice| notice.text.clone())
            .collect()
    }

    /// The upstream variables set in the environment (an empty value counts as unset), in
    /// [`VARIABLES`] order.
    pub fn variables_read(&self) -> Vec<&str> {
        self.read.iter().map(String::as_str).collect()
    }

    /// The upstream variables that `variable` (a `RATELIMITD_*` one) was set from, if any.
    pub fn source_of(&self, variable: &str) -> Option<&Assignment> {
        self.assignments
            .iter()
            .find(|assignment| assignment.variable == variable)
    }
}

/// Reads envoyproxy/ratelimit's variables from `env` (the whole environment). `drop_in`: the
/// configuration is not given to ratelimitd itself (see the module documentation). Errors name
/// each variable that cannot be honoured without changing behaviour, or that upstream itself
/// would refuse.
pub fn translate(
    env: &BTreeMap<String, String>,
    drop_in: bool,
) -> Result<Translation, Vec<String>> {
    let mut reader = Reader {
        env,
        drop_in,
        out: Translation {
            drop_in,
            read: VARIABLES
                .iter()
                .filter(|name| env.get(**name).is_some_and(|value| !value.is_empty()))
                .map(|name| (*name).to_owned())
                .collect(),
            ..Translation::default()
        },
        errors: Vec::new(),
    };
    reader.listeners();
    reader.grpc_tls();
    reader.logging();
    reader.config_source();
    reader.stats();
    reader.limiter();
    reader.redis();
    reader.tracing();
    if reader.errors.is_empty() {
        Ok(reader.out)
    } else {
        Err(reader.errors)
    }
}

struct Reader<'a> {
    env: &'a BTreeMap<String, String>,
    drop_in: bool,
    out: Translation,
    errors: Vec<String>,
}

impl<'a> Reader<'a> {
    /// The variable's value; an empty one counts as unset, as Kubernetes manifests often write
    /// `value: ""` for "default".
    fn get(&self, name: &str) -> Option<&'a str> {
        self.env
            .get(name)
            .map(String::as_str)
            .filter(|value| !value.is_empty())
    }

    fn is_set(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    fn fail(&mut self, message: String) {
        self.errors.push(message);
    }

    fn note(&mut self, level: Level, text: String) {
        self.out.notices.push(Notice { level, text });
    }

    /// Says that each of `names` that is set is not used, and why.
    fn unused(&mut self, names: &[&str], why: &str) {
        for name in names {
            if self.is_set(name) {
                self.note(Level::Info, format!("{name} is not used: {why}"));
            }
        }
    }

    fn bool(&mut self, name: &str, default: bool) -> bool {
        match self.get(name).map(parse_bool) {
            None => default,
            Some(Ok(value)) => value,
            Some(Err(error)) => {
                self.fail(format!("{name}: {error}"));
                default
            }
        }
    }

    fn assign(&mut self, setting: &'static Setting, value: String, from: &str) {
        self.assign_with(setting, value, from, false);
    }

    fn assign_with(&mut self, setting: &'static Setting, value: String, from: &str, secret: bool) {
        debug_assert!(
            reads(setting, from),
            "{} is not read from {from}",
            setting.flag
        );
        let variable = setting.variable;
        if self.env.contains_key(variable) {
            self.note(
                Level::Info,
                format!("{from} is not used: {variable} is set and wins"),
            );
            return;
        }
        self.out.assignments.push(Assignment {
            variable,
            value,
            from: from.to_owned(),
            secret,
            defaulted: false,
        });
    }

    /// envoyproxy/ratelimit's default for the unset `from`, unless the setting's variable is
    /// set.
    fn assign_default(&mut self, setting: &'static Setting, value: String, from: &str) {
        debug_assert!(
            reads(setting, from),
            "{} is not read from {from}",
            setting.flag
        );
        let variable = setting.variable;
        if self.env.contains_key(variable) {
            return;
        }
        self.out.assignments.push(Assignment {
            variable,
            value,
            from: from.to_owned(),
            secret: false,
            defaulted: true,
        });
    }

    /// The setting's upstream variable ([`Upstream::Variable`]), converted, when it is set.
    fn copy(&mut self, setting: &'static Setting) {
        self.copy_or_default(setting, false);
    }

    /// [`Self::copy`]; when the variable is unset and `use_default`, the setting's drop-in
    /// default (upstream's default) stands in.
    fn copy_or_default(&mut self, setting: &'static Setting, use_default: bool) {
        let Upstream::Variable(name, convert) = setting.upstream else {
            debug_assert!(false, "--{} is not copied from one variable", setting.flag);
            return;
        };
        let default = setting.drop_in_default.filter(|_| use_default);
        let (text, defaulted) = match (self.get(name), default) {
            (Some(text), _) => (text, false),
            (None, Some(default)) => (default, true),
            (None, None) => return,
        };
        let value = match convert {
            Convert::Same => Ok(text.to_owned()),
            Convert::Bool => parse_bool(text).map(|value| value.to_string()),
            Convert::Duration => parse_duration(text).map(duration_flag),
        };
        match value {
            Ok(value) if defaulted => self.assign_default(setting, value, name),
            Ok(value) => self.assign(setting, value, name),
            Err(error) => self.fail(format!("{name}: {error}")),
        }
    }

    /// `HOST`-and-`PORT` style pairs as a socket address (`[v6]:port`); an empty host is every
    /// address, as Go's `:port`.
    fn address(
        &mut self,
        host_name: &str,
        port_name: &str,
        host: &str,
        port: &str,
    ) -> Option<String> {
        let host = self.get(host_name).unwrap_or(host);
        let port = self.get(port_name).unwrap_or(port);
        let port = match parse_unsigned(port) {
            Ok(port) if port <= u64::from(u16::MAX) => port,
            _ => {
                self.fail(format!("{port_name}: `{port}` is not a port number"));
                return None;
            }
        };
        listen_address(host, port).or_else(|| {
            self.fail(format!(
                "{host_name}: `{host}` is not an IP address (ratelimitd listens on addresses, \
                 not names; 0.0.0.0 listens on all)"
            ));
            None
        })
    }

    fn listeners(&mut self) {
        if self.is_set("HOST") || self.is_set("PORT") {
            if let Some(address) = self.address("HOST", "PORT", "0.0.0.0", "8080") {
                self.assign(&settings::listeners::HTTP_ADDR, address, "HOST/PORT");
            }
        }
        if self.is_set("GRPC_HOST") || self.is_set("GRPC_PORT") {
            if let Some(address) = self.address("GRPC_HOST", "GRPC_PORT", "0.0.0.0", "8081") {
                self.assign(
                    &settings::listeners::GRPC_ADDR,
                    address,
                    "GRPC_HOST/GRPC_PORT",
                );
            }
        }
        if self.drop_in || self.is_set("DEBUG_HOST") || self.is_set("DEBUG_PORT") {
            if let Some(address) = self.address("DEBUG_HOST", "DEBUG_PORT", "0.0.0.0", "6070") {
                self.assign(
                    &settings::listeners::DEBUG_ADDR,
                    address,
                    "DEBUG_HOST/DEBUG_PORT",
                );
            }
        }
        if let Some(path) = self.get("GRPC_UDS") {
            self.assign(
                &settings::grpc_transport::GRPC_UDS,
                path.to_owned(),
                "GRPC_UDS",
            );
        }
        // A grace alone means upstream's default age, as there (ratelimitd refuses a grace
        // without an age).
        let age_default = self.drop_in || self.is_set("GRPC_MAX_CONNECTION_AGE_GRACE");
        self.copy_or_default(
            &settings::grpc_transport::GRPC_MAX_CONNECTION_AGE,
            age_default,
        );
        self.copy_or_default(
            &settings::grpc_transport::GRPC_MAX_CONNECTION_AGE_GRACE,
            self.drop_in,
        );
    }

    fn grpc_tls(&mut self) {
        const FILES: [&str; 4] = [
            "GRPC_SERVER_TLS_CERT",
            "GRPC_SERVER_TLS_KEY",
            "GRPC_CLIENT_TLS_CACERT",
            "GRPC_CLIENT_TLS_SAN",
        ];
        if !self.bool("GRPC_SERVER_USE_TLS", false) {
            self.unused(&FILES, "GRPC_SERVER_USE_TLS is not true (as upstream)");
            return;
        }
        let (Some(cert), Some(key)) = (self.get(FILES[0]), self.get(FILES[1])) else {
            self.fail(
                "GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY"
                    .into(),
            );
            return;
        };
        self.assign(
            &settings::grpc_transport::GRPC_TLS_CERT,
            cert.to_owned(),
            FILES[0],
        );
        self.assign(
            &settings::grpc_transport::GRPC_TLS_KEY,
            key.to_owned(),
            FILES[1],
        );
        if let Some(ca) = self.get(FILES[2]) {
            self.assign(
                &settings::grpc_transport::GRPC_TLS_CLIENT_CA,
                ca.to_owned(),
                FILES[2],
            );
        }
        if let Some(san) = self.get(FILES[3]) {
            self.assign(
                &settings::grpc_transport::GRPC_TLS_CLIENT_SAN,
                san.to_owned(),
                FILES[3],
            );
        }
    }

    fn logging(&mut self) {
        let level = match (self.get("LOG_LEVEL"), self.drop_in) {
            (Some(level), _) => Some(level),
            (None, true) => Some("WARN"),
            (None, false) => None,
        };
        if let Some(level) = level {
            // logrus's level names; its fatal and panic levels log errors only, as error does.
            let filter = match level.to_ascii_lowercase().as_str() {
                "trace" => "trace",
                "debug" => "debug",
                "info" => "info",
                "warn" | "warning" => "warn",
                "error" | "fatal" | "panic" => "error",
                _ => {
                    self.fail(format!(
                        "LOG_LEVEL: `{level}` is not a log level (trace, debug, info, warn, error)"
                    ));
                    return;
                }
            };
            self.assign(
                &settings::telemetry::LOG_LEVEL,
                filter.to_owned(),
                "LOG_LEVEL",
            );
        }
        if let Some(format) = self.get("LOG_FORMAT") {
            // Upstream logs JSON for `json` and text for anything else.
            let format = if format == "json" { "json" } else { "text" };
            self.assign(
                &settings::telemetry::LOG_FORMAT,
                format.to_owned(),
                "LOG_FORMAT",
            );
        }
    }

    fn config_source(&mut self) {
        const XDS: [&str; 15] = [
            "CONFIG_GRPC_XDS_NODE_ID",
            "CONFIG_GRPC_XDS_NODE_METADATA",
            "CONFIG_GRPC_XDS_SERVER_URL",
            "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
            "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
            "CONFIG_GRPC_XDS_SERVER_USE_TLS",
            "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
            "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
            "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
            "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
            "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
            "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
            "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
            "XDS_CLIENT_BACKOFF_JITTER",
            "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
        ];
        let xds = match self
            .get("CONFIG_TYPE")
            .map(str::to_ascii_uppercase)
            .as_deref()
        {
            None | Some("FILE") => {
                self.unused(&XDS, "CONFIG_TYPE is FILE (as upstream)");
                false
            }
            Some("GRPC_XDS_SOTW") if !self.drop_in => {
                self.note(
                    Level::Info,
                    "CONFIG_TYPE=GRPC_XDS_SOTW is not used: the configuration is given by \
                     --config or RATELIMITD_CONFIG"
                        .into(),
                );
                self.unused(
                    &XDS,
                    "the configuration is given by --config or RATELIMITD_CONFIG",
                );
                false
            }
            Some("GRPC_XDS_SOTW") => {
                self.xds();
                true
            }
            Some(other) => {
                self.fail(format!(
                    "CONFIG_TYPE: `{other}` is not a configuration type (FILE, GRPC_XDS_SOTW)"
                ));
                false
            }
        };
        self.copy(&settings::configuration::FORCE_START_WITHOUT_INITIAL_CONFIG);
        if self.bool("FORCE_START_WITHOUT_INITIAL_CONFIG", false) {
            self.note(
                Level::Warn,
                "FORCE_START_WITHOUT_INITIAL_CONFIG=true: while no configuration has loaded, \
                 requests are answered as for an unknown domain (OK), where upstream answers each \
                 with an error; HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true keeps traffic away \
                 meanwhile"
                    .into(),
            );
        }
        self.copy(&settings::configuration::HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED);
        self.copy(&settings::configuration::MERGE_DOMAIN_CONFIG);

        const RUNTIME: [&str; 5] = [
            "RUNTIME_ROOT",
            "RUNTIME_SUBDIRECTORY",
            "RUNTIME_APPDIRECTORY",
            "RUNTIME_IGNOREDOTFILES",
            "RUNTIME_WATCH_ROOT",
        ];
        if !self.drop_in {
            self.unused(
                &RUNTIME,
                "the configuration is given by --config or RATELIMITD_CONFIG",
            );
            return;
        }
        if xds {
            self.unused(&RUNTIME, "CONFIG_TYPE is GRPC_XDS_SOTW");
            return;
        }
        let root = self
            .get("RUNTIME_ROOT")
            .unwrap_or("/srv/runtime_data/current");
        let mut path = std::path::PathBuf::from(root);
        if let Some(subdirectory) = self.get("RUNTIME_SUBDIRECTORY") {
            path.push(subdirectory);
        }
        path.push(self.get("RUNTIME_APPDIRECTORY").unwrap_or("config"));
        let ignore_dotfiles = self.bool("RUNTIME_IGNOREDOTFILES", false);
        let from = "RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY";
        self.assign(
            &settings::configuration::CONFIG,
            path.display().to_string(),
            from,
        );
        self.assign(
            &settings::configuration::CONFIG_LAYOUT,
            "runtime".into(),
            from,
        );
        self.assign(
            &settings::configuration::CONFIG_IGNORE_DOTFILES,
            ignore_dotfiles.to_string(),
            "RUNTIME_IGNOREDOTFILES",
        );
        if self.is_set("RUNTIME_WATCH_ROOT") {
            let watch_root = self.bool("RUNTIME_WATCH_ROOT", true);
            self.note(
                Level::Info,
                format!(
                    "RUNTIME_WATCH_ROOT={watch_root}: ratelimitd polls the files' content, so it \
                     reloads on a swap of the root's symlink and on a change in place alike"
                ),
            );
        }
    }

    /// `CONFIG_TYPE=GRPC_XDS_SOTW`: the xDS client's settings, upstream's defaults where
    /// ratelimitd's would differ (the server `localhost:18000`).
    fn xds(&mut self) {
        self.assign(
            &settings::configuration::CONFIG_SOURCE,
            "xds".into(),
            "CONFIG_TYPE=GRPC_XDS_SOTW",
        );
        let server = self
            .get("CONFIG_GRPC_XDS_SERVER_URL")
            .unwrap_or("localhost:18000");
        self.assign(
            &settings::configuration::XDS_SERVER,
            server.to_owned(),
            "CONFIG_GRPC_XDS_SERVER_URL",
        );
        self.copy(&settings::configuration::XDS_NODE_ID);
        self.copy(&settings::configuration::XDS_NODE_METADATA);
        self.copy(&settings::configuration::XDS_BACKOFF_RANDOM_FACTOR);
        self.copy(&settings::configuration::XDS_MAX_MESSAGE_BYTES);
        if let Some(headers) = self.get("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS") {
            // Often a bearer token.
            self.assign_with(
                &settings::configuration::XDS_HEADERS,
                headers.to_owned(),
                "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
                true,
            );
        }
        self.copy(&settings::configuration::XDS_CONNECT_RETRY_INTERVAL);
        self.copy(&settings::configuration::XDS_BACKOFF_INITIAL);
        self.copy(&settings::configuration::XDS_BACKOFF_MAX);
        self.copy(&settings::configuration::XDS_BACKOFF_JITTER);

        const TLS: [&Setting; 4] = [
            &settings::configuration::XDS_TLS_CERT,
            &settings::configuration::XDS_TLS_KEY,
            &settings::configuration::XDS_TLS_CA,
            &settings::configuration::XDS_TLS_SAN,
        ];
        if !self.bool("CONFIG_GRPC_XDS_SERVER_USE_TLS", false) {
            let names = TLS.map(|setting| setting.upstream.variables()[0]);
            self.unused(
                &names,
                "CONFIG_GRPC_XDS_SERVER_USE_TLS is not true (as upstream)",
            );
            return;
        }
        self.assign(
            &settings::configuration::XDS_TLS,
            "true".into(),
            "CONFIG_GRPC_XDS_SERVER_USE_TLS",
        );
        for setting in TLS {
            self.copy(setting);
        }
    }

    /// envoyproxy/ratelimit's stats sink: one of statsd (`USE_STATSD`, on by default),
    /// DogStatsD (`USE_DOG_STATSD`) and Prometheus (`USE_PROMETHEUS`), or none
    /// (`DISABLE_STATS`).
    fn stats(&mut self) {
        const STATSD: [&str; 4] = [
            "STATSD_HOST",
            "STATSD_PORT",
            "EXTRA_TAGS",
            "STATS_FLUSH_INTERVAL",
        ];
        const PROMETHEUS: [&str; 4] = [
            "PROMETHEUS_ADDR",
            "PROMETHEUS_PATH",
            "PROMETHEUS_MAPPER_YAML",
            "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
        ];
        const MOGRIFIERS: [&str; 1] = ["USE_DOG_STATSD_MOGRIFIERS"];
        let dog = self.bool("USE_DOG_STATSD", false);
        let prometheus = self.bool("USE_PROMETHEUS", false);
        let statsd_set = self.is_set("USE_STATSD");
        let default_on = self.drop_in || self.is_set("STATSD_HOST") || self.is_set("STATSD_PORT");
        let use_statsd = self.bool("USE_STATSD", default_on);
        if self.bool("DISABLE_STATS", false) {
            self.note(
                Level::Info,
                "DISABLE_STATS=true: no stats sink (statsd, DogStatsD or Prometheus), as \
                 upstream; ratelimitd's metrics stay at /metrics"
                    .into(),
            );
            let why = "DISABLE_STATS is true (as upstream)";
            self.unused(&STATSD, why);
            self.unused(&PROMETHEUS, why);
            self.unused(&MOGRIFIERS, why);
            return;
        }
        let others: Vec<&str> = [("USE_DOG_STATSD", dog), ("USE_PROMETHEUS", prometheus)]
            .iter()
            .filter(|(_, on)| *on)
            .map(|(name, _)| *name)
            .collect();
        let mut set_true = others.clone();
        if statsd_set && use_statsd {
            set_true.insert(0, "USE_STATSD");
        }
        if set_true.len() > 1 {
            self.fail(format!(
                "{}: one stats sink at a time, as envoyproxy/ratelimit; set one of USE_STATSD, \
                 USE_DOG_STATSD, USE_PROMETHEUS to true and the others to false",
                set_true
                    .iter()
                    .map(|name| format!("{name}=true"))
                    .collect::<Vec<_>>()
                    .join(" and ")
            ));
            return;
        }
        if let Some(other) = others.first() {
            if default_on && !statsd_set {
                self.note(
                    Level::Info,
                    format!(
                        "USE_STATSD is unset: statsd is off, {other}=true is the stats sink \
                         (envoyproxy/ratelimit refuses to start unless USE_STATSD=false)"
                    ),
                );
            }
        }
        if dog {
            self.unused(&PROMETHEUS, "USE_PROMETHEUS is not true (as upstream)");
            self.statsd_sink("USE_DOG_STATSD");
            self.assign(
                &settings::statsd::STATSD_FORMAT,
                "dogstatsd".into(),
                "USE_DOG_STATSD",
            );
            self.note(
                Level::Warn,
                "USE_DOG_STATSD=true: the lines carry no container field (datadog-go's origin \
                 detection, `|c:`); DD_ENTITY_ID (the pod's UID) gives the agent the pod's tags"
                    .into(),
            );
            if let Some(list) = self.get("USE_DOG_STATSD_MOGRIFIERS") {
                let env = self.env;
                match Mogrifiers::from_env(list, |name| env.get(name).cloned()) {
                    Ok(_) => self.assign(
                        &settings::statsd::STATSD_MOGRIFIERS,
                        list.to_owned(),
                        "USE_DOG_STATSD_MOGRIFIERS",
                    ),
                    Err(error) => self.fail(format!("USE_DOG_STATSD_MOGRIFIERS: {error}")),
                }
            }
        } else if prometheus {
            self.unused(&MOGRIFIERS, "USE_DOG_STATSD is not true (as upstream)");
            self.unused(
                &["STATSD_HOST", "STATSD_PORT"],
                "USE_PROMETHEUS=true is the stats sink (as upstream)",
            );
            self.unused(
                &["STATS_FLUSH_INTERVAL"],
                "the Prometheus metrics are current at each scrape",
            );
            self.prometheus();
        } else {
            self.unused(&MOGRIFIERS, "USE_DOG_STATSD is not true (as upstream)");
            self.unused(&PROMETHEUS, "USE_PROMETHEUS is not true (as upstream)");
            if use_statsd {
                self.statsd_sink("USE_STATSD");
            } else {
                self.unused(&STATSD, "statsd is off");
            }
        }
    }

    /// The statsd sink's address, tags and interval (statsd and DogStatsD); `sink` is the
    /// variable that turned it on.
    fn statsd_sink(&mut self, sink: &str) {
        let Some(address) = self.statsd_address() else {
            return;
        };
        self.assign(
            &settings::statsd::STATSD_ADDR,
            address,
            &format!("{sink}/STATSD_HOST/STATSD_PORT"),
        );
        self.extra_tags();
        self.copy(&settings::statsd::STATSD_FLUSH_INTERVAL);
    }

    fn extra_tags(&mut self) {
        if let Some(tags) = self.get("EXTRA_TAGS") {
            self.assign(
                &settings::statsd::STATSD_EXTRA_TAGS,
                tags.to_owned(),
                "EXTRA_TAGS",
            );
        }
    }

    /// `USE_PROMETHEUS=true`: upstream's Prometheus port, its names and labels.
    fn prometheus(&mut self) {
        self.note(
            Level::Warn,
            "USE_PROMETHEUS=true: upstream's families are current at each scrape; the Go client's \
             own (go_*, process_*, promhttp_*, statsd_exporter_*) are not served"
                .into(),
        );
        let (address, defaulted) = match self.get("PROMETHEUS_ADDR") {
            Some(address) => (address, false),
            None => (":9090", true),
        };
        match address
            .rsplit_once(':')
            .and_then(|(host, port)| Some((host, port.parse::<u16>().ok()?)))
            .and_then(|(host, port)| listen_address(host, u64::from(port)))
        {
            Some(address) if defaulted => self.assign_default(
                &settings::listeners::ENVOYPROXY_METRICS_ADDR,
                address,
                "USE_PROMETHEUS/PROMETHEUS_ADDR",
            ),
            Some(address) => self.assign(
                &settings::listeners::ENVOYPROXY_METRICS_ADDR,
                address,
                "USE_PROMETHEUS/PROMETHEUS_ADDR",
            ),
            None => self.fail(format!(
                "PROMETHEUS_ADDR: `{address}` is not an address to listen on (HOST:PORT or :PORT)"
            )),
        }
        if let Some(path) = self.get("PROMETHEUS_PATH") {
            self.assign(
                &settings::listeners::ENVOYPROXY_METRICS_PATH,
                path.to_owned(),
                "PROMETHEUS_PATH",
            );
        }
        self.extra_tags();
        match self.get("PROMETHEUS_MAPPER_YAML") {
            Some(mapper) => {
                self.assign(
                    &settings::listeners::ENVOYPROXY_METRICS_MAPPER,
                    mapper.to_owned(),
                    "PROMETHEUS_MAPPER_YAML",
                );
                self.bool("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", false);
                self.unused(
                    &["PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS"],
                    "PROMETHEUS_MAPPER_YAML is set (as upstream)",
                );
            }
            None => self.copy(&settings::listeners::ENVOYPROXY_METRICS_RESPONSE_TIME_MS),
        }
    }

    fn statsd_address(&mut self) -> Option<String> {
        let host = self.get("STATSD_HOST").unwrap_or("localhost");
        let port = self.get("STATSD_PORT").unwrap_or("8125");
        match parse_unsigned(port) {
            Ok(port) if port <= u64::from(u16::MAX) => Some(match host.parse::<IpAddr>() {
                Ok(IpAddr::V6(ip)) => format!("[{ip}]:{port}"),
                _ => format!("{host}:{port}"),
            }),
            _ => {
                self.fail(format!("STATSD_PORT: `{port}` is not a port number"));
                None
            }
        }
    }

    fn limiter(&mut self) {
        self.copy(&settings::responses::SHADOW_MODE);
        self.copy(&settings::responses::QUOTA_MODE);
        self.copy(&settings::responses::RESPONSE_DYNAMIC_METADATA);
        if let Some(ratio) = self.get("NEAR_LIMIT_RATIO") {
            self.assign(
                &settings::telemetry::NEAR_LIMIT_RATIO,
                ratio.to_owned(),
                "NEAR_LIMIT_RATIO",
            );
        }
        match self.get("LOCAL_CACHE_SIZE_IN_BYTES").map(parse_unsigned) {
            None | Some(Ok(0))
                if self.drop_in && !self.env.contains_key(settings::store::DENY_CACHE.variable) =>
            {
                self.note(
                    Level::Warn,
                    "LOCAL_CACHE_SIZE_IN_BYTES=0 (no local cache): ratelimitd's deny cache is on; \
                     it never changes a decision, but answers requests to exhausted counters \
                     without Redis, so Redis stops counting their denied hits \
                     (RATELIMITD_DENY_CACHE=false turns it off)"
                        .into(),
                )
            }
            None => {}
            Some(Ok(0)) => self.note(
                Level::Info,
                "LOCAL_CACHE_SIZE_IN_BYTES=0: ratelimitd's deny cache stays on (it never changes a \
                 decision, only saves Redis calls for exhausted counters); \
                 RATELIMITD_DENY_CACHE=false turns it off"
                    .into(),
            ),
            Some(Ok(bytes)) => {
                let entries = (bytes / LOCAL_CACHE_BYTES_PER_ENTRY).clamp(1, u64::from(u32::MAX));
                self.assign(
                    &settings::store::DENY_CACHE_SIZE,
                    entries.to_string(),
                    "LOCAL_CACHE_SIZE_IN_BYTES",
                );
            }
            Some(Err(error)) => self.fail(format!("LOCAL_CACHE_SIZE_IN_BYTES: {error}")),
        }
        if let Some(prefix) = self.get("CACHE_KEY_PREFIX") {
            self.assign(
                &settings::redis_keys::REDIS_KEY_PREFIX,
                prefix.to_owned(),
                "CACHE_KEY_PREFIX",
            );
        }
        // Drop-in mode keeps upstream's keys, so old and new pods share their counters while a
        // Deployment rolls (docs/migration.md); the jitter belongs to those keys.
        let envoyproxy_keys = match self
            .env
            .get(settings::redis_keys::KEY_FORMAT.variable)
            .map(String::as_str)
        {
            Some(format) => format == "envoyproxy",
            None => {
                if self.drop_in {
                    self.assign_default(
                        &settings::redis_keys::KEY_FORMAT,
                        "envoyproxy".into(),
                        "drop-in mode",
                    );
                }
                self.drop_in
            }
        };
        match self
            .get("EXPIRATION_JITTER_MAX_SECONDS")
            .map(parse_unsigned)
        {
            None if envoyproxy_keys && self.drop_in => self.assign_default(
                &settings::redis_keys::EXPIRATION_JITTER_MAX_SECONDS,
                "300".into(),
                "EXPIRATION_JITTER_MAX_SECONDS",
            ),
            None => {}
            Some(Ok(seconds)) => self.assign(
                &settings::redis_keys::EXPIRATION_JITTER_MAX_SECONDS,
                seconds.to_string(),
                "EXPIRATION_JITTER_MAX_SECONDS",
            ),
            Some(Err(error)) => self.fail(format!("EXPIRATION_JITTER_MAX_SECONDS: {error}")),
        }
        self.copy(&settings::redis_keys::STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT);

        const NAMES: [&Setting; 3] = [
            &settings::responses::RESPONSE_HEADER_LIMIT,
            &settings::responses::RESPONSE_HEADER_REMAINING,
            &settings::responses::RESPONSE_HEADER_RESET,
        ];
        if self.bool("LIMIT_RESPONSE_HEADERS_ENABLED", false) {
            self.assign(
                &settings::responses::RESPONSE_HEADERS,
                "envoyproxy".into(),
                "LIMIT_RESPONSE_HEADERS_ENABLED",
            );
            for setting in NAMES {
                self.copy(setting);
            }
        } else {
            self.unused(
                &NAMES.map(|setting| setting.upstream.variables()[0]),
                "LIMIT_RESPONSE_HEADERS_ENABLED is not true (as upstream)",
            );
        }
    }

    /// `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION`: upstream's health follows Redis only when it is
    /// true (default false), so a liveness probe does not restart every pod while Redis is
    /// down. False (the default in drop-in mode): `--health-follows-store=false`. True: health
    /// follows Redis's probe (PING) and the rule on failed calls (`--health-failure-*`).
    fn redis_health(&mut self) {
        const NAME: &str = "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION";
        let active = self.bool(NAME, !self.drop_in);
        match (active, self.is_set(NAME)) {
            (false, true) => self.assign(
                &settings::health::HEALTH_FOLLOWS_STORE,
                "false".into(),
                NAME,
            ),
            (false, false) => self.assign_default(
                &settings::health::HEALTH_FOLLOWS_STORE,
                "false".into(),
                NAME,
            ),
            (true, true) => {
                self.assign(&settings::health::HEALTH_FOLLOWS_STORE, "true".into(), NAME)
            }
            (true, false) => {}
        }
        if active && self.is_set(NAME) {
            self.note(
                Level::Info,
                format!(
                    "{NAME}=true: health turns NOT_SERVING while Redis does not answer its probe \
                     (PING) or while most Redis calls fail (--health-failure-ratio)"
                ),
            );
        }
    }

    /// `REDIS_STARTUP_*`: upstream retries an unreachable Redis at startup (by default for
    /// ever, waits from 1 s growing to 30 s); ratelimitd's own default is to exit.
    fn redis_startup(&mut self) {
        const ELAPSED: &str = "REDIS_STARTUP_MAX_ELAPSED_TIME";
        match self.get(ELAPSED).map(parse_duration) {
            Some(Ok(wait)) => {
                let wait = if wait.is_zero() {
                    "forever".to_owned()
                } else {
                    duration_flag(wait)
                };
                self.assign(&settings::store::REDIS_STARTUP_WAIT, wait, ELAPSED);
            }
            Some(Err(error)) => self.fail(format!("{ELAPSED}: {error}")),
            None if self.drop_in => self.assign_default(
                &settings::store::REDIS_STARTUP_WAIT,
                "forever".into(),
                ELAPSED,
            ),
            None => {}
        }
        self.copy(&settings::store::REDIS_STARTUP_INITIAL_INTERVAL);
        self.copy(&settings::store::REDIS_STARTUP_MAX_INTERVAL);
    }

    /// `REDIS_TLS_CACERT`, trusted as upstream trusts it: beside the system's certificate store;
    /// `REDIS_TLS_CLIENT_CERT` with `REDIS_TLS_CLIENT_KEY`, the client certificate. Upstream
    /// ignores one of the two without the other; here that stops startup, naming both.
    fn redis_tls_files(&mut self) {
        if let Some(ca) = self.get("REDIS_TLS_CACERT") {
            let ours = self
                .env
                .contains_key(settings::store::REDIS_TLS_CA.variable);
            self.assign(
                &settings::store::REDIS_TLS_CA,
                ca.to_owned(),
                "REDIS_TLS_CACERT",
            );
            if !ours {
                self.assign(
                    &settings::store::REDIS_TLS_SYSTEM_ROOTS,
                    "true".into(),
                    "REDIS_TLS_CACERT",
                );
            }
        }
        const CERT: &str = "REDIS_TLS_CLIENT_CERT";
        const KEY: &str = "REDIS_TLS_CLIENT_KEY";
        match (self.get(CERT), self.get(KEY)) {
            (Some(cert), Some(key)) => {
                self.assign(
                    &settings::store::REDIS_TLS_CLIENT_CERT,
                    cert.to_owned(),
                    CERT,
                );
                self.assign(&settings::store::REDIS_TLS_CLIENT_KEY, key.to_owned(), KEY);
            }
            (Some(_), None) => self.fail(format!(
                "{CERT} is set without {KEY}: a client certificate is presented with its private \
                 key (set both, or neither)"
            )),
            (None, Some(_)) => self.fail(format!(
                "{KEY} is set without {CERT}: a private key is presented with its client \
                 certificate (set both, or neither)"
            )),
            (None, None) => {}
        }
    }

    /// `REDIS_POOL_SIZE` and `REDIS_TIMEOUT`, upstream's defaults (10, 10 s) in drop-in mode.
    fn redis_pool(&mut self) {
        match self.get("REDIS_POOL_SIZE").map(parse_unsigned) {
            Some(Ok(size)) if (1..=u64::from(u32::MAX)).contains(&size) => self.assign(
                &settings::store::REDIS_POOL_SIZE,
                size.to_string(),
                "REDIS_POOL_SIZE",
            ),
            Some(_) => {
                let text = self.get("REDIS_POOL_SIZE").unwrap_or_default();
                self.fail(format!(
                    "REDIS_POOL_SIZE: `{text}` is not a number of connections (a whole number \
                     from 1)"
                ));
            }
            None if self.drop_in => {
                let setting = &settings::store::REDIS_POOL_SIZE;
                let size = setting.drop_in_default.unwrap_or_default();
                self.assign_default(setting, size.into(), "REDIS_POOL_SIZE")
            }
            None => {}
        }
        self.copy_or_default(&settings::store::REDIS_TIMEOUT, self.drop_in);
    }

    fn redis(&mut self) {
        const MEMCACHE: [&str; 9] = [
            "MEMCACHE_HOST_PORT",
            "MEMCACHE_MAX_IDLE_CONNS",
            "MEMCACHE_SRV",
            "MEMCACHE_SRV_REFRESH",
            "MEMCACHE_TLS",
            "MEMCACHE_TLS_CLIENT_CERT",
            "MEMCACHE_TLS_CLIENT_KEY",
            "MEMCACHE_TLS_CACERT",
            "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION",
        ];
        match self.get("BACKEND_TYPE").map(str::to_ascii_lowercase).as_deref() {
            None | Some("redis") => self.unused(&MEMCACHE, "BACKEND_TYPE is redis (as upstream)"),
            Some("memcache") => self.fail(
                "BACKEND_TYPE=memcache: Memcached is not supported; use Redis (BACKEND_TYPE=redis) \
                 or the in-memory store (no REDIS_URL, with --config)"
                    .into(),
            ),
            Some(other) => self.fail(format!(
                "BACKEND_TYPE: `{other}` is not a backend (redis)"
            )),
        }
        self.unused(
            &[
                "REDIS_PIPELINE_WINDOW",
                "REDIS_PIPELINE_LIMIT",
                "REDIS_CLUSTER_PIPELINE_PARALLELISM",
            ],
            "ratelimitd batches concurrent requests into one script call per Redis node by itself",
        );
        self.redis_health();
        self.unused(
            &["REDIS_POOL_ON_EMPTY_BEHAVIOR"],
            "ratelimitd's Redis connections are multiplexed: a call never waits for a free one",
        );
        if self.bool("REDIS_PERSECOND", false) {
            self.note(
                Level::Warn,
                "REDIS_PERSECOND=true: per-second limits are kept in the main Redis (REDIS_URL); \
                 the REDIS_PERSECOND_* settings are not used"
                    .into(),
            );
        }
        self.unused(
            &PER_SECOND_REDIS,
            "ratelimitd keeps every limit in one Redis",
        );

        const CONNECTION: [&str; 9] = [
            "REDIS_SOCKET_TYPE",
            "REDIS_TYPE",
            "REDIS_URL",
            "REDIS_AUTH",
            "REDIS_TLS",
            "REDIS_TLS_CLIENT_CERT",
            "REDIS_TLS_CLIENT_KEY",
            "REDIS_TLS_CACERT",
            "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
        ];
        const STARTUP: [&str; 3] = [
            "REDIS_STARTUP_INITIAL_INTERVAL",
            "REDIS_STARTUP_MAX_INTERVAL",
            "REDIS_STARTUP_MAX_ELAPSED_TIME",
        ];
        let ratelimitd_redis = RATELIMITD_REDIS
            .iter()
            .map(|setting| setting.variable)
            .find(|variable| self.env.contains_key(*variable));
        if ratelimitd_redis.is_some() || self.drop_in || self.is_set("REDIS_URL") {
            self.redis_pool();
            self.redis_startup();
        }
        if let Some(variable) = ratelimitd_redis {
            let why = format!("{variable} is set and wins");
            self.unused(&CONNECTION, &why);
            self.unused(&["REDIS_SENTINEL_AUTH"], &why);
            return;
        }
        let url = match (self.get("REDIS_URL"), self.drop_in) {
            (Some(url), _) => url,
            (None, true) => "/var/run/nutcracker/ratelimit.sock",
            (None, false) => {
                let why = "REDIS_URL is not set: counters are kept in this process";
                self.unused(&CONNECTION, why);
                self.unused(
                    &["REDIS_SENTINEL_AUTH", "REDIS_TIMEOUT", "REDIS_POOL_SIZE"],
                    why,
                );
                self.unused(&STARTUP, why);
                return;
            }
        };
        let tls = self.bool("REDIS_TLS", false);
        if tls {
            self.redis_tls_files();
        } else {
            self.unused(
                &[
                    "REDIS_TLS_CLIENT_CERT",
                    "REDIS_TLS_CLIENT_KEY",
                    "REDIS_TLS_CACERT",
                    "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
                ],
                "REDIS_TLS is not true (as upstream)",
            );
        }
        let skip_verification = tls && self.bool("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", false);
        let unix = match self
            .get("REDIS_SOCKET_TYPE")
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            None | Some("unix") => true,
            Some("tcp") => false,
            Some(other) => {
                self.fail(format!(
                    "REDIS_SOCKET_TYPE: `{other}` is not a socket type (tcp, unix)"
                ));
                return;
            }
        };
        let auth = self.get("REDIS_AUTH").map(credentials);
        let sentinel_auth = self.get("REDIS_SENTINEL_AUTH").map(credentials);
        let kind = self.get("REDIS_TYPE").map(str::to_ascii_lowercase);
        let from = "REDIS_TYPE/REDIS_SOCKET_TYPE/REDIS_URL/REDIS_AUTH/REDIS_TLS";
        match kind.as_deref() {
            None | Some("single") => {
                self.unused(&["REDIS_SENTINEL_AUTH"], "REDIS_TYPE is not SENTINEL");
                if url.contains("://") {
                    self.note(
                        Level::Info,
                        "REDIS_URL is a URL: used as it is (REDIS_SOCKET_TYPE, REDIS_AUTH and \
                         REDIS_TLS are for host:port and socket paths)"
                            .into(),
                    );
                    self.assign_with(
                        &settings::store::REDIS_URL,
                        url.to_owned(),
                        "REDIS_URL",
                        true,
                    );
                    return;
                }
                if unix && tls {
                    self.fail("REDIS_TLS=true with a unix socket (REDIS_SOCKET_TYPE=unix)".into());
                    return;
                }
                if unix && looks_like_host_port(url) {
                    let socket_type = if self.is_set("REDIS_SOCKET_TYPE") {
                        "REDIS_SOCKET_TYPE is unix"
                    } else {
                        "REDIS_SOCKET_TYPE is unset, and upstream's default is unix"
                    };
                    self.fail(format!(
                        "REDIS_URL: `{url}` is read as the path of a unix socket because \
                         {socket_type}; for a TCP address set REDIS_SOCKET_TYPE=tcp"
                    ));
                    return;
                }
                let single = single_url(url, unix, tls, skip_verification, auth.as_ref());
                self.assign_with(&settings::store::REDIS_URL, single, from, auth.is_some());
            }
            Some(topology @ ("cluster" | "sentinel")) => {
                if unix {
                    self.fail(format!(
                        "REDIS_TYPE={topology} needs REDIS_SOCKET_TYPE=tcp (upstream's default is unix)"
                    ));
                    return;
                }
                if skip_verification {
                    self.fail(format!(
                        "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION=true is supported for a single server \
                         only, not REDIS_TYPE={topology}; give the CA with REDIS_TLS_CACERT"
                    ));
                }
                if let Some((user, password)) = &auth {
                    if let Some(user) = user {
                        self.assign(&settings::store::REDIS_USER, user.clone(), "REDIS_AUTH");
                    }
                    self.assign_with(
                        &settings::store::REDIS_PASSWORD,
                        password.clone(),
                        "REDIS_AUTH",
                        true,
                    );
                }
                if tls {
                    self.assign(&settings::store::REDIS_TLS, "true".into(), "REDIS_TLS");
                }
                if topology == "cluster" {
                    self.unused(&["REDIS_SENTINEL_AUTH"], "REDIS_TYPE is not SENTINEL");
                    self.assign(&settings::store::REDIS_CLUSTER, url.to_owned(), "REDIS_URL");
                    return;
                }
                let Some((master, sentinels)) = url.split_once(',') else {
                    self.fail(format!(
                        "REDIS_URL: `{url}` is not MASTER_NAME,HOST:PORT[,HOST:PORT...] \
                         (REDIS_TYPE=SENTINEL)"
                    ));
                    return;
                };
                self.assign(
                    &settings::store::REDIS_SENTINEL,
                    format!("{master}@{sentinels}"),
                    "REDIS_URL",
                );
                if let Some((user, password)) = sentinel_auth {
                    if let Some(user) = user {
                        self.assign(
                            &settings::store::REDIS_SENTINEL_USER,
                            user,
                            "REDIS_SENTINEL_AUTH",
                        );
                    }
                    self.assign_with(
                        &settings::store::REDIS_SENTINEL_PASSWORD,
                        password,
                        "REDIS_SENTINEL_AUTH",
                        true,
                    );
                }
            }
            Some(other) => self.fail(format!(
                "REDIS_TYPE: `{other}` is not a Redis type (SINGLE, CLUSTER, SENTINEL)"
            )),
        }
    }

    /// envoyproxy/ratelimit's OpenTelemetry settings. Its endpoint and the rest come from the
    /// standard `OTEL_EXPORTER_OTLP_*` variables, which ratelimitd's exporter reads as well; its
    /// service name (default `RateLimit`) is set whether or not `OTEL_SERVICE_NAME` is, as there.
    fn tracing(&mut self) {
        const SETTINGS: [&str; 5] = [
            "TRACING_SERVICE_NAME",
            "TRACING_SERVICE_NAMESPACE",
            "TRACING_SERVICE_INSTANCE_ID",
            "TRACING_EXPORTER_PROTOCOL",
            "TRACING_SAMPLING_RATE",
        ];
        if !self.bool("TRACING_ENABLED", false) {
            self.unused(&SETTINGS, "TRACING_ENABLED is not true (as upstream)");
            return;
        }
        self.assign(
            &settings::tracing::TRACING,
            "true".into(),
            "TRACING_ENABLED",
        );
        let name = self.get("TRACING_SERVICE_NAME").unwrap_or("RateLimit");
        self.assign(
            &settings::tracing::TRACING_SERVICE_NAME,
            name.to_owned(),
            "TRACING_SERVICE_NAME",
        );
        let mut attributes = Vec::new();
        for (variable, key) in [
            ("TRACING_SERVICE_NAMESPACE", "service.namespace"),
            ("TRACING_SERVICE_INSTANCE_ID", "service.instance.id"),
        ] {
            match self.get(variable) {
                Some(value) if value.contains(',') => self.fail(format!(
                    "{variable}: `{value}` holds a comma, which a resource attribute cannot carry \
                     here"
                )),
                Some(value) => attributes.push(format!("{key}={value}")),
                None => {}
            }
        }
        if !attributes.is_empty() {
            self.assign(
                &settings::tracing::TRACING_RESOURCE_ATTRIBUTES,
                attributes.join(","),
                "TRACING_SERVICE_NAMESPACE/TRACING_SERVICE_INSTANCE_ID",
            );
        }
        if self.get("TRACING_SERVICE_INSTANCE_ID").is_none() {
            self.note(
                Level::Info,
                "TRACING_SERVICE_INSTANCE_ID is unset: spans carry no service.instance.id \
                 (envoyproxy/ratelimit makes up a random one)"
                    .into(),
            );
        }
        match self.get("TRACING_EXPORTER_PROTOCOL") {
            None | Some("http") => self.assign(
                &settings::tracing::TRACING_PROTOCOL,
                "http/protobuf".into(),
                "TRACING_EXPORTER_PROTOCOL",
            ),
            Some("grpc") => self.assign(
                &settings::tracing::TRACING_PROTOCOL,
                "grpc".into(),
                "TRACING_EXPORTER_PROTOCOL",
            ),
            Some(other) => self.fail(format!(
                "TRACING_EXPORTER_PROTOCOL: `{other}` is not an exporter protocol (http, grpc)"
            )),
        }
        let rate = self.get("TRACING_SAMPLING_RATE").unwrap_or("1");
        match rate.trim().parse::<f64>() {
            Ok(ratio) if (0.0..=1.0).contains(&ratio) => self.assign(
                &settings::tracing::TRACING_SAMPLING_RATIO,
                rate.trim().to_owned(),
                "TRACING_SAMPLING_RATE",
            ),
            _ => self.fail(format!(
                "TRACING_SAMPLING_RATE: `{rate}` is not a ratio from 0 to 1"
            )),
        }
    }
}

/// `host:port` to listen on: an IP address (`[v6]` bracketed), `localhost` as 127.0.0.1, an empty
/// host as every address. `None` for a host name.
fn listen_address(host: &str, port: u64) -> Option<String> {
    let host = match host {
        "" => "0.0.0.0",
        "localhost" => "127.0.0.1",
        host => host.trim_start_matches('[').trim_end_matches(']'),
    };
    match host.parse::<IpAddr>().ok()? {
        IpAddr::V4(ip) => Some(format!("{ip}:{port}")),
        IpAddr::V6(ip) => Some(format!("[{ip}]:{port}")),
    }
}

/// Whether a `REDIS_URL` read as a socket path is rather `host:port`: no `/`, and a port after
/// the last `:`.
fn looks_like_host_port(url: &str) -> bool {
    !url.contains('/')
        && url
            .rsplit_once(':')
            .is_some_and(|(_, port)| !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()))
}

/// `REDIS_AUTH`: `password`, or `user:password` (as upstream splits it).
fn credentials(auth: &str) -> (Option<String>, String) {
    match auth.split_once(':') {
        Some((user, password)) => (Some(user.to_owned()), password.to_owned()),
        None => (None, auth.to_owned()),
    }
}

/// The URL of a single server at upstream's `REDIS_URL` (`host:port`, or a socket path).
fn single_url(
    address: &str,
    unix: bool,
    tls: bool,
    skip_verification: bool,
    auth: Option<&(Option<String>, String)>,
) -> String {
    if unix {
        let mut url = format!("unix://{address}");
        if let Some((user, password)) = auth {
            url.push_str("?pass=");
            url.push_str(&percent_encode(password));
            if let Some(user) = user {
                url.push_str("&user=");
                url.push_str(&percent_encode(user));
            }
        }
        return url;
    }
    let scheme = if tls { "rediss" } else { "redis" };
    let userinfo = match auth {
        None => String::new(),
        Some((user, password)) => format!(
            "{}:{}@",
            user.as_deref().map(percent_encode).unwrap_or_default(),
            percent_encode(password)
        ),
    };
    let fragment = if skip_verification { "#insecure" } else { "" };
    format!("{scheme}://{userinfo}{address}{fragment}")
}

/// Percent-encodes everything but unreserved characters (RFC 3986), for URL user info.
fn percent_encode(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

#[cfg(test)]
mod tests;
