//! The inbox against real parts: its decisions on SQLite and PostgreSQL (`process`), and a
//! JetStream pull consumer on the NATS server at `IDEMKEY_TEST_NATS_URL` or 127.0.0.1:4222
//! (`jetstream`), whose tests are ignored, with the reason, where none answers (and fail in
//! CI).

#![allow(clippy::unwrap_used, unreachable_pub, missing_docs)]

mod campaign;
mod common;
mod jetstream;
mod process;

fn main() -> std::process::ExitCode {
    idemkey_test_support::runner::trials::main()
}
