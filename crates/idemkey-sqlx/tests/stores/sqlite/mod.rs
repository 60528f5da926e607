//! The SQLite store: the conformance suite, the seed cases, and two OS processes racing on
//! one database file.

use std::path::PathBuf;
use std::process::Stdio;

use crate::common::Fixture;
use futures_util::future::BoxFuture;
use idemkey_sqlx::SqliteStore;
use sqlx::{Sqlite, Transaction};

const NOTE_TABLE: &str = "CREATE TABLE IF NOT EXISTS note (
    id TEXT PRIMARY KEY,
    actor TEXT NOT NULL,
    title TEXT NOT NULL CHECK (length(trim(title)) BETWEEN 1 AND 200)
)";

fn fresh_path() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("sqlite-{}.db", uuid::Uuid::new_v4()))
}

async fn open(path: &std::path::Path) -> SqliteStore {
    let store = SqliteStore::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    sqlx::query(NOTE_TABLE).execute(store.pool()).await.unwrap();
    store
}

struct SqliteFixture;

impl Fixture for SqliteFixture {
    type DB = Sqlite;

    async fn store() -> SqliteStore {
        open(&fresh_path()).await
    }

    fn insert_note<'t>(
        tx: &'t mut Transaction<'static, Sqlite>,
        id: &'t str,
        actor: &'t str,
        title: &'t str,
    ) -> BoxFuture<'t, Result<(), sqlx::Error>> {
        Box::pin(async move {
            sqlx::query("INSERT INTO note (id, actor, title) VALUES ($1, $2, $3)")
                .bind(id)
                .bind(actor)
                .bind(title)
                .execute(&mut **tx)
                .await
                .map(|_| ())
        })
    }

    async fn count_notes(store: &SqliteStore) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM note")
            .fetch_one(store.pool())
            .await
            .unwrap()
    }

    async fn count_records(store: &SqliteStore) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM idemkey_records")
            .fetch_one(store.pool())
            .await
            .unwrap()
    }
}

idemkey_core::store_conformance_suite!(
    SqliteFixture::store(),
    test: idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2),
);

seed_cases!(SqliteFixture);

mod folded;

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_left_by_an_old_takeover_is_not_trusted() {
    crate::common::upgrade::an_owner_left_by_an_old_takeover_is_not_trusted::<SqliteFixture>()
        .await;
}

/// The seed cases again with the commit-time strategy.
mod commit_time {
    use super::*;

    seed_cases!(crate::common::CommitTime<SqliteFixture>);
}

#[idemkey_test_support::test]
async fn settings_are_wal_full_and_busy_timeout() {
    let store = SqliteFixture::store().await;
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(store.pool())
        .await
        .unwrap();
    let sync: i64 = sqlx::query_scalar("PRAGMA synchronous")
        .fetch_one(store.pool())
        .await
        .unwrap();
    let busy: i64 = sqlx::query_scalar("PRAGMA busy_timeout")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!((mode.as_str(), sync, busy), ("wal", 2, 5000));
}

#[idemkey_test_support::test]
async fn an_exhausted_busy_timeout_is_store_unavailable() {
    let path = fresh_path();
    let store = open(&path).await;
    let options = SqliteStore::connect_options(&format!("sqlite://{}", path.display()))
        .unwrap()
        .busy_timeout(std::time::Duration::ZERO);
    let impatient = SqliteStore::from_pool(sqlx::SqlitePool::connect_with(options).await.unwrap());
    // Another writer holds the write lock while the claim tries to begin.
    let mut holder = store.begin_write().await.unwrap();
    sqlx::query("INSERT INTO note VALUES ('held', 'a', 'held')")
        .execute(&mut *holder)
        .await
        .unwrap();
    let req = crate::common::seed::request("actor-busy", "key-a", "t");
    let outcome =
        crate::common::seed::create_note::<SqliteFixture>(&impatient, &req, "t", 201).await;
    assert!(
        matches!(
            outcome,
            Err(idemkey_sqlx::AtomicError::Store(
                idemkey_core::Error::Unavailable(_)
            ))
        ),
        "{outcome:?}"
    );
    holder.rollback().await.unwrap();
}

const CHILD_ENV: &str = "IDEMKEY_TEST_CHILD";

/// Two OS processes, each past its lookup before either claims, on one database file.
#[idemkey_test_support::test]
async fn two_processes_on_one_file_create_one_note() {
    let path = fresh_path();
    let store = open(&path).await;
    let barrier_dir = tempfile::tempdir().unwrap();
    let children: Vec<_> = (0..2)
        .map(|i| {
            tokio::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "sqlite::child_process_creates_a_note",
                    "--ignored",
                    "--nocapture",
                ])
                .env(
                    CHILD_ENV,
                    format!("{}|{}|{i}", path.display(), barrier_dir.path().display()),
                )
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut outcomes = Vec::new();
    for child in children {
        let output = child.wait_with_output().await.unwrap();
        assert!(output.status.success(), "child failed: {output:?}");
        let stdout = String::from_utf8(output.stdout).unwrap();
        let line = stdout
            .lines()
            .find_map(|l| l.strip_prefix("OUTCOME="))
            .unwrap()
            .to_owned();
        outcomes.push(line);
    }
    outcomes.sort();
    assert_eq!(outcomes, ["executed", "replayed"]);
    assert_eq!(SqliteFixture::count_notes(&store).await, 1);
}

/// The child side of the test above, which alone starts it (it fails run on its own).
#[idemkey_test_support::test]
#[ignore = "started as a child process by two_processes_on_one_file_create_one_note"]
async fn child_process_creates_a_note() {
    let spec = std::env::var(CHILD_ENV).expect("started by its parent test, which sets it");
    let mut parts = spec.split('|');
    let (db, dir, me) = (
        parts.next().unwrap(),
        parts.next().unwrap(),
        parts.next().unwrap(),
    );
    let dir = PathBuf::from(dir);
    let ready = dir.join(format!("ready-{me}"));
    let hook = crate::common::at(idemkey_sqlx::failpoints::Point::AfterLookup, move || {
        let (dir, ready) = (dir.clone(), ready.clone());
        async move {
            // A file barrier: both processes have missed the lookup before either claims.
            std::fs::write(&ready, b"").unwrap();
            for _ in 0..6000 {
                if std::fs::read_dir(&dir).unwrap().count() == 2 {
                    return;
                }
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
            panic!("the other process never reached the barrier");
        }
    });
    let store = SqliteStore::connect(&format!("sqlite://{db}"))
        .await
        .unwrap()
        .with_failpoints(hook);
    let req = crate::common::seed::request("actor-two-processes", "key-a", "raced");
    let outcome = crate::common::seed::create_note::<SqliteFixture>(&store, &req, "raced", 201)
        .await
        .unwrap();
    let name = match outcome {
        idemkey_sqlx::Outcome::Executed(_) => "executed",
        idemkey_sqlx::Outcome::Replayed(_) => "replayed",
        other => panic!("unexpected {other:?}"),
    };
    println!("OUTCOME={name}");
}

/// Makes every later commit of a write to `idemkey_records` on `event` (INSERT or UPDATE)
/// fail, at the commit itself: a trigger adds a row breaking a deferred foreign key.
async fn doom_commits_of(store: &SqliteStore, event: &str) {
    let sql = format!(
        "CREATE TABLE parent (id INTEGER PRIMARY KEY); \
         CREATE TABLE child (p INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED); \
         CREATE TRIGGER doomed AFTER {event} ON idemkey_records BEGIN \
         INSERT INTO child VALUES (42); END"
    );
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
        .execute(store.pool())
        .await
        .unwrap();
}

/// Lease mode's claim commits on its own as its statement completes; a commit that fails is
/// an error, not a claim. (sqlx ignores the result of resetting a statement it stopped
/// reading early, which is where such a commit happens: reading one row was not enough.)
#[idemkey_test_support::test]
async fn a_claim_whose_commit_fails_is_an_error() {
    use idemkey_core::Store;
    let store = open(&fresh_path()).await;
    doom_commits_of(&store, "INSERT").await;
    let req = crate::common::seed::request("actor-doomed", "key-a", "doomed");
    let claimed = store.try_claim(&req).await;
    assert!(claimed.is_err(), "{claimed:?}");
    assert_eq!(store.lookup(&req.scope).await.unwrap(), None);
}

/// The same for a takeover of a released record.
#[idemkey_test_support::test]
async fn a_reclaim_whose_commit_fails_is_an_error() {
    use idemkey_core::{Store, TryClaim};
    let store = open(&fresh_path()).await;
    let req = crate::common::seed::request("actor-doomed", "key-a", "doomed");
    let TryClaim::Claimed(claim) = store.try_claim(&req).await.unwrap() else {
        panic!("a fresh key is claimed");
    };
    store.release(&claim).await.unwrap();
    let released = store.lookup(&req.scope).await.unwrap().unwrap();
    doom_commits_of(&store, "UPDATE").await;
    let reclaimed = store.reclaim(&req, &released).await;
    assert!(reclaimed.is_err(), "{reclaimed:?}");
    let after = store.lookup(&req.scope).await.unwrap().unwrap();
    assert_eq!(after.token, released.token, "still the released record");
}

/// Contract §8a: the derived-key secret is the store's, made once and kept in the file: a
/// second store on the same file and a store opened after a restart read the same secret.
#[idemkey_test_support::test]
async fn the_secret_is_kept_in_the_database() {
    use idemkey_core::Store;
    let path = fresh_path();
    let url = format!("sqlite://{}", path.display());
    let first = SqliteStore::connect(&url).await.unwrap();
    let second = SqliteStore::connect(&url).await.unwrap();
    let (a, b) = tokio::join!(first.secret(), second.secret());
    let secret = a.unwrap();
    assert_eq!(secret.len(), idemkey_core::SECRET_LEN);
    assert_eq!(b.unwrap(), secret);
    first.close().await;
    second.close().await;
    let reopened = SqliteStore::connect(&url).await.unwrap();
    assert_eq!(reopened.secret().await.unwrap(), secret);
    let other = SqliteStore::connect(&format!("sqlite://{}", fresh_path().display()))
        .await
        .unwrap();
    assert_ne!(
        other.secret().await.unwrap(),
        secret,
        "each database has its own"
    );
}

/// The replay cache (`with_replay_cache`): replays without the database, exact after a
/// `forget` through the store, bounded after one by another process, never a claim.
mod replay_cache {
    use std::time::Duration;

    use idemkey_core::{RecordState, Store, TryClaim};
    use idemkey_sqlx::Outcome;

    use super::*;
    use crate::common::seed::{create_note, request};

    const MIB: u64 = 1024 * 1024;

    #[idemkey_test_support::test]
    async fn a_cached_replay_needs_no_database() {
        let path = fresh_path();
        let store = open(&path)
            .await
            .with_replay_cache(Duration::from_secs(60), MIB);
        let req = request("actor-cache", "key-a", "cached");
        let first = create_note::<SqliteFixture>(&store, &req, "cached", 201)
            .await
            .unwrap();
        let Outcome::Executed(first) = first else {
            panic!("{first:?}")
        };
        // Every connection closed: only the cache can answer now.
        store.close().await;
        let retry = create_note::<SqliteFixture>(&store, &req, "cached", 201)
            .await
            .unwrap();
        assert!(
            matches!(retry, Outcome::Replayed(ref r) if *r == first),
            "{retry:?}"
        );
        let changed = request("actor-cache", "key-a", "changed");
        let other = create_note::<SqliteFixture>(&store, &changed, "changed", 201)
            .await
            .unwrap();
        assert!(matches!(other, Outcome::Mismatch), "{other:?}");
        let record = store.lookup(&req.scope).await.unwrap().unwrap();
        assert!(matches!(record.state, RecordState::Completed(_)));
    }

    #[idemkey_test_support::test]
    async fn forget_through_the_store_takes_effect_at_once() {
        let store = open(&fresh_path())
            .await
            .with_replay_cache(Duration::from_secs(60), MIB);
        let req = request("actor-cache", "key-a", "again");
        create_note::<SqliteFixture>(&store, &req, "again", 201)
            .await
            .unwrap();
        let replay = create_note::<SqliteFixture>(&store, &req, "again", 201)
            .await
            .unwrap();
        assert!(matches!(replay, Outcome::Replayed(_)));
        assert!(store.clone().forget(&req.scope).await.unwrap());
        let again = create_note::<SqliteFixture>(&store, &req, "again", 201)
            .await
            .unwrap();
        assert!(matches!(again, Outcome::Executed(_)), "{again:?}");
        assert_eq!(SqliteFixture::count_notes(&store).await, 2);
    }

    #[idemkey_test_support::test]
    async fn a_forget_elsewhere_reaches_the_cache_within_its_time_to_live() {
        let path = fresh_path();
        let ttl = Duration::from_millis(200);
        // Two caches of the same records: copies that outlive the test show the documented
        // staleness however slow the machine is, and short-lived ones are waited out.
        let lasting = open(&path)
            .await
            .with_replay_cache(Duration::from_secs(60), MIB);
        let cached = open(&path).await.with_replay_cache(ttl, MIB);
        let elsewhere = open(&path).await;
        let req = request("actor-cache", "key-a", "elsewhere");
        create_note::<SqliteFixture>(&lasting, &req, "elsewhere", 201)
            .await
            .unwrap();
        let copied = create_note::<SqliteFixture>(&cached, &req, "elsewhere", 201)
            .await
            .unwrap();
        assert!(matches!(copied, Outcome::Replayed(_)), "{copied:?}");
        assert!(elsewhere.forget(&req.scope).await.unwrap());
        // Within the time to live the copy still answers: the documented staleness.
        let stale = create_note::<SqliteFixture>(&lasting, &req, "elsewhere", 201)
            .await
            .unwrap();
        assert!(matches!(stale, Outcome::Replayed(_)), "{stale:?}");
        tokio::time::sleep(ttl * 2).await;
        let fresh = create_note::<SqliteFixture>(&cached, &req, "elsewhere", 201)
            .await
            .unwrap();
        assert!(matches!(fresh, Outcome::Executed(_)), "{fresh:?}");
    }

    #[idemkey_test_support::test]
    async fn only_completed_records_are_cached() {
        let store = open(&fresh_path())
            .await
            .with_replay_cache(Duration::from_secs(60), MIB);
        let req = request("actor-cache", "key-a", "lease");
        let TryClaim::Claimed(claim) = store.try_claim(&req).await.unwrap() else {
            panic!("a fresh scope is claimed");
        };
        let in_flight = store.lookup(&req.scope).await.unwrap().unwrap();
        assert!(matches!(in_flight.state, RecordState::InFlight { .. }));
        store.release(&claim).await.unwrap();
        let released = store.lookup(&req.scope).await.unwrap().unwrap();
        assert_eq!(
            released.state,
            RecordState::Released,
            "not the cached in-flight copy"
        );
    }
}

/// A database the store creates, and the `-wal` and `-shm` files SQLite makes beside it, are
/// readable by their owner only: they hold stored responses and raw keys.
#[cfg(unix)]
#[idemkey_test_support::test]
async fn a_new_database_and_its_journal_files_are_private() {
    use std::os::unix::fs::PermissionsExt;

    let path = fresh_path();
    let store = open(&path).await;
    let req = crate::common::seed::request("actor-private", "key-a", "private");
    crate::common::seed::create_note::<SqliteFixture>(&store, &req, "private", 201)
        .await
        .unwrap();
    for suffix in ["", "-wal", "-shm"] {
        let file = PathBuf::from(format!("{}{suffix}", path.display()));
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}: {mode:o}", file.display());
    }
}

/// `lookup_atomic` decides what the record alone decides, and nothing else: a replay and a
/// mismatch of a completed record, a request in flight; no record is `Absent`; a released
/// record is `Undecided` (only a claim's write takes it again).
#[idemkey_test_support::test]
async fn look_up_decides_only_what_the_record_decides() {
    use idemkey_core::testkit::request;
    use idemkey_core::{Answer, Begin, ExpiredLease, Store, StoredResponse, TryClaim, begin};
    use idemkey_sqlx::AtomicLookup;

    let store = open(&fresh_path()).await;
    let look = |req| {
        let store = store.clone();
        async move {
            store
                .lookup_atomic(&req, ExpiredLease::TakeOver)
                .await
                .unwrap()
        }
    };
    let req = request("{}");
    assert!(matches!(look(req.clone()).await, AtomicLookup::Absent));
    let TryClaim::Claimed(claim) = store.try_claim(&req).await.unwrap() else {
        panic!("a fresh scope is claimed");
    };
    assert!(matches!(
        look(req.clone()).await,
        AtomicLookup::Answer(Answer::InFlight { .. })
    ));
    store.release(&claim).await.unwrap();
    assert!(matches!(look(req.clone()).await, AtomicLookup::Undecided));
    let Begin::Execute(claim) = begin(&store, &req, ExpiredLease::TakeOver).await.unwrap() else {
        panic!("a released scope is claimed again");
    };
    let stored = StoredResponse::new(201, "made");
    store.complete(&claim, &stored).await.unwrap();
    assert!(
        matches!(look(req.clone()).await, AtomicLookup::Answer(Answer::Replay(s)) if s == stored)
    );
    let mut other = request("{\"other\":1}");
    other.scope = req.scope.clone();
    assert!(matches!(
        look(other).await,
        AtomicLookup::Answer(Answer::Mismatch)
    ));
}
