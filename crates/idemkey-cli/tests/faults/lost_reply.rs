//! The reply to the database's `COMMIT` (or to lease mode's self-committing note insert) lost
//! *after* the server acted: a relay between `idemkey serve` and PostgreSQL or MariaDB drops
//! the connection instead of passing the reply on. Atomic mode (and, on MySQL, lease mode
//! completing in the note's transaction) answers 500 `outcome-unknown` and the retry replays
//! the committed response; lease mode completing on its own answers a 5xx, releases, and the
//! retry finds the note the first attempt wrote (its id derives from the record). Either way:
//! one note. Needs PostgreSQL, or MySQL or MariaDB (skipped loudly outside CI).

use idemkey_test_support::db::{Backend, Db};
use idemkey_test_support::net::relay::{
    Relay, Trigger, com_query, simple_query, through, upstream,
};
use idemkey_test_support::process::notes::{ALICE, create};
use idemkey_test_support::process::serve::Serve;

use crate::IDEMKEY;

struct Fixture {
    /// The database, reached without the relay.
    db: Db,
    relay: Relay,
    server: Serve,
    client: reqwest::Client,
}

async fn start(backend: Backend, args: &[&str]) -> Fixture {
    let db = Db::on_server(backend).await;
    let url = db.query_url();
    let relay = Relay::start(upstream(&url, default_port(backend))).await;
    let mut relayed = through(&url, relay.addr);
    if backend == Backend::Mysql {
        // The relay matches the protocol's bytes: the connection must not switch to TLS.
        let separator = if relayed.contains('?') { '&' } else { '?' };
        relayed = format!("{relayed}{separator}ssl-mode=disabled");
    }
    let server = Serve::start(IDEMKEY, &relayed, args);
    let fixture = Fixture {
        db,
        relay,
        server,
        client: reqwest::Client::new(),
    };
    // Connections, statements and the derived-key secret are in place before the fault.
    assert_eq!(fixture.post("warm-up", "warm-up").await.status(), 201);
    fixture
}

fn default_port(backend: Backend) -> u16 {
    match backend {
        Backend::Postgres => 5432,
        Backend::Mysql => 3306,
        Backend::Sqlite => unreachable!("a relay stands before a server"),
    }
}

/// The bytes of a `COMMIT` sent as a plain statement, in the backend's protocol.
fn commit(backend: Backend) -> Vec<u8> {
    match backend {
        Backend::Postgres => simple_query("COMMIT"),
        Backend::Mysql => com_query("COMMIT"),
        Backend::Sqlite => unreachable!("a relay stands before a server"),
    }
}

impl Fixture {
    async fn post(&self, key: &str, title: &str) -> reqwest::Response {
        let body = format!("{{\"title\":\"{title}\"}}");
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

    async fn notes_titled(&self, title: &str) -> usize {
        let notes = self.db.notes().await;
        notes.iter().filter(|(_, t)| t == title).count()
    }
}

async fn id_of(response: reqwest::Response) -> String {
    let note: serde_json::Value = response.json().await.unwrap();
    note["id"].as_str().unwrap().to_owned()
}

/// Loses the reply to the next `COMMIT`: 500 `outcome-unknown`, then replays, one note.
async fn commit_reply_lost(backend: Backend, args: &[&str]) {
    let app = start(backend, args).await;
    app.relay.arm(Trigger::ReplyTo(commit(backend)));
    let lost = app.post("lost-commit", "lost-commit").await;
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
    // The database committed before replying: the note and its record are there.
    assert_eq!(app.notes_titled("lost-commit").await, 1);
    let retry = app.post("lost-commit", "lost-commit").await;
    assert_eq!(retry.status(), 201);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    let again = app.post("lost-commit", "lost-commit").await;
    assert_eq!(id_of(retry).await, id_of(again).await);
    assert_eq!(app.notes_titled("lost-commit").await, 1);
}

/// Lease mode completing on its own: loses the reply to the note's insert, which commits on
/// its own. The server answers a 5xx and releases; the retry finds the note.
async fn note_insert_reply_lost(backend: Backend) {
    let app = start(backend, &["--mode", "lease", "--separate-completion"]).await;
    let title = "note lost-insert";
    app.relay.arm(match backend {
        // A new key's statements: the lookup, the claim (`INSERT 0 1`), the note's insert
        // (`INSERT 0 1`), the completion.
        Backend::Postgres => Trigger::NthReplyWith(b"INSERT 0 1\0".to_vec(), 2),
        // A prepared statement: its execution carries the title as a bound value, which no
        // statement before it carries (the claim binds the key, not the body).
        _ => Trigger::ReplyTo(title.as_bytes().to_vec()),
    });
    let lost = app.post("lost-insert", title).await;
    assert_eq!(app.relay.lost(), 1, "the insert's reply was dropped");
    assert!(lost.status().is_server_error(), "{}", lost.status());
    assert_eq!(app.notes_titled(title).await, 1);
    // The claim was released: the retry runs again under the same record, so the same
    // derived note id, and answers with the note the first attempt wrote.
    let retry = app.post("lost-insert", title).await;
    assert_eq!(retry.status(), 201);
    let replay = app.post("lost-insert", title).await;
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(id_of(retry).await, id_of(replay).await);
    assert_eq!(app.notes_titled(title).await, 1);
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn postgres_atomic_commit_time_commit_reply_lost_is_outcome_unknown_then_replays() {
    let args = ["--mode", "atomic", "--strategy", "commit-time"];
    commit_reply_lost(Backend::Postgres, &args).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn postgres_atomic_claim_first_commit_reply_lost_is_outcome_unknown_then_replays() {
    let args = ["--mode", "atomic", "--strategy", "claim-first"];
    commit_reply_lost(Backend::Postgres, &args).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn postgres_lease_note_insert_reply_lost_then_the_retry_finds_the_note() {
    note_insert_reply_lost(Backend::Postgres).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [mysql])]
async fn mysql_atomic_commit_time_commit_reply_lost_is_outcome_unknown_then_replays() {
    let args = ["--mode", "atomic", "--strategy", "commit-time"];
    commit_reply_lost(Backend::Mysql, &args).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [mysql])]
async fn mysql_atomic_claim_first_commit_reply_lost_is_outcome_unknown_then_replays() {
    let args = ["--mode", "atomic", "--strategy", "claim-first"];
    commit_reply_lost(Backend::Mysql, &args).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [mysql])]
async fn mysql_lease_commit_reply_lost_is_outcome_unknown_then_replays() {
    // The record completes as the note's transaction's last statement: that COMMIT's reply.
    commit_reply_lost(Backend::Mysql, &["--mode", "lease"]).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [mysql])]
async fn mysql_lease_note_insert_reply_lost_then_the_retry_finds_the_note() {
    note_insert_reply_lost(Backend::Mysql).await;
}
