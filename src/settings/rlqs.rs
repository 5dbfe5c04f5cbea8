//! The settings of `serve --help-all`'s "RLQS (Envoy's rate_limit_quota filter)" group.

use super::setting::{Group, Setting, Upstream, Value};
use crate::service::rlqs::RlqsSettings;

/// Every setting of the group, in the order of the help.
pub static ALL: &[&Setting] = &[
    &RLQS_UNMATCHED,
    &RLQS_IDLE_TIMEOUT,
    &RLQS_MAX_BUCKETS_PER_STREAM,
    &RLQS_MAX_STREAMS,
    &RLQS_MAX_STREAMS_PER_CONNECTION,
    &RLQS_MAX_BUCKET_ID_BYTES,
    &RLQS_MEMORY_BUDGET,
];

pub const RLQS_UNMATCHED: Setting = Setting {
    flag: "rlqs-unmatched",
    variable: "RATELIMITD_RLQS_UNMATCHED",
    group: Group::Rlqs,
    essential: false,
    default: Value::Text("allow"),
    drop_in_default: None,
    upstream: Upstream::None,
    help: "What a bucket no rule matches (and every bucket of a domain no configuration \
        defines) is assigned: allow (ALLOW_ALL) or deny (DENY_ALL).",
};

pub const RLQS_IDLE_TIMEOUT: Setting = Setting {
    flag: "rlqs-idle-timeout",
    variable: "RATELIMITD_RLQS_IDLE_TIMEOUT",
    group: Group::Rlqs,
    essential: false,
    default: Value::Text("60s"),
    drop_in_default: None,
    upstream: Upstream::None,
    help: "A stream's bucket whose reports counted no request for longer than this is abandoned \
        (the Envoy is told to forget it) and its share goes to the other Envoys; a stream that \
        sends no report for this long and 5 s more (Envoy's report period) is ended with \
        DEADLINE_EXCEEDED.",
};

pub const RLQS_MAX_BUCKETS_PER_STREAM: Setting = Setting {
    flag: "rlqs-max-buckets-per-stream",
    variable: "RATELIMITD_RLQS_MAX_BUCKETS_PER_STREAM",
    group: Group::Rlqs,
    essential: false,
    default: Value::Of(|| RlqsSettings::DEFAULT_MAX_BUCKETS_PER_STREAM.to_string()),
    drop_in_default: None,
    upstream: Upstream::None,
    help: "Buckets one RLQS stream may report; a report naming one more ends the stream with \
        RESOURCE_EXHAUSTED.",
};

pub const RLQS_MAX_STREAMS: Setting = Setting {
    flag: "rlqs-max-streams",
    variable: "RATELIMITD_RLQS_MAX_STREAMS",
    group: Group::Rlqs,
    essential: false,
    default: Value::Of(|| RlqsSettings::DEFAULT_MAX_STREAMS.to_string()),
    drop_in_default: None,
    upstream: Upstream::None,
    help: "RLQS streams open at once; one more is refused with RESOURCE_EXHAUSTED.",
};

pub const RLQS_MAX_STREAMS_PER_CONNECTION: Setting = Setting {
    flag: "rlqs-max-streams-per-connection",
    variable: "RATELIMITD_RLQS_MAX_STREAMS_PER_CONNECTION",
    group: Group::Rlqs,
    essential: false,
    default: Value::Of(|| RlqsSettings::DEFAULT_MAX_STREAMS_PER_CONNECTION.to_string()),
    drop_in_default: None,
    upstream: Upstream::None,
    help: "RLQS streams open at once on one connection; one more is refused with \
        RESOURCE_EXHAUSTED.",
};

pub const RLQS_MAX_BUCKET_ID_BYTES: Setting = Setting {
    flag: "rlqs-max-bucket-id-bytes",
    variable: "RATELIMITD_RLQS_MAX_BUCKET_ID_BYTES",
    group: Group::Rlqs,
    essential: false,
    default: Value::Text("1KiB"),
    drop_in_default: None,
    upstream: Upstream::None,
    help: "Largest RLQS bucket: its id as the wire encodes it plus its report's domain. A \
        report naming a larger one ends the stream with INVALID_ARGUMENT. With \
        --rlqs-max-buckets-per-stream it sets the largest report accepted. Sizes take B, KiB, MiB.",
};

pub const RLQS_MEMORY_BUDGET: Setting = Setting {
    flag: "rlqs-memory-budget",
    variable: "RATELIMITD_RLQS_MEMORY_BUDGET",
    group: Group::Rlqs,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::None,
    help: "Most memory the RLQS streams' state may hold in all: 2 KiB per stream, 400 B per \
        bucket a stream reports, and each bucket's id and domain bytes plus 256 B. A stream past \
        it is refused, and a report naming a bucket past it ends its stream, with \
        RESOURCE_EXHAUSTED. Default: a quarter of the memory the process may use (its cgroup's \
        limit, else the machine's RAM), at least 32 MiB. Sizes take B, KiB, MiB, GiB.",
};
