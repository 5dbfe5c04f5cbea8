//! The command line of the configuration source: files or an xDS server, and the xDS client's
//! settings.

use std::path::PathBuf;
use std::time::Duration;

use super::parse;
use crate::config::xds::{BackoffPolicy, NodeIdentity, XdsOptions, XdsTls};

/// Where the configuration comes from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ConfigSourceKind {
    /// Files and directories (--config), reloaded when they change.
    #[default]
    File,
    /// An xDS server (--xds-server) pushing RateLimitConfig resources, as Envoy Gateway's
    /// control plane does (envoyproxy/ratelimit's CONFIG_TYPE=GRPC_XDS_SOTW).
    Xds,
}

/// `--config-source` and the `--xds-*` flags.
#[derive(Debug, Clone, clap::Args)]
pub struct XdsArgs {
    #[arg(long, value_enum)]
    pub config_source: ConfigSourceKind,
    #[arg(long, value_name = "HOST:PORT")]
    pub xds_server: Option<String>,
    #[arg(long)]
    pub xds_node_id: String,
    #[arg(long)]
    pub xds_node_cluster: String,
    #[arg(long, value_delimiter = ',', value_name = "KEY=VALUE", value_parser = parse_metadata)]
    pub xds_node_metadata: Vec<(String, String)>,
    #[arg(long = "xds-header", value_delimiter = ',', value_name = "NAME:VALUE", value_parser = parse_header)]
    pub xds_headers: Vec<(String, String)>,
    #[arg(long)]
    pub xds_tls: bool,
    #[arg(long, requires = "xds_tls")]
    pub xds_tls_ca: Option<PathBuf>,
    #[arg(long, requires_all = ["xds_tls", "xds_tls_key"])]
    pub xds_tls_cert: Option<PathBuf>,
    #[arg(long, requires_all = ["xds_tls", "xds_tls_cert"])]
    pub xds_tls_key: Option<PathBuf>,
    #[arg(long, requires = "xds_tls")]
    pub xds_tls_san: Option<String>,
    #[arg(long, value_parser = parse::positive_duration)]
    pub xds_connect_retry_interval: Duration,
    #[arg(long, value_parser = parse::positive_duration)]
    pub xds_backoff_initial: Duration,
    #[arg(long, value_parser = parse::positive_duration)]
    pub xds_backoff_max: Duration,
    #[arg(long, value_parser = parse_factor)]
    pub xds_backoff_random_factor: f64,
    #[arg(long, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub xds_backoff_jitter: bool,
    #[arg(long, value_parser = parse_message_bytes)]
    pub xds_max_message_bytes: usize,
    #[arg(long, value_parser = parse::positive_duration)]
    pub xds_response_timeout: Duration,
}

impl XdsArgs {
    /// The xDS client's options with `--config-source xds`; `None` with `file`. `config` is
    /// what `--config` named: required with files, refused with xDS, as is an xDS server with
    /// files.
    pub fn options(&self, config: &[PathBuf]) -> Result<Option<XdsOptions>, String> {
        match self.config_source {
            ConfigSourceKind::File => {
                if self.xds_server.is_some() {
                    return Err("--xds-server needs --config-source xds".into());
                }
                if config.is_empty() {
                    return Err(
                        "no configuration: --config (or RATELIMITD_CONFIG) names the files, or \
                         --config-source xds with --xds-server names an xDS server"
                            .into(),
                    );
                }
                Ok(None)
            }
            ConfigSourceKind::Xds => {
                if !config.is_empty() {
                    return Err(
                        "--config and --config-source xds exclude each other: the configuration \
                         comes from the xDS server"
                            .into(),
                    );
                }
                let Some(server) = self.xds_server.clone() else {
                    return Err("--config-source xds needs --xds-server HOST:PORT".into());
                };
                if self.xds_backoff_initial > self.xds_backoff_max {
                    return Err("--xds-backoff-initial is longer than --xds-backoff-max".into());
                }
                Ok(Some(XdsOptions {
                    server,
                    node: NodeIdentity {
                        id: self.xds_node_id.clone(),
                        cluster: self.xds_node_cluster.clone(),
                        metadata: self.xds_node_metadata.clone(),
                    },
                    headers: self.xds_headers.clone(),
                    tls: self.xds_tls.then(|| XdsTls {
                        ca: self.xds_tls_ca.clone(),
                        client_cert: self.xds_tls_cert.clone(),
                        client_key: self.xds_tls_key.clone(),
                        san: self.xds_tls_san.clone(),
                    }),
                    connect_retry_interval: self.xds_connect_retry_interval,
                    backoff: BackoffPolicy {
                        initial: self.xds_backoff_initial,
                        max: self.xds_backoff_max,
                        random_factor: self.xds_backoff_random_factor,
                        jitter: self.xds_backoff_jitter,
                    },
                    max_message_bytes: self.xds_max_message_bytes,
                    response_timeout: self.xds_response_timeout,
                }))
            }
        }
    }
}

fn parse_metadata(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
        _ => Err(format!("`{text}` is not KEY=VALUE")),
    }
}

/// `NAME:VALUE`, the name a valid lowercase header name and the value visible ASCII.
fn parse_header(text: &str) -> Result<(String, String), String> {
    let Some((name, value)) = text.split_once(':') else {
        return Err(format!("`{text}` is not NAME:VALUE"));
    };
    let name = name.trim().to_ascii_lowercase();
    let value = value.trim();
    if tonic::metadata::MetadataKey::<tonic::metadata::Ascii>::from_bytes(name.as_bytes()).is_err()
        || name.ends_with("-bin")
    {
        return Err(format!("`{name}` is not a header name"));
    }
    if tonic::metadata::AsciiMetadataValue::try_from(value).is_err() {
        return Err(format!("the value of `{name}` is not a header value"));
    }
    Ok((name, value.to_string()))
}

fn parse_factor(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(factor) if (0.0..=1.0).contains(&factor) => Ok(factor),
        _ => Err(format!("`{text}` is not a number from 0 to 1")),
    }
}

fn parse_message_bytes(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(bytes) if bytes >= 1024 => Ok(bytes),
        _ => Err(format!("`{text}` is not a size in bytes of at least 1024")),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        xds: XdsArgs,
    }

    fn parse(arguments: &[&str]) -> Result<XdsArgs, clap::Error> {
        crate::cli::table::parse::<Cli>(
            std::iter::once("ratelimitd").chain(arguments.iter().copied()),
        )
        .map(|cli| cli.xds)
    }

    #[test]
    fn xds_options_carry_every_flag() {
        let args = parse(&[
            "--config-source=xds",
            "--xds-server=cp:18001",
            "--xds-node-id=rl-0",
            "--xds-node-metadata=zone=a,team=edge",
            "--xds-header=Authorization: Bearer t",
            "--xds-tls",
            "--xds-tls-ca=/ca.pem",
            "--xds-backoff-initial=1s",
            "--xds-backoff-jitter=false",
            "--xds-response-timeout=5s",
        ])
        .expect("valid");
        let options = args.options(&[]).expect("valid").expect("xds");
        assert_eq!(options.server, "cp:18001");
        assert_eq!(options.node.id, "rl-0");
        assert_eq!(
            options.node.metadata,
            [("zone".into(), "a".into()), ("team".into(), "edge".into())]
        );
        assert_eq!(
            options.headers,
            [("authorization".into(), "Bearer t".into())]
        );
        assert_eq!(options.tls.and_then(|tls| tls.ca), Some("/ca.pem".into()));
        assert_eq!(options.backoff.initial, Duration::from_secs(1));
        assert!(!options.backoff.jitter);
        assert_eq!(options.max_message_bytes, 4 << 20);
        assert_eq!(options.response_timeout, Duration::from_secs(5));
        let defaults = parse(&["--config-source=xds", "--xds-server=cp:1"]).expect("valid");
        let defaults = defaults.options(&[]).expect("valid").expect("xds");
        assert_eq!(
            defaults.response_timeout,
            XdsOptions::DEFAULT_RESPONSE_TIMEOUT
        );
    }

    #[test]
    fn sources_refuse_what_they_would_ignore() {
        let files = [PathBuf::from("config.yaml")];
        let xds = parse(&["--config-source=xds"]).expect("parses");
        assert!(xds.options(&[]).unwrap_err().contains("--xds-server"));
        let both = parse(&["--config-source=xds", "--xds-server=cp:1"]).expect("parses");
        assert!(both.options(&files).unwrap_err().contains("exclude"));
        let file = parse(&["--xds-server=cp:1"]).expect("parses");
        assert!(file
            .options(&files)
            .unwrap_err()
            .contains("--config-source xds"));
        let none = parse(&[]).expect("parses");
        assert!(none.options(&[]).unwrap_err().contains("--config"));
        assert_eq!(none.options(&files), Ok(None));
        assert!(parse(&["--xds-tls-ca=/ca.pem"]).is_err(), "needs --xds-tls");
        assert!(
            parse(&["--xds-tls", "--xds-tls-cert=/c.pem"]).is_err(),
            "needs the key"
        );
        assert!(parse(&["--xds-node-metadata=novalue"]).is_err());
        assert!(parse(&["--xds-header=bad name:x"]).is_err());
        assert!(parse(&["--xds-backoff-random-factor=1.5"]).is_err());
    }
}
