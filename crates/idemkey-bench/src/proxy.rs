//! The proxy workloads: `idemkey proxy` as a child process, in front of the bench's own
//! in-memory notes API ([`super::upstream`]), its records in the run's database.
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

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use http::StatusCode;
use idemkey_core::{
    ActorCaps, ClaimRequest, Fingerprint, Key, Operation, Store, StoredResponse, TryClaim,
};
use idemkey_server::{Database, is_redis};

use super::Ctx;
use super::args::Workload;
use super::ceiling::stored_201;
use super::client::{Conn, Target, note_body, note_id};
use super::cpu;
use super::report::{Ratio, WorkloadReport};
use super::runner::{self, Observer, OnAlt, Op, Worker};
use super::server::Server;
use super::stats::SideSummary;
use super::upstream::Upstream;
use super::workloads::{Create, Get, Replay};

/// The per-actor record cap given to the proxy: about a billion, never reached by a run,
/// while the check still runs as it does under the default cap.
const RECORDS_CAP: &str = "1000000000";

/// The per-actor byte cap given to the proxy: 1 TiB, never reached by a run.
const BYTES_CAP: &str = "1099511627776";

/// How long the proxy keeps records in Redis, which the bench does not clean up itself.
const REDIS_RETENTION: &str = "10m";

/// The lease of `proxy-store`'s claims, the proxy's default.
const LEASE: Duration = Duration::from_secs(30);

/// The retention of `proxy-store`'s records, the proxy's default.
const RETENTION: Duration = Duration::from_secs(24 * 3600);

/// The retention of `proxy-store`'s records in Redis: as [`REDIS_RETENTION`], so a shared
/// Redis drops them soon after the run.
const REDIS_RECORD_RETENTION: Duration = Duration::from_secs(600);

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
            Workload::ProxyStore => store(ctx, upstream, database_url, &mut workers).await?,
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
    let ratio = Ratio::at_least(
        "proxy: keyed create / key-less create forwarded (throughput)",
        a.throughput,
        b.throughput,
        ctx.proxy_targets().0,
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
    let ratio = Ratio::at_least(
        "proxy: replay / GET forwarded (throughput)",
        a.throughput,
        b.throughput,
        ctx.proxy_targets().1,
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

/// The store operations of a keyed create, in this process, against no key through the
/// proxy.
async fn store(
    ctx: &Ctx,
    upstream: &Upstream,
    database_url: &str,
    workers: &mut Vec<Worker>,
) -> anyhow::Result<(WorkloadReport, Ratio)> {
    let retention = if is_redis(database_url) {
        REDIS_RECORD_RETENTION
    } else {
        RETENTION
    };
    let caps = ActorCaps::new()
        .max_records(RECORDS_CAP.parse()?)
        .max_bytes(BYTES_CAP.parse()?);
    // The proxy's records are opened as `idemkey proxy` opens them, with its caps.
    let store = Database::open(database_url, true).await?.with_caps(caps)?;
    store_pair(ctx, upstream, store, retention, workers).await
}

async fn store_pair<S: Store>(
    ctx: &Ctx,
    upstream: &Upstream,
    store: S,
    retention: Duration,
    workers: &mut Vec<Worker>,
) -> anyhow::Result<(WorkloadReport, Ratio)> {
    let body = note_body("proxy-store");
    let keyed = Arc::new(StoreCreate {
        looks_first: store.lookup_first(),
        store,
        // An actor of the run's own: its records meet no other run's.
        actor: format!("{}-store", ctx.prefix),
        prefix: format!("{}-ps", ctx.prefix),
        fingerprint: Fingerprint::builder("POST", "/v1/notes")
            .content_type("application/json")
            .body(&body),
        response: stored_201(),
        retention,
    });
    let plain = Arc::new(Create {
        keyed: false,
        prefix: format!("{}-pf", ctx.prefix),
    });
    let first = if keyed.looks_first {
        "a keyed create's store operations alone: lookup; claim; complete"
    } else {
        "a keyed create's store operations alone: claim; complete"
    };
    let names = [first, "create without a key, forwarded by the proxy"];
    let (a, b, notes) = pair(ctx, "proxy-store", upstream, &keyed, &plain, workers, names).await;
    let ratio = Ratio::info(
        "proxy: store operations of a keyed create / key-less create forwarded (throughput)",
        a.throughput,
        b.throughput,
    );
    Ok((report("proxy-store", a, b, notes), ratio))
}

/// The store operations the proxy makes for a keyed create with a fresh key.
struct StoreCreate<S> {
    store: S,
    looks_first: bool,
    actor: String,
    prefix: String,
    fingerprint: Fingerprint,
    response: StoredResponse,
    retention: Duration,
}

impl<S: Store> Op for StoreCreate<S> {
    async fn call(&self, worker: &mut Worker) -> Result<usize, u16> {
        let seq = worker.next_seq();
        let key = format!("{}-{}-{seq}", self.prefix, worker.id);
        self.create(&key).await.map(|()| 0).map_err(|error| {
            tracing::warn!(error = %format!("{error:#}"), "store operations failed");
            500
        })
    }
}

impl<S: Store> StoreCreate<S> {
    async fn create(&self, key: &str) -> anyhow::Result<()> {
        let request = ClaimRequest::new(
            self.actor.as_str(),
            Operation::new("POST", "/v1/notes"),
            Key::parse(key.as_bytes())?,
            self.fingerprint,
        )
        .lease(LEASE)
        .retention(self.retention);
        if self.looks_first && self.store.lookup(&request.scope).await?.is_some() {
            bail!("a fresh key has a record");
        }
        let TryClaim::Claimed(claim) = self.store.try_claim(&request).await? else {
            bail!("a fresh key's claim met a record");
        };
        self.store.complete(&claim, &self.response).await?;
        Ok(())
    }
}

fn report(
    name: &'static str,
    a: SideSummary,
    b: SideSummary,
    notes: Vec<String>,
) -> WorkloadReport {
    let mut report = WorkloadReport::new(name, vec![a, b]);
    report.notes = notes;
    report
}

/// Runs `a` against `b` in alternating rounds, the API's CPU time observed around each;
/// the sides' summaries under `names`, and a note of the API's CPU per request.
async fn pair<A: Op, B: Op>(
    ctx: &Ctx,
    workload: &str,
    upstream: &Upstream,
    a: &Arc<A>,
    b: &Arc<B>,
    workers: &mut Vec<Worker>,
    names: [&str; 2],
) -> (SideSummary, SideSummary, Vec<String>) {
    let bar = ctx.bar(workload, ctx.rounds);
    let mut api = ApiCpu::new(upstream.tid);
    let (a, b) =
        runner::pair_observed(a, b, workers, (ctx.budget, ctx.rounds), &bar, &mut api).await;
    bar.finish_and_clear();
    let (a, b) = (a[0].summary(names[0]), b[0].summary(names[1]));
    let notes = api.note(&[&a, &b]).into_iter().collect();
    (a, b, notes)
}

/// The API's CPU time (its thread's, in this process) during each side's rounds.
struct ApiCpu {
    tid: Option<u32>,
    start: Option<Duration>,
    sides: [Duration; 2],
    /// Whether every reading succeeded.
    complete: bool,
}

impl ApiCpu {
    fn new(tid: Option<u32>) -> Self {
        Self {
            tid,
            start: None,
            sides: [Duration::ZERO; 2],
            complete: tid.is_some(),
        }
    }

    fn read(&self) -> Option<Duration> {
        cpu::thread(self.tid?)
    }

    /// `the API's CPU µs/req: A, B`, if it was read throughout.
    fn note(&self, sides: &[&SideSummary; 2]) -> Option<String> {
        if !self.complete {
            return None;
        }
        let per_request = |spent: Duration, side: &SideSummary| {
            if side.requests == 0 {
                "-".to_owned()
            } else {
                format!("{:.0}", spent.as_secs_f64() * 1e6 / side.requests as f64)
            }
        };
        Some(format!(
            "the API behind the proxy (a thread of the bench), CPU µs/req: {} ({}), {} ({})",
            per_request(self.sides[0], sides[0]),
            sides[0].name,
            per_request(self.sides[1], sides[1]),
            sides[1].name,
        ))
    }
}

impl Observer for ApiCpu {
    async fn before(&mut self, _side: usize) {
        self.start = self.read();
    }

    async fn after(&mut self, side: usize) {
        match (self.start.take(), self.read()) {
            (Some(start), Some(now)) => self.sides[side] += now.saturating_sub(start),
            _ => self.complete = false,
        }
    }
}
