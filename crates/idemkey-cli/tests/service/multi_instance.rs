//! Several `idemkey serve` processes on one PostgreSQL database (behaviour §8, §13): storms
//! spread across instances create exactly one note per key, in both modes.

use std::net::SocketAddr;
use std::sync::Arc;

use futures_util::StreamExt;
use idemkey_test_support::needs::postgres_url;
use idemkey_test_support::notes::{ALICE, count_notes, create};
use idemkey_test_support::pg::Schema;
use idemkey_test_support::serve::Serve;
use idemkey_test_support::storm::{raw_create, storm};

use crate::IDEMKEY;

const HELLO: &str = r#"{"title": "hello"}"#;

fn instances(schema: &Schema, n: usize, extra: &[&str]) -> Vec<Serve> {
    (0..n)
        .map(|_| Serve::start(IDEMKEY, &schema.url(), extra))
        .collect()
}

async fn storm_of_64_creates_one_note(args: &[&str]) {
    let mode = args.join(" ");
    let base = postgres_url();
    let schema = Schema::create(&base).await;
    let servers = instances(&schema, 3, args);
    let targets: Vec<SocketAddr> = (0..64).map(|i| servers[i % 3].addr).collect();
    let answers = storm(&targets, |addr| raw_create(addr, ALICE, "storm-64", HELLO)).await;
    assert_eq!(schema.count("notes").await, 1, "{mode}");
    let created: Vec<_> = answers.iter().filter(|a| a.status == 201).collect();
    assert!(!created.is_empty(), "{mode}: {answers:?}");
    assert!(
        created.iter().all(|a| a.body == created[0].body),
        "{mode}: identical bodies"
    );
    assert!(
        answers.iter().all(|a| a.status == 201 || a.status == 409),
        "{mode}: {answers:?}"
    );
}

/// Sends one key to three instances at once; retries until one answer is a 201.
async fn create_three_ways(client: &reqwest::Client, addrs: &[SocketAddr], key: String) -> String {
    for _ in 0..50 {
        let sends = addrs.iter().map(|addr| {
            client
                .post(format!("http://{addr}/v1/notes"))
                .header("authorization", format!("Bearer {ALICE}"))
                .header("idempotency-key", key.as_str())
                .header("content-type", "application/json")
                .body(format!(r#"{{"title": "{key}"}}"#))
                .send()
        });
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

async fn a_thousand_keys_three_times_each(args: &[&str]) {
    let mode = args.join(" ");
    let base = postgres_url();
    let schema = Schema::create(&base).await;
    let servers = instances(&schema, 3, args);
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
    assert_eq!(schema.count("notes").await, 1000, "{mode}");
    assert_eq!(
        ids.iter().collect::<std::collections::HashSet<_>>().len(),
        1000,
        "{mode}"
    );
    assert_eq!(count_notes(&client, &servers[0], ALICE).await, 1000);
}

#[idemkey_test_support::test(needs = [postgres])]
async fn atomic_storm_of_64_across_three_instances() {
    // The default strategy, commit-time: the instances' duplicates run speculatively and
    // meet at the record's insert.
    storm_of_64_creates_one_note(&["--mode", "atomic"]).await;
}

#[idemkey_test_support::test(needs = [postgres])]
async fn atomic_claim_first_storm_of_64_across_three_instances() {
    storm_of_64_creates_one_note(&["--mode", "atomic", "--strategy", "claim-first"]).await;
}

#[idemkey_test_support::test(needs = [postgres])]
async fn atomic_no_lookup_storm_of_64_across_three_instances() {
    storm_of_64_creates_one_note(&["--mode", "atomic", "--no-lookup"]).await;
}

#[idemkey_test_support::test(needs = [postgres])]
async fn lease_storm_of_64_across_three_instances() {
    storm_of_64_creates_one_note(&["--mode", "lease"]).await;
}

#[idemkey_test_support::test(needs = [postgres])]
async fn lease_separate_completion_storm_of_64_across_three_instances() {
    storm_of_64_creates_one_note(&["--mode", "lease", "--separate-completion"]).await;
}

#[idemkey_test_support::test(needs = [postgres])]
async fn atomic_thousand_keys_across_three_instances() {
    a_thousand_keys_three_times_each(&["--mode", "atomic"]).await;
}

#[idemkey_test_support::test(needs = [postgres])]
async fn atomic_claim_first_thousand_keys_across_three_instances() {
    a_thousand_keys_three_times_each(&["--mode", "atomic", "--strategy", "claim-first"]).await;
}

#[idemkey_test_support::test(needs = [postgres])]
async fn lease_thousand_keys_across_three_instances() {
    a_thousand_keys_three_times_each(&["--mode", "lease"]).await;
}

#[idemkey_test_support::test(needs = [postgres])]
async fn sweepers_on_every_instance_share_the_work() {
    let base = postgres_url();
    let schema = Schema::create(&base).await;
    let servers = instances(&schema, 3, &["--retention", "1s"]);
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
        if schema.count("idemkey_records").await == 0 {
            assert_eq!(schema.count("notes").await, 60, "business rows stay");
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
