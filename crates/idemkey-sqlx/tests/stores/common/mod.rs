//! What the SQLite and PostgreSQL test files share: a fixture per backend, and the seed
//! experiment's cases written once against it.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

pub mod seed;
pub mod upgrade;

use std::future::Future;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use idemkey_sqlx::failpoints::{Hook, Point};
use idemkey_sqlx::{AtomicOptions, Backend, SqlxStore, Strategy};
use sqlx::Transaction;

/// A backend's test setup: a fresh database of its own, and the `note` business table.
pub trait Fixture: Send + Sync + 'static {
    /// The backend.
    type DB: Backend;

    /// A store on a database of its own, migrated, with an empty `note` table.
    fn store() -> impl Future<Output = SqlxStore<Self::DB>> + Send;

    /// Inserts a note on the claim's transaction; the title must pass the CHECK constraint.
    fn insert_note<'t>(
        tx: &'t mut Transaction<'static, Self::DB>,
        id: &'t str,
        actor: &'t str,
        title: &'t str,
    ) -> BoxFuture<'t, Result<(), sqlx::Error>>;

    /// How many notes exist.
    fn count_notes(store: &SqlxStore<Self::DB>) -> impl Future<Output = i64> + Send;

    /// How many idempotency records exist.
    fn count_records(store: &SqlxStore<Self::DB>) -> impl Future<Output = i64> + Send;

    /// The options the cases run atomic mode with: the default strategy.
    fn options() -> AtomicOptions {
        AtomicOptions::default()
    }
}

/// A fixture's backend with the commit-time strategy: the same cases, the other strategy.
pub struct CommitTime<F>(std::marker::PhantomData<F>);

impl<F: Fixture> Fixture for CommitTime<F> {
    type DB = F::DB;

    fn store() -> impl Future<Output = SqlxStore<Self::DB>> + Send {
        F::store()
    }

    fn insert_note<'t>(
        tx: &'t mut Transaction<'static, Self::DB>,
        id: &'t str,
        actor: &'t str,
        title: &'t str,
    ) -> BoxFuture<'t, Result<(), sqlx::Error>> {
        F::insert_note(tx, id, actor, title)
    }

    fn count_notes(store: &SqlxStore<Self::DB>) -> impl Future<Output = i64> + Send {
        F::count_notes(store)
    }

    fn count_records(store: &SqlxStore<Self::DB>) -> impl Future<Output = i64> + Send {
        F::count_records(store)
    }

    fn options() -> AtomicOptions {
        AtomicOptions {
            strategy: Strategy::CommitTime,
            ..F::options()
        }
    }
}

/// A hook that runs `f` at `point` only.
pub fn at<F, Fut>(point: Point, f: F) -> Hook
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let f = Arc::new(f);
    Arc::new(move |p| {
        let f = f.clone();
        Box::pin(async move {
            if p == point {
                f().await;
            }
            Ok(())
        })
    })
}

/// Expands to one test per seed case for a fixture, which `needs` what its database needs
/// (`#[idemkey_test_support::test]`'s `needs`).
#[macro_export]
macro_rules! seed_cases {
    ($fixture:ty $(, needs = [$($need:ident),* $(,)?])?) => {
        $crate::seed_cases!(@each ($fixture) [$($($need),*)?];
            response_lost_after_commit_then_identical_retry,
            same_actor_and_key_with_changed_title_is_rejected,
            another_actor_with_the_same_key_gets_a_separate_note,
            both_concurrent_requests_observe_no_key,
            note_creation_violating_a_check_constraint_stores_nothing,
            saved_result_deleted_before_an_identical_retry,
            thirty_two_concurrent_requests_create_one_note,
            handler_panic_rolls_back,
            unstored_status_rolls_back,
            cancelled_request_leaves_no_transaction_open,
            in_process_duplicates_wait_for_the_first_and_replay,
            duplicates_during_the_first_ones_lookup_read_for_themselves,
            an_in_process_duplicate_with_another_body_is_a_mismatch,
            an_in_process_duplicate_executes_when_the_first_stores_nothing,
            a_duplicate_that_collides_with_the_first_replays_it,
            a_retry_without_the_lookup_replays,
            a_released_record_is_claimed_again_once,
        );
    };
    // `$needs` is one token tree (`[...]`), so that it repeats with each case.
    (@each ($fixture:ty) $needs:tt; $($case:ident),* $(,)?) => {
        $(
            #[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = $needs)]
            async fn $case() {
                $crate::common::seed::$case::<$fixture>().await;
            }
        )*
    };
}
