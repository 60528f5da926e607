//! `idemkey proxy` as a real process, in front of an upstream the test runs.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

use crate::process::{Process, signal};

/// A running `idemkey proxy`, killed when dropped.
pub struct Proxy {
    /// The process.
    pub process: Process,
    /// Where it proxies.
    pub addr: SocketAddr,
    /// Where its admin endpoints listen.
    pub admin: SocketAddr,
}

impl Proxy {
    /// Starts `program` (the `idemkey` binary) as a proxy to `upstream` on the database at
    /// `db_url`, with `extra` flags, on a free port.
    pub fn start(program: impl AsRef<Path>, upstream: &str, db_url: &str, extra: &[&str]) -> Self {
        Self::start_at(program, "127.0.0.1:0", upstream, db_url, extra)
    }

    /// The same, listening on `listen`.
    pub fn start_at(
        program: impl AsRef<Path>,
        listen: &str,
        upstream: &str,
        db_url: &str,
        extra: &[&str],
    ) -> Self {
        Self::start_with(
            Command::new(program.as_ref()),
            listen,
            upstream,
            db_url,
            extra,
        )
    }

    /// The same, with the wall clock `step` ahead of the host's (a whole-second offset such
    /// as `+5s`) from the start, as an NTP step or a resumed VM would put it: libfaketime in
    /// `LD_PRELOAD` ([`Need::Faketime`](crate::runner::needs::Need::Faketime)), the steady clock left alone.
    pub fn start_stepped(
        program: impl AsRef<Path>,
        step: &str,
        upstream: &str,
        db_url: &str,
        extra: &[&str],
    ) -> Self {
        let library =
            crate::runner::needs::faketime_library().expect("libfaketime (install faketime)");
        let mut command = Command::new(program.as_ref());
        command
            .env("LD_PRELOAD", library)
            .env("FAKETIME", step)
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
        Self::start_with(command, "127.0.0.1:0", upstream, db_url, extra)
    }

    fn start_with(
        mut command: Command,
        listen: &str,
        upstream: &str,
        db_url: &str,
        extra: &[&str],
    ) -> Self {
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

    /// The URL of a path on the proxy.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// SIGSTOP: the whole process freezes, its owner heartbeat included. Dropping a frozen
    /// proxy still ends it (SIGKILL).
    pub fn pause(&self) {
        signal(self.process.child.id(), "STOP");
    }

    /// SIGCONT.
    pub fn resume(&self) {
        signal(self.process.child.id(), "CONT");
    }
}
