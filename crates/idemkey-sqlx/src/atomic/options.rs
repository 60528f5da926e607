//! [`AtomicOptions`] and [`Strategy`]: how [`crate::SqlxStore::execute`] runs a request.

use idemkey_core::{ExpiredLease, StatusPolicy};

/// Options of [`crate::SqlxStore::execute`].
#[derive(Clone, Copy, Debug)]
pub struct AtomicOptions {
    /// Which responses are stored; the others roll back. Defaults to [`StatusPolicy::Default`].
    pub policy: StatusPolicy,
    /// What to do with an expired lease left by lease mode. Defaults to taking over.
    pub on_expired: ExpiredLease,
    /// How many times a transaction runs before serialization failures become
    /// `store-unavailable`. Defaults to 3.
    pub max_attempts: u32,
    /// Claim first, or at commit time. Defaults to [`Strategy::ClaimFirst`].
    pub strategy: Strategy,
    /// Whether a read-only lookup precedes the write transaction, so that a retry of a
    /// completed request is replayed without running the handler or taking the write lock.
    /// Defaults to true. Without it, under [`Strategy::CommitTime`], such a retry runs the
    /// handler speculatively and rolls it back; claim-first claims the record instead.
    pub lookup: bool,
}

/// How atomic mode claims a scope (behaviour [§8](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#8-atomic-mode)); chosen per route.
///
/// Both commit the record and the business writes in one transaction, or neither; both
/// answer a duplicate with the first request's response. They differ in when the record is
/// written, and so in what a duplicate costs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Strategy {
    /// The record is inserted in flight as the transaction's first statement, the handler
    /// runs, and the completion updates the record. A concurrent duplicate waits at its
    /// claim (bounded) and never runs the handler. For handlers whose work is expensive.
    #[default]
    ClaimFirst,
    /// The handler runs first and the record is inserted, already completed, as the
    /// transaction's last statement: one statement instead of two. A concurrent duplicate
    /// from another process runs the handler speculatively, its insert waits for the first
    /// transaction, and it rolls back and replays (duplicates in one process wait for each
    /// other instead). For light handlers whose only effects are in the transaction.
    CommitTime,
}

impl Default for AtomicOptions {
    fn default() -> Self {
        Self {
            policy: StatusPolicy::default(),
            on_expired: ExpiredLease::default(),
            max_attempts: 3,
            strategy: Strategy::default(),
            lookup: true,
        }
    }
}

impl std::str::FromStr for Strategy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "claim-first" => Ok(Self::ClaimFirst),
            "commit-time" => Ok(Self::CommitTime),
            other => Err(format!(
                "unknown strategy {other:?}: expected claim-first or commit-time"
            )),
        }
    }
}

impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::ClaimFirst => "claim-first",
            Self::CommitTime => "commit-time",
        })
    }
}
