//! `idemkey-bench`: what idempotency costs against the business write it protects. The
//! binary parses [`BenchArgs`] and calls [`run`]; the service it measures is the `serve` of
//! the `idemkey` binary it is given (`--idemkey PATH`), started as a child process, or any
//! service given with `--url`.
//!
//! Every workload compares two things measured against one server in one run, alternating
//! the two sides in short rounds so that drift hits both: create with a key against create
//! without one, a replay against a plain GET, a duplicate storm against a burst of distinct
//! keys and lone requests, the service against the raw two-row transaction (`ceiling`),
//! in-process, a router with the layer against the same router without it (`layer`),
//! keyed creates through the client middleware against plain reqwest (`middleware`), and, on
//! MySQL, the statements of a keyed create against those of a key-less one (`statements`),
//! and, through the `idemkey` binary's `proxy` in front of a small API the bench runs itself, a
//! keyed create against a forwarded key-less one, a replay against a forwarded GET, and a
//! forwarded create against one straight to the API (`proxy-create`, `proxy-replay`,
//! `proxy-direct`).
//!
//! The files: `args` the command line, `client` one keep-alive connection per worker,
//! `runner` rounds and workers, `workloads`, `storm` and `middleware` over HTTP, `ceiling`,
//! `layer` and `statements` without HTTP, `stats` histograms and `cpu` CPU times,
//! `dbstatus` a MySQL server's counters per side, `report` tables and JSON, `server` and
//! `fixture` the service (or the proxy) and the database the bench starts and removes,
//! `proxy` the proxy workloads and `upstream` the API behind their proxy; `limits`,
//! `listing` and `printable` keep a hostile service (`--url`) from growing the bench's
//! memory, hanging it, or writing to the terminal through it.

mod args;
mod ceiling;
mod client;
mod cpu;
mod dbstatus;
mod fixture;
mod layer;
mod limits;
mod listing;
mod middleware;
mod printable;
mod proxy;
mod report;
mod runner;
mod server;
mod statements;
mod stats;
mod storm;
mod upstream;
mod workloads;

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use idemkey_notes::Mode;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

pub use args::BenchArgs;
use args::Workload;
use client::{Conn, Target};
use fixture::Fixture;
use report::{Ratio, Report, WorkloadReport};
use runner::{Budget, Worker};
use server::Server;

/// The error of a run that would start `idemkey` without being given it.
const NO_IDEMKEY: &str = "the bench starts `idemkey serve` and `idemkey proxy`: give the binary \
     with --idemkey PATH (e.g. target/release/idemkey) or IDEMKEY_BIN, or measure a running \
     service with --url";

/// What every workload of a run shares.
pub(crate) struct Ctx {
    budget: Budget,
    rounds: u32,
    concurrency: usize,
    /// Makes keys and titles unique to this run.
    prefix: String,
    mode: Mode,
    /// The flags the started service gets beyond its mode.
    serve_flags: Vec<String>,
    /// The database, for the workloads that use it directly.
    database_url: Option<String>,
    /// Where the proxy workloads' proxy keeps its records.
    proxy_database_url: Option<String>,
    /// The `idemkey` binary the bench starts as the service and the proxy.
    idemkey: Option<PathBuf>,
}

impl Ctx {
    /// The target for keyed / key-less create: atomic mode 0.85 on SQLite and 0.70 on
    /// PostgreSQL and MySQL, lease mode 0.50 on SQLite and 0.45 on the others (0.8 with the
    /// records in Redis); none for a service measured from outside (`--url` without
    /// `--database-url`), whose database is unknown.
    fn create_target(&self) -> Option<f64> {
        if self.redis_records() {
            // Lease mode with the records in Redis.
            return Some(0.8);
        }
        let server = !self.database_url.as_deref()?.starts_with("sqlite");
        Some(match (self.mode, server) {
            (Mode::Lease, false) => 0.50,
            (Mode::Lease, true) => 0.45,
            (Mode::Atomic, true) => 0.70,
            (Mode::Atomic, false) => 0.85,
        })
    }

    /// The target for replay / GET: 1.0 in atomic mode, 0.9 in lease mode (where a replay
    /// also reads the record's owner) and with the records in Redis, 1.5 with the replay
    /// cache.
    fn replay_target(&self) -> f64 {
        if self.serve_flags.iter().any(|flag| flag == "--replay-cache") {
            1.5
        } else if self.redis_records() || self.mode == Mode::Lease {
            0.9
        } else {
            1.0
        }
    }

    /// The targets of the proxy's keyed create / forwarded key-less create and of its replay
    /// / forwarded GET, by where it keeps its records: 0.25 and 1.0 on SQLite, 0.30 and 1.0
    /// on the other SQL databases, 0.70 and 1.0 in Redis.
    fn proxy_targets(&self) -> (f64, f64) {
        match self.proxy_database_url.as_deref() {
            Some(url) if url.starts_with("redis") => (0.70, 1.0),
            Some(url) if url.starts_with("sqlite") => (0.25, 1.0),
            _ => (0.30, 1.0),
        }
    }

    /// Whether the started service keeps its records in Redis (`--records-url`).
    fn redis_records(&self) -> bool {
        self.serve_flags.iter().any(|flag| flag == "--records-url")
    }

    /// The `idemkey` binary to start; an error saying how to give it if none was.
    fn idemkey(&self) -> anyhow::Result<&Path> {
        self.idemkey.as_deref().context(NO_IDEMKEY)
    }

    /// A progress bar of `len` steps on stderr, hidden when stderr is not a terminal.
    fn bar(&self, name: &str, len: u32) -> ProgressBar {
        let target = if std::io::stderr().is_terminal() {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(Some(u64::from(len)), target);
        let style =
            ProgressStyle::with_template("{prefix:>8} {bar:30} {pos}/{len} rounds {elapsed}")
                .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        bar.set_prefix(name.to_owned());
        bar
    }
}

/// Runs the workloads, prints the tables, writes the JSON; exit 1 if a correctness check
/// (one note per key in the storm) failed. An error comes back as one printable line.
pub async fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    // The caller prints the error: escaped here, no message from below can reach the terminal
    // with a control character a hostile server put in it.
    bench(args)
        .await
        .map_err(|error| printable::printable_error(&error))
}

async fn bench(args: BenchArgs) -> anyhow::Result<ExitCode> {
    let workloads = Workload::expand(&args.workloads);
    let load_before = loadavg();
    let run = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let external = args.url.is_some();
    let notes = workloads.iter().any(|w| !w.is_proxy());
    let proxied = workloads.iter().any(|w| w.is_proxy());
    // Before any database is prepared: a run that cannot start its server stops here.
    let serves = !external && workloads.iter().any(|w| w.needs_service());
    if (serves || proxied) && args.idemkey.is_none() {
        bail!(NO_IDEMKEY);
    }
    if notes
        && args
            .database_url
            .as_deref()
            .is_some_and(idemkey_server::is_redis)
    {
        bail!(
            "--database-url redis://... holds the proxy's records only: run the proxy workloads \
             alone, or keep the notes service's records in Redis with --records-url"
        );
    }
    let fixture = match (&args.url, &args.database_url) {
        _ if !notes => None,
        (Some(_), None) => None,
        (Some(_), Some(url)) => Some(Fixture::existing(url)),
        (None, url) => Some(Fixture::prepare(url.as_deref(), &run).await?),
    };
    // The proxy's records get a database of their own, so that the notes service's tables
    // and the proxy's never meet.
    let proxy_fixture = if proxied {
        match Fixture::prepare(args.database_url.as_deref(), &format!("{run}_proxy")).await {
            Ok(fixture) => Some(fixture),
            Err(error) => {
                if let Some(fixture) = fixture {
                    fixture.remove().await;
                }
                return Err(error);
            }
        }
    } else {
        None
    };
    let ctx = Ctx {
        budget: args.budget(),
        rounds: args.rounds,
        concurrency: args.concurrency as usize,
        prefix: format!("bench-{run}"),
        mode: args.mode,
        serve_flags: serve_flags(&args),
        database_url: fixture.as_ref().map(|f| f.url.clone()),
        proxy_database_url: proxy_fixture.as_ref().map(|f| f.url.clone()),
        idemkey: args.idemkey.clone(),
    };
    // On SIGINT or SIGTERM the measurement is dropped (which kills the server it started)
    // and the database is still cleaned up.
    let result = tokio::select! {
        result = measure(&args, &ctx, &workloads, &run) => result,
        () = interrupted() => Err(anyhow::anyhow!("interrupted")),
    };
    for fixture in [fixture, proxy_fixture].into_iter().flatten() {
        fixture.remove().await;
    }
    let mut report = Report {
        setup: setup(&args, &ctx, external, &run),
        ..result?
    };
    report.setup["load_before"] = load_before.into();
    report.setup["load_after"] = loadavg().into();
    println!("{}", report.tables());
    if let Some(path) = &args.json {
        report.write_json(path)?;
    }
    Ok(if report.check_failed() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Starts the service if needed, runs every workload, stops the service; then the proxy
/// workloads, with a proxy of their own.
async fn measure(
    args: &BenchArgs,
    ctx: &Ctx,
    workloads: &[Workload],
    run: &str,
) -> anyhow::Result<Report> {
    let mut server = None;
    let target = if !workloads.iter().any(|w| w.needs_service()) {
        None
    } else if let (Some(url), Some(token)) = (&args.url, &args.token) {
        Some(Target::new(resolve(url).await?, token)?)
    } else {
        let url = ctx.database_url.as_deref().context("no database")?;
        let token = format!("bench-{run}");
        let started =
            Server::start(ctx.idemkey()?, url, ctx.mode, &ctx.serve_flags, &token).await?;
        let target = Target::new(started.addr, &token)?;
        server = Some(started);
        Some(target)
    };
    let (proxied, notes): (Vec<Workload>, Vec<Workload>) =
        workloads.iter().partition(|w| w.is_proxy());
    let result = run_all(args, ctx, &notes, target.as_ref()).await;
    if let Some(server) = server {
        server.stop().await;
    }
    let mut report = result?;
    if !proxied.is_empty() {
        // After the notes service has stopped: one server at a time shares the cores.
        let url = ctx.proxy_database_url.as_deref().context("no database")?;
        let token = format!("bench-{run}");
        let extra = proxy_flags(args);
        let (mut reports, mut ratios) = proxy::run(ctx, &proxied, url, &token, &extra).await?;
        report.workloads.append(&mut reports);
        report.ratios.append(&mut ratios);
    }
    Ok(report)
}

async fn run_all(
    args: &BenchArgs,
    ctx: &Ctx,
    workloads: &[Workload],
    target: Option<&Target>,
) -> anyhow::Result<Report> {
    let mut workers = Vec::new();
    if let Some(target) = target {
        for id in 0..ctx.concurrency {
            workers.push(Worker::new(id, Some(Conn::open(target).await?)));
        }
    }
    let mut reports = Vec::new();
    let mut ratios = Vec::new();
    for workload in workloads {
        let (report, mut found) = one(args, ctx, *workload, target, &mut workers).await?;
        reports.push(report);
        ratios.append(&mut found);
    }
    Ok(Report {
        setup: serde_json::Value::Null,
        workloads: reports,
        ratios,
    })
}

async fn one(
    args: &BenchArgs,
    ctx: &Ctx,
    workload: Workload,
    target: Option<&Target>,
    workers: &mut Vec<Worker>,
) -> anyhow::Result<(WorkloadReport, Vec<Ratio>)> {
    Ok(match (workload, target) {
        (Workload::Create, _) => workloads::create(ctx, workers).await,
        (Workload::Replay, _) => workloads::replay(ctx, workers).await?,
        (Workload::Mixed, _) => (workloads::mixed(ctx, workers).await, Vec::new()),
        (Workload::Storm, Some(target)) => {
            let mut clients = Vec::new();
            for _ in 0..args.storm_clients {
                clients.push(Conn::open(target).await?);
            }
            storm::storm(ctx, &mut clients).await?
        }
        (Workload::Ceiling, _) => {
            let url = ctx
                .database_url
                .as_deref()
                .context("ceiling needs --database-url (the service's database)")?;
            ceiling::ceiling(ctx, url, workers).await?
        }
        (Workload::Layer, _) => layer::layer(ctx).await?,
        (Workload::Statements, _) => {
            let url = ctx
                .database_url
                .as_deref()
                .filter(|url| idemkey_server::is_mysql(url))
                .context(
                    "statements runs on MySQL only (--database-url mysql://...); for SQLite and \
                     PostgreSQL see scripts/pgbench-atomic and scripts/pgbench-lease",
                )?;
            let pattern = statements::Pattern::of(
                ctx.mode,
                args.strategy,
                !args.no_lookup,
                args.separate_completion,
            );
            statements::statements(ctx, url, pattern).await?
        }
        (Workload::Middleware, Some(target)) => {
            middleware::middleware(ctx, target, workers).await?
        }
        (
            Workload::Storm
            | Workload::Middleware
            | Workload::All
            | Workload::ProxyCreate
            | Workload::ProxyReplay
            | Workload::ProxyDirect
            | Workload::ProxyStore,
            _,
        ) => {
            bail!("nothing to run for {workload:?}")
        }
    })
}

/// The socket address of an `http://HOST:PORT` URL.
async fn resolve(url: &str) -> anyhow::Result<SocketAddr> {
    let Some(rest) = url.strip_prefix("http://") else {
        bail!("--url must start with http://, got {url:?}");
    };
    let authority = rest.split('/').next().unwrap_or_default();
    let authority = if authority.contains(':') {
        authority.to_owned()
    } else {
        format!("{authority}:80")
    };
    tokio::net::lookup_host(&authority)
        .await
        .with_context(|| format!("cannot resolve {authority}"))?
        .next()
        .with_context(|| format!("no address for {authority}"))
}

/// Atomic mode's strategy and lookup, for the service the bench starts.
fn serve_flags(args: &BenchArgs) -> Vec<String> {
    let mut flags = vec!["--strategy".to_owned(), args.strategy.to_string()];
    if args.no_lookup {
        flags.push("--no-lookup".to_owned());
    }
    if args.separate_completion {
        flags.push("--separate-completion".to_owned());
    }
    if let Some(ttl) = &args.replay_cache {
        flags.extend(["--replay-cache".to_owned(), ttl.clone()]);
    }
    if let Some(url) = &args.records_url {
        flags.extend(["--records-url".to_owned(), url.clone()]);
    }
    if let Some(replicas) = args.records_wait_replicas {
        flags.extend(["--records-wait-replicas".to_owned(), replicas.to_string()]);
    }
    if args.records_wait_fsync {
        flags.push("--records-wait-fsync".to_owned());
    }
    if args.no_replay_cache {
        flags.push("--no-replay-cache".to_owned());
    }
    flags
}

/// The replay cache's flags, for the proxy the bench starts.
fn proxy_flags(args: &BenchArgs) -> Vec<String> {
    let mut flags = Vec::new();
    if let Some(ttl) = &args.replay_cache {
        flags.extend(["--replay-cache".to_owned(), ttl.clone()]);
    }
    if args.no_replay_cache {
        flags.push("--no-replay-cache".to_owned());
    }
    flags
}

fn setup(args: &BenchArgs, ctx: &Ctx, external: bool, run: &str) -> serde_json::Value {
    let redact = |url: &String| idemkey_server::redact(url);
    serde_json::json!({
        "run": run,
        "service": args.url.clone().unwrap_or_else(|| "started by the bench (idemkey serve --optional-key)".into()),
        "database": ctx.database_url.as_ref().map(redact),
        "proxy_database": ctx.proxy_database_url.as_ref().map(redact),
        "mode": if external { "as configured".to_owned() } else { ctx.mode.to_string() },
        "serve_flags": if external { Vec::new() } else { ctx.serve_flags.clone() },
        "concurrency": ctx.concurrency,
        "budget_per_side": match ctx.budget {
            Budget::Time(t) => format!("{}s", t.as_secs_f64()),
            Budget::Requests(n) => format!("{n} requests"),
        },
        "rounds": ctx.rounds,
        "storm_clients": args.storm_clients,
        "cpus": std::thread::available_parallelism().map(usize::from).unwrap_or(1),
        "version": env!("CARGO_PKG_VERSION"),
    })
}

async fn interrupted() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => tokio::select! {
                _ = tokio::signal::ctrl_c() => {},
                _ = terminate.recv() => {},
            },
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}

/// The 1, 5 and 15 minute load averages, to tell whether other work shared the machine.
fn loadavg() -> Option<String> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    Some(
        text.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
    )
}
