//! A full disk under SQLite, for real: `idemkey serve` runs on a database in a small tmpfs,
//! which the test then fills to the last byte. Writes fail with SQLITE_FULL; the service
//! answers 5xx problems and stays up, atomic mode leaves no note without its record (or the
//! reverse), and once space is freed the failed key executes exactly once and every later
//! request succeeds (no pooled connection is left stuck in its failed transaction).
//!
//! Mounting needs root (CAP_SYS_ADMIN); without it the tests are ignored outside CI, and fail
//! in CI.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use idemkey_test_support::db::Db;
use idemkey_test_support::process::notes::{ALICE, create_titled, problem_slug};
use idemkey_test_support::process::serve::ServeSpec;

use crate::IDEMKEY;

/// A tmpfs mounted on a temporary directory, unmounted when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let option = format!("size={size}");
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &option, "tmpfs"])
            .arg(dir.path())
            .output()
            .is_ok_and(|out| out.status.success());
        assert!(mounted, "cannot mount a tmpfs on {}", dir.path().display());
        Self { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Writes a file until the filesystem has no byte left; returns its path.
fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("filler");
    let mut file = File::create(&path).unwrap();
    for chunk in [1 << 16, 1 << 12, 1] {
        let bytes = vec![0u8; chunk];
        while file.write(&bytes).is_ok_and(|n| n > 0) {}
    }
    path
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [tmpfs])]
async fn sqlite_full_disk_atomic() {
    full_disk("atomic").await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [tmpfs])]
async fn sqlite_full_disk_lease() {
    full_disk("lease").await;
}

async fn full_disk(mode: &str) {
    let tmpfs = Tmpfs::mount("4m");
    let db = Db::Sqlite(tmpfs.path().join("notes.db"));
    let logs = tempfile::tempdir().unwrap();
    let args = ["--mode", mode, "--lease", "1s", "--secret", "disk"];
    let spec = ServeSpec::new(IDEMKEY, db.url(), &args).logged_in(logs.path());
    let server = spec.start();
    let client = reqwest::Client::new();
    let post = |key: &str| create_titled(&client, server.addr, ALICE, key, key).send();
    assert_eq!(post("before").await.unwrap().status(), 201);

    let filler = fill(tmpfs.path());
    let key = first_failure(&client, server.addr, mode).await;
    let health = client.get(format!("http://{}/healthz", server.addr)).send();
    assert!(health.await.is_ok(), "{mode}: the service is still up");
    no_half_writes(&db, mode).await;

    std::fs::remove_file(filler).unwrap();
    let id = until_created(&client, server.addr, &key).await;
    let mine: Vec<_> = db
        .notes()
        .await
        .into_iter()
        .filter(|(_, t)| *t == key)
        .collect();
    assert_eq!(
        mine,
        [(id, key.clone())],
        "{mode}: exactly one note for {key}"
    );
    let replay = post(&key).await.unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true", "{mode}");
    no_half_writes(&db, mode).await;
    // No connection is left broken by the failed commits: every later request succeeds.
    for i in 0..64 {
        let key = format!("after-{i}");
        let status = post(&key).await.unwrap().status();
        let log = spec.log_tail();
        assert_eq!(status, 201, "{mode}: {key} after space was freed\n{log}");
    }
}

/// Sends new keys until one fails; asserts it is a 5xx problem and returns its key.
async fn first_failure(client: &reqwest::Client, addr: std::net::SocketAddr, mode: &str) -> String {
    for i in 0..500 {
        let key = format!("full-{i}");
        let response = create_titled(client, addr, ALICE, &key, &key)
            .send()
            .await
            .unwrap();
        if response.status() != 201 {
            let status = response.status().as_u16();
            let slug = problem_slug(response).await;
            eprintln!("{mode}: disk full: {key} answered {status} {slug}");
            assert!(status >= 500, "{mode}: {status} {slug}");
            return key;
        }
    }
    panic!("{mode}: the disk never filled up");
}

/// Atomic mode's invariant (lease mode may keep a claim without a note): no note without its
/// record, no record without its note.
async fn no_half_writes(db: &Db, mode: &str) {
    if mode == "atomic" {
        assert_eq!(notes_without_records(db).await, 0, "{mode}");
    }
}

/// Resends `key` until it is created (a claim left by the failure answers 409 until its
/// one-second lease runs out); returns the note's id.
async fn until_created(client: &reqwest::Client, addr: std::net::SocketAddr, key: &str) -> String {
    for _ in 0..600 {
        let response = create_titled(client, addr, ALICE, key, key)
            .send()
            .await
            .unwrap();
        match response.status().as_u16() {
            201 => {
                let body: serde_json::Value = response.json().await.unwrap();
                return body["id"].as_str().unwrap().to_owned();
            }
            409 => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
            other => panic!(
                "{key}: {other} after space was freed: {:?}",
                response.text().await
            ),
        }
    }
    panic!("{key} was never created after space was freed");
}

/// Atomic mode's invariant: notes whose key has no record, plus records without a note.
async fn notes_without_records(db: &Db) -> usize {
    let sql = "SELECT n.title, 'orphan' FROM notes n WHERE NOT EXISTS \
               (SELECT 1 FROM idemkey_records r WHERE r.idem_key = n.title) \
               UNION ALL SELECT r.idem_key, 'orphan' FROM idemkey_records r WHERE NOT EXISTS \
               (SELECT 1 FROM notes n WHERE n.title = r.idem_key)";
    db.rows(sql).await.len()
}
