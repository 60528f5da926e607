//! Child processes of a test: the first line they print, signals, and a child killed when
//! dropped.

pub mod binary;
pub mod mysql_server;
pub mod nats_server;
#[cfg(feature = "http")]
pub mod notes;
pub mod pg_server;
#[cfg(feature = "http")]
pub mod proxy;
pub mod rabbitmq_node;
pub mod redis;
#[cfg(feature = "http")]
pub mod serve;
mod watchdog;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The proxy tests' upstream, a small non-idempotent API in Python (`python3 upstream.py
/// PORT [RECORDS_DIR]`): the one the proxy's tests and the binary's fault campaigns put behind
/// `idemkey proxy`.
pub const PYTHON_UPSTREAM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/process/upstream.py");

/// How long a process may take to print its first line before it counts as failed to start.
pub const START_LIMIT: Duration = Duration::from_secs(60);

/// The first line `child` prints on its piped stdout, which is drained from then on so the
/// process never blocks on a full pipe; `None` if it ends or stays silent for `limit`.
pub fn first_line(child: &mut Child, limit: Duration) -> Option<String> {
    let stdout = child.stdout.take()?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        let first = lines.next().and_then(Result::ok);
        let _ = tx.send(first);
        for _ in lines {}
    });
    rx.recv_timeout(limit).ok()?
}

/// Sends the signal `name` (`TERM`, `STOP`, `CONT`, ...) to `pid` with `kill`.
pub fn signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .args([format!("-{name}"), pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{name} {pid}");
}

/// Waits until `addr` refuses connections: a server that began its graceful shutdown has
/// closed its listener. Panics if it still accepts them after [`START_LIMIT`].
pub async fn refused(addr: SocketAddr) {
    let deadline = tokio::time::Instant::now() + START_LIMIT;
    while tokio::net::TcpStream::connect(addr).await.is_ok() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{addr} still accepts connections"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A child process killed when dropped, and the first line it printed.
pub struct Process {
    /// The process.
    pub child: Child,
    /// What it printed first: where it listens, as a rule.
    pub first_line: String,
}

impl Process {
    /// Spawns `command` with stdout piped and waits for its first line.
    pub fn spawn(command: &mut Command) -> Self {
        let mut child = command.stdout(Stdio::piped()).spawn().unwrap();
        let first_line = first_line(&mut child, START_LIMIT).expect("the process printed nothing");
        Self { child, first_line }
    }

    /// The same, failing with a message instead of a panic: for a tool (`idemkey-bench`) that
    /// reports a process that cannot start as an error of its own.
    pub fn try_spawn(command: &mut Command) -> Result<Self, String> {
        let program = command.get_program().to_string_lossy().into_owned();
        let mut child = command
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|error| format!("cannot start {program}: {error}"))?;
        match first_line(&mut child, START_LIMIT) {
            Some(first_line) => Ok(Self { child, first_line }),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                Err(format!(
                    "{program} exited or printed nothing before listening (see its errors above)"
                ))
            }
        }
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
