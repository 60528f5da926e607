//! The replay cache (`RedisOptions::replay_cache`): replays answered from the process, and
//! every change to a cached record, by whoever makes it, seen at once through the server's
//! invalidations.

use std::time::{Duration, Instant};

use idemkey_core::testkit::request;
use idemkey_core::{Begin, ClaimRequest, ExpiredLease, Store, StoredResponse, TryClaim, begin};
use idemkey_redis::{RedisOptions, RedisStore};
use idemkey_test_support::process::redis::RedisServer;
use idemkey_test_support::runner::needs::{redis_url, valkey_program};

use crate::common::{Store as Redis, unique_prefix};

/// Memory enough for every test here.
const BYTES: u64 = 1 << 20;

async fn cached_store(url: &str, prefix: &str) -> Redis {
    let options = RedisOptions::new().prefix(prefix).replay_cache(BYTES);
    RedisStore::connect_with(url, &options).await.unwrap()
}

async fn plain_store(url: &str, prefix: &str) -> Redis {
    let options = RedisOptions::new().prefix(prefix);
    RedisStore::connect_with(url, &options).await.unwrap()
}

/// Claims and completes `req` through `store`.
async fn completed(store: &Redis, req: &ClaimRequest) {
    let Begin::Execute(claim) = begin(store, req, ExpiredLease::TakeOver).await.unwrap() else {
        panic!("expected to execute");
    };
    store
        .complete(&claim, &StoredResponse::new(201, "made"))
        .await
        .unwrap();
}

/// Looks `req` up until a lookup makes no call on `server`: its copy is in the cache.
async fn until_cached(server: &RedisServer, store: &Redis, req: &ClaimRequest) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let before = server.calls("evalsha");
        assert!(store.lookup(&req.scope).await.unwrap().is_some());
        if server.calls("evalsha") == before {
            return;
        }
        assert!(Instant::now() < deadline, "the record was never cached");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The id of the server's one connection with tracking on.
fn tracking_client(server: &RedisServer) -> Option<String> {
    let list = server.cli(&["CLIENT", "LIST"]);
    let mut tracking = list.lines().filter(|line| {
        line.split(' ')
            .any(|field| field.starts_with("flags=") && field.contains('t'))
    });
    let id = tracking
        .next()?
        .split(' ')
        .find_map(|field| field.strip_prefix("id="))?;
    assert!(tracking.next().is_none(), "one tracking connection: {list}");
    Some(id.to_owned())
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis_server])]
async fn replays_are_answered_from_the_process_once_cached() {
    let server = RedisServer::start(&[]);
    let store = cached_store(&server.url(), &unique_prefix()).await;
    let req = request("{}");
    completed(&store, &req).await;
    until_cached(&server, &store, &req).await;
    let before = (server.calls("evalsha"), server.calls("eval"));
    for _ in 0..50 {
        let Some(record) = store.lookup(&req.scope).await.unwrap() else {
            panic!("the record is there");
        };
        assert_eq!(record.fingerprint, req.fingerprint);
        assert!(matches!(
            store.try_claim(&req).await.unwrap(),
            TryClaim::Existing(_)
        ));
    }
    assert_eq!((server.calls("evalsha"), server.calls("eval")), before);
}

/// A `forget` through another store, a `DEL` from `redis-cli` and a `FLUSHALL`: each reaches
/// the cache, and the next claim executes.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis_server])]
async fn a_change_made_elsewhere_is_seen_by_the_next_request() {
    changes_are_seen(&RedisServer::start(&[])).await;
}

/// The same on Valkey 8, whose tracking is Redis's.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [valkey])]
async fn a_change_made_elsewhere_is_seen_on_valkey_too() {
    let program = valkey_program();
    changes_are_seen(&RedisServer::start_program(&program, &[])).await;
}

async fn changes_are_seen(server: &RedisServer) {
    let prefix = unique_prefix();
    let store = cached_store(&server.url(), &prefix).await;
    let other = plain_store(&server.url(), &prefix).await;
    for change in ["forget", "DEL", "FLUSHALL"] {
        let req = request("{}");
        completed(&store, &req).await;
        until_cached(server, &store, &req).await;
        match change {
            "forget" => assert!(other.forget(&req.scope).await.unwrap()),
            "DEL" => {
                let key = store.record_key(&req.scope);
                assert_eq!(server.cli(&["DEL", &key]).trim(), "1");
            }
            _ => assert_eq!(server.cli(&["FLUSHALL"]).trim(), "OK"),
        }
        store.sync_replay_cache().await.unwrap();
        assert_eq!(store.lookup(&req.scope).await.unwrap(), None);
        assert!(matches!(
            store.try_claim(&req).await.unwrap(),
            TryClaim::Claimed(_)
        ));
    }
}

/// A record's expiry reaches its copy by this process's clock, even when Redis has not deleted
/// the key yet (active expiry off: Redis would delete it only when read).
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis_server])]
async fn a_copy_goes_when_its_record_expires() {
    let server = RedisServer::start(&["--enable-debug-command", "yes"]);
    assert_eq!(
        server.cli(&["DEBUG", "SET-ACTIVE-EXPIRE", "0"]).trim(),
        "OK"
    );
    let store = cached_store(&server.url(), &unique_prefix()).await;
    // The copy is made while the record lives (every poll of `until_cached` finds it): a
    // retention a slow machine fills a copy well within, then waited out.
    let retention = Duration::from_secs(3);
    let req = request("{}").retention(retention);
    completed(&store, &req).await;
    until_cached(&server, &store, &req).await;
    tokio::time::sleep(retention + Duration::from_millis(500)).await;
    assert_eq!(store.lookup(&req.scope).await.unwrap(), None);
}

/// The tracking connection is killed, so the invalidation of a `forget` made meanwhile never
/// comes: the cache must have dropped its copies with the connection, and track again on a
/// new one.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis_server])]
async fn a_lost_tracking_connection_drops_every_copy() {
    let server = RedisServer::start(&[]);
    let prefix = unique_prefix();
    let store = cached_store(&server.url(), &prefix).await;
    let other = plain_store(&server.url(), &prefix).await;
    let req = request("{}");
    completed(&store, &req).await;
    until_cached(&server, &store, &req).await;
    let first = tracking_client(&server).unwrap();
    server.cli(&["CLIENT", "KILL", "ID", &first]);
    assert!(other.forget(&req.scope).await.unwrap());
    let deadline = Instant::now() + Duration::from_secs(10);
    while tracking_client(&server).is_none_or(|id| id == first) {
        assert!(Instant::now() < deadline, "the cache never tracked again");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    store.sync_replay_cache().await.unwrap();
    assert_eq!(store.lookup(&req.scope).await.unwrap(), None);
    // And it caches again, exactly, on the new connection.
    completed(&store, &req).await;
    until_cached(&server, &store, &req).await;
    assert!(other.forget(&req.scope).await.unwrap());
    store.sync_replay_cache().await.unwrap();
    assert_eq!(store.lookup(&req.scope).await.unwrap(), None);
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_has_no_replay_cache() {
    let options = RedisOptions::new().replay_cache(BYTES);
    let refused = RedisStore::connect_with("redis+cluster://127.0.0.1:1", &options).await;
    let error = refused.unwrap_err().to_string();
    assert!(error.contains("standalone"), "{error}");
}

mod conformance {
    use super::*;

    async fn standalone_cached() -> Redis {
        let url = redis_url();
        cached_store(&url, &unique_prefix()).await
    }

    idemkey_core::store_conformance_suite!(
        standalone_cached(),
        test: idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis]),
        except: [sweep_deletes_only_expired_records_in_batches]
    );
}
