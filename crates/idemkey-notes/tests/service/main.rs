//! `idemkey serve` as users run it: a real process on real sockets, one or several instances,
//! SQLite, PostgreSQL or Redis records behind it, and clients honest or hostile.
//!
//! The binary is the workspace's `idemkey` (`binary::idemkey`: `IDEMKEY_BIN`, or the one
//! `cargo test --workspace` builds beside this test), for cargo names no other package's
//! binary to a test. Nor does it build it for this package's tests alone: with a filter
//! (`--test service`, `-p idemkey-notes`) build it first, `cargo build --workspace`, or the
//! tests run the one built last.
//!
//! PostgreSQL is `IDEMKEY_TEST_PG_URL`, or one answering at 127.0.0.1:5432; Redis tests start
//! `redis-server` processes of their own, and the Valkey ones need `valkey-server`. A test whose
//! server or program is missing is ignored locally, and fails when `CI` is set.
#![allow(clippy::unwrap_used)]

mod actor_caps;
mod hostile;
mod lookup_default;
mod multi_instance;
mod redis_records;
mod serve;
mod slow_clients;

use std::process::{Command, Output};

use idemkey_test_support::process::binary;

/// Runs an `idemkey` command to completion, returning its exit status and output.
fn idemkey(args: &[&str]) -> Output {
    Command::new(binary::idemkey()).args(args).output().unwrap()
}

fn main() -> std::process::ExitCode {
    idemkey_test_support::runner::trials::main()
}
