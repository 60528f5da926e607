//! The workload on RabbitMQ: each round's messages in a quorum queue of their own, read by
//! a consumer with a prefetch of the run's concurrency; the published messages into one
//! durable queue for the run, with publisher confirms.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures_util::StreamExt;
use idemkey_inbox::amqp::{self as inbox_amqp, AmqpPublisher};
use idemkey_inbox::lapin::message::Delivery;
use idemkey_inbox::lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use idemkey_inbox::lapin::types::{AMQPValue, FieldTable, ShortString};
use idemkey_inbox::lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use idemkey_inbox::{BoxError, Inbox, Outbox, Relay};
use idemkey_sqlx::SqlxStore;
use sqlx::Transaction;

use super::db::BenchDb;
use super::{Round, Ship, Side, Tally, plain_write};

/// The run's RabbitMQ connection, and the queue published to.
pub(crate) struct Amqp {
    connection: Connection,
    run: String,
}

impl Amqp {
    /// Connects, and declares the queue the run publishes to.
    pub(crate) async fn connect(url: &str, run: &str) -> anyhow::Result<Self> {
        let connection = Connection::connect(url, ConnectionProperties::default())
            .await
            .context("connecting to RabbitMQ")?;
        let amqp = Self {
            connection,
            run: run.to_owned(),
        };
        let channel = amqp.connection.create_channel().await?;
        declare(&channel, &amqp.shipped(), FieldTable::default()).await?;
        Ok(amqp)
    }

    fn shipped(&self) -> String {
        format!("bench.{}.shipped", self.run)
    }

    /// Removes the run's queues.
    pub(crate) async fn close(self) {
        if let Ok(channel) = self.connection.create_channel().await {
            let _ = delete(&channel, &self.shipped()).await;
        }
        let _ = self.connection.close(200, ShortString::from("done")).await;
    }

    /// One round of `side`: `round.count` messages in a queue of their own, then consumed,
    /// timed from the consumer's start to the last acknowledgement.
    pub(crate) async fn round<DB: BenchDb>(
        &self,
        side: Side,
        round: &Round,
        store: &SqlxStore<DB>,
    ) -> anyhow::Result<Duration> {
        let queue = format!("bench.{}.{}", self.run, round.index);
        let mut quorum = FieldTable::default();
        quorum.insert(
            "x-queue-type".into(),
            AMQPValue::LongString("quorum".into()),
        );
        let publishing = self.confirming().await?;
        declare(&publishing, &queue, quorum).await?;
        preload(&publishing, &queue, round).await?;
        let consuming = self.connection.create_channel().await?;
        let prefetch = u16::try_from(round.concurrency).unwrap_or(u16::MAX);
        consuming
            .basic_qos(prefetch, BasicQosOptions::default())
            .await?;
        let deliveries = consuming
            .basic_consume(
                queue.as_str().into(),
                "bench".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?;
        let tally = Tally::new(round.count);
        let publisher = AmqpPublisher::new(publishing.clone());
        let started = Instant::now();
        match side {
            Side::Plain | Side::PlainPublishing => {
                let publisher = (side == Side::PlainPublishing).then_some(&publisher);
                self.plain(deliveries, publisher, store, round, &tally)
                    .await;
            }
            Side::Inbox | Side::Outbox => {
                self.inbox(side, deliveries, publisher, store, round, &tally)
                    .await;
            }
        }
        let elapsed = started.elapsed();
        let _ = consuming.close(200, ShortString::from("done")).await;
        delete(&publishing, &queue).await?;
        let _ = publishing.close(200, ShortString::from("done")).await;
        Ok(elapsed)
    }

    async fn confirming(&self) -> anyhow::Result<Channel> {
        let channel = self.connection.create_channel().await?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        Ok(channel)
    }

    /// The plain consumer: the write in its own transaction, then (publishing) the message
    /// published and confirmed, then the acknowledgement.
    async fn plain<DB: BenchDb>(
        &self,
        deliveries: idemkey_inbox::lapin::Consumer,
        publisher: Option<&AmqpPublisher>,
        store: &SqlxStore<DB>,
        round: &Round,
        tally: &Tally,
    ) {
        let shipped = self.shipped();
        deliveries
            .take_until(tally.all())
            .for_each_concurrent(round.concurrency, |delivery| async {
                let Ok(delivery) = delivery else { return };
                let written = plain_write(store.pool(), &delivery.data, publisher, &shipped).await;
                if written.is_ok() && delivery.ack(BasicAckOptions::default()).await.is_ok() {
                    tally.one();
                }
            })
            .await;
    }

    /// The consumer through the inbox: `amqp::consume` with the write in the record's
    /// transaction, and (publishing) the message through the outbox.
    async fn inbox<DB: BenchDb>(
        &self,
        side: Side,
        deliveries: idemkey_inbox::lapin::Consumer,
        publisher: AmqpPublisher,
        store: &SqlxStore<DB>,
        round: &Round,
        tally: &Tally,
    ) {
        let inbox = Inbox::new(store.clone(), "bench", round.operation.clone());
        let relay = Relay::new(store.clone(), publisher);
        let mut settings = inbox_amqp::ConsumerSettings::default();
        settings.concurrency = round.concurrency;
        let handler = Ship {
            publishes: (side == Side::Outbox).then(|| self.shipped()),
            tally,
        };
        inbox_amqp::consume(deliveries, &inbox, &relay, &settings, &handler, tally.all()).await;
    }
}

/// Publishes the round's messages, persistent, each with a `message-id` of its own, and
/// waits for every confirm.
async fn preload(channel: &Channel, queue: &str, round: &Round) -> anyhow::Result<()> {
    let mut confirms = Vec::with_capacity(round.count as usize);
    for n in 0..round.count {
        let properties = BasicProperties::default()
            .with_message_id(ShortString::from(round.id(n)))
            .with_delivery_mode(2);
        let confirm = channel
            .basic_publish(
                ShortString::from(""),
                ShortString::from(queue),
                BasicPublishOptions::default(),
                &round.payload(n),
                properties,
            )
            .await?;
        confirms.push(confirm);
    }
    for confirm in confirms {
        confirm.await?;
    }
    Ok(())
}

async fn declare(channel: &Channel, name: &str, arguments: FieldTable) -> anyhow::Result<()> {
    let durable = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    channel
        .queue_declare(name.into(), durable, arguments)
        .await
        .with_context(|| format!("declaring queue {name}"))?;
    Ok(())
}

async fn delete(channel: &Channel, name: &str) -> anyhow::Result<()> {
    channel
        .queue_delete(name.into(), QueueDeleteOptions::default())
        .await
        .with_context(|| format!("deleting queue {name}"))?;
    Ok(())
}

impl<DB: BenchDb> inbox_amqp::Handler<DB> for Ship<'_> {
    async fn handle(
        &self,
        delivery: &Delivery,
        tx: &mut Transaction<'static, DB>,
        outbox: &mut Outbox,
    ) -> Result<(), BoxError> {
        self.ship(&delivery.data, tx, outbox).await
    }
}
