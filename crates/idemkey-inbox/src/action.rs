//! What the broker is told of a delivery.

use std::time::Duration;

use crate::Outgoing;

/// What the broker is told of a delivery, decided by the inbox.
#[derive(Debug)]
#[non_exhaustive]
pub enum Action {
    /// Processed, by this delivery or an earlier one: acknowledge it. `publish` holds the
    /// outbox messages this delivery committed, to publish now (a crash before that leaves
    /// them to the relay).
    Ack {
        /// The outbox messages to publish.
        publish: Vec<Outgoing>,
    },
    /// Not processed now: deliver it again after `after`.
    Retry {
        /// The wait before the next delivery.
        after: Duration,
        /// Why.
        reason: RetryReason,
    },
    /// Never to be processed: to the dead-letter path (JetStream: terminated).
    DeadLetter(DeadLetter),
}

/// Why a delivery is to be delivered again.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RetryReason {
    /// Another delivery of the same message is running: neither executed nor lost.
    #[error("another delivery of the message is running")]
    InFlight,
    /// The handler failed, and the message has deliveries left.
    #[error("the handler failed: {0}")]
    Failed(String),
    /// The store failed: nothing was committed.
    #[error("the store failed: {0}")]
    Store(String),
}

/// Why a message goes to the dead-letter path.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeadLetter {
    /// The message has no id: it is never processed unkeyed.
    #[error("the message has no id")]
    NoId,
    /// The message's id is not a key (1 to 255 visible ASCII characters).
    #[error("the message's id is not a key: {0}")]
    InvalidId(String),
    /// The id was used before for another message (another payload, subject or named
    /// header): this one is never executed.
    #[error("the id was used before for another message")]
    Reused,
    /// The handler failed on every delivery up to the limit.
    #[error("the handler failed on delivery {deliveries}, the last allowed: {error}")]
    Poison {
        /// Deliveries made.
        deliveries: u64,
        /// The last failure.
        error: String,
    },
}

impl Action {
    /// The action's name, the `action` label of the inbox's metrics: `ack`, `retry` or
    /// `dead-letter`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Ack { .. } => "ack",
            Self::Retry { .. } => "retry",
            Self::DeadLetter(_) => "dead-letter",
        }
    }
}
