//! What the workspace's tests share, so that each harness exists once, in four rooms:
//!
//! - [`runner`]: tests registered with what they need ([`runner::needs::Need`]) and run by
//!   [`runner::trials::main`];
//! - [`process`]: real processes of a test's own, `idemkey serve` and `idemkey proxy`
//!   ([`process::serve`], [`process::proxy`]), `redis-server` ([`process::redis`]), private
//!   PostgreSQL and MariaDB servers;
//! - [`db`]: the database behind a test's servers and what the test reads back from it
//!   ([`db::pg`], [`db::mysql`]);
//! - [`net`]: raw HTTP/1.1 on sockets ([`net::raw`], [`net::storm`]), relays that hold and
//!   cut ([`net::relay`]) or lose answers and refuse connections, the faults retrying HTTP
//!   clients must survive ([`net::lossy`]), and load ([`net::load`]).
//!
//! The binary under test is always the caller's: pass `env!("CARGO_BIN_EXE_idemkey")`, or,
//! from a package other than the binary's, [`process::binary::idemkey`].
//!
//! A test that needs a server it does not start (PostgreSQL, Redis), a program it runs (Valkey,
//! `redis-server`, `python3`) or root says so,
//! `#[idemkey_test_support::test(needs = [postgres])]` ([`runner::needs::Need`]), and its
//! binary runs on [`runner::trials::main`]: where the need is missing the test is counted as
//! ignored, with the reason, and when `CI` is set it runs and fails instead.
// A helper that cannot do its job fails the test that called it: unwrapping is how it says so.
#![allow(clippy::unwrap_used)]

#[cfg(feature = "sql")]
pub mod db;
pub mod net;
pub mod process;
pub mod runner;

/// Registers a test for [`runner::trials::main`], with what it needs: `tokio::test`'s arguments
/// (`flavor = "multi_thread", worker_threads = 2`) and `needs = [postgres, redis, ...]`, each
/// a [`runner::needs::Need`] in snake case. It works on `fn`s and `async fn`s.
///
/// ```ignore
/// #[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
/// async fn two_instances_share_one_database() {
///     let url = idemkey_test_support::runner::needs::postgres_url();
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
