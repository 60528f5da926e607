//! The database crashed mid-load: a private server of the test's own is crashed and started
//! again, twice, while clients create notes through one `idemkey serve`, retrying each key
//! until it is answered 201. Then: every key has exactly one note, every id a client received
//! exists (crash recovery kept every acknowledged commit), a retry replays the same id, and
//! the same `idemkey serve` process, never restarted, is healthy: its pool reconnected on its
//! own.
//!
//! - PostgreSQL: initdb in a temporary directory, crash-restarted with
//!   `pg_ctl restart -m immediate`. Needs PostgreSQL's server binaries
//!   (`/usr/lib/postgresql/*/bin`) and, as root, the `postgres` user to run them.
//! - MariaDB: mariadb-install-db in a temporary directory (the default
//!   `innodb_flush_log_at_trx_commit = 1`), killed with SIGKILL and started again. Needs
//!   MariaDB's server binaries (`mariadbd`, `mariadb-install-db`).
//!
//! Missing: the tests are ignored outside CI, and fail in CI.

use std::collections::BTreeMap;

use idemkey_test_support::db::{mysql, pg};
use idemkey_test_support::net::load::{self, Receipts};
use idemkey_test_support::process::mysql_server::MariaDb;
use idemkey_test_support::process::notes::{ALICE, create};
use idemkey_test_support::process::pg_server::Cluster;
use idemkey_test_support::process::serve::Serve;

use crate::IDEMKEY;

const CLIENTS: usize = 8;
const KEYS_PER_CLIENT: usize = 40;

/// A private database server the test crashes.
trait Private {
    /// How it is crashed, for the messages.
    const CRASH: &'static str;

    /// Starts one of the test's own.
    fn start() -> Self;

    /// The URL of its database.
    fn url(&self) -> String;

    /// Crashes it and starts it again on the same data.
    fn crash_restart(&mut self);

    /// Every note of its database, by title.
    async fn notes(&self) -> BTreeMap<String, Vec<String>>;
}

impl Private for Cluster {
    const CRASH: &'static str = "restart";

    fn start() -> Self {
        Cluster::start()
    }

    fn url(&self) -> String {
        Cluster::url(self)
    }

    fn crash_restart(&mut self) {
        Cluster::crash_restart(self);
    }

    async fn notes(&self) -> BTreeMap<String, Vec<String>> {
        pg::notes_by_title(&self.url()).await
    }
}

impl Private for MariaDb {
    const CRASH: &'static str = "SIGKILL";

    fn start() -> Self {
        MariaDb::start()
    }

    fn url(&self) -> String {
        MariaDb::url(self)
    }

    fn crash_restart(&mut self) {
        MariaDb::crash_restart(self);
    }

    async fn notes(&self) -> BTreeMap<String, Vec<String>> {
        mysql::notes_by_title(&self.url()).await
    }
}

async fn crashed_mid_load<P: Private>(mode: &[&str]) {
    let mut database = P::start();
    let server = Serve::start(IDEMKEY, &database.url(), mode);
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
        tokio::task::block_in_place(|| database.crash_restart());
    }
    running.await.unwrap();
    let notes = database.notes().await;
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
    let (setbacks, crash) = (receipts.setbacks(), P::CRASH);
    eprintln!("{mode:?}: {total} keys, {setbacks} answers retried across two of: {crash}");
    assert!(setbacks > 0, "no request met a {crash}");
    // A retry replays; the process that lived through both crashes is healthy.
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
    crashed_mid_load::<Cluster>(&["--mode", "atomic"]).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [pg_server])]
async fn postgres_crash_restarted_twice_mid_load_lease() {
    // A claim whose release failed while the database was down holds its key until its
    // lease ends (behaviour §10): a short lease keeps the test short.
    crashed_mid_load::<Cluster>(&["--mode", "lease", "--lease", "2s"]).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [mariadb_server])]
async fn mariadb_killed_twice_mid_load_atomic() {
    crashed_mid_load::<MariaDb>(&["--mode", "atomic"]).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [mariadb_server])]
async fn mariadb_killed_twice_mid_load_lease() {
    // As PostgreSQL's: a short lease keeps the test short.
    crashed_mid_load::<MariaDb>(&["--mode", "lease", "--lease", "2s"]).await;
}
