//! What the workspace's tests share, so that each harness exists once: `idemkey serve` and
//! `idemkey proxy` as real processes ([`serve`], [`proxy`]), the databases behind them
//! ([`db`], [`pg`]), `redis-server` processes of a test's own ([`redis`]), and raw HTTP/1.1
//! on sockets ([`raw`], [`storm`], [`relay`]).
//!
//! The binary under test is always the caller's: pass `env!("CARGO_BIN_EXE_idemkey")`.
//! A server a test needs but cannot find (PostgreSQL, Redis, Valkey) is a loud `SKIPPED`
//! locally and a failure when `CI` is set.
// A helper that cannot do its job fails the test that called it: unwrapping is how it says so.
#![allow(clippy::unwrap_used)]

#[cfg(feature = "sql")]
pub mod db;
#[cfg(feature = "http")]
pub mod load;
#[cfg(feature = "http")]
pub mod notes;
#[cfg(feature = "sql")]
pub mod pg;
pub mod process;
#[cfg(feature = "http")]
pub mod proxy;
pub mod raw;
pub mod redis;
pub mod relay;
#[cfg(feature = "http")]
pub mod serve;
pub mod storm;

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

/// What a test needs, from the variable `env`, else from `found`. Neither: a failure in CI
/// (`CI` set), where these tests must run, or a loud `SKIPPED` and `None` elsewhere.
pub fn required(
    env: &str,
    found: impl FnOnce() -> Option<String>,
    (missing, example): (&str, &str),
) -> Option<String> {
    if let Some(value) = std::env::var(env).ok().or_else(found) {
        return Some(value);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{env} is not set and {missing}: these tests must run in CI"
    );
    eprintln!("SKIPPED: {env} is not set and {missing}; set {env}={example} to run these tests");
    None
}
