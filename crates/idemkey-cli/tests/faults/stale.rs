//! Stale owners, with real processes: a lease-mode `idemkey serve` (A) is frozen with
//! SIGSTOP in the middle of its handler, past its lease; a second instance (B) on the same
//! PostgreSQL database takes the key over and completes it; when A wakes up, its late
//! completion (or release) is rejected by the fencing token. Leases run on the database's
//! clock: B is refused while the lease lives, and takes over once it has run out.
//!
//! Both completions: with `--separate-completion` A answers its client with B's note (its
//! handler found it) and its late completion is refused; as served, the completion is the
//! last statement of A's note transaction, which the fencing makes roll back whole, and A's
//! client is told `request-in-flight`.
//!
//! A is held inside its note insert by a trigger that waits for an advisory lock the test
//! holds; the first executor only (it takes a second lock first), so B's insert goes through.
//! Needs `IDEMKEY_TEST_PG_URL` (skipped loudly outside CI).

use idemkey_test_support::db::pg::pids;
use idemkey_test_support::db::{Backend, Db};
use idemkey_test_support::process::notes::{ALICE, create_titled, problem_slug};
use idemkey_test_support::process::serve::{Serve, ServeSpec};
use idemkey_test_support::wait_until;
use sqlx::{Connection, PgConnection};

use crate::IDEMKEY;

const KEY: &str = "stale-owner";

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn a_frozen_owners_late_completion_is_fenced_off() {
    stale_owner(false, SEPARATE).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn a_frozen_owners_late_release_is_fenced_off() {
    stale_owner(true, SEPARATE).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn a_frozen_owners_note_transaction_rolls_back_at_its_completion() {
    stale_owner(false, IN_TRANSACTION).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn a_frozen_owners_late_release_is_fenced_off_as_served() {
    stale_owner(true, IN_TRANSACTION).await;
}

/// Lease mode's completion: in a transaction of its own after the note's...
const SEPARATE: bool = true;
/// ...or as the note transaction's last statement (`idemkey serve`'s default).
const IN_TRANSACTION: bool = false;

/// Installs the trigger; returns the test's connection holding the gate lock, and the lock.
pub(crate) async fn hold_first_executor(db: &Db, fail_after: bool) -> (PgConnection, i64) {
    let [first, gate] = [0, 8].map(|at| {
        let bytes = uuid::Uuid::new_v4().as_bytes()[at..at + 8]
            .try_into()
            .unwrap();
        i64::from_be_bytes(bytes)
    });
    let fail = if fail_after {
        "RAISE EXCEPTION 'injected';"
    } else {
        ""
    };
    db.execute(&format!(
        "CREATE FUNCTION hold_first() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
         IF NEW.title = '{KEY}' AND pg_try_advisory_lock({first}) THEN \
         PERFORM pg_advisory_lock({gate}); PERFORM pg_advisory_unlock({gate}); \
         PERFORM pg_advisory_unlock({first}); {fail} END IF; RETURN NEW; END $$; \
         CREATE TRIGGER hold_first BEFORE INSERT ON notes FOR EACH ROW \
         EXECUTE FUNCTION hold_first()"
    ))
    .await;
    let Db::Postgres(schema) = db else {
        unreachable!()
    };
    let mut conn = PgConnection::connect(schema.base()).await.unwrap();
    let take = sqlx::query("SELECT pg_advisory_lock($1)").bind(gate);
    take.execute(&mut conn).await.unwrap();
    (conn, gate)
}

async fn stale_owner(fail_after: bool, separate: bool) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::create(Backend::Postgres, dir.path()).await;
    let mut args = vec!["--mode", "lease", "--lease", "1s", "--secret", "shared"];
    if separate {
        args.push("--separate-completion");
    }
    let spec = ServeSpec::new(IDEMKEY, db.url(), &args).logged_in(dir.path());
    let (a, b) = (spec.start(), spec.start());
    let (mut gate_conn, gate) = hold_first_executor(&db, fail_after).await;
    let client = reqwest::Client::new();
    let first = tokio::spawn(create_titled(&client, a.addr, ALICE, KEY, KEY).send());
    let waiting = "wait_event_type = 'Lock' AND wait_event = 'advisory'";
    wait_until("A's insert to wait", 6000, || async {
        pids(&db, waiting).await.len() == 1
    })
    .await;
    a.pause();
    let b_body = takes_over(&db, &b, &client).await;
    a.resume();
    let unlock = sqlx::query("SELECT pg_advisory_unlock($1)").bind(gate);
    unlock.execute(&mut gate_conn).await.unwrap();
    let late = first.await.unwrap().unwrap();
    a_is_fenced_off(&a, &client, late, (fail_after, separate), &b_body).await;
    settled(&db, &b, &client, &b_body).await;
}

/// B is refused while A's lease lives by the database's clock, then takes over and
/// completes; returns B's answer.
async fn takes_over(db: &Db, b: &Serve, client: &reqwest::Client) -> serde_json::Value {
    let post = || create_titled(client, b.addr, ALICE, KEY, KEY).send();
    let early = post().await.unwrap();
    let alive = db.lease_alive(KEY).await;
    assert!(
        !alive || early.status() == 409,
        "B is refused while A's lease lives"
    );
    let taken = if early.status() == 409 {
        let expired = || async { !db.lease_alive(KEY).await };
        wait_until("A's lease to run out", 6000, expired).await;
        post().await.unwrap()
    } else {
        eprintln!("the lease ran out before B's first try: 409 not checked");
        early
    };
    assert_eq!(taken.status(), 201, "B takes over");
    assert!(taken.headers().get("idempotent-replayed").is_none());
    taken.json().await.unwrap()
}

/// A answers its client (B's note, its handler's failure, or in flight where its note
/// transaction rolled back), and its late completion or release was rejected: `/metrics`
/// counts one `lease_lost`.
pub(crate) async fn a_is_fenced_off(
    a: &Serve,
    client: &reqwest::Client,
    late: reqwest::Response,
    (fail_after, separate): (bool, bool),
    b_body: &serde_json::Value,
) {
    if fail_after {
        assert_eq!(late.status(), 500, "A's handler failed after waking up");
    } else if !separate {
        assert_eq!(late.status(), 409, "A's transaction rolled back");
        assert_eq!(problem_slug(late).await, "request-in-flight");
    } else {
        assert_eq!(late.status(), 201);
        let a_body: serde_json::Value = late.json().await.unwrap();
        assert_eq!(a_body["id"], b_body["id"], "A found B's note: one note");
    }
    let series = "idemkey_requests_total{outcome=\"lease_lost\"}";
    let step = if fail_after { "release" } else { "completion" };
    assert_eq!(
        a.metric(client, series).await,
        1,
        "A's late {step} was fenced off"
    );
}

/// One note; the record completed under B's token (2) with B's response, which replays.
pub(crate) async fn settled(
    db: &Db,
    b: &Serve,
    client: &reqwest::Client,
    b_body: &serde_json::Value,
) {
    let notes = db.notes().await;
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert_eq!(notes[0].0, b_body["id"].as_str().unwrap());
    let sql = "SELECT CAST(state AS TEXT), CAST(token AS TEXT) FROM idemkey_records";
    let record = db.rows(sql).await;
    assert_eq!(
        record,
        [("2".to_owned(), "2".to_owned())],
        "completed, token 2"
    );
    let replay = create_titled(client, b.addr, ALICE, KEY, KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    let replayed: serde_json::Value = replay.json().await.unwrap();
    assert_eq!(&replayed, b_body, "B's response is the stored one");
}
