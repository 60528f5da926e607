//! A MariaDB server of a test's own: a data directory made by `mariadb-install-db` in a
//! temporary directory, `mariadbd` on a free port of 127.0.0.1 with the default durability
//! settings (`innodb_flush_log_at_trx_commit = 1`), killed with SIGKILL and started again on
//! the same data and port, so a test can crash the database under a running `idemkey serve`.
//!
//! The server runs under a `sh` watchdog that holds a pipe from this process, as
//! [`crate::process::redis::RedisServer`] does: however this process ends, the server is killed and its
//! directory removed.

use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::watchdog::{Watchdog, free_port};
use crate::runner::needs::mariadb_program;

/// The database the server creates at every start, which [`MariaDb::url`] names.
const DATABASE: &str = "idemkey";

/// How long a start (crash recovery included) may take before the test fails.
const START_LIMIT: Duration = Duration::from_secs(60);

/// A private `mariadbd`, killed and its directory removed when dropped.
pub struct MariaDb {
    /// The port it listens on, on 127.0.0.1, the same across restarts.
    pub port: u16,
    /// Its directory: `data/` (the data directory), the init file, the error log.
    pub dir: PathBuf,
    watchdog: Option<Watchdog>,
}

impl MariaDb {
    /// Makes a data directory (root without a password over TCP) and starts the server on a
    /// free port; panics, with the server's log, if it does not start.
    pub fn start() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("idemkey-mariadb-")
            .tempdir()
            .unwrap()
            .keep();
        install(&dir);
        let init = format!("CREATE DATABASE IF NOT EXISTS {DATABASE} CHARACTER SET utf8mb4;\n");
        std::fs::write(dir.join("init.sql"), init).unwrap();
        let mut server = Self {
            port: 0,
            dir,
            watchdog: None,
        };
        // Another process may take the free port first: try a few.
        for _ in 0..5 {
            server.port = free_port();
            if server.spawn() {
                return server;
            }
        }
        panic!("mariadbd did not start:\n{}", server.log_tail());
    }

    /// The URL of its database, as root without a password.
    pub fn url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}/{DATABASE}", self.port)
    }

    /// Kills `mariadbd` with SIGKILL, as a crash would (nothing flushed at exit, crash
    /// recovery at the next start), keeps its directory, and waits until it is gone.
    pub fn kill(&mut self) {
        if let Some(watchdog) = self.watchdog.take() {
            watchdog.stop_keeping_dir();
        }
    }

    /// Starts the server again on the same data directory and port; waits until it answers.
    pub fn restart(&mut self) {
        assert!(
            self.spawn(),
            "mariadbd did not restart:\n{}",
            self.log_tail()
        );
    }

    /// [`Self::kill`], then [`Self::restart`].
    pub fn crash_restart(&mut self) {
        self.kill();
        self.restart();
    }

    /// The error log's last 40 lines, for failure messages.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// Spawns `mariadbd` under its watchdog on `self.port`; whether it greets a client in
    /// time. The watchdog kills it with SIGKILL when this process closes the pipe.
    fn spawn(&mut self) -> bool {
        let script = r#"dir="$1"; shift; "$@" >>"$dir/server.out" 2>&1 & pid=$!
read _eof; kill -9 "$pid" 2>/dev/null; wait "$pid"; [ -e "$dir/.keep" ] || rm -rf "$dir""#;
        let program = mariadb_program("mariadbd").expect("mariadbd");
        let server_args = server_args(&self.dir, self.port);
        let mut args = vec![self.dir.as_os_str(), program.as_os_str()];
        args.extend(
            server_args
                .iter()
                .map(|arg| std::ffi::OsStr::new(arg.as_str())),
        );
        self.watchdog = Some(Watchdog::spawn(script, &args, &self.dir, &[]));
        let deadline = Instant::now() + START_LIMIT;
        while Instant::now() < deadline {
            if greets(self.port) {
                return true;
            }
            if self.exited() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill();
        false
    }

    /// Whether the watchdog, hence the server, has ended (say, the port was taken).
    fn exited(&mut self) -> bool {
        self.watchdog.as_mut().is_some_and(Watchdog::exited)
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        if let Some(watchdog) = self.watchdog.take() {
            watchdog.stop();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Makes the data directory `dir/data`: root may connect over TCP without a password.
fn install(dir: &Path) {
    let data = dir.join("data");
    let log = std::fs::File::create(dir.join("install.log")).unwrap();
    let program = mariadb_program("mariadb-install-db").expect("mariadb-install-db");
    let installed = Command::new(program)
        .arg("--no-defaults")
        .arg(format!("--datadir={}", data.display()))
        .args(["--user=root", "--auth-root-authentication-method=normal"])
        .arg("--skip-test-db")
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .status()
        .is_ok_and(|status| status.success());
    let log = std::fs::read_to_string(dir.join("install.log")).unwrap_or_default();
    assert!(installed, "mariadb-install-db failed:\n{log}");
}

/// `mariadbd`'s arguments: no option files, so the machine's configuration changes nothing,
/// and the durability settings are the defaults. `--user=root` lets root run it (another user
/// runs it as itself, with a warning).
fn server_args(dir: &Path, port: u16) -> Vec<String> {
    let path = |name: &str| dir.join(name).display().to_string();
    vec![
        "--no-defaults".to_owned(),
        format!("--datadir={}", path("data")),
        "--user=root".to_owned(),
        format!("--port={port}"),
        "--bind-address=127.0.0.1".to_owned(),
        "--skip-name-resolve".to_owned(),
        format!("--socket={}", path("mysqld.sock")),
        format!("--pid-file={}", path("mysqld.pid")),
        format!("--log-error={}", path("error.log")),
        format!("--init-file={}", path("init.sql")),
    ]
}

/// Whether a server on `port` sends a client its handshake (protocol version 10): it has
/// recovered, run its init file and accepts sessions.
fn greets(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(500)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    // A packet: three bytes of length, a sequence number, then the payload's first byte.
    let mut header = [0; 5];
    stream.read_exact(&mut header).is_ok() && header[4] == 10
}
