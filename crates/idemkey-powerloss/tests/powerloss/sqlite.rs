//! SQLite in WAL mode on the mount, its connection still open when the power goes (the old
//! mount is detached under it): with `synchronous = OFF` committed rows are lost, with `FULL`
//! every committed row survives and the database is whole; on a disk whose syncs lie, `FULL`
//! loses rows too.

use std::path::Path;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteLockingMode, SqliteSynchronous};
use sqlx::{Connection, SqliteConnection};

use crate::Mounted;

/// Rows committed after the table is set up, each in a transaction of its own.
const ROWS: i64 = 200;

fn options(db: &Path) -> SqliteConnectOptions {
    SqliteConnectOptions::new()
        .filename(db)
        .create_if_missing(true)
        // The WAL index in the heap, not a mapped `-shm` on the mount: this process also
        // serves the mount, and a page fault on a mapped file of its own can deadlock it (the
        // faulting thread holds the address space's lock that the filesystem's thread then
        // waits for). The WAL and its syncs, what the cut tests, are the same.
        .locking_mode(SqliteLockingMode::Exclusive)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
}

/// Sets up a table with `synchronous = FULL`, commits [`ROWS`] rows at `synchronous`
/// (`"OFF"` or `"FULL"`; on lying syncs if `lie`), cuts with the connection open, and
/// returns how many rows the database has after it, once its integrity is checked.
async fn rows_after_cut(synchronous: &str, lie: bool) -> i64 {
    let fs = Mounted::new();
    let db = fs.path().join("t.db");
    let mut conn = SqliteConnection::connect_with(&options(&db)).await.unwrap();
    sqlx::query("CREATE TABLE t (n INTEGER PRIMARY KEY, pad TEXT NOT NULL)")
        .execute(&mut conn)
        .await
        .unwrap();
    let pragma = match synchronous {
        "OFF" => "PRAGMA synchronous = OFF",
        "FULL" => "PRAGMA synchronous = FULL",
        other => panic!("synchronous = {other}?"),
    };
    sqlx::query(pragma).execute(&mut conn).await.unwrap();
    fs.fs.set_syncs_lie(lie);
    for n in 0..ROWS {
        sqlx::query("INSERT INTO t (n, pad) VALUES (?, ?)")
            .bind(n)
            .bind("x".repeat(300))
            .execute(&mut conn)
            .await
            .unwrap();
    }
    let cut = fs.fs.cut().unwrap();
    fs.fs.set_syncs_lie(false);
    // The old connection writes to a disk without power now; its close fails, harmlessly.
    let _ = conn.close().await;
    let mut conn = SqliteConnection::connect_with(&options(&db)).await.unwrap();
    let check: String = sqlx::query_scalar("PRAGMA integrity_check")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(check, "ok", "the database is whole after the cut");
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM t")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    eprintln!(
        "synchronous={synchronous} lie={lie}: {rows} of {ROWS} rows after a cut that dropped {} bytes and {} entries",
        cut.bytes, cut.entries
    );
    conn.close().await.unwrap();
    rows
}

#[idemkey_test_support::test(needs = [fuse])]
async fn sqlite_synchronous_off_loses_committed_rows() {
    let rows = rows_after_cut("OFF", false).await;
    assert!(
        rows < ROWS,
        "OFF kept all {ROWS} rows: the cut dropped nothing"
    );
}

#[idemkey_test_support::test(needs = [fuse])]
async fn sqlite_synchronous_full_keeps_every_committed_row() {
    assert_eq!(rows_after_cut("FULL", false).await, ROWS);
}

#[idemkey_test_support::test(needs = [fuse])]
async fn sqlite_synchronous_full_loses_rows_on_lying_syncs() {
    let rows = rows_after_cut("FULL", true).await;
    assert!(
        rows < ROWS,
        "FULL kept all {ROWS} rows though no sync was real"
    );
}
