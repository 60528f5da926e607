//! Per-actor caps (behaviour §11) on a standalone server, where the claim and completion
//! scripts keep each actor's ledger, and on a cluster, where the ledger has scripts of its
//! own: an actor at a cap is refused and nothing is created, a retry of an existing record is
//! answered from it, concurrent requests are counted one at a time, and a discard or a forget
//! makes room. Then what a keyed create costs the server: two scripts, caps or not.

use std::time::Duration;

use idemkey_core::testkit::LONG;
use idemkey_core::{
    ActorCaps, Cap, ClaimRequest, Error, Fingerprint, Operation, Store, StoredResponse, TryClaim,
};
use idemkey_redis::{RedisOptions, RedisStore};
use idemkey_test_support::process::redis::{Cluster, RedisServer};

use crate::common::{Store as Redis, standalone_store, store_at, unique_prefix};

/// A keyed create of `actor` under `key`, with a lease and retention no test outlives.
fn keyed(actor: &str, key: &str) -> ClaimRequest {
    let fingerprint = Fingerprint::builder("POST", "/v1/notes").body(b"{}");
    ClaimRequest::new(
        actor,
        Operation::new("create-note", "v1"),
        key.parse().unwrap(),
        fingerprint,
    )
    .lease(LONG)
    .retention(LONG)
}

/// Claims and completes `req` with a body of `bytes` bytes, or returns what the claim met.
async fn create(store: &Redis, req: &ClaimRequest, bytes: usize) -> Result<bool, Error> {
    match store.try_claim(req).await? {
        TryClaim::Claimed(claim) => {
            let response = StoredResponse::new(201, "x".repeat(bytes));
            store.complete(&claim, &response).await?;
            Ok(true)
        }
        TryClaim::Existing(_) => Ok(false),
    }
}

/// Asserts that `req` is refused at `cap` and that nothing was created for it.
async fn assert_refused(store: &Redis, req: &ClaimRequest, cap: Cap) {
    match store.try_claim(req).await {
        Err(Error::ActorCap {
            cap: met,
            retry_after,
        }) => {
            assert_eq!(met, cap);
            assert!(retry_after >= Duration::from_secs(1), "{retry_after:?}");
        }
        other => panic!("expected a refusal at {cap}, got {other:?}"),
    }
    assert!(store.lookup(&req.scope).await.unwrap().is_none());
}

async fn records_cap(store: Redis) {
    let (alice, bob) = (format!("alice-{}", unique_prefix()), "bob".to_owned());
    let store = store.with_actor_caps(ActorCaps::new().max_records(2));
    assert!(create(&store, &keyed(&alice, "k1"), 10).await.unwrap());
    // In flight counts as much as completed.
    let TryClaim::Claimed(held) = store.try_claim(&keyed(&alice, "k2")).await.unwrap() else {
        panic!("expected a claim");
    };
    for _ in 0..2 {
        assert_refused(&store, &keyed(&alice, "k3"), Cap::Records).await;
    }
    // A retry of a record that exists is answered from it, at the cap or not.
    assert!(!create(&store, &keyed(&alice, "k1"), 10).await.unwrap());
    assert!(!create(&store, &keyed(&alice, "k2"), 10).await.unwrap());
    // Other actors have caps of their own.
    assert!(create(&store, &keyed(&bob, "k3"), 10).await.unwrap());
    // A discard makes room; a release keeps the record, and its place.
    store.discard(&held).await.unwrap();
    let TryClaim::Claimed(held) = store.try_claim(&keyed(&alice, "k3")).await.unwrap() else {
        panic!("expected a claim once a discard made room");
    };
    store.release(&held).await.unwrap();
    assert_refused(&store, &keyed(&alice, "k4"), Cap::Records).await;
    // A forget by a store without caps on the same prefix makes room all the same.
    let plain = store.clone().with_actor_caps(ActorCaps::new());
    assert!(plain.forget(&keyed(&alice, "k1").scope).await.unwrap());
    assert!(create(&store, &keyed(&alice, "k4"), 10).await.unwrap());
    assert_refused(&store, &keyed(&alice, "k5"), Cap::Records).await;
}

async fn bytes_cap(store: Redis) {
    let alice = format!("alice-{}", unique_prefix());
    let store = store.with_actor_caps(ActorCaps::new().max_bytes(1500));
    assert!(create(&store, &keyed(&alice, "k1"), 1000).await.unwrap());
    // The answer that crosses the cap is stored whole.
    assert!(create(&store, &keyed(&alice, "k2"), 1000).await.unwrap());
    assert_refused(&store, &keyed(&alice, "k3"), Cap::Bytes).await;
    assert!(!create(&store, &keyed(&alice, "k2"), 1000).await.unwrap());
    assert!(store.forget(&keyed(&alice, "k1").scope).await.unwrap());
    assert!(create(&store, &keyed(&alice, "k3"), 10).await.unwrap());
}

/// Twelve requests of one actor at once under a cap of five records: five are claimed, the
/// others refused, whatever the order.
async fn concurrent_requests(store: Redis) {
    let alice = format!("alice-{}", unique_prefix());
    let store = store.with_actor_caps(ActorCaps::new().max_records(5));
    let tasks: Vec<_> = (0..12)
        .map(|n| {
            let (store, req) = (store.clone(), keyed(&alice, &format!("k{n}")));
            tokio::spawn(async move { store.try_claim(&req).await })
        })
        .collect();
    let (mut claimed, mut refused) = (0, 0);
    for task in tasks {
        match task.await.unwrap() {
            Ok(TryClaim::Claimed(_)) => claimed += 1,
            Err(Error::ActorCap {
                cap: Cap::Records, ..
            }) => refused += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!((claimed, refused), (5, 7));
}

async fn cluster_store() -> Redis {
    let cluster = tokio::task::spawn_blocking(Cluster::get).await.unwrap();
    store_at(&cluster.url()).await
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis])]
async fn an_actor_at_its_record_cap_is_refused() {
    records_cap(standalone_store().await).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis])]
async fn an_actor_at_its_byte_cap_is_refused() {
    bytes_cap(standalone_store().await).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis])]
async fn concurrent_requests_are_counted_one_at_a_time() {
    concurrent_requests(standalone_store().await).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis_server])]
async fn caps_hold_on_a_cluster() {
    records_cap(cluster_store().await).await;
    bytes_cap(cluster_store().await).await;
    concurrent_requests(cluster_store().await).await;
}

/// Scripts a keyed create (claim, then completion) runs on a server of its own, and the
/// commands they run, from `INFO commandstats` after a `CONFIG RESETSTAT`. Another key's
/// create first, so that both scripts are loaded.
async fn calls_per_create(caps: ActorCaps) -> (u64, String) {
    let server = RedisServer::start(&[]);
    let options = RedisOptions::new().prefix(unique_prefix());
    let store = RedisStore::connect_with(&server.url(), &options)
        .await
        .unwrap()
        .with_actor_caps(caps);
    assert!(create(&store, &keyed("alice", "warm"), 100).await.unwrap());
    server.cli(&["CONFIG", "RESETSTAT"]);
    assert!(create(&store, &keyed("alice", "k1"), 100).await.unwrap());
    let scripts = server.calls("evalsha") + server.calls("eval");
    (scripts, server.cli(&["INFO", "commandstats"]))
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis_server])]
async fn a_keyed_create_is_two_scripts_caps_or_not() {
    let caps = ActorCaps::new().max_records(100).max_bytes(1 << 20);
    for caps in [ActorCaps::new(), caps] {
        let (scripts, stats) = calls_per_create(caps).await;
        assert_eq!(scripts, 2, "{caps:?}:\n{stats}");
    }
}
