//! The HTTP workloads: create with and without a key, replay against a plain GET, and a mix
//! of new keys and retries.

use std::sync::Arc;

use anyhow::{Context, bail};
use bytes::Bytes;
use http::StatusCode;
use rand::Rng;

use super::mysql::dbstatus;
use crate::ctx::Ctx;
use crate::harness::client::{Answer, note_body, note_id};
use crate::harness::report::{Ratio, WorkloadReport};
use crate::harness::runner::{self, Op, Worker};
use crate::targets;

/// How many recent keys a worker of the mixed workload may retry.
const RECENT: usize = 64;

/// `POST /v1/notes` with a fresh key each time (`keyed`), or with no key at all.
pub(crate) struct Create {
    /// Whether the request carries an `Idempotency-Key`.
    pub(crate) keyed: bool,
    /// Makes keys and titles unique to this run and this side.
    pub(crate) prefix: String,
}

impl Op for Create {
    async fn call(&self, worker: &mut Worker) -> Result<usize, u16> {
        let seq = worker.next_seq();
        let key = format!("{}-{}-{seq}", self.prefix, worker.id);
        let body = note_body(&key);
        let answer = send_create(worker, self.keyed.then_some(key.as_str()), body).await?;
        expect(&answer, StatusCode::CREATED, false, 0)
    }
}

/// The same keyed create again and again: every answer is a replay.
pub(crate) struct Replay {
    key: String,
    body: Bytes,
}

impl Replay {
    /// `POST /v1/notes` with `body` under `key`, whose record is complete.
    pub(crate) fn new(key: String, body: Bytes) -> Self {
        Self { key, body }
    }
}

impl Op for Replay {
    async fn call(&self, worker: &mut Worker) -> Result<usize, u16> {
        let answer = send_create(worker, Some(&self.key), self.body.clone()).await?;
        expect(&answer, StatusCode::CREATED, true, 0)
    }
}

/// `GET` of one path, expecting 200.
pub(crate) struct Get {
    path: String,
}

impl Get {
    /// `GET path`.
    pub(crate) fn new(path: String) -> Self {
        Self { path }
    }
}

impl Op for Get {
    async fn call(&self, worker: &mut Worker) -> Result<usize, u16> {
        let conn = worker.conn.as_mut().ok_or(0_u16)?;
        let answer = conn.get(&self.path).await.map_err(|_| 0_u16)?;
        expect(&answer, StatusCode::OK, false, 0)
    }
}

/// New keys, and now and then a retry of one of the worker's recent keys (class 1).
pub(crate) struct Mixed {
    prefix: String,
    retry_percent: u32,
}

impl Op for Mixed {
    fn classes(&self) -> usize {
        2
    }

    async fn call(&self, worker: &mut Worker) -> Result<usize, u16> {
        let retry =
            !worker.recent.is_empty() && worker.rng.random_range(0..100) < self.retry_percent;
        let seq = if retry {
            let at = worker.rng.random_range(0..worker.recent.len());
            worker.recent[at]
        } else {
            let seq = worker.next_seq();
            if worker.recent.len() == RECENT {
                worker.recent.pop_front();
            }
            worker.recent.push_back(seq);
            seq
        };
        let key = format!("{}-{}-{seq}", self.prefix, worker.id);
        let answer = send_create(worker, Some(&key), note_body(&key)).await?;
        expect(&answer, StatusCode::CREATED, retry, usize::from(retry))
    }
}

async fn send_create(worker: &mut Worker, key: Option<&str>, body: Bytes) -> Result<Answer, u16> {
    let conn = worker.conn.as_mut().ok_or(0_u16)?;
    conn.create(key, body).await.map_err(|_| 0_u16)
}

fn expect(answer: &Answer, status: StatusCode, replayed: bool, class: usize) -> Result<usize, u16> {
    if answer.status == status && answer.replayed == replayed {
        Ok(class)
    } else {
        Err(answer.status.as_u16())
    }
}

/// Create with a fresh key against create without a key, on the same server.
pub(crate) async fn create(ctx: &Ctx, workers: &mut Vec<Worker>) -> (WorkloadReport, Vec<Ratio>) {
    let bar = ctx.bar("create", ctx.rounds);
    let keyed = Arc::new(Create {
        keyed: true,
        prefix: format!("{}-k", ctx.prefix),
    });
    let plain = Arc::new(Create {
        keyed: false,
        prefix: format!("{}-n", ctx.prefix),
    });
    let (a, b, status) = dbstatus::pair(ctx, &keyed, &plain, workers, &bar).await;
    bar.finish_and_clear();
    let (a, b) = (
        a[0].summary("create with a fresh key"),
        b[0].summary("create without a key"),
    );
    let name = "create with key / without key (throughput)";
    let ratio = match ctx.create_bar() {
        Some(bar) => targets::ratio(bar, name, a.throughput, b.throughput),
        None => Ratio::info(name, a.throughput, b.throughput),
    };
    let notes = dbstatus::notes(status, &a, &b).await;
    let mut report = WorkloadReport::new("create", vec![a, b]);
    report.notes = notes;
    (report, vec![ratio])
}

/// Replays of one key against `GET /v1/notes/{id}` of the note it created.
pub(crate) async fn replay(
    ctx: &Ctx,
    workers: &mut Vec<Worker>,
) -> anyhow::Result<(WorkloadReport, Vec<Ratio>)> {
    let key = format!("{}-replay", ctx.prefix);
    let body = note_body(&key);
    let conn = workers[0].conn.as_mut().context("no connection")?;
    let first = conn.create(Some(&key), body.clone()).await?;
    if first.status != StatusCode::CREATED {
        bail!(
            "the replay workload's first create answered {}",
            first.status
        );
    }
    let path = format!("/v1/notes/{}", note_id(&first)?);
    let bar = ctx.bar("replay", ctx.rounds);
    let replay = Arc::new(Replay { key, body });
    let get = Arc::new(Get { path });
    let (a, b) = runner::pair(&replay, &get, workers, ctx.budget, ctx.rounds, &bar).await;
    bar.finish_and_clear();
    let (a, b) = (
        a[0].summary("replay of one key"),
        b[0].summary("GET /v1/notes/{id}"),
    );
    let ratio = targets::ratio(
        ctx.replay_bar(),
        "replay / GET of the note (throughput)",
        a.throughput,
        b.throughput,
    );
    Ok((WorkloadReport::new("replay", vec![a, b]), vec![ratio]))
}

/// 90 % new keys, 10 % retries of recent keys.
pub(crate) async fn mixed(ctx: &Ctx, workers: &mut Vec<Worker>) -> WorkloadReport {
    let bar = ctx.bar("mixed", ctx.rounds);
    let op = Arc::new(Mixed {
        prefix: format!("{}-m", ctx.prefix),
        retry_percent: 10,
    });
    let classes = runner::single(&op, workers, ctx.budget, ctx.rounds, &bar).await;
    bar.finish_and_clear();
    let mut all = classes[0].clone();
    all.merge(&classes[1]);
    let sides = vec![
        all.summary("mixed: all requests"),
        classes[0].summary("mixed: new keys (90 %)"),
        classes[1].summary("mixed: retries (10 %)"),
    ];
    WorkloadReport::new("mixed", sides)
}
