//! PostgreSQL restarted mid-load: a private PostgreSQL server of the test's own
//! (initdb in a temporary directory) is crash-restarted (`pg_ctl restart -m immediate`)
//! twice while clients create notes through one `idemkey serve`, retrying each key until it
//! is answered 201. Then: every key has exactly one note, every id a client received exists,
//! a retry replays the same id, and the same `idemkey serve` process, never restarted, is
//! healthy: its pool recovered on its own.
//!
//! Needs PostgreSQL's server binaries (`/usr/lib/postgresql/*/bin`) and, as root, the
//! `postgres` user to run them. Missing: the tests are ignored outside CI, and fail in CI.

use std::collections::BTreeMap;

use idemkey_test_support::db::by_title;
use idemkey_test_support::net::load::{self, Receipts};
use idemkey_test_support::process::notes::{ALICE, create};
use idemkey_test_support::process::pg_server::Cluster;
use idemkey_test_support::process::serve::Serve;

use crate::IDEMKEY;

const CLIENTS: usize = 8;
const KEYS_PER_CLIENT: usize = 40;

async fn notes(url: &str) -> BTreeMap<String, Vec<String>> {
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(url)
        .await
        .unwrap();
    let rows: Vec<(String, String)> = sqlx::query_as("SELECT title, id FROM notes")
        .fetch_all(&mut conn)
        .await
        .unwrap();
    by_title(rows)
}

async fn restarted_mid_load(mode: &[&str]) {
    let cluster = Cluster::start();
    let server = Serve::start(IDEMKEY, &cluster.url(), mode);
    let receipts = Receipts::default();
    let bases = vec![server.url("")];
    // 503 while the database is down, 500 `outcome-unknown` for a commit cut short, 409
    // while a claim whose release failed holds its key.
    let running = tokio::spawn(load::run(
        bases,
        CLIENTS,
        KEYS_PER_CLIENT,
        &[409, 500, 503],
        receipts.clone(),
    ));
    let total = CLIENTS * KEYS_PER_CLIENT;
    for at in [total / 4, total / 2] {
        receipts.wait_for(at).await;
        let cluster = &cluster;
        tokio::task::block_in_place(|| cluster.crash_restart());
    }
    running.await.unwrap();
    let notes = notes(&cluster.url()).await;
    let ids = receipts.snapshot();
    assert_eq!(ids.len(), total);
    for (key, id) in &ids {
        assert_eq!(
            notes.get(key),
            Some(&vec![id.clone()]),
            "{key}: one note, the one acknowledged"
        );
    }
    assert_eq!(notes.len(), total, "no other notes");
    let setbacks = receipts.setbacks();
    eprintln!("{mode:?}: {total} keys, {setbacks} answers retried across two restarts");
    assert!(setbacks > 0, "no request met a restart");
    // A retry replays; the process that lived through both restarts is healthy.
    let client = reqwest::Client::new();
    let (key, id) = ids.iter().next().unwrap();
    let body = format!("{{\"title\":\"{key}\"}}");
    let replay = create(&client, &server, ALICE, Some(key.as_bytes()), &body)
        .send()
        .await
        .unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    let note: serde_json::Value = replay.json().await.unwrap();
    assert_eq!(note["id"].as_str().unwrap(), id);
    let health = client.get(server.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [pg_server])]
async fn postgres_crash_restarted_twice_mid_load_atomic() {
    restarted_mid_load(&["--mode", "atomic"]).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [pg_server])]
async fn postgres_crash_restarted_twice_mid_load_lease() {
    // A claim whose release failed while the database was down holds its key until its
    // lease ends (behaviour §10): a short lease keeps the test short.
    restarted_mid_load(&["--mode", "lease", "--lease", "2s"]).await;
}
