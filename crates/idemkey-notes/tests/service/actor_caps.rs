//! Per-actor caps (behaviour §11) against a real `idemkey serve`, in every mode and
//! strategy, on SQLite and PostgreSQL: at the cap a new key is answered 429
//! `actor-cap-reached` with `Retry-After`, nothing is executed or stored; a retry of a key
//! already stored still replays; other actors are not affected; forgetting a record makes room.

use idemkey_test_support::db::count_rows;
use idemkey_test_support::db::pg::Schema;
use idemkey_test_support::process::binary;
use idemkey_test_support::process::notes::{ALICE, BOB, count_notes, create};
use idemkey_test_support::process::serve::Serve;
use idemkey_test_support::wait_until;

use crate::idemkey;

/// The ways a keyed create can run: `--mode` and, for atomic mode, `--strategy`.
const MODES: [&[&str]; 3] = [
    &["--mode", "atomic", "--strategy", "commit-time"],
    &["--mode", "atomic", "--strategy", "claim-first"],
    &["--mode", "lease"],
];

async fn post(
    client: &reqwest::Client,
    server: &Serve,
    secret: &str,
    key: &str,
) -> reqwest::Response {
    let body = format!("{{\"title\":\"note {key}\"}}");
    create(client, server, secret, Some(key.as_bytes()), &body)
        .send()
        .await
        .unwrap()
}

/// A 429 `actor-cap-reached` problem naming `cap`, with a `Retry-After` of at least 1 s.
async fn assert_capped(response: reqwest::Response, cap: &str) {
    assert_eq!(response.status(), 429);
    let headers = response.headers().clone();
    assert_eq!(headers["content-type"], "application/problem+json");
    let retry_after: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(retry_after >= 1);
    let problem: serde_json::Value = response.json().await.unwrap();
    assert!(
        problem["type"]
            .as_str()
            .unwrap()
            .ends_with("#actor-cap-reached"),
        "{problem}"
    );
    assert_eq!(problem["status"], 429);
    assert!(
        problem["detail"].as_str().unwrap().contains(cap),
        "{problem}"
    );
}

/// Alice at a cap of two records: the scenario every mode and database must pass.
async fn records_cap(server: &Serve, forget_url: &str) {
    let client = reqwest::Client::new();
    for key in ["k1", "k2"] {
        assert_eq!(post(&client, server, ALICE, key).await.status(), 201);
    }
    // At the cap: a third key is refused, twice, and runs nothing.
    assert_capped(post(&client, server, ALICE, "k3").await, "live records").await;
    assert_capped(post(&client, server, ALICE, "k3").await, "live records").await;
    assert_eq!(count_notes(&client, server, ALICE).await, 2);
    // A retry of a stored key is answered from its record.
    let retry = post(&client, server, ALICE, "k1").await;
    assert_eq!(retry.status(), 201);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    // Bob has caps of his own.
    for key in ["k1", "k2"] {
        assert_eq!(post(&client, server, BOB, key).await.status(), 201);
    }
    // Forgetting one of Alice's records makes room for one more.
    let forgot = idemkey(&[
        "forget",
        "--database-url",
        forget_url,
        "--actor",
        "alice",
        "--operation",
        "create-note",
        "--key",
        "k1",
    ]);
    assert!(forgot.status.success(), "{forgot:?}");
    // Another process forgot it: the server sees the room at its next reading of Alice's
    // usage, within a second. Until then the new key is refused, and nothing runs.
    wait_until("room for Alice's third key", 1000, || async {
        let answer = post(&client, server, ALICE, "k3").await;
        match answer.status().as_u16() {
            201 => true,
            429 => false,
            status => panic!("k3 answered {status}"),
        }
    })
    .await;
    assert_capped(post(&client, server, ALICE, "k4").await, "live records").await;
    assert_eq!(count_notes(&client, server, ALICE).await, 3);
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_record_cap_a_new_key_is_refused_in_every_mode_on_sqlite() {
    for mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let mut args = mode.to_vec();
        args.extend(["--max-records-per-actor", "2"]);
        let server = Serve::sqlite(binary::idemkey(), &dir.path().join("notes.db"), &args);
        let url = format!("sqlite://{}", server.db().display());
        records_cap(&server, &url).await;
        // Nothing was stored for the refused requests: Alice's two and Bob's two.
        assert_eq!(
            count_rows(&server.db(), "idemkey_records").await,
            4,
            "{mode:?}"
        );
    }
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn at_the_record_cap_a_new_key_is_refused_in_every_mode_on_postgres() {
    let base = idemkey_test_support::runner::needs::postgres_url();
    for mode in MODES {
        let schema = Schema::create(&base).await;
        let mut args = mode.to_vec();
        args.extend(["--max-records-per-actor", "2"]);
        let server = Serve::start(binary::idemkey(), &schema.url(), &args);
        records_cap(&server, &schema.url()).await;
        assert_eq!(schema.count("idemkey_records").await, 4, "{mode:?}");
        assert_eq!(schema.count("notes").await, 5, "{mode:?}");
    }
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_byte_cap_a_new_key_is_refused_in_every_mode() {
    for mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let mut args = mode.to_vec();
        // Two stored creates take more than 300 bytes; one takes less.
        args.extend(["--max-bytes-per-actor", "300"]);
        let server = Serve::sqlite(binary::idemkey(), &dir.path().join("notes.db"), &args);
        let client = reqwest::Client::new();
        assert_eq!(post(&client, &server, ALICE, "k1").await.status(), 201);
        assert_eq!(post(&client, &server, ALICE, "k2").await.status(), 201);
        assert_capped(post(&client, &server, ALICE, "k3").await, "stored bytes").await;
        let retry = post(&client, &server, ALICE, "k2").await;
        assert_eq!(retry.headers()["idempotent-replayed"], "true", "{mode:?}");
        assert_eq!(count_notes(&client, &server, ALICE).await, 2, "{mode:?}");
        assert_eq!(post(&client, &server, BOB, "k1").await.status(), 201);
    }
}

#[idemkey_test_support::test]
fn a_bad_cap_is_one_line_on_stderr() {
    for args in [
        ["serve", "--max-records-per-actor", "0"],
        ["serve", "--max-bytes-per-actor", "lots"],
    ] {
        let output = idemkey(&args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("error: invalid value"), "{stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    }
}

/// On SQLite the cap is exact: writers are serialized, so however 16 concurrent new keys
/// interleave, exactly the cap's worth execute.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_concurrent_new_keys_meet_an_exact_cap_on_sqlite() {
    for mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let mut args = mode.to_vec();
        args.extend(["--max-records-per-actor", "4"]);
        let server = Serve::sqlite(binary::idemkey(), &dir.path().join("notes.db"), &args);
        let client = reqwest::Client::new();
        let keys: Vec<String> = (0..16).map(|i| format!("storm-{i}")).collect();
        let sent = keys.iter().map(|key| post(&client, &server, ALICE, key));
        let statuses: Vec<u16> = futures_util::future::join_all(sent)
            .await
            .iter()
            .map(|response| response.status().as_u16())
            .collect();
        let created = statuses.iter().filter(|&&s| s == 201).count();
        let capped = statuses.iter().filter(|&&s| s == 429).count();
        assert_eq!((created, capped), (4, 12), "{mode:?}: {statuses:?}");
        assert_eq!(count_notes(&client, &server, ALICE).await, 4, "{mode:?}");
    }
}
