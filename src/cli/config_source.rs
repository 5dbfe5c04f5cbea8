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
pub struct ConfigSourceArgs {
    #[arg(long = "config", value_delimiter = ',')]
    pub config: Vec<PathBuf>,
    #[arg(long, value_enum)]
    config_layout: ConfigLayout,
    #[arg(long)]
    config_ignore_dotfiles: bool,
    #[arg(long)]
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
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    max_config_file_bytes: u64,
    #[arg(long)]
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
pub struct InitialConfigArgs {
    #[arg(long)]
    force_start_without_initial_config: bool,
    #[arg(long)]
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
pub struct ReloadArgs {
    #[arg(long, value_parser = humantime::parse_duration)]
    reload_interval: Duration,
}

impl ReloadArgs {
    /// The reload period; `None` reloads on SIGHUP only.
    pub fn interval(&self) -> Option<Duration> {
        (!self.reload_interval.is_zero()).then_some(self.reload_interval)
    }
}
