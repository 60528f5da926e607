//! Waiting for replicas after a completion (`RedisStore::with_wait_replicas`, Redis's `WAIT`):
//! once `complete` returns, the replica has acknowledged the completion's write, so a failover
//! to it would keep the stored response. Without a replica the completion still stands.

use std::time::{Duration, Instant};

use idemkey_core::testkit::request;
use idemkey_core::{Begin, ExpiredLease, Store, StoredResponse, begin};
use idemkey_redis::{RedisOptions, RedisStore};
use idemkey_test_support::redis::RedisServer;

use crate::common::unique_prefix;

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

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2)]
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

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2)]
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

/// `WAIT` blocks the client that sends it: on the store's shared connection every other
/// request would queue behind a completion's wait. Here a completion waits for a replica that
/// does not exist (for a minute), and the same store still answers other operations.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_completion_holds_up_no_other_operation() {
    let master = tokio::task::spawn_blocking(|| RedisServer::start(&[]))
        .await
        .unwrap();
    let store = store(&master, Duration::from_secs(60)).await;
    let req = request("{}");
    let Begin::Execute(claim) = begin(&store, &req, ExpiredLease::TakeOver).await.unwrap() else {
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
    let deadline = Instant::now() + Duration::from_secs(20);
    while !master
        .cli(&["INFO", "clients"])
        .contains("blocked_clients:1")
    {
        assert!(Instant::now() < deadline, "the completion never waited");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let other = request("{}");
    assert!(matches!(
        begin(&store, &other, ExpiredLease::TakeOver).await.unwrap(),
        Begin::Execute(_)
    ));
    assert!(matches!(
        store.lookup(&req.scope).await.unwrap(),
        Some(record) if matches!(record.state, idemkey_core::RecordState::Completed(_))
    ));
    assert!(!waiting.is_finished(), "the wait ended early");
    waiting.abort();
}

/// `WAITAOF` arrived with Redis 7.2: a server without it is refused when the store connects,
/// not at each completion.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2)]
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
