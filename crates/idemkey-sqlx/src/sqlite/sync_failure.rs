//! A failed sync stops the store's writes until the process restarts.
//!
//! Why not try again. When Linux fails to write a file's dirty pages back, it may drop them
//! and mark them clean, and report the error to one `fsync` only: the next `fsync` succeeds
//! although the data never reached the disk (the problem PostgreSQL answers by stopping
//! itself). In SQLite's WAL every frame carries a checksum chained from the one before, so a
//! lost frame makes recovery drop every frame after it: commits that returned after the
//! failure, completions whose answers were given, would be lost in the next crash. Nothing
//! the process writes afterwards can be trusted to last; after a restart SQLite recovers the
//! WAL from what is really on disk.
//!
//! Two sources stop the store: a sync of the group commit failed (`group.rs`), and SQLite
//! reported that one of its own syncs failed (`SQLITE_IOERR_FSYNC`, `SQLITE_IOERR_DIR_FSYNC`).
//! SQLite's error names no file, so the second stops every SQLite store of the process.

use std::fmt::Display;
use std::sync::OnceLock;

use idemkey_core::{Error, Result};

/// Why the process's SQLite stores stopped writing: one of SQLite's own syncs failed.
static PROCESS: OnceLock<String> = OnceLock::new();

/// Whether a store still writes: the first failed sync stops it for good, and says why once.
#[derive(Debug, Default)]
pub(crate) struct Writes {
    stopped: OnceLock<String>,
}

impl Writes {
    /// Stops the store's writes after a sync that failed with `error`.
    pub(crate) fn stop(&self, error: &dyn Display) {
        stop(&self.stopped, error);
    }

    /// Refuses a write once the store, or SQLite for any store of the process, met a failed
    /// sync: `Unavailable`, which answers 503 `store-unavailable`.
    pub(crate) fn check(&self) -> Result<()> {
        match self.stopped.get().or_else(|| PROCESS.get()) {
            None => Ok(()),
            Some(why) => Err(Error::Unavailable(
                format!("the SQLite store stopped writing after a failed sync ({why}); restart the process").into(),
            )),
        }
    }
}

/// Stops every SQLite store of the process if `code` (SQLite's extended result code) is a
/// failed sync.
pub(super) fn note_code(code: i32, error: &dyn Display) {
    if is_failed_sync(code) {
        stop(&PROCESS, error);
    }
}

/// A failed sync of a file (`SQLITE_IOERR_FSYNC`, 1034) or of a directory
/// (`SQLITE_IOERR_DIR_FSYNC`, 1290).
fn is_failed_sync(code: i32) -> bool {
    matches!(code, 1034 | 1290)
}

fn stop(stopped: &OnceLock<String>, error: &dyn Display) {
    if stopped.set(error.to_string()).is_ok() {
        tracing::error!(
            %error,
            "a sync of the SQLite database failed: data the disk reported written may be lost, \
             so the store refuses every write (503 store-unavailable) until the process restarts"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_failure_stops_writes_for_good() {
        let writes = Writes::default();
        assert!(writes.check().is_ok());
        writes.stop(&"EIO");
        writes.stop(&"later");
        let Err(Error::Unavailable(why)) = writes.check() else {
            panic!("writes go on after a failed sync");
        };
        assert!(why.to_string().contains("(EIO)"), "{why}");
    }

    #[test]
    fn only_sqlites_sync_codes_stop_the_process_stores() {
        assert!(is_failed_sync(1034) && is_failed_sync(1290));
        // SQLITE_IOERR_WRITE, SQLITE_IOERR, SQLITE_FULL, SQLITE_BUSY.
        assert!(
            [778, 10, 13, 5]
                .into_iter()
                .all(|code| !is_failed_sync(code))
        );
    }
}
