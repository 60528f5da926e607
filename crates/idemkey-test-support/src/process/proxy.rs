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

    /// [`Proxy::start`] failing with a message instead of a panic, for a tool
    /// (`idemkey-bench`); the proxy logs at `rust_log` (`RUST_LOG`).
    pub fn try_start(
        program: impl AsRef<Path>,
        upstream: &str,
        db_url: &str,
        extra: &[&str],
        rust_log: &str,
    ) -> Result<Self, String> {
        let mut command = Command::new(program.as_ref());
        command.env("RUST_LOG", rust_log);
        Self::try_start_with(command, "127.0.0.1:0", upstream, db_url, extra)
    }

    fn start_with(
        command: Command,
        listen: &str,
        upstream: &str,
        db_url: &str,
        extra: &[&str],
    ) -> Self {
        Self::try_start_with(command, listen, upstream, db_url, extra)
            .unwrap_or_else(|error| panic!("{error}"))
    }

    fn try_start_with(
        mut command: Command,
        listen: &str,
        upstream: &str,
        db_url: &str,
        extra: &[&str],
    ) -> Result<Self, String> {
        command
            .args(["proxy", "--upstream", upstream, "--listen", listen])
            .args(["--admin-listen", "127.0.0.1:0", "--database-url", db_url])
            .args(extra)
            .env_remove("IDEMKEY_DATABASE_URL");
        if !command.get_envs().any(|(name, _)| name == "RUST_LOG") {
            command.env("RUST_LOG", "warn");
        }
        let process = Process::try_spawn(&mut command)?;
        match addresses(&process.first_line)[..] {
            [addr, admin, ..] => Ok(Self {
                process,
                addr,
                admin,
            }),
            _ => Err(format!("unexpected first line: {}", process.first_line)),
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

/// The addresses in `idemkey proxy: listening on http://ADDR, admin on http://ADMIN, ...`.
fn addresses(line: &str) -> Vec<SocketAddr> {
    line.split("http://")
        .skip(1)
        .filter_map(|rest| rest.split([',', ' ']).next()?.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::addresses;

    #[test]
    fn the_listening_line_names_the_proxy_and_its_admin() {
        let line = "idemkey proxy: listening on http://127.0.0.1:4322, admin on http://127.0.0.1:9, forwarding to http://127.0.0.1:8 (records in sqlite://x)";
        let ports: Vec<u16> = addresses(line).iter().map(|a| a.port()).collect();
        assert_eq!(ports[..2], [4322, 9]);
        assert!(addresses("hello").is_empty());
    }
}
