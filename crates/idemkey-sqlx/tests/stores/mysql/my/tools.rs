//! What the MySQL tests use to force races: a gate at a failpoint, lock waits read from
//! `information_schema`, and a note handler that can run SQL first and tells its connection.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use idemkey_core::{ClaimRequest, StoredResponse};
use idemkey_sqlx::failpoints::{Hook, Point, injected};
use idemkey_sqlx::{AtomicError, AtomicHandler, AtomicOptions, HandlerResult, MySqlStore, Outcome};
use sqlx::{AssertSqlSafe, MySql, Transaction};
use tokio::sync::Semaphore;

use super::MySqlFixture;
use crate::common::Fixture;

/// Pauses every request of a store at one point until the test lets it go, or fails it.
#[derive(Clone)]
pub struct Gate {
    point: Point,
    reached: Arc<Semaphore>,
    open: Arc<Semaphore>,
    fail: Arc<AtomicBool>,
}

impl Gate {
    pub fn new(point: Point) -> Self {
        Self {
            point,
            reached: Arc::new(Semaphore::new(0)),
            open: Arc::new(Semaphore::new(0)),
            fail: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The store's hook.
    pub fn hook(&self) -> Hook {
        let gate = self.clone();
        Arc::new(move |point| {
            let gate = gate.clone();
            Box::pin(async move {
                if point != gate.point {
                    return Ok(());
                }
                gate.reached.add_permits(1);
                gate.open.acquire().await.unwrap().forget();
                match gate.fail.load(Ordering::SeqCst) {
                    true => Err(injected(point)),
                    false => Ok(()),
                }
            })
        })
    }

    /// Waits until a request is paused at the point.
    pub async fn reached(&self) {
        self.reached.acquire().await.unwrap().forget();
    }

    /// Lets one paused request go on.
    pub fn pass(&self) {
        self.open.add_permits(1);
    }

    /// Fails one paused request at the point (an injected store error).
    pub fn fail(&self) {
        self.fail.store(true, Ordering::SeqCst);
        self.open.add_permits(1);
    }
}

/// Polls `check` until it holds. Panics after about a minute, so a broken test fails rather
/// than hangs; nothing is asserted about how long it took.
pub async fn wait_until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    for _ in 0..6000 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never happened: {what}");
}

/// The ids of the store's connections running a statement that starts with `sql`: from
/// `PROCESSLIST`, since MariaDB's `INNODB_TRX` can serve a stale copy. A claim seen there
/// while the winner is held open can only be waiting for the winner's lock.
pub async fn running(store: &MySqlStore, sql: &str) -> Vec<u64> {
    sqlx::query_scalar(
        "SELECT CAST(ID AS UNSIGNED) FROM information_schema.PROCESSLIST \
         WHERE DB = ? AND COMMAND IN ('Query', 'Execute') AND INFO LIKE CONCAT(?, '%')",
    )
    .bind(super::database(store))
    .bind(sql)
    .fetch_all(store.pool())
    .await
    .unwrap()
}

/// How many of the store's connections run a statement that starts with `sql`.
pub async fn waiting(store: &MySqlStore, sql: &str) -> i64 {
    i64::try_from(running(store, sql).await.len()).unwrap()
}

/// Waits until this many of the store's claims are blocked on a lock.
pub async fn claims_blocked(store: &MySqlStore, n: i64) {
    let what = format!("{n} claims blocked on a lock");
    wait_until(&what, || async {
        waiting(store, "INSERT INTO idemkey_records").await == n
    })
    .await;
}

/// Kills a connection (`KILL`, or `KILL QUERY` for its statement alone) and, for a
/// connection, waits until it is gone.
pub async fn kill(store: &MySqlStore, id: u64, query_only: bool) {
    let what = if query_only { "KILL QUERY" } else { "KILL" };
    sqlx::raw_sql(AssertSqlSafe(format!("{what} {id}")))
        .execute(store.pool())
        .await
        .unwrap();
    if query_only {
        return;
    }
    wait_until("the connection to end", || async {
        let left: i64 =
            sqlx::query_scalar("SELECT count(*) FROM information_schema.PROCESSLIST WHERE ID = ?")
                .bind(id)
                .fetch_one(store.pool())
                .await
                .unwrap();
        left == 0
    })
    .await;
}

/// SQL to run first, and on which calls (1-based).
type Before = (&'static str, fn(usize) -> bool);

/// A create-note handler that counts its calls, records its connection's id, and may first
/// run `before` on the calls `when` picks.
#[derive(Clone, Default)]
pub struct TestNote {
    actor: String,
    title: String,
    pub calls: Arc<AtomicUsize>,
    pub connection: Arc<AtomicU64>,
    before: Option<Before>,
}

impl TestNote {
    pub fn new(req: &ClaimRequest, title: &str) -> Self {
        Self {
            actor: req.scope.actor.clone(),
            title: title.into(),
            ..Self::default()
        }
    }

    pub fn before(mut self, sql: &'static str, when: fn(usize) -> bool) -> Self {
        self.before = Some((sql, when));
        self
    }

    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    async fn run(&self, tx: &mut Transaction<'static, MySql>) -> sqlx::Result<StoredResponse> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        let id: u64 = sqlx::query_scalar("SELECT CONNECTION_ID()")
            .fetch_one(&mut **tx)
            .await?;
        self.connection.store(id, Ordering::SeqCst);
        if let Some((sql, when)) = self.before
            && when(call)
        {
            sqlx::raw_sql(sql).execute(&mut **tx).await?;
        }
        let id = uuid::Uuid::new_v4().to_string();
        MySqlFixture::insert_note(tx, &id, &self.actor, &self.title).await?;
        let body = serde_json::json!({ "id": id, "title": self.title }).to_string();
        Ok(StoredResponse::new(201, body))
    }
}

impl AtomicHandler<MySql> for TestNote {
    type Response = StoredResponse;
    type Error = sqlx::Error;

    async fn call(
        &mut self,
        mut tx: Transaction<'static, MySql>,
    ) -> HandlerResult<MySql, StoredResponse, sqlx::Error> {
        let result = self.run(&mut tx).await;
        (Some(tx), result)
    }
}

pub type NoteResult = Result<Outcome<StoredResponse>, AtomicError<sqlx::Error>>;

/// A request running in a task of its own.
pub type Task = tokio::task::JoinHandle<NoteResult>;

/// Runs `handler` for `req` in atomic mode with `options`.
pub async fn run_with(
    store: &MySqlStore,
    req: &ClaimRequest,
    options: AtomicOptions,
    mut handler: TestNote,
) -> NoteResult {
    store.execute(req, &options, &mut handler).await
}

/// Runs `handler` for `req` in atomic mode with the default options.
pub async fn run(store: &MySqlStore, req: &ClaimRequest, handler: TestNote) -> NoteResult {
    run_with(store, req, AtomicOptions::default(), handler).await
}

/// Runs it in a task of its own, with `options`.
pub fn spawn_with(
    store: &MySqlStore,
    req: &ClaimRequest,
    options: AtomicOptions,
    handler: TestNote,
) -> Task {
    let (store, req) = (store.clone(), req.clone());
    tokio::spawn(async move { run_with(&store, &req, options, handler).await })
}

/// Runs it in a task of its own with the default options.
pub fn spawn(store: &MySqlStore, req: &ClaimRequest, handler: TestNote) -> Task {
    spawn_with(store, req, AtomicOptions::default(), handler)
}

/// The body of an executed or replayed response.
pub fn body(outcome: &NoteResult) -> bytes::Bytes {
    match outcome {
        Ok(Outcome::Executed(r) | Outcome::Replayed(r)) => r.body.clone(),
        other => panic!("expected a response, got {other:?}"),
    }
}

/// A fresh actor, so a scope of its own.
pub fn actor() -> String {
    format!("actor-{}", uuid::Uuid::new_v4())
}
