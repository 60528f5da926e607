//! The SQL stores, one test binary: each backend runs the store conformance suite and the
//! seed's cases (`common`), each server database the cases they share (`server`), then what
//! only it does (`sqlite`, `postgres`, `mysql`).

#![allow(clippy::unwrap_used)]

#[macro_use]
mod common;
#[cfg(feature = "mysql")]
mod mysql;
mod postgres;
mod server;
mod sqlite;

fn main() -> std::process::ExitCode {
    idemkey_test_support::runner::trials::main()
}
