//! How PostgreSQL's errors map onto idemkey's: re-runs, lock timeouts, lost commits.

use idemkey_core::Error;
use sqlx::Postgres;
use sqlx::error::DatabaseError;
use sqlx::postgres::PgDatabaseError;

/// [`crate::error::store_error`] for PostgreSQL.
pub(crate) fn store_error(error: sqlx::Error) -> Error {
    crate::error::store_error::<Postgres>(error)
}

/// SQLSTATE of a statement that gave up waiting for a lock (`lock_timeout`).
const LOCK_NOT_AVAILABLE: &str = "55P03";

/// SQLSTATE of a cancelled statement ("canceling statement due to user request").
const QUERY_CANCELED: &str = "57014";

fn code(error: &sqlx::Error) -> Option<String> {
    match error {
        sqlx::Error::Database(db) => db.code().map(|code| code.into_owned()),
        _ => None,
    }
}

/// A PostgreSQL error whose SQLSTATE [`is_transient`].
pub(super) fn is_unavailable(error: &dyn DatabaseError) -> bool {
    error
        .try_downcast_ref::<PgDatabaseError>()
        .is_some_and(|pg| is_transient(pg.code()))
}

/// SQLSTATEs that may pass if the request is tried again: connection exceptions (class 08),
/// insufficient resources (class 53: too many connections, disk full, out of memory), a lock
/// or statement wait that ran out (55P03, 57014), the server shutting down or starting
/// (57P01..57P03), and serialization failures or deadlocks that exhausted their re-runs.
/// Every other code (42501 insufficient privilege, 22021 bad encoding, 42P01 missing table)
/// stays until someone acts: retrying it would never end.
fn is_transient(code: &str) -> bool {
    code.starts_with("08")
        || code.starts_with("53")
        || matches!(
            code,
            LOCK_NOT_AVAILABLE | QUERY_CANCELED | "57P01" | "57P02" | "57P03" | "40001" | "40P01"
        )
}

/// Serialization failure (40001) or deadlock (40P01): run the transaction again.
pub(super) fn is_retryable(error: &sqlx::Error) -> bool {
    code(error).is_some_and(|code| code == "40001" || code == "40P01")
}

/// Whether a claim's lock wait ended without the lock: its `lock_timeout` ran out (55P03),
/// or it was cancelled (57014).
///
/// PostgreSQL's lock timeout signals the waiting backend with a cancel; when the lock is
/// granted in the same instant the timeout's flag is cleared but the cancel is still pending,
/// and the statement fails as "canceling statement due to user request" (seen under the
/// benchmark's duplicate storms). An operator's `pg_cancel_backend` lands here too, and so
/// does a `statement_timeout` shorter than the claim's wait (57014 as well). Either way the
/// claim's transaction rolled back and nothing ran, most likely while a concurrent claim held
/// the scope: the answer is "in flight, retry", not a store failure.
pub(super) fn is_lock_wait_ended(error: &Error) -> bool {
    let (Error::Unavailable(source) | Error::Backend(source)) = error else {
        return false;
    };
    source
        .downcast_ref::<sqlx::Error>()
        .and_then(code)
        .is_some_and(|code| code == LOCK_NOT_AVAILABLE || code == QUERY_CANCELED)
}

/// A commit whose reply was lost may or may not have committed.
pub(super) fn commit_error(error: sqlx::Error) -> Error {
    if is_connection_lost(&error) {
        Error::OutcomeUnknown(Box::new(error))
    } else {
        store_error(error)
    }
}

/// The connection broke: I/O, TLS or protocol failures, or the server ending the session
/// (class 08, connection exception; 57P01..57P05, shutdown or termination). A `FATAL` sent
/// while a commit was in flight does not tell whether the commit took effect.
fn is_connection_lost(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::WorkerCrashed => true,
        _ => code(error).is_some_and(|code| code.starts_with("08") || code.starts_with("57P")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io() -> sqlx::Error {
        sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset))
    }

    #[test]
    fn a_lost_commit_is_outcome_unknown() {
        assert!(matches!(commit_error(io()), Error::OutcomeUnknown(_)));
        assert!(matches!(
            commit_error(sqlx::Error::PoolTimedOut),
            Error::Unavailable(_)
        ));
        assert!(matches!(
            commit_error(sqlx::Error::RowNotFound),
            Error::Backend(_)
        ));
    }

    #[test]
    fn only_transient_codes_are_transient() {
        for code in [
            "08006", "53300", "53100", "55P03", "57014", "57P01", "57P03", "40001",
        ] {
            assert!(is_transient(code), "{code}");
        }
        for code in [
            "42501", "22021", "22022", "42P01", "23505", "XX000", "0A000",
        ] {
            assert!(!is_transient(code), "{code}");
        }
    }

    #[test]
    fn io_is_neither_retryable_nor_a_lock_timeout() {
        assert!(!is_retryable(&io()));
        assert!(!is_lock_wait_ended(&store_error(io())));
        assert!(!is_lock_wait_ended(&Error::Contention));
    }
}
