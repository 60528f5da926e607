//! How an atomic request ends: an [`Outcome`], or an [`AtomicError`], among which the re-runs
//! after serialization failures running out.

use std::error::Error as StdError;
use std::time::Duration;

use idemkey_core::{Answer, Error, StoredResponse};

use crate::Backend;

/// How an atomic request ended.
#[derive(Debug)]
pub enum Outcome<R> {
    /// The handler ran, and its response committed with its writes.
    Executed(R),
    /// The handler ran, but the policy does not store its response: all rolled back.
    NotStored(R),
    /// An equal earlier request completed: its stored response.
    Replayed(StoredResponse),
    /// The key was used for a different request: 422 `key-reused`.
    Mismatch,
    /// 409 `request-in-flight`: an in-flight record left by lease mode, or (PostgreSQL) a
    /// concurrent claim still uncommitted past the wait bound or beyond the waiter cap.
    InFlight {
        /// When to try again.
        retry_after: Duration,
    },
}

/// Why [`crate::SqlxStore::execute`] failed. Either way, nothing was committed, unless the
/// error is [`Error::OutcomeUnknown`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AtomicError<E> {
    /// The handler failed.
    #[error("handler failed: {0}")]
    Handler(#[source] E),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] Error),
}

impl<R> From<Answer> for Outcome<R> {
    fn from(answer: Answer) -> Self {
        match answer {
            Answer::Replay(response) => Self::Replayed(response),
            Answer::Mismatch => Self::Mismatch,
            Answer::InFlight { retry_after } => Self::InFlight { retry_after },
        }
    }
}

/// Whether a serialization failure or deadlock is somewhere in the error's chain.
pub(crate) fn retryable<DB: Backend>(error: &(dyn StdError + 'static)) -> bool {
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(sqlx_error) = error.downcast_ref::<sqlx::Error>() {
            return DB::is_retryable(sqlx_error);
        }
        current = error.source();
    }
    false
}

/// The error once `attempts` transactions all failed to serialize: `store-unavailable`.
pub(crate) fn exhausted(attempts: u32) -> Error {
    Error::Unavailable(format!("transaction failed to serialize {attempts} times").into())
}
