//! How the service is configured.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use idemkey_core::{DEFAULT_LEASE, DEFAULT_RETENTION};
use idemkey_sqlx::Strategy;
use idemkey_tower::Executions;

/// Which idempotency mode serves `POST /v1/notes` (behaviour [§1](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#1-words-and-guarantees)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// The record commits in the same transaction as the note (the default).
    #[default]
    Atomic,
    /// A claim with a lease, committed first; the note and the stored response then commit
    /// together (or, with records elsewhere, the response is stored afterwards).
    Lease,
}

impl std::str::FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "atomic" => Ok(Self::Atomic),
            "lease" => Ok(Self::Lease),
            other => Err(format!("unknown mode {other:?}: expected atomic or lease")),
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Atomic => "atomic",
            Self::Lease => "lease",
        })
    }
}

/// Renders the metrics in Prometheus text; the binary installs the recorder.
pub type RenderMetrics = Arc<dyn Fn() -> String + Send + Sync>;

/// The service's settings.
#[derive(Clone)]
pub struct NotesConfig {
    /// Bearer secrets and the actor each authenticates.
    pub tokens: Vec<(String, String)>,
    /// The idempotency mode. Defaults to atomic.
    pub mode: Mode,
    /// How long records are kept after completion. Defaults to 24 h.
    pub retention: Duration,
    /// The lease of a lease-mode claim: how long a dead executor's claim blocks retries.
    /// Defaults to 30 s. Unused in atomic mode.
    pub lease: Duration,
    /// The grace after the service's last owner heartbeat past which its lease-mode claims may
    /// be taken over (behaviour [§8a](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#8a-external-effects-lease-mode)). Defaults to `None`: claims live by their
    /// leases alone.
    pub owner_grace: Option<Duration>,
    /// Whether requests without a key run, unrecorded. Defaults to false (a key is required).
    pub optional_key: bool,
    /// The secret behind derived keys (lease mode). Defaults to `None`: the store's own,
    /// made once and kept in the database, the same for every instance and restart.
    pub secret: Option<Arc<[u8]>>,
    /// Renders `/metrics`; without it the endpoint answers an empty document.
    pub metrics: Option<RenderMetrics>,
    /// Where the service's executions are counted, to wait for them at shutdown.
    pub executions: Executions,
    /// How atomic mode claims (behaviour [§8](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#8-atomic-mode)). Defaults to commit-time: creating a note is
    /// a light handler whose only effect is in the transaction.
    pub strategy: Strategy,
    /// Whether atomic mode looks the record up before its write transaction. Defaults to
    /// `None`: the database's own default (`Backend::LOOKUP_FIRST`: on for SQLite and
    /// PostgreSQL, off for MySQL and MariaDB).
    pub lookup_first: Option<bool>,
    /// Lease mode with the records in the notes' database: whether the record completes in
    /// a transaction of its own after the note's, rather than as the note's transaction's
    /// last statement. Defaults to false (one commit less, and never a note without its
    /// record).
    pub separate_completion: bool,
}

impl Default for NotesConfig {
    fn default() -> Self {
        Self {
            tokens: Vec::new(),
            mode: Mode::default(),
            retention: DEFAULT_RETENTION,
            lease: DEFAULT_LEASE,
            owner_grace: None,
            optional_key: false,
            secret: None,
            metrics: None,
            executions: Executions::new(),
            strategy: Strategy::CommitTime,
            lookup_first: None,
            separate_completion: false,
        }
    }
}

impl fmt::Debug for NotesConfig {
    // Secrets stay out of logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NotesConfig")
            .field(
                "actors",
                &self
                    .tokens
                    .iter()
                    .map(|(actor, _)| actor)
                    .collect::<Vec<_>>(),
            )
            .field("mode", &self.mode)
            .field("retention", &self.retention)
            .field("lease", &self.lease)
            .field("owner_grace", &self.owner_grace)
            .field("optional_key", &self.optional_key)
            .finish_non_exhaustive()
    }
}
