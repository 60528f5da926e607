//! Fencing by the server's clock: a lease runs out by Redis's `TIME`, is taken over, and the
//! old claim can neither complete, release, extend nor discard.

use std::time::Duration;

use idemkey_core::testkit::request;
use idemkey_core::{Begin, Error, ExpiredLease, RecordState, Store, StoredResponse, begin};

use crate::common::standalone_store;

/// A lease no test outlives.
const LONG: Duration = Duration::from_secs(60);

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis])]
async fn an_expired_lease_is_taken_over_and_the_old_claim_fenced() {
    let store = standalone_store().await;
    // Within the lease, by the server's clock: in flight, with the lease's time left. A long
    // lease, so that a slow machine cannot see it run out here.
    let live = request("{}").lease(LONG);
    let Begin::Execute(_) = begin(&store, &live, ExpiredLease::TakeOver).await.unwrap() else {
        panic!("expected to execute")
    };
    match store.lookup(&live.scope).await.unwrap().unwrap().state {
        RecordState::InFlight { lease_remaining } => {
            assert!(lease_remaining <= LONG && !lease_remaining.is_zero());
        }
        other => panic!("expected in flight, got {other:?}"),
    }
    assert!(matches!(
        begin(&store, &live, ExpiredLease::TakeOver).await.unwrap(),
        Begin::InFlight { .. }
    ));
    // A short lease, only waited out.
    let req = request("{}").lease(Duration::from_millis(300));
    let Begin::Execute(old) = begin(&store, &req, ExpiredLease::TakeOver).await.unwrap() else {
        panic!("expected to execute")
    };
    tokio::time::sleep(Duration::from_millis(400)).await;
    let Begin::Execute(new) = begin(&store, &req, ExpiredLease::TakeOver).await.unwrap() else {
        panic!("expected a takeover")
    };
    assert!(new.taken_over && new.token == old.token + 1);
    assert_eq!(new.record_id, old.record_id);
    let late = StoredResponse::new(200, "late");
    assert!(matches!(
        store.complete(&old, &late).await,
        Err(Error::Fenced)
    ));
    assert!(matches!(store.release(&old).await, Err(Error::Fenced)));
    assert!(matches!(
        store.extend(&mut old.clone()).await,
        Err(Error::Fenced)
    ));
    assert!(matches!(store.discard(&old).await, Err(Error::Fenced)));
    store
        .complete(&new, &StoredResponse::new(201, "new"))
        .await
        .unwrap();
    let Begin::Replay(replayed) = begin(&store, &req, ExpiredLease::TakeOver).await.unwrap() else {
        panic!("expected a replay")
    };
    assert_eq!(replayed.body, "new");
}

/// `forget_version` deletes the record only if that operation version wrote it (the operator's
/// `idemkey forget --operation NAME:VERSION`), in one script.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis])]
async fn forget_version_deletes_only_what_that_version_wrote() {
    let store = standalone_store().await;
    let req = request("{}");
    let Begin::Execute(claim) = begin(&store, &req, ExpiredLease::TakeOver).await.unwrap() else {
        panic!("expected to execute")
    };
    store
        .complete(&claim, &StoredResponse::new(201, "v1"))
        .await
        .unwrap();
    assert!(!store.forget_version(&req.scope, "v2").await.unwrap());
    assert!(store.lookup(&req.scope).await.unwrap().is_some());
    assert!(store.forget_version(&req.scope, "v1").await.unwrap());
    assert!(store.lookup(&req.scope).await.unwrap().is_none());
    assert!(!store.forget_version(&req.scope, "v1").await.unwrap());
}
