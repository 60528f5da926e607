//! The workload on JetStream: each round's messages in a stream of their own, read by a
//! durable pull consumer; the published messages into one stream for the run.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures_util::StreamExt;
use idemkey_inbox::async_nats::header::NATS_MESSAGE_ID;
use idemkey_inbox::async_nats::jetstream::{self, Context, consumer::pull, stream};
use idemkey_inbox::async_nats::{self, HeaderMap};
use idemkey_inbox::nats::{self as inbox_nats, JetStreamPublisher};
use idemkey_inbox::{BoxError, Inbox, Outbox, Relay};
use idemkey_sqlx::SqlxStore;
use sqlx::Transaction;

use super::db::BenchDb;
use super::{Round, Ship, Side, Tally, plain_write};

/// The run's JetStream: its context, and the subject published to.
pub(crate) struct Nats {
    js: Context,
    run: String,
}

impl Nats {
    /// Connects, and creates the stream the run publishes to.
    pub(crate) async fn connect(url: &str, run: &str) -> anyhow::Result<Self> {
        let client = async_nats::connect(url)
            .await
            .with_context(|| format!("connecting to {url}"))?;
        let nats = Self {
            js: jetstream::new(client),
            run: run.to_owned(),
        };
        let shipped = nats.shipped();
        nats.js
            .get_or_create_stream(stream::Config {
                name: format!("BENCH_{}_SHIPPED", nats.run),
                subjects: vec![shipped],
                ..Default::default()
            })
            .await
            .map_err(|e| anyhow::anyhow!("creating the stream published to: {e}"))?;
        Ok(nats)
    }

    fn shipped(&self) -> String {
        format!("bench.{}.shipped", self.run)
    }

    /// Removes the run's streams.
    pub(crate) async fn close(self) {
        let _ = self
            .js
            .delete_stream(format!("BENCH_{}_SHIPPED", self.run))
            .await;
    }

    /// One round of `side`: `round.count` messages in a stream of their own, then consumed,
    /// timed from the first fetch to the last acknowledgement.
    pub(crate) async fn round<DB: BenchDb>(
        &self,
        side: Side,
        round: &Round,
        store: &SqlxStore<DB>,
    ) -> anyhow::Result<Duration> {
        let name = format!("BENCH_{}_{}", self.run, round.index);
        let subject = format!("bench.{}.{}", self.run, round.index);
        let stream = self
            .js
            .create_stream(stream::Config {
                name: name.clone(),
                subjects: vec![subject.clone()],
                ..Default::default()
            })
            .await
            .map_err(|e| anyhow::anyhow!("creating stream {name}: {e}"))?;
        self.preload(&subject, round).await?;
        let consumer = stream
            .create_consumer(pull::Config {
                durable_name: Some("bench".to_owned()),
                ..Default::default()
            })
            .await
            .map_err(|e| anyhow::anyhow!("creating the consumer: {e}"))?;
        let tally = Tally::new(round.count);
        let started = Instant::now();
        let consumed = match side {
            Side::Plain | Side::PlainPublishing => {
                self.plain(side, &consumer, store, round, &tally).await
            }
            Side::Inbox | Side::Outbox => self.inbox(side, &consumer, store, round, &tally).await,
        };
        let elapsed = started.elapsed();
        let _ = self.js.delete_stream(&name).await;
        consumed?;
        Ok(elapsed)
    }

    /// Publishes the round's messages, each under an id of its own, and waits for every
    /// acknowledgement of the stream.
    async fn preload(&self, subject: &str, round: &Round) -> anyhow::Result<()> {
        let mut acks = Vec::with_capacity(round.count as usize);
        for n in 0..round.count {
            let mut headers = HeaderMap::new();
            headers.insert(NATS_MESSAGE_ID, round.id(n).as_str());
            let payload = round.payload(n).into();
            let ack = self
                .js
                .publish_with_headers(subject.to_owned(), headers, payload)
                .await
                .map_err(|e| anyhow::anyhow!("preloading: {e}"))?;
            acks.push(ack);
        }
        for ack in acks {
            ack.await.map_err(|e| anyhow::anyhow!("preloading: {e}"))?;
        }
        Ok(())
    }

    /// The plain consumer: the write in its own transaction, then (publishing) the message
    /// published and confirmed, then the acknowledgement.
    async fn plain<DB: BenchDb>(
        &self,
        side: Side,
        consumer: &jetstream::consumer::PullConsumer,
        store: &SqlxStore<DB>,
        round: &Round,
        tally: &Tally,
    ) -> anyhow::Result<()> {
        let publisher =
            (side == Side::PlainPublishing).then(|| JetStreamPublisher::new(self.js.clone()));
        let shipped = self.shipped();
        let messages = consumer
            .messages()
            .await
            .map_err(|e| anyhow::anyhow!("reading the stream: {e}"))?;
        messages
            .take_until(tally.all())
            .for_each_concurrent(round.concurrency, |message| async {
                let Ok(message) = message else { return };
                let written =
                    plain_write(store.pool(), &message.payload, publisher.as_ref(), &shipped).await;
                if written.is_ok() && message.ack().await.is_ok() {
                    tally.one();
                }
            })
            .await;
        Ok(())
    }

    /// The consumer through the inbox: `nats::consume` with the write in the record's
    /// transaction, and (publishing) the message through the outbox.
    async fn inbox<DB: BenchDb>(
        &self,
        side: Side,
        consumer: &jetstream::consumer::PullConsumer,
        store: &SqlxStore<DB>,
        round: &Round,
        tally: &Tally,
    ) -> anyhow::Result<()> {
        let inbox = Inbox::new(store.clone(), "bench", round.operation.clone());
        let relay = Relay::new(store.clone(), JetStreamPublisher::new(self.js.clone()));
        let mut settings = inbox_nats::ConsumerSettings::default();
        settings.concurrency = round.concurrency;
        let handler = Ship {
            publishes: (side == Side::Outbox).then(|| self.shipped()),
            tally,
        };
        inbox_nats::consume(consumer, &inbox, &relay, &settings, &handler, tally.all())
            .await
            .map_err(|e| anyhow::anyhow!("consuming: {e}"))
    }
}

impl<DB: BenchDb> inbox_nats::Handler<DB> for Ship<'_> {
    async fn handle(
        &self,
        message: &jetstream::Message,
        tx: &mut Transaction<'static, DB>,
        outbox: &mut Outbox,
    ) -> Result<(), BoxError> {
        self.ship(&message.payload, tx, outbox).await
    }
}
