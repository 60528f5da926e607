//! `idemkey serve` as a real process: started on a free or a chosen port, on SQLite or
//! PostgreSQL, stopped with SIGTERM, killed with SIGKILL, paused with SIGSTOP, and started
//! again on the same database.

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};

use crate::process::notes::{ALICE, BOB};
use crate::process::{START_LIMIT, first_line, signal};

/// How a test's servers are started: the program, the database, more arguments, and where
/// their stderr goes.
#[derive(Clone, Debug)]
pub struct ServeSpec {
    program: PathBuf,
    /// `sqlite://FILE` or `postgres://...`.
    pub url: String,
    /// More arguments: `--mode lease`, `--lease 1s`, ...
    pub args: Vec<String>,
    /// Where each server's stderr is appended (one file for every restart); the test's own
    /// stderr when `None`.
    log: Option<PathBuf>,
    /// `RUST_LOG`.
    rust_log: String,
    /// Whether the servers know [`ALICE`] and [`BOB`].
    test_actors: bool,
}

impl ServeSpec {
    /// Servers of `program` (the `idemkey` binary) on the database at `url`, with `args`.
    pub fn new(program: impl AsRef<Path>, url: impl Into<String>, args: &[&str]) -> Self {
        Self {
            program: program.as_ref().to_path_buf(),
            url: url.into(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            log: None,
            rust_log: "warn".to_owned(),
            test_actors: true,
        }
    }

    /// Servers on the SQLite file `db`.
    pub fn sqlite(program: impl AsRef<Path>, db: &Path, args: &[&str]) -> Self {
        Self::new(program, format!("sqlite://{}", db.display()), args)
    }

    /// The same, appending each server's stderr to `serve.log` in `dir`.
    #[must_use]
    pub fn logged_in(mut self, dir: &Path) -> Self {
        self.log = Some(dir.join("serve.log"));
        self
    }

    /// The same, logging at `filter` (`RUST_LOG`) instead of `warn`.
    #[must_use]
    pub fn rust_log(mut self, filter: &str) -> Self {
        self.rust_log = filter.to_owned();
        self
    }

    /// The same, without the actors [`ALICE`] and [`BOB`]: the servers know only the
    /// `--token`s of [`ServeSpec::args`] (`idemkey-bench` gives its own).
    #[must_use]
    pub fn without_test_actors(mut self) -> Self {
        self.test_actors = false;
        self
    }

    /// Spawns a server listening on `listen`, without waiting for it. It knows the actors
    /// [`ALICE`] (`alice`) and [`BOB`] (`bob`).
    pub fn spawn(&self, listen: SocketAddr) -> Child {
        self.try_spawn(listen).unwrap()
    }

    /// [`ServeSpec::spawn`], failing with the error instead of a panic.
    pub fn try_spawn(&self, listen: SocketAddr) -> std::io::Result<Child> {
        let stderr = match &self.log {
            Some(log) => File::options().create(true).append(true).open(log)?.into(),
            None => Stdio::inherit(),
        };
        let mut command = Command::new(&self.program);
        command
            .args(["serve", "--listen", &listen.to_string()])
            .args(["--database-url", &self.url]);
        if self.test_actors {
            command
                .args(["--token", &format!("alice={ALICE}")])
                .args(["--token", &format!("bob={BOB}")]);
        }
        command
            .args(&self.args)
            .env("RUST_LOG", &self.rust_log)
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
    }

    /// Starts a server on `listen` and waits until it listens; `None` if it exited first
    /// (say, the port was taken).
    pub fn start_on(&self, listen: SocketAddr) -> Option<Serve> {
        let mut child = self.spawn(listen);
        match listening_addr(&mut child) {
            Some(addr) => Some(Serve {
                child,
                addr,
                spec: self.clone(),
            }),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                None
            }
        }
    }

    /// Starts a server on a free port, failing with a message instead of a panic: for a
    /// tool (`idemkey-bench`) that reports a server that cannot start as an error of its own.
    pub fn try_start(&self) -> Result<Serve, String> {
        let program = self.program.display();
        let mut child = self
            .try_spawn(SocketAddr::from(([127, 0, 0, 1], 0)))
            .map_err(|error| format!("cannot start {program} serve: {error}"))?;
        match listening_addr(&mut child) {
            Some(addr) => Ok(Serve {
                child,
                addr,
                spec: self.clone(),
            }),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                let errors = match &self.log {
                    Some(_) => self.log_tail(),
                    None => "see its errors above".to_owned(),
                };
                Err(format!(
                    "{program} serve exited before listening ({errors})"
                ))
            }
        }
    }

    /// Starts a server on a free port.
    pub fn start(&self) -> Serve {
        self.start_on(SocketAddr::from(([127, 0, 0, 1], 0)))
            .unwrap_or_else(|| panic!("the server did not start: {}", self.log_tail()))
    }

    /// Starts a server on `addr` again (a few tries, while the port of the server that died
    /// there may still be taken), else on a free port; `None` if it starts on neither.
    pub fn start_again_on(&self, addr: SocketAddr) -> Option<Serve> {
        (0..3)
            .find_map(|_| self.start_on(addr))
            .or_else(|| self.start_on(SocketAddr::from(([127, 0, 0, 1], 0))))
    }

    /// The servers' whole log so far; empty when they log to the test's stderr.
    pub fn log(&self) -> String {
        let Some(log) = &self.log else {
            return String::new();
        };
        std::fs::read_to_string(log).unwrap_or_default()
    }

    /// The servers' log so far (its last 40 lines), for failure messages.
    pub fn log_tail(&self) -> String {
        let Some(log) = &self.log else {
            return "see the test's stderr".to_owned();
        };
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

/// A running `idemkey serve`, killed when dropped.
pub struct Serve {
    /// The process.
    pub child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
    spec: ServeSpec,
}

impl Serve {
    /// Starts `program` on the database at `url` with `args`, on a free port.
    pub fn start(program: impl AsRef<Path>, url: &str, args: &[&str]) -> Self {
        ServeSpec::new(program, url, args).start()
    }

    /// Starts `program` on the SQLite file `db` with `args`, on a free port.
    pub fn sqlite(program: impl AsRef<Path>, db: &Path, args: &[&str]) -> Self {
        ServeSpec::sqlite(program, db, args).start()
    }

    /// Starts another server on this one's database and address (after it died), with
    /// `args` instead of this one's.
    pub fn again(&self, args: &[&str]) -> Self {
        let spec = ServeSpec {
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            ..self.spec.clone()
        };
        spec.start_on(self.addr)
            .unwrap_or_else(|| panic!("the server did not start again: {}", spec.log_tail()))
    }

    /// The SQLite file this server runs on.
    pub fn db(&self) -> PathBuf {
        let path = self.spec.url.strip_prefix("sqlite://");
        PathBuf::from(path.expect("a server on SQLite"))
    }

    /// The URL of a path on this server.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The process id.
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

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(self) -> ExitStatus {
        signal(self.pid(), "TERM");
        self.terminate_wait()
    }

    /// Waits for the process to exit (after a signal sent elsewhere).
    pub fn terminate_wait(mut self) -> ExitStatus {
        self.child.wait().unwrap()
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
        let text = client.get(self.url("/metrics")).send().await.unwrap();
        let text = text.text().await.unwrap();
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

/// Reads the `listening on http://ADDR` line; `None` if the process ends or stays silent.
fn listening_addr(child: &mut Child) -> Option<SocketAddr> {
    listening_in(&first_line(child, START_LIMIT)?)
}

/// The address in `idemkey serve: listening on http://ADDR (...)`.
fn listening_in(line: &str) -> Option<SocketAddr> {
    let addr = line.split("http://").nth(1)?.split_whitespace().next()?;
    addr.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::listening_in;

    #[test]
    fn the_listening_line_parses() {
        let line = "idemkey serve: listening on http://127.0.0.1:4321 (atomic mode, sqlite://x)";
        assert_eq!(listening_in(line).unwrap().port(), 4321);
        assert_eq!(listening_in("hello"), None);
    }
}
