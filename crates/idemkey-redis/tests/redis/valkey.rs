//! Valkey 8: the conformance suite on a Valkey server of this process's own, every completion
//! waiting for the server's fsync (`WAITAOF`), and what that wait needs of the server.
//!
//! The program is `IDEMKEY_TEST_VALKEY_SERVER` or `valkey-server` on the `PATH` (CI installs
//! Debian's bookworm-backports build); without one the tests are ignored, or fail in CI.

use std::sync::OnceLock;
use std::time::Duration;

use idemkey_core::testkit::request;
use idemkey_core::{Begin, Error, ExpiredLease, Store, StoredResponse, begin};
use idemkey_redis::{RedisOptions, RedisStore};
use idemkey_test_support::process::redis::RedisServer;
use idemkey_test_support::runner::needs::valkey_program;

use crate::common::{Store as Redis, unique_prefix};

/// The longest a completion waits for the fsync in these tests; it never comes near.
const WAIT: Duration = Duration::from_secs(5);

/// The shared Valkey (append-only file, `appendfsync everysec`), started by the first test
/// that asks.
fn shared() -> &'static RedisServer {
    static SERVER: OnceLock<RedisServer> = OnceLock::new();
    SERVER.get_or_init(|| {
        let args = ["--appendonly", "yes", "--appendfsync", "everysec"];
        RedisServer::start_program(&valkey_program(), &args)
    })
}

/// A store on the shared Valkey whose completions wait for the fsync.
async fn fsync_store(server: &RedisServer) -> Redis {
    let options = RedisOptions::new().prefix(unique_prefix()).wait_fsync(WAIT);
    RedisStore::connect_with(&server.url(), &options)
        .await
        .unwrap()
}

idemkey_core::store_conformance_suite!(
    async { fsync_store(tokio::task::spawn_blocking(shared).await.unwrap()).await },
    test: idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [valkey]),
    // Valkey deletes expired records itself, as Redis does (see `expiry`).
    except: [sweep_deletes_only_expired_records_in_batches]
);

/// Every fresh claim and every completion waits for the fsync before it returns; a release
/// stores nothing and the claim it gives back keeps its record id: no wait.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [valkey])]
async fn every_claim_and_completion_waits_for_the_fsync_before_it_returns() {
    let args = &["--appendonly", "yes", "--appendfsync", "everysec"];
    let server = own_valkey(args).await;
    let store = fsync_store(&server).await;
    let probes = server.calls("waitaof");
    for i in 0..4 {
        let req = request(&format!("{{\"n\":{i}}}"));
        let Begin::Execute(claim) = begin(&store, &req, ExpiredLease::TakeOver).await.unwrap()
        else {
            panic!("expected to execute")
        };
        assert_eq!(
            server.calls("waitaof"),
            probes + 2 * i + 1,
            "a wait after the claim"
        );
        let response = StoredResponse::new(201, format!("note {i}"));
        store.complete(&claim, &response).await.unwrap();
        assert_eq!(server.calls("waitaof"), probes + 2 * i + 2);
        assert!(matches!(
            begin(&store, &req, ExpiredLease::TakeOver).await.unwrap(),
            Begin::Replay(replayed) if replayed == response
        ));
    }
    let req = request("{}");
    let Begin::Execute(claim) = begin(&store, &req, ExpiredLease::TakeOver).await.unwrap() else {
        panic!("expected to execute")
    };
    store.release(&claim).await.unwrap();
    assert_eq!(server.calls("waitaof"), probes + 9, "the claim's wait only");
}

/// A Valkey of the test's own, started with `args`.
async fn own_valkey(args: &'static [&'static str]) -> RedisServer {
    let program = valkey_program();
    let start = move || RedisServer::start_program(&program, args);
    tokio::task::spawn_blocking(start).await.unwrap()
}

/// Why a store waiting for the fsync is refused on `server`.
async fn fsync_refusal(server: &RedisServer) -> String {
    let options = RedisOptions::new().wait_fsync(WAIT);
    let refused = RedisStore::connect_with(&server.url(), &options).await;
    let Err(Error::Backend(error)) = refused else {
        panic!("expected a refusal, got {refused:?}")
    };
    error.to_string()
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [valkey])]
async fn a_server_without_an_append_only_file_is_refused() {
    let server = own_valkey(&["--appendonly", "no"]).await;
    let error = fsync_refusal(&server).await;
    assert!(error.contains("appendonly"), "{error}");
    // Without the wait the same server is fine.
    let store = RedisStore::connect(&server.url()).await.unwrap();
    assert!(store.lookup(&request("{}").scope).await.unwrap().is_none());
}

/// With `appendfsync no` the server fsyncs when the kernel flushes: every completion would
/// wait its whole timeout. Refused when the store connects.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [valkey])]
async fn a_server_that_never_fsyncs_by_itself_is_refused() {
    let args = &["--appendonly", "yes", "--appendfsync", "no"];
    let server = own_valkey(args).await;
    let error = fsync_refusal(&server).await;
    assert!(error.contains("appendfsync is no"), "{error}");
}
