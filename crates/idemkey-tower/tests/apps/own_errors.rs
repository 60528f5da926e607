//! A handler with an error type of its own, on PostgreSQL: a unique violation is its business
//! 409 (not stored, the key stays free), and a serialization failure still runs it again.
//! Needs `IDEMKEY_TEST_PG_URL` or a server at 127.0.0.1:5432 (ignored without one outside CI,
//! failed in CI).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Router, middleware};
use http::StatusCode;
use idemkey_sqlx::PgStore;
use idemkey_test_support::runner::needs::postgres_url;
use idemkey_tower::Actor;
use idemkey_tower::atomic::{AtomicIdempotencyLayer, DbError, Tx};
use sqlx::{AssertSqlSafe, Executor, Postgres};
use tower::ServiceExt;

const SERIALIZATION_FAILURE: &str =
    "DO $$ BEGIN RAISE EXCEPTION 'provoked' USING ERRCODE = '40001'; END $$";

/// What the handler does and how often it ran.
#[derive(Default)]
struct Ctx {
    calls: AtomicUsize,
    /// Fail the next call with a serialization failure.
    fail_next: AtomicBool,
}

/// The handler's own error type.
enum CreateError {
    Taken,
    Db(DbError),
}

impl From<sqlx::Error> for CreateError {
    fn from(error: sqlx::Error) -> Self {
        let error = DbError::from(error);
        if error.is_unique_violation() {
            Self::Taken
        } else {
            Self::Db(error)
        }
    }
}

impl IntoResponse for CreateError {
    fn into_response(self) -> Response {
        match self {
            Self::Taken => (StatusCode::CONFLICT, "this id is taken").into_response(),
            Self::Db(error) => {
                let mut response = StatusCode::SERVICE_UNAVAILABLE.into_response();
                error.attach(&mut response);
                response
            }
        }
    }
}

async fn create(
    State(ctx): State<Arc<Ctx>>,
    mut tx: Tx<Postgres>,
    id: String,
) -> Result<StatusCode, CreateError> {
    ctx.calls.fetch_add(1, Ordering::SeqCst);
    if ctx.fail_next.swap(false, Ordering::SeqCst) {
        sqlx::query(SERIALIZATION_FAILURE).execute(&mut *tx).await?;
    }
    sqlx::query("INSERT INTO note (id) VALUES ($1)")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    Ok(StatusCode::CREATED)
}

async fn authenticate(mut request: Request) -> Request {
    request.extensions_mut().insert(Actor::new("tenant"));
    request
}

async fn send(app: &Router, key: &str, id: &str) -> StatusCode {
    let request = Request::post("/notes")
        .header("idempotency-key", key)
        .body(Body::from(id.to_owned()))
        .unwrap();
    app.clone().oneshot(request).await.unwrap().status()
}

/// A store on a schema of the test's own, with its `note` table.
async fn store() -> (PgStore, String) {
    let url = postgres_url();
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let schema = format!("idemkey_own_{}_{}", std::process::id(), nanos.as_nanos());
    let admin = sqlx::PgPool::connect(&url).await.unwrap();
    let create =
        format!("CREATE SCHEMA {schema}; CREATE TABLE {schema}.note (id TEXT PRIMARY KEY)");
    admin.execute(AssertSqlSafe(create)).await.unwrap();
    let options = PgStore::connect_options(&url)
        .unwrap()
        .options([("search_path", schema.as_str())]);
    (PgStore::connect_with(options).await.unwrap(), schema)
}

async fn count(store: &PgStore, table: &str) -> i64 {
    let sql = format!("SELECT count(*) FROM {table}");
    sqlx::query_scalar(AssertSqlSafe(sql))
        .fetch_one(store.pool())
        .await
        .unwrap()
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn a_handlers_own_errors_keep_the_rerun_and_answer_a_business_409() {
    let (store, schema) = store().await;
    let ctx = Arc::new(Ctx::default());
    let app = Router::new()
        .route(
            "/notes",
            post(create).layer(AtomicIdempotencyLayer::new(store.clone())),
        )
        .layer(middleware::map_request(authenticate))
        .with_state(ctx.clone());

    ctx.fail_next.store(true, Ordering::SeqCst);
    assert_eq!(send(&app, "k1", "n1").await, StatusCode::CREATED);
    assert_eq!(ctx.calls.load(Ordering::SeqCst), 2, "run again after 40001");

    ctx.fail_next.store(true, Ordering::SeqCst);
    assert_eq!(send(&app, "k2", "n1").await, StatusCode::CONFLICT);
    assert_eq!(ctx.calls.load(Ordering::SeqCst), 4, "run again, then 409");
    let stored = (
        count(&store, "note").await,
        count(&store, "idemkey_records").await,
    );
    assert_eq!(stored, (1, 1), "the 409 stored nothing");

    // The key is free: the same request runs again.
    assert_eq!(send(&app, "k2", "n1").await, StatusCode::CONFLICT);
    assert_eq!(ctx.calls.load(Ordering::SeqCst), 5);
    let admin = sqlx::PgPool::connect(&postgres_url()).await.unwrap();
    let drop = format!("DROP SCHEMA {schema} CASCADE");
    admin.execute(AssertSqlSafe(drop)).await.unwrap();
}
