//! Faults as only PostgreSQL has them (the faults both server databases share are in
//! `server/faults.rs`): serialization failures and deadlocks re-run the handler, the one a
//! `COMMIT` reports too.

use idemkey_sqlx::Outcome;

use super::PgFixture;
use super::server::{DEADLOCK, SERIALIZATION_FAILURE};
use crate::common::Fixture;
use crate::common::seed::request;
use crate::server::tools::{TestNote, actor, run};

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn serialization_failures_and_deadlocks_rerun_the_handler() {
    let store = PgFixture::store().await;
    for sql in [SERIALIZATION_FAILURE, DEADLOCK] {
        let req = request(&actor(), "key-a", "rerun");
        let handler = TestNote::new(&req, "rerun").before(sql, |call| call == 1);
        let outcome = run(&store, &req, handler.clone()).await;
        assert!(matches!(outcome, Ok(Outcome::Executed(_))), "{outcome:?}");
        assert_eq!(handler.calls(), 2, "{sql}");
    }
    assert_eq!(PgFixture::count_notes(&store).await, 2);
}

/// A deferred constraint trigger fails the first `COMMIT` with 40001: the error from the
/// commit keeps its `sqlx::Error`, so the runner recognises it and runs the handler again.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn a_serialization_failure_at_commit_reruns_the_handler() {
    let store = PgFixture::store().await;
    sqlx::raw_sql(
        "CREATE SEQUENCE commits;
         CREATE FUNCTION fail_first_commit() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF nextval('commits') = 1 THEN
                 RAISE EXCEPTION 'provoked at commit' USING ERRCODE = '40001';
             END IF;
             RETURN NULL;
         END $$;
         CREATE CONSTRAINT TRIGGER fail_first_commit AFTER INSERT ON note
             DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION fail_first_commit();",
    )
    .execute(store.pool())
    .await
    .unwrap();
    let req = request(&actor(), "key-a", "commit");
    let handler = TestNote::new(&req, "commit");
    let outcome = run(&store, &req, handler.clone()).await;
    assert!(matches!(outcome, Ok(Outcome::Executed(_))), "{outcome:?}");
    assert_eq!(handler.calls(), 2);
    assert_eq!(PgFixture::count_notes(&store).await, 1);
}
