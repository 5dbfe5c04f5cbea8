//! The settings of `serve --help-all`'s "Configuration" group.

use super::setting::{Convert, Group, Setting, Upstream, Value};
use crate::config;
use crate::config::xds::XdsOptions;

/// Every setting of the group, in the order of the help.
pub static ALL: &[&Setting] = &[
    &CONFIG,
    &CONFIG_LAYOUT,
    &CONFIG_IGNORE_DOTFILES,
    &MERGE_DOMAIN_CONFIG,
    &MAX_CONFIG_FILE_BYTES,
    &MAX_CONFIG_ALIAS_BYTES,
    &CONFIG_SOURCE,
    &XDS_SERVER,
    &XDS_NODE_ID,
    &XDS_NODE_CLUSTER,
    &XDS_NODE_METADATA,
    &XDS_HEADERS,
    &XDS_TLS,
    &XDS_TLS_CA,
    &XDS_TLS_CERT,
    &XDS_TLS_KEY,
    &XDS_TLS_SAN,
    &XDS_CONNECT_RETRY_INTERVAL,
    &XDS_BACKOFF_INITIAL,
    &XDS_BACKOFF_MAX,
    &XDS_BACKOFF_RANDOM_FACTOR,
    &XDS_BACKOFF_JITTER,
    &XDS_MAX_MESSAGE_BYTES,
    &XDS_RESPONSE_TIMEOUT,
    &RELOAD_INTERVAL,
    &FORCE_START_WITHOUT_INITIAL_CONFIG,
    &HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED,
];

pub const CONFIG: Setting = Setting {
    flag: "config",
    variable: "RATELIMITD_CONFIG",
    group: Group::Configuration,
    essential: true,
    default: Value::Unset,
    drop_in_default: Some("/srv/runtime_data/current/config"),
    upstream: Upstream::Derived(&[
        "RUNTIME_ROOT",
        "RUNTIME_SUBDIRECTORY",
        "RUNTIME_APPDIRECTORY",
    ]),
    help: "Configuration file, or directory of *.yaml / *.yml files (repeatable). Needed unless \
        the configuration comes from an xDS server (--config-source xds) or, in drop-in mode \
        (neither this nor --config-source given), from envoyproxy/ratelimit's \
        $RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/$RUNTIME_APPDIRECTORY (see docs/migration.md).",
};

pub const CONFIG_LAYOUT: Setting = Setting {
    flag: "config-layout",
    variable: "RATELIMITD_CONFIG_LAYOUT",
    group: Group::Configuration,
    essential: false,
    default: Value::Text("files"),
    drop_in_default: Some("runtime"),
    upstream: Upstream::Derived(&[
        "RUNTIME_ROOT",
        "RUNTIME_SUBDIRECTORY",
        "RUNTIME_APPDIRECTORY",
    ]),
    help: "How configuration directories are read: files (their own *.yaml / *.yml files, names \
        starting with `.` skipped) or runtime (every file, in subdirectories too, as \
        envoyproxy/ratelimit reads $RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/$RUNTIME_APPDIRECTORY).",
};

pub const CONFIG_IGNORE_DOTFILES: Setting = Setting {
    flag: "config-ignore-dotfiles",
    variable: "RATELIMITD_CONFIG_IGNORE_DOTFILES",
    group: Group::Configuration,
    essential: false,
    default: Value::Unset,
    drop_in_default: Some("false"),
    upstream: Upstream::Variable("RUNTIME_IGNOREDOTFILES", Convert::Bool),
    help: "With --config-layout runtime: skip files and directories whose names start with `.` \
        (envoyproxy/ratelimit's RUNTIME_IGNOREDOTFILES).",
};

pub const MERGE_DOMAIN_CONFIG: Setting = Setting {
    flag: "merge-domain-config",
    variable: "RATELIMITD_MERGE_DOMAIN_CONFIG",
    group: Group::Configuration,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::Variable("MERGE_DOMAIN_CONFIG", Convert::Bool),
    help: "Merge configuration files that name the same domain (a top-level descriptor defined \
        in two of them is an error); without it, a domain in two files is an error.",
};

pub const MAX_CONFIG_FILE_BYTES: Setting = Setting {
    flag: "max-config-file-bytes",
    variable: "RATELIMITD_MAX_CONFIG_FILE_BYTES",
    group: Group::Configuration,
    essential: false,
    default: Value::Of(|| config::ConfigBounds::DEFAULT_MAX_FILE_BYTES.to_string()),
    drop_in_default: None,
    upstream: Upstream::None,
    help: "Largest configuration file, in bytes (checked before the file is opened).",
};

pub const MAX_CONFIG_ALIAS_BYTES: Setting = Setting {
    flag: "max-config-alias-bytes",
    variable: "RATELIMITD_MAX_CONFIG_ALIAS_BYTES",
    group: Group::Configuration,
    essential: false,
    default: Value::Of(|| config::ConfigBounds::DEFAULT_MAX_ALIAS_BYTES.to_string()),
    drop_in_default: None,
    upstream: Upstream::None,
    help: "Most bytes of scalars the YAML aliases (`*name`) of one file may add when expanded.",
};

pub const CONFIG_SOURCE: Setting = Setting {
    flag: "config-source",
    variable: "RATELIMITD_CONFIG_SOURCE",
    group: Group::Configuration,
    essential: true,
    default: Value::Text("file"),
    drop_in_default: None,
    upstream: Upstream::Derived(&["CONFIG_TYPE"]),
    help: "Where the configuration comes from: `file` (--config) or `xds` (--xds-server).",
};

pub const XDS_SERVER: Setting = Setting {
    flag: "xds-server",
    variable: "RATELIMITD_XDS_SERVER",
    group: Group::Configuration,
    essential: true,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::Variable("CONFIG_GRPC_XDS_SERVER_URL", Convert::Same),
    help: "The xDS management server, HOST:PORT (with --config-source xds).",
};

pub const XDS_NODE_ID: Setting = Setting {
    flag: "xds-node-id",
    variable: "RATELIMITD_XDS_NODE_ID",
    group: Group::Configuration,
    essential: false,
    default: Value::Text("default"),
    drop_in_default: None,
    upstream: Upstream::Variable("CONFIG_GRPC_XDS_NODE_ID", Convert::Same),
    help: "The node id sent to the xDS server (it picks the configuration by it).",
};

pub const XDS_NODE_CLUSTER: Setting = Setting {
    flag: "xds-node-cluster",
    variable: "RATELIMITD_XDS_NODE_CLUSTER",
    group: Group::Configuration,
    essential: false,
    default: Value::Text(""),
    drop_in_default: None,
    upstream: Upstream::None,
    help: "The node cluster sent to the xDS server (not sent when empty).",
};

pub const XDS_NODE_METADATA: Setting = Setting {
    flag: "xds-node-metadata",
    variable: "RATELIMITD_XDS_NODE_METADATA",
    group: Group::Configuration,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::Variable("CONFIG_GRPC_XDS_NODE_METADATA", Convert::Same),
    help: "Node metadata sent to the xDS server, KEY=VALUE (repeatable, or comma-separated).",
};

pub const XDS_HEADERS: Setting = Setting {
    flag: "xds-header",
    variable: "RATELIMITD_XDS_HEADERS",
    group: Group::Configuration,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::Variable("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", Convert::Same),
    help: "A header added to the xDS stream, NAME:VALUE (repeatable, or comma-separated).",
};

pub const XDS_TLS: Setting = Setting {
    flag: "xds-tls",
    variable: "RATELIMITD_XDS_TLS",
    group: Group::Configuration,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::Variable("CONFIG_GRPC_XDS_SERVER_USE_TLS", Convert::Bool),
    help: "Connect to the xDS server over TLS.",
};

pub const XDS_TLS_CA: Setting = Setting {
    flag: "xds-tls-ca",
    variable: "RATELIMITD_XDS_TLS_CA",
    group: Group::Configuration,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::Variable("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", Convert::Same),
    help: "PEM CA certificates the xDS server's certificate must lead to (default: the public \
        web roots).",
};

pub const XDS_TLS_CERT: Setting = Setting {
    flag: "xds-tls-cert",
    variable: "RATELIMITD_XDS_TLS_CERT",
    group: Group::Configuration,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::Variable("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", Convert::Same),
    help: "PEM client certificate for mutual TLS (Envoy Gateway's control plane requires one).",
};

pub const XDS_TLS_KEY: Setting = Setting {
    flag: "xds-tls-key",
    variable: "RATELIMITD_XDS_TLS_KEY",
    group: Group::Configuration,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::Variable("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", Convert::Same),
    help: "PEM key of --xds-tls-cert.",
};

pub const XDS_TLS_SAN: Setting = Setting {
    flag: "xds-tls-san",
    variable: "RATELIMITD_XDS_TLS_SAN",
    group: Group::Configuration,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::Variable("CONFIG_GRPC_XDS_SERVER_TLS_SAN", Convert::Same),
    help: "The name the xDS server's certificate must carry (and the SNI); default: the host of \
        --xds-server.",
};

pub const XDS_CONNECT_RETRY_INTERVAL: Setting = Setting {
    flag: "xds-connect-retry-interval",
    variable: "RATELIMITD_XDS_CONNECT_RETRY_INTERVAL",
    group: Group::Configuration,
    essential: false,
    default: Value::Text("3s"),
    drop_in_default: None,
    upstream: Upstream::Variable(
        "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
        Convert::Duration,
    ),
    help: "Wait between attempts while the xDS server cannot be reached at all (± 50 %).",
};

pub const XDS_BACKOFF_INITIAL: Setting = Setting {
    flag: "xds-backoff-initial",
    variable: "RATELIMITD_XDS_BACKOFF_INITIAL",
    group: Group::Configuration,
    essential: false,
    default: Value::Text("10s"),
    drop_in_default: None,
    upstream: Upstream::Variable("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", Convert::Duration),
    help: "First wait before reconnecting after an xDS stream ended; each further wait doubles.",
};

pub const XDS_BACKOFF_MAX: Setting = Setting {
    flag: "xds-backoff-max",
    variable: "RATELIMITD_XDS_BACKOFF_MAX",
    group: Group::Configuration,
    essential: false,
    default: Value::Text("60s"),
    drop_in_default: None,
    upstream: Upstream::Variable("XDS_CLIENT_BACKOFF_MAX_INTERVAL", Convert::Duration),
    help: "Longest wait before reconnecting to the xDS server.",
};

pub const XDS_BACKOFF_RANDOM_FACTOR: Setting = Setting {
    flag: "xds-backoff-random-factor",
    variable: "RATELIMITD_XDS_BACKOFF_RANDOM_FACTOR",
    group: Group::Configuration,
    essential: false,
    default: Value::Text("0.5"),
    drop_in_default: None,
    upstream: Upstream::Variable("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", Convert::Same),
    help: "With --xds-backoff-jitter, each wait is drawn from wait × (1 ± this factor), 0 to 1.",
};

pub const XDS_BACKOFF_JITTER: Setting = Setting {
    flag: "xds-backoff-jitter",
    variable: "RATELIMITD_XDS_BACKOFF_JITTER",
    group: Group::Configuration,
    essential: false,
    default: Value::Text("true"),
    drop_in_default: None,
    upstream: Upstream::Variable("XDS_CLIENT_BACKOFF_JITTER", Convert::Bool),
    help: "Randomize the reconnect waits (true or false).",
};

pub const XDS_MAX_MESSAGE_BYTES: Setting = Setting {
    flag: "xds-max-message-bytes",
    variable: "RATELIMITD_XDS_MAX_MESSAGE_BYTES",
    group: Group::Configuration,
    essential: false,
    default: Value::Of(|| XdsOptions::DEFAULT_MAX_MESSAGE_BYTES.to_string()),
    drop_in_default: None,
    upstream: Upstream::Variable("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", Convert::Same),
    help: "Largest xDS response accepted, bytes (a larger one ends the stream, which is \
        reopened).",
};

pub const XDS_RESPONSE_TIMEOUT: Setting = Setting {
    flag: "xds-response-timeout",
    variable: "RATELIMITD_XDS_RESPONSE_TIMEOUT",
    group: Group::Configuration,
    essential: false,
    default: Value::Text("30s"),
    drop_in_default: None,
    upstream: Upstream::None,
    help: "How long an xDS response may take to arrive whole once its first byte has (and the \
        first response while no configuration is in force, once the stream is open); past it the \
        stream is dropped and reopened. An idle stream has no deadline.",
};

pub const RELOAD_INTERVAL: Setting = Setting {
    flag: "reload-interval",
    variable: "RATELIMITD_RELOAD_INTERVAL",
    group: Group::Configuration,
    essential: false,
    default: Value::Text("1s"),
    drop_in_default: None,
    upstream: Upstream::None,
    help: "How often to check the configuration files for changes and reload them (`0s`: only \
        on SIGHUP). A configuration with errors is rejected and the running one stays.",
};

pub const FORCE_START_WITHOUT_INITIAL_CONFIG: Setting = Setting {
    flag: "force-start-without-initial-config",
    variable: "RATELIMITD_FORCE_START_WITHOUT_INITIAL_CONFIG",
    group: Group::Configuration,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::Variable("FORCE_START_WITHOUT_INITIAL_CONFIG", Convert::Bool),
    help: "Start even when the configuration does not load (its errors are logged): no domain \
        is configured until a valid one is loaded (envoyproxy/ratelimit's \
        FORCE_START_WITHOUT_INITIAL_CONFIG).",
};

pub const HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED: Setting = Setting {
    flag: "healthy-with-at-least-one-config-loaded",
    variable: "RATELIMITD_HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
    group: Group::Configuration,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::Variable("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", Convert::Bool),
    help: "Health is NOT_SERVING until a valid configuration has loaded (envoyproxy/ratelimit's \
        HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED; only differs with \
        --force-start-without-initial-config).",
};
