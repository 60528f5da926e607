//! Faults as only MySQL has them (the faults both server databases share are in
//! `server/faults.rs`): a real deadlock re-runs its victim's handler.

use std::sync::Arc;

use idemkey_core::StoredResponse;
use idemkey_sqlx::{AtomicHandler, AtomicOptions, HandlerResult, Outcome};
use sqlx::{MySql, Transaction};
use tokio::sync::Barrier;

use super::MySqlFixture;
use crate::common::Fixture;
use crate::common::seed::request;
use crate::server::tools::actor;

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
