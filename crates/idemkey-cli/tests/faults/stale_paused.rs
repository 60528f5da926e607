//! Stale owners, in-process, on SQLite and PostgreSQL: two lease-mode executors (A and B,
//! each its own store and pool) share one database. A's handler has answered, but A is
//! paused at a failpoint just before storing (or releasing) past its lease; B takes the key
//! over by the database's clock and completes it; then A's late completion or release is
//! rejected by the fencing token, and the stored response stays B's.
//!
//! The handlers answer who they are, so the test can tell whose response was stored.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::routing::post;
use idemkey_sqlx::failpoints::{Hook, Point};
use idemkey_sqlx::{MySqlStore, PgStore, SqliteStore};
use idemkey_test_support::db::{Backend, Db};
use idemkey_test_support::wait_until;
use idemkey_tower::{Actor, Config, IdempotencyLayer};

use crate::app::{Action, Faults};

const KEY: &str = "stale";

/// One executor: its name, whether its handler fails, and how often it ran.
#[derive(Clone)]
struct Executor {
    name: &'static str,
    fail: bool,
    runs: Arc<AtomicUsize>,
}

async fn work(State(me): State<Executor>) -> (StatusCode, String) {
    me.runs.fetch_add(1, Ordering::SeqCst);
    match me.fail {
        true => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{} failed", me.name),
        ),
        false => (StatusCode::CREATED, format!("done by {}", me.name)),
    }
}

async fn authenticate(mut request: Request) -> Request {
    request.extensions_mut().insert(Actor::new("alice"));
    request
}

/// Serves `me` in lease mode (1 s lease) on `db`, with failpoints `hook` if any.
async fn start(db: &Db, me: Executor, hook: Option<Hook>) -> SocketAddr {
    let config = Config::default().lease(Duration::from_secs(1));
    let routes = Router::new().route("/work", post(work)).with_state(me);
    let app = match db {
        Db::Sqlite(_) => {
            let store = SqliteStore::connect(&db.url()).await.unwrap();
            let store = match hook {
                Some(hook) => store.with_failpoints(hook),
                None => store,
            };
            routes.layer(IdempotencyLayer::with_config(store, config))
        }
        Db::Postgres { .. } => {
            let store = PgStore::connect(&db.url()).await.unwrap();
            let store = match hook {
                Some(hook) => store.with_failpoints(hook),
                None => store,
            };
            routes.layer(IdempotencyLayer::with_config(store, config))
        }
        Db::Mysql(_) => {
            let store = MySqlStore::connect(&db.url()).await.unwrap();
            let store = match hook {
                Some(hook) => store.with_failpoints(hook),
                None => store,
            };
            routes.layer(IdempotencyLayer::with_config(store, config))
        }
    };
    let app = app.layer(axum::middleware::map_request(authenticate));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

fn executor(name: &'static str, fail: bool) -> Executor {
    let runs = Arc::default();
    Executor { name, fail, runs }
}

async fn send(addr: SocketAddr) -> (u16, String, bool) {
    let url = format!("http://{addr}/work");
    let request = reqwest::Client::new()
        .post(url)
        .header("idempotency-key", KEY);
    let response = request.body("same body").send().await.unwrap();
    let replayed = response.headers().contains_key("idempotent-replayed");
    (
        response.status().as_u16(),
        response.text().await.unwrap(),
        replayed,
    )
}

macro_rules! on_both_backends {
    ($($case:ident),* $(,)?) => {
        mod sqlite { $(
            #[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() { super::$case(super::Backend::Sqlite).await }
        )* }
        mod postgres { $(
            #[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
            async fn $case() { super::$case(super::Backend::Postgres).await }
        )* }
    };
}

on_both_backends!(
    a_late_completion_is_fenced_off,
    a_late_release_is_fenced_off
);

async fn a_late_completion_is_fenced_off(backend: Backend) {
    stale(backend, Point::BeforeComplete, false).await;
}

async fn a_late_release_is_fenced_off(backend: Backend) {
    stale(backend, Point::BeforeRelease, true).await;
}

async fn stale(backend: Backend, point: Point, a_fails: bool) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::create(backend, dir.path()).await;
    let faults = Arc::new(Faults::default());
    let (a, b) = (executor("A", a_fails), executor("B", false));
    let a_addr = start(&db, a.clone(), Some(faults.hook())).await;
    let b_addr = start(&db, b.clone(), None).await;
    faults.arm(point, Action::Pause);
    let first = tokio::spawn(send(a_addr));
    faults.reached().await;

    let early = send(b_addr).await;
    let alive = db.lease_alive(KEY).await;
    assert!(
        !alive || early.0 == 409,
        "B is refused while A's lease lives: {early:?}"
    );
    wait_until("A's lease to run out", 6000, || async {
        !db.lease_alive(KEY).await
    })
    .await;
    let taken = if early.0 == 409 {
        send(b_addr).await
    } else {
        early
    };
    assert_eq!(taken, (201, "done by B".to_owned(), false), "B took over");

    faults.go();
    let late = first.await.unwrap();
    let expected = if a_fails {
        (500, "A failed")
    } else {
        (201, "done by A")
    };
    assert_eq!(
        (late.0, late.1.as_str()),
        expected,
        "A still answers its own client"
    );
    let sql = "SELECT CAST(state AS TEXT), CAST(token AS TEXT) FROM idemkey_records";
    let record = db.rows(sql).await;
    assert_eq!(
        record,
        [("2".into(), "2".into())],
        "completed by B, token 2"
    );
    let replay = send(a_addr).await;
    assert_eq!(
        replay,
        (201, "done by B".to_owned(), true),
        "B's response is stored"
    );
    let runs = (a.runs.load(Ordering::SeqCst), b.runs.load(Ordering::SeqCst));
    assert_eq!(runs, (1, 1), "no third execution");
}
