//! The seed experiment's six cases through the actix front end, in both modes, on SQLite and
//! PostgreSQL: what `idemkey serve` answers, the actix service answers.

use idemkey_test_support::db::{Backend, Db};
use idemkey_test_support::net::storm::{raw_create, storm};
use idemkey_test_support::process::notes::{ALICE, BOB, count_notes, create, problem_slug};
use idemkey_test_support::process::serve::Serve;

use crate::{ACTIX_NOTES, idemkey};

const HELLO: &str = r#"{"title": "hello"}"#;
const OTHER: &str = r#"{"title": "other"}"#;

macro_rules! cases {
    ($($name:ident: $backend:ident $mode:literal $(needs $need:ident)?),* $(,)?) => { $(
        #[idemkey_test_support::test($(needs = [$need])?)]
        async fn $name() {
            the_seed_cases(Backend::$backend, $mode).await;
        }
    )* };
}

cases! {
    seed_cases_sqlite_atomic: Sqlite "atomic",
    seed_cases_sqlite_lease: Sqlite "lease",
    seed_cases_postgres_atomic: Postgres "atomic" needs postgres,
    seed_cases_postgres_lease: Postgres "lease" needs postgres,
}

async fn the_seed_cases(backend: Backend, mode: &str) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::create(backend, dir.path()).await;
    let server = Serve::start(ACTIX_NOTES, &db.url(), &["--mode", mode]);
    let client = reqwest::Client::new();
    let post = |secret: &'static str, key: &'static [u8], body: &'static str| {
        create(&client, &server, secret, Some(key), body).send()
    };

    // 1. The response lost after the commit, then the identical retry: the same 201 and
    // body, marked replayed; one note.
    let first = post(ALICE, b"seed-1", HELLO).await.unwrap();
    assert_eq!(first.status(), 201, "{mode}");
    let first = first.text().await.unwrap();
    let retry = post(ALICE, b"seed-1", HELLO).await.unwrap();
    assert_eq!(retry.status(), 201, "{mode}");
    assert_eq!(retry.headers()["idempotent-replayed"], "true", "{mode}");
    assert_eq!(
        retry.text().await.unwrap(),
        first,
        "{mode}: replayed byte for byte"
    );
    assert_eq!(count_notes(&client, &server, ALICE).await, 1, "{mode}");

    // 2. The same actor and key with another title: refused, still one note.
    let changed = post(ALICE, b"seed-1", OTHER).await.unwrap();
    assert_eq!(changed.status(), 422, "{mode}");
    assert_eq!(problem_slug(changed).await, "key-reused", "{mode}");
    assert_eq!(count_notes(&client, &server, ALICE).await, 1, "{mode}");

    // 3. Another actor with the same key: a note of its own.
    let bobs = post(BOB, b"seed-1", HELLO).await.unwrap();
    assert_eq!(bobs.status(), 201, "{mode}");
    assert!(
        bobs.headers().get("idempotent-replayed").is_none(),
        "{mode}"
    );
    assert_eq!(count_notes(&client, &server, BOB).await, 1, "{mode}");

    // 4. Concurrent duplicates, released together: one note, and every 201 is that note (a
    // duplicate in lease mode may instead get the in-flight 409).
    let answers = storm(&[server.addr; 16], |addr| {
        raw_create(addr, ALICE, "seed-4", HELLO)
    })
    .await;
    let created: Vec<_> = answers.iter().filter(|a| a.status == 201).collect();
    assert!(!created.is_empty(), "{mode}: {answers:?}");
    assert!(
        created.iter().all(|a| a.body == created[0].body),
        "{mode}: {answers:?}"
    );
    assert!(
        answers.iter().all(|a| matches!(a.status, 201 | 409)),
        "{mode}: {answers:?}"
    );
    assert_eq!(count_notes(&client, &server, ALICE).await, 2, "{mode}");

    // 5. A create that fails (the title breaks the notes' rule): no note and no saved
    // result, so the same key then creates.
    let invalid = post(ALICE, b"seed-5", r#"{"title": ""}"#).await.unwrap();
    assert_eq!(invalid.status(), 400, "{mode}");
    assert_eq!(count_notes(&client, &server, ALICE).await, 2, "{mode}");
    let valid = post(ALICE, b"seed-5", HELLO).await.unwrap();
    assert_eq!(valid.status(), 201, "{mode}");
    assert!(
        valid.headers().get("idempotent-replayed").is_none(),
        "{mode}"
    );
    assert_eq!(count_notes(&client, &server, ALICE).await, 3, "{mode}");

    // 6. The saved result deleted (the end of retention, `idemkey forget`) before an
    // identical retry: a new note.
    let url = db.query_url();
    let forget = [
        "forget",
        "--database-url",
        &url,
        "--actor",
        "alice",
        "--operation",
        "create-note:v1",
        "--key",
        "seed-1",
    ];
    let out = idemkey(&forget);
    assert!(out.status.success(), "{mode}: {out:?}");
    let again = post(ALICE, b"seed-1", HELLO).await.unwrap();
    assert_eq!(again.status(), 201, "{mode}");
    assert!(
        again.headers().get("idempotent-replayed").is_none(),
        "{mode}"
    );
    assert_ne!(again.text().await.unwrap(), first, "{mode}: a new note");
    assert_eq!(count_notes(&client, &server, ALICE).await, 4, "{mode}");
}
