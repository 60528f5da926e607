//! The proxy tests' upstream: a small non-idempotent Python API (`upstream.py`) as a real
//! process, and what the tests send through the proxy to it.

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use idemkey_test_support::process::Process;
use serde_json::Value;

/// The upstream script, test-support's.
const UPSTREAM: &str = idemkey_test_support::process::PYTHON_UPSTREAM;

/// The Python upstream, killed when dropped.
pub(crate) struct Upstream {
    _process: Process,
    pub(crate) addr: SocketAddr,
}

impl Upstream {
    /// Starts the upstream on `port` (0: a free one).
    pub(crate) fn start_on(port: u16) -> Self {
        let process = Process::spawn(Command::new("python3").arg(UPSTREAM).arg(port.to_string()));
        let port = process
            .first_line
            .rsplit(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        Self {
            _process: process,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        }
    }

    pub(crate) fn start() -> Self {
        Self::start_on(0)
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub(crate) async fn stats(&self) -> Value {
        let url = format!("{}/stats", self.url());
        reqwest::get(url).await.unwrap().json().await.unwrap()
    }

    pub(crate) async fn created(&self) -> u64 {
        self.stats().await["created"].as_u64().unwrap()
    }

    /// Waits until `n` requests are held at `?hold=`.
    pub(crate) async fn held(&self, n: u64) {
        for _ in 0..2000 {
            if self.stats().await["held"].as_u64().unwrap() >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("{n} requests never reached the upstream");
    }

    pub(crate) async fn release(&self, name: &str) {
        let url = format!("{}/release?name={name}", self.url());
        reqwest::get(url).await.unwrap();
    }
}

/// A POST of `{"title": title}` to `url` as `credential`, with `key` if any.
pub(crate) async fn post(
    url: &str,
    credential: &str,
    key: Option<&str>,
    title: &str,
) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("authorization", format!("Bearer {credential}"))
        .header("content-type", "application/json")
        .body(format!("{{\"title\":\"{title}\"}}"));
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    request.send().await.unwrap()
}

/// The `type` slug of a problem response.
pub(crate) async fn slug(response: reqwest::Response) -> String {
    let problem: Value = response.json().await.unwrap();
    let uri = problem["type"].as_str().unwrap_or_default().to_owned();
    uri.rsplit(['/', '#']).next().unwrap().to_owned()
}
