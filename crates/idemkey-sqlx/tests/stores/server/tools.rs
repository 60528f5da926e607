//! What the server database tests use to force races: a gate at a failpoint, polling, lock
//! waits as the server reports them, and a note handler that can run SQL first and tells
//! its connection.

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};

use idemkey_core::{ClaimRequest, StoredResponse};
use idemkey_sqlx::failpoints::{Hook, Point, injected};
use idemkey_sqlx::{AtomicError, AtomicHandler, AtomicOptions, HandlerResult, Outcome, SqlxStore};
use sqlx::Transaction;
use tokio::sync::Semaphore;

use super::Server;
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
pub async fn wait_until<F, Fut>(what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    idemkey_test_support::wait_until(what, 6000, check).await;
}

/// Waits until this many of the store's claims are blocked on a lock.
pub async fn claims_blocked<DB: Server>(store: &SqlxStore<DB>, n: i64) {
    let what = format!("{n} claims blocked on a lock");
    wait_until(&what, || async {
        DB::waiting(store, "INSERT INTO idemkey_records").await == n
    })
    .await;
}

/// SQL to run first, and on which calls (1-based).
type Before = (&'static str, fn(usize) -> bool);

/// A create-note handler that counts its calls, records its connection's id, and may first
/// run `before` (say, raising an error) on the calls `when` picks.
pub struct TestNote<DB> {
    actor: String,
    title: String,
    pub calls: Arc<AtomicUsize>,
    /// The server's id of the connection of its last call.
    pub connection: Arc<AtomicI64>,
    before: Option<Before>,
    backend: PhantomData<fn() -> DB>,
}

// By hand: a derived `Clone` would ask the backend to be `Clone`.
impl<DB> Clone for TestNote<DB> {
    fn clone(&self) -> Self {
        Self {
            actor: self.actor.clone(),
            title: self.title.clone(),
            calls: self.calls.clone(),
            connection: self.connection.clone(),
            before: self.before,
            backend: PhantomData,
        }
    }
}

impl<DB: Server> TestNote<DB> {
    pub fn new(req: &ClaimRequest, title: &str) -> Self {
        Self {
            actor: req.scope.actor.clone(),
            title: title.into(),
            calls: Arc::default(),
            connection: Arc::default(),
            before: None,
            backend: PhantomData,
        }
    }

    pub fn before(mut self, sql: &'static str, when: fn(usize) -> bool) -> Self {
        self.before = Some((sql, when));
        self
    }

    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// The server's id of the connection of its last call.
    pub fn connection(&self) -> i64 {
        self.connection.load(Ordering::SeqCst)
    }

    async fn run(&self, tx: &mut Transaction<'static, DB>) -> sqlx::Result<StoredResponse> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        let id = DB::connection_id(tx).await?;
        self.connection.store(id, Ordering::SeqCst);
        if let Some((sql, when)) = self.before
            && when(call)
        {
            DB::execute(tx, sql).await?;
        }
        let id = uuid::Uuid::new_v4().to_string();
        DB::Fixture::insert_note(tx, &id, &self.actor, &self.title).await?;
        let body = serde_json::json!({ "id": id, "title": self.title }).to_string();
        Ok(StoredResponse::new(201, body))
    }
}

impl<DB: Server> AtomicHandler<DB> for TestNote<DB> {
    type Response = StoredResponse;
    type Error = sqlx::Error;

    async fn call(
        &mut self,
        mut tx: Transaction<'static, DB>,
    ) -> HandlerResult<DB, StoredResponse, sqlx::Error> {
        let result = self.run(&mut tx).await;
        (Some(tx), result)
    }
}

pub type NoteResult = Result<Outcome<StoredResponse>, AtomicError<sqlx::Error>>;

/// A request running in a task of its own.
pub type Task = tokio::task::JoinHandle<NoteResult>;

/// Runs `handler` for `req` in atomic mode with `options`.
pub async fn run_with<DB: Server>(
    store: &SqlxStore<DB>,
    req: &ClaimRequest,
    options: AtomicOptions,
    mut handler: TestNote<DB>,
) -> NoteResult {
    store.execute(req, &options, &mut handler).await
}

/// Runs `handler` for `req` in atomic mode with the default options.
pub async fn run<DB: Server>(
    store: &SqlxStore<DB>,
    req: &ClaimRequest,
    handler: TestNote<DB>,
) -> NoteResult {
    run_with(store, req, AtomicOptions::default(), handler).await
}

/// Runs it in a task of its own, with `options`.
pub fn spawn_with<DB: Server>(
    store: &SqlxStore<DB>,
    req: &ClaimRequest,
    options: AtomicOptions,
    handler: TestNote<DB>,
) -> Task {
    let (store, req) = (store.clone(), req.clone());
    tokio::spawn(async move { run_with(&store, &req, options, handler).await })
}

/// Runs it in a task of its own with the default options.
pub fn spawn<DB: Server>(store: &SqlxStore<DB>, req: &ClaimRequest, handler: TestNote<DB>) -> Task {
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
