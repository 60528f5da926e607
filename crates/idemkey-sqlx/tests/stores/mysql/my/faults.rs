//! Faults on MySQL: deadlocks re-run the handler (at most 3 times, then `store-unavailable`),
//! and a lost connection leaves nothing half-written.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use idemkey_core::{Error, StoredResponse};
use idemkey_sqlx::failpoints::Point;
use idemkey_sqlx::{AtomicError, AtomicHandler, AtomicOptions, HandlerResult, MySqlStore, Outcome};
use sqlx::{MySql, Transaction};
use tokio::sync::Barrier;

use super::MySqlFixture;
use super::tools::{Gate, NoteResult, TestNote, actor, kill, run, spawn};
use crate::common::Fixture;
use crate::common::seed::request;

/// A procedure that raises InnoDB's deadlock error (1213), as a victim would get it.
const PROVOKE: &str = "CREATE PROCEDURE provoke_deadlock() \
    SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213, MESSAGE_TEXT = 'provoked'";

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [mysql])]
async fn a_provoked_deadlock_every_time_is_store_unavailable_after_3_attempts() {
    let store = MySqlFixture::store().await;
    sqlx::raw_sql(PROVOKE).execute(store.pool()).await.unwrap();
    let req = request(&actor(), "key-a", "never");
    let handler = TestNote::new(&req, "never").before("CALL provoke_deadlock()", |_| true);
    let outcome = run(&store, &req, handler.clone()).await;
    assert!(
        matches!(outcome, Err(AtomicError::Store(Error::Unavailable(_)))),
        "{outcome:?}"
    );
    assert_eq!(handler.calls(), 3);
    assert_eq!(
        (
            MySqlFixture::count_notes(&store).await,
            MySqlFixture::count_records(&store).await
        ),
        (0, 0)
    );
}

/// Two requests of different keys lock two rows in opposite orders, each held at a barrier
/// after its first lock: InnoDB breaks the deadlock by rolling one back, whose handler runs
/// again and succeeds. Both execute, each note once.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [mysql])]
async fn a_real_deadlock_reruns_the_victims_handler() {
    let store = MySqlFixture::store().await;
    let counters = "CREATE TABLE counter (id INT PRIMARY KEY, n INT NOT NULL) ENGINE = InnoDB; \
                    INSERT INTO counter VALUES (1, 0), (2, 0)";
    sqlx::raw_sql(counters).execute(store.pool()).await.unwrap();
    let barrier = Arc::new(Barrier::new(2));
    let tasks: Vec<_> = [(1, 2), (2, 1)]
        .into_iter()
        .map(|order| {
            let store = store.clone();
            let mut handler = Crossed {
                order,
                barrier: barrier.clone(),
                calls: 0,
            };
            tokio::spawn(async move {
                let req = request(&actor(), "key-a", "crossed");
                let outcome = store
                    .execute(&req, &AtomicOptions::default(), &mut handler)
                    .await;
                (outcome, handler.calls)
            })
        })
        .collect();
    let mut calls = Vec::new();
    for task in tasks {
        let (outcome, n) = task.await.unwrap();
        assert!(matches!(outcome, Ok(Outcome::Executed(_))), "{outcome:?}");
        calls.push(n);
    }
    calls.sort_unstable();
    assert_eq!(calls, [1, 2], "the victim ran again, once");
    let total: i64 = sqlx::query_scalar("SELECT CAST(SUM(n) AS SIGNED) FROM counter")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(total, 4, "two committed handlers, two updates each");
}

/// Updates two counter rows in its order, meeting the other request at the barrier after
/// the first (on its first call only).
struct Crossed {
    order: (i32, i32),
    barrier: Arc<Barrier>,
    calls: usize,
}

impl AtomicHandler<MySql> for Crossed {
    type Response = StoredResponse;
    type Error = sqlx::Error;

    async fn call(
        &mut self,
        mut tx: Transaction<'static, MySql>,
    ) -> HandlerResult<MySql, StoredResponse, sqlx::Error> {
        self.calls += 1;
        let update = "UPDATE counter SET n = n + 1 WHERE id = ?";
        let result = async {
            sqlx::query(update)
                .bind(self.order.0)
                .execute(&mut *tx)
                .await?;
            if self.calls == 1 {
                self.barrier.wait().await;
            }
            sqlx::query(update)
                .bind(self.order.1)
                .execute(&mut *tx)
                .await?;
            Ok(StoredResponse::new(201, "crossed"))
        }
        .await;
        (Some(tx), result)
    }
}

/// Kills the request's connection while it is paused at `point`, after the handler's write.
async fn killed_at(point: Point) -> (MySqlStore, NoteResult) {
    let store = MySqlFixture::store().await;
    let req = request(&actor(), "key-a", "killed");
    let gate = Gate::new(point);
    let handler = TestNote::new(&req, "killed");
    let task = spawn(
        &store.clone().with_failpoints(gate.hook()),
        &req,
        handler.clone(),
    );
    gate.reached().await;
    kill(&store, handler.connection.load(Ordering::SeqCst), false).await;
    gate.pass();
    let outcome = task.await.unwrap();
    assert_eq!(
        (
            MySqlFixture::count_notes(&store).await,
            MySqlFixture::count_records(&store).await
        ),
        (0, 0),
        "nothing half-written"
    );
    let retry = run(&store, &req, TestNote::new(&req, "killed")).await;
    assert!(matches!(retry, Ok(Outcome::Executed(_))), "{retry:?}");
    assert_eq!(MySqlFixture::count_notes(&store).await, 1);
    (store, outcome)
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [mysql])]
async fn a_lost_connection_mid_request_writes_nothing_and_a_retry_executes_once() {
    let (_, outcome) = killed_at(Point::BeforeComplete).await;
    assert!(matches!(outcome, Err(AtomicError::Store(_))), "{outcome:?}");
}

/// The commit's reply never comes: the caller cannot know whether it committed.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [mysql])]
async fn a_lost_connection_at_commit_is_outcome_unknown() {
    let (_, outcome) = killed_at(Point::BeforeCommit).await;
    assert!(
        matches!(outcome, Err(AtomicError::Store(Error::OutcomeUnknown(_)))),
        "{outcome:?}"
    );
}
