//! The library on PostgreSQL: the server's settings and failures as applications meet them.
//! Needs `IDEMKEY_TEST_PG_URL` or a server at 127.0.0.1:5432 (the tests are ignored without
//! one outside CI, and fail in CI).

use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::{Request, State};
use axum::routing::post;
use axum::{Router, middleware};
use http::StatusCode;
use idemkey_sqlx::PgStore;
use idemkey_test_support::runner::needs::postgres_url;
use idemkey_tower::atomic::{AtomicIdempotencyLayer, DbError, Tx};
use idemkey_tower::{Actor, Config, IdempotencyLayer};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{Executor, Postgres};
use tokio::sync::Notify;

use crate::bed::{Client, send, serve};

/// A name no other test run uses.
fn unique(prefix: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{prefix}_{}_{nanos}", std::process::id())
}

/// Runs one statement built at run time (names of roles and schemas this test made up).
async fn exec(pool: &PgPool, sql: String) {
    pool.execute(sqlx::AssertSqlSafe(sql)).await.unwrap();
}

async fn admin(url: &str) -> PgPool {
    PgPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await
        .unwrap()
}

/// A login role with no privileges beyond PUBLIC's, and a one-connection pool as that role
/// on `options`.
async fn as_new_role(admin: &PgPool, options: PgConnectOptions, setup: &str) -> (String, PgPool) {
    let role = unique("idemkey_role");
    exec(admin, format!("CREATE ROLE {role} LOGIN")).await;
    if !setup.is_empty() {
        exec(admin, setup.replace("{role}", &role)).await;
    }
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(options.username(&role))
        .await
        .unwrap();
    (role, pool)
}

async fn drop_role(admin: &PgPool, role: &str, pool: PgPool) {
    pool.close().await;
    exec(admin, format!("DROP ROLE IF EXISTS {role}")).await;
}

async fn synchronous_commit(pool: &PgPool) -> String {
    sqlx::query_scalar("SHOW synchronous_commit")
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Contract §8: `synchronous_commit=on` for the store's connections, even where the server
/// (here: the role's default) has it off, so an acknowledged note is never lost with its
/// record. Set in the connection options: no statement per request.
#[idemkey_test_support::test(needs = [postgres])]
async fn the_store_commits_synchronously_whatever_the_server_default() {
    let url = postgres_url();
    let admin = admin(&url).await;
    let off = "ALTER ROLE {role} SET synchronous_commit = off";
    let plain = PgConnectOptions::from_str(&url).unwrap();
    let (role, pool) = as_new_role(&admin, plain, off).await;
    assert_eq!(
        synchronous_commit(&pool).await,
        "off",
        "the server's setting"
    );
    drop_role(&admin, &role, pool).await;
    let options = PgStore::connect_options(&url).unwrap();
    let (role, pool) = as_new_role(&admin, options, off).await;
    assert_eq!(
        synchronous_commit(&pool).await,
        "on",
        "the store's connections"
    );
    drop_role(&admin, &role, pool).await;
}

async fn created() -> StatusCode {
    StatusCode::CREATED
}

async fn as_alice(mut request: Request) -> Request {
    request.extensions_mut().insert(Actor::new("alice"));
    request
}

/// Contract §10: a store failure that will not pass by retrying (here 42501, permission
/// denied, or 42P01 where the table is not there) is 500 `store-failed`, never 503
/// `store-unavailable` with `Retry-After`, which would have clients retry forever.
#[idemkey_test_support::test(needs = [postgres])]
async fn a_permanent_store_failure_is_500_without_retry_after() {
    let url = postgres_url();
    let admin = admin(&url).await;
    let options = PgStore::connect_options(&url).unwrap();
    let (role, pool) = as_new_role(&admin, options, "").await;
    let store = PgStore::from_pool(pool.clone());
    let lease = post(created).layer(IdempotencyLayer::new(store.clone()));
    let atomic = post(created).layer(AtomicIdempotencyLayer::new(store));
    let app = Router::new()
        .route("/lease", lease)
        .route("/atomic", atomic)
        .layer(middleware::map_request(as_alice));
    let client = Client::new(serve(app).await);
    for path in ["/lease", "/atomic"] {
        let reply = send(client.post(path, "k", "{}")).await;
        assert_eq!(
            (reply.status, reply.slug()),
            (500, "store-failed".into()),
            "{path}"
        );
        assert!(reply.headers.get("retry-after").is_none(), "{path}");
    }
    drop_role(&admin, &role, pool).await;
}

/// What the handler of the lost-commit test shares with it: its backend's pid, and a gate.
#[derive(Default)]
struct Gate {
    pid: Mutex<Option<i32>>,
    entered: Notify,
    go: Notify,
}

async fn insert_then_wait(
    State(gate): State<Arc<Gate>>,
    mut tx: Tx<Postgres>,
) -> Result<StatusCode, DbError> {
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut *tx)
        .await?;
    sqlx::query("INSERT INTO things DEFAULT VALUES")
        .execute(&mut *tx)
        .await?;
    *gate.pid.lock().unwrap() = Some(pid);
    gate.entered.notify_one();
    gate.go.notified().await;
    Ok(StatusCode::CREATED)
}

/// Contract §10, atomic mode, a request without a key: when the connection is lost under the
/// `COMMIT`, nobody knows whether it committed. That is 500 `outcome-unknown`, not 503
/// `store-unavailable` ("not executed, retry"), which would have the client create twice.
#[idemkey_test_support::test(needs = [postgres])]
async fn a_lost_commit_without_a_key_is_outcome_unknown() {
    let url = postgres_url();
    let admin = admin(&url).await;
    let schema = unique("idemkey_apps");
    exec(&admin, format!("CREATE SCHEMA {schema}")).await;
    let options = PgStore::connect_options(&url)
        .unwrap()
        .options([("search_path", schema.as_str())]);
    let store = PgStore::connect_with(options).await.unwrap();
    store
        .pool()
        .execute("CREATE TABLE things (id serial PRIMARY KEY)")
        .await
        .unwrap();
    let gate = Arc::new(Gate::default());
    let config = Config::default().require_key(false);
    let route = post(insert_then_wait).layer(AtomicIdempotencyLayer::with_config(store, config));
    let app = Router::new()
        .route("/things", route)
        .layer(middleware::map_request(as_alice))
        .with_state(gate.clone());
    let client = Client::new(serve(app).await);
    let request = client
        .request(http::Method::POST, "/things")
        .header("content-type", "application/json")
        .body("{}");
    let reply = tokio::spawn(send(request));
    gate.entered.notified().await;
    let pid = gate.pid.lock().unwrap().unwrap();
    terminate(&admin, pid).await;
    gate.go.notify_one();
    let reply = reply.await.unwrap();
    assert_eq!(
        (reply.status, reply.slug()),
        (500, "outcome-unknown".into())
    );
    exec(&admin, format!("DROP SCHEMA {schema} CASCADE")).await;
}

/// Ends the backend `pid` and waits until it is gone.
async fn terminate(admin: &PgPool, pid: i32) {
    sqlx::query("SELECT pg_terminate_backend($1)")
        .bind(pid)
        .execute(admin)
        .await
        .unwrap();
    for _ in 0..400 {
        let alive: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE pid = $1")
            .bind(pid)
            .fetch_one(admin)
            .await
            .unwrap();
        if alive == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("backend {pid} did not end");
}
