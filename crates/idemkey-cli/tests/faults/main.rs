//! What `idemkey serve` does when what sits under it fails: store errors at each step, dropped
//! PostgreSQL replies and lost PostgreSQL and MySQL ones, a crashed PostgreSQL or MariaDB, a
//! read-only or full SQLite disk, stale owners frozen past their lease, the crash campaign's
//! random SIGKILLs, and the power-loss campaigns' SIGKILLs each followed by a power cut of the
//! filesystem under SQLite or under a private PostgreSQL (killed whole with it).
//!
//! Tests that need PostgreSQL, MySQL, root, ext4, FUSE or PostgreSQL's or MariaDB's server
//! binaries say so (`needs = [...]`): without them they are ignored, and they fail when `CI`
//! is set.
#![allow(clippy::unwrap_used)]

mod app;
mod campaign;
mod client;
mod client_send;
mod crash;
mod disk;
mod lost_reply;
mod owner_grace;
mod pg_dropped;
mod powerloss;
mod restart;
mod sqlite;
mod stale;
mod stale_paused;
mod store;

/// The binary under test.
const IDEMKEY: &str = env!("CARGO_BIN_EXE_idemkey");

fn main() -> std::process::ExitCode {
    idemkey_test_support::runner::trials::main()
}
