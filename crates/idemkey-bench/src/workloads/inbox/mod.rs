//! What the inbox costs a consumer: messages per second through `idemkey_inbox` (its record
//! committed with the business write, the acknowledgement after the commit) against a plain
//! consumer doing the same write in its own transaction and acknowledging after it; and with
//! the outbox (the published message written in the transaction, published after the
//! commit) against the plain consumer publishing after its commit, with the broker's
//! confirm. On JetStream or RabbitMQ (`--broker`), on the run's database.
//!
//! A round is a number of messages put in a stream or queue of their own first, then
//! consumed and timed from the consumer's start to the last acknowledgement. The sides of a
//! pair alternate (a b, b a, ...) after a warm-up round of each, and the ratio held to its
//! bar is the median of the pairs' ratios. Both consumers process the same number of
//! messages at once (`--concurrency`).

mod amqp;
mod db;
mod nats;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context as _, bail};
use idemkey_core::Operation;
use idemkey_inbox::{BoxError, Inbox, Outbox, Outgoing, Publisher};
use idemkey_server::{Database, on_sql_backend};
use idemkey_sqlx::SqlxStore;
use sqlx::{Pool, Transaction};
use tokio::sync::Notify;

use self::db::BenchDb;
use crate::ctx::Ctx;
use crate::harness::report::{Ratio, WorkloadReport};
use crate::harness::runner::Budget;
use crate::harness::stats::{Samples, median};
use crate::targets::{self, Id};

/// The messages each side consumes when the run is given a duration, not `--requests`.
const DEFAULT_MESSAGES: u64 = 10_000;

/// A side of a pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    /// Write, commit, acknowledge.
    Plain,
    /// Through the inbox: write and record, commit, acknowledge.
    Inbox,
    /// Write, commit, publish (confirmed), acknowledge.
    PlainPublishing,
    /// Through the inbox: write, record and outbox row, commit, acknowledge, publish
    /// (confirmed), outbox row removed.
    Outbox,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Self::Plain => "plain consumer: write, commit, ack",
            Self::Inbox => "inbox: write + record, commit, ack",
            Self::PlainPublishing => "plain consumer: write, commit, publish, ack",
            Self::Outbox => "inbox + outbox: write + record + outbox, commit, ack, publish",
        }
    }
}

/// One round of one side.
pub(crate) struct Round {
    /// Unique in the run: names the round's stream or queue and its messages.
    pub(crate) index: u32,
    pub(crate) count: u64,
    pub(crate) concurrency: usize,
    pub(crate) operation: Operation,
    prefix: String,
}

impl Round {
    /// Message `n`'s id, unique in the run.
    pub(crate) fn id(&self, n: u64) -> String {
        format!("{}-{}-{n}", self.prefix, self.index)
    }

    /// Message `n`'s payload: its order id.
    pub(crate) fn payload(&self, n: u64) -> Vec<u8> {
        self.id(n).into_bytes()
    }
}

/// The order a payload names.
pub(crate) fn order_of(payload: &[u8]) -> &str {
    std::str::from_utf8(payload).unwrap_or("")
}

/// Counts a round's messages handled, and wakes [`Tally::all`] at the last.
pub(crate) struct Tally {
    done: AtomicU64,
    of: u64,
    last: Notify,
}

impl Tally {
    pub(crate) fn new(of: u64) -> Self {
        Self {
            done: AtomicU64::new(0),
            of,
            last: Notify::new(),
        }
    }

    pub(crate) fn one(&self) {
        if self.done.fetch_add(1, Ordering::Relaxed) + 1 == self.of {
            // Stored if nobody waits yet: the wait that comes later completes at once.
            self.last.notify_one();
        }
    }

    /// Completes once every message is handled.
    pub(crate) async fn all(&self) {
        self.last.notified().await;
    }
}

/// The inbox's handler, for either broker: the write, and the message into the outbox if it
/// publishes.
pub(crate) struct Ship<'a> {
    pub(crate) publishes: Option<String>,
    pub(crate) tally: &'a Tally,
}

impl Ship<'_> {
    /// The handler's work on `payload`, in the record's transaction `tx`.
    pub(crate) async fn ship<DB: BenchDb>(
        &self,
        payload: &[u8],
        tx: &mut Transaction<'static, DB>,
        outbox: &mut Outbox,
    ) -> Result<(), BoxError> {
        DB::insert(&mut **tx, order_of(payload)).await?;
        if let Some(subject) = &self.publishes {
            outbox.publish(subject.clone(), payload.to_vec());
        }
        self.tally.one();
        Ok(())
    }
}

/// The plain consumer's work: the write in a transaction of its own, then, if given a
/// publisher, the message published to `subject` and confirmed.
pub(crate) async fn plain_write<DB: BenchDb, P: Publisher>(
    pool: &Pool<DB>,
    payload: &[u8],
    publisher: Option<&P>,
    subject: &str,
) -> Result<(), BoxError> {
    let order = order_of(payload);
    let mut tx = pool.begin().await?;
    DB::insert(&mut *tx, order).await?;
    tx.commit().await?;
    if let Some(publisher) = publisher {
        let message = Outgoing {
            id: format!("plain-{order}"),
            subject: subject.to_owned(),
            payload: payload.to_vec(),
        };
        publisher.publish(&message).await?;
    }
    Ok(())
}

/// The run's broker.
enum Broker {
    Nats(nats::Nats),
    Amqp(amqp::Amqp),
}

impl Broker {
    async fn connect(url: &str, run: &str) -> anyhow::Result<Self> {
        if url.starts_with("nats://") {
            Ok(Self::Nats(nats::Nats::connect(url, run).await?))
        } else if url.starts_with("amqp://") {
            Ok(Self::Amqp(amqp::Amqp::connect(url, run).await?))
        } else {
            bail!("--broker: expected nats://HOST:PORT or amqp://USER:PASS@HOST:PORT, got {url}")
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Self::Nats(_) => "JetStream",
            Self::Amqp(_) => "RabbitMQ",
        }
    }

    async fn round<DB: BenchDb>(
        &self,
        side: Side,
        round: &Round,
        store: &SqlxStore<DB>,
    ) -> anyhow::Result<Duration> {
        match self {
            Self::Nats(nats) => nats.round(side, round, store).await,
            Self::Amqp(amqp) => amqp.round(side, round, store).await,
        }
    }

    async fn close(self) {
        match self {
            Self::Nats(nats) => nats.close().await,
            Self::Amqp(amqp) => amqp.close().await,
        }
    }
}

/// Runs both pairs on `broker` and the run's database.
pub(crate) async fn inbox(ctx: &Ctx, broker: &str) -> anyhow::Result<(WorkloadReport, Vec<Ratio>)> {
    let url = ctx
        .database_url
        .as_deref()
        .context("inbox needs --database-url when --url is given")?;
    let database = Database::open_sql(url, true).await?;
    on_sql_backend!(
        database,
        store => measure(ctx, broker, store).await,
        _ => bail!("inbox needs a database, not Redis records")
    )
}

async fn measure<DB: BenchDb>(
    ctx: &Ctx,
    url: &str,
    store: SqlxStore<DB>,
) -> anyhow::Result<(WorkloadReport, Vec<Ratio>)> {
    DB::create_table(store.pool()).await?;
    let operation = Operation::new("bench-ship", "v1");
    Inbox::new(store.clone(), "bench", operation.clone())
        .migrate()
        .await?;
    let run = ctx.prefix.replace('-', "_");
    let broker = Broker::connect(url, &run).await?;
    let mut pairs = Pairs {
        ctx,
        broker: &broker,
        store: &store,
        operation,
        index: 0,
    };
    let measured = pairs.both().await;
    broker.close().await;
    store.close().await;
    measured
}

/// The rounds of a run, numbered as they go.
struct Pairs<'a, DB: BenchDb> {
    ctx: &'a Ctx,
    broker: &'a Broker,
    store: &'a SqlxStore<DB>,
    operation: Operation,
    index: u32,
}

impl<DB: BenchDb> Pairs<'_, DB> {
    async fn both(&mut self) -> anyhow::Result<(WorkloadReport, Vec<Ratio>)> {
        let mut sides = Vec::new();
        let mut ratios = Vec::new();
        let mut notes = Vec::new();
        let pairs = [
            (
                Side::Inbox,
                Side::Plain,
                Id::Inbox,
                "inbox / plain consumer",
            ),
            (
                Side::Outbox,
                Side::PlainPublishing,
                Id::InboxOutbox,
                "inbox with outbox / plain consumer publishing after its commit",
            ),
        ];
        for (a, b, id, name) in pairs {
            let (a_samples, b_samples, each) = self.pair(a, b).await?;
            let (a_sum, b_sum) = (a_samples.summary(a.name()), b_samples.summary(b.name()));
            let name = format!("{name}, {} (messages/s", self.broker.name());
            ratios.push(targets::ratio(
                id,
                &format!("{name}, median of {} pairs)", each.len()),
                median(&each),
                1.0,
            ));
            ratios.push(Ratio::info(
                &format!("{name}, all rounds)"),
                a_sum.throughput,
                b_sum.throughput,
            ));
            let each: Vec<String> = each.iter().map(|r| format!("{r:.3}")).collect();
            notes.push(format!(
                "{}: ratio of each pair: {}",
                a.name(),
                each.join(", ")
            ));
            sides.extend([a_sum, b_sum]);
        }
        notes.push(
            "latency columns: each round's time per message (the rounds are timed as a whole)"
                .to_owned(),
        );
        let mut report = WorkloadReport::new(format!("inbox ({})", self.broker.name()), sides);
        report.notes = notes;
        Ok((report, ratios))
    }

    /// A warm-up round of each side, then the rounds in alternating order; each side's
    /// samples, and each pair's ratio of a's throughput to b's.
    async fn pair(&mut self, a: Side, b: Side) -> anyhow::Result<(Samples, Samples, Vec<f64>)> {
        let (per_round, rounds) = self.per_round();
        let bar = self.ctx.bar("inbox", 2 * rounds + 2);
        for side in [a, b] {
            self.round(side, per_round / 2).await?;
            bar.inc(1);
        }
        let (mut a_samples, mut b_samples) = (Samples::default(), Samples::default());
        let mut each = Vec::new();
        for r in 0..rounds {
            let order = if r % 2 == 0 { [a, b] } else { [b, a] };
            let mut took = [Duration::ZERO; 2];
            for side in order {
                let elapsed = self.round(side, per_round).await?;
                bar.inc(1);
                let (samples, at) = match side == a {
                    true => (&mut a_samples, 0),
                    false => (&mut b_samples, 1),
                };
                record(samples, elapsed, per_round);
                took[at] = elapsed;
            }
            // Same messages on both sides: the throughput ratio is the inverse time ratio.
            each.push(took[1].as_secs_f64() / took[0].as_secs_f64().max(1e-9));
        }
        bar.finish_and_clear();
        Ok((a_samples, b_samples, each))
    }

    /// Messages per round, and rounds, of each side.
    fn per_round(&self) -> (u64, u32) {
        let total = match self.ctx.budget {
            Budget::Requests(n) => n,
            Budget::Time(_) => DEFAULT_MESSAGES,
        };
        let rounds = self.ctx.rounds.max(1);
        ((total / u64::from(rounds)).max(20), rounds)
    }

    async fn round(&mut self, side: Side, count: u64) -> anyhow::Result<Duration> {
        self.index += 1;
        let round = Round {
            index: self.index,
            count,
            concurrency: self.ctx.concurrency,
            operation: self.operation.clone(),
            prefix: self.ctx.prefix.clone(),
        };
        self.broker.round(side, &round, self.store).await
    }
}

/// A round of `count` messages that took `elapsed`, into `samples`: its time per message as
/// each message's latency.
fn record(samples: &mut Samples, elapsed: Duration, count: u64) {
    let each = elapsed / u32::try_from(count).unwrap_or(u32::MAX).max(1);
    for _ in 0..count {
        samples.ok(each);
    }
    samples.elapsed += elapsed;
}
