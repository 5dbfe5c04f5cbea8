//! The pipeline of a build without the `otel` feature: `--tracing` is refused.

use tracing::Subscriber;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

use super::settings::TraceSettings;

/// Never built: this build has no exporter.
pub enum Pipeline {}

impl Pipeline {
    /// `Ok(None)` without settings; with them, an error saying the build has no tracing.
    pub fn start(settings: Option<TraceSettings>) -> Result<Option<Pipeline>, String> {
        match settings {
            None => Ok(None),
            Some(_) => Err(
                "--tracing: this ratelimitd was built without the `otel` feature (no OTLP exporter)"
                    .into(),
            ),
        }
    }

    /// Unreachable: there is no pipeline to take a layer from.
    pub fn layer<S>(&self) -> Box<dyn Layer<S> + Send + Sync>
    where
        S: Subscriber + for<'span> LookupSpan<'span> + Send + Sync,
    {
        match *self {}
    }

    /// Unreachable.
    pub fn describe(&self) -> String {
        match *self {}
    }

    /// Unreachable.
    pub fn shutdown(self) {
        match self {}
    }
}
