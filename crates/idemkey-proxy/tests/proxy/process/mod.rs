//! `idemkey proxy` against an upstream that is not Rust (a small non-idempotent Python API,
//! `upstream.py`), over real sockets: the seed's cases through the proxy, a storm
//! of 64, two proxies on PostgreSQL, the proxy killed mid-request, an upstream that dies
//! mid-response or cannot be reached, `idemkey check` against the proxy and the bare
//! upstream, and a power-loss campaign (the proxy's SQLite file on a power-loss filesystem,
//! cut after each SIGKILL). Races are forced: the upstream holds the first request until the test
//! releases it.
//!
//! The binary is the workspace's `idemkey` (`binary::idemkey`: `IDEMKEY_BIN`, or the one
//! `cargo test --workspace` builds beside this test). Cargo does not build it for this
//! package's tests alone: with a filter (`--test proxy`, `-p idemkey-proxy`) build it first,
//! `cargo build --workspace`, or the tests run the one built last.

mod clock_step;
mod forget_actor;
mod outage;
mod owner_grace;
mod powerloss;
mod replay_cache;
mod upstream;

use std::time::Duration;

use idemkey_test_support::db::pg;
use idemkey_test_support::process::binary;
use idemkey_test_support::process::proxy::Proxy;
use idemkey_test_support::process::redis::RedisServer;
use upstream::{Upstream, post, slug};

fn sqlite_url(dir: &tempfile::TempDir) -> String {
    format!("sqlite://{}", dir.path().join("proxy.db").display())
}

struct Fixture {
    upstream: Upstream,
    proxy: Proxy,
    dir: tempfile::TempDir,
}

impl Fixture {
    /// The proxy's SQLite file.
    fn db_path(&self) -> std::path::PathBuf {
        self.dir.path().join("proxy.db")
    }
}

fn start(extra: &[&str]) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start();
    let proxy = Proxy::start(binary::idemkey(), &upstream.url(), &sqlite_url(&dir), extra);
    Fixture {
        upstream,
        proxy,
        dir,
    }
}

/// The seed's cases, through the proxy: a retry replays byte for byte; another body with the
/// key is refused; actors are isolated; a rejected or failed request is not stored; a
/// forgotten record executes again.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [python3])]
async fn the_seed_cases_through_the_proxy() {
    let app = start(&[]);
    let items = app.proxy.url("/items");
    // 1. A retry replays the first answer, byte for byte, and the upstream ran once.
    let first = post(&items, "alice", Some("k1"), "a").await;
    assert_eq!(first.status(), 201);
    let first_body = first.bytes().await.unwrap();
    let retry = post(&items, "alice", Some("k1"), "a").await;
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(retry.headers()["location"], "/items/1");
    assert_eq!(retry.bytes().await.unwrap(), first_body);
    assert_eq!(app.upstream.created().await, 1);
    // 2. The key with another body: 422, nothing forwarded.
    let other = post(&items, "alice", Some("k1"), "b").await;
    assert_eq!(other.status(), 422);
    assert_eq!(slug(other).await, "key-reused");
    // 3. Another credential with the same key is another actor: its own execution.
    let bob = post(&items, "bob", Some("k1"), "a").await;
    assert_eq!(bob.status(), 201);
    assert!(bob.headers().get("idempotent-replayed").is_none());
    assert_eq!(app.upstream.created().await, 2);
    // 4. A request the upstream rejects (400) is not stored: the key carries the fix.
    let bad = reqwest::Client::new()
        .post(&items)
        .header("authorization", "Bearer alice")
        .header("idempotency-key", "k2")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    assert_eq!(
        post(&items, "alice", Some("k2"), "fixed").await.status(),
        201
    );
    // 5. A 5xx is not stored: the retry executes.
    let failed = reqwest::Client::new()
        .post(&items)
        .header("authorization", "Bearer alice")
        .header("idempotency-key", "k3")
        .header("x-fail", "1")
        .header("content-type", "application/json")
        .body("{\"title\":\"c\"}")
        .send()
        .await
        .unwrap();
    assert_eq!(failed.status(), 500);
    assert_eq!(post(&items, "alice", Some("k3"), "c").await.status(), 201);
    assert_eq!(app.upstream.created().await, 4);
    // Without a key: forwarded unrecorded (the key is optional by default).
    assert_eq!(post(&items, "alice", None, "d").await.status(), 201);
    assert_eq!(post(&items, "alice", None, "d").await.status(), 201);
    assert_eq!(app.upstream.created().await, 6);
    // A key without credentials: 401, not forwarded.
    let anonymous = reqwest::Client::new()
        .post(&items)
        .header("idempotency-key", "k4")
        .body("{\"title\":\"e\"}")
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
    assert_eq!(app.upstream.created().await, 6);
    // The upstream saw the client's address and a derived key for recorded requests.
    let stats = app.upstream.stats().await;
    assert_eq!(stats["forwarded_for"][0], "127.0.0.1");
    assert_eq!(stats["derived_keys"][0].as_str().unwrap().len(), 64);
    assert!(
        stats["derived_keys"][4].is_null(),
        "an unrecorded request has no derived key"
    );
    // 6. `idemkey forget` deletes the record (actor: the digest kept in the table, keyed so
    // that only the table tells alice's from bob's: hers was made first; operation: the
    // method and path): the key executes again.
    let db = app.db_path();
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    let actor: String = sqlx::query_scalar(
        "SELECT actor FROM idemkey_records WHERE idem_key = 'k1' ORDER BY rowid LIMIT 1",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    pool.close().await;
    let forgot = std::process::Command::new(binary::idemkey())
        .args([
            "forget",
            "--database-url",
            &sqlite_url(&app.dir),
            "--actor",
            &actor,
        ])
        .args(["--operation", "POST /items", "--key", "k1"])
        .output()
        .unwrap();
    assert!(forgot.status.success(), "{forgot:?}");
    let again = post(&items, "alice", Some("k1"), "a").await;
    assert!(again.headers().get("idempotent-replayed").is_none());
    assert_eq!(app.upstream.created().await, 7);
}

/// 64 concurrent duplicates while the first is held upstream: one execution; the others
/// are told it is in flight, and every retry after it replays.
async fn storm(upstream: &Upstream, proxies: &[&Proxy]) {
    let first_url = proxies[0].url("/items?hold=storm");
    let first = tokio::spawn(async move { post(&first_url, "alice", Some("storm"), "s").await });
    upstream.held(1).await;
    let duplicates = (0..63).map(|i| {
        let url = proxies[i % proxies.len()].url("/items?hold=storm");
        async move {
            post(&url, "alice", Some("storm"), "s")
                .await
                .status()
                .as_u16()
        }
    });
    let statuses = futures_util::future::join_all(duplicates).await;
    assert!(statuses.iter().all(|&s| s == 409), "{statuses:?}");
    upstream.release("storm").await;
    assert_eq!(first.await.unwrap().status(), 201);
    for proxy in proxies {
        let retry = post(&proxy.url("/items?hold=storm"), "alice", Some("storm"), "s").await;
        assert_eq!(retry.headers()["idempotent-replayed"], "true");
    }
    assert_eq!(upstream.created().await, 1);
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [python3])]
async fn a_storm_of_64_executes_once() {
    let app = start(&[]);
    storm(&app.upstream, &[&app.proxy]).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [python3, postgres])]
async fn two_proxies_on_postgres_execute_once() {
    let base = idemkey_test_support::runner::needs::postgres_url();
    let schema = pg::Schema::create(&base).await;
    let upstream = Upstream::start();
    let a = Proxy::start(binary::idemkey(), &upstream.url(), &schema.url(), &[]);
    let b = Proxy::start(binary::idemkey(), &upstream.url(), &schema.url(), &[]);
    storm(&upstream, &[&a, &b]).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [python3, redis_server])]
async fn two_proxies_on_redis_execute_once() {
    let redis = RedisServer::start(&[]);
    let upstream = Upstream::start();
    let a = Proxy::start(binary::idemkey(), &upstream.url(), &redis.url(), &[]);
    let b = Proxy::start(binary::idemkey(), &upstream.url(), &redis.url(), &[]);
    storm(&upstream, &[&a, &b]).await;
}

/// The proxy SIGKILLed while the upstream works: the upstream's item is created, its answer
/// lost with the proxy. The restarted proxy takes the claim over once its lease ends and
/// forwards again with the same derived key, which this upstream deduplicates on (and the
/// proxy is told so): one item, and the client learns its id.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [python3])]
async fn killed_mid_request_then_restarted_no_duplicate_no_lost_answer() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start();
    let lease = ["--lease", "1s", "--upstream-deduplicates"];
    let mut proxy = Proxy::start(
        binary::idemkey(),
        &upstream.url(),
        &sqlite_url(&dir),
        &lease,
    );
    let url = proxy.url("/items?dedup=1&hold=crash");
    let lost = tokio::spawn(async move {
        reqwest::Client::new()
            .post(url)
            .header("authorization", "Bearer alice")
            .header("idempotency-key", "crash")
            .header("content-type", "application/json")
            .body("{\"title\":\"c\"}")
            .send()
            .await
    });
    upstream.held(1).await;
    proxy.process.kill();
    assert!(lost.await.unwrap().is_err(), "the client lost its answer");
    upstream.release("crash").await;
    let addr = proxy.addr.to_string();
    let again = Proxy::start_at(
        binary::idemkey(),
        &addr,
        &upstream.url(),
        &sqlite_url(&dir),
        &lease,
    );
    let retry_url = again.url("/items?dedup=1&hold=crash");
    let mut answer = post(&retry_url, "alice", Some("crash"), "c").await;
    for _ in 0..100 {
        if answer.status() != 409 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        answer = post(&retry_url, "alice", Some("crash"), "c").await;
    }
    assert_eq!(answer.status(), 201);
    let item: serde_json::Value = answer.json().await.unwrap();
    assert_eq!(item["id"], "1");
    assert_eq!(upstream.created().await, 1, "no duplicate");
    let stats = upstream.stats().await;
    assert_eq!(
        stats["derived_keys"][0], stats["derived_keys"][1],
        "the same derived key"
    );
}

/// The upstream dies mid-response: the outcome is unknown, answered 502 and stored by
/// default, so a retry is told the same instead of executing again.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [python3])]
async fn an_upstream_dying_mid_response_is_an_unknown_outcome_never_a_duplicate() {
    let app = start(&[]);
    let url = app.proxy.url("/items?die=1");
    let first = post(&url, "alice", Some("die"), "d").await;
    assert_eq!(first.status(), 502);
    assert_eq!(slug(first).await, "upstream-outcome-unknown");
    let retry = post(&url, "alice", Some("die"), "d").await;
    assert_eq!(retry.status(), 502);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(app.upstream.created().await, 1);
}

/// With `unknown_outcome = "release"`, the retry forwards again (for upstreams that
/// deduplicate on the derived key).
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [python3])]
async fn unknown_outcomes_may_be_released_by_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("proxy.toml");
    std::fs::write(&config, "[upstream]\nunknown_outcome = \"release\"\n").unwrap();
    let upstream = Upstream::start();
    let config = config.to_str().unwrap();
    let proxy = Proxy::start(
        binary::idemkey(),
        &upstream.url(),
        &sqlite_url(&dir),
        &["--config", config],
    );
    let first = post(&proxy.url("/items?die=1&dedup=1"), "alice", Some("r"), "r").await;
    assert_eq!(first.status(), 502);
    let retry = post(&proxy.url("/items?die=1&dedup=1"), "alice", Some("r"), "r").await;
    assert_eq!(retry.status(), 502);
    assert!(retry.headers().get("idempotent-replayed").is_none());
    // Forwarded twice under one derived key, so the upstream created one item.
    assert_eq!(upstream.created().await, 1);
}

/// Nothing listens upstream: 502 `upstream-unreachable`, the claim given back, and the same
/// key executes once the upstream is there.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [python3])]
async fn an_unreachable_upstream_releases_the_claim() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let proxy = Proxy::start(
        binary::idemkey(),
        &format!("http://127.0.0.1:{port}"),
        &sqlite_url(&dir),
        &[],
    );
    let refused = post(&proxy.url("/items"), "alice", Some("u"), "u").await;
    assert_eq!(refused.status(), 502);
    assert_eq!(slug(refused).await, "upstream-unreachable");
    let upstream = Upstream::start_on(port);
    assert_eq!(
        post(&proxy.url("/items"), "alice", Some("u"), "u")
            .await
            .status(),
        201
    );
    assert_eq!(upstream.created().await, 1);
}

/// Configured routes: a key required on one path, other paths and methods unrecorded.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [python3])]
async fn routes_from_the_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("proxy.toml");
    let text = "[[route]]\nmethods = [\"POST\"]\npath = \"/items\"\nrequire_key = true\nmismatch_status = 409\n";
    std::fs::write(&config, text).unwrap();
    let upstream = Upstream::start();
    let config = config.to_str().unwrap();
    let proxy = Proxy::start(
        binary::idemkey(),
        &upstream.url(),
        &sqlite_url(&dir),
        &["--config", config],
    );
    let missing = post(&proxy.url("/items"), "alice", None, "a").await;
    assert_eq!(missing.status(), 400);
    assert_eq!(slug(missing).await, "key-missing");
    assert_eq!(
        post(&proxy.url("/items"), "alice", Some("k"), "a")
            .await
            .status(),
        201
    );
    assert_eq!(
        post(&proxy.url("/items"), "alice", Some("k"), "b")
            .await
            .status(),
        409
    );
    // `/items/` is not the route: forwarded unrecorded (the upstream answers 404).
    assert_eq!(
        post(&proxy.url("/items/"), "alice", Some("k"), "a")
            .await
            .status(),
        404
    );
    assert_eq!(upstream.created().await, 1);
    let health = reqwest::get(format!("http://{}/healthz", proxy.admin))
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    let metrics = reqwest::get(format!("http://{}/metrics", proxy.admin))
        .await
        .unwrap();
    assert!(
        metrics
            .text()
            .await
            .unwrap()
            .contains("idemkey_requests_total")
    );
}

/// `idemkey check` passes against the proxy and fails against the bare upstream.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [python3])]
async fn idemkey_check_passes_through_the_proxy_and_fails_without_it() {
    let app = start(&[]);
    let check = |base: String| {
        std::process::Command::new(binary::idemkey())
            .args(["check", &format!("{base}/items")])
            .args([
                "--body",
                "{\"title\":\"one\"}",
                "--alt-body",
                "{\"title\":\"two\"}",
            ])
            .args([
                "-H",
                "Authorization: Bearer alice",
                "--actor2-header",
                "Authorization: Bearer bob",
            ])
            .args(["--list", &format!("{base}/items"), "--invalid-body", "{}"])
            .output()
            .unwrap()
    };
    let through = tokio::task::spawn_blocking({
        let url = app.proxy.url("");
        move || check(url)
    });
    let through = through.await.unwrap();
    assert_eq!(
        through.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&through.stdout)
    );
    let bare = tokio::task::spawn_blocking({
        let url = app.upstream.url();
        move || check(url)
    });
    let bare = bare.await.unwrap();
    assert_eq!(
        bare.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&bare.stdout)
    );
}

/// SIGTERM while the upstream works on a claimed request: the proxy stops accepting, lets
/// the request finish and store its answer, then exits 0; a retry through a new proxy on
/// the same records replays it.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [python3])]
async fn sigterm_lets_claimed_requests_finish() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start();
    let mut proxy = Proxy::start(binary::idemkey(), &upstream.url(), &sqlite_url(&dir), &[]);
    let url = proxy.url("/items?hold=term");
    let pending = tokio::spawn(async move { post(&url, "alice", Some("term"), "t").await });
    upstream.held(1).await;
    let pid = proxy.process.child.id().to_string();
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    // Shutdown began (the listener is closed) while the upstream still holds the request.
    idemkey_test_support::process::refused(proxy.addr).await;
    upstream.release("term").await;
    assert_eq!(pending.await.unwrap().status(), 201);
    let status = tokio::task::block_in_place(|| proxy.process.child.wait().unwrap());
    assert!(status.success(), "{status}");
    let again = Proxy::start(binary::idemkey(), &upstream.url(), &sqlite_url(&dir), &[]);
    let retry = post(&again.url("/items?hold=term"), "alice", Some("term"), "t").await;
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(upstream.created().await, 1);
}

/// A client speaking HTTP/2 (cleartext, prior knowledge) gets the same guarantees.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [python3])]
async fn http2_clients_are_served_too() {
    let app = start(&[]);
    let client = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let send = || {
        client
            .post(app.proxy.url("/items"))
            .header("authorization", "Bearer alice")
            .header("idempotency-key", "h2")
            .header("content-type", "application/json")
            .body("{\"title\":\"h2\"}")
            .send()
    };
    let first = send().await.unwrap();
    assert_eq!(first.version(), http::Version::HTTP_2);
    assert_eq!(first.status(), 201);
    let retry = send().await.unwrap();
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(app.upstream.created().await, 1);
}

/// An answer over the storage limit (1 MiB) streams whole to the first caller and is stored
/// without its body: a retry gets the status and headers, `Idempotent-Body-Omitted: true`,
/// and never a second execution (behaviour §6).
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [python3])]
async fn a_large_answer_streams_and_is_stored_without_its_body() {
    let app = start(&[]);
    let url = app.proxy.url("/items?big=3000000");
    let first = post(&url, "alice", Some("big"), "b").await;
    assert_eq!(first.status(), 201);
    assert!(first.bytes().await.unwrap().len() > 3_000_000);
    let retry = post(&url, "alice", Some("big"), "b").await;
    assert_eq!(retry.status(), 201);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(retry.headers()["idempotent-body-omitted"], "true");
    assert_eq!(retry.headers()["location"], "/items/1");
    assert!(retry.bytes().await.unwrap().is_empty());
    assert_eq!(app.upstream.created().await, 1);
}
