//! Every subscribed bucket of every RLQS stream of this process, and what each stream was told.
//!
//! A bucket is keyed by its stream's domain and its id. Each stream reporting it keeps its own
//! smoothed [`Demand`], updated by every report. A bucket's fair shares are computed over every
//! stream's demand (through [`QuotaDemands`], so over every replica's streams) at most once per
//! [`RlqsSettings::rebalance_gap`] (longer for buckets of many streams): a report arriving sooner
//! is answered with the assignment its stream already holds (which renews its time to live), and
//! its demand counts at the next computation, due at most a gap later. So a report costs O(1) per bucket, and a bucket O(streams) per gap, however
//! many Envoys report it. A computation sends the reporting stream its assignment in any case, and
//! any other stream only when its assignment changed. A stream leaving, a bucket going idle and a
//! rule changing re-balance the others at the next tick. The streams a computation gives
//! assignments are woken once per report or per [`WAKE_EVERY`] computations of a tick, so that
//! their writers (on the serving threads) make one response of many actions, not one each.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use futures::StreamExt;
use parking_lot::Mutex;
use tokio::sync::Notify;
use tonic::Status;

use super::bucket_key::BucketKey;
use super::budget::{bucket_bytes, StateBudget, MEMBER_COST, STREAM_COST};
use super::connection::Connection;
use super::convert::{self, Action, Assignment};
use super::refusals::{Refusals, RlqsBound};
use super::settings::RlqsSettings;
use crate::limiter::quota::{
    assignment_ttl, fair_shares, find_quota, should_abandon, token_bucket, BlanketRule, Demand,
    QuotaStrategy, DEFAULT_FLOOR_FRACTION, DEFAULT_HALF_LIFE, DEFAULT_MAX_FILL_INTERVAL,
    DEFAULT_TTL_PERIODS,
};
use crate::limiter::Rules;
use crate::proto::rlqs::{RateLimitQuotaResponse, RateLimitQuotaUsageReports};
use crate::service::throttle::WarnThrottle;
use crate::store::{QuotaDemands, StreamDemand};

/// The `rule` label of buckets no rule matches.
pub const UNMATCHED: &str = "unmatched";

/// What one stream holds of one bucket.
#[derive(Debug)]
struct Member {
    demand: Demand,
    /// When a report last counted a request (or the bucket was subscribed).
    last_used: Instant,
    share: Option<f64>,
    /// The assignment last computed, before [`TokenBucketAssignment::distinct_from`], and the
    /// one sent.
    sent_raw: Option<Assignment>,
    sent: Option<Assignment>,
}

impl Member {
    fn new(now: Instant) -> Member {
        Member {
            demand: Demand::new(),
            last_used: now,
            share: None,
            sent_raw: None,
            sent: None,
        }
    }
}

#[derive(Debug)]
struct BucketState {
    /// The key this state is held under, shared with the streams' sets and outboxes.
    key: Arc<BucketKey>,
    rule: String,
    strategy: QuotaStrategy,
    members: HashMap<u64, Member>,
    /// When the shares were last computed (`None`: never).
    computed_at: Option<Instant>,
    /// Whether the bucket is in [`State::due`].
    due: bool,
}

impl BucketState {
    /// Whether a computation may start at `now`: none ran in the last [`gap_for`] its streams.
    fn may_compute(&self, now: Instant, gap: Duration) -> bool {
        let gap = gap_for(gap, self.members.len());
        self.computed_at
            .is_none_or(|at| now.saturating_duration_since(at) >= gap)
    }
}

/// Computations of a tick after which the streams given assignments are woken, and other
/// RLQS work may run.
const WAKE_EVERY: usize = 64;

/// Buckets whose rule is looked up again under one hold of the registry after a change.
const RULE_CHUNK: usize = 1024;

/// Computations one report runs at once (each a round trip to a shared store).
const CONCURRENT_COMPUTATIONS: usize = 16;

/// Streams up to which a bucket's gap between computations is the configured one.
const STREAMS_PER_GAP: usize = 100;

/// The longest gap between computations, however many streams report a bucket.
const LONGEST_GAP: Duration = Duration::from_secs(1);

/// The gap between two computations of a bucket that `streams` report: `gap` up to
/// [`STREAMS_PER_GAP`] streams, then growing with the count up to [`LONGEST_GAP`] (or `gap`, if
/// longer), so that a computation's cost, which grows with the count, stays within about
/// `STREAMS_PER_GAP` streams per `gap` for all but the largest buckets.
fn gap_for(gap: Duration, streams: usize) -> Duration {
    let scale = (streams as f64 / STREAMS_PER_GAP as f64).max(1.0);
    gap.mul_f64(scale).min(LONGEST_GAP.max(gap))
}

/// Gives back a map's spare room once it holds less than a quarter of it: a map keeps the room
/// of its largest size otherwise, so the state of streams that ended would stay resident.
fn shrink_map<K: Eq + std::hash::Hash, V>(map: &mut HashMap<K, V>) {
    if map.capacity() > 64 && map.len() < map.capacity() / 4 {
        map.shrink_to(map.len() * 2);
    }
}

/// [`shrink_map`] for a set.
fn shrink_set<K: Eq + std::hash::Hash>(set: &mut HashSet<K>) {
    if set.capacity() > 64 && set.len() < set.capacity() / 4 {
        set.shrink_to(set.len() * 2);
    }
}

/// The size a response stops growing at: well within the 4 MiB a gRPC client accepts by
/// default, whatever the number of a stream's buckets (10 000 buckets of 1 KiB ids make about
/// ten responses).
const RESPONSE_BYTES: usize = 1 << 20;

/// What a stream is waiting to send, and whether it ends.
#[derive(Debug, Default)]
pub struct Outbox {
    pending: Mutex<Pending>,
    notify: Notify,
    /// Queued for a wake in [`QuotaRegistry::wake_queued`].
    listed: AtomicBool,
}

#[derive(Debug, Default)]
struct Pending {
    /// The latest action per bucket: at most one per bucket the stream subscribed.
    actions: HashMap<Arc<BucketKey>, Action>,
    end: Option<Result<(), Status>>,
}

impl Outbox {
    fn push_all(&self, actions: impl IntoIterator<Item = (Arc<BucketKey>, Action)>) {
        let mut pending = self.pending.lock();
        let mut pushed = false;
        for (bucket, action) in actions {
            pending.actions.insert(bucket, action);
            pushed = true;
        }
        drop(pending);
        if pushed {
            self.notify.notify_one();
        }
    }

    /// Adds `action` without waking the stream's writer; true when the outbox was not queued
    /// for a wake yet (the caller lists it for [`QuotaRegistry::wake_queued`]).
    fn queue(&self, bucket: &Arc<BucketKey>, action: Action) -> bool {
        self.pending.lock().actions.insert(bucket.clone(), action);
        !self.listed.swap(true, Ordering::AcqRel)
    }

    /// Wakes the stream's writer for what was queued.
    fn wake(&self) {
        self.listed.store(false, Ordering::Release);
        self.notify.notify_one();
    }

    /// Ends the stream once what is pending is sent: with `status`, or cleanly.
    pub fn end(&self, status: Result<(), Status>) {
        let mut pending = self.pending.lock();
        if pending.end.is_none() {
            pending.end = Some(status);
        }
        drop(pending);
        self.notify.notify_one();
    }

    /// The next message to send: the pending actions, sorted by bucket, in responses of about
    /// [`RESPONSE_BYTES`] at most, then the end (`None` after a clean end, the status after an
    /// error).
    pub async fn next(&self) -> Option<Result<RateLimitQuotaResponse, Status>> {
        loop {
            {
                let mut pending = self.pending.lock();
                if !pending.actions.is_empty() {
                    let mut actions: Vec<(Arc<BucketKey>, Action)> =
                        pending.actions.drain().collect();
                    actions.sort_by(|a, b| a.0.bucket.cmp(&b.0.bucket));
                    let mut bytes = 0;
                    let mut bucket_action = Vec::new();
                    let mut rest = actions.into_iter();
                    for (key, action) in rest.by_ref() {
                        let proto = convert::bucket_action(&key.bucket, &action);
                        bytes += prost::Message::encoded_len(&proto);
                        bucket_action.push(proto);
                        if bytes >= RESPONSE_BYTES {
                            break;
                        }
                    }
                    pending.actions.extend(rest);
                    if pending.actions.is_empty() {
                        pending.actions.shrink_to(0);
                    }
                    return Some(Ok(RateLimitQuotaResponse { bucket_action }));
                }
                match pending.end.take() {
                    Some(Ok(())) => return None,
                    Some(Err(status)) => {
                        pending.end = Some(Ok(()));
                        return Some(Err(status));
                    }
                    None => {}
                }
            }
            self.notify.notified().await;
        }
    }
}

#[derive(Debug)]
struct StreamEntry {
    outbox: Arc<Outbox>,
    buckets: HashSet<Arc<BucketKey>>,
    unknown_domain_logged: bool,
    connection: Option<Connection>,
}

#[derive(Debug, Default)]
struct State {
    /// Each bucket's key is shared with the streams' sets and outboxes, not copied. Ordered,
    /// so that `/rlqs` reads it a range at a time.
    buckets: BTreeMap<Arc<BucketKey>, BucketState>,
    streams: HashMap<u64, StreamEntry>,
    /// Buckets whose shares wait for a computation: a report, a stream joining or leaving since
    /// the last one.
    due: HashSet<Arc<BucketKey>>,
    /// rule label -> (allowed, denied) reported.
    reported: BTreeMap<String, (u64, u64)>,
    /// Open streams per connection they came on (connections with none are not kept).
    per_connection: HashMap<Connection, usize>,
}

/// One stream's view of a bucket, for `/rlqs`.
#[derive(Debug, Clone, PartialEq)]
pub struct MemberView {
    pub stream: u64,
    pub demand: Option<f64>,
    pub share: Option<f64>,
    pub assignment: Option<Assignment>,
}

/// One bucket, for `/rlqs`.
#[derive(Debug, Clone, PartialEq)]
pub struct BucketView {
    pub key: BucketKey,
    pub rule: String,
    pub strategy: QuotaStrategy,
    pub streams: Vec<MemberView>,
}

/// The first stream id of this process: random high 32 bits, so that the ids of replicas sharing
/// their demands in Redis do not meet, and a count below.
fn first_stream_id() -> u64 {
    use std::hash::BuildHasher;
    let random = std::collections::hash_map::RandomState::new().hash_one(std::process::id());
    (random << 32) | 1
}

/// The RLQS state of this process.
pub struct QuotaRegistry<D> {
    rules: Arc<ArcSwap<Rules>>,
    settings: RlqsSettings,
    demands: D,
    state: Mutex<State>,
    next_stream: AtomicU64,
    assignments_sent: AtomicU64,
    computations: AtomicU64,
    ttl: Duration,
    store_errors: WarnThrottle,
    refusals: Refusals,
    budget: StateBudget,
    /// Holds a permit while a change of the rules waits to be applied.
    rules_dirty: Notify,
    /// Outboxes given actions since their writers were last woken: a computation queues its
    /// streams' assignments, and their writers are woken once for a report's or a tick's
    /// computations, not once per bucket (each wake makes a response on the stream's serving
    /// thread).
    to_wake: Mutex<Vec<Arc<Outbox>>>,
}

impl<D: QuotaDemands> QuotaRegistry<D> {
    pub fn new(rules: Arc<ArcSwap<Rules>>, settings: RlqsSettings, demands: D) -> QuotaRegistry<D> {
        QuotaRegistry {
            rules,
            settings,
            demands,
            state: Mutex::new(State::default()),
            next_stream: AtomicU64::new(first_stream_id()),
            assignments_sent: AtomicU64::new(0),
            computations: AtomicU64::new(0),
            ttl: assignment_ttl(settings.report_period, DEFAULT_TTL_PERIODS),
            store_errors: WarnThrottle::new(),
            refusals: Refusals::default(),
            budget: StateBudget::new(settings.memory_budget),
            rules_dirty: Notify::new(),
            to_wake: Mutex::new(Vec::new()),
        }
    }

    /// The memory budget of the streams' state (`--rlqs-memory-budget`).
    pub fn budget(&self) -> &StateBudget {
        &self.budget
    }

    /// What the RLQS caps refused so far.
    pub fn refusals(&self) -> &Refusals {
        &self.refusals
    }

    pub fn settings(&self) -> &RlqsSettings {
        &self.settings
    }

    /// Opens a stream on `connection` (`None`: not known, not counted per connection): its id
    /// and outbox; RESOURCE_EXHAUSTED at `--rlqs-max-streams`, at
    /// `--rlqs-max-streams-per-connection` or when the memory budget cannot take it.
    pub fn open(&self, connection: Option<Connection>) -> Result<(u64, Arc<Outbox>), Status> {
        let mut guard = self.state.lock();
        let state = &mut *guard;
        if state.streams.len() >= self.settings.max_streams {
            self.refusals.record(RlqsBound::Streams);
            return Err(Status::resource_exhausted(format!(
                "the server holds its {} RLQS streams (--rlqs-max-streams)",
                self.settings.max_streams
            )));
        }
        if let Some(connection) = connection {
            let on_connection = state.per_connection.get(&connection).copied();
            if on_connection.unwrap_or(0) >= self.settings.max_streams_per_connection {
                self.refusals.record(RlqsBound::StreamsPerConnection);
                return Err(Status::resource_exhausted(format!(
                    "this connection holds its {} RLQS streams (--rlqs-max-streams-per-connection)",
                    self.settings.max_streams_per_connection
                )));
            }
        }
        if self.budget.charge(STREAM_COST).is_err() {
            self.refusals.record(RlqsBound::MemoryBudget);
            return Err(Status::resource_exhausted(self.budget.refusal()));
        }
        if let Some(connection) = connection {
            *state.per_connection.entry(connection).or_default() += 1;
        }
        let id = self.next_stream.fetch_add(1, Ordering::Relaxed);
        let outbox = Arc::new(Outbox::default());
        state.streams.insert(
            id,
            StreamEntry {
                outbox: outbox.clone(),
                buckets: HashSet::new(),
                unknown_domain_logged: false,
                connection,
            },
        );
        Ok((id, outbox))
    }

    /// How long a stream may send no report before it is ended: `--rlqs-idle-timeout` and one
    /// report period, so that the buckets of a stream that stopped reporting are abandoned (and
    /// the Envoy told so) first. Envoy reports every bucket it holds each period, counted or not:
    /// a stream silent that long holds none, or is not an Envoy.
    pub fn silence_limit(&self) -> Duration {
        self.settings.idle_timeout + self.settings.report_period
    }

    /// Counts a stream that sent no report within [`QuotaRegistry::silence_limit`]; what ends
    /// it.
    pub fn idle_stream(&self) -> Status {
        self.refusals.record(RlqsBound::IdleStream);
        Status::deadline_exceeded(format!(
            "no usage report within {} (--rlqs-idle-timeout and a report period)",
            humantime::format_duration(self.silence_limit())
        ))
    }

    /// What `rules` make of `key`: the rule label and the strategy.
    fn rule_of(&self, rules: &Rules, key: &BucketKey) -> (String, QuotaStrategy) {
        let found = rules
            .domain(&key.domain)
            .and_then(|domain| find_quota(domain, &key.bucket));
        let rule = found
            .as_ref()
            .map_or_else(|| UNMATCHED.to_owned(), |found| found.limit.path.clone());
        let strategy = if self.settings.never_deny {
            QuotaStrategy::Blanket(BlanketRule::AllowAll)
        } else {
            QuotaStrategy::for_rule(
                found.map(|found| found.limit.as_ref()),
                self.settings.unmatched,
            )
        };
        (rule, strategy)
    }

    /// INVALID_ARGUMENT when the domain of `reports`, or one of its buckets with the domain,
    /// takes more than `--rlqs-max-bucket-id-bytes` (a bucket's id counted as the wire encodes
    /// it: what the server would hold of it).
    fn oversized_bucket(&self, reports: &RateLimitQuotaUsageReports) -> Option<Status> {
        let cap = self.settings.max_bucket_id_bytes;
        let domain = reports.domain.len();
        let refuse = |what: String, bytes: usize| {
            Status::invalid_argument(format!(
                "{what} takes {bytes} bytes; at most {cap} are accepted (--rlqs-max-bucket-id-bytes)"
            ))
        };
        if domain > cap {
            return Some(refuse("the report's domain".to_owned(), domain));
        }
        reports
            .bucket_quota_usages
            .iter()
            .enumerate()
            .find_map(|(index, usage)| {
                let id = usage
                    .bucket_id
                    .as_ref()
                    .map_or(0, prost::Message::encoded_len);
                let bytes = domain.saturating_add(id);
                (bytes > cap).then(|| {
                    refuse(
                        format!("bucket {index} of the report, with its domain,"),
                        bytes,
                    )
                })
            })
    }

    /// Applies one usage report of `stream`: subscribes new buckets, updates demands, and
    /// answers each bucket with the stream's assignment, computing the bucket's shares first
    /// when the last computation is a gap old. An error ends the stream: a bucket beyond the
    /// bucket cap (the buckets before it are applied), or one above the size cap (nothing of
    /// the report is applied).
    pub async fn report(
        &self,
        stream: u64,
        reports: RateLimitQuotaUsageReports,
    ) -> Result<(), Status> {
        if let Some(status) = self.oversized_bucket(&reports) {
            self.refusals.record(RlqsBound::BucketIdBytes);
            return Err(status);
        }
        let rules = self.rules.load_full();
        let known_domain = rules.domain(&reports.domain).is_some();
        let now = Instant::now();
        let mut compute_now: Vec<(Arc<BucketKey>, Option<u64>)> = Vec::new();
        let mut refused = None;
        {
            let mut guard = self.state.lock();
            let state = &mut *guard;
            let Some(entry) = state.streams.get_mut(&stream) else {
                return Ok(());
            };
            if !known_domain && !entry.unknown_domain_logged {
                entry.unknown_domain_logged = true;
                tracing::warn!(
                    domain = %reports.domain,
                    stream,
                    "RLQS report for a domain no configuration defines: its buckets get the unmatched blanket rule (--rlqs-unmatched)"
                );
            }
            let mut answers: Vec<(Arc<BucketKey>, Action)> = Vec::new();
            for usage in reports.bucket_quota_usages {
                let bucket = match convert::bucket_id(usage.bucket_id.as_ref()) {
                    Ok(bucket) => bucket,
                    Err(error) => {
                        tracing::debug!(stream, %error, "RLQS bucket ignored");
                        continue;
                    }
                };
                let key = BucketKey {
                    domain: reports.domain.clone(),
                    bucket,
                };
                let held = state.buckets.get(&key);
                let new_bucket = held.is_none();
                let new_member = held.is_none_or(|bucket| !bucket.members.contains_key(&stream));
                if new_member {
                    if entry.buckets.len() >= self.settings.max_buckets_per_stream {
                        self.refusals.record(RlqsBound::BucketsPerStream);
                        refused = Some(Status::resource_exhausted(format!(
                            "this stream reports more than {} buckets (--rlqs-max-buckets-per-stream)",
                            self.settings.max_buckets_per_stream
                        )));
                        break;
                    }
                    let cost = MEMBER_COST + if new_bucket { bucket_bytes(&key) } else { 0 };
                    if self.budget.charge(cost).is_err() {
                        self.refusals.record(RlqsBound::MemoryBudget);
                        refused = Some(Status::resource_exhausted(self.budget.refusal()));
                        break;
                    }
                }
                if new_bucket {
                    let (rule, strategy) = self.rule_of(&rules, &key);
                    let key = Arc::new(key.clone());
                    state.buckets.insert(
                        key.clone(),
                        BucketState {
                            key,
                            rule,
                            strategy,
                            members: HashMap::new(),
                            computed_at: None,
                            due: false,
                        },
                    );
                }
                let Some(bucket) = state.buckets.get_mut(&key) else {
                    continue;
                };
                let key = bucket.key.clone();
                if new_member {
                    entry.buckets.insert(key.clone());
                }
                let may_compute = bucket.may_compute(now, self.settings.rebalance_gap);
                let member = bucket
                    .members
                    .entry(stream)
                    .or_insert_with(|| Member::new(now));
                let elapsed = convert::elapsed(usage.time_elapsed.as_ref());
                let (allowed, denied) = (usage.num_requests_allowed, usage.num_requests_denied);
                member
                    .demand
                    .observe(allowed, denied, elapsed, DEFAULT_HALF_LIFE);
                if allowed > 0 || denied > 0 {
                    member.last_used = now;
                }
                match state.reported.get_mut(&bucket.rule) {
                    Some(counts) => {
                        counts.0 = counts.0.saturating_add(allowed);
                        counts.1 = counts.1.saturating_add(denied);
                    }
                    None => {
                        state
                            .reported
                            .insert(bucket.rule.clone(), (allowed, denied));
                    }
                }
                match bucket.strategy {
                    QuotaStrategy::Blanket(rule) => {
                        let assignment = Assignment::Blanket(rule);
                        member.share = None;
                        member.sent_raw = Some(assignment);
                        member.sent = Some(assignment);
                        answers.push((key, self.assign(assignment)));
                    }
                    QuotaStrategy::Limited(_) if may_compute => {
                        // Claimed here, so that the reports of other streams arriving before
                        // the computation starts do not start their own. A stream holding an
                        // assignment is answered with it now, and told again only if the
                        // computation changes it; a newcomer is answered by the computation.
                        bucket.computed_at = Some(now);
                        let reporter = match member.sent {
                            Some(sent) => {
                                answers.push((key.clone(), self.assign(sent)));
                                None
                            }
                            None => Some(stream),
                        };
                        compute_now.push((key, reporter));
                    }
                    QuotaStrategy::Limited(_) => {
                        if let Some(sent) = member.sent {
                            answers.push((key.clone(), self.assign(sent)));
                        }
                        if !bucket.due {
                            bucket.due = true;
                            state.due.insert(key);
                        }
                    }
                }
            }
            self.assignments_sent
                .fetch_add(answers.len() as u64, Ordering::Relaxed);
            entry.outbox.push_all(answers);
        }
        futures::stream::iter(compute_now)
            .for_each_concurrent(CONCURRENT_COMPUTATIONS, |(key, reporter)| async move {
                self.compute(&key, reporter).await;
            })
            .await;
        self.wake_queued();
        refused.map_or(Ok(()), Err)
    }

    /// Wakes the writers of the outboxes given actions since the last call.
    fn wake_queued(&self) {
        let queued = std::mem::take(&mut *self.to_wake.lock());
        for outbox in queued {
            outbox.wake();
        }
    }

    fn assign(&self, assignment: Assignment) -> Action {
        Action::Assign {
            assignment,
            ttl: self.ttl,
        }
    }

    /// Computes `key`'s shares now: publishes this process's streams' demands, reads every
    /// replica's, and sends the assignments that changed, and `reporter`'s in any case.
    async fn compute(&self, key: &Arc<BucketKey>, reporter: Option<u64>) {
        let local: Option<Vec<(u64, StreamDemand)>> = {
            let mut state = self.state.lock();
            state.due.remove(key);
            let Some(bucket) = state.buckets.get_mut(key) else {
                return;
            };
            bucket.computed_at = Some(Instant::now());
            bucket.due = false;
            self.computations.fetch_add(1, Ordering::Relaxed);
            match bucket.strategy {
                QuotaStrategy::Limited(_) if self.demands.shared() => {
                    let mut local: Vec<(u64, StreamDemand)> = bucket
                        .members
                        .iter()
                        .map(|(id, member)| (*id, member.demand.rate()))
                        .collect();
                    local.sort_unstable_by_key(|(id, _)| *id);
                    Some(local)
                }
                _ => None,
            }
        };
        let all = match local {
            None => None,
            Some(local) => {
                let published = self
                    .demands
                    .publish(&key.demands_key(), &local, self.ttl)
                    .await;
                self.demands_or_local(published)
            }
        };
        self.rebalance(key, all, reporter);
    }

    fn demands_or_local(
        &self,
        demands: Result<Vec<(u64, StreamDemand)>, String>,
    ) -> Option<Vec<(u64, StreamDemand)>> {
        match demands {
            Ok(all) => Some(all),
            Err(error) => {
                if let Some(suppressed) = self.store_errors.admit() {
                    tracing::warn!(
                        %error,
                        suppressed,
                        "RLQS demands could not be shared; shares from this process's streams only"
                    );
                }
                None
            }
        }
    }

    /// Recomputes `key`'s assignments over `all` demands (`None`: the local streams' only) and
    /// queues those that changed, and `reporter`'s in any case.
    fn rebalance(
        &self,
        key: &Arc<BucketKey>,
        all: Option<Vec<(u64, StreamDemand)>>,
        reporter: Option<u64>,
    ) {
        let mut guard = self.state.lock();
        let state = &mut *guard;
        let Some(bucket) = state.buckets.get_mut(key) else {
            return;
        };
        let mut raw: Vec<(u64, Option<f64>, Assignment)> = Vec::new();
        match bucket.strategy {
            QuotaStrategy::Blanket(rule) => {
                for id in bucket.members.keys() {
                    raw.push((*id, None, Assignment::Blanket(rule)));
                }
            }
            QuotaStrategy::Limited(rate) => {
                let mut all = all.unwrap_or_default();
                let shared: HashSet<u64> = all.iter().map(|(id, _)| *id).collect();
                for (id, member) in &bucket.members {
                    if !shared.contains(id) {
                        all.push((*id, member.demand.rate()));
                    }
                }
                let demands: Vec<StreamDemand> = all.iter().map(|(_, demand)| *demand).collect();
                let shares = fair_shares(rate.per_second(), &demands, DEFAULT_FLOOR_FRACTION);
                for ((id, _), share) in all.iter().zip(shares) {
                    if bucket.members.contains_key(id) {
                        let assignment = match token_bucket(share, DEFAULT_MAX_FILL_INTERVAL) {
                            Some(bucket) => Assignment::TokenBucket(bucket),
                            None => Assignment::Blanket(BlanketRule::DenyAll),
                        };
                        raw.push((*id, Some(share), assignment));
                    }
                }
            }
        }
        let mut sent = 0;
        for (id, share, assignment) in raw {
            let (Some(member), Some(entry)) = (bucket.members.get_mut(&id), state.streams.get(&id))
            else {
                continue;
            };
            member.share = share;
            let changed = member.sent_raw != Some(assignment);
            if !changed && reporter != Some(id) {
                continue;
            }
            let to_send = match (changed, assignment, member.sent) {
                (false, _, Some(previous)) => previous,
                (_, Assignment::TokenBucket(new), Some(Assignment::TokenBucket(previous))) => {
                    Assignment::TokenBucket(new.distinct_from(&previous))
                }
                _ => assignment,
            };
            member.sent_raw = Some(assignment);
            member.sent = Some(to_send);
            if entry.outbox.queue(key, self.assign(to_send)) {
                self.to_wake.lock().push(entry.outbox.clone());
            }
            sent += 1;
        }
        self.assignments_sent.fetch_add(sent, Ordering::Relaxed);
    }

    /// Forgets `left` streams' membership and marks the buckets they left due for a
    /// computation (the others' shares can only grow, so it may wait for the next tick), which
    /// publishes the remaining streams' demands; a bucket left by every local stream is
    /// withdrawn from a shared store at once.
    async fn forget(&self, left: Vec<(Arc<BucketKey>, u64)>) {
        let emptied: Vec<Arc<BucketKey>> = {
            let mut guard = self.state.lock();
            let state = &mut *guard;
            let mut emptied = Vec::new();
            for (key, stream) in left {
                let Some(bucket) = state.buckets.get_mut(&key) else {
                    continue;
                };
                if bucket.members.remove(&stream).is_some() {
                    self.budget.release(MEMBER_COST);
                }
                if bucket.members.is_empty() {
                    state.buckets.remove(&key);
                    state.due.remove(&key);
                    self.budget.release(bucket_bytes(&key));
                    emptied.push(key);
                } else {
                    shrink_map(&mut bucket.members);
                    if !bucket.due {
                        bucket.due = true;
                        state.due.insert(key);
                    }
                }
            }
            shrink_set(&mut state.due);
            emptied
        };
        if self.demands.shared() {
            for key in emptied {
                if let Err(error) = self
                    .demands
                    .publish(&key.demands_key(), &[], self.ttl)
                    .await
                {
                    tracing::debug!(%error, "RLQS demands not withdrawn from the store; they expire by themselves");
                }
            }
        }
    }

    /// Forgets a stream that ended; the buckets it reported re-balance at the next tick.
    pub async fn leave(&self, stream: u64) {
        let left: Vec<(Arc<BucketKey>, u64)> = {
            let mut state = self.state.lock();
            let Some(entry) = state.streams.remove(&stream) else {
                return;
            };
            shrink_map(&mut state.streams);
            self.budget.release(STREAM_COST);
            if let Some(connection) = entry.connection {
                if let Some(open) = state.per_connection.get_mut(&connection) {
                    *open -= 1;
                    if *open == 0 {
                        state.per_connection.remove(&connection);
                        shrink_map(&mut state.per_connection);
                    }
                }
            }
            entry.buckets.into_iter().map(|key| (key, stream)).collect()
        };
        self.forget(left).await;
    }

    /// Abandons every bucket of a stream idle for longer than `--rlqs-idle-timeout`: the stream
    /// is told so, its state dropped, and the bucket's other streams re-balanced.
    pub async fn sweep(&self) {
        let now = Instant::now();
        let left = {
            let mut guard = self.state.lock();
            let state = &mut *guard;
            let mut left = Vec::new();
            for (key, bucket) in &state.buckets {
                for (id, member) in &bucket.members {
                    let idle = should_abandon(
                        Duration::ZERO,
                        now.saturating_duration_since(member.last_used),
                        self.settings.idle_timeout,
                    );
                    if idle {
                        left.push((key.clone(), *id));
                    }
                }
            }
            for (key, id) in &left {
                if let Some(entry) = state.streams.get_mut(id) {
                    entry.buckets.remove(key);
                    shrink_set(&mut entry.buckets);
                    if entry.outbox.queue(key, Action::Abandon) {
                        self.to_wake.lock().push(entry.outbox.clone());
                    }
                }
            }
            left
        };
        if !left.is_empty() {
            tracing::debug!(
                buckets = left.len(),
                "RLQS buckets abandoned after their idle time"
            );
            self.forget(left).await;
        }
    }

    /// Computes the shares of every bucket due whose last computation is a gap old: buckets
    /// whose streams came or went, or reported in the gap. Called every
    /// [`RlqsSettings::rebalance_gap`].
    pub async fn rebalance_due(&self) {
        let now = Instant::now();
        let keys: Vec<Arc<BucketKey>> = {
            let state = self.state.lock();
            state
                .due
                .iter()
                .filter(|key| {
                    state
                        .buckets
                        .get(*key)
                        .is_some_and(|b| b.may_compute(now, self.settings.rebalance_gap))
                })
                .cloned()
                .collect()
        };
        for (index, key) in keys.iter().enumerate() {
            self.compute(key, None).await;
            if index % WAKE_EVERY == WAKE_EVERY - 1 {
                self.wake_queued();
                tokio::task::yield_now().await;
            }
        }
        self.wake_queued();
    }

    /// Notes that the rules changed: [`QuotaRegistry::follow_rule_changes`] applies them.
    /// Changes noted while it applies one are applied together once it is done, so a burst of
    /// versions costs one or two passes over the buckets, not one each.
    pub fn rules_changed(&self) {
        self.rules_dirty.notify_one();
    }

    /// Applies the rules in force each time [`QuotaRegistry::rules_changed`] is called (never
    /// returns; run it where RLQS work runs, off the serving threads).
    pub async fn follow_rule_changes(&self) {
        loop {
            self.rules_dirty.notified().await;
            self.apply_rules().await;
        }
    }

    /// Applies the rules in force: every bucket whose rule or strategy changed is due for a
    /// computation, which sends its streams their new assignments at the next tick without
    /// waiting for a report; the others are left as they are. The registry is held for
    /// [`RULE_CHUNK`] buckets at a time. The reported counts of rules no longer configured are
    /// dropped.
    pub async fn apply_rules(&self) {
        let rules = self.rules.load_full();
        let configured: HashSet<String> = rules
            .limits()
            .iter()
            .map(|limit| limit.path.clone())
            .collect();
        self.state
            .lock()
            .reported
            .retain(|rule, _| rule == UNMATCHED || configured.contains(rule));
        drop(configured);
        let mut after: Option<Arc<BucketKey>> = None;
        loop {
            let done = {
                let mut guard = self.state.lock();
                let state = &mut *guard;
                let from = after.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
                let mut seen = 0;
                let mut last = None;
                let mut due = Vec::new();
                for (key, bucket) in state
                    .buckets
                    .range_mut::<BucketKey, _>((from, Bound::Unbounded))
                    .take(RULE_CHUNK)
                {
                    seen += 1;
                    last = Some(key.clone());
                    let (rule, strategy) = self.rule_of(&rules, key);
                    if rule == bucket.rule && strategy == bucket.strategy {
                        continue;
                    }
                    bucket.rule = rule;
                    bucket.strategy = strategy;
                    if !bucket.due {
                        bucket.due = true;
                        due.push(key.clone());
                    }
                }
                state.due.extend(due);
                after = last;
                seen < RULE_CHUNK
            };
            if done {
                return;
            }
            tokio::task::yield_now().await;
        }
    }

    /// Open streams.
    pub fn streams(&self) -> usize {
        self.state.lock().streams.len()
    }

    /// Buckets subscribed by at least one stream.
    pub fn buckets(&self) -> usize {
        self.state.lock().buckets.len()
    }

    /// Assignments sent (queued for a stream), all streams.
    pub fn assignments_sent(&self) -> u64 {
        self.assignments_sent.load(Ordering::Relaxed)
    }

    /// Computations of a bucket's shares, all buckets.
    pub fn computations(&self) -> u64 {
        self.computations.load(Ordering::Relaxed)
    }

    /// Requests reported (allowed, denied) per rule label.
    pub fn reported(&self) -> Vec<(String, u64, u64)> {
        self.state
            .lock()
            .reported
            .iter()
            .map(|(rule, (allowed, denied))| (rule.clone(), *allowed, *denied))
            .collect()
    }

    /// The buckets after `after` (from the first when `None`), sorted by domain and bucket,
    /// with their streams: as many as hold at most `members` streams in all, and at least one.
    /// The registry is held for these buckets only.
    pub fn page(&self, after: Option<&BucketKey>, members: usize) -> Vec<BucketView> {
        let state = self.state.lock();
        let from = after.map_or(Bound::Unbounded, Bound::Excluded);
        let mut views = Vec::new();
        let mut taken = 0usize;
        for (key, bucket) in state
            .buckets
            .range::<BucketKey, _>((from, Bound::Unbounded))
        {
            if !views.is_empty() && taken.saturating_add(bucket.members.len()) > members {
                break;
            }
            taken = taken.saturating_add(bucket.members.len());
            let mut streams: Vec<MemberView> = bucket
                .members
                .iter()
                .map(|(id, member)| MemberView {
                    stream: *id,
                    demand: member.demand.rate(),
                    share: member.share,
                    assignment: member.sent,
                })
                .collect();
            streams.sort_unstable_by_key(|view| view.stream);
            views.push(BucketView {
                key: BucketKey::clone(key),
                rule: bucket.rule.clone(),
                strategy: bucket.strategy,
                streams,
            });
            if taken >= members {
                break;
            }
        }
        views
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::parse_domain;
    use crate::limiter::quota::TokenBucketAssignment;
    use crate::proto::rlqs;
    use crate::proto::rlqs::rate_limit_quota_usage_reports::BucketQuotaUsage;
    use crate::service::rlqs::settings::REBALANCE_GAP;
    use crate::store::MemoryDemands;

    const CONFIG: &str = "domain: d\ndescriptors:\n  - key: name\n    rate_limit: {unit: second, requests_per_unit: 10}\n";

    fn registry(gap: Duration) -> QuotaRegistry<MemoryDemands> {
        registry_with(RlqsSettings {
            rebalance_gap: gap,
            ..RlqsSettings::default()
        })
    }

    fn registry_with(settings: RlqsSettings) -> QuotaRegistry<MemoryDemands> {
        let domain = match parse_domain(Path::new("quota.yaml"), CONFIG) {
            Ok(domain) => domain,
            Err(errors) => panic!("unexpected errors:\n{errors}"),
        };
        let rules = Rules {
            domains: [("d".to_owned(), domain)].into_iter().collect(),
        };
        QuotaRegistry::new(
            Arc::new(ArcSwap::from_pointee(rules)),
            settings,
            MemoryDemands::new(),
        )
    }

    fn report(allowed: u64, elapsed_s: i64) -> RateLimitQuotaUsageReports {
        RateLimitQuotaUsageReports {
            domain: "d".into(),
            bucket_quota_usages: vec![BucketQuotaUsage {
                bucket_id: Some(rlqs::BucketId {
                    bucket: [("name".to_owned(), "api".to_owned())]
                        .into_iter()
                        .collect(),
                }),
                time_elapsed: Some(prost_types::Duration {
                    seconds: elapsed_s,
                    nanos: 0,
                }),
                num_requests_allowed: allowed,
                num_requests_denied: 0,
            }],
        }
    }

    /// The tokens per second of the token bucket waiting in `outbox`, if one waits; takes it.
    fn told(outbox: &Outbox) -> Option<f64> {
        let mut pending = outbox.pending.lock();
        let actions: Vec<Action> = pending.actions.drain().map(|(_, action)| action).collect();
        match actions.as_slice() {
            [] => None,
            [Action::Assign {
                assignment: Assignment::TokenBucket(bucket),
                ..
            }] => Some(rate(bucket)),
            other => panic!("one token bucket expected: {other:?}"),
        }
    }

    fn rate(bucket: &TokenBucketAssignment) -> f64 {
        f64::from(bucket.tokens_per_fill) / bucket.fill_interval.as_secs_f64()
    }

    #[test]
    fn the_gap_grows_with_the_streams_of_a_bucket_up_to_a_second() {
        let gap = REBALANCE_GAP;
        assert_eq!(gap_for(gap, 0), gap);
        assert_eq!(gap_for(gap, 100), gap);
        assert_eq!(gap_for(gap, 500), Duration::from_millis(500));
        assert_eq!(gap_for(gap, 100_000), Duration::from_secs(1));
        assert_eq!(gap_for(Duration::ZERO, 1000), Duration::ZERO);
        assert_eq!(
            gap_for(Duration::from_secs(3600), 5),
            Duration::from_secs(3600)
        );
    }

    #[tokio::test]
    async fn reports_within_the_gap_are_answered_without_a_computation() {
        let registry = registry(Duration::from_secs(3600));
        let (a, outbox_a) = registry.open(None).expect("a stream");
        let (b, outbox_b) = registry.open(None).expect("a stream");
        registry.report(a, report(1, 0)).await.expect("applied");
        assert_eq!(told(&outbox_a), Some(10.0), "alone: all of L");
        assert_eq!(registry.computations(), 1);

        registry.report(b, report(1, 0)).await.expect("applied");
        assert_eq!(
            told(&outbox_b),
            None,
            "a newcomer waits for the next computation"
        );
        for _ in 0..100 {
            registry.report(a, report(50, 5)).await.expect("applied");
            assert_eq!(told(&outbox_a), Some(10.0), "renewed as it was");
        }
        registry.rebalance_due().await;
        assert_eq!(
            registry.computations(),
            1,
            "101 reports within the gap, one computation"
        );
    }

    #[tokio::test]
    async fn the_next_computation_counts_what_the_gap_held() {
        let registry = registry(Duration::ZERO);
        let (a, outbox_a) = registry.open(None).expect("a stream");
        let (b, outbox_b) = registry.open(None).expect("a stream");
        registry.report(a, report(1, 0)).await.expect("applied");
        assert_eq!(told(&outbox_a), Some(10.0));
        registry.report(b, report(1, 0)).await.expect("applied");
        assert_eq!(told(&outbox_b), Some(5.0), "a newcomer's equal share");
        assert_eq!(told(&outbox_a), Some(5.0), "pushed to the other");

        registry.leave(b).await;
        assert_eq!(told(&outbox_a), None, "a departure waits for the tick");
        registry.rebalance_due().await;
        assert_eq!(told(&outbox_a), Some(10.0), "released at the tick");
        registry.rebalance_due().await;
        assert_eq!(told(&outbox_a), None, "nothing due, nothing sent");
    }

    #[tokio::test]
    async fn reported_counts_of_rules_no_longer_configured_are_dropped() {
        let registry = registry(Duration::ZERO);
        let (a, _outbox) = registry.open(None).expect("a stream");
        registry.report(a, report(7, 5)).await.expect("applied");
        assert_eq!(registry.reported(), vec![("d.name".to_owned(), 7, 0)]);
        let renamed = CONFIG.replace("key: name", "key: other");
        let domain = parse_domain(Path::new("quota.yaml"), &renamed).expect("valid");
        registry.rules.store(Arc::new(Rules {
            domains: [("d".to_owned(), domain)].into_iter().collect(),
        }));
        registry.apply_rules().await;
        assert_eq!(registry.reported(), vec![]);
        registry.report(a, report(3, 5)).await.expect("applied");
        assert_eq!(registry.reported(), vec![(UNMATCHED.to_owned(), 3, 0)]);
    }

    #[tokio::test]
    async fn global_shadow_or_quota_mode_allows_every_bucket_and_still_counts() {
        let registry = registry_with(RlqsSettings {
            never_deny: true,
            ..RlqsSettings::default()
        });
        let (a, outbox) = registry.open(None).expect("a stream");
        registry.report(a, report(7, 5)).await.expect("applied");
        let actions: Vec<Action> = outbox
            .pending
            .lock()
            .actions
            .drain()
            .map(|(_, a)| a)
            .collect();
        assert!(
            matches!(
                actions.as_slice(),
                [Action::Assign {
                    assignment: Assignment::Blanket(BlanketRule::AllowAll),
                    ..
                }]
            ),
            "{actions:?}"
        );
        assert_eq!(registry.reported(), vec![("d.name".to_owned(), 7, 0)]);
    }
}
