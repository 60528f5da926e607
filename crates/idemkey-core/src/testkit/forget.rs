//! The suite's cases for [`Store::forget_actor`] and [`Store::forget_version`], beside `cases.rs` to keep each file short.
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use super::cases::{claim, created, outcome};
use super::{request, request_for};
use crate::{ActorForgotten, Begin, RecordState, Store};

/// Every completed record of the actor goes, whatever its operation; its records without a
/// response stay (in flight, released), and an in-flight one still completes; another actor's
/// records, even one whose name extends this one's, are untouched.
pub async fn forget_actor_deletes_completed_records_only<S: Store>(store: S) {
    let actor = format!("revoked-{}", uuid::Uuid::new_v4());
    let completed: Vec<_> = (0..3)
        .map(|i| request_for(&actor, &format!("op-{i}"), "{}"))
        .collect();
    for req in &completed {
        let claim = claim(&store, req).await;
        store.complete(&claim, &created("mine")).await.unwrap();
    }
    // Expired: gone either way; counted only where the store still held it (Redis deletes
    // an expired key by itself).
    let expired = request_for(&actor, "expired", "{}").retention(Duration::ZERO);
    let claim_expired = claim(&store, &expired).await;
    store
        .complete(&claim_expired, &created("old"))
        .await
        .unwrap();
    let in_flight = claim(&store, &request_for(&actor, "in-flight", "{}")).await;
    let released_req = request_for(&actor, "released", "{}");
    let released = claim(&store, &released_req).await;
    store.release(&released).await.unwrap();
    let other = request_for(&format!("{actor}x"), "op-0", "{}");
    let other_claim = claim(&store, &other).await;
    store
        .complete(&other_claim, &created("theirs"))
        .await
        .unwrap();

    let done = store.forget_actor(&actor).await.unwrap();
    assert!((3..=4).contains(&done.forgotten), "{done:?}");
    assert_eq!(done.kept, 2, "{done:?}");
    for req in &completed {
        assert_eq!(store.lookup(&req.scope).await.unwrap(), None);
    }
    let kept = store.lookup(&released_req.scope).await.unwrap().unwrap();
    assert_eq!(kept.state, RecordState::Released);
    assert_eq!(kept.record_id, released.record_id);
    assert!(matches!(outcome(&store, &other).await, Begin::Replay(r) if r == created("theirs")));
    // The request still executing was not fenced; its answer is forgotten by the next call.
    store.complete(&in_flight, &created("late")).await.unwrap();
    let again = store.forget_actor(&actor).await.unwrap();
    assert_eq!((again.forgotten, again.kept), (1, 1), "{again:?}");
    // A forgotten key executes again, as a new record.
    let fresh = claim(&store, &completed[0]).await;
    assert!(!fresh.taken_over);
    let nobody = format!("nobody-{}", uuid::Uuid::new_v4());
    assert_eq!(
        store.forget_actor(&nobody).await.unwrap(),
        ActorForgotten::default()
    );
}

/// A forget naming a version deletes the record only if that operation version wrote it.
pub async fn forget_version_deletes_only_what_that_version_wrote<S: Store>(store: S) {
    let req = request("{}");
    let held = claim(&store, &req).await;
    store.complete(&held, &created("v1")).await.unwrap();
    assert!(!store.forget_version(&req.scope, "v2").await.unwrap());
    assert!(store.lookup(&req.scope).await.unwrap().is_some());
    assert!(store.forget_version(&req.scope, "v1").await.unwrap());
    assert_eq!(store.lookup(&req.scope).await.unwrap(), None);
    assert!(!store.forget_version(&req.scope, "v1").await.unwrap());
}
