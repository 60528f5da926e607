//! `idemkey serve` as users run it: a real process on real sockets, one or several instances,
//! SQLite, PostgreSQL or Redis records behind it, and clients honest or hostile.
//!
//! PostgreSQL is `IDEMKEY_TEST_PG_URL`, or one answering at 127.0.0.1:5432; Redis tests start
//! `redis-server` processes of their own, and the Valkey ones need `valkey-server`. A test whose
//! server or program is missing is ignored locally, and fails when `CI` is set.
#![allow(clippy::unwrap_used)]

mod actor_caps;
mod check;
mod hostile;
mod hostile_input;
mod lookup_default;
mod multi_instance;
mod redis_records;
mod secrets;
mod serve;
mod slow_clients;

use std::process::{Command, Output};

/// The binary under test.
const IDEMKEY: &str = env!("CARGO_BIN_EXE_idemkey");

/// Runs an `idemkey` command to completion, returning its exit status and output.
fn idemkey(args: &[&str]) -> Output {
    Command::new(IDEMKEY).args(args).output().unwrap()
}

fn main() -> std::process::ExitCode {
    idemkey_test_support::runner::trials::main()
}
