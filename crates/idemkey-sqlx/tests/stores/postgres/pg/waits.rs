//! Contract §8 as only PostgreSQL keeps it (the waits both server databases share are in
//! `server/waits.rs`): business statements keep their own lock waits, and waiting claims are
//! capped in number, this process's duplicates of one that gave up in flight with it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idemkey_core::StoredResponse;
use idemkey_sqlx::failpoints::Point;
use idemkey_sqlx::{AtomicHandler, AtomicOptions, HandlerResult, Outcome};
use sqlx::postgres::PgPoolOptions;
use sqlx::{Postgres, Transaction};
use tokio::sync::Barrier;

use super::{PgFixture, store_with};
use crate::common::Fixture;
use crate::common::seed::request;
use crate::server::Server;
use crate::server::tools::{Gate, TestNote, actor, claims_blocked, run, spawn, wait_until};
use crate::server::waits::{PATIENT, elsewhere};

/// How many of the store's connections wait on a lock in a statement starting with `sql`.
async fn waiting(store: &idemkey_sqlx::PgStore, sql: &str) -> i64 {
    <Postgres as Server>::waiting(store, sql).await
}

/// The claim's short lock timeout is gone once the claim is made: a business statement
/// waits on a row lock for many times that bound, then succeeds, and it sees the session's
/// own `lock_timeout` (set with `SET`, so `RESET` would not bring it back).
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn business_statements_keep_their_ordinary_lock_waits() {
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .after_connect(|conn, _| {
            Box::pin(async move {
                sqlx::raw_sql("SET lock_timeout = '31s'")
                    .execute(conn)
                    .await
                    .map(|_| ())
            })
        });
    let store = store_with(pool, |o| o)
        .await
        .with_claim_lock_timeout(Duration::from_millis(20));
    sqlx::query("INSERT INTO note VALUES ('locked', 'test', 'locked')")
        .execute(store.pool())
        .await
        .unwrap();
    let mut blocker = store.pool().begin().await.unwrap();
    sqlx::query("SELECT id FROM note WHERE id = 'locked' FOR UPDATE")
        .execute(&mut *blocker)
        .await
        .unwrap();
    let req = request(&actor(), "key-a", "business");
    let task = {
        let (store, req) = (store.clone(), req.clone());
        tokio::spawn(async move {
            store
                .execute(&req, &AtomicOptions::default(), &mut UpdateLocked)
                .await
        })
    };
    // Measured by the database: the update has waited ten times the claim's bound.
    wait_until("the business statement to wait 200 ms", || async {
        task.is_finished()
            || sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) \
             WHERE a.application_name = $1 AND NOT l.granted \
             AND starts_with(a.query, 'UPDATE note') \
             AND clock_timestamp() - l.waitstart > interval '200 ms'",
            )
            .bind(super::schema(&store))
            .fetch_one(store.pool())
            .await
            .unwrap()
                == 1
    })
    .await;
    assert!(!task.is_finished(), "{:?}", task.await);
    assert_eq!(
        waiting(&store, "UPDATE note").await,
        1,
        "still waiting, not timed out"
    );
    blocker.commit().await.unwrap();
    let outcome = task.await.unwrap().unwrap();
    assert!(
        matches!(&outcome, Outcome::Executed(r) if r.body == "31s"),
        "{outcome:?}"
    );
}

/// Answers with the `lock_timeout` it sees, after updating the row a test holds locked.
struct UpdateLocked;

impl AtomicHandler<Postgres> for UpdateLocked {
    type Response = StoredResponse;
    type Error = sqlx::Error;

    async fn call(
        &mut self,
        mut tx: Transaction<'static, Postgres>,
    ) -> HandlerResult<Postgres, StoredResponse, sqlx::Error> {
        let result = async {
            let seen: String = sqlx::query_scalar("SHOW lock_timeout")
                .fetch_one(&mut *tx)
                .await?;
            sqlx::query("UPDATE note SET title = 'updated' WHERE id = 'locked'")
                .execute(&mut *tx)
                .await?;
            Ok(StoredResponse::new(201, seen))
        }
        .await;
        (Some(tx), result)
    }
}

/// Pool of 4, at most 2 waiters, 16 duplicates while the winner is held open: 2 wait and
/// replay, 14 are answered in flight, and the pool still serves another request meanwhile.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn duplicates_beyond_the_waiter_cap_are_in_flight() {
    let store = store_with(PgPoolOptions::new().max_connections(4), |o| o)
        .await
        .with_claim_lock_timeout(PATIENT)
        .with_max_waiters(2);
    let req = request(&actor(), "key-a", "storm");
    let gate = Gate::new(Point::BeforeCommit);
    let winner = spawn(
        &store.clone().with_failpoints(gate.hook()),
        &req,
        TestNote::new(&req, "storm"),
    );
    gate.reached().await;
    let storm: Vec<_> = (0..16)
        .map(|_| spawn(&elsewhere(&store), &req, TestNote::new(&req, "storm")))
        .collect();
    wait_until("14 duplicates to be answered", || async {
        let blocked = waiting(&store, "INSERT INTO idemkey_records").await;
        assert!(blocked <= 2, "{blocked} claims waiting, over the cap");
        storm.iter().filter(|t| t.is_finished()).count() == 14
    })
    .await;
    claims_blocked(&store, 2).await;
    let other = request(&actor(), "key-a", "other");
    let other = run(&store, &other, TestNote::new(&other, "other")).await;
    assert!(matches!(other, Ok(Outcome::Executed(_))), "{other:?}");
    gate.pass();
    assert!(matches!(winner.await.unwrap(), Ok(Outcome::Executed(_))));
    let (mut in_flight, mut replayed) = (0, 0);
    for task in storm {
        match task.await.unwrap() {
            Ok(Outcome::InFlight { .. }) => in_flight += 1,
            Ok(Outcome::Replayed(_)) => replayed += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!((in_flight, replayed), (14, 2));
    assert_eq!(
        PgFixture::count_notes(&store).await,
        2,
        "the winner's and the other one"
    );
}

/// This process's duplicates of a request whose claim gives up on another instance's claim
/// (here at once: the only waiter permit is taken) are in flight with it: they do not claim
/// after it, each giving up in turn, nor wait out their own, longer bound.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn in_process_duplicates_of_a_claim_that_gave_up_are_in_flight_with_it() {
    let store = PgFixture::store()
        .await
        .with_claim_lock_timeout(PATIENT)
        .with_max_waiters(1);
    // Another instance's claim, held open; a third instance's duplicate waits for it with
    // the only waiter permit.
    let req = request(&actor(), "key-a", "waited");
    let gate = Gate::new(Point::BeforeCommit);
    let winner = elsewhere(&store).with_failpoints(gate.hook());
    let winner = spawn(&winner, &req, TestNote::new(&req, "waited"));
    gate.reached().await;
    let waiter = spawn(&elsewhere(&store), &req, TestNote::new(&req, "waited"));
    claims_blocked(&store, 1).await;
    // All four miss the lookup before any takes its turn; then count who claims.
    let (looked, claims) = (Arc::new(Barrier::new(4)), Arc::new(AtomicUsize::new(0)));
    let counted = store.clone().with_failpoints({
        let (looked, claims) = (looked.clone(), claims.clone());
        Arc::new(move |point| {
            let looked = looked.clone();
            if point == Point::BeforeClaim {
                claims.fetch_add(1, Ordering::SeqCst);
            }
            Box::pin(async move {
                if point == Point::AfterLookup {
                    looked.wait().await;
                }
                Ok(())
            })
        })
    });
    let duplicates: Vec<_> = (0..4)
        .map(|_| spawn(&counted, &req, TestNote::new(&req, "waited")))
        .collect();
    for duplicate in duplicates {
        let outcome = tokio::time::timeout(Duration::from_secs(60), duplicate)
            .await
            .expect("answered without waiting out the bound")
            .unwrap();
        assert!(
            matches!(outcome, Ok(Outcome::InFlight { .. })),
            "{outcome:?}"
        );
    }
    assert_eq!(
        claims.load(Ordering::SeqCst),
        1,
        "only the first of this process claimed"
    );
    gate.pass();
    assert!(matches!(winner.await.unwrap(), Ok(Outcome::Executed(_))));
    assert!(matches!(waiter.await.unwrap(), Ok(Outcome::Replayed(_))));
}
