//! `proxy-replay`: one key's replays through the proxy against the `GET` of its note, which
//! the proxy forwards.

use std::sync::Arc;

use anyhow::{Context, bail};
use http::StatusCode;

use crate::ctx::Ctx;
use crate::harness::client::{note_body, note_id};
use crate::harness::report::{Ratio, WorkloadReport};
use crate::harness::runner::Worker;
use crate::targets::{self, Id};
use crate::workloads::http::{Get, Replay};

use super::pair::{pair, ratio_name, report};
use super::upstream::Upstream;

/// One key's replays through the proxy against the GET of its note through the proxy.
pub(super) async fn replay(
    ctx: &Ctx,
    upstream: &Upstream,
    workers: &mut Vec<Worker>,
) -> anyhow::Result<(WorkloadReport, Vec<Ratio>)> {
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
    let ops = (&replay, &get);
    let (a, b, notes) = pair(ctx, "proxy-replay", upstream, ops, workers, names).await;
    let ratio = targets::ratio(
        Id::ProxyReplay,
        &ratio_name("proxy: replay / GET forwarded (throughput)", upstream),
        a.throughput,
        b.throughput,
    );
    let report = report("proxy-replay", upstream, vec![a, b], notes);
    Ok((report, vec![ratio]))
}
