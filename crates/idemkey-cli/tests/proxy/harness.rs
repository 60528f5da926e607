//! Real processes for the proxy's tests: the Python upstream and `idemkey proxy` itself.
#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

/// The upstream script, beside this file.
const UPSTREAM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/proxy/upstream.py");

/// A child process killed when dropped, and the first line it printed.
pub struct Process {
    pub child: Child,
    pub first_line: String,
}

impl Process {
    fn spawn(command: &mut Command) -> Self {
        let mut child = command.stdout(Stdio::piped()).spawn().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first_line = lines.next().expect("the process printed nothing").unwrap();
        // Keep draining stdout so the process never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Self { child, first_line }
    }

    /// SIGKILL, and wait for it to be gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The Python upstream.
pub struct Upstream {
    pub process: Process,
    pub addr: SocketAddr,
}

impl Upstream {
    /// Starts the upstream on `port` (0: a free one).
    pub fn start_on(port: u16) -> Self {
        let process = Process::spawn(Command::new("python3").arg(UPSTREAM).arg(port.to_string()));
        let port = process
            .first_line
            .rsplit(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        Self {
            process,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        }
    }

    pub fn start() -> Self {
        Self::start_on(0)
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub async fn stats(&self) -> Value {
        let url = format!("{}/stats", self.url());
        reqwest::get(url).await.unwrap().json().await.unwrap()
    }

    pub async fn created(&self) -> u64 {
        self.stats().await["created"].as_u64().unwrap()
    }

    /// Waits until `n` requests are held at `?hold=`.
    pub async fn held(&self, n: u64) {
        for _ in 0..2000 {
            if self.stats().await["held"].as_u64().unwrap() >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("{n} requests never reached the upstream");
    }

    pub async fn release(&self, name: &str) {
        let url = format!("{}/release?name={name}", self.url());
        reqwest::get(url).await.unwrap();
    }
}

/// A running `idemkey proxy`.
pub struct Proxy {
    pub process: Process,
    pub addr: SocketAddr,
    pub admin: SocketAddr,
}

impl Proxy {
    /// Starts a proxy to `upstream` on the database at `db_url`, with `extra` flags.
    pub fn start(upstream: &str, db_url: &str, extra: &[&str]) -> Self {
        Self::start_at("127.0.0.1:0", upstream, db_url, extra)
    }

    /// The same, listening on `listen`.
    pub fn start_at(listen: &str, upstream: &str, db_url: &str, extra: &[&str]) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_idemkey"));
        command
            .args(["proxy", "--upstream", upstream, "--listen", listen])
            .args(["--admin-listen", "127.0.0.1:0", "--database-url", db_url])
            .args(extra)
            .env("RUST_LOG", "warn")
            .env_remove("IDEMKEY_DATABASE_URL");
        let process = Process::spawn(&mut command);
        let addrs: Vec<SocketAddr> = process
            .first_line
            .split("http://")
            .skip(1)
            .filter_map(|rest| rest.split([',', ' ']).next()?.parse().ok())
            .collect();
        assert!(
            addrs.len() >= 2,
            "unexpected first line: {}",
            process.first_line
        );
        Self {
            process,
            addr: addrs[0],
            admin: addrs[1],
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

/// A POST of `{"title": title}` to `url` as `credential`, with `key` if any.
pub async fn post(
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
pub async fn slug(response: reqwest::Response) -> String {
    let problem: Value = response.json().await.unwrap();
    let uri = problem["type"].as_str().unwrap_or_default().to_owned();
    uri.rsplit('/').next().unwrap().to_owned()
}
