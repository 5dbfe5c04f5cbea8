//! What the tracing pipeline is built from: the `--tracing*` flags resolved against the standard
//! OpenTelemetry variables.

use std::fmt;
use std::time::Duration;

/// The OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP/gRPC (`TraceService/Export`), by default to `http://localhost:4317`.
    Grpc,
    /// OTLP/HTTP with protobuf bodies, by default to `http://localhost:4318/v1/traces`.
    HttpProtobuf,
}

impl Protocol {
    /// Reads the names of `OTEL_EXPORTER_OTLP_PROTOCOL` (`grpc`, `http/protobuf`); `http/json`
    /// is refused by name (the exporter is built without it).
    pub fn parse(text: &str) -> Result<Protocol, String> {
        match text.trim() {
            "grpc" => Ok(Protocol::Grpc),
            "http/protobuf" => Ok(Protocol::HttpProtobuf),
            "http/json" => {
                Err("`http/json` is not supported; use `http/protobuf` or `grpc`".into())
            }
            other => Err(format!(
                "`{other}` is not an OTLP protocol (expected grpc or http/protobuf)"
            )),
        }
    }

    /// The name `OTEL_EXPORTER_OTLP_PROTOCOL` uses.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Grpc => "grpc",
            Protocol::HttpProtobuf => "http/protobuf",
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The protocol when neither the flag nor a variable names one: the OpenTelemetry specification's
/// default, and envoyproxy/ratelimit's (`TRACING_EXPORTER_PROTOCOL=http`).
pub const DEFAULT_PROTOCOL: Protocol = Protocol::HttpProtobuf;

/// `service.name` when neither the flag, `OTEL_SERVICE_NAME` nor `OTEL_RESOURCE_ATTRIBUTES`
/// names the service.
pub const DEFAULT_SERVICE_NAME: &str = "ratelimitd";

/// A resolved tracing configuration. Fields left `None` are resolved by the OpenTelemetry SDK
/// and exporter from the standard variables, as their documentation says:
/// `OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT`, `_HEADERS`, `_TIMEOUT`, `_COMPRESSION`, `_INSECURE`,
/// `OTEL_TRACES_SAMPLER[_ARG]`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_BSP_*`.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceSettings {
    pub protocol: Protocol,
    /// The full URL spans are sent to (as `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`: for
    /// http/protobuf, nothing is appended).
    pub endpoint: Option<String>,
    /// How long one export may take.
    pub timeout: Option<Duration>,
    /// Parent-based ratio sampling: a call with a sampled parent is sampled, one with an
    /// unsampled parent is not, and a root call is sampled with this probability.
    pub sampling_ratio: Option<f64>,
    /// `service.name`, when the variables do not say it (see [`DEFAULT_SERVICE_NAME`]).
    pub service_name: Option<String>,
    /// Resource attributes added to those of `OTEL_RESOURCE_ATTRIBUTES`.
    pub resource_attributes: Vec<(String, String)>,
    /// Record each descriptor's entries, values included, on the call's span.
    pub descriptor_values: bool,
    /// Most finished spans waiting for export; more are dropped.
    pub queue_size: Option<usize>,
}

impl TraceSettings {
    /// Settings for `protocol` with everything else left to the variables.
    pub fn new(protocol: Protocol) -> TraceSettings {
        TraceSettings {
            protocol,
            endpoint: None,
            timeout: None,
            sampling_ratio: None,
            service_name: None,
            resource_attributes: Vec::new(),
            descriptor_values: false,
            queue_size: None,
        }
    }
}

/// The protocol that `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`, else `OTEL_EXPORTER_OTLP_PROTOCOL`,
/// names through `env`; an unknown name is an error naming the variable.
pub fn protocol_from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<Option<Protocol>, String> {
    for variable in [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ] {
        if let Some(value) = env(variable).filter(|value| !value.trim().is_empty()) {
            return Protocol::parse(&value)
                .map(Some)
                .map_err(|error| format!("{variable}: {error}"));
        }
    }
    Ok(None)
}

/// Whether the variables name the service (`OTEL_SERVICE_NAME`, or `service.name` in
/// `OTEL_RESOURCE_ATTRIBUTES`), which the SDK then reads itself.
pub fn service_named_by_env(env: &dyn Fn(&str) -> Option<String>) -> bool {
    let named = |value: Option<String>| value.is_some_and(|value| !value.trim().is_empty());
    named(env("OTEL_SERVICE_NAME"))
        || env("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|attributes| {
            attributes
                .split(',')
                .filter_map(|pair| pair.split_once('='))
                .any(|(key, value)| key.trim() == "service.name" && !value.trim().is_empty())
        })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn the_traces_protocol_variable_wins_over_the_general_one() {
        let both = env(&[
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc"),
        ]);
        assert_eq!(protocol_from_env(&both), Ok(Some(Protocol::Grpc)));
        let general = env(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]);
        assert_eq!(protocol_from_env(&general), Ok(Some(Protocol::Grpc)));
        assert_eq!(protocol_from_env(&env(&[])), Ok(None));
    }

    #[test]
    fn an_unknown_protocol_names_its_variable() {
        let json = env(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")]);
        let error = protocol_from_env(&json).unwrap_err();
        assert!(
            error.starts_with("OTEL_EXPORTER_OTLP_PROTOCOL: "),
            "{error}"
        );
        assert!(error.contains("http/protobuf"), "{error}");
    }

    #[test]
    fn the_service_is_named_by_either_variable() {
        assert!(service_named_by_env(&env(&[("OTEL_SERVICE_NAME", "rl")])));
        assert!(service_named_by_env(&env(&[(
            "OTEL_RESOURCE_ATTRIBUTES",
            "team=edge, service.name=rl"
        )])));
        assert!(!service_named_by_env(&env(&[(
            "OTEL_RESOURCE_ATTRIBUTES",
            "team=edge"
        )])));
        assert!(!service_named_by_env(&env(&[])));
    }
}
