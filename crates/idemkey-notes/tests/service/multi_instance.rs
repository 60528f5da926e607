//! Several `idemkey serve` processes on one database, PostgreSQL or MySQL/MariaDB (behaviour
//! §8, §13): storms spread across instances create exactly one note per key, in both modes,
//! and every instance's sweeper shares the expired records.

use std::net::SocketAddr;
use std::sync::Arc;

use futures_util::StreamExt;
use idemkey_test_support::db::{Backend, Db};
use idemkey_test_support::net::storm::{raw_create, storm};
use idemkey_test_support::process::binary;
use idemkey_test_support::process::notes::{
    ALICE, count_notes, create, create_titled, one_note_answers,
};
use idemkey_test_support::process::serve::Serve;

const HELLO: &str = r#"{"title": "hello"}"#;

/// The service's flags of each case: the modes, strategies and completions it offers.
const ATOMIC: &[&str] = &["--mode", "atomic"];
const CLAIM_FIRST: &[&str] = &["--mode", "atomic", "--strategy", "claim-first"];
const NO_LOOKUP: &[&str] = &["--mode", "atomic", "--no-lookup"];
const LEASE: &[&str] = &["--mode", "lease"];
const SEPARATE_COMPLETION: &[&str] = &["--mode", "lease", "--separate-completion"];

/// Each case once on PostgreSQL and once on MySQL/MariaDB, each on a database of its own.
macro_rules! on_shared_databases {
    ($($case:ident: $run:ident($($arg:ident),*)),* $(,)?) => {
        mod postgres { $(
            #[idemkey_test_support::test(needs = [postgres])]
            async fn $case() { super::$run(super::Backend::Postgres, $(super::$arg),*).await }
        )* }
        mod mysql { $(
            #[idemkey_test_support::test(needs = [mysql])]
            async fn $case() { super::$run(super::Backend::Mysql, $(super::$arg),*).await }
        )* }
    };
}

fn instances(db: &Db, n: usize, extra: &[&str]) -> Vec<Serve> {
    (0..n)
        .map(|_| Serve::start(binary::idemkey(), &db.url(), extra))
        .collect()
}

/// A fresh database on `backend` (none of them keeps a file in the directory).
async fn database(backend: Backend) -> Db {
    let dir = tempfile::tempdir().unwrap();
    Db::create(backend, dir.path()).await
}

/// 64 creates with one key, released together across three instances: one note, and every
/// answer is that note (201, executed or replayed) or the in-flight 409 a duplicate gets while
/// the executor has not finished (behaviour §8).
async fn storm_of_64_creates_one_note(backend: Backend, args: &[&str]) {
    let mode = format!("{backend:?} {}", args.join(" "));
    let db = database(backend).await;
    let servers = instances(&db, 3, args);
    let targets: Vec<SocketAddr> = (0..64).map(|i| servers[i % 3].addr).collect();
    let answers = storm(&targets, |addr| raw_create(addr, ALICE, "storm-64", HELLO)).await;
    let notes = db.notes().await;
    assert_eq!(notes.len(), 1, "{mode}: one note: {notes:?}");
    let created = one_note_answers(&mode, &answers, &notes[0].0);
    println!("storm {mode}: 201 x {created}, 409 x {}", 64 - created);
}

/// Sends one key to three instances at once; retries until one answer is a 201.
async fn create_three_ways(client: &reqwest::Client, addrs: &[SocketAddr], key: String) -> String {
    for _ in 0..50 {
        let sends = addrs
            .iter()
            .map(|&addr| create_titled(client, addr, ALICE, &key, &key).send());
        let mut ids = Vec::new();
        for response in futures_util::future::join_all(sends).await {
            let response = response.unwrap();
            if response.status() == 201 {
                let body: serde_json::Value = response.json().await.unwrap();
                ids.push(body["id"].as_str().unwrap().to_owned());
            } else {
                assert_eq!(
                    response.status(),
                    409,
                    "only in-flight answers may lack the note"
                );
            }
        }
        if let Some(id) = ids.first() {
            assert!(
                ids.iter().all(|other| other == id),
                "one key, one id: {ids:?}"
            );
            return id.clone();
        }
    }
    panic!("key {key} never completed");
}

async fn a_thousand_keys_three_times_each(backend: Backend, args: &[&str]) {
    let mode = format!("{backend:?} {}", args.join(" "));
    let db = database(backend).await;
    let servers = instances(&db, 3, args);
    let addrs: Arc<Vec<SocketAddr>> = Arc::new(servers.iter().map(|s| s.addr).collect());
    let client = reqwest::Client::new();
    let ids: Vec<String> = futures_util::stream::iter(0..1000)
        .map(|i| {
            let (client, addrs) = (client.clone(), addrs.clone());
            async move { create_three_ways(&client, &addrs, format!("key-{i}")).await }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    assert_eq!(db.count("notes").await, 1000, "{mode}");
    assert_eq!(
        ids.iter().collect::<std::collections::HashSet<_>>().len(),
        1000,
        "{mode}"
    );
    assert_eq!(count_notes(&client, &servers[0], ALICE).await, 1000);
}

on_shared_databases!(
    // The default strategy, commit-time: the instances' duplicates run speculatively and
    // meet at the record's insert.
    atomic_storm_of_64_across_three_instances: storm_of_64_creates_one_note(ATOMIC),
    atomic_claim_first_storm_of_64_across_three_instances: storm_of_64_creates_one_note(
        CLAIM_FIRST
    ),
    atomic_no_lookup_storm_of_64_across_three_instances: storm_of_64_creates_one_note(NO_LOOKUP),
    lease_storm_of_64_across_three_instances: storm_of_64_creates_one_note(LEASE),
    lease_separate_completion_storm_of_64_across_three_instances: storm_of_64_creates_one_note(
        SEPARATE_COMPLETION
    ),
    atomic_thousand_keys_across_three_instances: a_thousand_keys_three_times_each(ATOMIC),
    atomic_claim_first_thousand_keys_across_three_instances: a_thousand_keys_three_times_each(
        CLAIM_FIRST
    ),
    lease_thousand_keys_across_three_instances: a_thousand_keys_three_times_each(LEASE),
    sweepers_on_every_instance_share_the_work: sweepers_share_the_work(),
);

async fn sweepers_share_the_work(backend: Backend) {
    let db = database(backend).await;
    let servers = instances(&db, 3, &["--retention", "1s"]);
    let client = reqwest::Client::new();
    for i in 0..60 {
        let server = &servers[i % 3];
        let response = create(
            &client,
            server,
            ALICE,
            Some(format!("k{i}").as_bytes()),
            HELLO,
        )
        .send()
        .await
        .unwrap();
        assert_eq!(response.status(), 201);
    }
    for _ in 0..300 {
        if db.count("idemkey_records").await == 0 {
            assert_eq!(db.count("notes").await, 60, "business rows stay");
            for server in servers {
                assert!(
                    server.terminate().success(),
                    "every instance ran its sweeper without failing"
                );
            }
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("the sweepers never emptied the expired records");
}
