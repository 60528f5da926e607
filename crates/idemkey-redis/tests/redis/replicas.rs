//! Waiting for replicas after a completion (`RedisStore::with_wait_replicas`, Redis's `WAIT`):
//! once `complete` returns, the replica has acknowledged the completion's write, so a failover
//! to it would keep the stored response. Without a replica the completion still stands.

use std::time::{Duration, Instant};

use idemkey_core::testkit::request;
use idemkey_core::{Begin, ExpiredLease, Record, RecordState, Store, StoredResponse, begin};
use idemkey_redis::{RedisOptions, RedisStore};
use idemkey_test_support::process::redis::RedisServer;

use crate::common::unique_prefix;

/// The bound of each operation of a store of these tests, besides its waits.
const DEFAULT_OPS: Duration = Duration::from_secs(5);

/// `master_repl_offset` and the first replica's acknowledged offset, from `INFO replication`.
fn offsets(master: &RedisServer) -> (u64, Option<u64>) {
    let info = master.cli(&["INFO", "replication"]);
    let field = |line: &str, name: &str| {
        line.split(',')
            .find_map(|part| part.split_once('=').filter(|(k, _)| k.ends_with(name)))
            .and_then(|(_, v)| v.trim().parse().ok())
    };
    let master_offset = info
        .lines()
        .find_map(|l| l.strip_prefix("master_repl_offset:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let replica = info
        .lines()
        .find(|l| l.starts_with("slave0:") && l.contains("state=online"))
        .and_then(|l| field(l, "offset"));
    (master_offset, replica)
}

fn replicated(master: &RedisServer, replica: &RedisServer) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while offsets(master).1.is_none()
        || !replica
            .cli(&["INFO", "replication"])
            .contains("master_link_status:up")
    {
        assert!(Instant::now() < deadline, "the replica never came online");
        std::thread::sleep(Duration::from_millis(50));
    }
}

async fn store(
    master: &RedisServer,
    timeout: Duration,
) -> RedisStore<idemkey_redis::RedisConnection> {
    let options = RedisOptions::new()
        .prefix(unique_prefix())
        .wait_replicas(1, timeout);
    RedisStore::connect_with(&master.url(), &options)
        .await
        .unwrap()
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis_server])]
async fn a_completion_returns_once_the_replica_has_it() {
    // Diskless full sync waits 5 s for more replicas by default.
    let master = RedisServer::start(&["--repl-diskless-sync-delay", "0"]);
    let port = master.port.to_string();
    let replica = RedisServer::start(&["--replicaof", "127.0.0.1", &port]);
    replicated(&master, &replica);
    let store = store(&master, Duration::from_secs(5)).await;
    for i in 0..5 {
        let req = request(&format!("{{\"n\":{i}}}"));
        let Begin::Execute(claim) = begin(&store, &req, ExpiredLease::TakeOver).await.unwrap()
        else {
            panic!("expected to execute")
        };
        let (before, _) = offsets(&master);
        let done = StoredResponse::new(201, "done");
        store.complete(&claim, &done).await.unwrap();
        // The replica has acknowledged the stream past where it stood before the completion:
        // the completion's write included. (Replicas report their offset once a second on
        // their own; only `WAIT` asks at once. `WAIT`'s own `REPLCONF GETACK` then moves the
        // master's offset on, so the offset after is no bound.)
        let (_, acked) = offsets(&master);
        assert!(acked.unwrap() > before, "acked {acked:?}, before {before}");
        let key = store.record_key(&req.scope);
        assert_eq!(replica.cli(&["EXISTS", &key]).trim(), "1");
    }
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis_server])]
async fn without_a_replica_the_completion_stands_after_the_wait() {
    let master = RedisServer::start(&[]);
    let store = store(&master, Duration::from_millis(200)).await;
    let req = request("{}");
    let Begin::Execute(claim) = begin(&store, &req, ExpiredLease::TakeOver).await.unwrap() else {
        panic!("expected to execute")
    };
    let response = StoredResponse::new(201, "kept");
    store.complete(&claim, &response).await.unwrap();
    assert!(matches!(
        begin(&store, &req, ExpiredLease::TakeOver).await.unwrap(),
        Begin::Replay(replayed) if replayed == response
    ));
}

#[idemkey_test_support::test]
async fn a_cluster_refuses_the_wait() {
    let options = RedisOptions::new().wait_replicas(1, Duration::from_secs(1));
    let refused =
        RedisStore::connect_with("redis+cluster://127.0.0.1:1,127.0.0.1:2", &options).await;
    assert!(matches!(refused, Err(idemkey_core::Error::Backend(_))));
}

/// Two stores on `master`'s records: one whose writes wait for a replica (`timeout`), and
/// one that does not wait, to make what the test needs without waiting.
async fn stores(
    master: &RedisServer,
    (timeout, operations): (Duration, Duration),
) -> [RedisStore<idemkey_redis::RedisConnection>; 2] {
    let prefix = unique_prefix();
    let plain = RedisOptions::new().prefix(prefix.clone());
    let waiting = plain
        .clone()
        .wait_replicas(1, timeout)
        .operation_timeout(operations);
    let connect = |options| async move {
        RedisStore::connect_with(&master.url(), &options)
            .await
            .unwrap()
    };
    [connect(waiting).await, connect(plain).await]
}

/// Waits until one client of `master` is blocked: a write's `WAIT` is under way.
async fn blocked(master: &RedisServer) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !master
        .cli(&["INFO", "clients"])
        .contains("blocked_clients:1")
    {
        assert!(Instant::now() < deadline, "nothing waited");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn in_flight(record: Option<&Record>) -> bool {
    matches!(
        record,
        Some(Record {
            state: RecordState::InFlight { .. },
            ..
        })
    )
}

/// `WAIT` blocks the client that sends it: on the store's shared connection every other
/// request would queue behind a completion's wait. Here a completion waits for a replica that
/// does not exist (for a minute), and the same store still answers other operations. Nobody
/// answers from the completion meanwhile: to every reader it is in flight.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis_server])]
async fn a_waiting_completion_holds_up_no_other_operation_and_is_not_answered_from() {
    let master = tokio::task::spawn_blocking(|| RedisServer::start(&[]))
        .await
        .unwrap();
    let [store, plain] = stores(&master, (Duration::from_secs(60), DEFAULT_OPS)).await;
    let req = request("{}");
    let Begin::Execute(claim) = begin(&plain, &req, ExpiredLease::TakeOver).await.unwrap() else {
        panic!("expected to execute")
    };
    let waiting = tokio::spawn({
        let store = store.clone();
        async move {
            store
                .complete(&claim, &StoredResponse::new(201, "stored"))
                .await
        }
    });
    // Forced: the completion is on the master and its `WAIT` is blocked there.
    blocked(&master).await;
    let other = request("{}");
    assert!(store.lookup(&other.scope).await.unwrap().is_none());
    assert!(in_flight(store.lookup(&req.scope).await.unwrap().as_ref()));
    assert!(in_flight(plain.lookup(&req.scope).await.unwrap().as_ref()));
    assert!(matches!(
        begin(&plain, &req, ExpiredLease::TakeOver).await.unwrap(),
        Begin::InFlight { .. }
    ));
    assert!(!waiting.is_finished(), "the wait ended early");
    waiting.abort();
}

/// A fresh claim returns only once its wait is done: here it waits for a replica that does
/// not exist, written on the master all the while, and does not return.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis_server])]
async fn a_fresh_claim_waits_before_it_returns() {
    let master = tokio::task::spawn_blocking(|| RedisServer::start(&[]))
        .await
        .unwrap();
    let [store, plain] = stores(&master, (Duration::from_secs(60), DEFAULT_OPS)).await;
    let req = request("{}");
    let claiming = tokio::spawn({
        let (store, req) = (store.clone(), req.clone());
        async move { store.try_claim(&req).await }
    });
    blocked(&master).await;
    assert!(
        in_flight(plain.lookup(&req.scope).await.unwrap().as_ref()),
        "claimed"
    );
    assert!(
        !claiming.is_finished(),
        "the claim returned before its wait"
    );
    claiming.abort();
}

/// A completer that dies during its wait leaves no mark: its completion is in flight to
/// everyone for as long as the wait could have run, then answered.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis_server])]
async fn a_completion_whose_completer_died_is_answered_once_its_wait_is_over() {
    let master = tokio::task::spawn_blocking(|| RedisServer::start(&[]))
        .await
        .unwrap();
    let bounds = (Duration::from_secs(3), Duration::from_secs(3));
    let [store, plain] = stores(&master, bounds).await;
    let req = request("{}");
    let Begin::Execute(claim) = begin(&plain, &req, ExpiredLease::TakeOver).await.unwrap() else {
        panic!("expected to execute")
    };
    let response = StoredResponse::new(201, "stored");
    let waiting = tokio::spawn({
        let response = response.clone();
        async move { store.complete(&claim, &response).await }
    });
    blocked(&master).await;
    waiting.abort();
    assert!(in_flight(plain.lookup(&req.scope).await.unwrap().as_ref()));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match plain.lookup(&req.scope).await.unwrap() {
            Some(Record {
                state: RecordState::Completed(stored),
                ..
            }) => {
                assert_eq!(stored, response);
                break;
            }
            record => assert!(in_flight(record.as_ref()), "in flight until answered"),
        }
        assert!(Instant::now() < deadline, "never answered");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `WAITAOF` arrived with Redis 7.2: a server without it is refused when the store connects,
/// not at each completion.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis_server])]
async fn the_fsync_wait_needs_a_server_that_knows_waitaof() {
    let server = tokio::task::spawn_blocking(|| RedisServer::start(&["--appendonly", "yes"]))
        .await
        .unwrap();
    let knows = !server
        .cli(&["COMMAND", "INFO", "WAITAOF"])
        .trim()
        .is_empty();
    let options = RedisOptions::new().wait_fsync(Duration::from_secs(1));
    let store = RedisStore::connect_with(&server.url(), &options).await;
    assert_eq!(store.is_ok(), knows, "{store:?}");
}
