//! The status page (`GET /` on the HTTP port): how often it samples and how much it lists.

use std::time::Duration;

use crate::service::status_page::StatusPageSettings;

/// Shortest `--status-page-sample-interval`.
const MIN_SAMPLE_INTERVAL: Duration = Duration::from_secs(1);
/// Longest `--status-page-sample-interval`.
const MAX_SAMPLE_INTERVAL: Duration = Duration::from_secs(600);

/// Status page (docs/operations/http-endpoints.md, "The status page").
#[derive(clap::Args)]
pub struct StatusPageArgs {
    #[arg(long, value_parser = sample_interval)]
    status_page_sample_interval: Duration,
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=StatusPageSettings::MAX_RULES as i64))]
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
