//! Commit-time's record and `COMMIT` sent as one command (`insert_completed_and_commit`):
//! what each way it can end leaves in the file, and that the writer's connection serves the
//! next request whatever the ending.

use std::time::Duration;

use crate::common::seed::{Held, create_note, request};
use idemkey_core::{RecordId, StoredResponse};
use idemkey_sqlx::failpoints::Point;
use idemkey_sqlx::{AtomicError, Backend, Folded, Outcome};

use super::*;

/// Commit-time, the strategy whose record is inserted last.
type CommitTime = crate::common::CommitTime<SqliteFixture>;

/// The statements run as one command on this driver: committed once, visible from another
/// connection at once; a second insert of the scope stops before its `COMMIT`. Fails if a
/// sqlx upgrade stops running several statements in one command (or starts refusing them).
#[idemkey_test_support::test]
async fn the_insert_and_the_commit_are_one_command() {
    let store = open(&fresh_path()).await;
    let req = request("actor-folded", "key-a", "folded");
    let stored = StoredResponse::new(201, "made");
    let mut tx = store.begin_write().await.unwrap();
    let folded = Sqlite::insert_completed_and_commit(&mut tx, &req, RecordId::new(), &stored).await;
    assert!(matches!(folded, Folded::Committed), "{folded:?}");
    // Not committed by `tx`, which is only dropped: the record is already there.
    assert_eq!(
        SqliteFixture::count_records(&SqliteStore::connect(&url(&store)).await.unwrap()).await,
        1
    );
    drop(tx);
    let mut tx = store.begin_write().await.unwrap();
    let folded = Sqlite::insert_completed_and_commit(&mut tx, &req, RecordId::new(), &stored).await;
    assert!(matches!(folded, Folded::Conflict), "{folded:?}");
    // The transaction is still open after the conflict, and usable.
    sqlx::query("INSERT INTO note (id, actor, title) VALUES ('n', 'a', 't')")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(SqliteFixture::count_notes(&store).await, 0);
}

fn url(store: &SqliteStore) -> String {
    let options = store.pool().connect_options();
    format!("sqlite://{}", options.get_filename().display())
}

/// A record committed by another process between a request's lookup and its insert: the
/// insert stops at the scope's row, the upsert finds it live, the speculation rolls back
/// (its note with it) and the request replays the winner.
#[idemkey_test_support::test]
async fn a_record_committed_after_the_lookup_wins_and_the_speculation_rolls_back() {
    let path = fresh_path();
    let winner = open(&path).await;
    let (held, hook) = Held::at(Point::AfterLookup);
    let loser = open(&path).await.with_failpoints(hook);
    let req = request("actor-raced", "key-a", "raced");
    let late = {
        let (loser, req) = (loser.clone(), req.clone());
        tokio::spawn(async move { create_note::<CommitTime>(&loser, &req, "raced", 201).await })
    };
    held.reached.notified().await;
    let first = create_note::<CommitTime>(&winner, &req, "raced", 201)
        .await
        .unwrap();
    held.release.notify_one();
    let late = late.await.unwrap().unwrap();
    assert!(
        matches!(&late, Outcome::Replayed(r) if *r == first_response(&first)),
        "{late:?}"
    );
    assert_eq!(SqliteFixture::count_notes(&winner).await, 1);
    assert_eq!(SqliteFixture::count_records(&winner).await, 1);
    // The loser's writer is not left inside a transaction.
    let next = request("actor-raced", "key-b", "next");
    let next = create_note::<CommitTime>(&loser, &next, "next", 201).await;
    assert!(matches!(next, Ok(Outcome::Executed(_))), "{next:?}");
}

fn first_response(outcome: &Outcome<StoredResponse>) -> StoredResponse {
    match outcome {
        Outcome::Executed(response) => response.clone(),
        other => panic!("the winner executes: {other:?}"),
    }
}

/// An expired record of the scope stops the plain insert too; the upsert then replaces it
/// and the request executes anew.
#[idemkey_test_support::test]
async fn an_expired_record_is_replaced() {
    let store = open(&fresh_path()).await;
    let mut req = request("actor-expired", "key-a", "again");
    req.retention = Duration::from_millis(1);
    let first = create_note::<CommitTime>(&store, &req, "again", 201).await;
    assert!(matches!(first, Ok(Outcome::Executed(_))), "{first:?}");
    tokio::time::sleep(Duration::from_millis(20)).await;
    req.retention = Duration::from_secs(60);
    let second = create_note::<CommitTime>(&store, &req, "again", 201).await;
    assert!(matches!(second, Ok(Outcome::Executed(_))), "{second:?}");
    assert_eq!(SqliteFixture::count_notes(&store).await, 2);
    assert_eq!(SqliteFixture::count_records(&store).await, 1);
    let replay = create_note::<CommitTime>(&store, &req, "again", 201).await;
    assert!(matches!(replay, Ok(Outcome::Replayed(_))), "{replay:?}");
}

/// A `COMMIT` that fails inside the command is the request's error: nothing of it stays,
/// and the writer serves the next request.
#[idemkey_test_support::test]
async fn a_commit_that_fails_in_the_command_is_an_error_and_leaves_nothing() {
    let store = open(&fresh_path()).await;
    doom_commits_of(&store, "INSERT").await;
    let req = request("actor-doomed", "key-a", "doomed");
    let doomed = create_note::<CommitTime>(&store, &req, "doomed", 201).await;
    assert!(matches!(doomed, Err(AtomicError::Store(_))), "{doomed:?}");
    assert_eq!(SqliteFixture::count_notes(&store).await, 0);
    assert_eq!(SqliteFixture::count_records(&store).await, 0);
    sqlx::query("DROP TRIGGER doomed")
        .execute(store.pool())
        .await
        .unwrap();
    let again = create_note::<CommitTime>(&store, &req, "doomed", 201).await;
    assert!(matches!(again, Ok(Outcome::Executed(_))), "{again:?}");
    assert_eq!(SqliteFixture::count_notes(&store).await, 1);
}
