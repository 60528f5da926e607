//! The service under test when the bench starts it: this executable's `serve`, as a child
//! process on a free port, killed at the end.

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use idemkey_notes::Mode;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// How long the child may take to print its address.
const STARTUP: Duration = Duration::from_secs(30);

/// A running `idemkey serve`; killed when dropped, if [`Server::stop`] was not called.
pub(crate) struct Server {
    child: Child,
    /// Where it listens.
    pub(crate) addr: SocketAddr,
}

impl Server {
    /// Starts `idemkey serve` on `database_url` in `mode`, with keys optional (so the same
    /// handler also runs unrecorded) and one actor, `bench`, whose secret is `token`.
    pub(crate) async fn start(
        database_url: &str,
        mode: Mode,
        flags: &[String],
        token: &str,
    ) -> anyhow::Result<Self> {
        let exe = std::env::current_exe().context("cannot find this executable")?;
        let mut child = Command::new(exe)
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--database-url",
                database_url,
            ])
            .args(["--mode", &mode.to_string(), "--optional-key"])
            .args(flags)
            .args(["--token", &format!("bench={token}")])
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("cannot start idemkey serve")?;
        let stdout = child.stdout.take().context("no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(STARTUP, lines.next_line())
            .await
            .context("idemkey serve did not start in time")??
            .context("idemkey serve exited before listening (see its errors above)")?;
        let addr = parse_listening(&line)?;
        // Later lines, if any, are read and dropped so the child never blocks on its stdout.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        super::cpu::watch_server(child.id());
        Ok(Self { child, addr })
    }

    /// Kills the server and waits for it to exit.
    pub(crate) async fn stop(mut self) {
        super::cpu::watch_server(None);
        let _ = self.child.kill().await;
    }
}

/// The address in `idemkey serve: listening on http://ADDR (...)`.
pub(crate) fn parse_listening(line: &str) -> anyhow::Result<SocketAddr> {
    let Some((_, rest)) = line.split_once("listening on http://") else {
        bail!("unexpected first line from idemkey serve: {line:?}");
    };
    let addr = rest.split_whitespace().next().unwrap_or_default();
    addr.parse()
        .with_context(|| format!("bad address {addr:?} in {line:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listening_line_parses() {
        let line = "idemkey serve: listening on http://127.0.0.1:4321 (atomic mode, sqlite://x)";
        assert_eq!(parse_listening(line).unwrap().port(), 4321);
        assert!(parse_listening("hello").is_err());
    }
}
