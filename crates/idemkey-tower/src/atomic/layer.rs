//! [`AtomicIdempotencyLayer`].

use idemkey_sqlx::{Backend, SqlxStore, Strategy};
use tower::Layer;

use super::AtomicIdempotency;
use super::shared::Shared;
use crate::{Config, Executions};

/// Applies [`AtomicIdempotency`] to a route: keyed requests run in atomic mode on `store`.
pub struct AtomicIdempotencyLayer<DB: Backend> {
    shared: Shared<DB>,
}

impl<DB: Backend> Clone for AtomicIdempotencyLayer<DB> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<DB: Backend> AtomicIdempotencyLayer<DB> {
    /// The layer with the default [`Config`].
    pub fn new(store: SqlxStore<DB>) -> Self {
        Self::with_config(store, Config::default())
    }

    /// The layer with `config` (its lease settings do not apply: atomic mode holds no lease).
    pub fn with_config(store: SqlxStore<DB>, config: Config) -> Self {
        Self {
            shared: Shared::new(store, config),
        }
    }

    /// The same layer claiming with `strategy` (behaviour [§8](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#8-atomic-mode)). Defaults to
    /// [`Strategy::ClaimFirst`]; [`Strategy::CommitTime`] writes the record in one statement
    /// at the end of the transaction, for light handlers whose only effects are in it.
    #[must_use]
    pub fn strategy(mut self, strategy: Strategy) -> Self {
        self.shared.plan.strategy = strategy;
        self
    }

    /// The same layer with or without the read-only lookup before the write transaction.
    /// With it, a retry of a completed request is replayed without taking the write lock or
    /// running the handler; without it, every first request saves a statement and a round
    /// trip, and a retry runs the handler speculatively under [`Strategy::CommitTime`]
    /// (rolled back, then replayed; claim-first claims the record instead).
    ///
    /// Defaults to the backend's [`Backend::LOOKUP_FIRST`]: on for SQLite and PostgreSQL,
    /// off for MySQL and MariaDB, where each statement costs the server more than a retry's
    /// speculative run does (docs/mysql.md).
    #[must_use]
    pub fn lookup_first(mut self, on: bool) -> Self {
        self.shared.plan.lookup = on;
        self
    }

    /// The same layer, counting its executions in `executions` (shared with other layers).
    #[must_use]
    pub fn with_executions(mut self, executions: Executions) -> Self {
        self.shared.executions = executions;
        self
    }

    /// The exchanges this layer runs in tasks of their own (each commits or rolls back
    /// there): wait for them at shutdown.
    pub fn executions(&self) -> &Executions {
        &self.shared.executions
    }
}

impl<S, DB: Backend> Layer<S> for AtomicIdempotencyLayer<DB> {
    type Service = AtomicIdempotency<S, DB>;

    fn layer(&self, inner: S) -> Self::Service {
        AtomicIdempotency {
            inner,
            shared: self.shared.clone(),
        }
    }
}
