//! The cases of the conformance suite, one public function each.
#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Barrier;

use super::{LONG, request, request_for};
use crate::{
    Begin, Claim, ClaimRequest, DerivedKeys, Error, ExpiredLease, Operation, OwnerId, RecordState,
    Store, StoredResponse, TryClaim, begin,
};

pub use super::forget::{
    forget_actor_deletes_completed_records_only,
    forget_version_deletes_only_what_that_version_wrote,
};

const TAKE_OVER: ExpiredLease = ExpiredLease::TakeOver;

pub(super) async fn claim<S: Store>(store: &S, req: &ClaimRequest) -> Claim {
    match begin(store, req, TAKE_OVER).await.unwrap() {
        Begin::Execute(claim) => claim,
        other => panic!("expected to execute, got {other:?}"),
    }
}

pub(super) async fn outcome<S: Store>(store: &S, req: &ClaimRequest) -> Begin {
    begin(store, req, TAKE_OVER).await.unwrap()
}

pub(super) fn created(id: &str) -> StoredResponse {
    StoredResponse::new(201, format!("{{\"id\":\"{id}\"}}"))
        .with_header("content-type", "application/json")
        .with_header("location", format!("/v1/notes/{id}"))
}

fn is_replay_of(begin: &Begin, expected: &StoredResponse) -> bool {
    matches!(begin, Begin::Replay(r) if r == expected)
}

pub async fn claim_on_empty_scope_executes<S: Store>(store: S) {
    let req = request("{\"title\":\"a\"}");
    assert_eq!(store.lookup(&req.scope).await.unwrap(), None);
    let claim = claim(&store, &req).await;
    assert!(!claim.taken_over);
    let record = store.lookup(&req.scope).await.unwrap().unwrap();
    assert_eq!(record.record_id, claim.record_id);
    assert!(
        matches!(record.state, RecordState::InFlight { lease_remaining } if !lease_remaining.is_zero())
    );
}

pub async fn completed_record_replays<S: Store>(store: S) {
    let req = request("{\"title\":\"a\"}").request_id("req-1");
    let claim = claim(&store, &req).await;
    store.complete(&claim, &created("n1")).await.unwrap();
    assert!(is_replay_of(&outcome(&store, &req).await, &created("n1")));
    let record = store.lookup(&req.scope).await.unwrap().unwrap();
    assert_eq!(record.request_id.as_deref(), Some("req-1"));
}

pub async fn mismatch_wins_in_every_state<S: Store>(store: S) {
    let states: [fn(&S, Claim) -> _; 4] = [
        |_, _| {
            Box::pin(async {}) as std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>
        },
        |s, c| {
            let s = s.clone();
            Box::pin(async move { s.release(&c).await.unwrap() })
        },
        |s, c| {
            let s = s.clone();
            Box::pin(async move { s.complete(&c, &created("x")).await.unwrap() })
        },
        |_, _| Box::pin(async {}),
    ];
    for (i, setup) in states.into_iter().enumerate() {
        let mut req = request("{\"title\":\"a\"}");
        if i == 3 {
            req = req.lease(Duration::ZERO); // in flight with an expired lease
        }
        let claim = claim(&store, &req).await;
        setup(&store, claim).await;
        let mut other = request_for(&req.scope.actor, &req.scope.operation, "{\"title\":\"b\"}");
        other.scope.key = req.scope.key.clone();
        assert!(
            matches!(outcome(&store, &other).await, Begin::Mismatch),
            "state {i}"
        );
    }
}

pub async fn version_is_compared_unless_compatible<S: Store>(store: S) {
    let req = request("{}");
    let claim = claim(&store, &req).await;
    store.complete(&claim, &created("n1")).await.unwrap();
    let mut v2 = req.clone();
    v2.operation = Operation::new("create-note", "v2");
    assert!(matches!(outcome(&store, &v2).await, Begin::Mismatch));
    v2.operation = Operation::new("create-note", "v2").compatible_with("v1");
    assert!(is_replay_of(&outcome(&store, &v2).await, &created("n1")));
}

pub async fn live_lease_is_in_flight<S: Store>(store: S) {
    let req = request("{}");
    claim(&store, &req).await;
    match outcome(&store, &req).await {
        Begin::InFlight { retry_after } => assert!(retry_after >= Duration::from_secs(1)),
        other => panic!("expected in flight, got {other:?}"),
    }
}

pub async fn expired_lease_is_taken_over_and_old_owner_fenced<S: Store>(store: S) {
    let req = request("{}").lease(Duration::ZERO);
    let old = claim(&store, &req).await;
    let new = claim(&store, &req.clone().lease(LONG)).await;
    assert!(new.taken_over);
    assert_eq!(new.record_id, old.record_id);
    assert!(new.token > old.token);
    assert!(matches!(
        store.complete(&old, &created("old")).await,
        Err(Error::Fenced)
    ));
    assert!(matches!(store.release(&old).await, Err(Error::Fenced)));
    let mut stale = old.clone();
    assert!(matches!(store.extend(&mut stale).await, Err(Error::Fenced)));
    store.complete(&new, &created("new")).await.unwrap();
    assert!(is_replay_of(&outcome(&store, &req).await, &created("new")));
}

/// The fence is the grant (record id and token) together with the owner: a claim of the same
/// grant naming another owner, as two processes hold after a takeover that a failover lost
/// was granted again, can neither complete, release, extend nor discard the record.
pub async fn a_grant_of_another_owner_is_fenced<S: Store>(store: S) {
    let req = request("{}").owner(OwnerId::new());
    let held = claim(&store, &req).await;
    let other = Claim {
        owner: Some(OwnerId::new()),
        ..held.clone()
    };
    let unowned = Claim {
        owner: None,
        ..held.clone()
    };
    for forged in [&other, &unowned] {
        let completed = store.complete(forged, &created("forged")).await;
        assert!(matches!(completed, Err(Error::Fenced)), "{completed:?}");
        assert!(matches!(store.release(forged).await, Err(Error::Fenced)));
        assert!(matches!(store.discard(forged).await, Err(Error::Fenced)));
        let mut stale = forged.clone();
        assert!(matches!(store.extend(&mut stale).await, Err(Error::Fenced)));
    }
    store.complete(&held, &created("held")).await.unwrap();
    assert!(is_replay_of(&outcome(&store, &req).await, &created("held")));
}

/// How long a lapsing owner's heartbeat lasts in the cases below: the cases wait it out.
const SHORT_GRACE: Duration = Duration::from_millis(200);

/// A claim's owner (A) beats: another owner (B) is refused while A's lease lives. A's
/// heartbeat lapses (its short grace runs out): B takes over long before A's lease would
/// end, and A can no longer complete, release nor extend.
pub async fn stale_owner_is_taken_over_before_its_lease_ends<S: Store>(store: S) {
    let (a, b, live) = (OwnerId::new(), OwnerId::new(), OwnerId::new());
    store.beat(live, LONG).await.unwrap();
    store.beat(b, LONG).await.unwrap();
    let held = request_for("alice", "held", "{}");
    claim(&store, &held.clone().owner(live)).await;
    let refused = outcome(&store, &held.clone().owner(b)).await;
    assert!(matches!(refused, Begin::InFlight { .. }), "{refused:?}");
    store.beat(a, SHORT_GRACE).await.unwrap();
    let req = request("{}");
    let old = claim(&store, &req.clone().owner(a)).await;
    tokio::time::sleep(SHORT_GRACE * 2).await;
    // A live owner's beat: only while beats come is anyone judged lapsed.
    store.beat(b, LONG).await.unwrap();
    let record = store.lookup(&req.scope).await.unwrap().unwrap();
    assert_eq!(
        record.state,
        RecordState::InFlight {
            lease_remaining: Duration::ZERO
        }
    );
    let new = claim(&store, &req.clone().owner(b)).await;
    assert!(new.taken_over);
    assert_eq!(new.record_id, old.record_id);
    assert!(new.token > old.token);
    assert!(matches!(
        store.complete(&old, &created("old")).await,
        Err(Error::Fenced)
    ));
    assert!(matches!(store.release(&old).await, Err(Error::Fenced)));
    let mut stale = old.clone();
    assert!(matches!(store.extend(&mut stale).await, Err(Error::Fenced)));
    // B's claim is B's: A's lapsed heartbeat no longer matters to it.
    let again = outcome(&store, &req.clone().owner(a)).await;
    assert!(matches!(again, Begin::InFlight { .. }), "{again:?}");
    store.complete(&new, &created("new")).await.unwrap();
    assert!(is_replay_of(&outcome(&store, &req).await, &created("new")));
}

/// Beats may arrive out of order: one that asks for less than an earlier one gave never
/// shortens it, so the claim stays its owner's.
pub async fn a_beat_never_shortens_an_earlier_one<S: Store>(store: S) {
    let (a, b) = (OwnerId::new(), OwnerId::new());
    store.beat(a, LONG).await.unwrap();
    let req = request("{}");
    claim(&store, &req.clone().owner(a)).await;
    store.beat(a, Duration::ZERO).await.unwrap();
    tokio::time::sleep(SHORT_GRACE).await;
    let refused = outcome(&store, &req.clone().owner(b)).await;
    assert!(matches!(refused, Begin::InFlight { .. }), "{refused:?}");
}

/// The grace of the outage case: long enough that the case's own pauses never look like
/// an outage.
const OUTAGE_GRACE: Duration = Duration::from_secs(2);

/// An outage of the store longer than the grace stops every owner's beats at once, and
/// stales no one: right after it, the first owner back (B) cannot take over the claim of an
/// owner (A) that has not had a grace to beat again. Only once B has kept beating for a
/// whole grace without a beat of A is A's claim taken over.
pub async fn an_outage_longer_than_the_grace_stales_no_one<S: Store>(store: S) {
    let (a, b) = (OwnerId::new(), OwnerId::new());
    store.beat(a, OUTAGE_GRACE).await.unwrap();
    store.beat(b, OUTAGE_GRACE).await.unwrap();
    let req = request("{}");
    let old = claim(&store, &req.clone().owner(a)).await;
    // The outage: nobody beats for longer than the grace.
    tokio::time::sleep(OUTAGE_GRACE + OUTAGE_GRACE / 2).await;
    store.beat(b, OUTAGE_GRACE).await.unwrap();
    let refused = outcome(&store, &req.clone().owner(b)).await;
    assert!(matches!(refused, Begin::InFlight { .. }), "{refused:?}");
    let deadline = std::time::Instant::now() + OUTAGE_GRACE * 5;
    loop {
        tokio::time::sleep(OUTAGE_GRACE / 20).await;
        store.beat(b, OUTAGE_GRACE).await.unwrap();
        match outcome(&store, &req.clone().owner(b)).await {
            Begin::Execute(new) => {
                assert!(new.taken_over && new.token > old.token);
                break;
            }
            Begin::InFlight { .. } => {}
            other => panic!("in flight until taken over, not {other:?}"),
        }
        assert!(std::time::Instant::now() < deadline, "never taken over");
    }
}

/// Right after an outage, before any owner has beaten again, the run of beats is broken, so
/// no one is lapsed, even to a request that names no owner of its own (a process without a
/// heartbeat sharing the store). The same holds after a forward step of the store's clock.
pub async fn no_one_is_lapsed_before_the_first_beat_after_an_outage<S: Store>(store: S) {
    let a = OwnerId::new();
    store.beat(a, OUTAGE_GRACE).await.unwrap();
    let req = request("{}");
    claim(&store, &req.clone().owner(a)).await;
    tokio::time::sleep(OUTAGE_GRACE + OUTAGE_GRACE / 2).await;
    let refused = outcome(&store, &req).await;
    assert!(matches!(refused, Begin::InFlight { .. }), "{refused:?}");
}

/// A claim naming an owner of which the store has no heartbeat (a wrapper store that did
/// not forward it) keeps its lease; once the lease is gone it is taken over as usual.
pub async fn a_claim_of_an_owner_without_heartbeat_keeps_its_lease<S: Store>(store: S) {
    let req = request("{}");
    claim(&store, &req.clone().owner(OwnerId::new())).await;
    let refused = outcome(&store, &req).await;
    assert!(matches!(refused, Begin::InFlight { .. }), "{refused:?}");
    let short = request("{}").lease(Duration::ZERO);
    let old = claim(&store, &short.clone().owner(OwnerId::new())).await;
    let new = claim(&store, &short.clone().lease(LONG)).await;
    assert!(new.taken_over && new.token > old.token);
}

pub async fn expired_lease_can_complete_previous_attempt_unknown<S: Store>(store: S) {
    let req = request("{}").lease(Duration::ZERO);
    let old = claim(&store, &req).await;
    let first = begin(&store, &req, ExpiredLease::PreviousAttemptUnknown)
        .await
        .unwrap();
    let Begin::Replay(stored) = first else {
        panic!("expected a stored 500, got {first:?}")
    };
    assert_eq!(stored.status, 500);
    assert!(String::from_utf8_lossy(&stored.body).contains("previous-attempt-unknown"));
    assert!(is_replay_of(&outcome(&store, &req).await, &stored));
    assert!(matches!(
        store.complete(&old, &created("late")).await,
        Err(Error::Fenced)
    ));
}

pub async fn release_keeps_the_record_id<S: Store>(store: S) {
    let req = request("{}");
    let first = claim(&store, &req).await;
    store.release(&first).await.unwrap();
    assert_eq!(
        store.lookup(&req.scope).await.unwrap().unwrap().state,
        RecordState::Released
    );
    let second = claim(&store, &req).await;
    assert_eq!(second.record_id, first.record_id);
    assert!(second.token > first.token && !second.taken_over);
    assert!(matches!(store.release(&first).await, Err(Error::Fenced)));
}

pub async fn body_omitted_completion_replays_status_and_headers<S: Store>(store: S) {
    let req = request("{}");
    let claim = claim(&store, &req).await;
    let omitted = created("big").without_body();
    store.complete(&claim, &omitted).await.unwrap();
    let Begin::Replay(replayed) = outcome(&store, &req).await else {
        panic!("expected replay")
    };
    assert!(replayed.body_omitted && replayed.body.is_empty());
    assert_eq!(replayed.status, 201);
    assert_eq!(replayed.headers, created("big").headers);
}

pub async fn expired_record_is_absent_and_gets_a_new_id<S: Store>(store: S) {
    let req = request("{}").retention(Duration::ZERO);
    let first = claim(&store, &req).await;
    store.complete(&first, &created("n1")).await.unwrap();
    assert_eq!(store.lookup(&req.scope).await.unwrap(), None);
    let second = claim(&store, &req).await;
    assert_ne!(second.record_id, first.record_id);
    // Even a different request may claim the scope once its record expired.
    let mut other = request_for(&req.scope.actor, &req.scope.operation, "{\"other\":1}");
    other.scope.key = req.scope.key.clone();
    other.retention = Duration::ZERO;
    store.complete(&second, &created("n2")).await.unwrap();
    claim(&store, &other).await;
}

async fn expired_completed<S: Store>(store: &S, actor: &str, op: &str) {
    let req = request_for(actor, op, "{}").retention(Duration::ZERO);
    let claim = claim(store, &req).await;
    store.complete(&claim, &created(op)).await.unwrap();
}

/// Sweeps until nothing is left, counting what was deleted.
async fn sweep_all<S: Store>(store: &S, batch: u32) -> u64 {
    let mut total = 0;
    loop {
        let deleted = store.sweep(batch).await.unwrap();
        assert!(
            deleted <= u64::from(batch),
            "a batch deleted {deleted} > {batch}"
        );
        if deleted == 0 {
            return total;
        }
        total += deleted;
    }
}

pub async fn sweep_deletes_only_expired_records_in_batches<S: Store>(store: S) {
    let actor = format!("sweep-{}", uuid::Uuid::new_v4());
    for i in 0..5 {
        expired_completed(&store, &actor, &format!("op-{i}")).await;
    }
    let live = request_for(&actor, "live", "{}");
    let live_claim = claim(&store, &live).await;
    store.complete(&live_claim, &created("live")).await.unwrap();
    let in_flight = request_for(&actor, "in-flight", "{}");
    claim(&store, &in_flight).await;
    // Other tests may share the store and leave expired records too: at least ours go.
    assert!(sweep_all(&store, 2).await >= 5);
    assert!(store.lookup(&live.scope).await.unwrap().is_some());
    assert!(store.lookup(&in_flight.scope).await.unwrap().is_some());
    // Swept records are gone: forgetting one finds nothing.
    assert!(
        !store
            .forget(&request_for(&actor, "op-0", "{}").scope)
            .await
            .unwrap()
    );
}

pub async fn sweep_spares_a_record_claimed_again<S: Store>(store: S) {
    let req = request("{}").retention(Duration::ZERO);
    expired_completed(&store, &req.scope.actor, &req.scope.operation).await;
    // The expired record is replaced by a live claim before the sweeper runs.
    let renewed = claim(&store, &req.clone().retention(LONG)).await;
    sweep_all(&store, 100).await;
    store.complete(&renewed, &created("renewed")).await.unwrap();
    assert!(is_replay_of(
        &outcome(&store, &req).await,
        &created("renewed")
    ));
}

pub async fn forget_deletes_one_record<S: Store>(store: S) {
    let req = request("{}");
    let first = claim(&store, &req).await;
    store.complete(&first, &created("n1")).await.unwrap();
    let neighbour = request_for(&req.scope.actor, "other-op", "{}");
    claim(&store, &neighbour).await;
    assert!(store.forget(&req.scope).await.unwrap());
    assert!(!store.forget(&req.scope).await.unwrap());
    let second = claim(&store, &req).await;
    assert_ne!(second.record_id, first.record_id);
    assert!(store.lookup(&neighbour.scope).await.unwrap().is_some());
}

pub async fn actors_are_isolated<S: Store>(store: S) {
    let a = request("{\"title\":\"same\"}");
    let claim_a = claim(&store, &a).await;
    store.complete(&claim_a, &created("a")).await.unwrap();
    let b = request_for(
        &format!("{}-b", a.scope.actor),
        &a.scope.operation,
        "{\"title\":\"same\"}",
    );
    let claim_b = claim(&store, &b).await;
    assert_ne!(claim_b.record_id, claim_a.record_id);
    assert!(matches!(
        store.lookup(&b.scope).await.unwrap().unwrap().state,
        RecordState::InFlight { .. }
    ));
    store.complete(&claim_b, &created("b")).await.unwrap();
    assert!(is_replay_of(&outcome(&store, &a).await, &created("a")));
    assert!(is_replay_of(&outcome(&store, &b).await, &created("b")));
}

pub async fn operations_are_isolated<S: Store>(store: S) {
    let a = request("{}");
    let claim_a = claim(&store, &a).await;
    store.complete(&claim_a, &created("a")).await.unwrap();
    let other_op = request_for(&a.scope.actor, "delete-note", "{}");
    assert!(matches!(
        outcome(&store, &other_op).await,
        Begin::Execute(_)
    ));
}

pub async fn extend_renews_the_lease<S: Store>(store: S) {
    let req = request("{}").lease(Duration::ZERO);
    let mut held = claim(&store, &req).await;
    held.lease = LONG;
    store.extend(&mut held).await.unwrap();
    assert!(matches!(
        outcome(&store, &req).await,
        Begin::InFlight { .. }
    ));
    store.complete(&held, &created("n1")).await.unwrap();
    assert!(is_replay_of(&outcome(&store, &req).await, &created("n1")));
}

pub async fn derived_keys_survive_takeover_but_not_expiry<S: Store>(store: S) {
    let keys =
        |claim: &Claim| DerivedKeys::new(b"secret".as_slice(), claim.record_id).key("charge");
    let req = request("{}").lease(Duration::ZERO);
    let first = claim(&store, &req).await;
    let takeover = claim(&store, &req).await;
    assert!(takeover.taken_over);
    assert_eq!(keys(&first), keys(&takeover));
    let mut short = takeover.clone();
    short.retention = Duration::ZERO;
    store.complete(&short, &created("n1")).await.unwrap();
    let after_expiry = claim(&store, &req).await;
    assert_ne!(keys(&after_expiry), keys(&first));
}

pub async fn complete_happens_once<S: Store>(store: S) {
    let req = request("{}");
    let held = claim(&store, &req).await;
    store.complete(&held, &created("first")).await.unwrap();
    assert!(matches!(
        store.complete(&held, &created("second")).await,
        Err(Error::Fenced)
    ));
    assert!(matches!(store.release(&held).await, Err(Error::Fenced)));
    assert!(is_replay_of(
        &outcome(&store, &req).await,
        &created("first")
    ));
}

pub async fn concurrent_claims_have_one_winner<S: Store>(store: S) {
    const TASKS: usize = 16;
    let req = request("{}");
    let barrier = Arc::new(Barrier::new(TASKS));
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let (store, req, barrier) = (store.clone(), req.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            // Every task has looked the scope up and found nothing before any claims.
            assert!(store.lookup(&req.scope).await.unwrap().is_none());
            barrier.wait().await;
            store.try_claim(&req).await.unwrap()
        }));
    }
    let mut winners = 0;
    for task in tasks {
        if matches!(task.await.unwrap(), TryClaim::Claimed(_)) {
            winners += 1;
        }
    }
    assert_eq!(winners, 1);
}

pub async fn discard_deletes_only_a_fresh_held_claim<S: Store>(store: S) {
    let req = request("{}");
    let first = claim(&store, &req).await;
    assert!(first.fresh);
    store.discard(&first).await.unwrap();
    assert_eq!(store.lookup(&req.scope).await.unwrap(), None);
    assert!(matches!(store.discard(&first).await, Err(Error::Fenced)));
    // A record claimed again is not fresh; a stale claim cannot discard its successor's.
    let released = claim(&store, &req).await;
    store.release(&released).await.unwrap();
    let again = claim(&store, &req).await;
    assert!(!again.fresh && again.record_id == released.record_id);
    assert!(matches!(store.discard(&released).await, Err(Error::Fenced)));
    assert!(store.lookup(&req.scope).await.unwrap().is_some());
}

/// The derived-key secret is made once and kept: every call and every clone sees the same,
/// non-empty bytes (behaviour [§8a](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#8a-external-effects-lease-mode)).
pub async fn secret_is_kept_by_the_store<S: Store>(store: S) {
    let first = store.secret().await.unwrap();
    assert!(first.len() >= 32, "a secret of {} bytes", first.len());
    assert_eq!(store.secret().await.unwrap(), first);
    assert_eq!(store.clone().secret().await.unwrap(), first);
}
