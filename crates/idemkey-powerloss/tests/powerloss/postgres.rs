//! PostgreSQL with its data directory on the mount, at its defaults for durability (`fsync`,
//! `synchronous_commit` and `full_page_writes` on): the cluster `initdb` made (with its
//! syncs) survives a cut, and every row committed before every server process was SIGKILLed
//! is there after the cut and the crash recovery; on a disk whose syncs lie, committed rows
//! are lost (or the cluster does not start again).

use sqlx::{Connection, PgConnection};

use idemkey_test_support::process::pg_server::Cluster;

use crate::Mounted;

/// Rows committed after the table is set up, each in a transaction of its own.
const ROWS: i64 = 200;

/// Makes a cluster on the mount, cuts once (the cluster must start again), sets up a table,
/// commits [`ROWS`] rows (on lying syncs if `lie`), kills every server process, cuts, and
/// starts the server again. Returns how many rows it has then, `None` if it did not start.
async fn rows_after_cut(lie: bool) -> Option<i64> {
    let fs = Mounted::new();
    let cluster = Cluster::start_in(fs.path());
    cluster.kill9();
    let first = fs.fs.cut().unwrap();
    assert!(
        cluster.try_start_again(),
        "the new cluster did not survive a cut: {}",
        cluster.log_tail()
    );
    let mut conn = PgConnection::connect(&cluster.url()).await.unwrap();
    sqlx::query("CREATE TABLE t (n BIGINT PRIMARY KEY, pad TEXT NOT NULL)")
        .execute(&mut conn)
        .await
        .unwrap();
    fs.fs.set_syncs_lie(lie);
    for n in 0..ROWS {
        sqlx::query("INSERT INTO t (n, pad) VALUES ($1, $2)")
            .bind(n)
            .bind("x".repeat(300))
            .execute(&mut conn)
            .await
            .unwrap();
    }
    drop(conn);
    cluster.kill9();
    let cut = fs.fs.cut().unwrap();
    fs.fs.set_syncs_lie(false);
    if !cluster.try_start_again() {
        eprintln!(
            "lie={lie}: the cluster did not start after a cut that dropped {} bytes and {} entries:\n{}",
            cut.bytes,
            cut.entries,
            cluster.log_tail()
        );
        return None;
    }
    let mut conn = PgConnection::connect(&cluster.url()).await.unwrap();
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM t")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    eprintln!(
        "lie={lie}: {rows} of {ROWS} rows after a cut that dropped {} bytes and {} entries (the cut after initdb: {} bytes, {} entries)",
        cut.bytes, cut.entries, first.bytes, first.entries
    );
    conn.close().await.unwrap();
    Some(rows)
}

#[idemkey_test_support::test(needs = [fuse, pg_server])]
async fn postgresql_keeps_every_committed_row_across_a_cut() {
    assert_eq!(rows_after_cut(false).await, Some(ROWS));
}

#[idemkey_test_support::test(needs = [fuse, pg_server])]
async fn postgresql_loses_committed_rows_on_lying_syncs() {
    let rows = rows_after_cut(true).await;
    assert!(
        rows.is_none_or(|rows| rows < ROWS),
        "all {ROWS} rows kept though no sync was real"
    );
}
