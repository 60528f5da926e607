//! A small axum app in atomic mode on a SQLite file, with handlers the tests steer.
#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::extract::{FromRequestParts, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{post, post_service};
use axum::{Extension, Router, middleware};
use idemkey_sqlx::failpoints::{Hook, Point};
use idemkey_sqlx::{DEFAULT_BUSY_TIMEOUT, SqliteStore};
use idemkey_tower::atomic::{AtomicIdempotencyLayer, DbError, Tx};
use idemkey_tower::{Actor, Config, Idempotency, IdempotencyLayer, NotExecuted};
use sqlx::Sqlite;
use tokio::sync::Notify;

/// What the handler does, chosen by the `x-behaviour` header (not part of the fingerprint).
#[derive(Clone, Copy, Debug)]
pub enum Behaviour {
    Create,
    Fail500,
    Panic,
    Reject,
    WaitAfterInsert,
    /// Lease mode: waits before taking `Tx`, after the claim committed.
    WaitBeforeTx,
    /// Lease mode: answers 201 without taking `Tx`.
    NoTx,
}

/// The layer in front of the handler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layer {
    Atomic,
    /// `IdempotencyLayer::transactional`.
    LeaseTx,
    /// The same, as a service built with `Idempotency::new(..).transactional()`.
    LeaseTxService,
}

#[derive(Clone)]
pub struct TestServer {
    pub addr: std::net::SocketAddr,
    pub store: SqliteStore,
    pub handler_entered: Arc<Notify>,
    pub release_handler: Arc<Notify>,
    client: reqwest::Client,
    _dir: Arc<tempfile::TempDir>,
}

/// A hook that pauses the first request to reach `point` until `release`.
pub fn pause_at(point: Point, reached: Arc<Notify>, release: Arc<Notify>) -> Hook {
    let paused = Arc::new(AtomicBool::new(false));
    Arc::new(move |p| {
        let (reached, release, paused) = (reached.clone(), release.clone(), paused.clone());
        Box::pin(async move {
            if p == point && !paused.swap(true, Ordering::SeqCst) {
                reached.notify_one();
                release.notified().await;
            }
            Ok(())
        })
    })
}

async fn handler(
    State(s): State<Arc<(Arc<Notify>, Arc<Notify>)>>,
    mut tx: Tx<Sqlite>,
    headers: HeaderMap,
) -> Result<Response, DbError> {
    let behaviour = headers
        .get("x-behaviour")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("Create");
    if behaviour == "Reject" {
        return Ok((StatusCode::BAD_REQUEST, Extension(NotExecuted), "rejected").into_response());
    }
    sqlx::query("INSERT INTO note (id) VALUES (hex(randomblob(8)))")
        .execute(&mut *tx)
        .await?;
    match behaviour {
        "Fail500" => {
            Ok((StatusCode::INTERNAL_SERVER_ERROR, "failed after writing").into_response())
        }
        "Panic" => panic!("handler panicked after writing"),
        "WaitAfterInsert" => {
            s.0.notify_one();
            s.1.notified().await;
            Ok((StatusCode::CREATED, "created").into_response())
        }
        _ => Ok((StatusCode::CREATED, [("location", "/notes/1")], "created").into_response()),
    }
}

/// Lease mode's handler: takes `Tx` itself, so that it can wait before beginning it.
async fn lease_handler(
    State(s): State<Arc<(Arc<Notify>, Arc<Notify>)>>,
    request: Request,
) -> Result<Response, DbError> {
    let (mut parts, _) = request.into_parts();
    let behaviour = parts
        .headers
        .get("x-behaviour")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("Create")
        .to_owned();
    match behaviour.as_str() {
        "NoTx" => return Ok((StatusCode::CREATED, "created without a transaction").into_response()),
        "WaitBeforeTx" => {
            s.0.notify_one();
            s.1.notified().await;
        }
        _ => {}
    }
    let tx = match Tx::<Sqlite>::from_request_parts(&mut parts, &()).await {
        Ok(tx) => tx,
        Err(rejection) => return Ok(rejection),
    };
    handler(State(s), tx, parts.headers).await
}

async fn authenticate(mut request: Request) -> Request {
    request.extensions_mut().insert(Actor::new("tenant"));
    request
}

impl TestServer {
    pub async fn start(hook: Option<Hook>) -> Self {
        Self::start_with(Layer::Atomic, hook).await
    }

    pub async fn start_with(kind: Layer, hook: Option<Hook>) -> Self {
        let dir = Arc::new(tempfile::tempdir().unwrap());
        let config = Config::default().require_key(false);
        Self::start_on(dir, (kind, config), hook, DEFAULT_BUSY_TIMEOUT).await
    }

    /// Another server, with a store of its own, on this one's database file: what a second
    /// process would be, to the database.
    pub async fn another(&self, kind: Layer, config: Config, busy_timeout: Duration) -> Self {
        Self::start_on(self._dir.clone(), (kind, config), None, busy_timeout).await
    }

    /// A server of `kind` with `config` on the database in `dir`, whose store waits
    /// `busy_timeout` for another connection's write lock.
    pub async fn start_on(
        dir: Arc<tempfile::TempDir>,
        (kind, config): (Layer, Config),
        hook: Option<Hook>,
        busy_timeout: Duration,
    ) -> Self {
        let url = format!("sqlite://{}", dir.path().join("atomic.db").display());
        let options = SqliteStore::connect_options(&url)
            .unwrap()
            .busy_timeout(busy_timeout);
        let mut store = SqliteStore::connect_with(options).await.unwrap();
        sqlx::query("CREATE TABLE IF NOT EXISTS note (id TEXT PRIMARY KEY)")
            .execute(store.pool())
            .await
            .unwrap();
        if let Some(hook) = hook {
            store = store.with_failpoints(hook);
        }
        let (entered, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let state = Arc::new((entered.clone(), release.clone()));
        let route = match kind {
            Layer::Atomic => {
                post(handler).layer(AtomicIdempotencyLayer::with_config(store.clone(), config))
            }
            Layer::LeaseTx => post(lease_handler)
                .layer(IdempotencyLayer::with_config(store.clone(), config).transactional()),
            Layer::LeaseTxService => {
                let inner = post(lease_handler).with_state(state.clone());
                post_service(Idempotency::new(inner, store.clone(), config).transactional())
            }
        };
        let app = Router::new()
            .route("/notes", route)
            .layer(middleware::map_request(authenticate))
            .with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self {
            addr,
            store,
            handler_entered: entered,
            release_handler: release,
            client: reqwest::Client::new(),
            _dir: dir,
        }
    }

    /// Waits until a handler signals it was entered; a handler that never is (its request
    /// failed before it) fails the test instead of hanging it.
    pub async fn entered(&self) {
        let entered = self.handler_entered.notified();
        let waited = tokio::time::timeout(std::time::Duration::from_secs(30), entered).await;
        waited.expect("no handler was entered");
    }

    fn request(&self, behaviour: Behaviour) -> reqwest::RequestBuilder {
        self.client
            .post(format!("http://{}/notes", self.addr))
            .header("content-type", "application/json")
            .header("x-behaviour", format!("{behaviour:?}"))
            .body(r#"{"title":"t"}"#)
    }

    pub async fn post(&self, key: &str, behaviour: Behaviour) -> reqwest::Response {
        self.request(behaviour)
            .header("idempotency-key", key)
            .send()
            .await
            .unwrap()
    }

    /// [`Self::post`] in a task of its own, for a test that steers the handler meanwhile.
    pub fn post_in_background(
        &self,
        key: &'static str,
        behaviour: Behaviour,
    ) -> tokio::task::JoinHandle<reqwest::Response> {
        let s = self.clone();
        tokio::spawn(async move { s.post(key, behaviour).await })
    }

    pub async fn post_without_key(&self, behaviour: Behaviour) -> reqwest::Response {
        self.request(behaviour).send().await.unwrap()
    }

    /// The state of the only record (0 in flight, 1 released, 2 completed) and its token.
    pub async fn record(&self) -> (i64, i64) {
        sqlx::query_as("SELECT state, token FROM idemkey_records")
            .fetch_one(self.store.pool())
            .await
            .unwrap()
    }

    /// (notes, idempotency records).
    pub async fn counts(&self) -> (i64, i64) {
        let count =
            |sql: &'static str| sqlx::query_scalar::<_, i64>(sql).fetch_one(self.store.pool());
        (
            count("SELECT count(*) FROM note").await.unwrap(),
            count("SELECT count(*) FROM idemkey_records").await.unwrap(),
        )
    }
}
