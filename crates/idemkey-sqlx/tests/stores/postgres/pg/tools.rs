//! What the PostgreSQL tests use to force races: a gate at a failpoint, state polling on
//! `pg_stat_activity`, and a note handler that can provoke errors and tells its backend.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::time::Duration;

use idemkey_core::{ClaimRequest, StoredResponse};
use idemkey_sqlx::failpoints::{Hook, Point, injected};
use idemkey_sqlx::{AtomicError, AtomicHandler, AtomicOptions, HandlerResult, Outcome, PgStore};
use sqlx::{Postgres, Transaction};
use tokio::sync::Semaphore;

use super::PgFixture;
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

/// How many of the store's connections wait on a lock in a statement starting with `sql`.
pub async fn waiting(store: &PgStore, sql: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 \
         AND wait_event_type = 'Lock' AND starts_with(query, $2)",
    )
    .bind(super::schema(store))
    .bind(sql)
    .fetch_one(store.pool())
    .await
    .unwrap()
}

/// Waits until this many of the store's claims are blocked on a lock.
pub async fn claims_blocked(store: &PgStore, n: i64) {
    let what = format!("{n} claims blocked on a lock");
    wait_until(&what, || async {
        waiting(store, "INSERT INTO idemkey_records").await == n
    })
    .await;
}

/// Terminates a backend and waits until it is gone.
pub async fn kill(store: &PgStore, pid: i32) {
    let killed: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(pid)
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert!(killed, "backend {pid} not found");
    wait_until("the backend to exit", || async {
        let left: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE pid = $1")
            .bind(pid)
            .fetch_one(store.pool())
            .await
            .unwrap();
        left == 0
    })
    .await;
}

/// SQL to run first, and on which calls (1-based).
type Before = (&'static str, fn(usize) -> bool);

/// A create-note handler that counts its calls, records its backend's pid, and may first
/// run `before` (say, raising an error) on the calls `when` picks.
#[derive(Clone, Default)]
pub struct TestNote {
    actor: String,
    title: String,
    pub calls: Arc<AtomicUsize>,
    pub pid: Arc<AtomicI32>,
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

    async fn run(&self, tx: &mut Transaction<'static, Postgres>) -> sqlx::Result<StoredResponse> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&mut **tx)
            .await?;
        self.pid.store(pid, Ordering::SeqCst);
        if let Some((sql, when)) = self.before
            && when(call)
        {
            sqlx::raw_sql(sql).execute(&mut **tx).await?;
        }
        let id = uuid::Uuid::new_v4().to_string();
        PgFixture::insert_note(tx, &id, &self.actor, &self.title).await?;
        let body = serde_json::json!({ "id": id, "title": self.title }).to_string();
        Ok(StoredResponse::new(201, body))
    }
}

impl AtomicHandler<Postgres> for TestNote {
    type Response = StoredResponse;
    type Error = sqlx::Error;

    async fn call(
        &mut self,
        mut tx: Transaction<'static, Postgres>,
    ) -> HandlerResult<Postgres, StoredResponse, sqlx::Error> {
        let result = self.run(&mut tx).await;
        (Some(tx), result)
    }
}

pub type NoteResult = Result<Outcome<StoredResponse>, AtomicError<sqlx::Error>>;

/// A request running in a task of its own.
pub type Task = tokio::task::JoinHandle<NoteResult>;

/// Runs `handler` for `req` in atomic mode with the default options.
pub async fn run(store: &PgStore, req: &ClaimRequest, mut handler: TestNote) -> NoteResult {
    store
        .execute(req, &AtomicOptions::default(), &mut handler)
        .await
}

/// Runs it in a task of its own.
pub fn spawn(store: &PgStore, req: &ClaimRequest, handler: TestNote) -> Task {
    let (store, req) = (store.clone(), req.clone());
    tokio::spawn(async move { run(&store, &req, handler).await })
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
