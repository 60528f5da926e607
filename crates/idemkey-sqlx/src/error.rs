//! Mapping sqlx errors onto idemkey's error; each backend's own rules live in its folder.

use idemkey_core::Error;
use sqlx::error::DatabaseError;

/// Classifies a sqlx error: what may pass if tried again (a wait that ran out, a lost or
/// refused connection, a server shutting down) is `Unavailable`; the rest, permanent until
/// someone acts (a missing table, a denied permission, bad data), is `Backend`.
pub(crate) fn store_error(error: sqlx::Error) -> Error {
    #[cfg(feature = "sqlite")]
    if let sqlx::Error::Database(db) = &error
        && db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some()
    {
        // Whatever the class: the pools replace connections after a read-only or I/O error.
        crate::sqlite::note_fault(&db.code().unwrap_or_default());
    }
    if is_unavailable(&error) {
        Error::Unavailable(Box::new(error))
    } else {
        Error::Backend(Box::new(error))
    }
}

fn is_unavailable(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Io(_)
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => is_transient(db.as_ref()),
        _ => false,
    }
}

/// Asks the backend whose error this is: SQLite's codes and PostgreSQL's SQLSTATEs overlap
/// as numbers ("42501" & 0xff is SQLite's BUSY), so no rule may read both.
fn is_transient(db: &dyn DatabaseError) -> bool {
    #[cfg(feature = "postgres")]
    if let Some(pg) = db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>() {
        return crate::postgres::error::is_transient(pg.code());
    }
    #[cfg(feature = "sqlite")]
    if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
        return db.code().is_some_and(|code| crate::sqlite::is_busy(&code));
    }
    let _ = db;
    false
}

/// Milliseconds for SQL arithmetic, saturating.
pub(crate) fn millis(duration: std::time::Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX / 4)
}
