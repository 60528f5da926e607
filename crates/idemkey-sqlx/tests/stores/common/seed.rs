//! The seed experiment's six cases (its table, row by row) and a few more, through the
//! atomic API, written once for every backend.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use idemkey_core::{ClaimRequest, Fingerprint, Key, Operation, Store, StoredResponse};
use idemkey_sqlx::failpoints::Point;
use std::marker::PhantomData;

use idemkey_sqlx::{AtomicError, AtomicHandler, HandlerResult, Outcome, SqlxStore};
use sqlx::Transaction;
use tokio::sync::{Barrier, Notify};

use super::{Fixture, at};

type Result<T> = std::result::Result<Outcome<T>, AtomicError<sqlx::Error>>;

/// A create-note request: key scoped to (actor, create-note, key), fingerprint of the body.
pub fn request(actor: &str, key: &str, title: &str) -> ClaimRequest {
    let body = serde_json::json!({ "title": title }).to_string();
    let fingerprint = Fingerprint::builder("POST", "/v1/notes")
        .content_type("application/json")
        .body(body.as_bytes());
    ClaimRequest::new(
        actor,
        Operation::new("create-note", "v1"),
        Key::parse(key.as_bytes()).unwrap(),
        fingerprint,
    )
}

/// The seed's handler: inserts a note on the claim's transaction and answers `status`.
pub struct CreateNote<F> {
    actor: String,
    title: String,
    status: u16,
    panic_after_write: bool,
    /// The note's id, instead of a fresh one: a duplicate's insert then collides with the
    /// first request's note.
    id: Option<String>,
    /// How many times the handler ran, rolled back or not.
    calls: usize,
    fixture: PhantomData<fn() -> F>,
}

impl<F: Fixture> CreateNote<F> {
    pub fn new(actor: &str, title: &str, status: u16) -> Self {
        Self {
            actor: actor.into(),
            title: title.into(),
            status,
            panic_after_write: false,
            id: None,
            calls: 0,
            fixture: PhantomData,
        }
    }

    async fn run(
        &self,
        tx: &mut Transaction<'static, F::DB>,
    ) -> std::result::Result<StoredResponse, sqlx::Error> {
        let id = (self.id.clone()).unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        F::insert_note(tx, &id, &self.actor, &self.title).await?;
        assert!(!self.panic_after_write, "handler panicked after its write");
        let body = serde_json::json!({ "id": id, "title": self.title }).to_string();
        Ok(StoredResponse::new(self.status, body)
            .with_header("content-type", "application/json")
            .with_header("location", format!("/v1/notes/{id}")))
    }
}

impl<F: Fixture> AtomicHandler<F::DB> for CreateNote<F> {
    type Response = StoredResponse;
    type Error = sqlx::Error;

    async fn call(
        &mut self,
        mut tx: Transaction<'static, F::DB>,
    ) -> HandlerResult<F::DB, StoredResponse, sqlx::Error> {
        self.calls += 1;
        let result = self.run(&mut tx).await;
        (Some(tx), result)
    }
}

/// Creates a note in atomic mode, as the seed's function did.
pub async fn create_note<F: Fixture>(
    store: &SqlxStore<F::DB>,
    req: &ClaimRequest,
    title: &str,
    status: u16,
) -> Result<StoredResponse> {
    let mut handler = CreateNote::<F>::new(&req.scope.actor, title, status);
    store.execute(req, &F::options(), &mut handler).await
}

fn body(outcome: &Outcome<StoredResponse>) -> StoredResponse {
    match outcome {
        Outcome::Executed(r) | Outcome::Replayed(r) | Outcome::NotStored(r) => r.clone(),
        other => panic!("expected a response, got {other:?}"),
    }
}

fn actor() -> String {
    format!("actor-{}", uuid::Uuid::new_v4())
}

pub async fn response_lost_after_commit_then_identical_retry<F: Fixture>() {
    let store = F::store().await;
    let req = request(&actor(), "key-a", "first");
    // The first response is "lost": the caller drops it after the commit.
    let lost = create_note::<F>(&store, &req, "first", 201).await.unwrap();
    assert!(matches!(lost, Outcome::Executed(_)));
    let retry = create_note::<F>(&store, &req, "first", 201).await.unwrap();
    assert!(matches!(retry, Outcome::Replayed(_)));
    assert_eq!(body(&retry), body(&lost));
    assert_eq!(body(&retry).status, 201);
    assert_eq!(F::count_notes(&store).await, 1);
}

pub async fn same_actor_and_key_with_changed_title_is_rejected<F: Fixture>() {
    let store = F::store().await;
    let actor = actor();
    create_note::<F>(&store, &request(&actor, "key-a", "first"), "first", 201)
        .await
        .unwrap();
    let changed = create_note::<F>(&store, &request(&actor, "key-a", "changed"), "changed", 201)
        .await
        .unwrap();
    assert!(matches!(changed, Outcome::Mismatch));
    // 422 by default; a route may answer the seed's 409 instead.
    let problem = idemkey_core::Problem::new(idemkey_core::ProblemKind::KeyReused);
    assert_eq!(problem.status, 422);
    assert_eq!(problem.status(409).status, 409);
    assert_eq!(F::count_notes(&store).await, 1);
}

pub async fn another_actor_with_the_same_key_gets_a_separate_note<F: Fixture>() {
    let store = F::store().await;
    let a = create_note::<F>(&store, &request(&actor(), "key-a", "same"), "same", 201)
        .await
        .unwrap();
    let b = create_note::<F>(&store, &request(&actor(), "key-a", "same"), "same", 201)
        .await
        .unwrap();
    assert!(matches!(a, Outcome::Executed(_)) && matches!(b, Outcome::Executed(_)));
    assert_ne!(body(&a).body, body(&b).body);
    assert_eq!(F::count_notes(&store).await, 2);
}

/// Runs `n` identical requests whose lookups all miss before any of them claims. Every other
/// one does not coalesce with the others in the process (as on another instance), so the
/// database's claim settles the race as well as the in-process turn.
async fn race<F: Fixture>(n: usize) -> (SqlxStore<F::DB>, Vec<Outcome<StoredResponse>>, usize) {
    let barrier = Arc::new(Barrier::new(n));
    let misses = Arc::new(AtomicUsize::new(0));
    let (b, m) = (barrier.clone(), misses.clone());
    // Only the first n misses meet at the barrier: one per request, since none passes it
    // before all have missed. A request that looks again later (commit-time, after its
    // insert met the winner's record) goes straight on.
    let hook = at(Point::AfterLookup, move || {
        let (b, m) = (b.clone(), m.clone());
        async move {
            if m.fetch_add(1, Ordering::SeqCst) < n {
                b.wait().await;
            }
        }
    });
    let store = F::store().await.with_failpoints(hook);
    let req = request(&actor(), "key-a", "raced");
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let (store, req) = (store.clone().coalescing(i % 2 == 0), req.clone());
            tokio::spawn(async move { create_note::<F>(&store, &req, "raced", 201).await.unwrap() })
        })
        .collect();
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.unwrap());
    }
    (store, outcomes, misses.load(Ordering::SeqCst))
}

fn count(outcomes: &[Outcome<StoredResponse>], executed: bool) -> usize {
    outcomes
        .iter()
        .filter(|o| {
            if executed {
                matches!(o, Outcome::Executed(_))
            } else {
                matches!(o, Outcome::Replayed(_))
            }
        })
        .count()
}

pub async fn both_concurrent_requests_observe_no_key<F: Fixture>() {
    let (store, outcomes, misses) = race::<F>(2).await;
    assert!(misses >= 2, "both initial lookups missed");
    assert_eq!((count(&outcomes, true), count(&outcomes, false)), (1, 1));
    assert_eq!(body(&outcomes[0]), body(&outcomes[1]));
    assert_eq!(F::count_notes(&store).await, 1);
}

pub async fn thirty_two_concurrent_requests_create_one_note<F: Fixture>() {
    let (store, outcomes, misses) = race::<F>(32).await;
    assert!(misses >= 32, "every initial lookup missed");
    assert_eq!((count(&outcomes, true), count(&outcomes, false)), (1, 31));
    assert!(outcomes.iter().all(|o| body(o) == body(&outcomes[0])));
    assert_eq!(F::count_notes(&store).await, 1);
}

pub async fn note_creation_violating_a_check_constraint_stores_nothing<F: Fixture>() {
    let store = F::store().await;
    let req = request(&actor(), "key-a", "   ");
    let failed = create_note::<F>(&store, &req, "   ", 201).await;
    assert!(matches!(failed, Err(AtomicError::Handler(_))), "{failed:?}");
    assert_eq!(
        (F::count_notes(&store).await, F::count_records(&store).await),
        (0, 0)
    );
    // Nothing was stored: the key stays usable for an identical retry.
    assert_eq!(store.lookup(&req.scope).await.unwrap(), None);
}

pub async fn saved_result_deleted_before_an_identical_retry<F: Fixture>() {
    let store = F::store().await;
    let req = request(&actor(), "key-a", "again");
    create_note::<F>(&store, &req, "again", 201).await.unwrap();
    assert!(store.forget(&req.scope).await.unwrap());
    let retry = create_note::<F>(&store, &req, "again", 201).await.unwrap();
    assert!(matches!(retry, Outcome::Executed(_)));
    assert_eq!(F::count_notes(&store).await, 2);
}

pub async fn handler_panic_rolls_back<F: Fixture>() {
    let store = F::store().await;
    let req = request(&actor(), "key-a", "boom");
    let mut handler = CreateNote::<F>::new(&req.scope.actor, "boom", 201);
    handler.panic_after_write = true;
    let store2 = store.clone();
    let joined = tokio::spawn(async move {
        store2
            .execute(&req, &F::options(), &mut handler)
            .await
            .map(|_| ())
    })
    .await;
    assert!(joined.unwrap_err().is_panic());
    assert_eq!(
        (F::count_notes(&store).await, F::count_records(&store).await),
        (0, 0)
    );
}

pub async fn unstored_status_rolls_back<F: Fixture>() {
    let store = F::store().await;
    let req = request(&actor(), "key-a", "five hundred");
    let outcome = create_note::<F>(&store, &req, "five hundred", 500)
        .await
        .unwrap();
    assert!(matches!(outcome, Outcome::NotStored(ref r) if r.status == 500));
    assert_eq!(
        (F::count_notes(&store).await, F::count_records(&store).await),
        (0, 0)
    );
    let retry = create_note::<F>(&store, &req, "five hundred", 201)
        .await
        .unwrap();
    assert!(matches!(retry, Outcome::Executed(_)));
    assert_eq!(F::count_notes(&store).await, 1);
}

pub async fn cancelled_request_leaves_no_transaction_open<F: Fixture>() {
    // Cancel the request at each step; afterwards the same key must work at once, which it
    // cannot if a connection went back to the pool with the claim's transaction open.
    for point in [
        Point::AfterLookup,
        Point::BeforeClaim,
        Point::BeforeComplete,
        Point::BeforeCommit,
    ] {
        let reached = Arc::new(tokio::sync::Notify::new());
        let r = reached.clone();
        let hook = at(point, move || {
            let r = r.clone();
            async move {
                r.notify_one();
                std::future::pending::<()>().await;
            }
        });
        let store = F::store().await;
        let paused = store.clone().with_failpoints(hook);
        let req = request(&actor(), "key-a", "cancelled");
        let task = {
            let req = req.clone();
            tokio::spawn(async move { create_note::<F>(&paused, &req, "cancelled", 201).await })
        };
        reached.notified().await;
        task.abort();
        assert!(task.await.unwrap_err().is_cancelled());
        let retry = create_note::<F>(&store, &req, "cancelled", 201)
            .await
            .unwrap();
        assert!(
            matches!(retry, Outcome::Executed(_)),
            "{point:?}: {retry:?}"
        );
        assert_eq!(F::count_notes(&store).await, 1, "{point:?}");
    }
}

/// A failpoint hook that counts the lookups missed (`AfterLookup`) or skipped to wait for the
/// first request (`Follow`), and the claims begun (`BeforeClaim`), and holds the first request
/// to reach `hold` until released.
pub struct Held {
    looked: Arc<AtomicUsize>,
    claims: Arc<AtomicUsize>,
    /// Lookups begun by an execution (`BeforeLookup`), and waits for the first request
    /// (`Follow`).
    reads: Arc<AtomicUsize>,
    followed: Arc<AtomicUsize>,
    /// Notified when the held request reaches its point.
    pub reached: Arc<Notify>,
    /// Notify once to let it go on.
    pub release: Arc<Notify>,
}

impl Held {
    pub fn at(hold: Point) -> (Self, idemkey_sqlx::failpoints::Hook) {
        let held = Self {
            looked: Arc::default(),
            claims: Arc::default(),
            reads: Arc::default(),
            followed: Arc::default(),
            reached: Arc::default(),
            release: Arc::default(),
        };
        let (looked, claims) = (held.looked.clone(), held.claims.clone());
        let (reads, followed) = (held.reads.clone(), held.followed.clone());
        let (reached, release) = (held.reached.clone(), held.release.clone());
        let first = Arc::new(AtomicBool::new(true));
        let hook: idemkey_sqlx::failpoints::Hook = Arc::new(move |point| {
            match point {
                // Past the lookup, or waiting for the first request without one.
                Point::AfterLookup => _ = looked.fetch_add(1, Ordering::SeqCst),
                Point::Follow => {
                    looked.fetch_add(1, Ordering::SeqCst);
                    followed.fetch_add(1, Ordering::SeqCst);
                }
                Point::BeforeLookup => _ = reads.fetch_add(1, Ordering::SeqCst),
                Point::BeforeClaim => _ = claims.fetch_add(1, Ordering::SeqCst),
                _ => {}
            }
            let hold = point == hold && first.swap(false, Ordering::SeqCst);
            let (reached, release) = (reached.clone(), release.clone());
            Box::pin(async move {
                if hold {
                    reached.notify_one();
                    release.notified().await;
                }
                Ok(())
            })
        });
        (held, hook)
    }

    /// Waits until `n` requests have missed their lookup or wait for the first one, then
    /// lets the held request go on.
    async fn release_after_lookups(&self, n: usize) {
        for _ in 0..6000 {
            if self.looked.load(Ordering::SeqCst) == n {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(self.looked.load(Ordering::SeqCst), n, "lookups missed");
        self.release.notify_one();
    }
}

/// Duplicates arriving in the process while the first request is held before its commit
/// wait for it in the process: none of them reaches the claim, and all replay its response
/// once it commits.
pub async fn in_process_duplicates_wait_for_the_first_and_replay<F: Fixture>() {
    let (held, hook) = Held::at(Point::BeforeCommit);
    let store = F::store().await.with_failpoints(hook);
    let req = request(&actor(), "key-a", "coalesced");
    let spawn = |store: &SqlxStore<F::DB>| {
        let (store, req) = (store.clone(), req.clone());
        tokio::spawn(async move { create_note::<F>(&store, &req, "coalesced", 201).await })
    };
    let first = spawn(&store);
    held.reached.notified().await;
    let duplicates: Vec<_> = (0..8).map(|_| spawn(&store)).collect();
    held.release_after_lookups(9).await;
    assert!(matches!(first.await.unwrap(), Ok(Outcome::Executed(_))));
    for duplicate in duplicates {
        let outcome = duplicate.await.unwrap();
        assert!(matches!(outcome, Ok(Outcome::Replayed(_))), "{outcome:?}");
    }
    let claims = held.claims.load(Ordering::SeqCst);
    assert_eq!(claims, 1, "only the first request claimed");
    assert_eq!(held.followed.load(Ordering::SeqCst), 8, "all waited for it");
    let reads = held.reads.load(Ordering::SeqCst);
    assert!(reads <= 1, "no duplicate read the record: {reads} reads");
    assert_eq!(F::count_notes(&store).await, 1);
}

/// Duplicates arriving while the first request of their scope is about to look a completed
/// record up read it for themselves: a lookup's result is never handed on (it could predate
/// their requests). The same request replays, another body is `key-reused`.
pub async fn duplicates_during_the_first_ones_lookup_read_for_themselves<F: Fixture>() {
    // The case is about that lookup: a fixture without it must not pass it unrun.
    assert!(
        F::options().lookup,
        "the case needs the lookup before the transaction"
    );
    let (held, hook) = Held::at(Point::BeforeLookup);
    let plain = F::store().await;
    let store = plain.clone().with_failpoints(hook);
    let req = request(&actor(), "key-a", "looked");
    let created = create_note::<F>(&plain, &req, "looked", 201).await;
    assert!(matches!(created, Ok(Outcome::Executed(_))), "{created:?}");
    let spawn = |body: &'static str| {
        let (store, req) = (store.clone(), request(&req.scope.actor, "key-a", body));
        tokio::spawn(async move { create_note::<F>(&store, &req, body, 201).await })
    };
    let first = spawn("looked");
    held.reached.notified().await;
    for duplicate in (0..4).map(|_| spawn("looked")).collect::<Vec<_>>() {
        let outcome = duplicate.await.unwrap();
        assert!(matches!(outcome, Ok(Outcome::Replayed(_))), "{outcome:?}");
    }
    for duplicate in (0..4).map(|_| spawn("another")).collect::<Vec<_>>() {
        let outcome = duplicate.await.unwrap();
        assert!(matches!(outcome, Ok(Outcome::Mismatch)), "{outcome:?}");
    }
    held.release.notify_one();
    assert!(matches!(first.await.unwrap(), Ok(Outcome::Replayed(_))));
    assert_eq!(held.reads.load(Ordering::SeqCst), 9, "each read for itself");
    assert_eq!(held.followed.load(Ordering::SeqCst), 0);
    assert_eq!(F::count_notes(&store).await, 1);
}

/// Runs `first`, held once its claim has begun (its turn in the process taken), then
/// `second`, and lets the first go on once the second has missed its lookup: the second
/// waits for the first in the process. Each is (request, title, status).
async fn first_then_follower<F: Fixture>(
    first: (ClaimRequest, &'static str, u16),
    second: (ClaimRequest, &'static str, u16),
) -> (
    SqlxStore<F::DB>,
    Result<StoredResponse>,
    Result<StoredResponse>,
) {
    let (held, hook) = Held::at(Point::BeforeClaim);
    let store = F::store().await.with_failpoints(hook);
    let run = |(req, title, status): (ClaimRequest, &'static str, u16)| {
        let store = store.clone();
        tokio::spawn(async move { create_note::<F>(&store, &req, title, status).await })
    };
    let first = run(first);
    held.reached.notified().await;
    let second = run(second);
    held.release_after_lookups(2).await;
    (store, first.await.unwrap(), second.await.unwrap())
}

/// A duplicate waiting in the process with another body is answered `key-reused` from the
/// record the first one committed.
pub async fn an_in_process_duplicate_with_another_body_is_a_mismatch<F: Fixture>() {
    let actor = actor();
    let first = (request(&actor, "key-a", "first"), "first", 201);
    let second = (request(&actor, "key-a", "second"), "second", 201);
    let (store, first, second) = first_then_follower::<F>(first, second).await;
    assert!(matches!(first, Ok(Outcome::Executed(_))), "{first:?}");
    assert!(matches!(second, Ok(Outcome::Mismatch)), "{second:?}");
    assert_eq!(F::count_notes(&store).await, 1);
}

/// A duplicate waiting in the process for a request that ends without a record (an unstored
/// status rolls it back) claims and executes itself.
pub async fn an_in_process_duplicate_executes_when_the_first_stores_nothing<F: Fixture>() {
    let actor = actor();
    let first = (request(&actor, "key-a", "again"), "again", 500);
    let second = (request(&actor, "key-a", "again"), "again", 201);
    let (store, first, second) = first_then_follower::<F>(first, second).await;
    assert!(matches!(first, Ok(Outcome::NotStored(_))), "{first:?}");
    assert!(matches!(second, Ok(Outcome::Executed(_))), "{second:?}");
    assert_eq!(F::count_notes(&store).await, 1);
}

/// The first request is held before its commit, its note written with a fixed id; a
/// duplicate from another process (no coalescing) then writes the same note id, which
/// collides with the first one's (on PostgreSQL its insert waits for the first transaction).
/// Whatever the strategy, once the first commits the duplicate replays its response: never
/// a 5xx for the unique violation the winner caused, and one note.
pub async fn a_duplicate_that_collides_with_the_first_replays_it<F: Fixture>() {
    let (held, hook) = Held::at(Point::BeforeCommit);
    let store = F::store().await.with_failpoints(hook);
    let req = request(&actor(), "key-a", "collide");
    let id = uuid::Uuid::new_v4().to_string();
    let run = |store: SqlxStore<F::DB>| {
        let (req, id) = (req.clone(), id.clone());
        tokio::spawn(async move {
            let mut handler = CreateNote::<F>::new(&req.scope.actor, "collide", 201);
            handler.id = Some(id);
            store.execute(&req, &F::options(), &mut handler).await
        })
    };
    let first = run(store.clone());
    held.reached.notified().await;
    let duplicate = run(store.clone().coalescing(false));
    held.release_after_lookups(2).await;
    let first = first.await.unwrap();
    let duplicate = duplicate.await.unwrap();
    assert!(matches!(first, Ok(Outcome::Executed(_))), "{first:?}");
    assert!(
        matches!(duplicate, Ok(Outcome::Replayed(_))),
        "{duplicate:?}"
    );
    assert_eq!(body(&first.unwrap()), body(&duplicate.unwrap()));
    assert_eq!(F::count_notes(&store).await, 1);
}

/// Without the lookup before the transaction, a retry of a completed request still replays
/// (commit-time: after running the handler speculatively and rolling it back).
pub async fn a_retry_without_the_lookup_replays<F: Fixture>() {
    let store = F::store().await;
    let req = request(&actor(), "key-a", "no lookup");
    let options = idemkey_sqlx::AtomicOptions {
        lookup: false,
        ..F::options()
    };
    let mut handler = CreateNote::<F>::new(&req.scope.actor, "no lookup", 201);
    let first = store.execute(&req, &options, &mut handler).await.unwrap();
    assert!(matches!(first, Outcome::Executed(_)), "{first:?}");
    let retry = store.execute(&req, &options, &mut handler).await.unwrap();
    assert!(matches!(retry, Outcome::Replayed(_)), "{retry:?}");
    assert_eq!(body(&first), body(&retry));
    let changed = request(&req.scope.actor, "key-a", "changed");
    let mismatch = store
        .execute(&changed, &options, &mut handler)
        .await
        .unwrap();
    assert!(matches!(mismatch, Outcome::Mismatch), "{mismatch:?}");
    assert_eq!(F::count_notes(&store).await, 1);
}

/// A record lease mode released is claimed again under its id, and the handler runs once:
/// commit-time leaves it to claim-first rather than run speculatively and roll back.
pub async fn a_released_record_is_claimed_again_once<F: Fixture>() {
    let store = F::store().await;
    let req = request(&actor(), "key-a", "released");
    let idemkey_core::TryClaim::Claimed(claim) = store.try_claim(&req).await.unwrap() else {
        panic!("a fresh scope is claimed");
    };
    store.release(&claim).await.unwrap();
    let mut handler = CreateNote::<F>::new(&req.scope.actor, "released", 201);
    let outcome = store
        .execute(&req, &F::options(), &mut handler)
        .await
        .unwrap();
    assert!(matches!(outcome, Outcome::Executed(_)), "{outcome:?}");
    assert_eq!(handler.calls, 1, "the handler ran once");
    let record = store.lookup(&req.scope).await.unwrap().unwrap();
    assert_eq!(record.record_id, claim.record_id, "the same record id");
    assert_eq!(F::count_notes(&store).await, 1);
}
