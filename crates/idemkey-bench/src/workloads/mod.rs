//! The workloads, each a pair of sides measured against one server in alternating rounds:
//! over HTTP ([`http`], [`storm`], [`middleware`]), without HTTP ([`ceiling`], [`layer`],
//! [`mysql`]), through `idemkey proxy` ([`proxy`]), and through a broker ([`inbox`]).

pub(crate) mod ceiling;
pub(crate) mod http;
pub(crate) mod inbox;
pub(crate) mod layer;
pub(crate) mod middleware;
pub(crate) mod mysql;
pub(crate) mod proxy;
pub(crate) mod storm;

use anyhow::{Context, bail};

use crate::ctx::Ctx;
use crate::harness::args::{BenchArgs, Workload};
use crate::harness::client::{Conn, Target};
use crate::harness::report::{Ratio, Report, WorkloadReport};
use crate::harness::runner::Worker;

/// Runs the notes service's `workloads` (not the proxy's) against `target`, if any, one
/// after the other on the same workers.
pub(crate) async fn run_all(
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
        (Workload::Create, _) => http::create(ctx, workers).await,
        (Workload::Replay, _) => http::replay(ctx, workers).await?,
        (Workload::Mixed, _) => (http::mixed(ctx, workers).await, Vec::new()),
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
        (Workload::Inbox, _) => inbox::inbox(ctx, &args.broker).await?,
        (Workload::Statements, _) => {
            let url = ctx
                .database_url
                .as_deref()
                .filter(|url| idemkey_server::is_mysql(url))
                .context(
                    "statements runs on MySQL only (--database-url mysql://...); for SQLite and \
                     PostgreSQL see scripts/pgbench-atomic and scripts/pgbench-lease",
                )?;
            let pattern = mysql::statements::Pattern::of(
                ctx.mode,
                args.strategy,
                !args.no_lookup,
                args.separate_completion,
            );
            mysql::statements::statements(ctx, url, pattern).await?
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
