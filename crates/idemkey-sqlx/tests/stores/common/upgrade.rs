//! A store shared with binaries from before owners' grants (behaviour §8a): such a binary
//! takes an in-flight claim over with the next token and leaves the previous owner in the
//! row. Judged by that owner's heartbeat, the claim of the live process that took it over
//! would look stale as soon as the named, dead owner lapsed.

use std::time::Duration;

use idemkey_core::{ClaimRequest, OwnerId, RecordState, Store, TryClaim};
use idemkey_sqlx::SqlxStore;
use sqlx::{Executor, Pool};

use super::Fixture;
use super::seed::request;

/// The heartbeat's grace in this case: the case waits a few of them out.
const GRACE: Duration = Duration::from_millis(300);

/// Two claims of one owner that then dies; the second is taken over the way an old binary
/// does it (`token + 1`, the owner left). While another owner beats on, the dead owner lapses:
/// its own claim is stale, the other keeps its lease and cannot be reclaimed.
pub async fn an_owner_left_by_an_old_takeover_is_not_trusted<F: Fixture>()
where
    for<'c> &'c Pool<F::DB>: Executor<'c, Database = F::DB>,
{
    let store = F::store().await;
    let (dead, judge) = (OwnerId::new(), OwnerId::new());
    store.beat(dead, GRACE).await.unwrap();
    store.beat(judge, GRACE).await.unwrap();
    let own = claimed(&store, request("alice", "upgrade-own", "t").owner(dead)).await;
    let taken = claimed(&store, request("alice", "upgrade-taken", "t").owner(dead)).await;
    let old_takeover =
        "UPDATE idemkey_records SET token = token + 1 WHERE idem_key = 'upgrade-taken'";
    sqlx::raw_sql(old_takeover)
        .execute(store.pool())
        .await
        .unwrap();
    for _ in 0..12 {
        tokio::time::sleep(GRACE / 4).await;
        store.beat(judge, GRACE).await.unwrap();
    }
    let own = store.lookup(&own.scope).await.unwrap().unwrap();
    assert_eq!(lease(&own.state), Duration::ZERO, "the dead owner's claim");
    let taken = store.lookup(&taken.scope).await.unwrap().unwrap();
    assert!(lease(&taken.state) > Duration::ZERO, "{taken:?}");
    let retry = request("alice", "upgrade-taken", "t").owner(judge);
    assert!(store.reclaim(&retry, &taken).await.unwrap().is_none());
}

async fn claimed<DB: idemkey_sqlx::Backend>(
    store: &SqlxStore<DB>,
    request: ClaimRequest,
) -> idemkey_core::Claim {
    match store.try_claim(&request).await.unwrap() {
        TryClaim::Claimed(claim) => claim,
        TryClaim::Existing(record) => panic!("claimed already: {record:?}"),
    }
}

fn lease(state: &RecordState) -> Duration {
    match state {
        RecordState::InFlight { lease_remaining } => *lease_remaining,
        other => panic!("in flight, not {other:?}"),
    }
}
