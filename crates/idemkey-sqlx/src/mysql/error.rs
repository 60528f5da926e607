//! How MySQL's and MariaDB's errors map onto idemkey's: deadlocks re-run, lock waits that ran
//! out, the duplicate key that arbitrates a scope, lost commits.

use idemkey_core::Error;
use sqlx::MySql;
use sqlx::error::DatabaseError;
use sqlx::mysql::MySqlDatabaseError;

/// [`crate::error::store_error`] for MySQL.
pub(crate) fn store_error(error: sqlx::Error) -> Error {
    crate::error::store_error::<MySql>(error)
}

/// `ER_LOCK_WAIT_TIMEOUT`: a statement waited `innodb_lock_wait_timeout` for a row lock. Only
/// the statement rolled back (unless `innodb_rollback_on_timeout`), the transaction is open.
const LOCK_WAIT_TIMEOUT: u16 = 1205;

/// `ER_LOCK_DEADLOCK`: InnoDB rolled the whole transaction back to break a deadlock.
const DEADLOCK: u16 = 1213;

/// `ER_DUP_ENTRY`: the insert met a row of the same key, which arbitrates the scope.
const DUPLICATE_KEY: u16 = 1062;

/// The server's number of one of its errors, if it is one.
fn number(error: &sqlx::Error) -> Option<u16> {
    match error {
        sqlx::Error::Database(db) => db_number(db.as_ref()),
        _ => None,
    }
}

fn db_number(error: &dyn DatabaseError) -> Option<u16> {
    error
        .try_downcast_ref::<MySqlDatabaseError>()
        .map(MySqlDatabaseError::number)
}

/// The number of the sqlx error inside one of idemkey's, if there is one.
fn number_in(error: &Error) -> Option<u16> {
    let (Error::Unavailable(source) | Error::Backend(source)) = error else {
        return None;
    };
    source.downcast_ref::<sqlx::Error>().and_then(number)
}

/// A MySQL error whose number [`is_transient`].
pub(super) fn is_unavailable(error: &dyn DatabaseError) -> bool {
    db_number(error).is_some_and(is_transient)
}

/// Error numbers that may pass if the request is tried again: too many connections (1040,
/// 1203), the server shutting down (1053), a lock wait that ran out (1205), a deadlock that
/// exhausted its re-runs (1213), a statement interrupted or timed out (1317, 3024 on MySQL,
/// 1969 on MariaDB), the connection killed (1927, MariaDB), too many transactions (1637).
/// Every other number (1146 missing table, 1142 denied, 1406 data too long) stays until
/// someone acts: retrying it would never end.
fn is_transient(number: u16) -> bool {
    matches!(
        number,
        1040 | 1053 | 1203 | LOCK_WAIT_TIMEOUT | DEADLOCK | 1317 | 1637 | 1927 | 1969 | 3024
    )
}

/// A deadlock: InnoDB rolled the transaction back, and running it again may pass.
pub(super) fn is_retryable(error: &sqlx::Error) -> bool {
    number(error) == Some(DEADLOCK)
}

/// A deadlock, inside one of idemkey's errors.
pub(super) fn is_deadlock(error: &Error) -> bool {
    number_in(error) == Some(DEADLOCK)
}

/// A claim's lock wait ran out (1205), or was interrupted (1317, a `KILL QUERY`): the claim
/// did not happen, most likely while a concurrent claim held the scope. In flight, not a
/// store failure.
pub(super) fn is_lock_wait_ended(error: &Error) -> bool {
    matches!(number_in(error), Some(LOCK_WAIT_TIMEOUT | 1317))
}

/// An insert met a row of the same key.
pub(super) fn is_duplicate_key(error: &sqlx::Error) -> bool {
    number(error) == Some(DUPLICATE_KEY)
}

/// A commit whose reply was lost may or may not have committed.
pub(super) fn commit_error(error: sqlx::Error) -> Error {
    if is_connection_lost(&error) {
        Error::OutcomeUnknown(Box::new(error))
    } else {
        store_error(error)
    }
}

/// The connection broke (I/O, TLS or protocol failures), or the server ended the session
/// while the commit was in flight (1053 shutdown, 1927 connection killed): the reply does not
/// tell whether the commit took effect.
fn is_connection_lost(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::WorkerCrashed => true,
        _ => matches!(number(error), Some(1053 | 1927)),
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
    fn only_transient_numbers_are_transient() {
        for number in [1040, 1053, 1205, 1213, 1317, 1927, 1969, 3024] {
            assert!(is_transient(number), "{number}");
        }
        // Duplicate key, missing table, denied, data too long, syntax, check constraint.
        for number in [1062, 1146, 1142, 1406, 1064, 4025, 3819] {
            assert!(!is_transient(number), "{number}");
        }
    }

    #[test]
    fn io_is_neither_retryable_nor_a_lock_wait() {
        assert!(!is_retryable(&io()));
        assert!(!is_duplicate_key(&io()));
        assert!(!is_lock_wait_ended(&store_error(io())));
        assert!(!is_deadlock(&Error::Contention));
    }
}
