//! Every setting of `ratelimitd serve`, declared once: its flag, its `RATELIMITD_*` variable,
//! its group in the help, whether `serve --help` shows it, its default and its drop-in default,
//! the envoyproxy/ratelimit variables it is read from and how, and its help text.
//!
//! The table is data only. The command line completes its clap arguments from it
//! (`cli::table`: variable, default, help heading, help text; the clap derive keeps what makes a
//! value: its type and its parser); envoyproxy/ratelimit's environment is translated into the
//! variables it names ([`crate::envoyproxy_env`], which reads [`Upstream::Variable`] settings
//! through their [`Convert`]); the documentation's tables of flags and of upstream variables
//! are checked against it both ways (tests/it/settings_docs.rs).

pub mod admin;
pub mod configuration;
pub mod grpc_transport;
pub mod health;
pub mod leases;
pub mod listeners;
pub mod redis_keys;
pub mod request_bounds;
pub mod responses;
pub mod rlqs;
pub mod statsd;
pub mod status_page;
pub mod store;
pub mod telemetry;
pub mod top_values;
pub mod tracing;
pub mod transport_bounds;

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

/// Every setting, group by group.
pub fn all() -> impl Iterator<Item = &'static Setting> {
    [
        configuration::ALL,
        listeners::ALL,
        grpc_transport::ALL,
        store::ALL,
        health::ALL,
        redis_keys::ALL,
        leases::ALL,
        responses::ALL,
        request_bounds::ALL,
        transport_bounds::ALL,
        rlqs::ALL,
        telemetry::ALL,
        statsd::ALL,
        tracing::ALL,
        top_values::ALL,
        status_page::ALL,
        admin::ALL,
    ]
    .into_iter()
    .flatten()
    .copied()
}

/// The setting of a long flag.
pub fn by_flag(flag: &str) -> Option<&'static Setting> {
    all().find(|setting| setting.flag == flag)
}

/// The setting read from a `RATELIMITD_*` variable.
pub fn by_variable(variable: &str) -> Option<&'static Setting> {
    all().find(|setting| setting.variable == variable)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn flags_and_variables_are_unique_and_named_alike() {
        let mut flags = BTreeSet::new();
        let mut variables = BTreeSet::new();
        for setting in all() {
            assert!(flags.insert(setting.flag), "--{} twice", setting.flag);
            assert!(
                variables.insert(setting.variable),
                "{} twice",
                setting.variable
            );
            let expected = format!(
                "RATELIMITD_{}",
                setting.flag.to_ascii_uppercase().replace('-', "_")
            );
            // Repeatable flags name their variable in the plural: it holds the whole list.
            let plural = format!("{expected}S");
            assert!(
                setting.variable == expected || setting.variable == plural,
                "--{}: {}",
                setting.flag,
                setting.variable
            );
        }
    }

    #[test]
    fn every_group_has_settings_in_the_order_of_the_enum() {
        let mut last = 0;
        for setting in all() {
            let index = setting.group as usize;
            assert!(index >= last, "--{} out of its group's order", setting.flag);
            last = index;
        }
        assert_eq!(last, Group::Admin as usize);
    }

    #[test]
    fn a_drop_in_default_belongs_to_a_setting_read_from_upstream() {
        for setting in all().filter(|s| s.drop_in_default.is_some()) {
            assert!(
                !matches!(setting.upstream, Upstream::None),
                "--{}",
                setting.flag
            );
        }
    }
}
