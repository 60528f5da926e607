//! Messages, once: an idempotent consumer (an *inbox*) and its *outbox*, for NATS JetStream and
//! RabbitMQ, on idemkey's SQL stores.
//!
//! Brokers deliver at least once. A consumer that crashes after its work and before its
//! acknowledgement gets the message again; a publisher that retries after a lost confirm
//! publishes it twice; a redelivery can arrive while the first delivery is still running.
//! The inbox runs each delivery in atomic mode under the message's own id, scoped to
//! (consumer, operation@version, id) and fingerprinted over its subject, payload and the
//! headers named: the handler's writes, the record and the messages it publishes commit in
//! one transaction, and the delivery is acknowledged after the commit.
//!
//! - A redelivery, or a republish under the same id, of a processed message is acknowledged
//!   without running the handler.
//! - A message whose id was used for another message (another payload) is never executed:
//!   dead-lettered ([`DeadLetter::Reused`]); so is a message without an id.
//! - A redelivery while the first delivery still runs is neither executed nor lost: delivered
//!   again after a wait ([`RetryReason::InFlight`]).
//! - A handler failure is delivered again after a backoff, and dead-lettered after
//!   [`Settings::max_deliveries`].
//! - What the handler publishes goes into the [`Outbox`] in its transaction, and is published
//!   after the commit under an id derived from the inbound message's record, so the broker's
//!   deduplication sees one message however often the [`Relay`] publishes it; the relay's
//!   sweep publishes what a crash left unpublished.
//!
//! The broker-independent part is [`Inbox::process`], which says what to tell the broker
//! ([`Action`]); [`nats::consume`] (feature `nats`) runs a JetStream pull consumer through it,
//! [`amqp::consume`] (feature `amqp`) a RabbitMQ consumer.

mod action;
#[cfg(feature = "amqp")]
pub mod amqp;
mod inbox;
mod incoming;
mod lease;
#[cfg(feature = "nats")]
pub mod nats;
mod outbox;
mod relay;

pub use action::{Action, DeadLetter, RetryReason};
pub use inbox::{Inbox, Lookup, MessageHandler, Settings};
pub use incoming::Incoming;
pub use lease::{LeaseHandler, LeaseInbox};
pub use outbox::{Outbox, OutboxDb, Outgoing, TABLE};
pub use relay::{BoxError, HandlerError, Publisher, Relay, RelayError};

/// When atomic mode writes the record: [`Settings::strategy`].
pub use idemkey_sqlx::Strategy;

/// lapin, whose AMQP types [`amqp`] takes.
#[cfg(feature = "amqp")]
pub use lapin;

/// async-nats, whose JetStream types [`nats`] takes.
#[cfg(feature = "nats")]
pub use async_nats;
