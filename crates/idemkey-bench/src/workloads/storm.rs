//! The duplicate storm: many clients on one key at a time, then the next key. Alternates with
//! a burst of as many distinct keys (the same queueing, no duplicates) and with lone requests.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use http::StatusCode;
use tokio::sync::Barrier;

use crate::ctx::Ctx;
use crate::harness::client::{Answer, Conn, note_body};
use crate::harness::limits::Limits;
use crate::harness::listing::count_titles;
use crate::harness::report::{Ratio, WorkloadReport};
use crate::harness::runner::Budget;
use crate::harness::stats::Samples;
use crate::targets::{self, Id};

/// Lone requests per round, one after the other.
const SINGLES: usize = 8;

/// What the storm measured.
#[derive(Default)]
struct Storm {
    winners: Samples,
    losers: Samples,
    replayed: u64,
    in_flight: u64,
    burst: Samples,
    single: Samples,
    keys: Vec<String>,
}

/// Runs the storm on `clients` connections of its own and checks one note per key.
pub(crate) async fn storm(
    ctx: &Ctx,
    clients: &mut Vec<Conn>,
) -> anyhow::Result<(WorkloadReport, Vec<Ratio>)> {
    let keys = match ctx.budget {
        Budget::Requests(n) => Some(n.div_ceil(clients.len() as u64).max(2)),
        Budget::Time(_) => None,
    };
    let bar = ctx.bar("storm", keys.unwrap_or(0).try_into().unwrap_or(u32::MAX));
    let mut storm = Storm::default();
    let started = Instant::now();
    for round in 0_u64.. {
        let done = match (keys, ctx.budget) {
            (Some(keys), _) => round >= keys,
            (None, Budget::Time(time)) => started.elapsed() >= time * 3,
            (None, Budget::Requests(_)) => true,
        };
        if done {
            break;
        }
        let prefix = format!("{}-s{round}", ctx.prefix);
        storm.duplicates(clients, &prefix).await;
        storm.distinct(clients, &prefix).await;
        storm.singles(&mut clients[0], &prefix).await;
        bar.inc(1);
    }
    bar.finish_and_clear();
    let (one, checked) = one_note_per_key(&mut clients[0], &storm.keys).await?;
    Ok(storm.report(clients.len(), one, checked))
}

impl Storm {
    /// Every client sends the same key at once.
    async fn duplicates(&mut self, clients: &mut Vec<Conn>, prefix: &str) {
        let key = format!("{prefix}-dup");
        let start = Instant::now();
        for (latency, answer) in at_once(clients, |_| key.clone()).await {
            match answer {
                Some(a) if a.status == StatusCode::CREATED && !a.replayed => {
                    self.winners.ok(latency)
                }
                Some(a) if a.status == StatusCode::CREATED => {
                    self.replayed += 1;
                    self.losers.ok(latency);
                }
                Some(a) if a.status == StatusCode::CONFLICT => {
                    self.in_flight += 1;
                    self.losers.ok(latency);
                }
                Some(a) => self.losers.error(a.status.as_u16()),
                None => self.losers.error(0),
            }
        }
        self.winners.elapsed += start.elapsed();
        self.losers.elapsed += start.elapsed();
        self.keys.push(key);
    }

    /// Every client sends a key of its own at once.
    async fn distinct(&mut self, clients: &mut Vec<Conn>, prefix: &str) {
        let start = Instant::now();
        for (latency, answer) in at_once(clients, |i| format!("{prefix}-{i}")).await {
            record(&mut self.burst, latency, answer.as_ref());
        }
        self.burst.elapsed += start.elapsed();
    }

    /// One client, one request at a time.
    async fn singles(&mut self, conn: &mut Conn, prefix: &str) {
        for i in 0..SINGLES {
            let key = format!("{prefix}-one-{i}");
            let start = Instant::now();
            let answer = conn.create(Some(&key), note_body(&key)).await.ok();
            let latency = start.elapsed();
            self.single.elapsed += latency;
            record(&mut self.single, latency, answer.as_ref());
        }
    }

    fn report(&self, clients: usize, one: u64, checked: u64) -> (WorkloadReport, Vec<Ratio>) {
        let sides = vec![
            self.winners
                .summary(&format!("storm: winners ({clients} clients, one key)")),
            self.losers.summary("storm: losers"),
            self.burst
                .summary(&format!("burst: {clients} distinct keys at once")),
            self.single.summary("single request, alone"),
        ];
        let (losers, single, burst) = (&sides[1], &sides[3], &sides[2]);
        let ratios = vec![
            targets::ratio(
                Id::StormOneNote,
                "storm: keys with exactly one note",
                one as f64,
                checked as f64,
            ),
            targets::ratio(
                Id::StormLoserP99,
                "storm: loser p99 / single-request p99",
                losers.p99_us,
                single.p99_us,
            ),
            Ratio::info(
                "storm: loser p99 / distinct-key burst p99",
                losers.p99_us,
                burst.p99_us,
            ),
        ];
        let mut report = WorkloadReport::new("storm", sides);
        report.notes.push(format!(
            "losers: {} replayed the winner's response, {} answered 409 request-in-flight",
            self.replayed, self.in_flight
        ));
        (report, ratios)
    }
}

fn record(samples: &mut Samples, latency: Duration, answer: Option<&Answer>) {
    match answer {
        Some(a) if a.status == StatusCode::CREATED && !a.replayed => samples.ok(latency),
        Some(a) => samples.error(a.status.as_u16()),
        None => samples.error(0),
    }
}

/// Sends one create per client, all released by one barrier; returns latency and answer.
async fn at_once(
    clients: &mut Vec<Conn>,
    key: impl Fn(usize) -> String,
) -> Vec<(Duration, Option<Answer>)> {
    let barrier = Arc::new(Barrier::new(clients.len()));
    let tasks: Vec<_> = clients
        .drain(..)
        .enumerate()
        .map(|(i, mut conn)| {
            let (barrier, key) = (barrier.clone(), key(i));
            tokio::spawn(async move {
                barrier.wait().await;
                let start = Instant::now();
                let answer = conn.create(Some(&key), note_body(&key)).await.ok();
                (conn, start.elapsed(), answer)
            })
        })
        .collect();
    let mut results = Vec::with_capacity(tasks.len());
    for task in tasks {
        let (conn, latency, answer) = task
            .await
            .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
        clients.push(conn);
        results.push((latency, answer));
    }
    results
}

/// How many of `keys` have exactly one note titled after them, counted with `GET /v1/notes`
/// (the list of every note of the bench's actor, hence its larger limits).
async fn one_note_per_key(conn: &mut Conn, keys: &[String]) -> anyhow::Result<(u64, u64)> {
    let answer = conn
        .get_within("/v1/notes", Limits::LISTING)
        .await
        .context("the storm's GET /v1/notes")?;
    anyhow::ensure!(
        answer.status == StatusCode::OK,
        "GET /v1/notes answered {}",
        answer.status
    );
    let counts = count_titles(&answer.body, keys)?;
    let one = counts.values().filter(|&&n| n == 1).count() as u64;
    Ok((one, keys.len() as u64))
}
