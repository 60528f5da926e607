//! Owners' heartbeats through the proxy, with real processes, on the two stores the
//! service's test (`idemkey-cli/tests/faults/owner_grace.rs`, PostgreSQL) leaves out: two proxies on one
//! SQLite file, and two on one Redis. Each proxy runs with a lease far longer than the test
//! (300 s) and a short owner grace (1 s). Proxy A forwards a keyed create, which the test's
//! upstream holds; A is then killed (SIGKILL) or frozen (SIGSTOP), and a retry through B takes
//! A's claim over once A's heartbeat has lapsed, long before the lease would have run out.
//! The polls give up after 60 s, a fifth of the lease: a takeover within them can only have
//! come from the heartbeat. A frozen A's late completion is fenced off: B's answer is the
//! one stored and replayed.
//!
//! What the takeover does depends on what the proxies are told of the upstream. By default
//! it may not deduplicate, and A's forward may have reached it (a frozen A's is still
//! running): B stores and answers 500 `previous-attempt-unknown`, and the upstream sees the
//! request once. Told that it deduplicates (`--upstream-deduplicates`), B forwards again
//! under the same derived key. The test's upstream never deduplicates, so that the calls it
//! counts are the forwards.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use idemkey_test_support::process::binary;
use idemkey_test_support::process::proxy::Proxy;
use idemkey_test_support::wait_until;
use serde_json::Value;
use tokio::sync::Semaphore;

use super::sqlite_url;
use super::upstream::slug;

/// A lease no test outlives, and the grace that lets others take a lapsed owner's claims.
pub(crate) const ARGS: [&str; 4] = ["--lease", "300s", "--owner-grace", "1s"];

/// What the proxies are told of the upstream.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Told {
    /// Nothing: it may not deduplicate, so a takeover never forwards again.
    Nothing,
    /// `--upstream-deduplicates`: a takeover forwards again, under the same derived key.
    Deduplicates,
}

impl Told {
    /// Starts a proxy told this.
    fn proxy(self, upstream: &str, database_url: &str) -> Proxy {
        let mut args = ARGS.to_vec();
        if self == Self::Deduplicates {
            args.push("--upstream-deduplicates");
        }
        Proxy::start(binary::idemkey(), upstream, database_url, &args)
    }
}

/// How long a takeover may take before the test fails: a fifth of the lease.
const BOUND: Duration = Duration::from_secs(60);

/// The test's upstream: `POST /items` creates an item (`{"id": N}`, 201) on every call, and
/// holds the first call it receives, before creating, until the test releases it.
#[derive(Clone)]
pub(crate) struct Upstream {
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
    pub(crate) async fn start() -> (Self, String) {
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
    pub(crate) fn calls(&self) -> usize {
        self.seen.lock().unwrap().derived_keys.len()
    }

    fn created(&self) -> u64 {
        self.seen.lock().unwrap().created
    }

    fn derived_keys(&self) -> Vec<Option<String>> {
        self.seen.lock().unwrap().derived_keys.clone()
    }

    /// Waits until the first call is held: its proxy holds the claim.
    pub(crate) async fn held(&self) {
        wait_until("the first call to reach the upstream", 6000, || async {
            self.calls() >= 1
        })
        .await;
    }

    /// Lets the held call go on.
    pub(crate) fn release(&self) {
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
pub(crate) fn send(
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
pub(crate) fn fresh_key() -> String {
    format!("owner-grace-{}", uuid::Uuid::new_v4())
}

/// Retries through `b` until the retry takes the claim over, and returns its answer's status
/// and body: the upstream's 201 (not a replay) if `told` that it deduplicates, else the
/// stored 500 `previous-attempt-unknown`. Every earlier answer must be `request-in-flight`.
///
/// `frozen`: on SQLite a proxy frozen inside one of its short writes (a heartbeat every
/// quarter grace) keeps the file's writer, and `b`'s takeover then ends in 503
/// `store-unavailable` (behaviour §8a); the frozen proxy is let run a moment and frozen
/// again, so that the proof is the heartbeat's, not that of an instant chosen well.
pub(crate) async fn taken_over(
    (client, told): (&reqwest::Client, Told),
    b: &Proxy,
    key: &str,
    frozen: Option<&Proxy>,
) -> (u16, Value) {
    let start = Instant::now();
    while start.elapsed() < BOUND {
        let answer = send(client, b, key).await.unwrap();
        if answer.status() == 201 {
            assert!(told == Told::Deduplicates, "forwarded twice, not told to");
            let replayed = answer.headers().get("idempotent-replayed");
            assert!(replayed.is_none(), "executed, not replayed");
            eprintln!("forwarded again {:?} after A stopped", start.elapsed());
            return (201, answer.json().await.unwrap());
        }
        if answer.status() == 500 && told == Told::Nothing {
            eprintln!("taken over {:?} after A stopped", start.elapsed());
            let body: Value = answer.json().await.unwrap();
            assert!(
                body["type"]
                    .as_str()
                    .unwrap()
                    .ends_with("previous-attempt-unknown")
            );
            return (500, body);
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
pub(crate) async fn replays(
    (client, upstream): (&reqwest::Client, &Upstream),
    proxies: &[&Proxy],
    key: &str,
    stored: &(u16, Value),
) {
    let calls = upstream.calls();
    for proxy in proxies {
        let retry = send(client, proxy, key).await.unwrap();
        assert_eq!(retry.status(), stored.0);
        assert_eq!(retry.headers()["idempotent-replayed"], "true");
        let body: Value = retry.json().await.unwrap();
        assert_eq!(body, stored.1, "the stored answer is the retry's");
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

/// A is killed while the upstream holds its call; the retry through B takes the claim over
/// once A's heartbeat has lapsed. Told that the upstream deduplicates, B forwards it again
/// under the same derived key and stores the answer; otherwise it stores
/// `previous-attempt-unknown` and the upstream sees one call.
async fn killed_owner(database_url: &str, told: Told) {
    let (upstream, upstream_url) = Upstream::start().await;
    let mut a = told.proxy(&upstream_url, database_url);
    let b = told.proxy(&upstream_url, database_url);
    let (client, key) = (reqwest::Client::new(), fresh_key());
    let first = tokio::spawn(send(&client, &a, &key));
    upstream.held().await;
    a.process.kill();
    assert!(first.await.unwrap().is_err(), "A died before answering");
    let answer = taken_over((&client, told), &b, &key, None).await;
    replays((&client, &upstream), &[&b], &key, &answer).await;
    if told == Told::Nothing {
        assert_eq!(upstream.calls(), 1, "A's call only");
        assert_eq!(upstream.created(), 0, "A's call never went on");
        return;
    }
    assert_eq!(answer.1["id"], 1, "B's forward created the one item");
    assert_eq!(upstream.calls(), 2, "A's call, then B's once");
    assert_eq!(upstream.created(), 1, "A's call never went on");
    let keys = upstream.derived_keys();
    assert!(keys[0].is_some(), "a recorded call carries a derived key");
    assert_eq!(keys[0], keys[1], "the same derived key after the takeover");
}

/// A is frozen while the upstream holds its call, its forward still running; B takes the claim
/// over once A's heartbeat has lapsed. Told that the upstream deduplicates, B forwards again
/// and stores the upstream's answer; otherwise it stores `previous-attempt-unknown` and
/// forwards nothing. Woken up, A gets the upstream's answer to its own call, which the proxy
/// passes to A's client, but its completion is fenced off (`lease_lost`): every retry,
/// through A or B, replays B's answer.
async fn frozen_owner(database_url: &str, told: Told) {
    let (upstream, upstream_url) = Upstream::start().await;
    let a = told.proxy(&upstream_url, database_url);
    let b = told.proxy(&upstream_url, database_url);
    let (client, key) = (reqwest::Client::new(), fresh_key());
    let first = tokio::spawn(send(&client, &a, &key));
    upstream.held().await;
    a.pause();
    let stored = taken_over((&client, told), &b, &key, Some(&a)).await;
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
    replays((&client, &upstream), &[&a, &b], &key, &stored).await;
    if told == Told::Nothing {
        assert_eq!(late["id"], 1, "A's own call went on upstream, unstored");
        assert_eq!(upstream.calls(), 1, "the upstream saw the request once");
        return;
    }
    assert_eq!(stored.1["id"], 1, "B's forward created the first item");
    assert_eq!(late["id"], 2, "A's own call went on upstream, unstored");
    assert_eq!(upstream.calls(), 2, "A's call and B's, each once");
    let keys = upstream.derived_keys();
    assert_eq!(keys[0], keys[1], "the same derived key after the takeover");
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_killed_proxys_request_is_not_forwarded_again() {
    let dir = tempfile::tempdir().unwrap();
    killed_owner(&sqlite_url(&dir), Told::Nothing).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_killed_proxys_request_is_forwarded_again_after_the_grace() {
    let dir = tempfile::tempdir().unwrap();
    killed_owner(&sqlite_url(&dir), Told::Deduplicates).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis])]
async fn redis_a_killed_proxys_request_is_forwarded_again_after_the_grace() {
    killed_owner(
        &idemkey_test_support::runner::needs::redis_url(),
        Told::Deduplicates,
    )
    .await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_paused_proxys_request_reaches_the_upstream_once() {
    let dir = tempfile::tempdir().unwrap();
    frozen_owner(&sqlite_url(&dir), Told::Nothing).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis])]
async fn redis_a_paused_proxys_request_reaches_the_upstream_once() {
    frozen_owner(
        &idemkey_test_support::runner::needs::redis_url(),
        Told::Nothing,
    )
    .await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_frozen_proxy_loses_its_claim_and_its_late_completion() {
    let dir = tempfile::tempdir().unwrap();
    frozen_owner(&sqlite_url(&dir), Told::Deduplicates).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis])]
async fn redis_a_frozen_proxy_loses_its_claim_and_its_late_completion() {
    frozen_owner(
        &idemkey_test_support::runner::needs::redis_url(),
        Told::Deduplicates,
    )
    .await;
}
