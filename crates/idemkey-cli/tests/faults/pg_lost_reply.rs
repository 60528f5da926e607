//! The reply to PostgreSQL's `COMMIT` (or to lease mode's self-committing note insert) lost
//! *after* the server acted: a relay between `idemkey serve` and PostgreSQL drops
//! the connection instead of passing the reply on. Atomic mode answers 500 `outcome-unknown`
//! and the retry replays the committed response; lease mode answers a 5xx, releases, and the
//! retry finds the note the first attempt wrote (its id derives from the record). Either
//! way: one note. Needs PostgreSQL (skipped loudly outside CI).

use idemkey_test_support::db::pg::Schema;
use idemkey_test_support::net::relay::{Relay, Trigger, simple_query, through, upstream};
use idemkey_test_support::process::notes::{ALICE, create};
use idemkey_test_support::process::serve::Serve;

use crate::IDEMKEY;

struct Fixture {
    schema: Schema,
    relay: Relay,
    server: Serve,
    client: reqwest::Client,
}

async fn start(args: &[&str]) -> Fixture {
    let base = idemkey_test_support::runner::needs::postgres_url();
    let schema = Schema::create(&base).await;
    let relay = Relay::start(upstream(&base, 5432)).await;
    let url = through(&schema.url(), relay.addr);
    let server = Serve::start(IDEMKEY, &url, args);
    let fixture = Fixture {
        schema,
        relay,
        server,
        client: reqwest::Client::new(),
    };
    // Connections, statements and the derived-key secret are in place before the fault.
    assert_eq!(fixture.post("warm-up").await.status(), 201);
    fixture
}

impl Fixture {
    async fn post(&self, key: &str) -> reqwest::Response {
        let body = format!("{{\"title\":\"{key}\"}}");
        create(
            &self.client,
            &self.server,
            ALICE,
            Some(key.as_bytes()),
            &body,
        )
        .send()
        .await
        .unwrap()
    }

    async fn notes_titled(&self, title: &str) -> i64 {
        let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&self.schema.url())
            .await
            .unwrap();
        sqlx::query_scalar("SELECT count(*) FROM notes WHERE title = $1")
            .bind(title)
            .fetch_one(&mut conn)
            .await
            .unwrap()
    }
}

async fn id_of(response: reqwest::Response) -> String {
    let note: serde_json::Value = response.json().await.unwrap();
    note["id"].as_str().unwrap().to_owned()
}

async fn commit_reply_lost(strategy: &str) {
    let app = start(&["--mode", "atomic", "--strategy", strategy]).await;
    app.relay.arm(Trigger::ReplyTo(simple_query("COMMIT")));
    let lost = app.post("lost-commit").await;
    assert_eq!(app.relay.lost(), 1, "the COMMIT's reply was dropped");
    assert_eq!(lost.status(), 500);
    let problem: serde_json::Value = lost.json().await.unwrap();
    assert!(
        problem["type"]
            .as_str()
            .unwrap()
            .ends_with("#outcome-unknown"),
        "{problem}"
    );
    // PostgreSQL committed before replying: the note and its record are there.
    assert_eq!(app.notes_titled("lost-commit").await, 1);
    let retry = app.post("lost-commit").await;
    assert_eq!(retry.status(), 201);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    let again = app.post("lost-commit").await;
    assert_eq!(id_of(retry).await, id_of(again).await);
    assert_eq!(app.notes_titled("lost-commit").await, 1);
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn atomic_commit_time_commit_reply_lost_is_outcome_unknown_then_replays() {
    commit_reply_lost("commit-time").await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn atomic_claim_first_commit_reply_lost_is_outcome_unknown_then_replays() {
    commit_reply_lost("claim-first").await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn lease_note_insert_reply_lost_then_the_retry_finds_the_note() {
    let app = start(&["--mode", "lease", "--separate-completion"]).await;
    // A new key's statements: the lookup, the claim (`INSERT 0 1`), the note's insert
    // (`INSERT 0 1`, committing on its own), the completion. Lose the note insert's reply.
    app.relay
        .arm(Trigger::NthReplyWith(b"INSERT 0 1\0".to_vec(), 2));
    let lost = app.post("lost-insert").await;
    assert_eq!(app.relay.lost(), 1, "the insert's reply was dropped");
    assert!(lost.status().is_server_error(), "{}", lost.status());
    assert_eq!(app.notes_titled("lost-insert").await, 1);
    // The claim was released: the retry runs again under the same record, so the same
    // derived note id, and answers with the note the first attempt wrote.
    let retry = app.post("lost-insert").await;
    assert_eq!(retry.status(), 201);
    let replay = app.post("lost-insert").await;
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(id_of(retry).await, id_of(replay).await);
    assert_eq!(app.notes_titled("lost-insert").await, 1);
}
