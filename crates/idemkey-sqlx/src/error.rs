//! Mapping sqlx errors onto idemkey's: the driver's own failures here, each database's codes
//! through its [`Backend`] (its folder's `error.rs`).

use idemkey_core::Error;

use crate::Backend;

/// Classifies a sqlx error of a `DB` store: what may pass if tried again (a wait that ran
/// out, a lost or refused connection, a server shutting down) is `Unavailable`; the rest,
/// permanent until someone acts (a missing table, a denied permission, bad data), is
/// `Backend`. The backend sees every database error first ([`Backend::note_error`]).
pub(crate) fn store_error<DB: Backend>(error: sqlx::Error) -> Error {
    if let sqlx::Error::Database(db) = &error {
        DB::note_error(db.as_ref());
    }
    if is_unavailable::<DB>(&error) {
        Error::Unavailable(Box::new(error))
    } else {
        Error::Backend(Box::new(error))
    }
}

/// The driver's transient failures, whatever the database; then the database's own codes,
/// which only its backend may read: SQLite's codes and PostgreSQL's SQLSTATEs overlap as
/// numbers ("42501" & 0xff is SQLite's BUSY).
fn is_unavailable<DB: Backend>(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Io(_)
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => DB::is_unavailable(db.as_ref()),
        _ => false,
    }
}

/// Milliseconds for SQL arithmetic, saturating.
pub(crate) fn millis(duration: std::time::Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX / 4)
}
