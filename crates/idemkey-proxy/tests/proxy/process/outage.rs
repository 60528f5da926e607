//! A store outage longer than the owner grace, with real processes: two proxies on a
//! PostgreSQL of the test's own, or on a `redis-server` of its own (AOF, `appendfsync
//! always`), each with a lease far longer than the test (300 s) and a 2 s owner grace. Proxy
//! A forwards a keyed create, which the test's upstream holds; the store is then stopped the
//! way a crash would (`pg_ctl stop -m immediate`, SIGKILL of Redis) for longer than the grace,
//! and started again, twice. By the clock alone every heartbeat has lapsed
//! each time. Forced: A reaches the database through a gate the test keeps shut for a second
//! after each restart, so B is back first and retries while A's heartbeat is still the one
//! from before the outage. A is alive, so those retries are told 409 (or 503 while B
//! reconnects), never taken over.
//! Released, A's forward is the one answer: stored, replayed through B, and the upstream saw
//! the request once.
//!
//! The PostgreSQL case needs PostgreSQL's server binaries (the `pg_server` need).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use idemkey_test_support::process::binary;
use idemkey_test_support::process::pg_server::Cluster;
use idemkey_test_support::process::proxy::Proxy;
use idemkey_test_support::process::redis::RedisServer;

use super::owner_grace::{Upstream, send};
use super::upstream::slug;

const ARGS: [&str; 4] = ["--lease", "300s", "--owner-grace", "2s"];

/// How many times the database stops.
const OUTAGES: usize = 2;

/// How long each outage lasts: longer than the grace.
const OUTAGE: Duration = Duration::from_millis(3000);

/// How long A's gate stays shut after each restart: half the grace.
const A_LATE: Duration = Duration::from_millis(1000);

/// How long after each restart the retries go on: past the grace, into the heartbeats that
/// follow.
const AFTER: Duration = Duration::from_millis(3000);

/// A TCP gate to the database: while shut, every connection is dropped at once.
#[derive(Clone)]
struct Gate {
    addr: SocketAddr,
    shut: Arc<AtomicBool>,
}

impl Gate {
    async fn start(upstream: SocketAddr) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let gate = Self {
            addr: listener.local_addr().unwrap(),
            shut: Arc::default(),
        };
        let shut = gate.shut.clone();
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if shut.load(Ordering::SeqCst) {
                    continue;
                }
                tokio::spawn(async move {
                    if let Ok(mut server) = tokio::net::TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
            }
        });
        gate
    }

    fn shut(&self, shut: bool) {
        self.shut.store(shut, Ordering::SeqCst);
    }
}

/// A store the test can crash and start again, reached directly or through a gate.
trait Outage {
    fn stop(&mut self);
    fn start(&mut self);
    fn port(&self) -> u16;
    /// The store's URL at `addr` (the gate's), or at its own port.
    fn url(&self, addr: Option<SocketAddr>) -> String;
}

impl Outage for Cluster {
    fn stop(&mut self) {
        self.crash_stop();
    }

    fn start(&mut self) {
        self.start_again();
    }

    fn port(&self) -> u16 {
        let url = Cluster::url(self);
        let (_, rest) = url.rsplit_once(':').unwrap();
        rest.split('/').next().unwrap().parse().unwrap()
    }

    fn url(&self, addr: Option<SocketAddr>) -> String {
        match addr {
            Some(addr) => format!("postgres://postgres@{addr}/postgres"),
            None => Cluster::url(self),
        }
    }
}

impl Outage for RedisServer {
    fn stop(&mut self) {
        self.kill();
    }

    fn start(&mut self) {
        self.restart();
    }

    fn port(&self) -> u16 {
        self.port
    }

    fn url(&self, addr: Option<SocketAddr>) -> String {
        match addr {
            Some(addr) => format!("redis://{addr}"),
            None => RedisServer::url(self),
        }
    }
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [pg_server])]
async fn postgres_stopped_past_the_grace_takes_no_live_claim_over() {
    let cluster = tokio::task::spawn_blocking(Cluster::start).await.unwrap();
    stopped_past_the_grace(cluster).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis_server])]
async fn redis_stopped_past_the_grace_takes_no_live_claim_over() {
    let redis = RedisServer::start(&["--appendonly", "yes", "--appendfsync", "always"]);
    stopped_past_the_grace(redis).await;
}

/// The outages under the held forward, then the checks of the module's header.
async fn stopped_past_the_grace(mut store: impl Outage) {
    let (upstream, upstream_url) = Upstream::start().await;
    let gate = Gate::start(SocketAddr::from(([127, 0, 0, 1], store.port()))).await;
    let a = Proxy::start(
        binary::idemkey(),
        &upstream_url,
        &store.url(Some(gate.addr)),
        &ARGS,
    );
    let b = Proxy::start(binary::idemkey(), &upstream_url, &store.url(None), &ARGS);
    let client = reqwest::Client::new();
    let key = "outage";
    let first = tokio::spawn(send(&client, &a, key));
    upstream.held().await;
    let mut in_flight = 0;
    for outage in 1..=OUTAGES {
        tokio::task::block_in_place(|| store.stop());
        gate.shut(true);
        tokio::time::sleep(OUTAGE).await;
        tokio::task::block_in_place(|| store.start());
        let (restarted, until) = (Instant::now(), Instant::now() + AFTER);
        while Instant::now() < until {
            if restarted.elapsed() > A_LATE {
                gate.shut(false);
            }
            let answer = send(&client, &b, key).await.unwrap();
            let status = answer.status().as_u16();
            let problem = slug(answer).await;
            match (status, problem.as_str()) {
                (409, "request-in-flight") => in_flight += 1,
                (503, "store-unavailable") => {}
                _ => panic!("after outage {outage}: {status} {problem}, not in flight"),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    assert!(in_flight > 0, "B was never answered from the record");
    upstream.release();
    let answered = first.await.unwrap().unwrap();
    assert_eq!(answered.status(), 201);
    let stored = answered.text().await.unwrap();
    let replayed = send(&client, &b, key).await.unwrap();
    assert_eq!(replayed.status(), 201);
    assert_eq!(replayed.headers()["idempotent-replayed"], "true");
    assert_eq!(
        replayed.text().await.unwrap(),
        stored,
        "A's answer is the one stored"
    );
    assert_eq!(upstream.calls(), 1, "the upstream saw the request once");
}
