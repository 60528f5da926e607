//! Atomic mode's lookup before the write transaction, per database (docs/mysql.md): on by
//! default on SQLite and PostgreSQL, off on MySQL and MariaDB, `--lookup` and `--no-lookup`
//! overriding. Seen from outside through the statements the service logs (sqlx's
//! `sqlx::query` events): without the lookup, a retry of a completed request runs the
//! handler (its note's insert, rolled back) before its replay; with it, the lookup answers.

use idemkey_test_support::db::{Backend, Db};
use idemkey_test_support::process::binary;
use idemkey_test_support::process::notes::{ALICE, create};
use idemkey_test_support::process::serve::ServeSpec;

use crate::idemkey;

const HELLO: &str = r#"{"title": "hello"}"#;

/// The note's insert, as sqlx logs the statement (its first words).
const NOTE_INSERT: &str = "INSERT INTO notes (id,";

/// How many times the service ran the handler for a create and its retry with the same key,
/// on `backend` with `flags`; both are answered 201 with the same note, the retry replayed.
async fn handler_runs(backend: Backend, flags: &[&str]) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::create(backend, dir.path()).await;
    let mut args = vec!["--mode", "atomic"];
    args.extend_from_slice(flags);
    let spec = ServeSpec::new(binary::idemkey(), db.url(), &args)
        .logged_in(dir.path())
        .rust_log("warn,sqlx::query=debug");
    let server = spec.start();
    let client = reqwest::Client::new();
    let mut ids = Vec::new();
    for attempt in ["first", "retry"] {
        let response = create(&client, &server, ALICE, Some(b"lookup-key"), HELLO)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 201, "{backend:?} {flags:?}: {attempt}");
        let replayed = response.headers().get("idempotent-replayed").is_some();
        assert_eq!(replayed, attempt == "retry", "{backend:?} {flags:?}");
        let body: serde_json::Value = response.json().await.unwrap();
        ids.push(body["id"].as_str().unwrap().to_owned());
    }
    assert_eq!(ids[0], ids[1], "{backend:?} {flags:?}: the retry replays");
    assert_eq!(db.notes().await.len(), 1, "{backend:?} {flags:?}");
    drop(server);
    let log = std::fs::read_to_string(dir.path().join("serve.log")).unwrap();
    log.lines()
        .filter(|line| line.contains(NOTE_INSERT))
        .count()
}

#[idemkey_test_support::test]
async fn sqlite_looks_up_first_by_default() {
    assert_eq!(handler_runs(Backend::Sqlite, &[]).await, 1);
    assert_eq!(handler_runs(Backend::Sqlite, &["--no-lookup"]).await, 2);
}

#[idemkey_test_support::test(needs = [postgres])]
async fn postgres_looks_up_first_by_default() {
    assert_eq!(handler_runs(Backend::Postgres, &[]).await, 1);
}

#[idemkey_test_support::test(needs = [mysql])]
async fn mysql_starts_without_the_lookup_by_default() {
    assert_eq!(
        handler_runs(Backend::Mysql, &[]).await,
        2,
        "the retry runs the handler speculatively"
    );
    assert_eq!(handler_runs(Backend::Mysql, &["--lookup"]).await, 1);
}

#[idemkey_test_support::test]
fn lookup_and_no_lookup_conflict() {
    let out = idemkey(&[
        "serve",
        "--database-url",
        "sqlite::memory:",
        "--lookup",
        "--no-lookup",
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--lookup"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}
