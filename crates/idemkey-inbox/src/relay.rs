//! The relay: publishes an outbox's messages after their transaction committed, removing each
//! row once the broker has the message, and sweeps up what a crash left unpublished.

use std::error::Error as StdError;
use std::future::Future;
use std::time::Duration;

use idemkey_sqlx::SqlxStore;

use crate::inbox::now_ms;
use crate::{OutboxDb, Outgoing};

/// A boxed error, as a [`Publisher`] reports it.
pub type BoxError = Box<dyn StdError + Send + Sync>;

/// A handler's boxed error, as the inbox reports it.
#[derive(Debug)]
pub struct HandlerError(pub BoxError);

impl std::fmt::Display for HandlerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl StdError for HandlerError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.0.source()
    }
}

/// Publishes one outbox message to the broker under its id.
pub trait Publisher: Send + Sync {
    /// Publishes `message` with its [`id`](Outgoing::id) as the broker's message id, and
    /// returns once the broker has it (JetStream: its publish acknowledgement).
    fn publish(&self, message: &Outgoing) -> impl Future<Output = Result<(), BoxError>> + Send;
}

/// Why the relay stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RelayError {
    /// The broker did not take a message: it stays in the outbox, for a later sweep.
    #[error("publishing outbox message {id}: {source}")]
    Publish {
        /// The message's id.
        id: String,
        /// The publisher's error.
        source: BoxError,
    },
    /// The outbox's table could not be read or written.
    #[error("the outbox: {0}")]
    Store(String),
}

/// Publishes outbox messages through a [`Publisher`], from the outbox of `store`'s database.
#[derive(Debug)]
pub struct Relay<DB: OutboxDb, P> {
    store: SqlxStore<DB>,
    publisher: P,
}

impl<DB: OutboxDb, P: Clone> Clone for Relay<DB, P> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            publisher: self.publisher.clone(),
        }
    }
}

impl<DB: OutboxDb, P: Publisher> Relay<DB, P> {
    /// The relay of `store`'s outbox, publishing through `publisher`.
    pub fn new(store: SqlxStore<DB>, publisher: P) -> Self {
        Self { store, publisher }
    }

    /// The publisher.
    pub fn publisher(&self) -> &P {
        &self.publisher
    }

    /// Publishes `messages` in order, removing each from the outbox once the broker has it;
    /// stops at the first the broker does not take, which stays for a sweep.
    pub async fn publish(&self, messages: &[Outgoing]) -> Result<(), RelayError> {
        for message in messages {
            self.publisher
                .publish(message)
                .await
                .map_err(|source| RelayError::Publish {
                    id: message.id.clone(),
                    source,
                })?;
            self.remove(&message.id).await?;
        }
        Ok(())
    }

    /// Publishes, oldest first, up to `batch` messages written at least `age` ago: those a
    /// crash (or a broker outage) left between commit and publish. Returns how many went.
    pub async fn sweep(&self, age: Duration, batch: i64) -> Result<usize, RelayError> {
        let age = i64::try_from(age.as_millis()).unwrap_or(i64::MAX);
        let before = now_ms().saturating_sub(age);
        let pending = DB::pending_outgoing(self.store.pool(), before, batch)
            .await
            .map_err(|e| RelayError::Store(e.to_string()))?;
        self.publish(&pending).await?;
        Ok(pending.len())
    }

    /// Sweeps every `every`, for messages at least `every` old, until `stop` completes.
    /// Errors are logged and the next sweep tries again.
    pub async fn run(&self, every: Duration, stop: impl Future<Output = ()>) {
        let mut stop = std::pin::pin!(stop);
        let mut ticks = tokio::time::interval(every);
        loop {
            tokio::select! {
                () = &mut stop => return,
                _ = ticks.tick() => {}
            }
            loop {
                match self.sweep(every, 256).await {
                    Ok(256) => continue,
                    Ok(_) => break,
                    Err(error) => {
                        tracing::warn!(%error, "idemkey: outbox sweep");
                        break;
                    }
                }
            }
        }
    }

    async fn remove(&self, id: &str) -> Result<(), RelayError> {
        let store = |e: &dyn std::fmt::Display| RelayError::Store(e.to_string());
        let mut conn = self.store.write_conn().await.map_err(|e| store(&e))?;
        DB::remove_outgoing(&mut conn, id)
            .await
            .map_err(|e| store(&e))
    }
}
