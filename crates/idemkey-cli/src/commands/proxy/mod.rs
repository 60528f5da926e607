//! `idemkey proxy`: lease mode in front of any HTTP API, in any language, without changing
//! its code (behaviour [§14](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#14-the-proxy)). The proxy itself is `idemkey_proxy`; this opens its store, loads
//! its configuration, serves its admin routes and announces where it listens.

mod args;

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;

use anyhow::Context;
use idemkey_proxy::{Proxy, ProxyConfig, Upstream};
use idemkey_server::{Database, RedisSetup, is_redis, redact};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;

pub(crate) use args::ProxyArgs;

/// Starts the proxy and runs it until SIGINT or SIGTERM.
pub(crate) async fn run(args: ProxyArgs) -> anyhow::Result<ExitCode> {
    idemkey_server::init_tracing();
    let mut config = match &args.config {
        Some(path) => ProxyConfig::load(path)?,
        None => ProxyConfig::default(),
    };
    args.flags_into(&mut config);
    let upstream = Upstream::parse(&args.upstream)?;
    if let Some(base) = &args.problem_base {
        idemkey_core::problem::set_type_base(base.clone())
            .map_err(|set| anyhow::anyhow!("the problem type base is already {set}"))?;
    }
    let metrics = PrometheusBuilder::new()
        .install_recorder()
        .context("cannot install the metrics recorder")?;
    let start = Start {
        args,
        config,
        upstream,
        metrics,
    };
    let args = &start.args;
    if is_redis(&args.database_url) && args.replay_cache.is_some() {
        anyhow::bail!(
            "--replay-cache is for SQL databases: with redis://, replays are cached by default, kept exact by Redis (--no-replay-cache turns that off)"
        );
    }
    let setup = RedisSetup {
        replicas: args.records_wait_replicas,
        fsync: args.records_wait_fsync,
        replay_cache: !args.no_replay_cache,
        tls_ca: args.records_tls_ca.clone(),
    };
    let store = Database::open_with(&args.database_url, true, setup).await?;
    let store = match args.replay_cache {
        Some(ttl) => store.with_replay_cache(ttl),
        None => store,
    };
    start.run(store).await?;
    Ok(ExitCode::SUCCESS)
}

/// Everything the proxy is started with.
struct Start {
    args: ProxyArgs,
    config: ProxyConfig,
    upstream: Upstream,
    metrics: PrometheusHandle,
}

impl Start {
    async fn run(self, store: Database) -> anyhow::Result<()> {
        let mut builder = Proxy::builder(self.upstream.clone(), store)
            .config(self.config)
            .retention(self.args.retention)
            .lease(self.args.lease);
        if let Some(grace) = self.args.owner_grace.0 {
            builder = builder.owner_grace(grace);
        }
        if let Some(secret) = &self.args.secret {
            builder = builder.secret(secret.as_bytes());
        }
        let proxy = builder.build()?;
        let listener = bind(self.args.listen).await?;
        let admin_listener = bind(self.args.admin_listen).await?;
        announce(
            &self.upstream,
            &self.args.database_url,
            listener.local_addr()?,
            admin_listener.local_addr()?,
        );
        let metrics = self.metrics;
        let limits = self.args.connections.limits();
        // The admin's sockets are bounded like the main port's, with a cap of their own:
        // health checks and scrapers need few, and never the main port's file descriptors.
        let admin_cap = self
            .args
            .connections
            .max_connections
            .min(ADMIN_MAX_CONNECTIONS);
        let admin = tokio::spawn(proxy.serve_admin(
            admin_listener,
            move || metrics.render(),
            limits.max_connections(admin_cap as usize),
            idemkey_server::shutdown(),
        ));
        proxy
            .serve(listener, limits, idemkey_server::shutdown())
            .await;
        admin.abort();
        tracing::info!("stopped");
        Ok(())
    }
}

/// The most connections the admin listener holds at once.
const ADMIN_MAX_CONNECTIONS: u32 = 64;

fn announce(upstream: &Upstream, database_url: &str, addr: SocketAddr, admin: SocketAddr) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "idemkey proxy: listening on http://{addr}, admin on http://{admin}, forwarding to {upstream} (records in {})",
        redact(database_url)
    );
    let _ = out.flush();
}

async fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    /// `idemkey proxy`'s flags alone.
    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        args: ProxyArgs,
    }

    /// The line `main` prints for `idemkey proxy` with these flags. The store cannot be
    /// opened, so a check that goes missing fails the test there instead of serving.
    async fn refusal(flags: &[&str]) -> String {
        let store = ["--database-url", "sqlite:///nonexistent/idemkey/proxy.db"];
        let all = std::iter::once("proxy")
            .chain(store)
            .chain(flags.iter().copied());
        let flags = Flags::try_parse_from(all).unwrap();
        crate::causes(&run(flags.args).await.unwrap_err())
    }

    /// `idemkey proxy`'s arguments with `flags`.
    fn parsed(flags: &[&str]) -> Result<ProxyArgs, clap::Error> {
        let all = ["proxy", "--upstream", "http://127.0.0.1:9"];
        Flags::try_parse_from(all.iter().chain(flags)).map(|flags| flags.args)
    }

    #[test]
    fn caps_come_from_the_flags_then_the_file_then_the_defaults() {
        use idemkey_core::ActorCaps;
        let caps = |flags: &[&str], file: &str| {
            let mut config: ProxyConfig = file.parse().unwrap();
            parsed(flags).unwrap().caps_into(&mut config);
            config.actor_caps().unwrap()
        };
        let defaults = ActorCaps::new()
            .max_records(args::DEFAULT_MAX_RECORDS_PER_ACTOR)
            .max_bytes(args::DEFAULT_MAX_BYTES_PER_ACTOR);
        assert_eq!(caps(&[], ""), defaults);
        let file = "max_records_per_actor = 5\nmax_bytes_per_actor = \"unlimited\"";
        assert_eq!(caps(&[], file), ActorCaps::new().max_records(5));
        let flags = [
            "--max-records-per-actor",
            "unlimited",
            "--max-bytes-per-actor",
            "1KiB",
        ];
        assert_eq!(caps(&flags, file), ActorCaps::new().max_bytes(1024));
    }

    #[test]
    fn a_bad_cap_is_refused_naming_the_flag() {
        for flags in [
            ["--max-records-per-actor", "0"],
            ["--max-bytes-per-actor", "lots"],
            ["--max-bytes-per-actor", "64MB"],
        ] {
            let message = parsed(&flags).unwrap_err().to_string();
            assert!(message.contains(flags[0]), "{message}");
        }
    }

    #[tokio::test]
    async fn an_upstream_with_credentials_is_one_line_without_its_password() {
        let line = refusal(&["--upstream", "http://app:s3cret@127.0.0.1:9"]).await;
        assert_eq!(
            line,
            "--upstream must not carry credentials (user:password@): \"http://app:***@127.0.0.1:9\""
        );
    }

    #[tokio::test]
    async fn a_refused_setting_is_one_line_naming_the_file_and_the_setting() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("proxy.toml");
        std::fs::write(&path, "[upstream]\ntimeout = \"0s\"\n").unwrap();
        let config = path.to_str().unwrap();
        let line = refusal(&["--upstream", "http://127.0.0.1:9", "--config", config]).await;
        assert_eq!(
            line,
            format!("invalid config {config}: [upstream] timeout must be at least 1ms: \"0s\"")
        );
    }
}
