//! Owners' heartbeats through the proxy, with real processes, on the two stores the
//! service's test (`tests/faults/owner_grace.rs`, PostgreSQL) leaves out: two proxies on one
//! SQLite file, and two on one Redis. Each proxy runs with a lease far longer than the test
//! (300 s) and a short owner grace (1 s). Proxy A forwards a keyed create, which the test's
//! upstream holds; A is then killed (SIGKILL) or frozen (SIGSTOP), and a retry through B is
//! forwarded again once A's heartbeat has lapsed, long before the lease would have run out.
//! The polls give up after 60 s, a fifth of the lease: a takeover within them can only have
//! come from the heartbeat. A frozen A's late completion is fenced off: B's answer is the
//! one stored and replayed.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use idemkey_test_support::proxy::Proxy;
use idemkey_test_support::wait_until;
use serde_json::Value;
use tokio::sync::Semaphore;

use crate::upstream::slug;
use crate::{IDEMKEY, sqlite_url};

/// A lease no test outlives, and the grace that lets others take a lapsed owner's claims.
const ARGS: &[&str] = &["--lease", "300s", "--owner-grace", "1s"];

/// How long a takeover may take before the test fails: a fifth of the lease.
const BOUND: Duration = Duration::from_secs(60);

/// The test's upstream: `POST /items` creates an item (`{"id": N}`, 201) on every call, and
/// holds the first call it receives, before creating, until the test releases it.
#[derive(Clone)]
struct Upstream {
    seen: Arc<Mutex<Seen>>,
    /// No permits until [`Upstream::release`]: the first call waits for one.
    gate: Arc<Semaphore>,
}

#[derive(Default)]
struct Seen {
    /// The `Idempotency-Derived-Key` of every call received, held or not.
    derived_keys: Vec<Option<String>>,
    /// How many items were created: calls that ran to the end.
    created: u64,
}

impl Upstream {
    async fn start() -> (Self, String) {
        let upstream = Self {
            seen: Arc::default(),
            gate: Arc::new(Semaphore::new(0)),
        };
        let app = axum::Router::new()
            .route("/items", axum::routing::post(create))
            .with_state(upstream.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (upstream, format!("http://{addr}"))
    }

    /// How many calls reached the upstream.
    fn calls(&self) -> usize {
        self.seen.lock().unwrap().derived_keys.len()
    }

    fn created(&self) -> u64 {
        self.seen.lock().unwrap().created
    }

    fn derived_keys(&self) -> Vec<Option<String>> {
        self.seen.lock().unwrap().derived_keys.clone()
    }

    /// Waits until the first call is held: its proxy holds the claim.
    async fn held(&self) {
        wait_until("the first call to reach the upstream", 6000, || async {
            self.calls() >= 1
        })
        .await;
    }

    /// Lets the held call go on.
    fn release(&self) {
        self.gate.add_permits(1);
    }
}

async fn create(State(upstream): State<Upstream>, headers: HeaderMap) -> (StatusCode, String) {
    let derived = headers
        .get("idempotency-derived-key")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let first = {
        let mut seen = upstream.seen.lock().unwrap();
        seen.derived_keys.push(derived);
        seen.derived_keys.len() == 1
    };
    if first {
        let _permit = upstream.gate.acquire().await.unwrap();
    }
    let mut seen = upstream.seen.lock().unwrap();
    seen.created += 1;
    (StatusCode::CREATED, format!("{{\"id\":{}}}", seen.created))
}

/// The keyed create every request of a test sends, through `proxy`; `Err` if the proxy died.
/// The future owns what it sends, so it may be spawned. One client per test: making one
/// loads the system's certificates, which would slow each poll down.
fn send(
    client: &reqwest::Client,
    proxy: &Proxy,
    key: &str,
) -> impl Future<Output = reqwest::Result<reqwest::Response>> + Send + 'static {
    client
        .post(proxy.url("/items"))
        .header("authorization", "Bearer alice")
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body("{\"title\":\"held\"}")
        .send()
}

/// A key no other run uses: the Redis server is shared.
fn fresh_key() -> String {
    format!("owner-grace-{}", uuid::Uuid::new_v4())
}

/// Retries through `b` until the retry is forwarded and answered (201, not a replay); every
/// earlier answer must be `request-in-flight`. Returns the answer's body.
///
/// `frozen`: on SQLite a proxy frozen inside one of its short writes (a heartbeat every
/// quarter grace) keeps the file's writer, and `b`'s takeover then ends in 503
/// `store-unavailable` (behaviour §8a); the frozen proxy is let run a moment and frozen
/// again, so that the proof is the heartbeat's, not that of an instant chosen well.
async fn taken_over(
    client: &reqwest::Client,
    b: &Proxy,
    key: &str,
    frozen: Option<&Proxy>,
) -> Value {
    let start = Instant::now();
    while start.elapsed() < BOUND {
        let answer = send(client, b, key).await.unwrap();
        if answer.status() == 201 {
            let replayed = answer.headers().get("idempotent-replayed");
            assert!(replayed.is_none(), "executed, not replayed");
            eprintln!("forwarded again {:?} after A stopped", start.elapsed());
            return answer.json().await.unwrap();
        }
        let status = answer.status();
        let problem = slug(answer).await;
        match (status.as_u16(), frozen) {
            (409, _) => assert_eq!(problem, "request-in-flight"),
            (503, Some(a)) if problem == "store-unavailable" => {
                eprintln!("A was frozen holding the SQLite writer: thawed a moment");
                a.resume();
                tokio::time::sleep(Duration::from_millis(50)).await;
                a.pause();
            }
            _ => panic!("in flight until the takeover, not {status} {problem}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the retry was never forwarded within a fifth of the lease");
}

/// Every retry, through each of `proxies`, replays `stored` without reaching the upstream.
async fn replays(
    (client, upstream): (&reqwest::Client, &Upstream),
    proxies: &[&Proxy],
    key: &str,
    stored: &Value,
) {
    let calls = upstream.calls();
    for proxy in proxies {
        let retry = send(client, proxy, key).await.unwrap();
        assert_eq!(retry.status(), 201);
        assert_eq!(retry.headers()["idempotent-replayed"], "true");
        let body: Value = retry.json().await.unwrap();
        assert_eq!(&body, stored, "the stored answer is the retry's");
    }
    assert_eq!(upstream.calls(), calls, "replays reach no upstream");
}

/// A counter of the proxy's `/metrics`, 0 when absent.
async fn metric(client: &reqwest::Client, proxy: &Proxy, series: &str) -> u64 {
    let url = format!("http://{}/metrics", proxy.admin);
    let text = client.get(url).send().await.unwrap().text().await.unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix(series))
        .and_then(|rest| rest.trim().parse().ok())
        .unwrap_or(0)
}

/// A is killed while the upstream holds its call; the retry through B is forwarded once A's
/// heartbeat has lapsed, under the same derived key, and stored.
async fn killed_owner(database_url: &str) {
    let (upstream, upstream_url) = Upstream::start().await;
    let mut a = Proxy::start(IDEMKEY, &upstream_url, database_url, ARGS);
    let b = Proxy::start(IDEMKEY, &upstream_url, database_url, ARGS);
    let (client, key) = (reqwest::Client::new(), fresh_key());
    let first = tokio::spawn(send(&client, &a, &key));
    upstream.held().await;
    a.process.kill();
    assert!(first.await.unwrap().is_err(), "A died before answering");
    let answer = taken_over(&client, &b, &key, None).await;
    assert_eq!(answer["id"], 1, "B's forward created the one item");
    replays((&client, &upstream), &[&b], &key, &answer).await;
    assert_eq!(upstream.calls(), 2, "A's call, then B's once");
    assert_eq!(upstream.created(), 1, "A's call never went on");
    let keys = upstream.derived_keys();
    assert!(keys[0].is_some(), "a recorded call carries a derived key");
    assert_eq!(keys[0], keys[1], "the same derived key after the takeover");
}

/// A is frozen while the upstream holds its call; B forwards the retry once A's heartbeat has
/// lapsed and stores its answer. Woken up, A gets the upstream's answer to its own call,
/// which the proxy passes to A's client, but its completion is fenced off (`lease_lost`):
/// every retry, through A or B, replays B's answer.
async fn frozen_owner(database_url: &str) {
    let (upstream, upstream_url) = Upstream::start().await;
    let a = Proxy::start(IDEMKEY, &upstream_url, database_url, ARGS);
    let b = Proxy::start(IDEMKEY, &upstream_url, database_url, ARGS);
    let (client, key) = (reqwest::Client::new(), fresh_key());
    let first = tokio::spawn(send(&client, &a, &key));
    upstream.held().await;
    a.pause();
    let stored = taken_over(&client, &b, &key, Some(&a)).await;
    assert_eq!(stored["id"], 1, "B's forward created the first item");
    a.resume();
    upstream.release();
    let late = first.await.unwrap().unwrap();
    let lost = "idemkey_requests_total{outcome=\"lease_lost\"}";
    assert_eq!(
        metric(&client, &a, lost).await,
        1,
        "A's late completion was fenced off"
    );
    assert_eq!(late.status(), 201);
    assert!(late.headers().get("idempotent-replayed").is_none());
    let late: Value = late.json().await.unwrap();
    assert_eq!(late["id"], 2, "A's own call went on upstream, unstored");
    replays((&client, &upstream), &[&a, &b], &key, &stored).await;
    assert_eq!(upstream.calls(), 2, "A's call and B's, each once");
    let keys = upstream.derived_keys();
    assert_eq!(keys[0], keys[1], "the same derived key after the takeover");
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_killed_proxys_request_is_forwarded_again_after_the_grace() {
    let dir = tempfile::tempdir().unwrap();
    killed_owner(&sqlite_url(&dir)).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis])]
async fn redis_a_killed_proxys_request_is_forwarded_again_after_the_grace() {
    killed_owner(&idemkey_test_support::needs::redis_url()).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_frozen_proxy_loses_its_claim_and_its_late_completion() {
    let dir = tempfile::tempdir().unwrap();
    frozen_owner(&sqlite_url(&dir)).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis])]
async fn redis_a_frozen_proxy_loses_its_claim_and_its_late_completion() {
    frozen_owner(&idemkey_test_support::needs::redis_url()).await;
}
