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
mod setting;
pub mod statsd;
pub mod status_page;
pub mod store;
pub mod telemetry;
pub mod top_values;
pub mod tracing;
pub mod transport_bounds;

pub use setting::{Convert, Group, Setting, Upstream, Value};

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
