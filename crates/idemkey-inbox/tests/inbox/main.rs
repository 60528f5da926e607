//! The inbox against real parts: its decisions on SQLite and PostgreSQL (`process`), and a
//! JetStream pull consumer on the NATS server at `IDEMKEY_TEST_NATS_URL` or 127.0.0.1:4222
//! (`jetstream`), a RabbitMQ consumer on the server at `IDEMKEY_TEST_AMQP_URL` or
//! 127.0.0.1:5672 (`amqp`), and the example consumer's crash campaign (`campaign`); a test
//! whose server is missing is ignored, with the reason (and fails in CI).

#![allow(clippy::unwrap_used, unreachable_pub, missing_docs)]

mod amqp;
mod campaign;
mod common;
mod jetstream;
mod lease;
mod process;

fn main() -> std::process::ExitCode {
    idemkey_test_support::runner::trials::main()
}
