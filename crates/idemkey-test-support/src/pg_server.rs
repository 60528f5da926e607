//! A PostgreSQL server of a test's own: `initdb` in a temporary directory and `pg_ctl` on a
//! free port of 127.0.0.1, run as the `postgres` user, so a test can crash, stop and start
//! the database under running processes. Needs PostgreSQL's server binaries
//! (`/usr/lib/postgresql/*/bin`, the `pg_server` need) and, as root, the `postgres` user.

use std::path::PathBuf;
use std::process::Command;

use crate::needs::pg_server_bin;
use crate::redis::free_port;

/// A PostgreSQL server of the test's own, stopped when dropped.
pub struct Cluster {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
}

impl Cluster {
    /// Makes the data directory and starts the server.
    pub fn start() -> Self {
        let bin = pg_server_bin().expect("PostgreSQL server binaries under /usr/lib/postgresql");
        let dir = tempfile::tempdir().unwrap();
        // initdb refuses to run as root: the data directory belongs to `postgres`.
        Command::new("chown")
            .arg("postgres")
            .arg(dir.path())
            .status()
            .unwrap();
        let port = free_port();
        let cluster = Self { bin, dir, port };
        let init = cluster.as_postgres("initdb", &["-A", "trust", "-U", "postgres", "--no-sync"]);
        assert!(init, "initdb failed (is there a `postgres` user?)");
        assert!(
            cluster.pg_ctl(&["start"]),
            "the private PostgreSQL did not start"
        );
        cluster
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Runs a server binary as `postgres` on this cluster's data directory.
    fn as_postgres(&self, tool: &str, args: &[&str]) -> bool {
        let program = self.bin.join(tool);
        Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(&program)
            .arg("-D")
            .arg(self.data())
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    }

    fn pg_ctl(&self, args: &[&str]) -> bool {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1",
            self.port,
            self.dir.path().display()
        );
        let log = self.dir.path().join("log");
        let log = log.to_str().unwrap();
        let mut all = vec!["-w", "-l", log, "-o", options.as_str()];
        all.extend_from_slice(args);
        self.as_postgres("pg_ctl", &all)
    }

    /// Kills the server the way a crash would (no checkpoint, recovery at start) and starts it.
    pub fn crash_restart(&self) {
        assert!(
            self.pg_ctl(&["-m", "immediate", "restart"]),
            "restart failed"
        );
    }

    /// Stops the server the way a crash would, and leaves it stopped.
    pub fn crash_stop(&self) {
        assert!(self.pg_ctl(&["-m", "immediate", "stop"]), "stop failed");
    }

    /// Starts the stopped server again, on the same data and port.
    pub fn start_again(&self) {
        assert!(self.pg_ctl(&["start"]), "start failed");
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.pg_ctl(&["-m", "immediate", "stop"]);
    }
}
