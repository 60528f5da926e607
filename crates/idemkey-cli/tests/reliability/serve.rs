//! `idemkey serve` as a real process: started on a chosen port, killed with SIGKILL,
//! paused with SIGSTOP, restarted on the same database.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long a server may take to print its address before it counts as failed to start.
const START_LIMIT: Duration = Duration::from_secs(60);

/// What every server of a test is started with.
#[derive(Clone, Debug)]
pub struct ServeSpec {
    /// `sqlite://FILE` or `postgres://...`.
    pub url: String,
    /// More arguments: `--mode lease`, `--lease 1s`, ...
    pub args: Vec<String>,
    /// Where each server's stderr is appended (one file for every restart).
    pub log: PathBuf,
}

/// A running `idemkey serve`, killed when dropped.
pub struct Serve {
    pub child: Child,
    pub addr: SocketAddr,
}

impl ServeSpec {
    pub fn new(url: String, log_dir: &Path, args: &[&str]) -> Self {
        Self {
            url,
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            log: log_dir.join("serve.log"),
        }
    }

    /// Spawns a server listening on `listen`, without waiting for it.
    pub fn spawn(&self, listen: SocketAddr) -> Child {
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        Command::new(env!("CARGO_BIN_EXE_idemkey"))
            .args(["serve", "--listen", &listen.to_string()])
            .args(["--database-url", &self.url])
            .args(["--token", "alice=alice-secret", "--token", "bob=bob-secret"])
            .args(&self.args)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap()
    }

    /// Starts a server on `listen` and waits until it listens; `None` if it exited first
    /// (say, the port was taken).
    pub fn start_on(&self, listen: SocketAddr) -> Option<Serve> {
        let mut child = self.spawn(listen);
        match listening_addr(&mut child) {
            Some(addr) => Some(Serve { child, addr }),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                None
            }
        }
    }

    /// Starts a server on a free port.
    pub fn start(&self) -> Serve {
        self.start_on("127.0.0.1:0".parse().unwrap())
            .unwrap_or_else(|| panic!("the server did not start: see {}", self.log.display()))
    }

    /// The server's log so far, for failure messages.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Serve {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, then reaps the process.
    pub fn kill9(self) {
        // Drop sends SIGKILL (`Child::kill`) and waits.
        drop(self);
    }

    /// SIGSTOP: the whole process freezes, its heartbeats included.
    pub fn pause(&self) {
        signal(self.pid(), "STOP");
    }

    /// SIGCONT.
    pub fn resume(&self) {
        signal(self.pid(), "CONT");
    }

    /// The resident set size, in KiB, from `/proc/PID/status`.
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kib| kib.parse().ok())
            .unwrap()
    }

    /// A counter of `/metrics`, 0 when absent.
    pub async fn metric(&self, client: &reqwest::Client, series: &str) -> u64 {
        let url = format!("http://{}/metrics", self.addr);
        let text = client.get(url).send().await.unwrap().text().await.unwrap();
        text.lines()
            .find_map(|line| line.strip_prefix(series))
            .and_then(|rest| rest.trim().parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        // SIGKILL ends a stopped (SIGSTOP) process too.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .args([format!("-{name}"), pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{name} {pid}");
}

/// Reads the `listening on http://ADDR` line; `None` if the process ends or stays silent.
fn listening_addr(child: &mut Child) -> Option<SocketAddr> {
    let stdout = child.stdout.take()?;
    let (tx, rx) = mpsc::channel();
    // The reader keeps draining stdout, so the server never blocks on a full pipe.
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        let first = lines.next().and_then(Result::ok);
        let _ = tx.send(first);
        for _ in lines {}
    });
    let line = rx.recv_timeout(START_LIMIT).ok()??;
    let addr = line.split("http://").nth(1)?.split_whitespace().next()?;
    addr.parse().ok()
}
