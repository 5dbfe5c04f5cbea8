//! `GET /counters` and `POST /counters/reset` (docs/operations/http-endpoints.md): the state of
//! the counters a selector's descriptors count in, read from the store without consuming, and
//! their reset, an admin action behind the bearer token of `--admin-token-file`.
//!
//! A selector is read into the request RLS would get ([`selector`]) and matched by the same
//! planning, each descriptor on its own (so a rule another descriptor `replaces` is still
//! shown): the only counters either endpoint reaches are those the matched rules count in.

pub mod admin_token;
pub mod selector;

use std::net::SocketAddr;
use std::sync::{Arc, LazyLock};

use hyper::StatusCode;
use serde_json::{json, Value};

use super::metrics::{CounterReset, Metrics};
use super::rls::RateLimitEdge;
use super::throttle::WarnThrottle;
use crate::limiter::check::Check;
use crate::limiter::counter_state::CounterState;
use crate::limiter::{plan, ConfiguredLimit, Request, Resolution, Rules};
use crate::store::Store;
pub use admin_token::AdminToken;

/// What an endpoint answers: a status and a body, JSON or (errors) plain text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: StatusCode,
    pub body: String,
    pub json: bool,
    /// A 401: the answer carries `WWW-Authenticate: Bearer`.
    pub challenge: bool,
}

impl Answer {
    fn json(value: &Value) -> Answer {
        Answer {
            status: StatusCode::OK,
            body: format!("{value}\n"),
            json: true,
            challenge: false,
        }
    }

    fn text(status: StatusCode, message: impl std::fmt::Display) -> Answer {
        Answer {
            status,
            body: format!("{message}\n"),
            json: false,
            challenge: status == StatusCode::UNAUTHORIZED,
        }
    }
}

/// What one descriptor of a selector found.
struct Matched {
    /// The descriptor's entries, as the selector gave them.
    entries: Value,
    rule: Option<Arc<ConfiguredLimit>>,
    found: Found,
}

enum Found {
    /// No rule applies (no match, whitelisted value): nothing is counted.
    NoLimit,
    /// `unlimited: true`: nothing is counted.
    Unlimited,
    /// `requests_per_unit: 0`: every request is denied, nothing is counted.
    Blocked,
    /// Counted in this check's counter.
    Counted(Check),
}

impl Found {
    fn name(&self) -> &'static str {
        match self {
            Found::NoLimit => "none",
            Found::Unlimited => "unlimited",
            Found::Blocked => "blocked",
            Found::Counted(_) => "counted",
        }
    }
}

/// Matches each descriptor of `request` on its own; `None` for a domain the rules do not have.
fn matched(rules: &Rules, request: &Request) -> Option<Vec<Matched>> {
    rules.domain(&request.domain)?;
    let found = request
        .descriptors
        .iter()
        .map(|descriptor| {
            let alone = Request {
                domain: request.domain.clone(),
                descriptors: vec![descriptor.clone()],
                hits_addend: 0,
            };
            let entries = Value::Array(
                descriptor
                    .entries
                    .iter()
                    .map(|entry| json!({"key": entry.key, "value": entry.value}))
                    .collect(),
            );
            let (rule, found) = match plan(rules, &alone) {
                Ok(mut plan) => {
                    let rule = plan.matched.pop().flatten();
                    let found = match plan.resolutions.pop() {
                        Some(Resolution::Counted { check, .. }) if check < plan.checks.len() => {
                            Found::Counted(plan.checks.swap_remove(check))
                        }
                        Some(Resolution::Unlimited) => Found::Unlimited,
                        Some(Resolution::Blocked { .. }) => Found::Blocked,
                        _ => Found::NoLimit,
                    };
                    (rule, found)
                }
                Err(_) => (None, Found::NoLimit),
            };
            Matched {
                entries,
                rule,
                found,
            }
        })
        .collect();
    Some(found)
}

/// The facts of a descriptor's rule that do not depend on the store.
fn described(matched: &Matched) -> serde_json::Map<String, Value> {
    let mut out = serde_json::Map::new();
    out.insert("descriptor".into(), matched.entries.clone());
    out.insert(
        "rule".into(),
        matched
            .rule
            .as_ref()
            .map_or(Value::Null, |rule| Value::from(rule.path.clone())),
    );
    if let Some(name) = matched.rule.as_ref().and_then(|rule| rule.name.clone()) {
        out.insert("name".into(), Value::from(name));
    }
    out.insert("limit".into(), Value::from(matched.found.name()));
    if let Found::Counted(check) = &matched.found {
        let rate = check.rate;
        out.insert("algorithm".into(), Value::from(rate.algorithm().as_str()));
        out.insert("requests_per_unit".into(), Value::from(rate.limit()));
        out.insert(
            "window_seconds".into(),
            Value::from(rate.window_us() / 1_000_000),
        );
        out.insert("burst".into(), Value::from(rate.burst()));
        out.insert(
            "consistency".into(),
            Value::from(check.consistency.as_str()),
        );
    }
    if let Some(rule) = &matched.rule {
        out.insert("shadow_mode".into(), Value::from(rule.shadow_mode));
    }
    out
}

/// The request of `query`'s selector matched against the rules in force, or the answer that
/// refuses it: 400 for a malformed selector, 404 for a domain not configured.
fn select<S: Store>(
    edge: &RateLimitEdge<S>,
    query: Option<&str>,
) -> Result<(Request, Vec<Matched>), Answer> {
    let request = selector::parse(query, edge.request_bounds())
        .map_err(|message| Answer::text(StatusCode::BAD_REQUEST, message))?;
    let rules = edge.rules().load();
    let matched = matched(&rules, &request).ok_or_else(|| {
        Answer::text(
            StatusCode::NOT_FOUND,
            format!(
                "domain `{}` is not configured",
                request.domain.escape_debug()
            ),
        )
    })?;
    Ok((request, matched))
}

fn counted(matched: &[Matched]) -> Vec<Check> {
    matched
        .iter()
        .filter_map(|m| match &m.found {
            Found::Counted(check) => Some(check.clone()),
            _ => None,
        })
        .collect()
}

/// `GET /counters?domain=D&descriptor=k=v,...`: per descriptor, its rule and its counter's state,
/// read from the store in one call without consuming; 503 when the store fails.
pub async fn read<S: Store>(edge: &RateLimitEdge<S>, query: Option<&str>) -> Answer {
    let (request, matched) = match select(edge, query) {
        Ok(selected) => selected,
        Err(answer) => return answer,
    };
    let checks = counted(&matched);
    let verdicts = if checks.is_empty() {
        Vec::new()
    } else {
        match edge.store().peek(&checks).await {
            Ok(verdicts) => verdicts,
            Err(error) => {
                return Answer::text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("the store could not be read: {error}"),
                )
            }
        }
    };
    let mut verdicts = verdicts.into_iter();
    let counters: Vec<Value> = matched
        .iter()
        .map(|m| {
            let mut out = described(m);
            if let Found::Counted(check) = &m.found {
                if let Some(verdict) = verdicts.next() {
                    let state = CounterState::of(&check.rate, &verdict);
                    out.insert("used".into(), Value::from(state.used));
                    out.insert("remaining".into(), Value::from(state.remaining));
                    out.insert(
                        "reset_after_ms".into(),
                        Value::from(state.reset_after_us.div_ceil(1000)),
                    );
                }
            }
            Value::Object(out)
        })
        .collect();
    Answer::json(&json!({"domain": request.domain, "counters": counters}))
}

/// Who asks for a reset: the `Authorization` header's value, if any, and the peer address.
pub struct Caller<'a> {
    pub authorization: Option<&'a [u8]>,
    pub peer: Option<SocketAddr>,
}

/// `POST /counters/reset?domain=D&descriptor=k=v,...`: deletes the state of each counted
/// descriptor's counter. Refused before the selector is even read: 403 while no
/// `--admin-token-file` is set, 401 without a bearer token, 403 with a wrong one. 503 when the
/// store fails (a store that is down has changed nothing). Each outcome is counted and logged
/// with the selector and the caller's address.
pub async fn reset<S: Store>(
    edge: &RateLimitEdge<S>,
    admin: Option<&Arc<AdminToken>>,
    metrics: Option<&Metrics>,
    caller: Caller<'_>,
    query: Option<&str>,
) -> Answer {
    let record = |outcome: CounterReset| {
        if let Some(metrics) = metrics {
            metrics.record_counter_reset(outcome);
        }
    };
    let peer = caller
        .peer
        .map_or_else(|| "unknown".to_owned(), |peer| peer.to_string());
    let selector = query.unwrap_or("");
    let refusal = match (admin, bearer(caller.authorization)) {
        (None, _) => Some(Answer::text(
            StatusCode::FORBIDDEN,
            "counter resets are off: no --admin-token-file is configured",
        )),
        (Some(_), None) => Some(Answer::text(
            StatusCode::UNAUTHORIZED,
            "a counter reset needs `Authorization: Bearer <token of --admin-token-file>`",
        )),
        (Some(admin), Some(token)) if !accepts(admin, token).await => Some(Answer::text(
            StatusCode::FORBIDDEN,
            "the bearer token is not the admin token",
        )),
        (Some(_), Some(_)) => None,
    };
    if let Some(refusal) = refusal {
        record(CounterReset::Refused);
        if let Some(suppressed) = REFUSALS.admit() {
            tracing::warn!(
                %peer,
                selector = %selector.escape_debug(),
                status = refusal.status.as_u16(),
                suppressed,
                "counter reset refused"
            );
        }
        return refusal;
    }
    let (request, matched) = match select(edge, query) {
        Ok(selected) => selected,
        Err(answer) => {
            record(CounterReset::Invalid);
            return answer;
        }
    };
    let checks = counted(&matched);
    let held = if checks.is_empty() {
        Vec::new()
    } else {
        match edge.store().reset(&checks).await {
            Ok(held) => held,
            Err(error) => {
                record(CounterReset::Failed);
                tracing::warn!(
                    %peer,
                    selector = %selector.escape_debug(),
                    %error,
                    "counter reset failed"
                );
                return Answer::text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("the counters were not reset: {error}"),
                );
            }
        }
    };
    record(CounterReset::Reset);
    let rules: Vec<&str> = matched
        .iter()
        .filter(|m| matches!(m.found, Found::Counted(_)))
        .filter_map(|m| m.rule.as_ref().map(|rule| rule.path.as_str()))
        .collect();
    tracing::warn!(
        %peer,
        selector = %selector.escape_debug(),
        rules = ?rules,
        counters = checks.len(),
        "counters reset"
    );
    let mut held = held.into_iter();
    let counters: Vec<Value> = matched
        .iter()
        .map(|m| {
            let mut out = described(m);
            let reset = matches!(m.found, Found::Counted(_));
            out.insert("reset".into(), Value::from(reset));
            if reset {
                out.insert(
                    "held_state".into(),
                    Value::from(held.next().unwrap_or(false)),
                );
            }
            Value::Object(out)
        })
        .collect();
    Answer::json(&json!({"domain": request.domain, "counters": counters}))
}

/// Refused resets are logged at most once a second (with the count of the others): anyone who
/// reaches the port can send them.
static REFUSALS: LazyLock<WarnThrottle> = LazyLock::new(WarnThrottle::new);

/// Whether `admin` accepts `token`, off the serving thread: the token file may be read again.
async fn accepts(admin: &Arc<AdminToken>, token: &[u8]) -> bool {
    let (admin, token) = (Arc::clone(admin), token.to_vec());
    tokio::task::spawn_blocking(move || admin.accepts(&token))
        .await
        .unwrap_or(false)
}

/// The token of an `Authorization: Bearer <token>` header (the scheme in any case, as RFC 9110
/// says), `None` for none or another scheme.
fn bearer(authorization: Option<&[u8]>) -> Option<&[u8]> {
    let value = authorization?;
    let (scheme, token) = value.split_at_checked(7)?;
    if !scheme.eq_ignore_ascii_case(b"bearer ") {
        return None;
    }
    let token = token.trim_ascii();
    (!token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_are_read_from_the_header_whatever_the_scheme_case() {
        assert_eq!(bearer(Some(b"Bearer abc")), Some(&b"abc"[..]));
        assert_eq!(bearer(Some(b"bearer  abc ")), Some(&b"abc"[..]));
        assert_eq!(bearer(Some(b"Basic YWJj")), None);
        assert_eq!(bearer(Some(b"Bearer ")), None);
        assert_eq!(bearer(Some(b"Bearer")), None);
        assert_eq!(bearer(None), None);
    }
}
