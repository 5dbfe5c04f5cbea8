//! The Redis store on a real Redis Cluster (three masters started by the test), through the
//! library: one script call per node per batch, requests spanning nodes decided all or nothing
//! (a request denied on one node leaves no trace on the others), and the slot map followed when
//! slots move.

use std::collections::BTreeSet;

use futures::future::join_all;
use ratelimitd::limiter::counter_key::CounterKey;
use ratelimitd::limiter::{Algorithm, Entry, Rate, Unit};
use ratelimitd::store::redis::scripts::keys::hash_tag;
use ratelimitd::store::redis::{HostPort, RedisSettings, ServerAuth, Topology};
use ratelimitd::store::{Check, RedisStore, Store};
use testkit::redis_cluster::RedisCluster;
use testkit::redis_server::state_key_now;

fn counter(key: &str, value: &str) -> CounterKey {
    CounterKey::new(
        "cluster",
        &[Entry {
            key: key.into(),
            value: value.into(),
        }],
    )
}

fn rate(algorithm: Algorithm, limit: u32) -> Rate {
    Rate::new(algorithm, limit, Unit::Hour, 1, None).expect("rate")
}

fn check(counter: &CounterKey, rate: Rate, hits: u64) -> Check {
    Check {
        key: counter.clone(),
        rate,
        hits,
        shadow: false,
        consistency: ratelimitd::limiter::Consistency::Exact,
        rule: None,
    }
}

/// The master holding `counter`'s keys (their slot is their hash tag's).
fn master_of(cluster: &RedisCluster, counter: &CounterKey) -> u16 {
    cluster.master_of_key(&format!("{{{}}}", hash_tag(counter)))
}

/// Three counters `<name>-<n>` whose keys live on three different masters, the first found from
/// `start` on.
fn spread(cluster: &RedisCluster, name: &str, start: &mut usize) -> [CounterKey; 3] {
    let mut found: Vec<(u16, CounterKey)> = Vec::new();
    while found.len() < 3 {
        let candidate = counter(name, &format!("v{start}"));
        *start += 1;
        let master = master_of(cluster, &candidate);
        if found.iter().all(|(m, _)| *m != master) {
            found.push((master, candidate));
        }
    }
    let masters: BTreeSet<u16> = found.iter().map(|(m, _)| *m).collect();
    assert_eq!(masters.len(), 3, "three counters on three masters");
    [found[0].1.clone(), found[1].1.clone(), found[2].1.clone()]
}

async fn connect(cluster: &RedisCluster) -> RedisStore {
    let seeds = HostPort::parse_list(&cluster.seeds()).expect("seeds");
    RedisStore::connect(RedisSettings {
        timeout: std::time::Duration::from_secs(5),
        ..RedisSettings::for_topology(Topology::Cluster {
            seeds,
            auth: ServerAuth::default(),
        })
    })
    .await
    .expect("connect to the test cluster")
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// 64 requests of three checks each, on three masters, queued before the store's dispatcher runs
/// (one thread): ONE batch, so one script call per master; then a request denied on one master
/// costs that master its call and each other master its call plus one refund.
#[test]
fn a_batch_costs_one_script_call_per_node_and_a_denial_one_refund_per_other_node() {
    let cluster = RedisCluster::start(3, 0);
    current_thread().block_on(async {
        let store = connect(&cluster).await;
        let gcra = rate(Algorithm::Gcra, 1_000);
        let mut next = 0;
        let requests: Vec<Vec<Check>> = (0..64)
            .map(|_| {
                spread(&cluster, "batch", &mut next)
                    .iter()
                    .map(|c| check(c, gcra, 1))
                    .collect()
            })
            .collect();
        // Warm up every thread pool's connections, then count from zero.
        store.decide(&requests[0]).await.expect("warm-up");
        cluster.reset_commandstats();
        let (calls_before, carried_before) = (store.script_calls(), store.script_call_requests());
        let answers = join_all(requests.iter().map(|checks| store.decide(checks))).await;
        for answer in answers {
            let verdicts = answer.expect("decided");
            assert!(verdicts.iter().all(|v| v.admitted), "{verdicts:?}");
        }
        for master in cluster.masters() {
            assert_eq!(
                cluster.script_calls(master),
                1,
                "master {master}: one script call for the batch of 64 requests"
            );
        }
        assert_eq!(
            store.script_calls() - calls_before,
            3,
            "one call per master"
        );
        assert_eq!(
            store.script_call_requests() - carried_before,
            3 * 64,
            "each request counted once on each master its checks reach"
        );

        let [exhausted, b, c] = spread(&cluster, "deny", &mut next);
        let tight = rate(Algorithm::FixedWindow, 1);
        assert!(
            store
                .decide(&[check(&exhausted, tight, 1)])
                .await
                .expect("first")[0]
                .admitted
        );
        cluster.reset_commandstats();
        let calls_before = store.script_calls();
        let wide = rate(Algorithm::FixedWindow, 100);
        let verdicts = store
            .decide(&[
                check(&exhausted, tight, 1),
                check(&b, wide, 1),
                check(&c, wide, 1),
            ])
            .await
            .expect("decided");
        assert!(!verdicts[0].admitted && verdicts[1].admitted && verdicts[2].admitted);
        assert_eq!(cluster.script_calls(master_of(&cluster, &exhausted)), 1);
        assert_eq!(
            store.script_calls() - calls_before,
            3,
            "the refunds are calls of another script"
        );
        for other in [&b, &c] {
            let master = master_of(&cluster, other);
            assert_eq!(
                cluster.script_calls(master),
                2,
                "master {master}: the decision and its refund"
            );
            let mut connection = cluster.connection(master);
            let count: Option<u64> = redis::cmd("GET")
                .arg(state_key_now(&mut connection, other, &wide))
                .query(&mut connection)
                .expect("GET");
            let count = count.unwrap_or(0);
            assert_eq!(
                count, 0,
                "the denied request left nothing on master {master}"
            );
        }
    });
}

/// For every algorithm: with one check exhausted, 20 requests spanning three masters are all
/// denied, and the counters on the other two masters end as full as if never asked (a check-only
/// request sees the whole limit).
#[test]
fn a_request_denied_on_one_node_consumes_nothing_on_the_others_for_every_algorithm() {
    let cluster = RedisCluster::start(3, 0);
    current_thread().block_on(async {
        let store = connect(&cluster).await;
        let mut next = 0;
        for algorithm in Algorithm::ALL {
            let [exhausted, b, c] = spread(&cluster, algorithm.as_str(), &mut next);
            let tight = rate(algorithm, 2);
            let wide = rate(algorithm, 50);
            assert!(
                store
                    .decide(&[check(&exhausted, tight, 2)])
                    .await
                    .expect("take all")[0]
                    .admitted
            );
            for _ in 0..20 {
                let verdicts = store
                    .decide(&[
                        check(&b, wide, 3),
                        check(&exhausted, tight, 1),
                        check(&c, wide, 2),
                    ])
                    .await
                    .expect("decided");
                assert!(!verdicts[1].admitted, "{algorithm:?}: {verdicts:?}");
            }
            for other in [&b, &c] {
                let verdict = store.decide(&[check(other, wide, 0)]).await.expect("peek")[0];
                assert_eq!(
                    verdict.remaining, 50,
                    "{algorithm:?}: a counter on another master after 20 denied requests"
                );
            }
        }
    });
}

/// Slots moving under the store (`redis-cli --cluster reshard` while requests run): every request
/// is decided (redirections followed), and each counter admits exactly its limit.
#[test]
fn requests_during_a_reshard_are_all_decided_and_exact() {
    let cluster = RedisCluster::start(3, 0);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let store = runtime.block_on(connect(&cluster));
    let masters = cluster.masters();
    let reshard = cluster.spawn_reshard(masters[0], masters[1], 2_000);
    let limit = 20;
    let counters: Vec<CounterKey> = (0..300)
        .map(|i| counter("reshard", &format!("k{i}")))
        .collect();
    let (admitted, rounds) = runtime.block_on(async {
        let mut admitted = vec![0u32; counters.len()];
        let mut rounds = 0;
        // Until the reshard is done (and a few rounds more), bounded.
        let mut after = 0;
        while after < 3 && rounds < 400 {
            if reshard.is_finished() {
                after += 1;
            }
            let round = rounds;
            rounds += 1;
            let calls = counters.iter().map(|c| {
                let store = store.clone();
                let check = check(c, rate(Algorithm::FixedWindow, limit), 1);
                async move { store.decide(&[check]).await }
            });
            for (i, answer) in join_all(calls).await.into_iter().enumerate() {
                let verdicts = answer
                    .unwrap_or_else(|e| panic!("round {round}, counter {i}: {e} during a reshard"));
                admitted[i] += u32::from(verdicts[0].admitted);
            }
        }
        (admitted, rounds)
    });
    reshard.join().expect("reshard finished");
    let expected = rounds.min(limit);
    assert!(
        admitted.iter().all(|&n| n == expected),
        "every counter admits exactly {expected} in {rounds} rounds: {admitted:?}"
    );
    assert!(
        cluster.slot_count(masters[1]) > cluster.slot_count(masters[2]),
        "the reshard moved slots"
    );
    assert!(
        store.slot_map_refreshes() > 0,
        "the store met moved slots and read the slot map again"
    );
}
