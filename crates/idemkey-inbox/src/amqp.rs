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

use futures_util::StreamExt;
use lapin::Confirmation;
use lapin::message::Delivery;
use lapin::options::{BasicAckOptions, BasicNackOptions, BasicPublishOptions, BasicRejectOptions};
use lapin::types::{AMQPValue, ShortString};
use lapin::{BasicProperties, Channel};
use sqlx::Transaction;

use crate::relay::{BoxError, HandlerError};
use idemkey_core::{DerivedKeys, Store};

use crate::{
    Action, Inbox, Incoming, LeaseInbox, MessageHandler, Outbox, OutboxDb, Outgoing, Publisher,
    Relay,
};

/// Publishes outbox messages to the default exchange, routed to the queue named by their
/// subject, persistent, with their id as `message-id`, and waits for the broker's confirm.
/// The channel must be in confirm mode (`confirm_select`).
///
/// Each publish is `mandatory`: RabbitMQ confirms a message no queue took (the queue missing,
/// or not yet recovered after a restart) as readily as one it stored, and returns it only when
/// asked to. A returned message is a failed publish, so its outbox row stays for the relay to
/// publish again, instead of being removed for a message that went nowhere.
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
                BasicPublishOptions {
                    mandatory: true,
                    ..BasicPublishOptions::default()
                },
                &message.payload,
                properties,
            )
            .await?
            .await?;
        match confirm {
            Confirmation::Ack(None) => Ok(()),
            Confirmation::Ack(Some(returned)) => Err(format!(
                "no queue took the message (returned {} {})",
                returned.reply_code, returned.reply_text
            )
            .into()),
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
    let atomic = Atomic {
        inbox,
        relay,
        settings,
        handler,
    };
    each_delivery(deliveries, settings, &atomic, stop).await;
}

/// A message's business code in lease mode, as [`consume_lease`] runs it: its external
/// effects, each under a key derived from the message's record.
pub trait LeaseHandler: Send + Sync {
    /// Does `delivery`'s work under `keys`.
    fn handle<'t>(
        &'t self,
        delivery: &'t Delivery,
        keys: &'t DerivedKeys,
    ) -> impl Future<Output = Result<(), BoxError>> + Send + 't;
}

/// [`consume`] in lease mode, through `inbox`: each message run under its claim with its
/// derived keys, acknowledged once its record is complete. What the handler publishes it
/// publishes itself, with a derived key as the `message-id`.
pub async fn consume_lease<S: Store + Sync>(
    deliveries: lapin::Consumer,
    inbox: &LeaseInbox<S>,
    settings: &ConsumerSettings,
    handler: &impl LeaseHandler,
    stop: impl Future<Output = ()>,
) {
    let lease = Lease {
        inbox,
        settings,
        handler,
    };
    each_delivery(deliveries, settings, &lease, stop).await;
}

/// What to do with one delivery.
trait Deliver: Sync {
    fn deliver<'d>(&'d self, delivery: &'d Delivery) -> impl Future<Output = ()> + Send + 'd;
}

async fn each_delivery(
    deliveries: lapin::Consumer,
    settings: &ConsumerSettings,
    deliver: &impl Deliver,
    stop: impl Future<Output = ()>,
) {
    deliveries
        .take_until(stop)
        .for_each_concurrent(settings.concurrency, |delivery| async move {
            match delivery {
                Ok(delivery) => deliver.deliver(&delivery).await,
                Err(error) => tracing::warn!(%error, "idemkey: AMQP delivery"),
            }
        })
        .await;
}

/// Atomic mode's deliveries.
struct Atomic<'a, DB: OutboxDb, P, H> {
    inbox: &'a Inbox<DB>,
    relay: &'a Relay<DB, P>,
    settings: &'a ConsumerSettings,
    handler: &'a H,
}

impl<DB: OutboxDb, P: Publisher, H: Handler<DB>> Deliver for Atomic<'_, DB, P, H> {
    async fn deliver(&self, delivery: &Delivery) {
        let incoming = incoming(delivery, self.settings);
        let handler = WithDelivery {
            delivery,
            handler: self.handler,
        };
        let action = self.inbox.process(&incoming, handler).await;
        let publish = answer(delivery, action, self.settings).await;
        if let Err(error) = self.relay.publish(&publish).await {
            tracing::warn!(%error, "idemkey: outbox left for the relay");
        }
    }
}

/// Lease mode's deliveries.
struct Lease<'a, S, H> {
    inbox: &'a LeaseInbox<S>,
    settings: &'a ConsumerSettings,
    handler: &'a H,
}

impl<S: Store + Sync, H: LeaseHandler> Deliver for Lease<'_, S, H> {
    async fn deliver(&self, delivery: &Delivery) {
        let incoming = incoming(delivery, self.settings);
        let handler = WithDelivery {
            delivery,
            handler: self.handler,
        };
        let action = self.inbox.process(&incoming, handler).await;
        answer(delivery, action, self.settings).await;
    }
}

/// A handler with its delivery: the inbox's [`MessageHandler`] or [`crate::LeaseHandler`].
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

impl<H: LeaseHandler> crate::LeaseHandler for WithDelivery<'_, H> {
    type Error = HandlerError;

    fn handle<'t>(
        &'t mut self,
        keys: &'t DerivedKeys,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send + 't {
        let run = self.handler.handle(self.delivery, keys);
        async move { run.await.map_err(HandlerError) }
    }
}

/// The delivery as the inbox reads it.
fn incoming<'d>(delivery: &'d Delivery, settings: &'d ConsumerSettings) -> Incoming<'d> {
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
    Incoming {
        id,
        subject: delivery.routing_key.as_str(),
        payload: &delivery.data,
        headers: settings
            .fingerprint_headers
            .iter()
            .filter_map(|name| header(name).map(|v| (name.as_str(), v)))
            .collect(),
        delivered: delivered(delivery),
    }
}

/// Which delivery this is: the quorum queue's count of earlier ones plus one; on a classic
/// queue 1, or 2 when redelivered. A delivery flagged as redelivered is never the first,
/// whatever the count says: the inbox reads the record of every redelivery.
fn delivered(delivery: &Delivery) -> u64 {
    let headers = delivery.properties.headers().as_ref();
    let count = match headers.and_then(|h| h.inner().get("x-delivery-count")) {
        Some(AMQPValue::LongLongInt(n)) => u64::try_from(*n).ok(),
        Some(AMQPValue::LongInt(n)) => u64::try_from(*n).ok(),
        Some(AMQPValue::LongUInt(n)) => Some(u64::from(*n)),
        _ => None,
    };
    let flagged = 1 + u64::from(delivery.redelivered);
    count.map_or(flagged, |count| count.saturating_add(1).max(flagged))
}

/// Tells the broker what the inbox decided; returns what the delivery committed to publish.
async fn answer(delivery: &Delivery, action: Action, settings: &ConsumerSettings) -> Vec<Outgoing> {
    let (answered, publish) = match action {
        Action::Ack { publish } => (delivery.ack(BasicAckOptions::default()).await, publish),
        Action::Retry { after, reason } => {
            tracing::debug!(%reason, ?after, "idemkey: delivering again");
            tokio::time::sleep(after.min(settings.max_hold)).await;
            let requeue = BasicNackOptions {
                requeue: true,
                ..Default::default()
            };
            (delivery.nack(requeue).await, Vec::new())
        }
        Action::DeadLetter(reason) => {
            tracing::warn!(%reason, queue = %delivery.routing_key, "idemkey: dead-lettered");
            metrics::counter!("idemkey_inbox_dead_letters_total").increment(1);
            let reject = BasicRejectOptions { requeue: false };
            (delivery.reject(reject).await, Vec::new())
        }
    };
    if let Err(error) = answered {
        // Unanswered, the delivery comes back when the channel closes: processed, it is then
        // acknowledged without running.
        tracing::warn!(%error, "idemkey: answering the broker");
    }
    publish
}
