//! Expiry by TTL: a record's key expires with the record, so nothing is ever left to sweep.

use std::time::Duration;

use idemkey_core::testkit::{LONG, request};
use idemkey_core::{Begin, ExpiredLease, Store, StoredResponse, begin};
use idemkey_test_support::runner::needs::redis_url;
use redis::AsyncCommands;

use crate::common::{Store as RedisStore, standalone_store};

async fn claim(store: &RedisStore, req: &idemkey_core::ClaimRequest) -> idemkey_core::Claim {
    match begin(store, req, ExpiredLease::TakeOver).await.unwrap() {
        Begin::Execute(claim) => claim,
        other => panic!("expected to execute, got {other:?}"),
    }
}

/// The key's time to live in ms (-2: no key; -1: no expiry).
async fn pttl(store: &RedisStore, key: &str) -> i64 {
    store.connection().clone().pttl(key).await.unwrap()
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis])]
async fn an_expired_record_is_gone_without_a_sweep() {
    let store = standalone_store().await;
    let req = request("{}").retention(Duration::ZERO);
    let key = store.record_key(&req.scope);
    let held = claim(&store, &req).await;
    store
        .complete(&held, &StoredResponse::new(201, "x"))
        .await
        .unwrap();
    // Completed with a retention of zero: expired, and its key deleted by Redis already.
    assert_eq!(pttl(&store, &key).await, -2);
    let exists: bool = store.connection().clone().exists(&key).await.unwrap();
    assert!(!exists);
    assert_eq!(store.lookup(&req.scope).await.unwrap(), None);
    assert_eq!(store.sweep(100).await.unwrap(), 0);
}

/// The key expires exactly when the record does: an in-flight record after its lease plus the
/// retention (as the SQL stores set `expires_at`), so a retention of zero never deletes a
/// claim still in flight; a completed one after the retention from completion.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis])]
async fn keys_expire_with_their_records() {
    let store = standalone_store().await;
    let req = request("{}").lease(LONG).retention(Duration::ZERO);
    let key = store.record_key(&req.scope);
    let held = claim(&store, &req).await;
    let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap();
    let in_flight = pttl(&store, &key).await;
    assert!(
        in_flight > ms(LONG) - 5_000 && in_flight <= ms(LONG),
        "{in_flight}"
    );
    let mut longer = held.clone();
    longer.retention = LONG;
    store.extend(&mut longer).await.unwrap();
    let extended = pttl(&store, &key).await;
    assert!(extended > 2 * ms(LONG) - 5_000, "{extended}");
    store
        .complete(&longer, &StoredResponse::new(200, "ok"))
        .await
        .unwrap();
    let completed = pttl(&store, &key).await;
    assert!(
        completed > ms(LONG) - 5_000 && completed <= ms(LONG),
        "{completed}"
    );
}

/// The secret lives at `{prefix}:secret` with no expiry, the same for every store on the
/// prefix, and is read once per store.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis])]
async fn the_secret_is_shared_by_stores_on_a_prefix() {
    let url = redis_url();
    let prefix = crate::common::unique_prefix();
    let options = idemkey_redis::RedisOptions::new().prefix(&prefix);
    let a = idemkey_redis::RedisStore::connect_with(&url, &options)
        .await
        .unwrap();
    let b = idemkey_redis::RedisStore::connect_with(&url, &options)
        .await
        .unwrap();
    let secret = a.secret().await.unwrap();
    assert_eq!(b.secret().await.unwrap(), secret);
    let key = format!("{prefix}:secret");
    let stored: Vec<u8> = a.connection().clone().get(&key).await.unwrap();
    assert_eq!(&stored[..], &secret[..]);
    assert_eq!(pttl(&a, &key).await, -1);
    let _: () = a.connection().clone().del(&key).await.unwrap();
}
