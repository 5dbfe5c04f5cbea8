//! The ADS stream: subscribe, turn each response into rules, ACK or NACK it, and reconnect when
//! the stream ends.
//!
//! As envoyproxy/ratelimit's client does: one `StreamAggregatedResources` stream, a wildcard
//! subscription (no resource names) to [`RATE_LIMIT_CONFIG_TYPE`], the node on every request,
//! the extra headers on the stream; an ACK carries the response's version and nonce, a NACK
//! the version still in force, the refused response's nonce and `error_detail`. After a
//! reconnect the first request carries the version in force, so a server that has nothing newer
//! may answer with the same configuration (applied again, without a change), or, as
//! go-control-plane's caches do, not answer until it has something newer.
//!
//! The response deadline (`XdsOptions::response_timeout`): a server that sends part of a message
//! and then nothing, while still answering HTTP/2 pings, would hold the stream for ever, the
//! configuration in force silently stale. So a message must arrive whole within the deadline of
//! its first byte, and while no configuration is in force the first response within the
//! deadline of the stream's opening; otherwise the stream is dropped (logged at WARN, counted)
//! and reopened after the backoff. An idle stream (no message under way, a configuration in
//! force) has no deadline: a state-of-the-world server sends only when something changed, and
//! after a reconnect that carries the version in force it may well have nothing to send.

use std::sync::Arc;
use std::time::Duration;

use futures::channel::mpsc;
use futures::SinkExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::metadata::{AsciiMetadataValue, MetadataKey};
use tonic::transport::{Channel, Endpoint};

use super::backoff::{Backoff, BackoffPolicy};
use super::convert::{self, RATE_LIMIT_CONFIG_TYPE};
use super::options::{NodeIdentity, XdsOptions};
use super::received::XdsConfig;
use super::watched::{Progress, Watched};
use crate::config::{ConfigErrors, Loader};
use crate::proto::discovery::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use crate::proto::discovery::{DiscoveryRequest, DiscoveryResponse};
use crate::proto::envoy::config::core::v3::Node;
use crate::proto::google::rpc::Status;

/// How long a connection attempt (TCP and TLS) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// HTTP/2 pings on an idle stream, so that a server that vanished without closing the
/// connection is noticed.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// `google.rpc.Code.INVALID_ARGUMENT`, the code of a NACK's `error_detail`.
const INVALID_ARGUMENT: i32 = 3;

/// What a response did to the configuration.
#[derive(Debug)]
pub enum XdsUpdate {
    /// The response's configuration is in force. `changed` is false when it equals the one it
    /// replaced.
    Applied {
        version: String,
        domains: usize,
        limits: usize,
        changed: bool,
    },
    /// The response was refused (NACKed); the configuration in force stays.
    Rejected {
        version: String,
        errors: ConfigErrors,
    },
}

/// Keeps `config` up to date from the server until `stopping` is cancelled, reconnecting by
/// itself. `on_update` is called after each response was applied or refused (before its ACK or
/// NACK is sent).
pub async fn run(
    options: XdsOptions,
    config: Arc<XdsConfig>,
    loader: Arc<Loader>,
    on_update: Arc<dyn Fn(XdsUpdate) + Send + Sync>,
    stopping: CancellationToken,
) {
    let mut backoff = Backoff::new(options.backoff);
    let mut connect_retry = Backoff::new(BackoffPolicy {
        initial: options.connect_retry_interval,
        max: options.connect_retry_interval.mul_f64(1.5),
        random_factor: 0.5,
        jitter: true,
    });
    let session = Session {
        options: &options,
        config: &config,
        loader: &loader,
        on_update: &on_update,
    };
    loop {
        let end = tokio::select! {
            _ = stopping.cancelled() => return,
            end = session.run(&mut backoff) => end,
        };
        let stream = config.stream();
        let wait = match end {
            SessionEnd::Unreachable(error) => {
                stream.ended(&error, false);
                let wait = connect_retry.next_delay();
                tracing::warn!(
                    server = %options.server,
                    %error,
                    ?wait,
                    stale_for = ?whole_seconds(stream.stale_for()),
                    "cannot open the xDS stream; retrying"
                );
                wait
            }
            SessionEnd::Ended(reason) => {
                stream.ended(&reason, false);
                connect_retry.reset();
                let wait = backoff.next_delay();
                tracing::warn!(server = %options.server, %reason, ?wait, "xDS stream ended; reconnecting");
                wait
            }
            SessionEnd::Stalled(reason) => {
                stream.ended(&reason, true);
                connect_retry.reset();
                let wait = backoff.next_delay();
                tracing::warn!(
                    server = %options.server,
                    %reason,
                    ?wait,
                    "xDS stream stalled; dropped, reconnecting (the configuration in force keeps serving)"
                );
                wait
            }
        };
        tokio::select! {
            _ = stopping.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// Why a stream is over.
enum SessionEnd {
    /// No stream was opened (connection refused, TLS, the server refused the call).
    Unreachable(String),
    /// The stream was open and ended.
    Ended(String),
    /// The stream was open and dropped for the response deadline.
    Stalled(String),
}

/// `duration` rounded down to whole seconds, for the logs.
fn whole_seconds(duration: Duration) -> Duration {
    Duration::from_secs(duration.as_secs())
}

struct Session<'a> {
    options: &'a XdsOptions,
    config: &'a Arc<XdsConfig>,
    loader: &'a Arc<Loader>,
    on_update: &'a Arc<dyn Fn(XdsUpdate) + Send + Sync>,
}

impl Session<'_> {
    async fn run(&self, backoff: &mut Backoff) -> SessionEnd {
        let channel = match connect(self.options).await {
            Ok(channel) => channel,
            Err(error) => return SessionEnd::Unreachable(error),
        };
        let progress = Arc::new(Progress::default());
        let mut client =
            AggregatedDiscoveryServiceClient::new(Watched::new(channel, progress.clone()))
                .max_decoding_message_size(self.options.max_message_bytes);
        // One request is sent per response received: the buffer never fills.
        let (mut requests, outgoing) = mpsc::channel::<DiscoveryRequest>(2);
        let subscribe = self.request(self.config.version().unwrap_or_default(), String::new());
        if requests.try_send(subscribe).is_err() {
            return SessionEnd::Unreachable("the request stream closed".into());
        }
        let mut call = tonic::Request::new(outgoing);
        for (name, value) in &self.options.headers {
            match (
                MetadataKey::from_bytes(name.as_bytes()),
                AsciiMetadataValue::try_from(value.as_str()),
            ) {
                (Ok(name), Ok(value)) => {
                    call.metadata_mut().insert(name, value);
                }
                _ => return SessionEnd::Unreachable(format!("invalid xDS header `{name}`")),
            }
        }
        let mut responses = match client.stream_aggregated_resources(call).await {
            Ok(response) => response.into_inner(),
            Err(status) => return SessionEnd::Unreachable(status.to_string()),
        };
        let down_for = self.config.stream().opened();
        tracing::info!(
            server = %self.options.server,
            node = %self.options.node.id,
            down_for = ?whole_seconds(down_for),
            "xDS stream open"
        );
        // With no configuration in force, the subscription must be answered.
        let mut owed_since = self.config.version().is_none().then(Instant::now);
        loop {
            let message = match self
                .next_message(&mut responses, &progress, owed_since)
                .await
            {
                Ok(message) => message,
                Err(stalled) => return stalled,
            };
            let response = match message {
                Ok(Some(response)) => response,
                Ok(None) => return SessionEnd::Ended("the server closed the stream".into()),
                Err(status) => return SessionEnd::Ended(status.to_string()),
            };
            owed_since = None;
            self.config.stream().responded();
            backoff.reset();
            let reply = self.answer(response).await;
            if requests.send(reply).await.is_err() {
                return SessionEnd::Ended("the request stream closed".into());
            }
        }
    }

    /// The next message of `responses`, or [`SessionEnd::Stalled`] when the response deadline
    /// passes first: for a message under way, counted from its first byte (or from now, for
    /// bytes that came while the previous response was being applied); for a response owed
    /// since `owed_since`, from then.
    async fn next_message(
        &self,
        responses: &mut tonic::Streaming<DiscoveryResponse>,
        progress: &Progress,
        owed_since: Option<Instant>,
    ) -> Result<Result<Option<DiscoveryResponse>, tonic::Status>, SessionEnd> {
        let timeout = self.options.response_timeout;
        let waiting_from = Instant::now();
        loop {
            let partial = progress.partial();
            let started = partial.map(|partial| partial.since.max(waiting_from));
            let deadline = started
                .into_iter()
                .chain(owed_since)
                .min()
                .map(|since| since + timeout);
            tokio::select! {
                message = responses.message() => return Ok(message),
                () = progress.started() => {}
                () = sleep_until(deadline) => {
                    let shown = humantime::format_duration(timeout);
                    let reason = match progress.partial() {
                        Some(partial) => format!(
                            "a response was still incomplete {shown} after its first byte: {} of {} bytes received (--xds-response-timeout)",
                            partial.received,
                            partial.length.map_or_else(|| "at least 5".to_owned(), |length| length.to_string()),
                        ),
                        None => format!(
                            "no response {shown} after subscribing, with no configuration in force (--xds-response-timeout)"
                        ),
                    };
                    return Err(SessionEnd::Stalled(reason));
                }
            }
        }
    }

    /// Applies or refuses `response`, and the ACK or NACK that says so.
    async fn answer(&self, response: DiscoveryResponse) -> DiscoveryRequest {
        let DiscoveryResponse {
            version_info: version,
            resources,
            type_url,
            nonce,
            ..
        } = response;
        if type_url != RATE_LIMIT_CONFIG_TYPE {
            tracing::warn!(%type_url, "xDS response of a type not subscribed to; refused");
            return self.nack(
                nonce,
                format!(
                    "response of type `{type_url}`; subscribed to `{RATE_LIMIT_CONFIG_TYPE}` only"
                ),
            );
        }
        let loader = self.loader.clone();
        let loaded = tokio::task::spawn_blocking(move || {
            let (trees, errors) = convert::resource_trees(&resources);
            loader.load_trees(trees, errors)
        })
        .await;
        match loaded {
            Ok(Ok(rules)) => {
                let domains = rules.domains.len();
                let limits = rules.limits().len();
                let changed = self.config.apply(rules, &version);
                (self.on_update)(XdsUpdate::Applied {
                    version: version.clone(),
                    domains,
                    limits,
                    changed,
                });
                self.request(version, nonce)
            }
            Ok(Err(errors)) => {
                let message = errors.to_string();
                (self.on_update)(XdsUpdate::Rejected { version, errors });
                self.nack(nonce, message)
            }
            Err(error) => self.nack(
                nonce,
                format!("the configuration could not be loaded: {error}"),
            ),
        }
    }

    fn nack(&self, nonce: String, message: String) -> DiscoveryRequest {
        DiscoveryRequest {
            error_detail: Some(Status {
                code: INVALID_ARGUMENT,
                message,
                details: Vec::new(),
            }),
            ..self.request(self.config.version().unwrap_or_default(), nonce)
        }
    }

    fn request(&self, version_info: String, response_nonce: String) -> DiscoveryRequest {
        DiscoveryRequest {
            version_info,
            node: Some(node(&self.options.node)),
            resource_names: Vec::new(),
            type_url: RATE_LIMIT_CONFIG_TYPE.to_string(),
            response_nonce,
            error_detail: None,
        }
    }
}

/// Completes at `deadline`; never without one.
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

fn node(identity: &NodeIdentity) -> Node {
    let fields = identity
        .metadata
        .iter()
        .map(|(name, value)| {
            (
                name.clone(),
                prost_types::Value {
                    kind: Some(prost_types::value::Kind::StringValue(value.clone())),
                },
            )
        })
        .collect();
    Node {
        id: identity.id.clone(),
        cluster: identity.cluster.clone(),
        metadata: Some(prost_types::Struct { fields }),
        user_agent_name: "ratelimitd".to_string(),
        user_agent_version: env!("CARGO_PKG_VERSION").to_string(),
    }
}

async fn connect(options: &XdsOptions) -> Result<Channel, String> {
    let scheme = if options.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let mut endpoint = Endpoint::from_shared(format!("{scheme}://{}", options.server))
        .map_err(|error| format!("xDS server `{}`: {error}", options.server))?
        .connect_timeout(CONNECT_TIMEOUT)
        .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT);
    if let Some(tls) = &options.tls {
        let config = tls.client_config(host_of(&options.server))?;
        endpoint = endpoint
            .tls_config(config)
            .map_err(|error| format!("xDS TLS: {error}"))?;
    }
    endpoint
        .connect()
        .await
        .map_err(|error| match std::error::Error::source(&error) {
            Some(source) => format!("{error}: {source}"),
            None => error.to_string(),
        })
}

/// The host of `HOST:PORT` (without the brackets of an IPv6 address).
fn host_of(server: &str) -> &str {
    let host = server.rsplit_once(':').map_or(server, |(host, _)| host);
    host.trim_start_matches('[').trim_end_matches(']')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_is_what_precedes_the_port() {
        assert_eq!(host_of("xds.example:18000"), "xds.example");
        assert_eq!(host_of("[::1]:18000"), "::1");
    }

    #[test]
    fn the_node_carries_id_cluster_and_string_metadata() {
        let node = node(&NodeIdentity {
            id: "ratelimit-0".into(),
            cluster: "edge".into(),
            metadata: vec![("zone".into(), "a".into())],
        });
        assert_eq!(
            (node.id.as_str(), node.cluster.as_str()),
            ("ratelimit-0", "edge")
        );
        let metadata = node.metadata.expect("metadata");
        assert_eq!(
            metadata.fields["zone"].kind,
            Some(prost_types::value::Kind::StringValue("a".into()))
        );
    }
}
