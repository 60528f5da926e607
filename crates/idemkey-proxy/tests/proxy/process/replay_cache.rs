//! `idemkey proxy --replay-cache TTL` on a SQL database: completed records are kept in memory,
//! so a replay of a hot key skips the database. Only for SQL databases: with Redis records the
//! proxy caches replays by default, kept exact by Redis, and the flag is refused in one line.

use std::process::Command;

use idemkey_test_support::process::binary;

use super::start;
use super::upstream::post;

/// With the cache, a replay is answered from memory: the record deleted behind the proxy's
/// back (another process's statement, which the cache does not see) still replays within the
/// time to live. Without the flag the same retry would find no record and run again.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [python3])]
async fn a_replay_is_answered_from_memory_with_the_replay_cache() {
    let app = start(&["--replay-cache", "1h"]);
    let items = app.proxy.url("/items");
    assert_eq!(post(&items, "alice", Some("k1"), "a").await.status(), 201);
    // The first replay reads the record and keeps it.
    let replay = post(&items, "alice", Some("k1"), "a").await;
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    let db = app.db_path();
    let deleted = Command::new("python3")
        .args(["-c", "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('DELETE FROM idemkey_records'); c.commit()"])
        .arg(&db)
        .status()
        .unwrap();
    assert!(deleted.success());
    let cached = post(&items, "alice", Some("k1"), "a").await;
    assert_eq!(cached.status(), 201);
    assert_eq!(cached.headers()["idempotent-replayed"], "true");
    assert_eq!(app.upstream.created().await, 1, "never forwarded again");
}

/// `--replay-cache` with Redis records: one line on stderr, a non-zero exit.
#[idemkey_test_support::test]
fn the_replay_cache_flag_is_refused_with_redis_records() {
    let out = Command::new(binary::idemkey())
        .args([
            "proxy",
            "--upstream",
            "http://127.0.0.1:9",
            "--database-url",
            "redis://127.0.0.1:1",
            "--replay-cache",
            "1s",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("--replay-cache is for SQL databases"),
        "{stderr}"
    );
}
