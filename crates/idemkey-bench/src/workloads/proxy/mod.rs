//! The proxy workloads: `idemkey proxy` as a child process, in front of the bench's own
//! in-memory notes API ([`upstream`]), its records in the run's database.
//!
//! - `proxy-create`: a create with a fresh key through the proxy against the same without a
//!   key, which the proxy forwards unrecorded: what recording costs the proxy;
//! - `proxy-replay`: one key's replays through the proxy against the `GET` of its note, which
//!   the proxy forwards;
//! - `proxy-direct`: a key-less create through the proxy against the same straight to the
//!   API: what forwarding costs;
//! - `proxy-store`: the store operations of a keyed create through the proxy alone, in this
//!   process without HTTP (lookup if the store looks first, claim with the caps' check,
//!   complete), against the key-less create the proxy forwards: the highest keyed /
//!   forwarded ratio the store allows, were the proxy free.
//!
//! The bench is one actor to the proxy: its requests carry `Authorization: Bearer TOKEN`, a
//! token of the run's own, whose digest is the records' actor. Per-actor caps stay on (their
//! check is part of every new key's cost) but are set past what a run reaches. With Redis
//! records the retention is 10 minutes, so a shared Redis drops a run's records soon after
//! it, without a flush.
//!
//! The API runs on a thread of this process: "server CPU" is the proxy's, and each workload
//! notes the API's own CPU per request.

mod pair;
mod store;
mod upstream;

use std::sync::Arc;

use anyhow::{Context, bail};
use http::StatusCode;
use idemkey_server::is_redis;

use crate::ctx::Ctx;
use crate::harness::args::Workload;
use crate::harness::client::{Conn, Target, note_body, note_id};
use crate::harness::report::{Ratio, WorkloadReport};
use crate::harness::runner::{OnAlt, Worker};
use crate::service::Server;
use crate::targets::{self, Id};
use crate::workloads::http::{Create, Get, Replay};
use pair::{BYTES_CAP, RECORDS_CAP, pair, report};
use upstream::Upstream;

/// How long the proxy keeps records in Redis, which the bench does not clean up itself.
const REDIS_RETENTION: &str = "10m";

/// Runs the proxy `workloads` with the proxy's records in `database_url`; `token` is the
/// bench's credential, `extra` the proxy's flags asked for (the replay cache's).
pub(crate) async fn run(
    ctx: &Ctx,
    workloads: &[Workload],
    database_url: &str,
    token: &str,
    extra: &[String],
) -> anyhow::Result<(Vec<WorkloadReport>, Vec<Ratio>)> {
    let upstream = Upstream::start().await?;
    let mut flags = proxy_flags(database_url);
    flags.extend_from_slice(extra);
    let proxy = Server::start_proxy(ctx.idemkey()?, upstream.addr, database_url, &flags).await?;
    let result = measure(ctx, workloads, database_url, &proxy, &upstream, token).await;
    proxy.stop().await;
    drop(upstream);
    result
}

/// The flags the proxy gets besides its upstream, addresses and database.
fn proxy_flags(database_url: &str) -> Vec<String> {
    let mut flags = vec![
        "--max-records-per-actor".to_owned(),
        RECORDS_CAP.to_owned(),
        "--max-bytes-per-actor".to_owned(),
        BYTES_CAP.to_owned(),
    ];
    if is_redis(database_url) {
        flags.extend(["--retention".to_owned(), REDIS_RETENTION.to_owned()]);
    }
    flags
}

async fn measure(
    ctx: &Ctx,
    workloads: &[Workload],
    database_url: &str,
    proxy: &Server,
    upstream: &Upstream,
    token: &str,
) -> anyhow::Result<(Vec<WorkloadReport>, Vec<Ratio>)> {
    let through = Target::new(proxy.addr, token)?;
    let direct = Target::new(upstream.addr, token)?;
    let needs_direct = workloads.contains(&Workload::ProxyDirect);
    let mut workers = Vec::new();
    for id in 0..ctx.concurrency {
        let mut worker = Worker::new(id, Some(Conn::open(&through).await?));
        if needs_direct {
            worker.alt = Some(Conn::open(&direct).await?);
        }
        workers.push(worker);
    }
    let mut reports = Vec::new();
    let mut ratios = Vec::new();
    for workload in workloads {
        let (report, ratio) = match workload {
            Workload::ProxyCreate => create(ctx, upstream, &mut workers).await,
            Workload::ProxyReplay => replay(ctx, upstream, &mut workers).await?,
            Workload::ProxyDirect => direct_create(ctx, upstream, &mut workers).await,
            Workload::ProxyStore => store::store(ctx, upstream, database_url, &mut workers).await?,
            other => bail!("{other:?} is not a proxy workload"),
        };
        reports.push(report);
        ratios.push(ratio);
    }
    Ok((reports, ratios))
}

/// A fresh key through the proxy against no key through the proxy.
async fn create(
    ctx: &Ctx,
    upstream: &Upstream,
    workers: &mut Vec<Worker>,
) -> (WorkloadReport, Ratio) {
    let keyed = Arc::new(Create {
        keyed: true,
        prefix: format!("{}-pk", ctx.prefix),
    });
    let plain = Arc::new(Create {
        keyed: false,
        prefix: format!("{}-pn", ctx.prefix),
    });
    let names = [
        "create with a fresh key, through the proxy",
        "create without a key, forwarded by the proxy",
    ];
    let (a, b, notes) = pair(
        ctx,
        "proxy-create",
        upstream,
        &keyed,
        &plain,
        workers,
        names,
    )
    .await;
    let ratio = targets::ratio(
        ctx.proxy_create_bar(),
        "proxy: keyed create / key-less create forwarded (throughput)",
        a.throughput,
        b.throughput,
    );
    (report("proxy-create", a, b, notes), ratio)
}

/// One key's replays through the proxy against the GET of its note through the proxy.
async fn replay(
    ctx: &Ctx,
    upstream: &Upstream,
    workers: &mut Vec<Worker>,
) -> anyhow::Result<(WorkloadReport, Ratio)> {
    let key = format!("{}-proxy-replay", ctx.prefix);
    let body = note_body(&key);
    let conn = workers[0].conn.as_mut().context("no connection")?;
    let first = conn.create(Some(&key), body.clone()).await?;
    if first.status != StatusCode::CREATED || first.replayed {
        bail!(
            "the proxy-replay workload's first create answered {}{}",
            first.status,
            if first.replayed { " (a replay)" } else { "" }
        );
    }
    let path = format!("/v1/notes/{}", note_id(&first)?);
    let replay = Arc::new(Replay::new(key, body));
    let get = Arc::new(Get::new(path));
    let names = [
        "replay of one key, through the proxy",
        "GET /v1/notes/{id}, forwarded by the proxy",
    ];
    let (a, b, notes) = pair(ctx, "proxy-replay", upstream, &replay, &get, workers, names).await;
    let ratio = targets::ratio(
        Id::ProxyReplay,
        "proxy: replay / GET forwarded (throughput)",
        a.throughput,
        b.throughput,
    );
    Ok((report("proxy-replay", a, b, notes), ratio))
}

/// No key through the proxy against no key straight to the API.
async fn direct_create(
    ctx: &Ctx,
    upstream: &Upstream,
    workers: &mut Vec<Worker>,
) -> (WorkloadReport, Ratio) {
    let proxied = Arc::new(Create {
        keyed: false,
        prefix: format!("{}-pp", ctx.prefix),
    });
    let direct = Arc::new(OnAlt(Create {
        keyed: false,
        prefix: format!("{}-pd", ctx.prefix),
    }));
    let names = [
        "create without a key, forwarded by the proxy",
        "create without a key, straight to the API",
    ];
    let (a, b, notes) = pair(
        ctx,
        "proxy-direct",
        upstream,
        &proxied,
        &direct,
        workers,
        names,
    )
    .await;
    let ratio = Ratio::info(
        "proxy: key-less create through the proxy / straight to the API (throughput)",
        a.throughput,
        b.throughput,
    );
    (report("proxy-direct", a, b, notes), ratio)
}
