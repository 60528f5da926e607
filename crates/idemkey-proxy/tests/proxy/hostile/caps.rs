//! Per-actor caps against one actor filling the store: on every store the proxy takes, an
//! actor at its record or byte cap is answered 429 `actor-cap-reached` with `Retry-After`,
//! nothing more is stored for it and nothing reaches the upstream, while a retry of its stored
//! key still replays and other actors (a keyed credential, the shared anonymous actor) are
//! served. The stores that need a server fail, saying which, where it is missing.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::body::Body;
use axum::routing::any;
use http::{HeaderMap, Request, Response, StatusCode};
use idemkey_core::{ActorCaps, MemoryStore, Store};
use idemkey_proxy::{Error, Proxy, ProxyConfig, Upstream};
use idemkey_server::Database;
use idemkey_test_support::db::{Backend, Db};
use tower::ServiceExt;

use crate::in_process::ROUTE;

/// The size of each answer the upstream stores, well over the headers stored with it.
const ANSWER: usize = 1000;

/// An upstream that answers 201 with [`ANSWER`] bytes, counting the requests it received.
async fn counting_upstream() -> (Upstream, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let app = Router::new().fallback(any(move || {
        counted.fetch_add(1, Ordering::SeqCst);
        async { (StatusCode::CREATED, "x".repeat(ANSWER)) }
    }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (Upstream::parse(&format!("http://{addr}")).unwrap(), calls)
}

/// A keyed POST as `credential` (`None`: anonymous).
async fn post<S: Store>(proxy: &Proxy<S>, credential: Option<&str>, key: &str) -> Response<Body> {
    let mut request = Request::post("/v1/items")
        .header("host", "proxy")
        .header("idempotency-key", key);
    if let Some(credential) = credential {
        request = request.header("authorization", format!("Bearer {credential}"));
    }
    let request = request.body(Body::from("{}")).unwrap();
    proxy.service().oneshot(request).await.unwrap()
}

/// A 429 `actor-cap-reached` problem naming `cap`, with a `Retry-After` of at least 1 s.
async fn assert_capped(response: Response<Body>, cap: &str) {
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let headers: HeaderMap = response.headers().clone();
    assert_eq!(headers["content-type"], "application/problem+json");
    let retry_after: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(retry_after >= 1);
    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    let problem = String::from_utf8_lossy(&body);
    assert!(problem.contains("actor-cap-reached"), "{problem}");
    assert!(problem.contains(cap), "{problem}");
}

/// The proxy on `store`, covering POSTs under `/v1/`, anonymous requests allowed, with the
/// caps of `file` (TOML, at the top of the configuration).
fn proxy<S: Store>(upstream: Upstream, store: S, file: &str) -> Proxy<S> {
    let config = format!("{file}\n{ROUTE}\n[actor]\nanonymous = true");
    Proxy::builder(upstream, store)
        .config(config.parse::<ProxyConfig>().unwrap())
        .build()
        .unwrap()
}

/// Alice and the anonymous actor at a cap of two records each, Bob beside them. `records`
/// counts the store's records.
async fn records_cap<S: Store>(store: S, records: impl AsyncFn() -> usize) {
    let (upstream, calls) = counting_upstream().await;
    let proxy = proxy(upstream, store, "max_records_per_actor = 2");
    for key in ["k1", "k2"] {
        assert_eq!(post(&proxy, Some("alice"), key).await.status(), 201);
        assert_eq!(post(&proxy, None, key).await.status(), 201);
    }
    assert_eq!((calls.load(Ordering::SeqCst), records().await), (4, 4));
    // At the cap: a third key is refused, twice, reaching nothing and storing nothing.
    for _ in 0..2 {
        assert_capped(post(&proxy, Some("alice"), "k3").await, "live records").await;
        assert_capped(post(&proxy, None, "k3").await, "live records").await;
    }
    assert_eq!((calls.load(Ordering::SeqCst), records().await), (4, 4));
    // A retry of a stored key is answered from its record, cap or not.
    let retry = post(&proxy, Some("alice"), "k1").await;
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    // Bob has caps of his own.
    for key in ["k1", "k2"] {
        assert_eq!(post(&proxy, Some("bob"), key).await.status(), 201);
    }
    assert_capped(post(&proxy, Some("bob"), "k3").await, "live records").await;
    assert_eq!((calls.load(Ordering::SeqCst), records().await), (6, 6));
}

/// Alice at a cap of 1500 stored bytes: her second answer crosses it (each is stored whole),
/// then she is refused while Bob is served.
async fn bytes_cap<S: Store>(store: S, records: impl AsyncFn() -> usize) {
    let (upstream, calls) = counting_upstream().await;
    let proxy = proxy(upstream, store, "max_bytes_per_actor = \"1500\"");
    assert_eq!(post(&proxy, Some("alice"), "k1").await.status(), 201);
    assert_eq!(post(&proxy, Some("alice"), "k2").await.status(), 201);
    assert_capped(post(&proxy, Some("alice"), "k3").await, "stored bytes").await;
    assert_capped(post(&proxy, Some("alice"), "k4").await, "stored bytes").await;
    let retry = post(&proxy, Some("alice"), "k2").await;
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(post(&proxy, Some("bob"), "k1").await.status(), 201);
    assert_eq!(post(&proxy, None, "k1").await.status(), 201);
    assert_eq!((calls.load(Ordering::SeqCst), records().await), (4, 4));
}

/// A store on `backend`, and a count of its records.
async fn sql(backend: Backend) -> (Database, Db, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::create(backend, dir.path()).await;
    let store = Database::open(&db.url(), true).await.unwrap();
    (store, db, dir)
}

async fn on_sql(backend: Backend) {
    let (store, db, _dir) = sql(backend).await;
    let count = async || usize::try_from(db.count("idemkey_records").await).unwrap();
    records_cap(store, count).await;
    let (store, db, _dir) = sql(backend).await;
    let count = async || usize::try_from(db.count("idemkey_records").await).unwrap();
    bytes_cap(store, count).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_actor_at_its_caps_is_refused_on_sqlite() {
    on_sql(Backend::Sqlite).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn an_actor_at_its_caps_is_refused_on_postgres() {
    on_sql(Backend::Postgres).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [mysql])]
async fn an_actor_at_its_caps_is_refused_on_mysql() {
    on_sql(Backend::Mysql).await;
}

/// Records in Redis under a prefix of the test's own, and a count of them (`{prefix}:{…}`,
/// not the actors' ledgers beside them).
async fn redis() -> (idemkey_server::RedisRecords, impl AsyncFn() -> usize) {
    let url = idemkey_test_support::runner::needs::redis_url();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let prefix = format!("idemkey-caps-{}-{nanos}", std::process::id());
    let store = idemkey_redis::RedisStore::connect(&url)
        .await
        .unwrap()
        .with_prefix(&prefix)
        .unwrap();
    let count = async move || {
        let output = std::process::Command::new("redis-cli")
            .args(["-u", &url, "--scan", "--pattern", &format!("{prefix}:{{*")])
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        String::from_utf8_lossy(&output.stdout).lines().count()
    };
    (store, count)
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis])]
async fn an_actor_at_its_caps_is_refused_on_redis() {
    let (store, count) = redis().await;
    records_cap(store, count).await;
    let (store, count) = redis().await;
    bytes_cap(store, count).await;
}

#[idemkey_test_support::test]
async fn the_builders_caps_win_over_the_files() {
    let (store, _db, _dir) = sql(Backend::Sqlite).await;
    let (upstream, calls) = counting_upstream().await;
    let config = format!("max_records_per_actor = 1\n{ROUTE}");
    let proxy = Proxy::builder(upstream, store)
        .config(config.parse::<ProxyConfig>().unwrap())
        .actor_caps(ActorCaps::new().max_records(2))
        .build()
        .unwrap();
    assert_eq!(post(&proxy, Some("alice"), "k1").await.status(), 201);
    assert_eq!(post(&proxy, Some("alice"), "k2").await.status(), 201);
    assert_capped(post(&proxy, Some("alice"), "k3").await, "live records").await;
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[idemkey_test_support::test]
async fn a_store_that_cannot_keep_caps_is_refused_at_build() {
    let (upstream, _) = counting_upstream().await;
    let config = format!("max_bytes_per_actor = \"1MiB\"\n{ROUTE}");
    let built = Proxy::builder(upstream, MemoryStore::new())
        .config(config.parse::<ProxyConfig>().unwrap())
        .build();
    assert!(matches!(built, Err(Error::CapsUnsupported)), "{built:?}");
}
