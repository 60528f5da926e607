//! How SQLite's errors map onto idemkey's: a lock held past the busy timeout, and the faults
//! that spoil a connection for good.

use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use idemkey_core::Error;
use sqlx::Sqlite;
use sqlx::error::DatabaseError;
use sqlx::sqlite::SqliteError;

/// [`crate::error::store_error`] for SQLite.
pub(crate) fn store_error(error: sqlx::Error) -> Error {
    crate::error::store_error::<Sqlite>(error)
}

/// SQLite's code of one of its errors, if it is one.
fn code(error: &dyn DatabaseError) -> Option<String> {
    error.try_downcast_ref::<SqliteError>()?;
    error.code().map(|code| code.into_owned())
}

/// A lock held by another connection past the busy timeout: may pass if tried again.
pub(super) fn is_unavailable(error: &dyn DatabaseError) -> bool {
    code(error).is_some_and(|code| is_busy(&code))
}

/// SQLite's busy or locked, with any extended code (`SQLITE_BUSY_SNAPSHOT` is 517): another
/// connection held the lock past the busy timeout.
fn is_busy(code: &str) -> bool {
    code.parse::<i32>().is_ok_and(|c| matches!(c & 0xff, 5 | 6))
}

/// When this process last met a read-only or I/O error on a SQLite database: connections
/// opened before it are not reused (see [`opened_before_fault`]).
static LAST_FAULT: Mutex<Option<Instant>> = Mutex::new(None);

/// Notes a read-only (`SQLITE_READONLY`, 8) or I/O (`SQLITE_IOERR`, 10) error, with any
/// extended code, whatever the class it is given. SQLite reopens a file it could not write
/// read-only and keeps it so, and an I/O error may leave the connection's pager in its error
/// state: such a connection never writes again, though the file is writable again (a
/// remount, a freed disk), so the pools replace every connection that may have met it.
///
/// A failed sync also stops every SQLite store's writes (`sync_failure.rs`).
pub(super) fn note_fault(error: &dyn DatabaseError) {
    let Some(code) = code(error).and_then(|code| code.parse::<i32>().ok()) else {
        return;
    };
    if matches!(code & 0xff, 8 | 10) {
        *LAST_FAULT.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
    }
    super::sync_failure::note_code(code, &error);
}

/// Whether a connection opened at `opened` (`None`: too long ago to tell) may have met the
/// last fault [`note_fault`] saw.
pub(super) fn opened_before_fault(opened: Option<Instant>) -> bool {
    let last_fault = *LAST_FAULT.lock().unwrap_or_else(PoisonError::into_inner);
    matches!((opened, last_fault), (Some(opened), Some(fault)) if opened <= fault)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_codes() {
        assert!(is_busy("5") && is_busy("517") && is_busy("6") && is_busy("262"));
        assert!(!is_busy("19") && !is_busy("13") && !is_busy("SQLITE"));
    }
}
