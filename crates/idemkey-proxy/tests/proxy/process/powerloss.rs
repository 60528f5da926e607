//! A power-loss campaign through `idemkey proxy`: retrying clients create items through the
//! proxy, whose records are in SQLite on a [`PowerLossFs`]; the proxy is SIGKILLed at random
//! moments, and after each kill the power of the filesystem is cut (every byte and entry no
//! sync covered is gone) before a new proxy starts on what survived. The upstream (the
//! non-idempotent Python API) counts what it is sent.
//!
//! Afterwards: the upstream saw each request at most once (one item per key's title: a claim
//! lost in a cut after its forward would be forwarded again, as on a disk whose syncs lie,
//! which the second test checks is seen), and every answer a client was given, a 201 or a stored 5xx (`previous-attempt-unknown`,
//! `upstream-outcome-unknown`), replays identically. At least 10 cuts.
//!
//! Sizes: `IDEMKEY_POWERLOSS_CLIENTS` (4), `IDEMKEY_POWERLOSS_KEYS` per client (30),
//! `IDEMKEY_POWERLOSS_CUTS` (12); `IDEMKEY_POWERLOSS_SEED` replays the schedule.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use idemkey_powerloss::PowerLossFs;
use idemkey_test_support::process::binary;
use idemkey_test_support::process::proxy::Proxy;

use super::upstream::Upstream;
use idemkey_test_support::runner::rng::{Rng, env_or};

/// How many times a client sends one key before it gives up (and the test fails).
const MAX_ATTEMPTS: usize = 2000;

/// The proxy's flags: a short lease, so a killed proxy's claims are taken over soon.
const ARGS: [&str; 2] = ["--lease", "1s"];

/// What a client was answered for one key: a 201, or a stored 5xx problem.
#[derive(Debug)]
struct Answer {
    key: String,
    status: u16,
    body: String,
}

#[derive(Default)]
struct Shared {
    addr: RwLock<Option<SocketAddr>>,
    done: AtomicUsize,
    stats: Mutex<BTreeMap<String, u64>>,
}

impl Shared {
    fn addr(&self) -> SocketAddr {
        self.addr.read().unwrap().unwrap()
    }

    fn add(&self, what: impl Into<String>, n: u64) {
        *self.stats.lock().unwrap().entry(what.into()).or_default() += n;
    }
}

/// Whether the proxy's answer is final (stored, so every retry gets it again): a 201, or
/// the 5xx problems the proxy stores rather than forward again.
fn stored(status: u16, body: &str) -> bool {
    status == 201
        || (status == 500 && body.contains("previous-attempt-unknown"))
        || (status == 502 && body.contains("upstream-outcome-unknown"))
}

fn send(http: &reqwest::Client, addr: SocketAddr, key: &str) -> reqwest::RequestBuilder {
    http.post(format!("http://{addr}/items"))
        .header("authorization", "Bearer alice")
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .body(format!("{{\"title\":\"{key}\"}}"))
}

async fn client(n: usize, keys: usize, mut rng: Rng, shared: Arc<Shared>) -> Vec<Answer> {
    let http = reqwest::Client::new();
    let mut answers = Vec::new();
    for k in 0..keys {
        let key = format!("c{n}-k{k}");
        let mut answer = None;
        for _ in 0..MAX_ATTEMPTS {
            let timeout = rng.millis(100, 1500);
            let sent = send(&http, shared.addr(), &key)
                .timeout(timeout)
                .send()
                .await;
            match sent {
                Ok(response) => {
                    let status = response.status().as_u16();
                    match response.text().await {
                        Ok(body) if stored(status, &body) => {
                            shared.add(format!("{status} answered"), 1);
                            answer = Some(Answer {
                                key: key.clone(),
                                status,
                                body,
                            });
                            break;
                        }
                        Ok(_) => shared.add(format!("{status} retried"), 1),
                        Err(_) => shared.add("error: body cut off", 1),
                    }
                }
                Err(error) if error.is_timeout() => shared.add("error: client timeout", 1),
                Err(error) if error.is_connect() => shared.add("error: connect", 1),
                Err(_) => shared.add("error: connection lost", 1),
            }
            tokio::time::sleep(rng.millis(10, 100)).await;
        }
        answers.push(answer.unwrap_or_else(|| panic!("{key}: no answer after {MAX_ATTEMPTS}")));
        shared.done.fetch_add(1, Ordering::SeqCst);
    }
    answers
}

fn start(upstream: &str, db_url: &str) -> Proxy {
    Proxy::start(binary::idemkey(), upstream, db_url, &ARGS)
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [python3, fuse])]
async fn powerloss_campaign_proxy_sqlite() {
    let found = run(false).await;
    assert!(found.twice.is_empty(), "forwarded twice: {:?}", found.twice);
    assert!(found.not_replayed.is_empty(), "{:#?}", found.not_replayed);
    assert!(
        found.cuts >= 10,
        "only {} cuts before the clients were done: raise IDEMKEY_POWERLOSS_KEYS",
        found.cuts
    );
}

/// On a disk whose syncs lie the claims go at each cut, and their retries are forwarded
/// again: the check of the upstream must see it.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [python3, fuse])]
async fn powerloss_campaign_proxy_finds_requests_forwarded_twice_on_lying_syncs() {
    let found = run(true).await;
    assert!(
        !found.twice.is_empty(),
        "no request forwarded twice though no sync was real"
    );
}

/// What a campaign found.
struct Found {
    /// Requests (titles) the upstream executed more than once.
    twice: Vec<String>,
    /// Answers whose retry did not replay them.
    not_replayed: Vec<String>,
    cuts: u64,
}

/// Runs the campaign; `lie`: the syncs lie once the schema and secret are durable.
async fn run(lie: bool) -> Found {
    let seed = Rng::seed_from_env("IDEMKEY_POWERLOSS_SEED");
    let clients = env_or("IDEMKEY_POWERLOSS_CLIENTS", 4) as usize;
    let keys = env_or("IDEMKEY_POWERLOSS_KEYS", 30) as usize;
    let cuts = env_or("IDEMKEY_POWERLOSS_CUTS", 12) as usize;
    eprintln!(
        "proxy power-loss campaign (syncs lie: {lie}): seed={seed} clients={clients} keys={keys} cuts={cuts} (replay with IDEMKEY_POWERLOSS_SEED={seed})"
    );
    let upstream = Upstream::start();
    let mount = tempfile::tempdir().unwrap();
    let fs = Arc::new(PowerLossFs::mount(mount.path()).unwrap());
    let db_url = format!("sqlite://{}", fs.path().join("proxy.db").display());
    // A first proxy creates the schema and the store's secret (which derived keys come
    // from); a cut after it keeps both, or derived keys would change with each secret.
    let mut first = start(&upstream.url(), &db_url);
    first.process.kill();
    fs.cut().unwrap();
    fs.set_syncs_lie(lie);
    let started = Instant::now();
    let mut proxy = start(&upstream.url(), &db_url);
    let shared = Arc::new(Shared::default());
    *shared.addr.write().unwrap() = Some(proxy.addr);
    let rng = Rng::new(seed);
    let tasks: Vec<_> = (0..clients)
        .map(|n| tokio::spawn(client(n, keys, rng.fork(n as u64 + 1), shared.clone())))
        .collect();
    let total = clients * keys;
    let mut killer = rng.fork(0);
    let slice = (total / (cuts + 1) / 2).max(2);
    for _ in 0..cuts {
        let target = (shared.done.load(Ordering::SeqCst) + killer.range(0, slice as u64) as usize)
            .min(total - 1);
        let mut reached = false;
        for _ in 0..60_000 {
            let done = shared.done.load(Ordering::SeqCst);
            if done >= total {
                break;
            }
            if done >= target {
                reached = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if !reached {
            break;
        }
        tokio::time::sleep(killer.millis(0, 10)).await;
        let fs = fs.clone();
        let cut = tokio::task::spawn_blocking(move || {
            proxy.process.kill();
            fs.cut().unwrap()
        })
        .await
        .unwrap();
        shared.add("cut: power", 1);
        shared.add("cut: bytes dropped", cut.bytes);
        shared.add("cut: entries dropped", cut.entries);
        let (url, db) = (upstream.url(), db_url.clone());
        proxy = tokio::task::spawn_blocking(move || start(&url, &db))
            .await
            .unwrap();
        *shared.addr.write().unwrap() = Some(proxy.addr);
    }
    let mut answers = Vec::new();
    for task in tasks {
        answers.extend(task.await.unwrap());
    }
    let elapsed = started.elapsed();
    // The upstream saw each request at most once: one item per title (each key's title is
    // its own), every item it created counted.
    let stats = upstream.stats().await;
    let items: serde_json::Value = reqwest::Client::new()
        .get(format!("{}/items", upstream.url()))
        .header("authorization", "Bearer alice")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let items = items["items"].as_array().unwrap();
    assert_eq!(items.len() as u64, stats["created"].as_u64().unwrap());
    let mut by_title: HashMap<&str, usize> = HashMap::new();
    for item in items {
        *by_title.entry(item["title"].as_str().unwrap()).or_default() += 1;
    }
    let twice: Vec<String> = by_title
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(title, n)| format!("{title}: {n} times"))
        .collect();
    let forwarded = items.len();
    // Every answer given replays identically.
    let http = reqwest::Client::new();
    let mut not_replayed = Vec::new();
    for answer in &answers {
        let retry = send(&http, proxy.addr, &answer.key).send().await.unwrap();
        let status = retry.status().as_u16();
        let replayed = retry
            .headers()
            .get("idempotent-replayed")
            .is_some_and(|value| value == "true");
        let body = retry.text().await.unwrap();
        if status != answer.status || !replayed || body != answer.body {
            not_replayed.push(format!(
                "{}: answered {} {}, retry got {status} replayed={replayed} {body}",
                answer.key, answer.status, answer.body
            ));
        }
    }
    let counts = shared.stats.lock().unwrap().clone();
    let requests: u64 = counts
        .iter()
        .filter(|(what, _)| !what.starts_with("cut:"))
        .map(|(_, n)| n)
        .sum();
    let cuts = counts.get("cut: power").copied().unwrap_or(0);
    println!(
        "proxy power-loss campaign{}: seed={seed} keys={} in {:.1}s: cuts={} bytes dropped={} entries dropped={} requests={requests} forwarded={} forwarded twice={} not replayed={} {counts:?}",
        if lie { " (syncs lie)" } else { "" },
        answers.len(),
        elapsed.as_secs_f64(),
        cuts,
        counts.get("cut: bytes dropped").copied().unwrap_or(0),
        counts.get("cut: entries dropped").copied().unwrap_or(0),
        forwarded,
        twice.len(),
        not_replayed.len(),
    );
    Found {
        twice,
        not_replayed,
        cuts,
    }
}
