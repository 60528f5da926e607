//! What the workspace's tests share, so that each harness exists once: `idemkey serve` and
//! `idemkey proxy` as real processes ([`serve`], [`proxy`]), the databases behind them
//! ([`db`], [`pg`]), `redis-server` processes of a test's own ([`redis`]), and raw HTTP/1.1
//! on sockets ([`raw`], [`storm`], [`relay`]), with a relay that loses and cuts answers and
//! refuses connections, the faults retrying HTTP clients must survive ([`lossy`]).
//!
//! The binary under test is always the caller's: pass `env!("CARGO_BIN_EXE_idemkey")`, or,
//! from a package other than the binary's, [`binary::idemkey`].
//!
//! A test that needs a server it does not start (PostgreSQL, Redis), a program it runs (Valkey,
//! `redis-server`, `python3`) or root says so,
//! `#[idemkey_test_support::test(needs = [postgres])]` ([`needs::Need`]), and its binary runs
//! on [`trials::main`]: where the need is missing the test is counted as ignored, with the
//! reason, and when `CI` is set it runs and fails instead.
// A helper that cannot do its job fails the test that called it: unwrapping is how it says so.
#![allow(clippy::unwrap_used)]

pub mod binary;
#[cfg(feature = "sql")]
pub mod db;
#[cfg(feature = "http")]
pub mod load;
pub mod lossy;
#[cfg(feature = "sql")]
pub mod mysql;
pub mod mysql_server;
pub mod needs;
#[cfg(feature = "http")]
pub mod notes;
#[cfg(feature = "sql")]
pub mod pg;
pub mod pg_server;
pub mod process;
#[cfg(feature = "http")]
pub mod proxy;
pub mod raw;
pub mod redis;
pub mod relay;
#[cfg(feature = "http")]
pub mod serve;
pub mod sockets;
pub mod storm;
pub mod trials;

/// Registers a test for [`trials::main`], with what it needs: `tokio::test`'s arguments
/// (`flavor = "multi_thread", worker_threads = 2`) and `needs = [postgres, redis, ...]`, each
/// a [`needs::Need`] in snake case. It works on `fn`s and `async fn`s.
///
/// ```ignore
/// #[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
/// async fn two_instances_share_one_database() {
///     let url = idemkey_test_support::needs::postgres_url();
///     // ...
/// }
/// ```
pub use idemkey_test_macros::test;

/// What the expansion of [`test`] names.
#[doc(hidden)]
pub mod __private {
    pub use linkme;
}

/// Polls `check` every 10 ms until it holds; panics after `limit` polls, so a broken test
/// fails rather than hangs. Nothing is asserted about how long it took.
pub async fn wait_until<F, Fut>(what: &str, limit: usize, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    for _ in 0..limit {
        if check().await {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("never happened: {what}");
}
