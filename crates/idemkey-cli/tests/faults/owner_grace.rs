//! Owners' heartbeats, with real processes on PostgreSQL: `idemkey serve` in lease mode with
//! a lease far longer than the test (300 s) and a short owner grace (1 s). A request's
//! handler is held inside its note insert (a trigger waits for an advisory lock the test
//! holds) when its process is killed or frozen; a retry elsewhere is executed once the
//! owner's heartbeat has lapsed, long before the lease would have run out, and a frozen
//! owner's late completion is fenced off. The polls give up after 60 s, a fifth of the
//! lease: a takeover within them can only have come from the heartbeat.
//! Needs `IDEMKEY_TEST_PG_URL` (skipped loudly outside CI).

use idemkey_test_support::db::pg::pids;
use idemkey_test_support::db::{Backend, Db};
use idemkey_test_support::process::notes::{ALICE, create_titled};
use idemkey_test_support::process::serve::{Serve, ServeSpec};
use idemkey_test_support::wait_until;

use crate::IDEMKEY;
use crate::stale::{a_is_fenced_off, hold_first_executor, settled};

const KEY: &str = "stale-owner";
const ARGS: &[&str] = &["--mode", "lease", "--lease", "300s", "--owner-grace", "1s"];

/// 60 s of 10 ms polls: how long a takeover may take before the test fails.
const GUARD: usize = 6000;

/// Waits until A's note insert waits for the test's lock: A holds the claim.
async fn held(db: &Db) {
    let waiting = "wait_event_type = 'Lock' AND wait_event = 'advisory'";
    wait_until("A's insert to wait", GUARD, || async {
        pids(db, waiting).await.len() == 1
    })
    .await;
}

/// Retries on `at` until the retry is executed (201, not a replay); every earlier answer
/// must be `request-in-flight`. Returns the created note.
async fn taken_over(client: &reqwest::Client, at: &Serve) -> serde_json::Value {
    for _ in 0..GUARD / 10 {
        let retry = create_titled(client, at.addr, ALICE, KEY, KEY);
        let answer = retry.send().await.unwrap();
        if answer.status() == 201 {
            assert!(answer.headers().get("idempotent-replayed").is_none());
            return answer.json().await.unwrap();
        }
        assert_eq!(answer.status(), 409, "in flight until the takeover");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("the retry was never executed within a fifth of the lease");
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn a_retry_after_its_owner_was_killed_executes_before_the_lease_ends() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::create(Backend::Postgres, dir.path()).await;
    let spec = ServeSpec::new(IDEMKEY, db.url(), ARGS).logged_in(dir.path());
    let a = spec.start();
    let addr = a.addr;
    let (_gate_conn, _gate) = hold_first_executor(&db, false).await;
    let client = reqwest::Client::new();
    let first = tokio::spawn(create_titled(&client, addr, ALICE, KEY, KEY).send());
    held(&db).await;
    a.kill9();
    assert!(first.await.unwrap().is_err(), "A died before answering");
    // The same address, a new process: a new owner, which never held the claim.
    let restarted = spec.start_on(addr).expect("the server starts again");
    assert!(
        db.lease_alive(KEY).await,
        "A's claim is still within its lease"
    );
    let note = taken_over(&client, &restarted).await;
    settled(&db, &restarted, &client, &note).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn a_frozen_owner_loses_its_claim_after_the_grace_and_is_fenced_off() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::create(Backend::Postgres, dir.path()).await;
    let spec = ServeSpec::new(IDEMKEY, db.url(), ARGS).logged_in(dir.path());
    let (a, b) = (spec.start(), spec.start());
    let (mut gate_conn, gate) = hold_first_executor(&db, false).await;
    let client = reqwest::Client::new();
    let first = tokio::spawn(create_titled(&client, a.addr, ALICE, KEY, KEY).send());
    held(&db).await;
    a.pause();
    let note = taken_over(&client, &b).await;
    a.resume();
    let unlock = sqlx::query("SELECT pg_advisory_unlock($1)").bind(gate);
    unlock.execute(&mut gate_conn).await.unwrap();
    let late = first.await.unwrap().unwrap();
    // As served, A's completion is its note transaction's last statement: fenced, it rolls
    // the note back and A's client is told `request-in-flight`.
    a_is_fenced_off(&a, &client, late, (false, false), &note).await;
    settled(&db, &b, &client, &note).await;
}
