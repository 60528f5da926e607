//! The binary's commands beside the service and the proxy: `idemkey check` against a real
//! `idemkey serve`, and secrets kept out of what the commands print.
//!
//! The service's own tests are `idemkey-notes`' (`tests/service`), the proxy's
//! `idemkey-proxy`'s (`tests/proxy`).
#![allow(clippy::unwrap_used)]

mod check;
mod secrets;

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
