//! `idemkey-actix-notes serve` as users run it: a real process on real sockets, on SQLite or
//! PostgreSQL, checked as `idemkey serve` is, with the same verdicts.
//!
//! `idemkey check` and `idemkey forget` are the workspace's `idemkey` binary
//! (`binary::idemkey`), which `cargo test --workspace` builds beside this test; with a filter
//! (`-p idemkey-actix-notes`) build it first, `cargo build -p idemkey-cli`.
#![allow(clippy::unwrap_used)]

mod check;
mod seed;
mod storm;

use std::process::{Command, Output};

use idemkey_test_support::process::binary;

/// The service under test.
const ACTIX_NOTES: &str = env!("CARGO_BIN_EXE_idemkey-actix-notes");

/// Runs an `idemkey` command to completion, returning its exit status and output.
fn idemkey(args: &[&str]) -> Output {
    Command::new(binary::idemkey()).args(args).output().unwrap()
}

fn main() -> std::process::ExitCode {
    idemkey_test_support::runner::trials::main()
}
