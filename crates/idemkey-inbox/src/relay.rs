//! The relay: publishes an outbox's messages after their transaction committed, removing each
//! row once the broker has the message, and sweeps up what a crash left unpublished.

use std::error::Error as StdError;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
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
///
/// The rows of published messages are removed in groups: each delivery's publish adds its
/// ids to the group, and one removal at a time deletes all the ids gathered so far, so
/// concurrent deliveries share a write (on SQLite, a sync) instead of making one each. An
/// id not yet removed when the process stops is published again by a later sweep, under the
/// same id, as after any crash between publish and removal.
#[derive(Debug)]
pub struct Relay<DB: OutboxDb, P> {
    store: SqlxStore<DB>,
    publisher: P,
    removals: Arc<Removals>,
}

/// The ids published and not yet removed, and whether a removal is running.
#[derive(Debug, Default)]
struct Removals {
    pending: Mutex<Vec<String>>,
    running: AtomicBool,
}

impl<DB: OutboxDb, P: Clone> Clone for Relay<DB, P> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            publisher: self.publisher.clone(),
            removals: Arc::clone(&self.removals),
        }
    }
}

impl<DB: OutboxDb, P: Publisher> Relay<DB, P> {
    /// The relay of `store`'s outbox, publishing through `publisher`.
    pub fn new(store: SqlxStore<DB>, publisher: P) -> Self {
        Self {
            store,
            publisher,
            removals: Arc::default(),
        }
    }

    /// The publisher.
    pub fn publisher(&self) -> &P {
        &self.publisher
    }

    /// Publishes `messages` in order, each removed from the outbox once the broker has it
    /// (with the other deliveries' removals, see [`Relay`]); stops at the first the broker
    /// does not take, which stays for a sweep.
    pub async fn publish(&self, messages: &[Outgoing]) -> Result<(), RelayError> {
        let published = self.publish_each(messages).await;
        self.removals.add(published.ids);
        self.remove_gathered().await?;
        published.result
    }

    /// Publishes `messages` in order until one fails: the ids published, and the failure.
    async fn publish_each(&self, messages: &[Outgoing]) -> Published {
        let mut ids = Vec::with_capacity(messages.len());
        for message in messages {
            if let Err(source) = self.publisher.publish(message).await {
                let id = message.id.clone();
                let result = Err(RelayError::Publish { id, source });
                return Published { ids, result };
            }
            ids.push(message.id.clone());
        }
        Published {
            ids,
            result: Ok(()),
        }
    }

    /// Removes the ids gathered, unless a removal is running: that one, or the next, takes
    /// them.
    async fn remove_gathered(&self) -> Result<(), RelayError> {
        while let Some(ids) = self.removals.start() {
            // Ends the removal even if this future is dropped midway: the ids it took stay in
            // the table for a sweep, and the next publish removes again.
            let _running = Running(&self.removals);
            self.remove(&ids).await?;
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
        // Its own removal, awaited: the next sweep must not find these rows again.
        let published = self.publish_each(&pending).await;
        self.remove(&published.ids).await?;
        published.result?;
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

    /// Removes the rows of `ids`, [`MAX_REMOVAL`] to a statement: a sweep's batch is the
    /// caller's, and the databases bound a statement's parameters.
    async fn remove(&self, ids: &[String]) -> Result<(), RelayError> {
        let store = |e: &dyn std::fmt::Display| RelayError::Store(e.to_string());
        for chunk in ids.chunks(MAX_REMOVAL) {
            let mut conn = self.store.write_conn().await.map_err(|e| store(&e))?;
            DB::remove_outgoing(&mut conn, chunk)
                .await
                .map_err(|e| store(&e))?;
        }
        Ok(())
    }
}

/// A removal running: ended when dropped.
struct Running<'a>(&'a Removals);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.running.store(false, Ordering::Release);
    }
}

/// What [`Relay::publish_each`] did.
struct Published {
    ids: Vec<String>,
    result: Result<(), RelayError>,
}

/// The most ids one removal deletes.
const MAX_REMOVAL: usize = 256;

impl Removals {
    fn add(&self, mut ids: Vec<String>) {
        self.lock().append(&mut ids);
    }

    /// The ids to remove now, if no removal is running and there are some: this caller runs
    /// the removal, and ends it by dropping a [`Running`].
    fn start(&self) -> Option<Vec<String>> {
        if self.running.swap(true, Ordering::AcqRel) {
            return None;
        }
        let mut pending = self.lock();
        let take = pending.len().min(MAX_REMOVAL);
        let ids: Vec<String> = pending.drain(..take).collect();
        drop(pending);
        if ids.is_empty() {
            self.running.store(false, Ordering::Release);
            // Ids added between the check and the store would wait for the next publish:
            // look once more.
            return (!self.lock().is_empty()).then(|| self.start()).flatten();
        }
        Some(ids)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        // A panic while holding the lock leaves a list of ids, still valid.
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
