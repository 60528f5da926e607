//! The inbox: each delivery run under its message's id in atomic mode, the record, the
//! handler's writes and its outbox committed in one transaction, and the broker told what
//! to do with the delivery.

use std::error::Error as StdError;
use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::future::BoxFuture;
use idemkey_core::{ClaimRequest, Key, Operation, StoredResponse};
use idemkey_sqlx::{
    AtomicError, AtomicHandler, AtomicOptions, AtomicResponse, HandlerResult, Outcome, SqlxStore,
    Strategy,
};
use sqlx::Transaction;

use crate::{Action, DeadLetter, Incoming, Outbox, OutboxDb, Outgoing, RetryReason};

/// How an inbox retries and keeps its records; every setting has a documented default.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Settings {
    /// Deliveries after which a message whose handler keeps failing is dead-lettered.
    /// Defaults to 5.
    pub max_deliveries: u64,
    /// The wait before the second delivery after a failure, doubled for each delivery after
    /// it, up to [`max_backoff`](Self::max_backoff). Defaults to 1 s.
    pub initial_backoff: Duration,
    /// The longest wait between deliveries after failures. Defaults to 60 s.
    pub max_backoff: Duration,
    /// How long a processed message's record is kept: a redelivery or republish later than
    /// this executes again. Longer than the broker redelivers and publishers retry. Defaults
    /// to 7 days.
    pub retention: Duration,
    /// When the record is written in the handler's transaction. Defaults to
    /// [`Strategy::CommitTime`]: the handler runs first and the record is inserted, already
    /// completed, as the transaction's last statement (one statement where a claim and a
    /// completion make two). A redelivery that arrives while the first delivery still runs
    /// then runs the handler too, in a transaction that waits for the first's commit at its
    /// record and is rolled back, and is acknowledged once the first commits: never two
    /// commits. [`Strategy::ClaimFirst`] claims first instead: such a redelivery waits at the
    /// claim and never runs the handler, for handlers that are expensive to run for nothing.
    pub strategy: Strategy,
    /// Which deliveries read the record before the transaction, so that a message already
    /// processed is acknowledged without running the handler. Defaults to [`Lookup::Always`].
    pub lookup: Lookup,
}

/// Which deliveries read their message's record before the handler's transaction
/// ([`Settings::lookup`]). A delivery that does not, of a message already processed, runs the
/// handler in a transaction that is rolled back at the record and is acknowledged (or
/// dead-lettered, for an id reused with another payload): never a commit, but a handler run
/// for nothing. The lookup costs each delivery that makes it a statement, a round trip on a
/// database server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Lookup {
    /// Every delivery (the default): a message already processed, or an id reused with
    /// another payload, never runs the handler, however it arrives.
    #[default]
    Always,
    /// Only the deliveries the broker counts as redeliveries ([`Incoming::delivered`] above
    /// 1): the deliveries after a consumer's crash, a lost acknowledgement or a lapsed
    /// acknowledgement wait, the ones likely to find their message processed. A first
    /// delivery saves the statement; a publisher's duplicate, or an id reused with another
    /// payload, arrives as one and runs the handler for nothing (JetStream drops duplicates
    /// within its duplicate window; RabbitMQ delivers them all). For handlers whose
    /// transaction has no effect outside the database.
    Redeliveries,
    /// None.
    Never,
}

impl Lookup {
    /// Whether the `delivered`th delivery of a message reads its record first.
    fn reads(self, delivered: u64) -> bool {
        match self {
            Self::Always => true,
            Self::Redeliveries => delivered > 1,
            Self::Never => false,
        }
    }
}

impl Settings {
    /// Deliver again after the backoff of the `delivered`th delivery.
    pub(crate) fn retry(&self, delivered: u64, reason: RetryReason) -> Action {
        let doublings = u32::try_from(delivered.saturating_sub(1))
            .unwrap_or(u32::MAX)
            .min(20);
        let after = self
            .initial_backoff
            .saturating_mul(1 << doublings)
            .min(self.max_backoff);
        Action::Retry { after, reason }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            max_deliveries: 5,
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
            retention: Duration::from_secs(7 * 24 * 3600),
            strategy: Strategy::CommitTime,
            lookup: Lookup::Always,
        }
    }
}

/// An idempotent consumer of one operation: each message executed once, in atomic mode, under
/// (consumer, operation@version, message id).
#[derive(Debug)]
pub struct Inbox<DB: OutboxDb> {
    store: SqlxStore<DB>,
    consumer: String,
    operation: Operation,
    settings: Settings,
}

impl<DB: OutboxDb> Clone for Inbox<DB> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            consumer: self.consumer.clone(),
            operation: self.operation.clone(),
            settings: self.settings.clone(),
        }
    }
}

impl<DB: OutboxDb> Inbox<DB> {
    /// The inbox of `consumer` (its durable name: the records' actor) running `operation`,
    /// with records and outbox in `store`'s database. Create the outbox's table first
    /// ([`Inbox::migrate`]).
    pub fn new(store: SqlxStore<DB>, consumer: impl Into<String>, operation: Operation) -> Self {
        Self {
            store,
            consumer: consumer.into(),
            operation,
            settings: Settings::default(),
        }
    }

    /// The inbox with `settings`.
    #[must_use]
    pub fn with_settings(mut self, settings: Settings) -> Self {
        self.settings = settings;
        self
    }

    /// Creates the outbox's table if it is missing (the records' tables are the store's:
    /// its `migrate`).
    pub async fn migrate(&self) -> sqlx::Result<()> {
        DB::create_outbox(self.store.pool()).await
    }

    /// The store.
    pub fn store(&self) -> &SqlxStore<DB> {
        &self.store
    }

    /// Runs `handler` for `incoming` unless an earlier delivery of the message did: the
    /// handler's writes, the record and the messages it put in its [`Outbox`] commit in one
    /// transaction. Returns what the broker is to do with the delivery.
    ///
    /// The handler may run more than once for one delivery (after a serialization failure or
    /// a deadlock, rolled back first): it must do only database work, on the transaction it is
    /// given, and publish through the outbox.
    pub async fn process<H: MessageHandler<DB>>(
        &self,
        incoming: &Incoming<'_>,
        handler: H,
    ) -> Action {
        let key = match incoming.key() {
            Ok(key) => key,
            Err(refused) => return Action::DeadLetter(refused),
        };
        let request = ClaimRequest::new(
            self.consumer.clone(),
            self.operation.clone(),
            key.clone(),
            incoming.fingerprint(),
        )
        .retention(self.settings.retention);
        let mut run = Run {
            handler,
            consumer: &self.consumer,
            operation: &self.operation,
            key: &key,
        };
        let outcome = self
            .store
            .execute(&request, &self.options(incoming.delivered), &mut run)
            .await;
        self.action(outcome, incoming.delivered)
    }

    /// How the store runs the `delivered`th delivery of a message.
    fn options(&self, delivered: u64) -> AtomicOptions {
        AtomicOptions {
            strategy: self.settings.strategy,
            lookup: self.settings.lookup.reads(delivered),
            ..AtomicOptions::default()
        }
    }

    fn action<E: StdError>(
        &self,
        outcome: Result<Outcome<Done>, AtomicError<Failure<E>>>,
        delivered: u64,
    ) -> Action {
        match outcome {
            Ok(Outcome::Executed(done)) => Action::Ack { publish: done.0 },
            Ok(Outcome::Replayed(_)) => Action::Ack {
                publish: Vec::new(),
            },
            Ok(Outcome::Mismatch) => Action::DeadLetter(DeadLetter::Reused),
            Ok(Outcome::InFlight { retry_after }) => Action::Retry {
                after: retry_after,
                reason: RetryReason::InFlight,
            },
            // Every answer is stored; nothing was committed if one were not.
            Ok(Outcome::NotStored(_)) => {
                self.retry(delivered, RetryReason::Store("not stored".into()))
            }
            Err(AtomicError::Handler(Failure::Handler(error)))
                if delivered >= self.settings.max_deliveries =>
            {
                Action::DeadLetter(DeadLetter::Poison {
                    deliveries: delivered,
                    error: error.to_string(),
                })
            }
            Err(AtomicError::Handler(Failure::Handler(error))) => {
                self.retry(delivered, RetryReason::Failed(error.to_string()))
            }
            Err(AtomicError::Handler(Failure::Outbox(error))) => {
                self.retry(delivered, RetryReason::Store(error.to_string()))
            }
            Err(error) => self.retry(delivered, RetryReason::Store(error.to_string())),
        }
    }

    fn retry(&self, delivered: u64, reason: RetryReason) -> Action {
        self.settings.retry(delivered, reason)
    }
}

/// A message's business code: run in the record's transaction, with the outbox.
///
/// Implemented by closures `|tx, outbox| Box::pin(async move { ... })`, and by types that
/// hold what the handler needs of the delivery (its future may borrow them).
pub trait MessageHandler<DB: OutboxDb>: Send {
    /// How the handler fails; a failure rolls everything back.
    type Error: StdError + Send + Sync + 'static;

    /// Does the message's work on `tx`, publishing through `outbox`.
    fn handle<'t>(
        &'t mut self,
        tx: &'t mut Transaction<'static, DB>,
        outbox: &'t mut Outbox,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 't;
}

impl<DB, F, E> MessageHandler<DB> for F
where
    DB: OutboxDb,
    F: for<'t> FnMut(
            &'t mut Transaction<'static, DB>,
            &'t mut Outbox,
        ) -> BoxFuture<'t, Result<(), E>>
        + Send,
    E: StdError + Send + Sync + 'static,
{
    type Error = E;

    fn handle<'t>(
        &'t mut self,
        tx: &'t mut Transaction<'static, DB>,
        outbox: &'t mut Outbox,
    ) -> impl Future<Output = Result<(), E>> + Send + 't {
        self(tx, outbox)
    }
}

/// The caller's handler, run in atomic mode with an outbox.
struct Run<'a, F> {
    handler: F,
    consumer: &'a str,
    operation: &'a Operation,
    key: &'a Key,
}

/// A handler's run that committed: the outbox's messages.
struct Done(Vec<Outgoing>);

impl AtomicResponse for Done {
    fn status(&self) -> u16 {
        200
    }

    fn to_stored(&self) -> StoredResponse {
        StoredResponse::new(200, "")
    }
}

/// Why a run failed: the handler, or writing its outbox.
#[derive(Debug, thiserror::Error)]
enum Failure<E> {
    #[error(transparent)]
    Handler(E),
    #[error("writing the outbox: {0}")]
    Outbox(sqlx::Error),
}

impl<DB: OutboxDb, H: MessageHandler<DB>> AtomicHandler<DB> for Run<'_, H> {
    type Response = Done;
    type Error = Failure<H::Error>;

    async fn call(
        &mut self,
        mut tx: Transaction<'static, DB>,
    ) -> HandlerResult<DB, Done, Failure<H::Error>> {
        let mut outbox = Outbox::new(self.consumer, self.operation, self.key);
        if let Err(error) = self.handler.handle(&mut tx, &mut outbox).await {
            return (Some(tx), Err(Failure::Handler(error)));
        }
        let messages = outbox.into_messages();
        if let Err(error) = DB::insert_outgoing(&mut tx, &messages, now_ms()).await {
            return (Some(tx), Err(Failure::Outbox(error)));
        }
        (Some(tx), Ok(Done(messages)))
    }
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}
