//! The export pipeline: OTLP exporter, batching tracer provider, and the subscriber layer that
//! turns the request spans into OpenTelemetry spans.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry::KeyValue;
use opentelemetry_otlp::{SpanExporter, WithExportConfig};
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Config, Sampler, SdkTracerProvider, ShouldSample,
};
use opentelemetry_sdk::Resource;
use tracing::Subscriber;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

use super::export_failures::Reported;
use super::sampling::{self, EdgeIdGenerator};
use super::settings::{Protocol, TraceSettings};
use super::span_target::SPAN_TARGET;

/// Set while a pipeline runs: the request path looks at nothing else to know whether to build
/// spans at all.
static RUNNING: AtomicBool = AtomicBool::new(false);
/// `--tracing-descriptor-values` of the running pipeline.
static DESCRIPTOR_VALUES: AtomicBool = AtomicBool::new(false);

/// Whether a pipeline exports spans.
#[inline]
pub(crate) fn is_running() -> bool {
    RUNNING.load(Ordering::Relaxed)
}

/// Whether the running pipeline records descriptor values (`--tracing-descriptor-values`).
#[inline]
pub(crate) fn records_descriptor_values() -> bool {
    DESCRIPTOR_VALUES.load(Ordering::Relaxed)
}

/// How long [`Pipeline::shutdown`] waits for the last export.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// A running export pipeline. Spans reach it through [`Pipeline::layer`]; finished spans are
/// batched on the SDK's own thread and exported from there.
pub struct Pipeline {
    provider: SdkTracerProvider,
    /// The gRPC exporter's connection lives on a runtime of its own, so exports never run on a
    /// serving thread. `None` for http/protobuf, whose blocking client has its own thread.
    export_runtime: Option<tokio::runtime::Runtime>,
    settings: TraceSettings,
}

impl Pipeline {
    /// Builds the pipeline `settings` describe; `None` gives `None` (tracing off). Errors say
    /// which setting is wrong (an endpoint that is not a URL, ...).
    pub fn start(settings: Option<TraceSettings>) -> Result<Option<Pipeline>, String> {
        let Some(settings) = settings else {
            return Ok(None);
        };
        let (exporter, export_runtime) = exporter(&settings)?;
        let mut batch = BatchConfigBuilder::default();
        if let Some(size) = settings.queue_size {
            batch = batch.with_max_queue_size(size);
        }
        let processor = BatchSpanProcessor::builder(Reported::new(exporter))
            .with_batch_config(batch.build())
            .build();
        // Calls are sampled at the edge (see `sampling`): what reaches the provider is kept.
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_resource(resource(&settings))
            .with_sampler(Sampler::AlwaysOn)
            .with_id_generator(EdgeIdGenerator::default())
            .build();
        sampling::install(Some(sampler(&settings)));
        RUNNING.store(true, Ordering::Relaxed);
        DESCRIPTOR_VALUES.store(settings.descriptor_values, Ordering::Relaxed);
        Ok(Some(Pipeline {
            provider,
            export_runtime,
            settings,
        }))
    }

    /// The subscriber layer exporting the request spans (target [`SPAN_TARGET`]) and nothing
    /// else.
    pub fn layer<S>(&self) -> Box<dyn Layer<S> + Send + Sync>
    where
        S: Subscriber + for<'span> LookupSpan<'span> + Send + Sync,
    {
        let tracer = self.provider.tracer(env!("CARGO_PKG_NAME"));
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_location(false)
            .with_threads(false)
            .with_target(false)
            .with_tracked_inactivity(false)
            .with_context_activation(false)
            .with_filter(Targets::new().with_target(SPAN_TARGET, tracing::Level::TRACE))
            .boxed()
    }

    /// One line for the startup log: where spans go.
    pub fn describe(&self) -> String {
        format!(
            "tracing: OTLP {} to {}, sampling {}",
            self.settings.protocol,
            self.settings
                .endpoint
                .as_deref()
                .unwrap_or("the OTEL_EXPORTER_OTLP_* endpoint or the default"),
            match self.settings.sampling_ratio {
                Some(ratio) => format!("parent-based ratio {ratio}"),
                None => "as OTEL_TRACES_SAMPLER says (default: parent-based, always on)".into(),
            }
        )
    }

    /// Exports what is still queued (waiting at most a few seconds) and stops.
    pub fn shutdown(self) {
        RUNNING.store(false, Ordering::Relaxed);
        sampling::install(None);
        if let Err(error) = self.provider.shutdown_with_timeout(SHUTDOWN_TIMEOUT) {
            tracing::warn!(%error, "tracing: the last spans were not all exported");
        }
        if let Some(runtime) = self.export_runtime {
            runtime.shutdown_timeout(Duration::from_secs(1));
        }
    }
}

/// The sampler calls are decided by: parent-based at `--tracing-sampling-ratio`, else what
/// `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG` name, read by the SDK (default:
/// parent-based, always on).
fn sampler(settings: &TraceSettings) -> Box<dyn ShouldSample> {
    match settings.sampling_ratio {
        Some(ratio) => Box::new(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            ratio,
        )))),
        None => Config::default().sampler,
    }
}

/// The OTLP exporter of `settings.protocol`, and the runtime a gRPC exporter runs on.
fn exporter(
    settings: &TraceSettings,
) -> Result<(SpanExporter, Option<tokio::runtime::Runtime>), String> {
    let failed = |error: opentelemetry_otlp::ExporterBuildError| {
        format!(
            "tracing: cannot build the OTLP {} exporter: {error}",
            settings.protocol
        )
    };
    match settings.protocol {
        Protocol::Grpc => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("otlp-export")
                .enable_all()
                .build()
                .map_err(|error| format!("tracing: cannot start the export runtime: {error}"))?;
            let exporter = {
                let _entered = runtime.enter();
                let mut builder = SpanExporter::builder().with_tonic();
                if let Some(endpoint) = &settings.endpoint {
                    builder = builder.with_endpoint(endpoint);
                }
                if let Some(timeout) = settings.timeout {
                    builder = builder.with_timeout(timeout);
                }
                builder.build().map_err(failed)?
            };
            Ok((exporter, Some(runtime)))
        }
        Protocol::HttpProtobuf => {
            // The exporter's client speaks TLS through rustls with the process's provider.
            let _ = rustls::crypto::ring::default_provider().install_default();
            let mut builder = SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary);
            if let Some(endpoint) = &settings.endpoint {
                builder = builder.with_endpoint(endpoint);
            }
            if let Some(timeout) = settings.timeout {
                builder = builder.with_timeout(timeout);
            }
            Ok((builder.build().map_err(failed)?, None))
        }
    }
}

/// The SDK's resource (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, the SDK's own) with the
/// settings' name and attributes on top.
fn resource(settings: &TraceSettings) -> Resource {
    let mut builder = Resource::builder();
    if let Some(name) = &settings.service_name {
        builder = builder.with_service_name(name.clone());
    }
    builder
        .with_attributes(
            settings
                .resource_attributes
                .iter()
                .map(|(key, value)| KeyValue::new(key.clone(), value.clone())),
        )
        .build()
}
