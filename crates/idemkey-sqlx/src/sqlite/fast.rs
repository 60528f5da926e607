//! Atomic mode's claim of a fresh key on SQLite in one hand-off to the writer: the claim is
//! part of the transaction's `BEGIN`.
//!
//! The write lock is held from `BEGIN IMMEDIATE` until the writer is back in its pool, and
//! between two statements the request's task must be scheduled again; one statement fewer
//! inside the lock is throughput (BENCHMARKS.md). sqlx's custom `BEGIN` cannot bind
//! parameters, so the claim's values are SQL literals written in hexadecimal only: no text
//! of the request reaches the SQL as text.
//!
//! `INSERT OR ROLLBACK` ends the transaction itself when the key exists (a duplicate that
//! raced past the lookup, or an expired record): the connection goes back clean and the
//! caller claims the slow way. Any other failure may leave the transaction open, so the
//! writer is marked dirty before the `BEGIN` and rolled back by the writer pool's
//! `after_release` hook, before anyone else can take it.

use std::fmt::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use idemkey_core::{ClaimRequest, RecordId, Result, TryClaim};
use sqlx::sqlite::SqliteConnection;
use sqlx::{AssertSqlSafe, Executor, SqlSafeStr, Sqlite, Transaction};

use crate::SqlxStore;
use crate::error::{millis, store_error};
use crate::row::claim;

/// SQLite's extended result codes for a primary key or unique constraint violation.
const KEY_EXISTS: [&str; 2] = ["1555", "2067"];

/// SQLite settings of a [`crate::SqliteStore`]: whether atomic claims of fresh keys take
/// the one-hand-off path (only with a writer connection of the store's own, whose release
/// hook can clean up after it).
#[derive(Clone, Debug, Default)]
pub struct SqliteSettings {
    pub(crate) fast_claim: Option<DirtyWriter>,
}

/// Whether the store's writer may be inside a transaction that nobody owns: set while a
/// claim's `BEGIN` runs, cleared by success or by the writer pool's release hook.
#[derive(Clone, Debug, Default)]
pub(crate) struct DirtyWriter(Arc<AtomicBool>);

impl DirtyWriter {
    /// The writer pool's `after_release` step: rolls back what a failed `BEGIN` left open.
    /// Closes the connection (`false`) if even that fails.
    pub(crate) async fn clean(&self, conn: &mut SqliteConnection) -> bool {
        if !self.0.swap(false, Ordering::AcqRel) {
            return true;
        }
        match conn.execute("ROLLBACK").await {
            Ok(_) => true,
            // Nothing was left open: `INSERT OR ROLLBACK` had ended it.
            Err(error) => error.to_string().contains("no transaction is active"),
        }
    }
}

/// Begins the write transaction with the claim of `request`'s scope as its first statement,
/// in one hand-off. `None` when the key exists: nothing is left open, claim the slow way.
pub(super) async fn begin_claim(
    store: &SqlxStore<Sqlite>,
    dirty: &DirtyWriter,
    request: &ClaimRequest,
) -> Result<Option<(Transaction<'static, Sqlite>, TryClaim)>> {
    let acquired = Instant::now();
    let record_id = RecordId::new();
    let sql = AssertSqlSafe(begin_and_claim(request, record_id)).into_sql_str();
    let conn = store.write_conn().await?;
    // Held from here: only this request can see the flag until the writer is released.
    dirty.0.store(true, Ordering::Release);
    match Transaction::begin(conn, Some(sql)).await {
        Ok(tx) => {
            dirty.0.store(false, Ordering::Release);
            let claim = claim(request, record_id, 1, acquired, None);
            Ok(Some((tx, TryClaim::Claimed(claim))))
        }
        Err(sqlx::Error::Database(error))
            if error
                .code()
                .is_some_and(|code| KEY_EXISTS.contains(&&*code)) =>
        {
            Ok(None)
        }
        Err(error) => Err(store_error(error)),
    }
}

/// `BEGIN IMMEDIATE` and the claim, as [`super::queries`]' upsert would write a fresh row.
fn begin_and_claim(request: &ClaimRequest, record_id: RecordId) -> String {
    let scope = &request.scope;
    let now = "CAST(unixepoch('subsec') * 1000 AS INTEGER)";
    let (lease, retention) = (millis(request.lease), millis(request.retention));
    let mut sql = String::with_capacity(512);
    sql.push_str(
        "BEGIN IMMEDIATE; INSERT OR ROLLBACK INTO idemkey_records (actor, operation, idem_key, \
         record_id, version, fingerprint, state, token, lease_until, expires_at, created_at, \
         request_id, response) VALUES (",
    );
    for text in [
        scope.actor.as_str(),
        scope.operation.as_str(),
        scope.key.as_str(),
    ] {
        push_text(&mut sql, text);
        sql.push_str(", ");
    }
    push_blob(&mut sql, record_id.as_bytes());
    sql.push_str(", ");
    push_text(&mut sql, request.operation.version());
    sql.push_str(", ");
    push_blob(&mut sql, request.fingerprint.as_bytes());
    // Integers are formatted by Rust, never taken from text.
    let _ = write!(
        sql,
        ", 0, 1, {now} + {lease}, {now} + {lease} + {retention}, {now}, "
    );
    match request.request_id.as_deref() {
        Some(id) => push_text(&mut sql, id),
        None => sql.push_str("NULL"),
    }
    sql.push_str(", NULL)");
    sql
}

/// A text value as a hexadecimal blob literal read back as text (the database is UTF-8).
fn push_text(sql: &mut String, text: &str) {
    sql.push_str("CAST(");
    push_blob(sql, text.as_bytes());
    sql.push_str(" AS TEXT)");
}

fn push_blob(sql: &mut String, bytes: &[u8]) {
    sql.push_str("X'");
    sql.push_str(&hex::encode(bytes));
    sql.push('\'');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_is_hexadecimal() {
        use idemkey_core::{Fingerprint, Key, Operation};
        let operation = Operation::new("op'); DROP TABLE x; --", "v'1");
        let key = Key::parse(b"k'1").unwrap();
        let fingerprint = Fingerprint::builder("POST", "/'").body(b"'");
        let request =
            ClaimRequest::new("a'\\\"", operation, key, fingerprint).request_id("r'); --");
        let sql = begin_and_claim(&request, RecordId::new());
        let values = &sql[sql.find("VALUES").unwrap()..];
        assert!(!values.contains("DROP"), "{values}");
        assert_eq!(values.matches('\'').count() % 2, 0);
        for literal in values.split("X'").skip(1) {
            let hex = &literal[..literal.find('\'').unwrap()];
            assert!(hex.bytes().all(|b| b.is_ascii_hexdigit()), "{hex}");
        }
    }
}
