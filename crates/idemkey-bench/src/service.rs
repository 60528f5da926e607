//! The processes the bench measures when it starts them: the given `idemkey` binary's
//! `serve` or `proxy`, started through test-support ([`ServeSpec`], [`Proxy`]) on a free
//! port, its CPU time watched ([`cpu::watch_server`]) until it is stopped.

use std::net::SocketAddr;
use std::path::Path;

use anyhow::Context;
use idemkey_notes::Mode;
use idemkey_test_support::process::proxy::Proxy;
use idemkey_test_support::process::serve::ServeSpec;

use crate::harness::cpu;

/// A running `idemkey serve` or `idemkey proxy`; killed when dropped, if [`Server::stop`]
/// was not called.
pub(crate) struct Server {
    /// Where it listens.
    pub(crate) addr: SocketAddr,
    /// The `Serve` or `Proxy`: dropping it kills the process.
    _process: Box<dyn Send>,
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
        let mut args: Vec<String> = ["--mode", &mode.to_string(), "--optional-key"]
            .map(str::to_owned)
            .into();
        args.extend_from_slice(flags);
        args.extend(["--token".to_owned(), format!("bench={token}")]);
        let mut spec = ServeSpec::new(idemkey, database_url, &[])
            .without_test_actors()
            .rust_log(&rust_log());
        spec.args = args;
        let serve = blocking(move || spec.try_start()).await?;
        cpu::watch_server(Some(serve.pid()));
        Ok(Self {
            addr: serve.addr,
            _process: Box::new(serve),
        })
    }

    /// Starts `idemkey proxy` in front of `upstream`, its records in `database_url`, its
    /// admin routes on a free port of their own, with `flags` besides.
    pub(crate) async fn start_proxy(
        idemkey: &Path,
        upstream: SocketAddr,
        database_url: &str,
        flags: &[String],
    ) -> anyhow::Result<Self> {
        let (idemkey, url) = (idemkey.to_owned(), database_url.to_owned());
        let flags = flags.to_vec();
        let proxy = blocking(move || {
            let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
            Proxy::try_start(
                idemkey,
                &format!("http://{upstream}"),
                &url,
                &flags,
                &rust_log(),
            )
        })
        .await?;
        cpu::watch_server(Some(proxy.process.child.id()));
        Ok(Self {
            addr: proxy.addr,
            _process: Box::new(proxy),
        })
    }

    /// Kills the server and waits for it to exit.
    pub(crate) async fn stop(self) {
        cpu::watch_server(None);
        // Killing waits for the process: off the runtime's threads.
        let _ = tokio::task::spawn_blocking(move || drop(self)).await;
    }
}

/// The children's `RUST_LOG`: the bench's own, or `warn`.
fn rust_log() -> String {
    std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into())
}

/// Runs a start that waits for the child's first line, off the runtime's threads.
async fn blocking<T: Send + 'static>(
    start: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> anyhow::Result<T> {
    tokio::task::spawn_blocking(start)
        .await
        .context("the start of a child process panicked")?
        .map_err(anyhow::Error::msg)
}
