//! `Inbox::process`'s decisions on SQLite, with no broker: what a redelivery, a reused id, a
//! missing id and a failing handler are told.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures_util::future::BoxFuture;
use idemkey_inbox::{Action, DeadLetter, Incoming, Lookup, Outbox, RetryReason, Strategy};
use sqlx::{Sqlite, Transaction};

use crate::common::{Ship, pg_inbox_of, shipped, sqlite_inbox, unique};

fn order(id: Option<&'static str>, payload: &'static [u8], delivered: u64) -> Incoming<'static> {
    Incoming {
        id,
        subject: "orders",
        payload,
        headers: Vec::new(),
        delivered,
    }
}

#[idemkey_test_support::test]
async fn a_redelivered_message_is_acknowledged_without_running_again() {
    let dir = tempfile::tempdir().unwrap();
    let inbox = sqlite_inbox(&dir).await;
    let ship = Ship::default();

    let first = inbox
        .process(&order(Some("m-1"), b"o-1", 1), ship.sqlite("o-1"))
        .await;
    let Action::Ack { publish } = first else {
        panic!("{first:?}");
    };
    assert_eq!(publish.len(), 1);
    assert_eq!(
        (publish[0].subject.as_str(), &publish[0].payload[..]),
        ("shipped", &b"o-1"[..])
    );

    let again = inbox
        .process(&order(Some("m-1"), b"o-1", 2), ship.sqlite("o-1"))
        .await;
    assert!(
        matches!(again, Action::Ack { ref publish } if publish.is_empty()),
        "{again:?}"
    );
    assert_eq!(ship.runs(), 1);
    assert_eq!(shipped(&inbox).await, ["o-1"]);
}

/// A publisher's duplicate and a reused id arrive as first deliveries. Looking up only
/// redeliveries, each runs the handler in a transaction rolled back at the record and commits
/// nothing (the duplicate acknowledged, the reused id dead-lettered), and a redelivery runs
/// nothing. Looking up every delivery (the default), neither runs.
#[idemkey_test_support::test]
async fn looking_up_redeliveries_only_a_first_delivery_of_a_processed_id_commits_nothing() {
    for (lookup, runs) in [(Lookup::Redeliveries, 3), (Lookup::Always, 1)] {
        let dir = tempfile::tempdir().unwrap();
        let mut settings = crate::common::fast();
        settings.lookup = lookup;
        let inbox = sqlite_inbox(&dir).await.with_settings(settings);
        let ship = Ship::default();
        let mut published = Vec::new();
        for delivered in [1, 1, 2] {
            let action = inbox
                .process(&order(Some("m-1"), b"o-1", delivered), ship.sqlite("o-1"))
                .await;
            let Action::Ack { publish } = action else {
                panic!("{lookup:?}: {action:?}");
            };
            published.push(publish.len());
        }
        assert_eq!(published, [1, 0, 0], "{lookup:?}: only the first publishes");
        let reused = inbox
            .process(&order(Some("m-1"), b"o-2", 1), ship.sqlite("o-2"))
            .await;
        assert!(
            matches!(reused, Action::DeadLetter(DeadLetter::Reused)),
            "{lookup:?}: {reused:?}"
        );
        assert_eq!(ship.runs(), runs, "{lookup:?}");
        assert_eq!(shipped(&inbox).await, ["o-1"], "{lookup:?}");
    }
}

#[idemkey_test_support::test]
async fn an_id_reused_with_another_payload_is_dead_lettered_and_never_run() {
    let dir = tempfile::tempdir().unwrap();
    let inbox = sqlite_inbox(&dir).await;
    let ship = Ship::default();
    inbox
        .process(&order(Some("m-1"), b"o-1", 1), ship.sqlite("o-1"))
        .await;

    let other = inbox
        .process(&order(Some("m-1"), b"o-2", 1), ship.sqlite("o-2"))
        .await;

    assert!(
        matches!(other, Action::DeadLetter(DeadLetter::Reused)),
        "{other:?}"
    );
    assert_eq!(ship.runs(), 1);
    assert_eq!(shipped(&inbox).await, ["o-1"]);
}

#[idemkey_test_support::test]
async fn a_message_without_a_usable_id_is_refused_and_never_run() {
    let dir = tempfile::tempdir().unwrap();
    let inbox = sqlite_inbox(&dir).await;
    let ship = Ship::default();
    let none = inbox
        .process(&order(None, b"o-1", 1), ship.sqlite("o-1"))
        .await;
    assert!(
        matches!(none, Action::DeadLetter(DeadLetter::NoId)),
        "{none:?}"
    );
    let bad = inbox
        .process(&order(Some("two words"), b"o-1", 1), ship.sqlite("o-1"))
        .await;
    assert!(
        matches!(bad, Action::DeadLetter(DeadLetter::InvalidId(_))),
        "{bad:?}"
    );
    assert_eq!(ship.runs(), 0);
}

/// Fails every run, after writing a row that the rollback must take back.
fn failing(
    runs: &Arc<AtomicUsize>,
) -> impl for<'t> FnMut(
    &'t mut Transaction<'static, Sqlite>,
    &'t mut Outbox,
) -> BoxFuture<'t, Result<(), std::io::Error>>
+ Send {
    let runs = Arc::clone(runs);
    move |tx, outbox| {
        runs.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            sqlx::query("INSERT INTO shipments (order_id) VALUES ('rolled back')")
                .execute(&mut **tx)
                .await
                .map_err(std::io::Error::other)?;
            outbox.publish("shipped", "never");
            Err(std::io::Error::other("the warehouse is closed"))
        })
    }
}

#[idemkey_test_support::test]
async fn a_failing_handler_is_retried_then_dead_lettered_at_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let inbox = sqlite_inbox(&dir).await;
    let runs = Arc::new(AtomicUsize::new(0));

    for delivered in 1..=2 {
        let action = inbox
            .process(&order(Some("m-9"), b"o-9", delivered), failing(&runs))
            .await;
        assert!(
            matches!(
                action,
                Action::Retry {
                    reason: RetryReason::Failed(_),
                    ..
                }
            ),
            "delivery {delivered}: {action:?}"
        );
    }
    let last = inbox
        .process(&order(Some("m-9"), b"o-9", 3), failing(&runs))
        .await;
    assert!(
        matches!(
            last,
            Action::DeadLetter(DeadLetter::Poison { deliveries: 3, .. })
        ),
        "{last:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    assert!(
        shipped(&inbox).await.is_empty(),
        "a failed run's write committed"
    );

    // Fixed, a later delivery of the same message runs: nothing was recorded for it.
    let ship = Ship::default();
    let fixed = inbox
        .process(&order(Some("m-9"), b"o-9", 1), ship.sqlite("o-9"))
        .await;
    assert!(matches!(fixed, Action::Ack { .. }), "{fixed:?}");
    assert_eq!(shipped(&inbox).await, ["o-9"]);
}

/// Inserts into `table`, after `gate` opens when there is one.
fn pg_ship(
    table: &str,
    runs: &Arc<AtomicUsize>,
    gate: Option<Arc<tokio::sync::Notify>>,
) -> impl for<'t> FnMut(
    &'t mut Transaction<'static, sqlx::Postgres>,
    &'t mut Outbox,
) -> BoxFuture<'t, Result<(), sqlx::Error>>
+ Send
+ use<> {
    let (runs, insert) = (
        Arc::clone(runs),
        format!("INSERT INTO {table} (order_id) VALUES ('o-1')"),
    );
    move |tx, _outbox| {
        runs.fetch_add(1, Ordering::SeqCst);
        let (gate, insert) = (gate.clone(), insert.clone());
        Box::pin(async move {
            if let Some(gate) = gate {
                gate.notified().await;
            }
            sqlx::query(sqlx::AssertSqlSafe(insert))
                .execute(&mut **tx)
                .await?;
            Ok(())
        })
    }
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn claiming_first_a_delivery_while_the_first_still_runs_is_neither_run_nor_lost() {
    redelivered_while_running(Strategy::ClaimFirst).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn at_commit_time_of_a_delivery_and_its_redelivery_running_together_one_commits() {
    redelivered_while_running(Strategy::CommitTime).await;
}

/// A message delivered again, in another process, while its first delivery's handler runs,
/// its transaction open: executed once either way.
async fn redelivered_while_running(strategy: Strategy) {
    let (consumer, table) = (unique("shipper"), unique("shipments"));
    let mut settings = crate::common::fast();
    settings.strategy = strategy;
    let first = pg_inbox_of(&consumer).await.with_settings(settings.clone());
    let second = pg_inbox_of(&consumer).await.with_settings(settings);
    let create = format!("CREATE TABLE {table} (order_id TEXT NOT NULL)");
    sqlx::query(sqlx::AssertSqlSafe(create))
        .execute(first.store().pool())
        .await
        .unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(tokio::sync::Notify::new());

    // The first delivery holds its transaction open until the gate opens.
    let running = {
        let (first, handler) = (
            first.clone(),
            pg_ship(&table, &runs, Some(Arc::clone(&gate))),
        );
        tokio::spawn(async move { first.process(&order(Some("m-1"), b"o-1", 1), handler).await })
    };
    while runs.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    let redelivery = second
        .process(&order(Some("m-1"), b"o-1", 2), pg_ship(&table, &runs, None))
        .await;
    match strategy {
        // Held by the first's claim: told to come back later, never run.
        Strategy::ClaimFirst => assert!(
            matches!(
                redelivery,
                Action::Retry {
                    reason: RetryReason::InFlight,
                    ..
                }
            ),
            "{redelivery:?}"
        ),
        // Ran, and committed its record first: acknowledged; the first then finds the record
        // at its own insert, rolls back and is acknowledged as a replay.
        _ => assert!(matches!(redelivery, Action::Ack { .. }), "{redelivery:?}"),
    }
    gate.notify_one();
    assert!(matches!(running.await.unwrap(), Action::Ack { .. }));
    // Delivered again, it is acknowledged, not run.
    let later = second
        .process(&order(Some("m-1"), b"o-1", 3), pg_ship(&table, &runs, None))
        .await;
    assert!(matches!(later, Action::Ack { .. }), "{later:?}");
    let expected_runs = match strategy {
        Strategy::ClaimFirst => 1,
        _ => 2,
    };
    assert_eq!(runs.load(Ordering::SeqCst), expected_runs);
    let rows: i64 =
        sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
            .fetch_one(first.store().pool())
            .await
            .unwrap();
    assert_eq!(rows, 1);
    let drop = format!("DROP TABLE {table}");
    sqlx::query(sqlx::AssertSqlSafe(drop))
        .execute(first.store().pool())
        .await
        .unwrap();
}
