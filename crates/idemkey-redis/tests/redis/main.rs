//! The Redis store against real servers: the conformance suite on a standalone server and on a
//! three-master cluster these tests start, then what only Redis does (expiry by TTL, a server
//! restart, binary-safe scopes, fencing by the server's clock).
//!
//! The standalone server is `IDEMKEY_TEST_REDIS_URL`, or `redis://127.0.0.1:6379` if one
//! answers there (required when `CI` is set; without one those tests are ignored). The cluster and the
//! restarted server are `redis-server` processes of their own (`redis-server` and `redis-cli`
//! on the `PATH`), which die with the test process.

#![allow(clippy::unwrap_used, unreachable_pub)]

mod app;
mod binary;
mod cache;
mod caps;
mod cluster;
mod common;
mod expiry;
mod fencing;
mod races;
mod replicas;
mod restart;
mod tls;
mod valkey;

idemkey_core::store_conformance_suite!(
    common::standalone_store(),
    test: idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis]),
    // Redis deletes expired records itself: a sweep finds none to count (see `expiry`).
    except: [sweep_deletes_only_expired_records_in_batches]
);

fn main() -> std::process::ExitCode {
    idemkey_test_support::runner::trials::main()
}
