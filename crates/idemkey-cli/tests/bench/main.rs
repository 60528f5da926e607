//! `idemkey bench` as a real process: the runs a user makes, the proxy's workloads, and a
//! hostile service it must survive.
#![allow(clippy::unwrap_used)]

mod hostile;
mod middleware;
mod proxy;
mod runs;
mod schema;

/// The binary under test.
const IDEMKEY: &str = env!("CARGO_BIN_EXE_idemkey");

fn main() -> std::process::ExitCode {
    idemkey_test_support::trials::main()
}
