//! The store conformance suite: every store runs the same cases with its own setup.
//!
//! ```ignore
//! idemkey_core::store_conformance_suite!(async { my_store().await });
//! ```
//!
//! expands to one `#[tokio::test]` (or the caller's attribute, `test:`) per case in a module
//! named `conformance`. Each case works
//! on scopes of its own (a fresh actor), so the cases may share one database and run in
//! parallel. No case asserts on elapsed time: leases and retentions of zero expire at once,
//! and long ones (an hour) never do within a test.

pub mod cases;
mod forget;

use std::time::Duration;

use crate::{ClaimRequest, Fingerprint, Key, Operation};

/// A lease or retention that never runs out within a test.
pub const LONG: Duration = Duration::from_secs(3600);

/// A claim request on a scope of its own, with a long lease and retention.
pub fn request(body: &str) -> ClaimRequest {
    let actor = format!("actor-{}", uuid::Uuid::new_v4());
    request_for(&actor, "create-note", body)
}

/// A claim request for `actor` on operation `op` (version `v1`) with key `key-a`.
pub fn request_for(actor: &str, op: &str, body: &str) -> ClaimRequest {
    let key: Key = "key-a"
        .parse()
        .unwrap_or_else(|_| unreachable!("a valid literal key"));
    let fingerprint = Fingerprint::builder("POST", "/v1/notes")
        .content_type("application/json")
        .body(body.as_bytes());
    ClaimRequest::new(actor, Operation::new(op, "v1"), key, fingerprint)
        .lease(LONG)
        .retention(LONG)
}

/// Expands to the whole conformance suite for the store that `$setup` (an async expression)
/// produces, one `#[tokio::test(flavor = "multi_thread", worker_threads = 2)]` per case.
///
/// A store that cannot mean a case names it in `except`, and that case is not generated:
///
/// ```ignore
/// // A TTL store deletes expired records itself, so a sweep has nothing to count.
/// idemkey_core::store_conformance_suite!(my_store(), except: [sweep_deletes_only_expired_records_in_batches]);
/// ```
///
/// A name in `except` that is no case fails to compile.
///
/// `test:` puts another test attribute on every case instead of tokio's, such as a runner's
/// that knows the store's server may be missing; it is written as inside `#[...]`, and a
/// multi-threaded runtime suits the suite's concurrent cases:
///
/// ```ignore
/// idemkey_core::store_conformance_suite!(
///     my_store(),
///     test: my_runner::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres]),
///     except: [sweep_deletes_only_expired_records_in_batches],
/// );
/// ```
#[macro_export]
macro_rules! store_conformance_suite {
    // Called back by `__conformance_cases!` with every case (the list lives there, once).
    (@cases @names; $($case:ident),* $(,)?) => {
        &[$(stringify!($case)),*]
    };
    (@cases @suite ($d:tt) ($setup:expr) ($test:meta) [$($skip:ident),*]; $($case:ident),* $(,)?) => {
        mod conformance {
            #[allow(unused_imports)]
            use super::*;
            // One arm per excepted case expands to nothing; any other name to its test.
            macro_rules! __case {
                $( ($skip) => {}; )*
                ($d name:ident) => {
                    #[$test]
                    async fn $d name() {
                        let store = $setup.await;
                        $crate::testkit::cases::$d name(store).await;
                    }
                };
            }
            $( __case!($case); )*
            // Names every excepted case, so that a misspelt one fails to compile.
            #[allow(dead_code)]
            fn __excepted_cases_exist() {
                $( let _ = $crate::testkit::cases::$skip::<$crate::MemoryStore>; )*
            }
        }
    };
    ($setup:expr, test: $test:meta $(, except: [$($skip:ident),* $(,)?])? $(,)?) => {
        $crate::__conformance_cases! { @suite ($) ($setup) ($test) [$($($skip),*)?] }
    };
    ($setup:expr, except: [$($skip:ident),* $(,)?] $(,)?) => {
        $crate::store_conformance_suite!(
            $setup,
            test: ::tokio::test(flavor = "multi_thread", worker_threads = 2),
            except: [$($skip),*]
        );
    };
    ($setup:expr $(,)?) => {
        $crate::store_conformance_suite!($setup, except: []);
    };
}

/// Calls `store_conformance_suite!(@cases $($then)*; <every case>)`: the one list of the
/// suite's cases, which a test of this module compares with the `pub async fn`s of `cases.rs`.
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_cases {
    ($($then:tt)*) => {
        $crate::store_conformance_suite! { @cases $($then)*;
            claim_on_empty_scope_executes,
            completed_record_replays,
            mismatch_wins_in_every_state,
            version_is_compared_unless_compatible,
            live_lease_is_in_flight,
            expired_lease_is_taken_over_and_old_owner_fenced,
            a_grant_of_another_owner_is_fenced,
            stale_owner_is_taken_over_before_its_lease_ends,
            a_beat_never_shortens_an_earlier_one,
            an_outage_longer_than_the_grace_stales_no_one,
            no_one_is_lapsed_before_the_first_beat_after_an_outage,
            a_claim_of_an_owner_without_heartbeat_keeps_its_lease,
            expired_lease_can_complete_previous_attempt_unknown,
            release_keeps_the_record_id,
            body_omitted_completion_replays_status_and_headers,
            expired_record_is_absent_and_gets_a_new_id,
            sweep_deletes_only_expired_records_in_batches,
            sweep_spares_a_record_claimed_again,
            forget_deletes_one_record,
            forget_actor_deletes_completed_records_only,
            forget_version_deletes_only_what_that_version_wrote,
            actors_are_isolated,
            operations_are_isolated,
            extend_renews_the_lease,
            derived_keys_survive_takeover_but_not_expiry,
            complete_happens_once,
            discard_deletes_only_a_fresh_held_claim,
            concurrent_claims_have_one_winner,
            secret_is_kept_by_the_store,
        }
    };
}

/// The names of every case the suite runs, in order.
pub const CASES: &[&str] = crate::__conformance_cases!(@names);

#[cfg(test)]
mod tests {
    /// Every `pub async fn` of `cases.rs` (and `forget.rs`) is a case, and the suite must run each one: a case
    /// added there but not to `__conformance_cases!` would silently never run.
    #[test]
    fn every_case_is_listed_in_the_macro() {
        let mut defined: Vec<&str> = include_str!("cases.rs")
            .lines()
            .chain(include_str!("forget.rs").lines())
            .filter_map(|line| line.trim_start().strip_prefix("pub async fn "))
            .filter_map(|rest| rest.split(['<', '(']).next())
            .collect();
        let mut listed = super::CASES.to_vec();
        defined.sort_unstable();
        listed.sort_unstable();
        assert_eq!(defined, listed);
    }
}
