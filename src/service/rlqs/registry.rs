//! Every subscribed bucket of every RLQS stream of this process, and what each stream was told.
//!
//! A bucket is keyed by its stream's domain and its id. Each stream reporting it keeps its own
//! smoothed [`Demand`]; the demands go through [`QuotaDemands`], and each report recomputes the
//! fair shares of the bucket's limit over every stream's demand. The reporting stream always gets
//! its assignment (which renews its time to live); any other stream only when its assignment
//! changed. A stream leaving, a bucket going idle and a rule changing re-balance the others.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use tokio::sync::Notify;
use tonic::Status;

use super::convert::{self, Action, Assignment};
use super::settings::RlqsSettings;
use crate::limiter::quota::{
    assignment_ttl, fair_shares, find_quota, should_abandon, token_bucket, BlanketRule, BucketId,
    Demand, QuotaStrategy, DEFAULT_FLOOR_FRACTION, DEFAULT_HALF_LIFE, DEFAULT_MAX_FILL_INTERVAL,
    DEFAULT_TTL_PERIODS,
};
use crate::limiter::Rules;
use crate::proto::rlqs::{RateLimitQuotaResponse, RateLimitQuotaUsageReports};
use crate::service::throttle::WarnThrottle;
use crate::store::{QuotaDemands, StreamDemand};

/// The `rule` label of buckets no rule matches.
pub const UNMATCHED: &str = "unmatched";

/// A bucket of a domain.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BucketKey {
    pub domain: String,
    pub bucket: BucketId,
}

impl BucketKey {
    /// The key of the bucket's demands in [`QuotaDemands`].
    fn demands_key(&self) -> String {
        format!("{}\u{0}{}", self.domain, self.bucket)
    }
}

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

#[derive(Debug)]
struct BucketState {
    rule: String,
    strategy: QuotaStrategy,
    members: BTreeMap<u64, Member>,
}

/// What a stream is waiting to send, and whether it ends.
#[derive(Debug, Default)]
pub struct Outbox {
    pending: Mutex<Pending>,
    notify: Notify,
}

#[derive(Debug, Default)]
struct Pending {
    /// The latest action per bucket: at most one per bucket the stream subscribed.
    actions: HashMap<BucketId, Action>,
    end: Option<Result<(), Status>>,
}

impl Outbox {
    fn push(&self, bucket: &BucketId, action: Action) {
        self.pending.lock().actions.insert(bucket.clone(), action);
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

    /// The next message to send: every pending action in one response, then the end (`None`
    /// after a clean end, the status after an error).
    pub async fn next(&self) -> Option<Result<RateLimitQuotaResponse, Status>> {
        loop {
            {
                let mut pending = self.pending.lock();
                if !pending.actions.is_empty() {
                    let mut actions: Vec<(BucketId, Action)> = pending.actions.drain().collect();
                    actions.sort_by(|a, b| a.0.cmp(&b.0));
                    return Some(Ok(RateLimitQuotaResponse {
                        bucket_action: actions
                            .iter()
                            .map(|(bucket, action)| convert::bucket_action(bucket, action))
                            .collect(),
                    }));
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
    buckets: HashSet<BucketKey>,
    unknown_domain_logged: bool,
}

#[derive(Debug, Default)]
struct State {
    buckets: HashMap<BucketKey, BucketState>,
    streams: HashMap<u64, StreamEntry>,
    /// rule label -> (allowed, denied) reported.
    reported: BTreeMap<String, (u64, u64)>,
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
    ttl: Duration,
    store_errors: WarnThrottle,
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
            ttl: assignment_ttl(settings.report_period, DEFAULT_TTL_PERIODS),
            store_errors: WarnThrottle::new(),
        }
    }

    pub fn settings(&self) -> &RlqsSettings {
        &self.settings
    }

    /// Opens a stream: its id and outbox; RESOURCE_EXHAUSTED at `--rlqs-max-streams`.
    pub fn open(&self) -> Result<(u64, Arc<Outbox>), Status> {
        let mut state = self.state.lock();
        if state.streams.len() >= self.settings.max_streams {
            return Err(Status::resource_exhausted(format!(
                "the server holds its {} RLQS streams (--rlqs-max-streams)",
                self.settings.max_streams
            )));
        }
        let id = self.next_stream.fetch_add(1, Ordering::Relaxed);
        let outbox = Arc::new(Outbox::default());
        state.streams.insert(
            id,
            StreamEntry {
                outbox: outbox.clone(),
                buckets: HashSet::new(),
                unknown_domain_logged: false,
            },
        );
        Ok((id, outbox))
    }

    /// What `rules` make of `key`: the rule label and the strategy.
    fn rule_of(&self, rules: &Rules, key: &BucketKey) -> (String, QuotaStrategy) {
        let found = rules
            .domain(&key.domain)
            .and_then(|domain| find_quota(domain, &key.bucket));
        let rule = found
            .as_ref()
            .map_or_else(|| UNMATCHED.to_owned(), |found| found.limit.path.clone());
        let strategy = QuotaStrategy::for_rule(
            found.map(|found| found.limit.as_ref()),
            self.settings.unmatched,
        );
        (rule, strategy)
    }

    /// Applies one usage report of `stream`: subscribes new buckets, updates demands and sends
    /// the assignments. An error ends the stream (the bucket cap).
    pub async fn report(
        &self,
        stream: u64,
        reports: RateLimitQuotaUsageReports,
    ) -> Result<(), Status> {
        let rules = self.rules.load_full();
        if rules.domain(&reports.domain).is_none() {
            let mut state = self.state.lock();
            if let Some(entry) = state.streams.get_mut(&stream) {
                if !entry.unknown_domain_logged {
                    entry.unknown_domain_logged = true;
                    tracing::warn!(
                        domain = %reports.domain,
                        stream,
                        "RLQS report for a domain no configuration defines: its buckets get the unmatched blanket rule (--rlqs-unmatched)"
                    );
                }
            }
        }
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
            let elapsed = convert::elapsed(usage.time_elapsed.as_ref());
            let (allowed, denied) = (usage.num_requests_allowed, usage.num_requests_denied);
            let (strategy, demand) = {
                let mut guard = self.state.lock();
                let state = &mut *guard;
                let Some(entry) = state.streams.get_mut(&stream) else {
                    return Ok(());
                };
                if !entry.buckets.contains(&key) {
                    if entry.buckets.len() >= self.settings.max_buckets_per_stream {
                        return Err(Status::resource_exhausted(format!(
                            "this stream reports more than {} buckets (--rlqs-max-buckets-per-stream)",
                            self.settings.max_buckets_per_stream
                        )));
                    }
                    entry.buckets.insert(key.clone());
                }
                let bucket = match state.buckets.get_mut(&key) {
                    Some(bucket) => bucket,
                    None => {
                        let (rule, strategy) = self.rule_of(&rules, &key);
                        state.buckets.entry(key.clone()).or_insert(BucketState {
                            rule,
                            strategy,
                            members: BTreeMap::new(),
                        })
                    }
                };
                let now = Instant::now();
                let member = bucket.members.entry(stream).or_insert(Member {
                    demand: Demand::new(),
                    last_used: now,
                    share: None,
                    sent_raw: None,
                    sent: None,
                });
                member
                    .demand
                    .observe(allowed, denied, elapsed, DEFAULT_HALF_LIFE);
                if allowed > 0 || denied > 0 {
                    member.last_used = now;
                }
                let counts = state.reported.entry(bucket.rule.clone()).or_default();
                counts.0 = counts.0.saturating_add(allowed);
                counts.1 = counts.1.saturating_add(denied);
                (bucket.strategy, member.demand.rate())
            };
            let all = match strategy {
                QuotaStrategy::Blanket(_) => None,
                QuotaStrategy::Limited(_) => {
                    let published = self
                        .demands
                        .publish(&key.demands_key(), stream, demand, self.ttl)
                        .await;
                    self.demands_or_local(published)
                }
            };
            self.rebalance(&key, all, Some(stream));
        }
        Ok(())
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
        key: &BucketKey,
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
                for (id, member) in &bucket.members {
                    if !all.iter().any(|(other, _)| other == id) {
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
            let sent = match (changed, assignment, member.sent) {
                (false, _, Some(sent)) => sent,
                (_, Assignment::TokenBucket(new), Some(Assignment::TokenBucket(previous))) => {
                    Assignment::TokenBucket(new.distinct_from(&previous))
                }
                _ => assignment,
            };
            member.sent_raw = Some(assignment);
            member.sent = Some(sent);
            entry.outbox.push(
                &key.bucket,
                Action::Assign {
                    assignment: sent,
                    ttl: self.ttl,
                },
            );
            self.assignments_sent.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Re-balances `keys` after streams left them.
    async fn rebalance_after_leaving(&self, left: Vec<(BucketKey, u64)>) {
        let mut touched: Vec<BucketKey> = Vec::new();
        for (key, stream) in left {
            self.demands.remove(&key.demands_key(), stream).await;
            if !touched.contains(&key) {
                touched.push(key);
            }
        }
        for key in touched {
            self.rebalance_from_store(&key, None).await;
        }
    }

    async fn rebalance_from_store(&self, key: &BucketKey, reporter: Option<u64>) {
        let limited = {
            let state = self.state.lock();
            match state.buckets.get(key) {
                None => return,
                Some(bucket) => matches!(bucket.strategy, QuotaStrategy::Limited(_)),
            }
        };
        let all = if limited {
            let read = self.demands.read(&key.demands_key()).await;
            self.demands_or_local(read)
        } else {
            None
        };
        self.rebalance(key, all, reporter);
    }

    /// Forgets a stream that ended and re-balances the buckets it reported.
    pub async fn leave(&self, stream: u64) {
        let left = {
            let mut guard = self.state.lock();
            let state = &mut *guard;
            let Some(entry) = state.streams.remove(&stream) else {
                return;
            };
            let mut left = Vec::new();
            for key in entry.buckets {
                if let Some(bucket) = state.buckets.get_mut(&key) {
                    bucket.members.remove(&stream);
                    if bucket.members.is_empty() {
                        state.buckets.remove(&key);
                    }
                }
                left.push((key, stream));
            }
            left
        };
        self.rebalance_after_leaving(left).await;
    }

    /// Abandons every bucket of a stream idle for longer than `--rlqs-idle-timeout`: the stream
    /// is told so, its state dropped, and the bucket's other streams re-balanced.
    pub async fn sweep(&self) {
        let now = Instant::now();
        let left = {
            let mut guard = self.state.lock();
            let state = &mut *guard;
            let mut left = Vec::new();
            state.buckets.retain(|key, bucket| {
                bucket.members.retain(|id, member| {
                    let idle = should_abandon(
                        Duration::ZERO,
                        now.saturating_duration_since(member.last_used),
                        self.settings.idle_timeout,
                    );
                    if idle {
                        left.push((key.clone(), *id));
                    }
                    !idle
                });
                !bucket.members.is_empty()
            });
            for (key, id) in &left {
                if let Some(entry) = state.streams.get_mut(id) {
                    entry.buckets.remove(key);
                    entry.outbox.push(&key.bucket, Action::Abandon);
                }
            }
            left
        };
        if !left.is_empty() {
            tracing::debug!(
                buckets = left.len(),
                "RLQS buckets abandoned after their idle time"
            );
            self.rebalance_after_leaving(left).await;
        }
    }

    /// Applies changed rules: every bucket whose rule or share changed gets its new assignment
    /// on every subscribed stream, without waiting for a report.
    pub async fn rules_changed(&self) {
        let rules = self.rules.load_full();
        let keys: Vec<BucketKey> = {
            let mut state = self.state.lock();
            let mut keys = Vec::with_capacity(state.buckets.len());
            for (key, bucket) in state.buckets.iter_mut() {
                let (rule, strategy) = self.rule_of(&rules, key);
                bucket.rule = rule;
                bucket.strategy = strategy;
                keys.push(key.clone());
            }
            keys
        };
        for key in keys {
            self.rebalance_from_store(&key, None).await;
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

    /// Requests reported (allowed, denied) per rule label.
    pub fn reported(&self) -> Vec<(String, u64, u64)> {
        self.state
            .lock()
            .reported
            .iter()
            .map(|(rule, (allowed, denied))| (rule.clone(), *allowed, *denied))
            .collect()
    }

    /// Every bucket with its streams, sorted by domain and bucket.
    pub fn snapshot(&self) -> Vec<BucketView> {
        let state = self.state.lock();
        let mut views: Vec<BucketView> = state
            .buckets
            .iter()
            .map(|(key, bucket)| BucketView {
                key: key.clone(),
                rule: bucket.rule.clone(),
                strategy: bucket.strategy,
                streams: bucket
                    .members
                    .iter()
                    .map(|(id, member)| MemberView {
                        stream: *id,
                        demand: member.demand.rate(),
                        share: member.share,
                        assignment: member.sent,
                    })
                    .collect(),
            })
            .collect();
        views.sort_by(|a, b| a.key.cmp(&b.key));
        views
    }
}
