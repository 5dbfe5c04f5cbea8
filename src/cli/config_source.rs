//! Where the configuration comes from and how it is read, for `serve` and `check`; what happens
//! while none has loaded; how often it is reloaded.

use std::path::PathBuf;
use std::time::Duration;

use clap::ValueEnum;

use crate::config;
use crate::server::InitialConfig;

/// How a configuration directory is read.
#[derive(Clone, Copy, ValueEnum)]
pub enum ConfigLayout {
    /// The directory's own *.yaml / *.yml files.
    Files,
    /// envoyproxy/ratelimit's runtime directory: every file, subdirectories included.
    Runtime,
}

/// Where the configuration is and how its directories are read, for `serve` and `check`.
#[derive(clap::Args)]
#[command(next_help_heading = "Configuration")]
pub struct ConfigSourceArgs {
    /// Configuration file, or directory of *.yaml / *.yml files (repeatable). Needed unless the
    /// configuration comes from an xDS server (--config-source xds) or, in drop-in mode (neither
    /// this nor --config-source given), from envoyproxy/ratelimit's
    /// $RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/$RUNTIME_APPDIRECTORY (see docs/migration.md).
    #[arg(long = "config", env = "RATELIMITD_CONFIG", value_delimiter = ',')]
    pub config: Vec<PathBuf>,
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
    pub bounds: ConfigBoundArgs,
}

impl ConfigSourceArgs {
    /// How files come together and directories are read; rules that do not say stay exact
    /// (`serve` sets `--consistency` over this, which cannot change what is valid).
    pub fn load_options(&self) -> config::LoadOptions {
        config::LoadOptions {
            merge_domains: self.merge_domain_config,
            layout: match self.config_layout {
                ConfigLayout::Files => config::DirectoryLayout::YamlFiles,
                ConfigLayout::Runtime => config::DirectoryLayout::RuntimeTree {
                    ignore_dotfiles: self.config_ignore_dotfiles,
                },
            },
            default_consistency: crate::limiter::Consistency::Exact,
        }
    }
}

/// Bounds on configuration files, for `serve` (at startup and every reload) and `check` alike.
#[derive(clap::Args)]
pub struct ConfigBoundArgs {
    /// Largest configuration file, in bytes (checked before the file is opened).
    #[arg(long, env = "RATELIMITD_MAX_CONFIG_FILE_BYTES", default_value_t = config::ConfigBounds::DEFAULT_MAX_FILE_BYTES, value_parser = clap::value_parser!(u64).range(1..))]
    max_config_file_bytes: u64,
    /// Most bytes of scalars the YAML aliases (`*name`) of one file may add when expanded.
    #[arg(long, env = "RATELIMITD_MAX_CONFIG_ALIAS_BYTES", default_value_t = config::ConfigBounds::DEFAULT_MAX_ALIAS_BYTES)]
    max_config_alias_bytes: u64,
}

impl ConfigBoundArgs {
    /// The bounds every configuration file is read within.
    pub fn bounds(&self) -> config::ConfigBounds {
        config::ConfigBounds {
            max_file_bytes: self.max_config_file_bytes,
            max_alias_bytes: self.max_config_alias_bytes,
        }
    }
}

/// What happens while no valid configuration has loaded.
#[derive(clap::Args)]
#[command(next_help_heading = "Configuration")]
pub struct InitialConfigArgs {
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

impl InitialConfigArgs {
    /// What to do until a configuration has loaded.
    pub fn initial_config(&self) -> InitialConfig {
        InitialConfig {
            force_start: self.force_start_without_initial_config,
            healthy_only_when_loaded: self.healthy_with_at_least_one_config_loaded,
        }
    }
}

/// How often the configuration is read again.
#[derive(clap::Args)]
#[command(next_help_heading = "Configuration")]
pub struct ReloadArgs {
    /// How often to check the configuration files for changes and reload them (`0s`: only on
    /// SIGHUP). A configuration with errors is rejected and the running one stays.
    #[arg(long, env = "RATELIMITD_RELOAD_INTERVAL", default_value = "1s", value_parser = humantime::parse_duration)]
    reload_interval: Duration,
}

impl ReloadArgs {
    /// The reload period; `None` reloads on SIGHUP only.
    pub fn interval(&self) -> Option<Duration> {
        (!self.reload_interval.is_zero()).then_some(self.reload_interval)
    }
}
