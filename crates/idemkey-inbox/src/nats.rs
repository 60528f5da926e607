//! NATS JetStream: a pull consumer's deliveries through the inbox, and the outbox published
//! with `Nats-Msg-Id`, so JetStream's duplicate window drops a message the relay publishes
//! twice.

use std::future::Future;
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::header::NATS_MESSAGE_ID;
use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::{self, AckKind};
use futures_util::future::BoxFuture;
use futures_util::{FutureExt, StreamExt};
use sqlx::Transaction;

use crate::relay::{BoxError, HandlerError};
use idemkey_core::{DerivedKeys, Store};

use crate::{
    Action, Inbox, Incoming, LeaseInbox, MessageHandler, Outbox, OutboxDb, Outgoing, Publisher,
    Relay,
};

/// Publishes outbox messages to JetStream, each with its id as `Nats-Msg-Id`, waiting for the
/// stream's acknowledgement.
#[derive(Clone, Debug)]
pub struct JetStreamPublisher {
    context: jetstream::Context,
}

impl JetStreamPublisher {
    /// The publisher on `context`.
    pub fn new(context: jetstream::Context) -> Self {
        Self { context }
    }
}

impl Publisher for JetStreamPublisher {
    async fn publish(&self, message: &Outgoing) -> Result<(), BoxError> {
        let mut headers = HeaderMap::new();
        headers.insert(NATS_MESSAGE_ID, message.id.as_str());
        let payload = bytes::Bytes::copy_from_slice(&message.payload);
        let ack = self
            .context
            .publish_with_headers(message.subject.clone(), headers, payload)
            .await?;
        ack.await?;
        Ok(())
    }
}

/// How a JetStream consumer reads its deliveries.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ConsumerSettings {
    /// The header that carries a message's id. Defaults to `Nats-Msg-Id`, the id JetStream
    /// deduplicates publishes by.
    pub id_header: String,
    /// The headers the fingerprint covers, besides the subject and the payload.
    pub fingerprint_headers: Vec<String>,
    /// Deliveries processed at once.
    pub concurrency: usize,
    /// How often a delivery still running tells JetStream it is in progress, so that its
    /// acknowledgement wait does not run out: below the consumer's `ack_wait`. Defaults to
    /// 10 s (JetStream's default wait is 30 s).
    pub progress_every: Duration,
}

impl Default for ConsumerSettings {
    fn default() -> Self {
        Self {
            id_header: NATS_MESSAGE_ID.to_string(),
            fingerprint_headers: Vec::new(),
            concurrency: 16,
            progress_every: Duration::from_secs(10),
        }
    }
}

/// A message's business code as [`consume`] runs it: with the delivery, the record's
/// transaction and the outbox, once for each message not processed before. Implement it on
/// a type of your own (with `async fn handle`), or pass a closure
/// `|message, tx, outbox| Box::pin(async move { ... })` through [`handler`].
pub trait Handler<DB: OutboxDb>: Send + Sync {
    /// Does `message`'s work on `tx`, publishing through `outbox`.
    fn handle<'t>(
        &'t self,
        message: &'t jetstream::Message,
        tx: &'t mut Transaction<'static, DB>,
        outbox: &'t mut Outbox,
    ) -> impl Future<Output = Result<(), BoxError>> + Send + 't;
}

impl<DB: OutboxDb, F> Handler<DB> for F
where
    F: for<'t> Fn(
            &'t jetstream::Message,
            &'t mut Transaction<'static, DB>,
            &'t mut Outbox,
        ) -> BoxFuture<'t, Result<(), BoxError>>
        + Send
        + Sync,
{
    fn handle<'t>(
        &'t self,
        message: &'t jetstream::Message,
        tx: &'t mut Transaction<'static, DB>,
        outbox: &'t mut Outbox,
    ) -> impl Future<Output = Result<(), BoxError>> + Send + 't {
        self(message, tx, outbox)
    }
}

/// `f` as a [`Handler`], its closure's signature spelled out for the compiler.
pub fn handler<DB, F>(f: F) -> F
where
    DB: OutboxDb,
    F: for<'t> Fn(
            &'t jetstream::Message,
            &'t mut Transaction<'static, DB>,
            &'t mut Outbox,
        ) -> BoxFuture<'t, Result<(), BoxError>>
        + Send
        + Sync,
{
    f
}

/// Consumes `consumer`'s deliveries through `inbox` until `stop` completes: each message is
/// executed by `handler` once, acknowledged after its transaction commits, its outbox
/// published through `relay`; a redelivery of a processed message is acknowledged without
/// running it; a message without an id or whose id was used for another message is
/// terminated (JetStream's dead-letter path); a handler failure is delivered again after a
/// backoff, up to the inbox's limit.
pub async fn consume<DB: OutboxDb>(
    consumer: &PullConsumer,
    inbox: &Inbox<DB>,
    relay: &Relay<DB, JetStreamPublisher>,
    settings: &ConsumerSettings,
    handler: &impl Handler<DB>,
    stop: impl Future<Output = ()>,
) -> Result<(), BoxError> {
    let atomic = Atomic {
        inbox,
        relay,
        settings,
        handler,
    };
    each_delivery(consumer, settings, &atomic, stop).await
}

/// A message's business code in lease mode, as [`consume_lease`] runs it: its external
/// effects, each under a key derived from the message's record.
pub trait LeaseHandler: Send + Sync {
    /// Does `message`'s work under `keys`.
    fn handle<'t>(
        &'t self,
        message: &'t jetstream::Message,
        keys: &'t DerivedKeys,
    ) -> impl Future<Output = Result<(), BoxError>> + Send + 't;
}

/// [`consume`] in lease mode, through `inbox`: for handlers with effects outside the
/// database, each run under the message's claim with its derived keys, the message
/// acknowledged once its record is complete. What the handler publishes it publishes itself,
/// under a derived key as the message id, so that a re-execution publishes the same message.
pub async fn consume_lease<S: Store + Sync>(
    consumer: &PullConsumer,
    inbox: &LeaseInbox<S>,
    settings: &ConsumerSettings,
    handler: &impl LeaseHandler,
    stop: impl Future<Output = ()>,
) -> Result<(), BoxError> {
    let lease = Lease {
        inbox,
        settings,
        handler,
    };
    each_delivery(consumer, settings, &lease, stop).await
}

/// What to do with one delivery.
trait Deliver: Sync {
    fn deliver<'m>(
        &'m self,
        message: &'m jetstream::Message,
    ) -> impl Future<Output = ()> + Send + 'm;
}

/// Delivers `consumer`'s messages through `deliver` until `stop` completes.
async fn each_delivery(
    consumer: &PullConsumer,
    settings: &ConsumerSettings,
    deliver: &impl Deliver,
    stop: impl Future<Output = ()>,
) -> Result<(), BoxError> {
    let stop = stop.shared();
    loop {
        // A broker restart or a lost connection ends or breaks the stream of messages: the
        // deliveries in progress finish, and a new stream is opened where the last stopped.
        match consumer.messages().await {
            Ok(messages) => {
                messages
                    .take_until(stop.clone())
                    .for_each_concurrent(settings.concurrency, |message| async move {
                        match message {
                            Ok(message) => deliver.deliver(&message).await,
                            Err(error) => tracing::warn!(%error, "idemkey: JetStream delivery"),
                        }
                    })
                    .await;
            }
            Err(error) => tracing::warn!(%error, "idemkey: opening JetStream's messages"),
        }
        if stop.peek().is_some() {
            return Ok(());
        }
        tokio::select! {
            () = stop.clone() => return Ok(()),
            () = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
    }
}

/// Atomic mode's deliveries.
struct Atomic<'a, DB: OutboxDb, H> {
    inbox: &'a Inbox<DB>,
    relay: &'a Relay<DB, JetStreamPublisher>,
    settings: &'a ConsumerSettings,
    handler: &'a H,
}

impl<DB: OutboxDb, H: Handler<DB>> Deliver for Atomic<'_, DB, H> {
    async fn deliver(&self, message: &jetstream::Message) {
        let incoming = incoming(message, self.settings);
        let handler = WithMessage {
            message,
            handler: self.handler,
        };
        let run = self.inbox.process(&incoming, handler);
        let action = in_progress(message, self.settings.progress_every, run).await;
        let publish = answer(message, action).await;
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
    async fn deliver(&self, message: &jetstream::Message) {
        let incoming = incoming(message, self.settings);
        let handler = WithMessage {
            message,
            handler: self.handler,
        };
        let run = self.inbox.process(&incoming, handler);
        let action = in_progress(message, self.settings.progress_every, run).await;
        answer(message, action).await;
    }
}

/// A handler with its delivery: the inbox's [`MessageHandler`] or [`crate::LeaseHandler`].
struct WithMessage<'a, H> {
    message: &'a jetstream::Message,
    handler: &'a H,
}

impl<DB: OutboxDb, H: Handler<DB>> MessageHandler<DB> for WithMessage<'_, H> {
    type Error = HandlerError;

    fn handle<'t>(
        &'t mut self,
        tx: &'t mut Transaction<'static, DB>,
        outbox: &'t mut Outbox,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send + 't {
        let run = self.handler.handle(self.message, tx, outbox);
        async move { run.await.map_err(HandlerError) }
    }
}

impl<H: LeaseHandler> crate::LeaseHandler for WithMessage<'_, H> {
    type Error = HandlerError;

    fn handle<'t>(
        &'t mut self,
        keys: &'t DerivedKeys,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send + 't {
        let run = self.handler.handle(self.message, keys);
        async move { run.await.map_err(HandlerError) }
    }
}

/// The delivery as the inbox reads it.
fn incoming<'m>(message: &'m jetstream::Message, settings: &'m ConsumerSettings) -> Incoming<'m> {
    let delivered = message
        .info()
        .map_or(1, |info| u64::try_from(info.delivered).unwrap_or(1));
    let headers = message.headers.as_ref();
    let value = |name: &str| headers.and_then(|h| h.get(name)).map(|v| v.as_str());
    Incoming {
        id: value(&settings.id_header),
        subject: message.subject.as_str(),
        payload: &message.payload,
        headers: settings
            .fingerprint_headers
            .iter()
            .filter_map(|name| value(name).map(|v| (name.as_str(), v.as_bytes())))
            .collect(),
        delivered,
    }
}

/// `run`, telling JetStream every `every` that the delivery is in progress.
async fn in_progress(
    message: &jetstream::Message,
    every: Duration,
    run: impl Future<Output = Action>,
) -> Action {
    let mut run = std::pin::pin!(run);
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    loop {
        tokio::select! {
            action = &mut run => return action,
            _ = ticks.tick() => {
                if let Err(error) = message.ack_with(AckKind::Progress).await {
                    tracing::debug!(%error, "idemkey: in-progress signal");
                }
            }
        }
    }
}

/// Tells JetStream what the inbox decided; returns what the delivery committed to publish.
async fn answer(message: &jetstream::Message, action: Action) -> Vec<Outgoing> {
    let (kind, publish) = match action {
        Action::Ack { publish } => (AckKind::Ack, publish),
        Action::Retry { after, reason } => {
            tracing::debug!(%reason, ?after, "idemkey: delivering again");
            (AckKind::Nak(Some(after)), Vec::new())
        }
        Action::DeadLetter(reason) => {
            tracing::warn!(%reason, subject = %message.subject, "idemkey: dead-lettered");
            metrics::counter!("idemkey_inbox_dead_letters_total").increment(1);
            (AckKind::Term, Vec::new())
        }
    };
    if let Err(error) = message.ack_with(kind).await {
        // Unanswered, the delivery comes again after the wait: processed, it is acknowledged.
        tracing::warn!(%error, "idemkey: answering JetStream");
    }
    publish
}
