//! What the server databases (PostgreSQL, and MySQL or MariaDB) share beyond the conformance
//! suite and the seed cases: contract §8's waits (`waits.rs`) and the faults (`faults.rs`),
//! written once against [`Server`], the little that differs between them, with the tools that
//! force their races (`tools.rs`). `server_cases!` makes each case a named test per backend;
//! what only one backend does stays in its own folder.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

pub mod faults;
pub mod tools;
pub mod waits;

use std::future::Future;
use std::time::Duration;

use futures_util::future::BoxFuture;
use idemkey_sqlx::{Backend, SqlxStore};
use sqlx::Transaction;

use crate::common::Fixture;
use tools::Task;

/// What differs between the server databases in these tests: the store's claim bound, a
/// connection's id, lock waits as the server reports them, ending a connection or only its
/// statement, and a statement that fails in a way the runner retries.
pub trait Server: Backend {
    /// A store on a database of its own with an empty `note` table.
    type Fixture: Fixture<DB = Self>;

    /// A statement that fails with an error the runner runs the handler again for
    /// (PostgreSQL: a serialization failure; MySQL: InnoDB's deadlock error).
    const RETRYABLE: &'static str;

    /// What [`Server::RETRYABLE`] needs in the database first, if anything.
    const RETRYABLE_SETUP: Option<&'static str>;

    /// The same store with claims waiting at most `timeout` for a concurrent claim.
    fn with_claim_lock_timeout(store: SqlxStore<Self>, timeout: Duration) -> SqlxStore<Self>;

    /// How long the store's claims wait for a concurrent claim.
    fn claim_lock_timeout(store: &SqlxStore<Self>) -> Duration;

    /// What the store makes of a claim bound of `asked` (MySQL: whole seconds, rounded up).
    fn kept_claim_lock_timeout(asked: Duration) -> Duration;

    /// The server's id of the connection `tx` runs on.
    fn connection_id<'t>(
        tx: &'t mut Transaction<'static, Self>,
    ) -> BoxFuture<'t, sqlx::Result<i64>>;

    /// Runs `sql` (statements the test controls) on `tx`.
    fn execute<'t>(
        tx: &'t mut Transaction<'static, Self>,
        sql: &'static str,
    ) -> BoxFuture<'t, sqlx::Result<()>>;

    /// Runs `sql` (statements the test controls) on the store's pool.
    fn setup(store: &SqlxStore<Self>, sql: &'static str) -> impl Future<Output = ()> + Send;

    /// How many of the store's connections wait on a lock in a statement starting with `sql`.
    fn waiting(store: &SqlxStore<Self>, sql: &str) -> impl Future<Output = i64> + Send;

    /// Ends the connection `id` and waits until it is gone.
    fn kill(store: &SqlxStore<Self>, id: i64) -> impl Future<Output = ()> + Send;

    /// Interrupts the lock wait of the store's one blocked claim (its statement, not its
    /// connection), until `duplicate`, the request it belongs to, has answered.
    fn interrupt_claim_wait(
        store: &SqlxStore<Self>,
        duplicate: &Task,
    ) -> impl Future<Output = ()> + Send;
}

/// Expands to one test per shared case for a server database `$db` (`sqlx::Postgres`,
/// `sqlx::MySql`), which `needs` what its server needs: the waits in `waits`, the faults in
/// `faults`.
#[macro_export]
macro_rules! server_cases {
    ($db:ty, needs = [$($need:ident),* $(,)?]) => {
        /// Contract §8: a duplicate's claim waits for an uncommitted claim of its scope,
        /// bounded by the claim lock timeout.
        mod waits {
            $crate::server_cases!(@each waits ($db) [$($need),*];
                a_duplicate_waits_for_the_winner_then_replays_it,
                a_duplicate_executes_when_the_winner_rolls_back,
                a_wait_past_the_claim_lock_timeout_is_in_flight,
                an_interrupted_claim_wait_is_in_flight,
            );
        }

        /// Retried failures, and lost connections that leave nothing half-written.
        mod faults {
            $crate::server_cases!(@each faults ($db) [$($need),*];
                a_retryable_failure_every_time_is_store_unavailable_after_3_attempts,
                a_lost_connection_mid_request_writes_nothing_and_a_retry_executes_once,
                a_lost_connection_at_commit_is_outcome_unknown,
            );
        }
    };
    // `$needs` is one token tree (`[...]`), so that it repeats with each case.
    (@each $module:ident ($db:ty) $needs:tt; $($case:ident),* $(,)?) => {
        $(
            #[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = $needs)]
            async fn $case() {
                $crate::server::$module::$case::<$db>().await;
            }
        )*
    };
}
