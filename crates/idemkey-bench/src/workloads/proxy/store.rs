//! `proxy-store`: the store operations of a keyed create through the proxy, in this process
//! without HTTP, against the key-less create the proxy forwards.

use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use idemkey_core::{
    ActorCaps, ClaimRequest, Fingerprint, Key, Operation, Store, StoredResponse, TryClaim,
};
use idemkey_server::{Database, is_redis};

use crate::ctx::Ctx;
use crate::harness::client::note_body;
use crate::harness::report::{Ratio, WorkloadReport};
use crate::harness::runner::{Op, Worker};
use crate::workloads::ceiling::stored_201;
use crate::workloads::http::Create;

use super::pair::{BYTES_CAP, RECORDS_CAP, pair, ratio_name, report};
use super::upstream::Upstream;

/// The lease of `proxy-store`'s claims, the proxy's default.
const LEASE: Duration = Duration::from_secs(30);

/// The retention of `proxy-store`'s records, the proxy's default.
const RETENTION: Duration = Duration::from_secs(24 * 3600);

/// The retention of `proxy-store`'s records in Redis: as the proxy's own (`--retention 10m`), so a shared
/// Redis drops them soon after the run.
const REDIS_RECORD_RETENTION: Duration = Duration::from_secs(600);

/// The store operations of a keyed create, in this process, against no key through the
/// proxy.
pub(super) async fn store(
    ctx: &Ctx,
    upstream: &Upstream,
    database_url: &str,
    workers: &mut Vec<Worker>,
) -> anyhow::Result<(WorkloadReport, Vec<Ratio>)> {
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
) -> anyhow::Result<(WorkloadReport, Vec<Ratio>)> {
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
    let ops = (&keyed, &plain);
    let (a, b, notes) = pair(ctx, "proxy-store", upstream, ops, workers, names).await;
    let ratio = Ratio::info(
        &ratio_name(
            "proxy: store operations of a keyed create / key-less create forwarded (throughput)",
            upstream,
        ),
        a.throughput,
        b.throughput,
    );
    let report = report("proxy-store", upstream, vec![a, b], notes);
    Ok((report, vec![ratio]))
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
