//! RabbitMQ (AMQP 0-9-1): a consumer's deliveries through the inbox, and the outbox published
//! with publisher confirms under its `message-id`.
//!
//! RabbitMQ has no delayed redelivery: a delivery to retry is held for its wait, then given
//! back to the queue (`basic.nack` with requeue). A delivery's count is the quorum queue's
//! `x-delivery-count` header (RabbitMQ 3.10 and later; on a classic queue, only whether it
//! was redelivered is known). A dead-lettered delivery is rejected without requeue: the queue's
//! dead-letter exchange, if it has one, takes it.

use std::future::Future;
use std::time::Duration;

use futures_util::{FutureExt, StreamExt};
use lapin::Confirmation;
use lapin::message::Delivery;
use lapin::options::{BasicAckOptions, BasicNackOptions, BasicPublishOptions, BasicRejectOptions};
use lapin::types::{AMQPValue, ShortString};
use lapin::{BasicProperties, Channel};
use sqlx::Transaction;

use crate::relay::{BoxError, HandlerError};
use crate::{
    Action, Inbox, Incoming, MessageHandler, Outbox, OutboxDb, Outgoing, Publisher, Relay,
};

/// Publishes outbox messages to the default exchange, routed to the queue named by their
/// subject, persistent, with their id as `message-id`, and waits for the broker's confirm.
/// The channel must be in confirm mode (`confirm_select`).
#[derive(Clone, Debug)]
pub struct AmqpPublisher {
    channel: Channel,
}

impl AmqpPublisher {
    /// The publisher on `channel`, in confirm mode.
    pub fn new(channel: Channel) -> Self {
        Self { channel }
    }
}

impl Publisher for AmqpPublisher {
    async fn publish(&self, message: &Outgoing) -> Result<(), BoxError> {
        let properties = BasicProperties::default()
            .with_message_id(ShortString::from(message.id.as_str()))
            .with_delivery_mode(2);
        let confirm = self
            .channel
            .basic_publish(
                ShortString::from(""),
                ShortString::from(message.subject.as_str()),
                BasicPublishOptions::default(),
                &message.payload,
                properties,
            )
            .await?
            .await?;
        match confirm {
            Confirmation::Ack(_) => Ok(()),
            other => Err(format!("the broker did not confirm: {other:?}").into()),
        }
    }
}

/// How an AMQP consumer reads its deliveries.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ConsumerSettings {
    /// The header that carries a message's id; `None` (the default) for the `message-id`
    /// property.
    pub id_header: Option<String>,
    /// The headers the fingerprint covers, besides the routing key and the payload.
    pub fingerprint_headers: Vec<String>,
    /// Deliveries processed at once: keep the channel's prefetch (`basic_qos`) at least this.
    pub concurrency: usize,
    /// The longest a delivery to retry is held before it goes back to the queue.
    pub max_hold: Duration,
}

impl Default for ConsumerSettings {
    fn default() -> Self {
        Self {
            id_header: None,
            fingerprint_headers: Vec::new(),
            concurrency: 16,
            max_hold: Duration::from_secs(10),
        }
    }
}

/// A message's business code as [`consume`] runs it: with the delivery, the record's
/// transaction and the outbox, once for each message not processed before.
pub trait Handler<DB: OutboxDb>: Send + Sync {
    /// Does `delivery`'s work on `tx`, publishing through `outbox`.
    fn handle<'t>(
        &'t self,
        delivery: &'t Delivery,
        tx: &'t mut Transaction<'static, DB>,
        outbox: &'t mut Outbox,
    ) -> impl Future<Output = Result<(), BoxError>> + Send + 't;
}

/// Consumes `deliveries` (a `lapin::Consumer`) through `inbox` until `stop` completes or the
/// consumer ends (its channel or connection closed): each message executed by `handler` once,
/// acknowledged after its transaction commits, its outbox published through `relay`.
pub async fn consume<DB: OutboxDb, P: Publisher>(
    deliveries: lapin::Consumer,
    inbox: &Inbox<DB>,
    relay: &Relay<DB, P>,
    settings: &ConsumerSettings,
    handler: &impl Handler<DB>,
    stop: impl Future<Output = ()>,
) {
    let stop = stop.shared();
    deliveries
        .take_until(stop)
        .for_each_concurrent(settings.concurrency, |delivery| async move {
            match delivery {
                Ok(delivery) => deliver(&delivery, inbox, relay, settings, handler).await,
                Err(error) => tracing::warn!(%error, "idemkey: AMQP delivery"),
            }
        })
        .await;
}

/// A [`Handler`] with its delivery: the inbox's [`MessageHandler`].
struct WithDelivery<'a, H> {
    delivery: &'a Delivery,
    handler: &'a H,
}

impl<DB: OutboxDb, H: Handler<DB>> MessageHandler<DB> for WithDelivery<'_, H> {
    type Error = HandlerError;

    fn handle<'t>(
        &'t mut self,
        tx: &'t mut Transaction<'static, DB>,
        outbox: &'t mut Outbox,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send + 't {
        let run = self.handler.handle(self.delivery, tx, outbox);
        async move { run.await.map_err(HandlerError) }
    }
}

async fn deliver<DB: OutboxDb, P: Publisher>(
    delivery: &Delivery,
    inbox: &Inbox<DB>,
    relay: &Relay<DB, P>,
    settings: &ConsumerSettings,
    handler: &impl Handler<DB>,
) {
    let headers = delivery.properties.headers().as_ref();
    let header = |name: &str| match headers.and_then(|h| h.inner().get(name)) {
        Some(AMQPValue::LongString(value)) => Some(value.as_bytes()),
        _ => None,
    };
    let id = match &settings.id_header {
        Some(name) => header(name).and_then(|v| std::str::from_utf8(v).ok()),
        None => delivery
            .properties
            .message_id()
            .as_ref()
            .map(ShortString::as_str),
    };
    let incoming = Incoming {
        id,
        subject: delivery.routing_key.as_str(),
        payload: &delivery.data,
        headers: settings
            .fingerprint_headers
            .iter()
            .filter_map(|name| header(name).map(|v| (name.as_str(), v)))
            .collect(),
        delivered: delivered(delivery),
    };
    let action = inbox
        .process(&incoming, WithDelivery { delivery, handler })
        .await;
    answer(delivery, action, relay, settings).await;
}

/// Which delivery this is: the quorum queue's count of earlier ones plus one; on a classic
/// queue 1, or 2 when redelivered.
fn delivered(delivery: &Delivery) -> u64 {
    let headers = delivery.properties.headers().as_ref();
    let count = match headers.and_then(|h| h.inner().get("x-delivery-count")) {
        Some(AMQPValue::LongLongInt(n)) => u64::try_from(*n).ok(),
        Some(AMQPValue::LongInt(n)) => u64::try_from(*n).ok(),
        Some(AMQPValue::LongUInt(n)) => Some(u64::from(*n)),
        _ => None,
    };
    match count {
        Some(count) => count.saturating_add(1),
        None => 1 + u64::from(delivery.redelivered),
    }
}

/// Tells the broker what the inbox decided, and publishes what the delivery committed.
async fn answer<DB: OutboxDb, P: Publisher>(
    delivery: &Delivery,
    action: Action,
    relay: &Relay<DB, P>,
    settings: &ConsumerSettings,
) {
    let answered = match action {
        Action::Ack { publish } => {
            let acked = delivery.ack(BasicAckOptions::default()).await;
            if let Err(error) = relay.publish(&publish).await {
                tracing::warn!(%error, "idemkey: outbox left for the relay");
            }
            acked
        }
        Action::Retry { after, reason } => {
            tracing::debug!(%reason, ?after, "idemkey: delivering again");
            tokio::time::sleep(after.min(settings.max_hold)).await;
            let requeue = BasicNackOptions {
                requeue: true,
                ..Default::default()
            };
            delivery.nack(requeue).await
        }
        Action::DeadLetter(reason) => {
            tracing::warn!(%reason, queue = %delivery.routing_key, "idemkey: dead-lettered");
            metrics::counter!("idemkey_inbox_dead_letters_total").increment(1);
            delivery.reject(BasicRejectOptions { requeue: false }).await
        }
    };
    if let Err(error) = answered {
        // Unanswered, the delivery comes back when the channel closes: processed, it is then
        // acknowledged without running.
        tracing::warn!(%error, "idemkey: answering the broker");
    }
}
