//! The status page (`GET /` on the HTTP port): how often it samples and how much it lists.

use std::time::Duration;

use crate::service::status_page::StatusPageSettings;

/// Shortest `--status-page-sample-interval`.
const MIN_SAMPLE_INTERVAL: Duration = Duration::from_secs(1);
/// Longest `--status-page-sample-interval`.
const MAX_SAMPLE_INTERVAL: Duration = Duration::from_secs(600);

/// Status page (docs/operations/http-endpoints.md, "The status page").
#[derive(clap::Args)]
#[command(next_help_heading = "Status page")]
pub struct StatusPageArgs {
    /// How often the status page samples the per-rule counters for its charts (1s to 10m); it
    /// keeps 90 samples, 15 minutes at the default.
    #[arg(long, env = "RATELIMITD_STATUS_PAGE_SAMPLE_INTERVAL", default_value = "10s", value_parser = sample_interval)]
    status_page_sample_interval: Duration,
    /// Most rules, rule charts, top rules and RLQS buckets GET /status.json lists (1 to 1000).
    #[arg(long, env = "RATELIMITD_STATUS_PAGE_MAX_RULES", default_value_t = StatusPageSettings::DEFAULT_MAX_RULES as u32, value_parser = clap::value_parser!(u32).range(1..=StatusPageSettings::MAX_RULES as i64))]
    status_page_max_rules: u32,
}

impl StatusPageArgs {
    pub fn settings(&self) -> StatusPageSettings {
        StatusPageSettings {
            sample_interval: self.status_page_sample_interval,
            max_rules: self.status_page_max_rules as usize,
        }
    }
}

fn sample_interval(text: &str) -> Result<Duration, String> {
    let interval = humantime::parse_duration(text).map_err(|error| error.to_string())?;
    if !(MIN_SAMPLE_INTERVAL..=MAX_SAMPLE_INTERVAL).contains(&interval)
        || interval.subsec_nanos() != 0
    {
        return Err("takes whole seconds from 1s to 10m".to_owned());
    }
    Ok(interval)
}
