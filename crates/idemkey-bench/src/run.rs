//! One run: the databases prepared, the service started if the run needs it, every workload
//! measured ([`crate::workloads::run_all`]), the proxy workloads with a proxy of their own,
//! everything removed, then the tables printed and the JSON written.

use std::process::ExitCode;

use anyhow::{Context, bail};

use crate::ctx::{Ctx, NO_IDEMKEY};
use crate::database::RunDatabase;
use crate::harness::args::{BenchArgs, Workload};
use crate::harness::client::{Target, resolve};
use crate::harness::cpu::loadavg;
use crate::harness::report::Report;
use crate::harness::runner::Budget;
use crate::service::Server;
use crate::workloads;

/// [`crate::run`] before its errors are made printable.
pub(crate) async fn bench(args: BenchArgs) -> anyhow::Result<ExitCode> {
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
        (Some(_), Some(url)) => Some(RunDatabase::existing(url)),
        (None, url) => Some(RunDatabase::prepare(url.as_deref(), &run).await?),
    };
    // The proxy's records get a database of their own, so that the notes service's tables
    // and the proxy's never meet.
    let proxy_fixture = if proxied {
        match RunDatabase::prepare(args.database_url.as_deref(), &format!("{run}_proxy")).await {
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
        serve_flags: args.serve_flags(),
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
    let result = workloads::run_all(args, ctx, &notes, target.as_ref()).await;
    if let Some(server) = server {
        server.stop().await;
    }
    let mut report = result?;
    if !proxied.is_empty() {
        // After the notes service has stopped: one server at a time shares the cores.
        let url = ctx.proxy_database_url.as_deref().context("no database")?;
        let token = format!("bench-{run}");
        let extra = args.proxy_flags();
        let (mut reports, mut ratios) =
            workloads::proxy::run(ctx, &proxied, &args.upstreams(), url, &token, &extra).await?;
        report.workloads.append(&mut reports);
        report.ratios.append(&mut ratios);
    }
    Ok(report)
}

fn setup(args: &BenchArgs, ctx: &Ctx, external: bool, run: &str) -> serde_json::Value {
    let redact = |url: &String| idemkey_server::redact(url);
    serde_json::json!({
        "run": run,
        "service": args.url.clone().unwrap_or_else(|| "started by the bench (idemkey serve --optional-key)".into()),
        "database": ctx.database_url.as_ref().map(redact),
        "proxy_database": ctx.proxy_database_url.as_ref().map(redact),
        "proxy_upstreams": args.upstreams().iter().map(|kind| kind.name()).collect::<Vec<_>>(),
        "mode": if external { "as configured".to_owned() } else { ctx.mode.to_string() },
        "serve_flags": if external { Vec::new() } else { ctx.serve_flags.clone() },
        "concurrency": ctx.concurrency,
        "budget_per_side": match ctx.budget {
            Budget::Time(t) => format!("{}s", t.as_secs_f64()),
            Budget::Requests(n) => format!("{n} requests"),
        },
        "rounds": ctx.rounds,
        "storm_clients": args.storm_clients,
        "broker": idemkey_server::redact(&args.broker),
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
