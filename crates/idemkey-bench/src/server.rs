//! The service under test when the bench starts it: the given `idemkey` binary's `serve` (or,
//! for the proxy workloads, its `proxy`), as a child process on a free port, killed at the end.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use idemkey_notes::Mode;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// How long the child may take to print its address.
const STARTUP: Duration = Duration::from_secs(30);

/// A running `idemkey serve` or `idemkey proxy`; killed when dropped, if [`Server::stop`]
/// was not called.
pub(crate) struct Server {
    child: Child,
    /// Where it listens.
    pub(crate) addr: SocketAddr,
}

impl Server {
    /// Starts `idemkey serve` on `database_url` in `mode`, with keys optional (so the same
    /// handler also runs unrecorded) and one actor, `bench`, whose secret is `token`.
    pub(crate) async fn start(
        idemkey: &Path,
        database_url: &str,
        mode: Mode,
        flags: &[String],
        token: &str,
    ) -> anyhow::Result<Self> {
        let mut args: Vec<String> = [
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--database-url",
            database_url,
            "--mode",
            &mode.to_string(),
            "--optional-key",
        ]
        .map(str::to_owned)
        .into();
        args.extend_from_slice(flags);
        args.extend(["--token".to_owned(), format!("bench={token}")]);
        Self::spawn(idemkey, "idemkey serve", &args).await
    }

    /// Starts `idemkey proxy` in front of `upstream`, its records in `database_url`, its
    /// admin routes on a free port of their own, with `flags` besides.
    pub(crate) async fn start_proxy(
        idemkey: &Path,
        upstream: SocketAddr,
        database_url: &str,
        flags: &[String],
    ) -> anyhow::Result<Self> {
        let mut args: Vec<String> = [
            "proxy",
            "--upstream",
            &format!("http://{upstream}"),
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
            "--database-url",
            database_url,
        ]
        .map(str::to_owned)
        .into();
        args.extend_from_slice(flags);
        Self::spawn(idemkey, "idemkey proxy", &args).await
    }

    /// Runs the `idemkey` binary with `args`; `name` names it in errors. Its first line on
    /// stdout says where it listens.
    async fn spawn(idemkey: &Path, name: &str, args: &[String]) -> anyhow::Result<Self> {
        let mut child = Command::new(idemkey)
            .args(args)
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start {name} ({})", idemkey.display()))?;
        let stdout = child.stdout.take().context("no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(STARTUP, lines.next_line())
            .await
            .with_context(|| format!("{name} did not start in time"))??
            .with_context(|| format!("{name} exited before listening (see its errors above)"))?;
        let addr = parse_listening(name, &line)?;
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

/// The address in `idemkey serve: listening on http://ADDR (...)` or `idemkey proxy:
/// listening on http://ADDR, admin on ...`; `name` names the child in the error.
pub(crate) fn parse_listening(name: &str, line: &str) -> anyhow::Result<SocketAddr> {
    let Some((_, rest)) = line.split_once("listening on http://") else {
        bail!("unexpected first line from {name}: {line:?}");
    };
    let addr = rest
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .trim_end_matches(',');
    addr.parse()
        .with_context(|| format!("bad address {addr:?} in {line:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listening_line_parses() {
        let line = "idemkey serve: listening on http://127.0.0.1:4321 (atomic mode, sqlite://x)";
        assert_eq!(parse_listening("serve", line).unwrap().port(), 4321);
        let line = "idemkey proxy: listening on http://127.0.0.1:4322, admin on http://127.0.0.1:9, forwarding to http://127.0.0.1:8 (records in sqlite://x)";
        assert_eq!(parse_listening("proxy", line).unwrap().port(), 4322);
        let error = parse_listening("idemkey proxy", "hello").unwrap_err();
        assert!(error.to_string().contains("from idemkey proxy"), "{error}");
    }
}
