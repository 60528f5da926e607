//! What every application of the bed shares: a SQLite store that counts its claims, a server
//! on 127.0.0.1:0, the idempotency layer of either mode, and a client.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::MethodRouter;
use http::StatusCode;
use idemkey_sqlx::SqliteStore;
use idemkey_sqlx::failpoints::Point;
use idemkey_tower::atomic::AtomicIdempotencyLayer;
use idemkey_tower::{Actor, Config, IdempotencyLayer};
use sqlx::Sqlite;

/// The two modes an application can protect its routes in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Lease,
    Atomic,
}

impl Mode {
    pub const ALL: [Self; 2] = [Self::Lease, Self::Atomic];
}

/// A SQLite file with the store's tables and a `notes` table, and a count of the claims the
/// store was asked for (in either mode, every claim passes `Point::BeforeClaim`).
#[derive(Clone)]
pub struct Db {
    pub store: SqliteStore,
    claims: Arc<AtomicUsize>,
    _dir: Arc<tempfile::TempDir>,
}

impl Db {
    pub async fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("app.db").display());
        let claims = Arc::new(AtomicUsize::new(0));
        let counted = claims.clone();
        let store = SqliteStore::connect(&url)
            .await
            .unwrap()
            .with_failpoints(Arc::new(move |point| {
                if point == Point::BeforeClaim {
                    counted.fetch_add(1, Ordering::SeqCst);
                }
                Box::pin(async { Ok(()) })
            }));
        sqlx::query(
            "CREATE TABLE notes (id INTEGER PRIMARY KEY, org TEXT NOT NULL, \
             actor TEXT NOT NULL, title TEXT NOT NULL, draft INTEGER NOT NULL DEFAULT 0)",
        )
        .execute(store.pool())
        .await
        .unwrap();
        Self {
            store,
            claims,
            _dir: Arc::new(dir),
        }
    }

    /// How many claims the store was asked for.
    pub fn claims(&self) -> usize {
        self.claims.load(Ordering::SeqCst)
    }

    pub async fn count(&self, sql: &'static str) -> i64 {
        sqlx::query_scalar(sql)
            .fetch_one(self.store.pool())
            .await
            .unwrap()
    }

    pub async fn records(&self) -> i64 {
        self.count("SELECT count(*) FROM idemkey_records").await
    }

    pub async fn notes(&self) -> i64 {
        self.count("SELECT count(*) FROM notes").await
    }

    /// `router` with the idempotency layer of `mode` on every route (`Router::layer`).
    pub fn protect<S: Clone + Send + Sync + 'static>(
        &self,
        mode: Mode,
        config: Config,
        router: Router<S>,
    ) -> Router<S> {
        match mode {
            Mode::Lease => router.layer(IdempotencyLayer::with_config(self.store.clone(), config)),
            Mode::Atomic => router.layer(AtomicIdempotencyLayer::<Sqlite>::with_config(
                self.store.clone(),
                config,
            )),
        }
    }

    /// One route with the idempotency layer of `mode` (`MethodRouter::layer`).
    pub fn protect_route<S: Clone + Send + Sync + 'static>(
        &self,
        mode: Mode,
        config: Config,
        route: MethodRouter<S>,
    ) -> MethodRouter<S> {
        match mode {
            Mode::Lease => route.layer(IdempotencyLayer::with_config(self.store.clone(), config)),
            Mode::Atomic => route.layer(AtomicIdempotencyLayer::<Sqlite>::with_config(
                self.store.clone(),
                config,
            )),
        }
    }
}

/// Authentication as applications write it with `from_fn`: `Authorization: Bearer ACTOR`
/// names the actor; no credentials, 401 before the idempotency layer.
pub async fn auth(mut request: Request, next: Next) -> Response {
    let actor = request
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(Actor::new);
    match actor {
        Some(actor) => {
            request.extensions_mut().insert(actor);
            next.run(request).await
        }
        None => (StatusCode::UNAUTHORIZED, "who are you?").into_response(),
    }
}

/// Serves `app` behind [`auth`] on 127.0.0.1:0; returns a client for it.
pub async fn serve_authenticated(app: Router) -> Client {
    Client::new(serve(app.layer(axum::middleware::from_fn(auth))).await)
}

/// Serves `app` on 127.0.0.1:0; returns its base URL.
pub async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    base
}

/// A client for one application, as actor `alice` unless told otherwise.
pub struct Client {
    pub base: String,
    http: reqwest::Client,
}

impl Client {
    pub fn new(base: String) -> Self {
        Self {
            base,
            http: reqwest::Client::new(),
        }
    }

    pub fn request(&self, method: http::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.base))
            .header("authorization", "Bearer alice")
    }

    /// A JSON POST with `key`.
    pub fn post(&self, path: &str, key: &str, body: &str) -> reqwest::RequestBuilder {
        self.request(http::Method::POST, path)
            .header("idempotency-key", key)
            .header("content-type", "application/json")
            .body(body.to_owned())
    }
}

/// A response read whole.
pub struct Reply {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: bytes::Bytes,
}

impl Reply {
    pub fn replayed(&self) -> bool {
        self.headers
            .get("idempotent-replayed")
            .is_some_and(|v| v == "true")
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap()
    }

    /// The problem's slug, the last segment of its `type`.
    pub fn slug(&self) -> String {
        let json = self.json();
        let type_uri = json["type"].as_str().unwrap_or_default();
        type_uri
            .rsplit(['/', '#'])
            .next()
            .unwrap_or_default()
            .to_owned()
    }
}

pub async fn send(request: reqwest::RequestBuilder) -> Reply {
    let response = request.send().await.unwrap();
    Reply {
        status: response.status().as_u16(),
        headers: response.headers().clone(),
        body: response.bytes().await.unwrap(),
    }
}
