//! What the settings table says of one setting.

/// One setting of `serve`.
#[derive(Debug)]
pub struct Setting {
    /// The long flag, without `--`.
    pub flag: &'static str,
    /// The `RATELIMITD_*` variable read when the flag is not given.
    pub variable: &'static str,
    /// Where `serve --help-all` lists it.
    pub group: Group,
    /// Shown by `serve --help` too: a setting needed to start (where the configuration comes
    /// from, the addresses, the store, the log).
    pub essential: bool,
    /// The value when neither the flag nor a variable gives one.
    pub default: Value,
    /// envoyproxy/ratelimit's default where a drop-in replacement of it needs a different one
    /// (see [`crate::envoyproxy_env`]: it applies these when the upstream variables are unset).
    pub drop_in_default: Option<&'static str>,
    /// The envoyproxy/ratelimit variables this setting is read from.
    pub upstream: Upstream,
    /// The help text: its first paragraph is the one-line help, all of it `--help-all`'s.
    pub help: &'static str,
}

/// A default value as the command line takes it.
#[derive(Debug, Clone, Copy)]
pub enum Value {
    /// No default: the setting is off, empty or computed at startup (its help says which).
    Unset,
    /// This text.
    Text(&'static str),
    /// A constant of the code that uses the setting, written out (so the two cannot drift).
    Of(fn() -> String),
}

impl Value {
    /// The default as text, if there is one.
    pub fn text(&self) -> Option<String> {
        match self {
            Value::Unset => None,
            Value::Text(text) => Some((*text).to_owned()),
            Value::Of(compute) => Some(compute()),
        }
    }
}

/// Where envoyproxy/ratelimit's environment feeds a setting.
#[derive(Debug, Clone, Copy)]
pub enum Upstream {
    /// Not read from envoyproxy/ratelimit's variables.
    None,
    /// One upstream variable's value, converted.
    Variable(&'static str, Convert),
    /// Computed from these upstream variables (and the mode) by [`crate::envoyproxy_env`],
    /// which says how beside the computation.
    Derived(&'static [&'static str]),
}

impl Upstream {
    /// The upstream variables read.
    pub fn variables(&self) -> &[&'static str] {
        match self {
            Upstream::None => &[],
            Upstream::Variable(name, _) => std::slice::from_ref(name),
            Upstream::Derived(names) => names,
        }
    }
}

/// How an upstream variable's value becomes the setting's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Convert {
    /// As it is.
    Same,
    /// A Go boolean (`strconv.ParseBool`: `1`, `t`, `TRUE`, ...) as `true` or `false`.
    Bool,
    /// A Go duration (`time.ParseDuration`: `1h30m`, `1.5s`, ...) as a duration flag value.
    Duration,
}

/// The groups of `serve --help-all`, in its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    Configuration,
    Listeners,
    GrpcTransport,
    Store,
    Health,
    RedisKeys,
    Leases,
    Responses,
    RequestBounds,
    TransportBounds,
    Rlqs,
    Telemetry,
    Statsd,
    Tracing,
    TopValues,
    StatusPage,
    Admin,
}

impl Group {
    /// The heading of the group in the help.
    pub fn heading(self) -> &'static str {
        match self {
            Group::Configuration => "Configuration",
            Group::Listeners => "Listeners",
            Group::GrpcTransport => "gRPC transport",
            Group::Store => "Store and Redis",
            Group::Health => "Health",
            Group::RedisKeys => "Redis keys",
            Group::Leases => "Leases for hot keys",
            Group::Responses => "Responses",
            Group::RequestBounds => "Request limits",
            Group::TransportBounds => "Limits",
            Group::Rlqs => "RLQS (Envoy's rate_limit_quota filter)",
            Group::Telemetry => "Telemetry",
            Group::Statsd => "Statsd",
            Group::Tracing => "Tracing",
            Group::TopValues => "Top limited values",
            Group::StatusPage => "Status page",
            Group::Admin => "Admin actions",
        }
    }
}
