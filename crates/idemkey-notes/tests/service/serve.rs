//! `idemkey serve` over real sockets, in both modes and with each strategy the service
//! offers: the seed's six cases and the HTTP surface of behaviour §13.

use idemkey_test_support::db::count_rows;
use idemkey_test_support::net::storm::{raw_create, storm};
use idemkey_test_support::process::notes::{ALICE, BOB, count_notes, create, problem_slug};
use idemkey_test_support::process::serve::{Serve, ServeSpec};
use idemkey_test_support::process::{binary, refused, signal};
use idemkey_test_support::wait_until;

use crate::idemkey;

const HELLO: &str = r#"{"title": "hello"}"#;

struct Fixture {
    _dir: tempfile::TempDir,
    server: Serve,
    client: reqwest::Client,
}

/// A mode of `idemkey serve` and the flags that choose its strategy.
#[derive(Clone, Copy)]
struct Variant {
    mode: &'static str,
    flags: &'static [&'static str],
}

impl Variant {
    const fn new(mode: &'static str, flags: &'static [&'static str]) -> Self {
        Self { mode, flags }
    }

    fn is_atomic(self) -> bool {
        self.mode == "atomic"
    }
}

const ATOMIC: Variant = Variant::new("atomic", &[]);
const LEASE: Variant = Variant::new("lease", &[]);

fn start(variant: Variant, extra: &[&str]) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec!["--mode", variant.mode];
    args.extend_from_slice(variant.flags);
    args.extend_from_slice(extra);
    let server = Serve::sqlite(binary::idemkey(), &dir.path().join("notes.db"), &args);
    Fixture {
        _dir: dir,
        server,
        client: reqwest::Client::new(),
    }
}

impl Fixture {
    async fn post(&self, secret: &str, key: Option<&[u8]>, body: &str) -> reqwest::Response {
        create(&self.client, &self.server, secret, key, body)
            .send()
            .await
            .unwrap()
    }

    async fn notes(&self, secret: &str) -> usize {
        count_notes(&self.client, &self.server, secret).await
    }
}

/// Expands every case for each mode and strategy: atomic commit-time (the default), its
/// `--no-lookup`, claim-first; lease mode completing in the note's transaction (the
/// default) and `--separate-completion`.
macro_rules! every_variant {
    ($($case:ident),* $(,)?) => {
        every_variant!(@in atomic, "atomic", &[], $($case),*);
        every_variant!(@in atomic_no_lookup, "atomic", &["--no-lookup"], $($case),*);
        every_variant!(@in atomic_claim_first, "atomic", &["--strategy", "claim-first"], $($case),*);
        every_variant!(@in lease, "lease", &[], $($case),*);
        every_variant!(@in lease_separate_completion, "lease", &["--separate-completion"], $($case),*);
    };
    (@in $name:ident, $mode:literal, $flags:expr, $($case:ident),*) => {
        mod $name { $(
            #[idemkey_test_support::test]
            async fn $case() { super::$case(super::Variant::new($mode, $flags)).await }
        )* }
    };
}

every_variant!(
    response_lost_after_commit_then_identical_retry,
    same_actor_and_key_with_changed_title_is_rejected,
    another_actor_with_the_same_key_gets_a_separate_note,
    note_creation_failing_in_the_database_stores_nothing,
    saved_result_deleted_before_an_identical_retry,
    keys_are_validated,
    authentication_and_isolation,
    validation_failures_are_not_stored,
    equivalent_json_replays_with_every_header,
    oversized_body_is_413_and_the_key_stays_usable,
    storm_of_32_creates_one_note,
);

async fn response_lost_after_commit_then_identical_retry(mode: Variant) {
    let f = start(mode, &[]);
    // The client never reads the first response: it is "lost".
    drop(f.post(ALICE, Some(b"key-a"), HELLO).await);
    let retry = f.post(ALICE, Some(b"key-a"), HELLO).await;
    assert_eq!(retry.status(), 201);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(f.notes(ALICE).await, 1);
}

async fn same_actor_and_key_with_changed_title_is_rejected(mode: Variant) {
    let f = start(mode, &[]);
    assert_eq!(f.post(ALICE, Some(b"key-a"), HELLO).await.status(), 201);
    let changed = f
        .post(ALICE, Some(b"key-a"), r#"{"title": "changed"}"#)
        .await;
    assert_eq!(changed.status(), 422);
    assert_eq!(problem_slug(changed).await, "key-reused");
    assert_eq!(f.notes(ALICE).await, 1);
}

async fn another_actor_with_the_same_key_gets_a_separate_note(mode: Variant) {
    let f = start(mode, &[]);
    let a: serde_json::Value = f
        .post(ALICE, Some(b"key-a"), HELLO)
        .await
        .json()
        .await
        .unwrap();
    let b = f.post(BOB, Some(b"key-a"), HELLO).await;
    assert_eq!(b.status(), 201);
    assert!(b.headers().get("idempotent-replayed").is_none());
    let b: serde_json::Value = b.json().await.unwrap();
    assert_ne!(a["id"], b["id"]);
    assert_eq!((f.notes(ALICE).await, f.notes(BOB).await), (1, 1));
}

async fn note_creation_failing_in_the_database_stores_nothing(mode: Variant) {
    let f = start(mode, &[]);
    // A test-only trigger makes the business write fail after the claim.
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", f.server.db().display()))
        .await
        .unwrap();
    sqlx::query("CREATE TRIGGER fail BEFORE INSERT ON notes WHEN NEW.title = 'explode' BEGIN SELECT RAISE(ABORT, 'injected'); END")
        .execute(&pool).await.unwrap();
    let body = r#"{"title": "explode"}"#;
    let failed = f.post(ALICE, Some(b"key-a"), body).await;
    assert_eq!(failed.status(), 500);
    assert_eq!(f.notes(ALICE).await, 0);
    if mode.is_atomic() {
        assert_eq!(count_rows(&f.server.db(), "idemkey_records").await, 0);
    }
    sqlx::query("DROP TRIGGER fail")
        .execute(&pool)
        .await
        .unwrap();
    assert_eq!(f.post(ALICE, Some(b"key-a"), body).await.status(), 201);
    assert_eq!(f.post(ALICE, Some(b"key-a"), body).await.status(), 201);
    assert_eq!(f.notes(ALICE).await, 1);
}

async fn saved_result_deleted_before_an_identical_retry(mode: Variant) {
    let f = start(mode, &[]);
    assert_eq!(f.post(ALICE, Some(b"key-a"), HELLO).await.status(), 201);
    let url = format!("sqlite://{}", f.server.db().display());
    let forget = [
        "forget",
        "--database-url",
        &url,
        "--actor",
        "alice",
        "--operation",
        "create-note:v1",
        "--key",
        "key-a",
    ];
    // Another version of the operation names no record: nothing is deleted.
    let mut other_version = forget.to_vec();
    other_version[6] = "create-note:v999-garbage";
    assert_eq!(idemkey(&other_version).status.code(), Some(1));
    let kept = f.post(ALICE, Some(b"key-a"), HELLO).await;
    assert_eq!(kept.headers()["idempotent-replayed"], "true");
    let out = idemkey(&forget);
    assert!(out.status.success(), "{out:?}");
    let retry = f.post(ALICE, Some(b"key-a"), HELLO).await;
    assert_eq!(retry.status(), 201);
    assert!(retry.headers().get("idempotent-replayed").is_none());
    assert_eq!(f.notes(ALICE).await, 2);
    let mut unknown = forget.to_vec();
    unknown[8] = "never-used";
    assert_eq!(
        idemkey(&unknown).status.code(),
        Some(1),
        "forgetting nothing exits 1"
    );
}

async fn keys_are_validated(mode: Variant) {
    let f = start(mode, &[]);
    let missing = f.post(ALICE, None, HELLO).await;
    assert_eq!(missing.status(), 400);
    assert_eq!(problem_slug(missing).await, "key-missing");
    let long = vec![b'k'; 256];
    for bad in [&b""[..], &long, b"a b", b"a\tb", "clé".as_bytes(), b"\"abc"] {
        let response = f.post(ALICE, Some(bad), HELLO).await;
        assert_eq!(response.status(), 400, "{:?}", String::from_utf8_lossy(bad));
        assert_eq!(problem_slug(response).await, "key-invalid");
    }
    let longest = vec![b'k'; 255];
    for good in [&longest[..], b"!#$%&'()*+,-./:;<=>?@[]^_`{|}~"] {
        assert_eq!(f.post(ALICE, Some(good), HELLO).await.status(), 201);
        let again = f.post(ALICE, Some(good), HELLO).await;
        assert_eq!(again.headers()["idempotent-replayed"], "true");
    }
    assert_eq!(f.post(ALICE, Some(b"\"k\""), HELLO).await.status(), 201);
    let bare = f.post(ALICE, Some(b"k"), HELLO).await;
    assert_eq!(
        bare.headers()["idempotent-replayed"],
        "true",
        "\"k\" and k are one key"
    );
    assert_eq!(f.notes(ALICE).await, 3);
}

async fn authentication_and_isolation(mode: Variant) {
    let f = start(mode, &[]);
    let no_token = f
        .client
        .post(f.server.url("/v1/notes"))
        .header("idempotency-key", "k")
        .body(HELLO)
        .send()
        .await
        .unwrap();
    assert_eq!(no_token.status(), 401);
    assert_eq!(problem_slug(no_token).await, "unauthorized");
    assert_eq!(f.post("wrong", Some(b"k"), HELLO).await.status(), 401);
    let note: serde_json::Value = f.post(ALICE, Some(b"k"), HELLO).await.json().await.unwrap();
    let path = format!("/v1/notes/{}", note["id"].as_str().unwrap());
    let get = |secret: &'static str| {
        f.client
            .get(f.server.url(&path))
            .header("authorization", format!("Bearer {secret}"))
            .send()
    };
    assert_eq!(get(ALICE).await.unwrap().status(), 200);
    let other = get(BOB).await.unwrap();
    assert_eq!(other.status(), 404);
    assert_eq!(problem_slug(other).await, "not-found");
}

async fn validation_failures_are_not_stored(mode: Variant) {
    let f = start(mode, &[]);
    for bad in [
        r#"{"title": ""}"#,
        r#"{"title": "x", "extra": 1}"#,
        "{",
        r#"{"title": 5}"#,
    ] {
        let rejected = f.post(ALICE, Some(b"key-v"), bad).await;
        assert_eq!(rejected.status(), 400, "{bad}");
        assert_eq!(problem_slug(rejected).await, "validation");
    }
    assert_eq!(f.post(ALICE, Some(b"key-v"), HELLO).await.status(), 201);
    assert_eq!(f.notes(ALICE).await, 1);
}

async fn equivalent_json_replays_with_every_header(mode: Variant) {
    let f = start(mode, &[]);
    let first = f.post(ALICE, Some(b"key-j"), r#"{"title":"hello"}"#).await;
    let (status, headers) = (first.status(), first.headers().clone());
    let body = first.bytes().await.unwrap();
    let retry = f
        .post(ALICE, Some(b"key-j"), "{\n  \"title\" :  \"hello\"\n}")
        .await;
    assert_eq!(retry.status(), status);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    for name in ["location", "content-type"] {
        assert_eq!(retry.headers()[name], headers[name], "{name}");
    }
    assert_eq!(retry.bytes().await.unwrap(), body);
}

async fn oversized_body_is_413_and_the_key_stays_usable(mode: Variant) {
    let f = start(mode, &[]);
    let huge = format!(r#"{{"title": "{}"}}"#, "x".repeat(1024 * 1024 + 1));
    let rejected = f.post(ALICE, Some(b"key-big"), &huge).await;
    assert_eq!(rejected.status(), 413);
    assert_eq!(problem_slug(rejected).await, "payload-too-large");
    assert_eq!(f.post(ALICE, Some(b"key-big"), HELLO).await.status(), 201);
}

async fn storm_of_32_creates_one_note(mode: Variant) {
    let f = start(mode, &[]);
    let targets = vec![f.server.addr; 32];
    let answers = storm(&targets, |addr| raw_create(addr, ALICE, "storm", HELLO)).await;
    assert_eq!(f.notes(ALICE).await, 1);
    let created: Vec<_> = answers.iter().filter(|a| a.status == 201).collect();
    assert!(
        created.iter().all(|a| a.body == created[0].body),
        "identical bodies"
    );
    if mode.is_atomic() {
        assert_eq!(
            created.len(),
            32,
            "atomic mode answers every duplicate: {answers:?}"
        );
    } else {
        assert!(
            answers.iter().all(|a| a.status == 201 || a.status == 409),
            "{answers:?}"
        );
    }
}

#[idemkey_test_support::test]
async fn two_processes_on_one_sqlite_file_create_one_note() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("shared.db");
    let first = Serve::sqlite(binary::idemkey(), &db, &[]);
    let second = Serve::sqlite(binary::idemkey(), &db, &[]);
    let targets: Vec<_> = (0..32)
        .map(|i| if i % 2 == 0 { first.addr } else { second.addr })
        .collect();
    let answers = storm(&targets, |addr| raw_create(addr, ALICE, "split", HELLO)).await;
    assert!(answers.iter().all(|a| a.status == 201), "{answers:?}");
    assert_eq!(count_notes(&reqwest::Client::new(), &first, ALICE).await, 1);
}

#[idemkey_test_support::test]
async fn sigterm_stops_the_service_cleanly() {
    let f = start(ATOMIC, &[]);
    assert_eq!(f.post(ALICE, Some(b"k"), HELLO).await.status(), 201);
    let Fixture { server, _dir, .. } = f;
    assert!(server.terminate().success());
}

#[idemkey_test_support::test]
async fn openapi_documents_the_real_routes_and_the_idempotency_rules() {
    let f = start(ATOMIC, &["--retention", "90m"]);
    let doc: serde_json::Value = f
        .client
        .get(f.server.url("/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let rules = &doc["x-idempotency"];
    assert_eq!(
        (
            rules["retention_seconds"].as_u64(),
            rules["key"]["max_length"].as_u64()
        ),
        (Some(5400), Some(255))
    );
    let paths = doc["paths"].as_object().unwrap();
    assert_eq!(paths.len(), 4);
    for (path, operations) in paths {
        for method in operations.as_object().unwrap().keys() {
            let url = f.server.url(&path.replace("{id}", "no-such-note"));
            let method = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let response = f
                .client
                .request(method.clone(), url)
                .header("authorization", format!("Bearer {ALICE}"))
                .header("idempotency-key", "doc")
                .header("content-type", "application/json")
                .body(HELLO)
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            assert_ne!(status, 405, "{method} {path}");
            if status == 404 {
                // The route exists and answered: an unknown route has no problem body.
                assert_eq!(problem_slug(response).await, "not-found", "{method} {path}");
            }
        }
    }
}

#[idemkey_test_support::test]
async fn sweep_deletes_expired_records_from_the_command_line() {
    let f = start(ATOMIC, &["--retention", "1s"]);
    assert_eq!(f.post(ALICE, Some(b"k"), HELLO).await.status(), 201);
    let Fixture { server, _dir, .. } = f;
    let db = server.db();
    assert!(server.terminate().success());
    // Wait out the retention; what is asserted is the sweep's count, not the time.
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let url = format!("sqlite://{}", db.display());
    let out = idemkey(&["sweep", "--database-url", &url]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "deleted 1 expired records"
    );
    assert_eq!(count_rows(&db, "notes").await, 1, "business rows stay");
}

#[idemkey_test_support::test]
async fn the_background_sweeper_deletes_expired_records() {
    let f = start(LEASE, &["--retention", "1s"]);
    assert_eq!(f.post(ALICE, Some(b"k"), HELLO).await.status(), 201);
    for _ in 0..300 {
        if count_rows(&f.server.db(), "idemkey_records").await == 0 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("the sweeper never deleted the expired record");
}

#[idemkey_test_support::test]
fn bad_command_lines_fail_with_one_line() {
    for args in [
        &["serve", "--mode", "sometimes"][..],
        &["serve", "--retention", "soon"],
        &["serve", "--token", "nosecret"],
        &["serve", "--database-url", "mysql://x"],
        &[
            "forget",
            "--database-url",
            "sqlite:///nonexistent/dir/x.db",
            "--actor",
            "a",
            "--operation",
            "o",
            "--key",
            "k",
        ],
        &["forget", "--actor", "a", "--operation", "o", "--key", "a b"],
    ] {
        let out = idemkey(args);
        assert!(!out.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("error"), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

#[idemkey_test_support::test]
async fn optional_key_runs_requests_without_a_key_unrecorded() {
    let f = start(ATOMIC, &["--optional-key"]);
    assert_eq!(f.post(ALICE, None, HELLO).await.status(), 201);
    assert_eq!(f.post(ALICE, None, HELLO).await.status(), 201);
    assert_eq!(f.notes(ALICE).await, 2);
    assert_eq!(count_rows(&f.server.db(), "idemkey_records").await, 0);
    let keyed = f.post(ALICE, Some(b"k"), HELLO).await;
    assert_eq!(keyed.status(), 201);
    assert_eq!(
        f.post(ALICE, Some(b"k"), HELLO).await.headers()["idempotent-replayed"],
        "true"
    );
}

#[idemkey_test_support::test]
async fn sigterm_lets_an_in_flight_request_finish() {
    for variant in [ATOMIC, LEASE] {
        let mode = variant.mode;
        let f = start(variant, &[]);
        // Hold the database's write lock so the request is in flight inside the server.
        let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", f.server.db().display()))
            .await
            .unwrap();
        let mut lock = pool.begin_with("BEGIN IMMEDIATE").await.unwrap();
        sqlx::query("UPDATE notes SET title = title")
            .execute(&mut *lock)
            .await
            .unwrap();
        let request = tokio::spawn(create(&f.client, &f.server, ALICE, Some(b"k"), HELLO).send());
        // Wait until the server runs the request, then stop it.
        wait_for_execution(&f.client, &f.server).await;
        signal(f.server.pid(), "TERM");
        // Shutdown began (the listener is closed) while the request is still held.
        refused(f.server.addr).await;
        lock.rollback().await.unwrap();
        let response = request.await.unwrap().unwrap();
        assert_eq!(response.status(), 201, "{mode}");
        let Fixture { server, _dir, .. } = f;
        let db = server.db();
        assert!(server.terminate_wait().success(), "{mode}");
        assert_eq!(count_rows(&db, "notes").await, 1, "{mode}");
        let states: Vec<i64> = sqlx::query_scalar("SELECT state FROM idemkey_records")
            .fetch_all(&pool)
            .await
            .unwrap();
        assert_eq!(
            states,
            [2],
            "{mode}: the record completed, no claim left in flight"
        );
    }
}

/// Polls `/metrics` until the server runs one execution: the request has been read and is
/// inside the layer, where a graceful shutdown must let it finish. (An open connection alone
/// is not enough: one whose request hyper has not read yet is closed as idle.)
async fn wait_for_execution(client: &reqwest::Client, server: &Serve) {
    wait_until("the request to reach an execution", 500, || async {
        server.metric(client, "idemkey_executions ").await == 1
    })
    .await;
}

/// `--problem-base` names where the API documents its problem types.
#[idemkey_test_support::test]
async fn problem_types_can_point_to_the_apis_own_documentation() {
    let dir = tempfile::tempdir().unwrap();
    let server = Serve::sqlite(
        binary::idemkey(),
        &dir.path().join("notes.db"),
        &["--problem-base", "https://api.example.test/problems/"],
    );
    let client = reqwest::Client::new();
    let response = create(&client, &server, ALICE, None, r#"{"title":"t"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(
        body["type"],
        "https://api.example.test/problems/key-missing"
    );
}

/// Logs written to a file (not a terminal) are plain text: no colour escape codes.
#[idemkey_test_support::test]
async fn logs_to_a_file_carry_no_escape_codes() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("serve.log");
    let server = ServeSpec::sqlite(binary::idemkey(), &dir.path().join("notes.db"), &[])
        .logged_in(dir.path())
        .rust_log("debug")
        .start();
    let client = reqwest::Client::new();
    let response = create(&client, &server, ALICE, Some(b"k"), HELLO)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    drop(server); // killed: its log is complete
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("DEBUG"), "the debug log was written: {text}");
    assert!(!text.contains('\u{1b}'), "no escape codes: {text:.300}");
}
