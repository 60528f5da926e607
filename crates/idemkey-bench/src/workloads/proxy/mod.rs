//! The proxy workloads: `idemkey proxy` as a child process, in front of an API the bench
//! runs itself ([`upstream`]: notes in memory, or a row per create in a SQLite file at
//! `synchronous = NORMAL` or `FULL`, `--upstream`), its records in the run's database. Each
//! upstream asked for gets a proxy of its own and every proxy workload in turn.
//!
//! - `proxy-create`: a create with a fresh key through the proxy against the same without a
//!   key, which the proxy forwards unrecorded (what recording costs the proxy), and against
//!   the same straight to the API (what the proxy costs a client of the API), in the same
//!   rounds;
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
//! The API runs on threads of this process: "server CPU" is the proxy's, and each workload
//! notes the API's own CPU per request.

mod api_cpu;
mod creates;
mod pair;
mod replay;
mod store;
mod upstream;

use anyhow::bail;
use idemkey_server::is_redis;

use crate::ctx::Ctx;
use crate::harness::args::Workload;
use crate::harness::client::{Conn, Target};
use crate::harness::report::{Ratio, WorkloadReport};
use crate::harness::runner::Worker;
use crate::service::Server;
use pair::{BYTES_CAP, RECORDS_CAP};
use upstream::Upstream;
pub(crate) use upstream::UpstreamKind;

/// How long the proxy keeps records in Redis, which the bench does not clean up itself.
const REDIS_RETENTION: &str = "10m";

/// Runs the proxy `workloads` in front of each of `upstreams` in turn, with the proxy's
/// records in `database_url`; `token` is the bench's credential, `extra` the proxy's flags
/// asked for (the replay cache's).
pub(crate) async fn run(
    ctx: &Ctx,
    workloads: &[Workload],
    upstreams: &[UpstreamKind],
    database_url: &str,
    token: &str,
    extra: &[String],
) -> anyhow::Result<(Vec<WorkloadReport>, Vec<Ratio>)> {
    let mut reports = Vec::new();
    let mut ratios = Vec::new();
    for kind in upstreams {
        // Keys of their own in front of each API: every proxy of the run records into the
        // same database.
        let ctx = Ctx {
            prefix: format!("{}-{}", ctx.prefix, kind.name()),
            ..ctx.clone()
        };
        let upstream = Upstream::start(*kind, &format!("idemkey-{}-api", ctx.prefix)).await?;
        let mut flags = proxy_flags(database_url);
        flags.extend_from_slice(extra);
        let proxy =
            Server::start_proxy(ctx.idemkey()?, upstream.addr, database_url, &flags).await?;
        let result = measure(&ctx, workloads, database_url, &proxy, &upstream, token).await;
        proxy.stop().await;
        drop(upstream);
        let (mut found, mut measured) = result?;
        reports.append(&mut found);
        ratios.append(&mut measured);
    }
    Ok((reports, ratios))
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
    let mut workers = Vec::new();
    for id in 0..ctx.concurrency {
        let mut worker = Worker::new(id, Some(Conn::open(&through).await?));
        // `proxy-create` and `proxy-direct` also send straight to the API.
        worker.alt = Some(Conn::open(&direct).await?);
        workers.push(worker);
    }
    let mut reports = Vec::new();
    let mut ratios = Vec::new();
    for workload in workloads {
        let (report, mut found) = match workload {
            Workload::ProxyCreate => creates::create(ctx, upstream, &mut workers).await,
            Workload::ProxyReplay => replay::replay(ctx, upstream, &mut workers).await?,
            Workload::ProxyDirect => creates::direct(ctx, upstream, &mut workers).await,
            Workload::ProxyStore => store::store(ctx, upstream, database_url, &mut workers).await?,
            other => bail!("{other:?} is not a proxy workload"),
        };
        reports.push(report);
        ratios.append(&mut found);
    }
    Ok((reports, ratios))
}
