//! The settings of `serve --help-all`'s "gRPC transport" group.

use super::setting::{Convert, Group, Setting, Upstream, Value};

/// Every setting of the group, in the order of the help.
pub static ALL: &[&Setting] = &[
    &GRPC_TLS_CERT,
    &GRPC_TLS_KEY,
    &GRPC_TLS_CLIENT_CA,
    &GRPC_TLS_CLIENT_SAN,
    &GRPC_UDS,
    &GRPC_UDS_MODE,
    &GRPC_MAX_CONNECTION_AGE,
    &GRPC_MAX_CONNECTION_AGE_GRACE,
];

pub const GRPC_TLS_CERT: Setting = Setting {
    flag: "grpc-tls-cert",
    variable: "RATELIMITD_GRPC_TLS_CERT",
    group: Group::GrpcTransport,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::Variable("GRPC_SERVER_TLS_CERT", Convert::Same),
    help: "PEM certificate chain of the gRPC port (with --grpc-tls-key): the port speaks TLS \
        only, ALPN h2. Reloaded when the file changes: new handshakes use the new certificate.",
};

pub const GRPC_TLS_KEY: Setting = Setting {
    flag: "grpc-tls-key",
    variable: "RATELIMITD_GRPC_TLS_KEY",
    group: Group::GrpcTransport,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::Variable("GRPC_SERVER_TLS_KEY", Convert::Same),
    help: "PEM private key of --grpc-tls-cert (PKCS#8, PKCS#1 or SEC1, unencrypted).",
};

pub const GRPC_TLS_CLIENT_CA: Setting = Setting {
    flag: "grpc-tls-client-ca",
    variable: "RATELIMITD_GRPC_TLS_CLIENT_CA",
    group: Group::GrpcTransport,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::Variable("GRPC_CLIENT_TLS_CACERT", Convert::Same),
    help: "PEM CA certificate(s): every client must present a certificate they signed (mutual \
        TLS), or its handshake is refused. Reloaded like the certificate.",
};

pub const GRPC_TLS_CLIENT_SAN: Setting = Setting {
    flag: "grpc-tls-client-san",
    variable: "RATELIMITD_GRPC_TLS_CLIENT_SAN",
    group: Group::GrpcTransport,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::Variable("GRPC_CLIENT_TLS_SAN", Convert::Same),
    help: "A Subject Alternative Name client certificates must also carry, of the type it \
        names: `dns:NAME`, `ip:ADDRESS` or `uri:URI` (e.g. a SPIFFE ID); untyped, its form decides \
        (an IP address, a value with a colon is a URI, anything else a DNS name).",
};

pub const GRPC_UDS: Setting = Setting {
    flag: "grpc-uds",
    variable: "RATELIMITD_GRPC_UDS",
    group: Group::GrpcTransport,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::Variable("GRPC_UDS", Convert::Same),
    help: "Serve gRPC on a unix domain socket at PATH instead of --grpc-addr. A leftover socket \
        there is removed first (any other file is refused); the socket is removed on exit.",
};

pub const GRPC_UDS_MODE: Setting = Setting {
    flag: "grpc-uds-mode",
    variable: "RATELIMITD_GRPC_UDS_MODE",
    group: Group::GrpcTransport,
    essential: false,
    default: Value::Text("0660"),
    drop_in_default: None,
    upstream: Upstream::None,
    help: "Permission bits of the --grpc-uds socket file (octal), set before it accepts \
        connections whatever the umask: connecting needs write permission, so 0660 lets the owner \
        and group connect, 0666 every local user.",
};

pub const GRPC_MAX_CONNECTION_AGE: Setting = Setting {
    flag: "grpc-max-connection-age",
    variable: "RATELIMITD_GRPC_MAX_CONNECTION_AGE",
    group: Group::GrpcTransport,
    essential: false,
    default: Value::Unset,
    drop_in_default: Some("24h"),
    upstream: Upstream::Variable("GRPC_MAX_CONNECTION_AGE", Convert::Duration),
    help: "Send each gRPC connection GOAWAY at this age (±10 % jitter), so clients reconnect \
        and spread over replicas. Default: no age limit.",
};

pub const GRPC_MAX_CONNECTION_AGE_GRACE: Setting = Setting {
    flag: "grpc-max-connection-age-grace",
    variable: "RATELIMITD_GRPC_MAX_CONNECTION_AGE_GRACE",
    group: Group::GrpcTransport,
    essential: false,
    default: Value::Unset,
    drop_in_default: Some("1h"),
    upstream: Upstream::Variable("GRPC_MAX_CONNECTION_AGE_GRACE", Convert::Duration),
    help: "After the GOAWAY of --grpc-max-connection-age, how long calls may run before the \
        connection is closed. Default: as long as they take.",
};
