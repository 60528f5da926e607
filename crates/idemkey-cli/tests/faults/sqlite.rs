//! SQLite faults: the database file made read-only under a
//! running `idemkey serve` (`chattr +i` on the file and its `-wal`, which fails writes on
//! files already open, even for root, as a read-only remount would), and several processes
//! on one file killed at once.
//!
//! The `-shm` file is left alone: SQLite maps it into memory, and a mapped file that turns
//! unwritable kills the process with SIGBUS on its next write (as it would any program that
//! maps files), which no error handling can answer.
//!
//! `chattr` needs root and a filesystem with the immutable flag (ext4 here): without them
//! the read-only tests are ignored outside CI, and fail in CI.

use std::path::{Path, PathBuf};
use std::process::Command;

use idemkey_test_support::db::{count_rows, notes_by_title};
use idemkey_test_support::net::load::{self, Receipts};
use idemkey_test_support::process::notes::{ALICE, create};
use idemkey_test_support::process::serve::Serve;

use crate::IDEMKEY;

/// The database and its `-wal`: immutable while this lives.
struct Immutable(Vec<PathBuf>);

impl Immutable {
    fn set(db: &Path) -> Self {
        let files: Vec<PathBuf> = ["", "-wal"]
            .iter()
            .map(|suffix| PathBuf::from(format!("{}{suffix}", db.display())))
            .filter(|file| file.exists())
            .collect();
        let set = Command::new("chattr").arg("+i").args(&files).status();
        assert!(
            set.is_ok_and(|status| status.success()),
            "chattr +i failed on {files:?}"
        );
        Self(files)
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        let _ = Command::new("chattr").arg("-i").args(&self.0).status();
    }
}

async fn post(client: &reqwest::Client, server: &Serve, key: &str) -> reqwest::Response {
    let body = format!("{{\"title\":\"{key}\"}}");
    create(client, server, ALICE, Some(key.as_bytes()), &body)
        .send()
        .await
        .unwrap()
}

async fn read_only_mid_run(mode: &str) {
    let dir = tempfile::tempdir().unwrap();
    let server = Serve::sqlite(IDEMKEY, &dir.path().join("notes.db"), &["--mode", mode]);
    let client = reqwest::Client::new();
    let before = post(&client, &server, "before").await;
    assert_eq!(before.status(), 201);
    let immutable = Immutable::set(&server.db());
    // A new key is refused with a clear error and nothing executed; a stored one replays.
    for key in ["during-1", "during-2"] {
        let refused = post(&client, &server, key).await;
        let status = refused.status().as_u16();
        assert!([500, 503].contains(&status), "{key}: {status}");
        assert_eq!(
            refused.headers()["content-type"],
            "application/problem+json"
        );
    }
    let replay = post(&client, &server, "before").await;
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    drop(immutable);
    // Writable again: the same process executes each refused key exactly once.
    for key in ["during-1", "during-2"] {
        let created = post(&client, &server, key).await;
        assert_eq!(
            created.status(),
            201,
            "{key} after the file is writable again"
        );
        assert_eq!(
            post(&client, &server, key).await.headers()["idempotent-replayed"],
            "true"
        );
    }
    assert_eq!(count_rows(&server.db(), "notes").await, 3);
    let health = client.get(server.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [chattr])]
async fn a_database_made_read_only_mid_run_loses_nothing_atomic() {
    read_only_mid_run("atomic").await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [chattr])]
async fn a_database_made_read_only_mid_run_loses_nothing_lease() {
    read_only_mid_run("lease").await;
}

const PROCESSES: usize = 3;
const CLIENTS: usize = 6;
const KEYS_PER_CLIENT: usize = 40;

/// Three processes share one file; clients spread each key's attempts over them. All three
/// are SIGKILLed at once mid-load, then started again on the same file and ports.
async fn killed_at_once(mode: &str) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("shared.db");
    let args = ["--mode", mode, "--lease", "2s"];
    let mut servers: Vec<Serve> = (0..PROCESSES)
        .map(|_| Serve::sqlite(IDEMKEY, &db, &args))
        .collect();
    let bases: Vec<String> = servers.iter().map(|server| server.url("")).collect();
    let receipts = Receipts::default();
    // 503 busy or down, 500 `outcome-unknown`, 409 a dead process's claim until its lease ends.
    let running = tokio::spawn(load::run(
        bases,
        CLIENTS,
        KEYS_PER_CLIENT,
        &[409, 500, 503],
        receipts.clone(),
    ));
    receipts.wait_for(CLIENTS * KEYS_PER_CLIENT / 3).await;
    for server in &mut servers {
        let _ = Command::new("kill")
            .args(["-KILL", &server.child.id().to_string()])
            .status();
    }
    for server in &mut servers {
        let _ = server.child.wait();
    }
    let restarted: Vec<Serve> = servers.iter().map(|old| old.again(&args)).collect();
    running.await.unwrap();
    let ids = receipts.snapshot();
    let notes = notes_by_title(&db).await;
    assert_eq!(ids.len(), CLIENTS * KEYS_PER_CLIENT);
    for (key, id) in &ids {
        assert_eq!(
            notes.get(key),
            Some(&vec![id.clone()]),
            "{key}: one note, the one acknowledged"
        );
    }
    assert_eq!(notes.len(), ids.len(), "no other notes");
    assert!(receipts.setbacks() > 0, "no request met the kill");
    eprintln!(
        "{mode}: {} keys over {PROCESSES} processes, {} answers retried",
        ids.len(),
        receipts.setbacks()
    );
    drop(restarted);
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_on_one_file_killed_at_once_atomic() {
    killed_at_once("atomic").await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_on_one_file_killed_at_once_lease() {
    killed_at_once("lease").await;
}
