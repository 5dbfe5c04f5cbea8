//! The `--tracing*` flags of `serve`.

use std::time::Duration;

use super::parse;
use crate::otel::settings::{
    protocol_from_env, service_named_by_env, Protocol, TraceSettings, DEFAULT_PROTOCOL,
    DEFAULT_SERVICE_NAME,
};

/// OpenTelemetry tracing of `ShouldRateLimit` calls, exported over OTLP. Off unless `--tracing`.
/// A flag left out defers to the standard `OTEL_*` variable named in its help, then to the
/// default.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TracingArgs {
    #[arg(long = "tracing")]
    pub enabled: bool,
    #[arg(long = "tracing-protocol", value_name = "PROTOCOL", value_parser = Protocol::parse)]
    pub protocol: Option<Protocol>,
    #[arg(long = "tracing-endpoint", value_name = "URL")]
    pub endpoint: Option<String>,
    #[arg(long = "tracing-timeout", value_parser = parse::positive_duration)]
    pub timeout: Option<Duration>,
    #[arg(long = "tracing-sampling-ratio", value_name = "RATIO", value_parser = parse_sampling_ratio)]
    pub sampling_ratio: Option<f64>,
    #[arg(long = "tracing-service-name", value_name = "NAME")]
    pub service_name: Option<String>,
    #[arg(long = "tracing-resource-attribute", value_name = "KEY=VALUE", value_delimiter = ',', value_parser = parse_attribute)]
    pub resource_attributes: Vec<(String, String)>,
    #[arg(long = "tracing-descriptor-values")]
    pub descriptor_values: bool,
    #[arg(long = "tracing-queue-size", value_name = "SPANS", value_parser = clap::value_parser!(u32).range(1..))]
    pub queue_size: Option<u32>,
}

impl TracingArgs {
    /// The pipeline's settings, `None` without `--tracing`; the `OTEL_*` variables are read from
    /// the process environment.
    pub fn settings(&self) -> Result<Option<TraceSettings>, String> {
        self.settings_with(&|name| std::env::var(name).ok())
    }

    /// As [`TracingArgs::settings`], reading the variables through `env`.
    pub fn settings_with(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<TraceSettings>, String> {
        if !self.enabled {
            return Ok(None);
        }
        let protocol = match self.protocol {
            Some(protocol) => protocol,
            None => protocol_from_env(env)?.unwrap_or(DEFAULT_PROTOCOL),
        };
        let service_name = self
            .service_name
            .clone()
            .or_else(|| (!service_named_by_env(env)).then(|| DEFAULT_SERVICE_NAME.to_owned()));
        Ok(Some(TraceSettings {
            protocol,
            endpoint: self.endpoint.clone().filter(|e| !e.is_empty()),
            timeout: self.timeout,
            sampling_ratio: self.sampling_ratio,
            service_name,
            resource_attributes: self.resource_attributes.clone(),
            descriptor_values: self.descriptor_values,
            queue_size: self.queue_size.map(|size| size as usize),
        }))
    }
}

fn parse_sampling_ratio(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(ratio) if (0.0..=1.0).contains(&ratio) => Ok(ratio),
        _ => Err(format!("`{text}` is not a ratio from 0 to 1")),
    }
}

fn parse_attribute(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => {
            Ok((key.trim().to_owned(), value.trim().to_owned()))
        }
        _ => Err(format!("`{text}` is not KEY=VALUE")),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Command {
        #[command(flatten)]
        tracing: TracingArgs,
    }

    fn parse(args: &[&str]) -> Result<TracingArgs, clap::Error> {
        let mut full = vec!["ratelimitd"];
        full.extend_from_slice(args);
        crate::cli::table::parse::<Command>(full).map(|command: Command| command.tracing)
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn off_without_the_flag_whatever_else_is_given() {
        let args = parse(&["--tracing-protocol", "grpc"]).unwrap();
        assert_eq!(args.settings_with(&no_env), Ok(None));
    }

    #[test]
    fn defaults_are_http_protobuf_and_the_service_named_ratelimitd() {
        let settings = parse(&["--tracing"])
            .unwrap()
            .settings_with(&no_env)
            .unwrap()
            .unwrap();
        assert_eq!(settings.protocol, Protocol::HttpProtobuf);
        assert_eq!(settings.service_name.as_deref(), Some("ratelimitd"));
        assert_eq!(settings.sampling_ratio, None);
        assert!(!settings.descriptor_values);
    }

    #[test]
    fn the_flag_wins_over_the_protocol_variable() {
        let env = |name: &str| (name == "OTEL_EXPORTER_OTLP_PROTOCOL").then(|| "grpc".to_owned());
        let from_env = parse(&["--tracing"]).unwrap().settings_with(&env).unwrap();
        assert_eq!(from_env.unwrap().protocol, Protocol::Grpc);
        let flag = parse(&["--tracing", "--tracing-protocol", "http/protobuf"])
            .unwrap()
            .settings_with(&env)
            .unwrap();
        assert_eq!(flag.unwrap().protocol, Protocol::HttpProtobuf);
    }

    #[test]
    fn otel_service_name_is_left_to_the_sdk() {
        let env = |name: &str| (name == "OTEL_SERVICE_NAME").then(|| "edge-rl".to_owned());
        let settings = parse(&["--tracing"]).unwrap().settings_with(&env).unwrap();
        assert_eq!(settings.unwrap().service_name, None);
    }

    #[test]
    fn bad_values_are_refused_by_the_parser() {
        for args in [
            ["--tracing-sampling-ratio", "1.5"],
            ["--tracing-sampling-ratio", "-0.1"],
            ["--tracing-protocol", "http/json"],
            ["--tracing-resource-attribute", "=x"],
            ["--tracing-timeout", "0s"],
            ["--tracing-queue-size", "0"],
        ] {
            assert!(parse(&args).is_err(), "{args:?} was accepted");
        }
    }

    #[test]
    fn resource_attributes_split_on_commas() {
        let args = parse(&[
            "--tracing-resource-attribute",
            "service.namespace=edge,service.instance.id=pod-1",
        ])
        .unwrap();
        assert_eq!(
            args.resource_attributes,
            vec![
                ("service.namespace".to_owned(), "edge".to_owned()),
                ("service.instance.id".to_owned(), "pod-1".to_owned()),
            ]
        );
    }
}
